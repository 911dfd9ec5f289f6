//! Reading a telemetry log back, with errors that name the file, the line and what is wrong.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use unimem_core::backend::MemEvent;
use unimem_core::trace::Decompressed;
use unimem_core::RegionId;

use crate::log::{OLDEST_READABLE_VERSION, SCHEMA, SCHEMA_VERSION};

/// A log that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {reason}")]
pub struct LogError {
    /// The file.
    pub file: String,
    /// 1-based line (0: the file as a whole).
    pub line: u64,
    /// What is wrong and what is allowed.
    pub reason: String,
}

/// A region as the log names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    /// Name (the tensor's or trace's name, or `regionN`).
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Whether the log saw it freed.
    pub freed: bool,
    /// The address of its first byte (schema version 3 on).
    pub address: Option<u64>,
}

/// A whole log in memory.
#[derive(Debug, Clone, Default)]
pub struct Log {
    /// What produced the events (the header's `source`).
    pub source: String,
    /// Regions by id, freed ones included (attribution after a free).
    pub regions: BTreeMap<RegionId, RegionInfo>,
    /// The events, in log order.
    pub events: Vec<MemEvent>,
}

/// Record kinds of the schema, for error messages.
const KINDS: &str =
    "region, freed, fault, migration, populate, drop, released, relocated, thrashing, throttling, remote_map, kernel, \
     hint, forecast";

impl Log {
    /// Reads a log file, plain or gzip-compressed (as `gzip` leaves a kept log).
    pub fn read(path: &Path) -> Result<Self, LogError> {
        let file = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|e| LogError {
            file: file.clone(),
            line: 0,
            reason: e.to_string(),
        })?;
        Self::parse(f, &file)
    }

    /// Reads a log from `input`, plain or gzip-compressed (told by its first bytes); `origin`
    /// names it in errors.
    pub fn parse(input: impl Read, origin: &str) -> Result<Self, LogError> {
        let err = |line: u64, reason: String| LogError { file: origin.to_string(), line, reason };
        let input = Decompressed::new(BufReader::new(input)).map_err(|e| err(0, e.to_string()))?;
        let mut lines = input.lines();
        let header = match lines.next() {
            Some(Ok(h)) => h,
            Some(Err(e)) => return Err(err(1, e.to_string())),
            None => return Err(err(0, "empty file: expected a telemetry log header".into())),
        };
        let h: serde_json::Value =
            serde_json::from_str(&header).map_err(|e| err(1, format!("header is not JSON: {e}")))?;
        if h["schema"] != SCHEMA {
            return Err(err(1, format!("schema {} is not `{SCHEMA}`", h["schema"])));
        }
        if !h["version"].as_u64().is_some_and(|v| (OLDEST_READABLE_VERSION..=SCHEMA_VERSION).contains(&v)) {
            return Err(err(
                1,
                format!(
                    "version {} is not supported; this unimem reads versions {OLDEST_READABLE_VERSION} to {SCHEMA_VERSION}",
                    h["version"]
                ),
            ));
        }
        let mut log = Log { source: h["source"].as_str().unwrap_or("").to_string(), ..Log::default() };
        for (i, line) in lines.enumerate() {
            let n = i as u64 + 2;
            let line = line.map_err(|e| err(n, e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(&line)
                .map_err(|e| err(n, format!("not a JSON record (truncated?): {e}")))?;
            let region = || -> Result<RegionId, LogError> {
                v["region"]
                    .as_u64()
                    .map(RegionId)
                    .ok_or_else(|| err(n, "missing or non-integer `region`".into()))
            };
            match v["kind"].as_str() {
                Some("region") => {
                    let id = region()?;
                    let bytes =
                        v["bytes"].as_u64().ok_or_else(|| err(n, "missing or non-integer `bytes`".into()))?;
                    let name = v["name"].as_str().unwrap_or("").to_string();
                    let address = v["address"].as_u64();
                    log.regions.insert(id, RegionInfo { name, bytes, freed: false, address });
                }
                Some("freed") => {
                    let id = region()?;
                    if let Some(r) = log.regions.get_mut(&id) {
                        r.freed = true;
                    }
                }
                Some(
                    "fault" | "migration" | "populate" | "drop" | "released" | "relocated" | "thrashing"
                    | "throttling" | "remote_map" | "kernel" | "hint" | "forecast",
                ) => {
                    let e: MemEvent = serde_json::from_value(v).map_err(|e| err(n, e.to_string()))?;
                    log.events.push(e);
                }
                Some(other) => return Err(err(n, format!("unknown event kind `{other}`; allowed: {KINDS}"))),
                None => return Err(err(n, format!("record has no `kind`; allowed: {KINDS}"))),
            }
        }
        Ok(log)
    }

    /// The name of a region (`regionN` if the log never named it).
    pub fn name_of(&self, id: RegionId) -> String {
        self.regions.get(&id).map(|r| r.name.clone()).unwrap_or_else(|| format!("region{}", id.0))
    }
}
