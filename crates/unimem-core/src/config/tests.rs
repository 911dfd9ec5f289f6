use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn file(text: &str) -> tempfile_lite::TempFile {
    tempfile_lite::TempFile::new("toml", text)
}

/// A minimal temporary file helper, so the tests need no extra crate.
mod tempfile_lite {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    pub struct TempFile(PathBuf);
    static N: AtomicU64 = AtomicU64::new(0);

    impl TempFile {
        pub fn new(ext: &str, text: &str) -> Self {
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("unimem-cfg-{}-{n}.{ext}", std::process::id()));
            std::fs::write(&p, text).unwrap();
            TempFile(p)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[test]
fn defaults_load_and_show_sources() {
    let loaded = Config::load(None, env(&[])).unwrap();
    assert_eq!(loaded.config, Config::default());
    let shown = loaded.show();
    assert!(shown.contains("budget = \"100%\""), "{shown}");
    assert!(shown.contains("# default"));
}

#[test]
fn file_then_env_layers_with_provenance() {
    let f = file("budget = \"8GiB\"\n[replay]\noracle_lookahead = 100\n");
    let loaded =
        Config::load(Some(f.path()), env(&[("UNIMEM_REPLAY_ORACLE_LOOKAHEAD", "7"), ("HOME", "/x")]))
            .unwrap();
    assert_eq!(loaded.config.budget, Budget::Bytes(8 << 30));
    assert_eq!(loaded.config.replay.oracle_lookahead, 7, "env beats file");
    assert_eq!(loaded.sources["budget"], Source::File(f.path().to_path_buf()));
    assert_eq!(
        loaded.sources["replay.oracle_lookahead"],
        Source::Env("UNIMEM_REPLAY_ORACLE_LOOKAHEAD".into())
    );
    assert!(loaded.show().contains("env UNIMEM_REPLAY_ORACLE_LOOKAHEAD"));
}

#[test]
fn telemetry_keys_default_and_layer() {
    let d = Config::default().telemetry;
    assert!(d.cupti && !d.gpu_fault_records, "CUPTI on, GPU fault records off by default");
    let f = file("[telemetry]\ngpu_fault_records = true\n");
    let loaded = Config::load(Some(f.path()), env(&[("UNIMEM_TELEMETRY_CUPTI", "false")])).unwrap();
    assert!(!loaded.config.telemetry.cupti && loaded.config.telemetry.gpu_fault_records);
    assert_eq!(loaded.sources["telemetry.cupti"], Source::Env("UNIMEM_TELEMETRY_CUPTI".into()));
}

#[test]
fn config_env_var_names_the_file() {
    let f = file("budget = \"50%\"\n");
    let loaded = Config::load(None, env(&[("UNIMEM_CONFIG", f.path().to_str().unwrap())])).unwrap();
    assert_eq!(loaded.config.budget, Budget::Percent(50.0));
}

#[test]
fn env_list_values_are_comma_separated() {
    let loaded = Config::load(None, env(&[("UNIMEM_REPLAY_POLICIES", "oracle")])).unwrap();
    assert_eq!(loaded.config.replay.policies, vec![PolicyName::Oracle]);
}

fn err(file_text: Option<&str>, vars: &[(&str, &str)]) -> String {
    let f = file_text.map(file);
    Config::load(f.as_ref().map(|f| f.path()), env(vars)).unwrap_err().to_string()
}

#[test]
fn unknown_key_names_key_allowed_keys_and_file() {
    let e = err(Some("[replay]\npolcies = [\"none\"]\n"), &[]);
    assert!(
        e.contains("replay.polcies") && e.contains("allowed in [replay]") && e.contains("policies"),
        "{e}"
    );
    assert!(e.contains(".toml"), "names the file: {e}");
    let e = err(Some("colour = 1\n"), &[]);
    assert!(e.contains("colour") && e.contains("at the top level") && e.contains("budget"), "{e}");
}

#[test]
fn bad_values_name_key_allowed_values_and_source() {
    let e = err(Some("backend = \"tpu\"\n"), &[]);
    assert!(e.contains("backend") && e.contains("auto") && e.contains("cuda") && e.contains("file"), "{e}");
    let e = err(None, &[("UNIMEM_REPLAY_POLICIES", "none,fastest")]);
    assert!(
        e.contains("replay.policies") && e.contains("oracle") && e.contains("UNIMEM_REPLAY_POLICIES"),
        "{e}"
    );
    let e = err(None, &[("UNIMEM_REPLAY_ORACLE_LOOKAHEAD", "many")]);
    assert!(e.contains("not an integer"), "{e}");
    let e = err(Some("replay = 3\n"), &[]);
    assert!(e.contains("must be a table"), "{e}");
    let e = err(Some("[log]\nlevel = \"loud\"\n"), &[]);
    assert!(e.contains("log.level") && e.contains("debug"), "{e}");
    let e = err(Some("budget = = 3\n"), &[]);
    assert!(e.contains("line 1"), "TOML syntax errors carry the line: {e}");
}

#[test]
fn oversubscription_is_denied_unless_allowed() {
    assert_eq!(Config::load(None, env(&[])).unwrap().config.oversubscribe, Oversubscribe::Deny);
    let f = file("oversubscribe = \"allow\"\n");
    assert_eq!(Config::load(Some(f.path()), env(&[])).unwrap().config.oversubscribe, Oversubscribe::Allow);
    let e = err(Some("oversubscribe = \"sometimes\"\n"), &[]);
    assert!(e.contains("oversubscribe") && e.contains("deny") && e.contains("allow"), "{e}");
}

#[test]
fn policy_time_is_free_unless_measured_asked_for() {
    assert_eq!(Config::load(None, env(&[])).unwrap().config.sim.policy_time, PolicyTime::Free);
    let f = file("[sim]\npolicy_time = \"measured\"\n");
    assert_eq!(Config::load(Some(f.path()), env(&[])).unwrap().config.sim.policy_time, PolicyTime::Measured);
    let loaded = Config::load(None, env(&[("UNIMEM_SIM_POLICY_TIME", "measured")])).unwrap();
    assert_eq!(loaded.config.sim.policy_time, PolicyTime::Measured);
    let e = err(Some("[sim]\npolicy_time = \"sometimes\"\n"), &[]);
    assert!(e.contains("sim.policy_time") && e.contains("free") && e.contains("measured"), "{e}");
}

#[test]
fn budget_zero_or_over_100_percent_is_rejected() {
    let e = err(Some("budget = 0\n"), &[]);
    assert!(e.contains("budget") && e.contains("0 bytes"), "{e}");
    let e = err(None, &[("UNIMEM_BUDGET", "120%")]);
    assert!(e.contains("budget") && e.contains("(0, 100]") && e.contains("UNIMEM_BUDGET"), "{e}");
    let e = err(None, &[("UNIMEM_BUDGET", "0%")]);
    assert!(e.contains("(0, 100]"), "{e}");
}

#[test]
fn unknown_env_variable_lists_allowed_names() {
    let e = err(None, &[("UNIMEM_BUDGIT", "5%")]);
    assert!(e.contains("UNIMEM_BUDGIT") && e.contains("UNIMEM_BUDGET"), "{e}");
}

#[test]
fn missing_file_is_a_clear_error() {
    let e = Config::load(Some(Path::new("/nonexistent/unimem.toml")), env(&[])).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/unimem.toml"), "{e}");
}

#[test]
fn advisor_knobs_load_validate_and_show() {
    let f = file("[advisor]\nlookahead_kernels = 128\nmin_prefetch = \"1MiB\"\nplacements = [\"discard\"]\n");
    let loaded = Config::load(Some(f.path()), env(&[("UNIMEM_ADVISOR_MIN_CONFIDENCE", "0.8")])).unwrap();
    let a = &loaded.config.advisor;
    assert_eq!(a.lookahead_kernels, 128);
    assert_eq!(a.min_prefetch, MinPrefetch::Bytes(1 << 20));
    assert_eq!(a.min_confidence, 0.8);
    assert!(a.allows(PlacementName::Discard) && !a.allows(PlacementName::Remote));
    let shown = loaded.show();
    assert!(
        shown.contains("advisor.min_confidence = 0.8") && shown.contains("env UNIMEM_ADVISOR_MIN_CONFIDENCE")
    );
    assert!(shown.contains("advisor.remote_window = 64") && shown.contains("# default"), "{shown}");
    let defaults = Config::default().advisor;
    assert_eq!(defaults.min_prefetch, MinPrefetch::Auto);
    assert_eq!(defaults.min_prefetch.resolve(300_000), 300_000);
}

#[test]
fn bad_advisor_values_are_clear_errors() {
    let e = err(None, &[("UNIMEM_ADVISOR_MIN_CONFIDENCE", "1.5")]);
    assert!(e.contains("advisor.min_confidence") && e.contains("0 to 1"), "{e}");
    let e = err(Some("[advisor]\nlookahead_kernels = 0\n"), &[]);
    assert!(e.contains("advisor.lookahead_kernels") && e.contains("1 to 4096"), "{e}");
    let e = err(None, &[("UNIMEM_ADVISOR_PLACEMENTS", "discard,teleport")]);
    assert!(e.contains("advisor.placements") && e.contains("duplicate") && e.contains("remote"), "{e}");
    let e = err(Some("[advisor]\nmin_prefetch = \"lots\"\n"), &[]);
    assert!(e.contains("advisor.min_prefetch") && e.contains("auto"), "{e}");
}

#[test]
fn staging_takes_bytes_or_a_percent_of_the_budget_and_names_itself_when_wrong() {
    assert_eq!(Config::default().staging, Staging::Auto);
    let f = file("staging = \"4GiB\"\n");
    let loaded = Config::load(Some(f.path()), env(&[])).unwrap();
    assert_eq!(loaded.config.staging, Staging::Bytes(4 << 30));
    let loaded = Config::load(None, env(&[("UNIMEM_STAGING", "0")])).unwrap();
    assert_eq!(loaded.config.staging.resolve(1 << 30, None), 0, "0 turns staging off");
    assert!(loaded.show().contains("staging = \"0\""), "{}", loaded.show());
    let loaded = Config::load(None, env(&[("UNIMEM_STAGING", "150%")])).unwrap();
    assert_eq!(loaded.config.staging.resolve(2 << 30, None), 3 << 30);
    let e = Config::load(None, env(&[("UNIMEM_STAGING", "5000%")])).unwrap_err().to_string();
    assert!(e.contains("staging") && e.contains("[0, 1000]") && e.contains("UNIMEM_STAGING"), "{e}");
    let f = file("staging = \"plenty\"\n");
    let e = Config::load(Some(f.path()), env(&[])).unwrap_err().to_string();
    assert!(e.contains("staging") && e.contains("percent"), "{e}");
}

#[test]
fn a_value_written_as_a_table_names_its_key() {
    for (text, key) in [
        ("budget = { value = \"50%\" }\n", "budget"),
        ("[budget]\nvalue = \"50%\"\n", "budget"),
        ("[replay]\nrelocate = {}\n", "replay.relocate"),
    ] {
        let e = err(Some(text), &[]);
        assert!(e.contains(&format!("config: {key}:")) && e.contains("not a section"), "{text}: {e}");
        assert!(!e.contains("<config>") && !e.contains("merged layers"), "{text}: {e}");
    }
}

#[test]
fn every_numeric_key_has_a_range() {
    for (var, value, allowed) in [
        ("UNIMEM_REPLAY_ORACLE_LOOKAHEAD", "9223372036854775807", "1 to 1048576"),
        ("UNIMEM_REPLAY_ORACLE_LOOKAHEAD", "0", "1 to 1048576"),
        ("UNIMEM_ADVISOR_LOOKAHEAD_KERNELS", "5000", "1 to 4096"),
        ("UNIMEM_ADVISOR_REMOTE_WINDOW", "5000", "0 to 4096"),
        ("UNIMEM_ADVISOR_MIN_CONFIDENCE", "NaN", "0 to 1"),
        ("UNIMEM_ADVISOR_MIN_PREFETCH", "1000TiB", "2^48"),
        ("UNIMEM_STAGING", "1000TiB", "2^48"),
    ] {
        let e = err(None, &[(var, value)]);
        assert!(e.contains(allowed) && e.contains(var), "{var}={value}: {e}");
    }
    let e = err(None, &[("UNIMEM_REPLAY_ORACLE_LOOKAHEAD", "-3")]);
    assert!(e.contains("replay.oracle_lookahead"), "{e}");
    assert_eq!(
        Config::load(None, env(&[("UNIMEM_REPLAY_ORACLE_LOOKAHEAD", "1048576")]))
            .unwrap()
            .config
            .replay
            .oracle_lookahead,
        MAX_ORACLE_LOOKAHEAD
    );
}

#[test]
fn every_problem_of_a_file_is_reported() {
    let text = "colour = 1\nbudget = \"500%\"\n[replay]\noracle_lookahead = 0\nrelocate = {}\n[advisor]\nmin_confidence = 7\n[log]\nlevel = \"loud\"\n";
    let e = err(Some(text), &[]);
    for key in [
        "colour",
        "budget",
        "replay.oracle_lookahead",
        "replay.relocate",
        "advisor.min_confidence",
        "log.level",
    ] {
        assert!(e.contains(&format!("config: {key}:")), "{key} missing from: {e}");
    }
    assert!(e.starts_with("6 problems:"), "{e}");
}

#[test]
fn a_missing_profile_is_an_error_naming_sim_profile() {
    let e = err(Some("[sim]\nprofile = \"/nonexistent/h200.toml\"\n"), &[]);
    assert!(
        e.contains("sim.profile") && e.contains("/nonexistent/h200.toml") && e.contains("not a file"),
        "{e}"
    );
}

#[test]
fn an_empty_unimem_config_is_an_error_naming_the_variable() {
    let e = err(None, &[("UNIMEM_CONFIG", "")]);
    assert!(e.contains("UNIMEM_CONFIG") && e.contains("empty"), "{e}");
}

#[test]
fn variables_other_than_unimem_ones_are_never_read() {
    // A non-UTF-8 variable of another program must not matter; `from_env` skips it by name
    // before decoding. (`load` takes decoded pairs; other names are filtered there too.)
    let loaded = Config::load(None, env(&[("FOO", "\u{fffd}"), ("PATH", "/bin")])).unwrap();
    assert_eq!(loaded.config, Config::default());
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// Values of every TOML type, at the edges of the ranges keys allow.
    fn value() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "0",
            "1",
            "-1",
            "4096",
            "9223372036854775807",
            "-9223372036854775808",
            "1.5",
            "nan",
            "inf",
            "-0.0",
            "true",
            "false",
            "\"\"",
            "\"50%\"",
            "\"0%\"",
            "\"150%\"",
            "\"8GiB\"",
            "\"18446744073709551616\"",
            "\"auto\"",
            "\"none\"",
            "\"-5GiB\"",
            "\"1e3\"",
            "[]",
            "[\"none\", \"none\"]",
            "[1, 2]",
            "{}",
            "{ value = 1 }",
            "1979-05-27",
        ])
        .prop_map(str::to_string)
    }

    fn key() -> impl Strategy<Value = String> {
        let leaves: Vec<String> = layers::flatten(&toml::Table::try_from(Config::default()).unwrap())
            .into_iter()
            .map(|(k, _)| k)
            .chain(["budget.value", "replay", "advisor", "colour", "sim.profile.x"].map(String::from))
            .collect();
        prop::sample::select(leaves)
    }

    proptest! {
        /// Any file of known and unknown keys, holding values of any type, loads or fails
        /// with errors that each name a key; never a panic.
        #[test]
        fn any_config_file_loads_or_names_its_bad_keys(
            entries in prop::collection::vec((key(), value()), 0..8),
            env_entries in prop::collection::vec((key(), value()), 0..3),
        ) {
            let text: String = entries
                .iter()
                .map(|(k, v)| format!("{k} = {v}\n"))
                .collect();
            let f = file(&text);
            let vars: Vec<(String, String)> = env_entries
                .iter()
                .map(|(k, v)| (format!("UNIMEM_{}", k.replace('.', "_").to_ascii_uppercase()), v.trim_matches('"').to_string()))
                .collect();
            match Config::load(Some(f.path()), vars) {
                Ok(loaded) => prop_assert!(loaded.config.check().is_empty()),
                Err(e) => {
                    let e = e.to_string();
                    prop_assert!(e.contains("config: ") || e.contains("TOML parse error"), "{}", e);
                    prop_assert!(!e.contains("<config>"), "{}", e);
                }
            }
        }
    }
}

