//! Merging config layers as TOML tables, remembering the source of every leaf value, so that an
//! error or `config show` can say which file or variable a value came from.

use std::collections::BTreeMap;
use std::path::Path;

use toml::{Table, Value};

use super::{Config, Source};
use crate::error::{Error, Result};

pub(super) struct Layered {
    defaults: Table,
    merged: Table,
    sources: BTreeMap<String, Source>,
}

/// Leaves of a table as (dotted key, value), sections flattened.
pub(super) fn flatten(table: &Table) -> Vec<(String, Value)> {
    fn walk(prefix: &str, table: &Table, out: &mut Vec<(String, Value)>) {
        for (k, v) in table {
            let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            match v {
                Value::Table(t) => walk(&key, t, out),
                leaf => out.push((key, leaf.clone())),
            }
        }
    }
    let mut out = Vec::new();
    walk("", table, &mut out);
    out
}

fn env_name(key: &str) -> String {
    format!("UNIMEM_{}", key.replace('.', "_").to_ascii_uppercase())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "true or false",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "a list",
        Value::Table(_) => "a table",
    }
}

fn set_leaf(table: &mut Table, key: &str, value: Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("keys are non-empty");
    let mut t = table;
    for p in parts {
        t = match t.entry(p.to_string()).or_insert_with(|| Value::Table(Table::new())) {
            Value::Table(inner) => inner,
            _ => unreachable!("sections of the defaults are tables"),
        };
    }
    t.insert(last.to_string(), value);
}

impl Layered {
    pub(super) fn defaults(config: &Config) -> Self {
        let defaults = Table::try_from(config).expect("Config serialises to a table");
        Self { merged: defaults.clone(), defaults, sources: BTreeMap::new() }
    }

    pub(super) fn source_of(&self, key: &str) -> Source {
        self.sources.get(key).cloned().unwrap_or(Source::Default)
    }

    pub(super) fn into_sources(self) -> BTreeMap<String, Source> {
        self.sources
    }

    /// Merges a TOML file. A file that is not TOML is an error; the problems of one that is
    /// (unknown keys and sections, each naming the allowed keys; a section written as a value
    /// or a value as a section) come back all together, and the keys they concern keep their
    /// defaults.
    pub(super) fn apply_file(&mut self, path: &Path, text: &str) -> Result<Vec<Error>> {
        let table: Table = text
            .parse()
            .map_err(|e: toml::de::Error| Error::File { path: path.to_path_buf(), reason: e.to_string() })?;
        let source = Source::File(path.to_path_buf());
        let (mut leaves, mut problems) = (Vec::new(), Vec::new());
        check_known("", &table, &self.defaults, &source, &mut leaves, &mut problems);
        for (key, value) in leaves {
            set_leaf(&mut self.merged, &key, value);
            self.sources.insert(key, source.clone());
        }
        Ok(problems)
    }

    /// Applies one `UNIMEM_*` variable, parsed according to the type of its default.
    pub(super) fn apply_env(&mut self, var: &str, text: &str) -> Result<()> {
        let leaves = flatten(&self.defaults);
        let Some((key, default)) = leaves.iter().find(|(k, _)| env_name(k) == var) else {
            let mut allowed: Vec<String> = leaves.iter().map(|(k, _)| env_name(k)).collect();
            allowed.extend(super::OTHER_VARIABLES.iter().map(|v| v.to_string()));
            return Err(Error::config(
                var,
                format!("unknown variable; allowed: {}", allowed.join(", ")),
                format!("env {var}"),
            ));
        };
        let source = Source::Env(var.to_string());
        let value = match default {
            Value::Integer(_) => text.trim().parse::<i64>().map(Value::Integer).map_err(|_| {
                Error::config(key.as_str(), format!("`{text}` is not an integer"), source.to_string())
            })?,
            Value::Boolean(_) => text.trim().parse::<bool>().map(Value::Boolean).map_err(|_| {
                Error::config(key.as_str(), format!("`{text}` is not true or false"), source.to_string())
            })?,
            Value::Float(_) => text.trim().parse::<f64>().map(Value::Float).map_err(|_| {
                Error::config(key.as_str(), format!("`{text}` is not a number"), source.to_string())
            })?,
            Value::Array(_) => Value::Array(
                text.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| Value::String(s.into()))
                    .collect(),
            ),
            _ => Value::String(text.to_string()),
        };
        set_leaf(&mut self.merged, key, value);
        self.sources.insert(key.clone(), source);
        Ok(())
    }

    /// Deserialises the merged table. A value that does not fit is reported against its key and
    /// source: each overridden leaf is tried alone on top of the defaults to find every culprit,
    /// which then keeps its default so that the rest can still be checked.
    pub(super) fn build(&mut self) -> (Config, Vec<Error>) {
        let mut problems = Vec::new();
        if let Err(whole) = self.merged.clone().try_into::<Config>() {
            for (key, value) in flatten(&self.merged) {
                if !self.sources.contains_key(&key) {
                    continue;
                }
                let mut alone = self.defaults.clone();
                set_leaf(&mut alone, &key, value);
                if let Err(e) = alone.try_into::<Config>() {
                    problems.push(Error::config(
                        key.as_str(),
                        e.message().trim(),
                        self.source_of(&key).to_string(),
                    ));
                    let default =
                        flatten(&self.defaults).into_iter().find(|(k, _)| *k == key).map(|(_, v)| v);
                    if let Some(default) = default {
                        set_leaf(&mut self.merged, &key, default);
                    }
                }
            }
            if problems.is_empty() {
                problems.push(Error::config("<config>", whole.message().trim(), "merged layers"));
            }
        }
        let config = self.merged.clone().try_into::<Config>().unwrap_or_default();
        (config, problems)
    }
}

/// Walks `table` against `defaults`, collecting leaves into `out` and every unknown key, section
/// given as a plain value, or value given as a section into `problems`.
fn check_known(
    prefix: &str,
    table: &Table,
    defaults: &Table,
    source: &Source,
    out: &mut Vec<(String, Value)>,
    problems: &mut Vec<Error>,
) {
    for (k, v) in table {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        let Some(default) = defaults.get(k) else {
            let allowed: Vec<&str> = defaults.keys().map(String::as_str).collect();
            let section =
                if prefix.is_empty() { "at the top level".to_string() } else { format!("in [{prefix}]") };
            problems.push(Error::config(
                key,
                format!("unknown key; allowed {section}: {}", allowed.join(", ")),
                source.to_string(),
            ));
            continue;
        };
        match (default, v) {
            (Value::Table(d), Value::Table(t)) => check_known(&key, t, d, source, out, problems),
            (Value::Table(_), other) => problems.push(Error::config(
                key,
                format!("is a section and must be a table, not {}", type_name(other)),
                source.to_string(),
            )),
            (default, Value::Table(_)) => problems.push(Error::config(
                key.as_str(),
                format!("is a value, not a section or table; write it as `{k} = {default}` (its default)"),
                source.to_string(),
            )),
            (_, leaf) => out.push((key, leaf.clone())),
        }
    }
}
