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
    assert_eq!(Config::default().staging, Staging::Percent(100.0));
    let f = file("staging = \"4GiB\"\n");
    let loaded = Config::load(Some(f.path()), env(&[])).unwrap();
    assert_eq!(loaded.config.staging, Staging::Bytes(4 << 30));
    let loaded = Config::load(None, env(&[("UNIMEM_STAGING", "0")])).unwrap();
    assert_eq!(loaded.config.staging.resolve(1 << 30), 0, "0 turns staging off");
    assert!(loaded.show().contains("staging = \"0\""), "{}", loaded.show());
    let loaded = Config::load(None, env(&[("UNIMEM_STAGING", "150%")])).unwrap();
    assert_eq!(loaded.config.staging.resolve(2 << 30), 3 << 30);
    let e = Config::load(None, env(&[("UNIMEM_STAGING", "5000%")])).unwrap_err().to_string();
    assert!(e.contains("staging") && e.contains("[0, 1000]") && e.contains("UNIMEM_STAGING"), "{e}");
    let f = file("staging = \"plenty\"\n");
    let e = Config::load(Some(f.path()), env(&[])).unwrap_err().to_string();
    assert!(e.contains("staging") && e.contains("percent"), "{e}");
}
