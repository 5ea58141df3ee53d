//! A library that an installed driver manifest names is a GPU driver, whatever its file name:
//! a Vulkan ICD manifest named by `VK_ADD_DRIVER_FILES` makes `libvk_elsewhere.so` (the
//! stand-in Vulkan driver under a name on no list) a driver that `watch`, the in-process look
//! and `report` name when a process loads it without a permit.
//!
//! The loading process is this test binary itself, started again for
//! [`child_loads_libraries`] alone: it loads the libraries [`LOAD_VAR`] names and exits.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{clear_permit_env, cli, tempdir};

/// The libraries the child loads, in order (`:`-separated paths).
pub(crate) const LOAD_VAR: &str = "GTP_TEST_CHILD_LOADS";

/// Where set, [`child_loads_libraries`] unloads each library again once loaded, as wgpu
/// unloads its Vulkan drivers with its instance.
pub(crate) const UNLOAD_VAR: &str = "GTP_TEST_CHILD_UNLOADS";

/// Not a test of its own: the child that [`child_args`] start. Loads each library of
/// [`LOAD_VAR`] with `dlopen` and keeps it mapped (unloads it again where [`UNLOAD_VAR`] is
/// set).
#[test]
fn child_loads_libraries() {
    let Some(list) = std::env::var_os(LOAD_VAR) else {
        return;
    };
    let unload = std::env::var_os(UNLOAD_VAR).is_some();
    for path in std::env::split_paths(&list) {
        let c = std::ffi::CString::new(path.to_string_lossy().into_owned()).unwrap();
        // SAFETY: a NUL-terminated path; the library stays loaded for the rest of the process
        // unless it is closed below, after which nothing of it is used.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        assert!(!handle.is_null(), "cannot load {}", path.display());
        if unload {
            // SAFETY: the handle `dlopen` returned, closed once.
            assert_eq!(
                unsafe { libc::dlclose(handle) },
                0,
                "cannot unload {}",
                path.display()
            );
        }
    }
}

/// The arguments that run this test binary for [`child_loads_libraries`] alone.
pub(crate) fn child_args() -> Vec<std::ffi::OsString> {
    let mut args = vec![std::env::current_exe().unwrap().into_os_string()];
    args.extend(
        ["icd::child_loads_libraries", "--exact", "--test-threads=1"].map(std::ffi::OsString::from),
    );
    args
}

/// `gpu-test-permit watch` of the child with slot directory `slots`, loading `libraries`.
pub(crate) fn watched_child(slots: &Path, libraries: &[&Path]) -> Command {
    let mut c = cli(slots, 2);
    c.args(["watch", "--"]).args(child_args());
    c.env(LOAD_VAR, std::env::join_paths(libraries).unwrap());
    c
}

/// The stand-in Vulkan driver built as `<dir>/lib/libvk_elsewhere.so`, and a Vulkan ICD
/// manifest for it in `dir` that names it relative to itself.
fn driver_elsewhere(dir: &Path) -> (PathBuf, PathBuf) {
    let lib = dir.join("lib/libvk_elsewhere.so");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    let src = crate::util::manifest_dir().join("tests/stub/vulkan_icd.c");
    crate::stub::compile(&src, &lib);
    let manifest = dir.join("elsewhere_icd.json");
    let json = serde_json::json!({
        "file_format_version": "1.0.0",
        "ICD": { "library_path": "./lib/libvk_elsewhere.so", "api_version": "1.3.0" },
    });
    std::fs::write(&manifest, json.to_string()).unwrap();
    (lib, manifest)
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_library_a_vulkan_manifest_names_is_a_driver_under_watch() {
    let dir = tempdir();
    let slots = dir.path().join("slots");
    let (lib, manifest) = driver_elsewhere(dir.path());
    let watch = |manifest: Option<&Path>, run: Option<&str>| {
        let mut c = watched_child(&slots, &[&lib]);
        c.env_remove("VK_ADD_DRIVER_FILES")
            .env_remove("VK_DRIVER_FILES")
            .env_remove("VK_ICD_FILENAMES");
        if let Some(m) = manifest {
            c.env("VK_ADD_DRIVER_FILES", m);
        }
        if let Some(run) = run {
            c.env("NEXTEST_RUN_ID", run)
                .env("NEXTEST_BINARY_ID", "suite")
                .env("NEXTEST_TEST_NAME", "loads_elsewhere");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        out
    };
    let said = "loaded a GPU driver while it held no permit";

    // Named by no list and by no manifest: not a driver.
    let out = watch(None, None);
    assert!(!text(&out).contains(said), "{}", text(&out));

    // Named by a manifest the Vulkan loader reads: a driver.
    let out = watch(Some(&manifest), None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(said) && l.ends_with(": libvk_elsewhere.so")),
        "{}",
        text(&out)
    );

    // Under nextest the run's records have it, and `report` names it.
    watch(Some(&manifest), Some("icd-watched"));
    let out = cli(&slots, 2)
        .args(["report", "--dir"])
        .arg(&slots)
        .args(["--run-id", "icd-watched", "--fail-on-unpermitted"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("suite loads_elsewhere: loaded libvk_elsewhere.so")),
        "{}",
        text(&out)
    );
}

/// Unwatched, a test process under nextest that took no permit looks at what it has mapped as
/// it exits; with a Vulkan loader mapped it reads the manifests too.
#[test]
fn a_library_a_vulkan_manifest_names_is_a_driver_in_process() {
    let dir = tempdir();
    let slots = dir.path().join("slots");
    let (lib, manifest) = driver_elsewhere(dir.path());
    // The loader by name, as a program finds it; loaded first, as the loader loads a driver.
    let loader = Path::new("libvulkan.so.1");
    let args = child_args();
    let mut c = Command::new(&args[0]);
    clear_permit_env(&mut c);
    c.args(&args[1..])
        .env("GPU_TEST_PERMIT_DIR", &slots)
        .env(LOAD_VAR, std::env::join_paths([loader, &lib]).unwrap())
        .env("VK_ADD_DRIVER_FILES", &manifest)
        .env("NEXTEST_RUN_ID", "icd-mapped")
        .env("NEXTEST_BINARY_ID", "suite")
        .env("NEXTEST_TEST_NAME", "maps_elsewhere");
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = cli(&slots, 2)
        .args(["report", "--dir"])
        .arg(&slots)
        .args(["--run-id", "icd-mapped", "--fail-on-unpermitted"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("suite maps_elsewhere: loaded libvk_elsewhere.so")),
        "{}",
        text(&out)
    );
}
