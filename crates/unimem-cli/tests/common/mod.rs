//! Helpers of the CLI's end-to-end tests.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `unimem` binary: cargo's, or the one packed beside this test (a GPU machine without
/// cargo runs the tests from `scripts/gpu-pack.sh`'s `.gpu/bin`, which holds both).
pub fn exe() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_unimem"));
    if built.exists() {
        return built;
    }
    std::env::current_exe().expect("the test's path").parent().expect("a folder").join("unimem")
}

pub fn unimem(args: &[&str]) -> Output {
    unimem_env(args, &[])
}

pub fn unimem_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe());
    cmd.args(args).env_remove("UNIMEM_CONFIG");
    // Replays run on the simulator unless a test asks otherwise: the default backend, `auto`,
    // is CUDA on a GPU machine, and these tests check the simulator's figures.
    let replays = matches!(args.first(), Some(&"replay" | &"demo"));
    if replays && !args.contains(&"--backend") && !env.iter().any(|(k, _)| *k == "UNIMEM_BACKEND") {
        cmd.env("UNIMEM_BACKEND", "sim");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh temporary directory for one test, removed with everything in it when the value is
/// dropped (at the end of the test, passed or failed). It derefs to its path.
pub struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

pub fn tmp(name: &str) -> Scratch {
    Scratch(
        tempfile::Builder::new()
            .prefix(&format!("unimem-cli-{name}-"))
            .tempdir()
            .expect("a temporary folder"),
    )
}

pub fn write(path: &Path, bytes: &[u8]) {
    std::fs::File::create(path).unwrap().write_all(bytes).unwrap();
}

/// Writes `lines`, each ended by a newline (a hand-written JSON-lines file).
pub fn write_lines(path: &Path, lines: &[&str]) {
    write(path, lines.iter().map(|l| format!("{l}\n")).collect::<String>().as_bytes());
}

/// A file of the repository, by its path from the root: where cargo built the test, or under
/// the working directory (a GPU machine runs the packed tests from a copy of the repository).
pub fn repo(rel: &str) -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel);
    if built.exists() {
        built
    } else {
        PathBuf::from(rel)
    }
}

pub fn sample(name: &str) -> String {
    repo(&format!("traces/{name}")).display().to_string()
}

/// Fails with a clear message: exit code 1, an `error: ` line (after any warnings) with the
/// expected words, no panic.
pub fn assert_clear_error(o: &Output, words: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(err.lines().any(|l| l.starts_with("error: ")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for w in words {
        assert!(err.contains(w), "missing `{w}` in: {err}");
    }
}
