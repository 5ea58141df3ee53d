//! Stand-in CUDA driver libraries for fault injection.
#![allow(dead_code)] // used by the probe and capture tests
//!
//! Each C file under `tests/stub/` is compiled once per test binary run into its own directory as
//! `libcuda.so` and `libcuda.so.1`. A child process started with that directory first in
//! `LD_LIBRARY_PATH` loads the stand-in instead of a real driver. They test how this crate
//! handles drivers; they prove nothing about real CUDA.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Builds `tests/stub/<name>.c` (once per process) and returns the directory that holds
/// `libcuda.so` and `libcuda.so.1` built from it.
pub fn driver_dir(name: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(dir) = built.get(name) {
        return dir.clone();
    }
    let src = crate::util::manifest_dir()
        .join("tests/stub")
        .join(format!("{name}.c"));
    // Per process: nextest runs tests of one binary in parallel processes.
    let dir = crate::util::target_tmpdir()
        .join("stub-drivers")
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libcuda.so.1");
    compile(&src, &lib);
    let link = dir.join("libcuda.so");
    let _ = std::fs::remove_file(&link);
    std::fs::copy(&lib, &link).unwrap();
    built.insert(name.to_string(), dir.clone());
    dir
}

/// Compiles the C file `src` into the shared library `lib` with `cc`, or with the compiler (and
/// arguments) in `STUB_CC`: a cross compiler when the tests run under an emulator for another
/// architecture. Not `CC`, which would also reach the build scripts of a cross build.
pub fn compile(src: &Path, lib: &Path) {
    let cc = std::env::var("STUB_CC").unwrap_or_default();
    let mut cc = cc.split_whitespace();
    let program = cc.next().unwrap_or("cc");
    let out = Command::new(program)
        .args(cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(lib)
        .arg(src)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running {program} to build {}: {e} (install gcc)",
                src.display()
            )
        });
    assert!(
        out.status.success(),
        "building {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
