//! The Python package's tests that need neither PyTorch nor a GPU (`python/tests`), run with
//! the library this build made: `python3` is part of the development environment.

use std::path::PathBuf;
use std::process::Command;

/// The cdylib cargo built beside this test (target/<profile>/libunimem_torch.so).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let lib = profile_dir.join("libunimem_torch.so");
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
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
