//! The Python package's tests that need neither PyTorch nor a GPU (`python/tests`), run with
//! the library this build made: `python3` is part of the development environment.

use std::path::PathBuf;
use std::process::Command;

/// The cdylib cargo built for this test: beside it in `target/<profile>/deps/` (where `cargo
/// test` leaves it), or in `target/<profile>/` (where `cargo build` puts it).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let candidates = [deps.join("libunimem_torch.so"), deps.parent().unwrap().join("libunimem_torch.so")];
    let found = candidates.iter().find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("libunimem_torch.so was not built: looked for {candidates:?}")).clone()
}

#[test]
fn the_python_package_passes_its_tests_without_pytorch() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "python/tests", "-v"])
        .current_dir(&root)
        .env("UNIMEM_TORCH_LIB", library())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs (it is part of the development environment)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Ran ") && !text.contains("Ran 0 tests"), "{text}");
}