/// `memory = "device"` loads; the simulator models it with the arena's costs, and a caller
/// that does not let regions move (anything but a replay) is refused with the key named.
#[test]
fn the_device_arena_is_for_replays_only() {
    let f = file("memory = \"device\"\nbackend = \"sim\"\n");
    let config = Config::load(Some(f.path()), env(&[])).unwrap().config;
    assert_eq!(config.memory, Memory::Device);
    let mut spec = crate::backends::BackendSpec::from_config(&config, 1 << 30, 1 << 30, 0).unwrap();
    assert!(spec.cost.name.contains("device arena"), "{}", spec.cost.name);
    let Err(e) = crate::backends::open(&spec) else { panic!("a device arena outside a replay opened") };
    let e = e.to_string();
    assert!(e.contains("memory") && e.contains("only a replay"), "{e}");
    spec.relocate = true;
    let backend = crate::backends::open(&spec).unwrap();
    assert_eq!(backend.info().kind, crate::seam::BackendKind::Sim);
    let bad = file("memory = \"arena\"\n");
    let e = Config::load(Some(bad.path()), env(&[])).unwrap_err().to_string();
    assert!(e.contains("memory") && e.contains("device"), "{e}");
}

/// `memory = "auto"` (the default) is the device arena for a placing policy's replay and
/// managed memory for the driver alone, for a trace of many small regions, for a replay that
/// hides accesses from the policy, for a replay whose regions may not move, and for a
/// program; a placement named is kept.
#[test]
fn auto_memory_is_the_arena_only_for_a_placing_policys_replay() {
    use crate::backends::BackendSpec;
    let mut config = Config::default();
    assert_eq!(config.memory, Memory::Auto);
    let replay = |c: &Config, p| BackendSpec::for_replay(c, p, 1 << 20, false, 1 << 30, 0, 0).unwrap().memory;
    assert_eq!(replay(&config, PolicyName::Advisor), MemoryKind::Device);
    assert_eq!(replay(&config, PolicyName::Oracle), MemoryKind::Device);
    assert_eq!(replay(&config, PolicyName::None), MemoryKind::Managed);
    // Small regions, which the arena keeps on the device, taking over a quarter of the budget.
    let crowded =
        BackendSpec::for_replay(&config, PolicyName::Advisor, 300 << 20, false, 1 << 30, 0, 0).unwrap();
    assert_eq!(crowded.memory, MemoryKind::Managed);
    // Accesses hidden from the policy are learned from faults, which only managed memory reports.
    let hidden = BackendSpec::for_replay(&config, PolicyName::Advisor, 1 << 20, true, 1 << 30, 0, 0).unwrap();
    assert_eq!(hidden.memory, MemoryKind::Managed);
    assert_eq!(BackendSpec::from_config(&config, 1 << 30, 0, 0).unwrap().memory, MemoryKind::Managed);
    config.replay.relocate = false;
    assert_eq!(replay(&config, PolicyName::Advisor), MemoryKind::Managed);
    config.replay.relocate = true;
    config.memory = Memory::Managed;
    assert_eq!(replay(&config, PolicyName::Advisor), MemoryKind::Managed);
    let spec = BackendSpec::for_replay(&config, PolicyName::Advisor, 0, false, 1 << 30, 0, 0).unwrap();
    assert!(!spec.cost.name.contains("device arena"), "{}", spec.cost.name);
}
