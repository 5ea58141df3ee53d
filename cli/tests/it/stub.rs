//! Stand-in driver libraries for fault injection.
#![allow(dead_code)] // used by the probe, capture and live tests
//!
//! Each C file under `cli/tests/stub/` is compiled once per test binary run into its own directory,
//! as `libcuda.so` and `libcuda.so.1` ([`driver_dir`]) or under other names ([`library_dir`],
//! e.g. NVML's). A child process started with that directory first in `LD_LIBRARY_PATH` loads
//! the stand-in instead of a real driver. They test how this crate handles drivers; they prove
//! nothing about the real ones.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Builds `cli/tests/stub/<name>.c` (once per process) and returns the directory that holds
/// `libcuda.so` and `libcuda.so.1` built from it.
pub fn driver_dir(name: &str) -> PathBuf {
    library_dir(name, &["libcuda.so.1", "libcuda.so"])
}

/// Builds `cli/tests/stub/<name>.c` (once per process) and returns the directory that holds it
/// under each of `libraries`' names, e.g. `&["libnvidia-ml.so.1", "libnvidia-ml.so"]`.
pub fn library_dir(name: &str, libraries: &[&str]) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let key = format!("{name} as {}", libraries.join(" "));
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(dir) = built.get(&key) {
        return dir.clone();
    }
    let (first, others) = libraries
        .split_first()
        .expect("a stand-in library needs a name");
    let src = crate::util::manifest_dir()
        .join("tests/stub")
        .join(format!("{name}.c"));
    // Per process: nextest runs tests of one binary in parallel processes. Per library name
    // too, should one source be built under two names.
    let dir = crate::util::target_tmpdir()
        .join("stub-drivers")
        .join(format!(
            "{name}-{}-{}",
            first.split('.').next().unwrap_or(first),
            std::process::id()
        ));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join(first);
    compile(&src, &lib);
    for other in others {
        let copy = dir.join(other);
        let _ = std::fs::remove_file(&copy);
        std::fs::copy(&lib, &copy).unwrap();
    }
    built.insert(key, dir.clone());
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
        // `dlopen` for glibc before 2.34, where it is not in the C library.
        .arg("-ldl")
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
