//! Probe, skip and require without any of the crate's features: `fixtures/no-features` (a
//! project whose tests use `require_backend!` and `gpu-test-permit` with no features, as one on
//! its own wgpu or CUDA bindings would) built once, its test binary run against Mesa's lavapipe,
//! no Vulkan driver, a crashing Vulkan driver and the stand-in CUDA drivers, under each policy.
//! Lavapipe must be installed (`apt-get install libvulkan1 mesa-vulkan-drivers`): without it
//! these tests fail rather than pass on nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use gpu_test_permit::probe::{DeviceKind, ProbeOutcome};

use crate::util::{clear_permit_env, target_tmpdir, tempdir};

/// The fixture's test binary, built once per process (cargo's lock serialises the builds of
/// concurrent test processes; later ones find it fresh).
fn fixture() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        crate::util::test_executable(
            "gpu-test-permit-no-features",
            "native",
            &target_tmpdir().join("no-features"),
        )
    })
}

/// Runs the fixture's test `test` with `env` (and nothing of the outer run's GPU or driver
/// settings).
fn run(test: &str, env: &[(&str, OsString)]) -> Output {
    let slots = tempdir();
    run_in(slots.path(), test, env)
}

/// [`run`] with the slot directory `slots`.
fn run_in(slots: &Path, test: &str, env: &[(&str, OsString)]) -> Output {
    let mut c = Command::new(fixture());
    c.args(["--exact", test, "--nocapture", "--test-threads", "1"]);
    clear_permit_env(&mut c);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CUDA_PROBE_STUB")
            || k.starts_with("VK_")
            || k.starts_with("VULKAN_")
            || k == "WGPU_BACKEND"
            || k == "LD_LIBRARY_PATH"
        {
            c.env_remove(&*k);
        }
    }
    c.env("GPU_TEST_PERMIT_DIR", slots);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(out: &Output) -> (String, String) {
    crate::probe::text(out)
}

/// The one line of `stderr` that contains `word` (` SKIP ` or ` FAIL `).
fn only_line<'a>(stderr: &'a str, word: &str) -> &'a str {
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(word)).collect();
    assert_eq!(lines.len(), 1, "one line with {word:?} expected:\n{stderr}");
    lines[0]
}

/// The test ran its body, and passed.
fn assert_ran(out: &Output, test: &str, on: &str) {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let ran = format!("RAN {test} on {on}");
    assert!(
        stdout.contains(&ran),
        "{ran:?} expected:\n{stdout}\n{stderr}"
    );
    assert!(!stderr.contains(" SKIP "), "{stderr}");
}

/// The test skipped with one skip line, which starts with `line`, and passed.
fn assert_skipped(out: &Output, line: &str) {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("RAN "), "{stdout}");
    let skip = only_line(&stderr, " SKIP ");
    assert!(
        skip.starts_with(line),
        "{skip:?} should start with {line:?}"
    );
}

/// The test failed (libtest's status 101) with a panic that contains `reason`.
fn assert_failed(out: &Output, reason: &str) {
    let (stdout, stderr) = text(out);
    assert_eq!(out.status.code(), Some(101), "{stdout}\n{stderr}");
    assert!(!stdout.contains("RAN "), "{stdout}");
    assert!(!stderr.contains(" SKIP "), "{stderr}");
    assert!(stderr.contains(reason), "{reason:?} expected:\n{stderr}");
}

/// Lavapipe's manifest, the only Vulkan driver the loader then loads.
fn lavapipe() -> Vec<(&'static str, OsString)> {
    let manifest = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("lvp_icd") && name.ends_with(".json")
        })
        .expect(
            "Mesa's lavapipe is not installed (apt-get install libvulkan1 mesa-vulkan-drivers)",
        );
    vec![
        ("VK_DRIVER_FILES", manifest.clone().into()),
        ("VK_ICD_FILENAMES", manifest.into()),
    ]
}

/// A manifest that names no file: the loader has no driver.
fn no_vulkan_driver(dir: &Path) -> Vec<(&'static str, OsString)> {
    let none = dir.join("no-such-driver.json");
    vec![
        ("VK_DRIVER_FILES", none.clone().into()),
        ("VK_ICD_FILENAMES", none.into()),
    ]
}

fn with(
    mut env: Vec<(&'static str, OsString)>,
    more: &[(&'static str, &str)],
) -> Vec<(&'static str, OsString)> {
    env.extend(more.iter().map(|(k, v)| (*k, OsString::from(v))));
    env
}

const REQUIRE: &str = "GPU_TEST_PERMIT_REQUIRE";

#[test]
fn lavapipe_runs_a_wgpu_test_required_or_not() {
    for require in ["none", "wgpu", "any"] {
        let out = run("wgpu_test", &with(lavapipe(), &[(REQUIRE, require)]));
        assert_ran(&out, "wgpu_test", "wgpu: 1 device: llvmpipe (");
        let (stdout, _) = text(&out);
        assert!(stdout.contains("[vulkan, cpu, driver "), "{stdout}");
    }
}

#[test]
fn the_outcomes_name_lavapipe_and_the_stand_in_cuda_devices() {
    let env = with(
        lavapipe(),
        &[("CUDA_PROBE_STUB", "ok"), ("CUDA_PROBE_STUB_DEVICES", "2")],
    );
    let mut env = env;
    env.push((
        "LD_LIBRARY_PATH",
        crate::stub::driver_dir("cuda_probe").into(),
    ));
    let out = run("outcomes", &env);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("BUILT cuda true"), "{stdout}");
    assert!(stdout.contains("BUILT wgpu true"), "{stdout}");
    let outcomes: Vec<(String, String, ProbeOutcome)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("OUTCOME "))
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let (b, s, json) = (parts.next(), parts.next(), parts.next());
            (
                b.unwrap().to_string(),
                s.unwrap().to_string(),
                ProbeOutcome::from_json(json.unwrap()).unwrap(),
            )
        })
        .collect();
    let sources: Vec<(&str, &str)> = outcomes
        .iter()
        .map(|(b, s, _)| (b.as_str(), s.as_str()))
        .collect();
    assert_eq!(
        sources,
        [
            ("cuda", "Child"),
            ("cuda", "InProcess"),
            ("wgpu", "Child"),
            ("wgpu", "InProcess")
        ]
    );
    for (backend, source, outcome) in &outcomes {
        let devices = outcome
            .devices()
            .unwrap_or_else(|| panic!("{backend} {source}: {outcome}"));
        if backend == "cuda" {
            let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
            assert_eq!(names, ["Stub GPU 0", "Stub GPU 1"]);
            assert_eq!(devices[0].kind, DeviceKind::Discrete);
            assert_eq!(devices[1].kind, DeviceKind::Integrated);
            assert_eq!(devices[1].memory_bytes, Some(2 << 30));
            assert_eq!(devices[0].driver.as_deref(), Some("CUDA 12.8"));
            assert!(devices.iter().all(|d| d.api == "cuda"));
        } else {
            assert_eq!(devices.len(), 1, "{outcome}");
            let d = &devices[0];
            assert!(d.name.starts_with("llvmpipe"), "{outcome}");
            assert_eq!(d.api, "vulkan");
            assert_eq!(d.kind, DeviceKind::Cpu);
            assert!(d.memory_bytes.is_some_and(|m| m > 0), "{outcome}");
            assert!(
                d.driver
                    .as_deref()
                    .is_some_and(|v| v.contains("(Vulkan 1.")),
                "{outcome}"
            );
        }
    }
}

#[test]
fn without_a_vulkan_driver_a_wgpu_test_skips_unless_required() {
    let dir = tempdir();
    let why = "wgpu no devices (vkCreateInstance reported VK_ERROR_INCOMPATIBLE_DRIVER (-9): \
               the Vulkan loader found no driver";
    let out = run("wgpu_test", &no_vulkan_driver(dir.path()));
    assert_skipped(
        &out,
        &format!("gpu-test-permit: SKIP wgpu_test backend=wgpu: {why}"),
    );
    let out = run(
        "wgpu_test",
        &with(no_vulkan_driver(dir.path()), &[(REQUIRE, "wgpu")]),
    );
    assert_failed(
        &out,
        "gpu-test-permit: FAIL backend=wgpu: GPU_TEST_PERMIT_REQUIRE=wgpu requires wgpu, but no \
         devices (vkCreateInstance reported VK_ERROR_INCOMPATIBLE_DRIVER (-9)",
    );
}

#[test]
fn wgpu_backend_naming_no_vulkan_is_not_built_without_the_feature() {
    let out = run("wgpu_test", &with(lavapipe(), &[("WGPU_BACKEND", "gl")]));
    assert_skipped(
        &out,
        "gpu-test-permit: SKIP wgpu_test backend=wgpu: wgpu not built: without this backend's \
         feature gpu-test-permit cannot probe it here (without its `wgpu` feature",
    );
    let (_, stderr) = text(&out);
    assert!(stderr.contains("enable the `wgpu` feature"), "{stderr}");
    let out = run(
        "wgpu_test",
        &with(lavapipe(), &[("WGPU_BACKEND", "gl"), (REQUIRE, "wgpu")]),
    );
    assert_failed(&out, "requires wgpu, but not built");
    // A list that names Vulkan reaches lavapipe.
    let out = run(
        "wgpu_test",
        &with(lavapipe(), &[("WGPU_BACKEND", "gl,vulkan")]),
    );
    assert_ran(&out, "wgpu_test", "wgpu: 1 device: llvmpipe (");
}

#[test]
fn a_crashing_or_hanging_vulkan_driver_skips_loudly_unless_required() {
    let dir = tempdir();
    let manifest = crate::probe::vulkan_stub_manifest(dir.path());
    let env = vec![
        ("VK_DRIVER_FILES", manifest.clone().into()),
        ("VK_ICD_FILENAMES", manifest.into()),
        ("VULKAN_STUB", OsString::from("segv")),
    ];
    let out = run("wgpu_test", &env);
    assert_skipped(
        &out,
        "gpu-test-permit: SKIP wgpu_test backend=wgpu: the wgpu driver is broken, so this test \
         cannot run: the probe child crashed with signal 11 (SIGSEGV); its stderr ended with: \
         stub vulkan driver: about to dereference null",
    );
    let out = run("wgpu_test", &with(env.clone(), &[(REQUIRE, "wgpu")]));
    assert_failed(
        &out,
        "GPU_TEST_PERMIT_REQUIRE=wgpu requires wgpu, but the probe child crashed with signal 11 \
         (SIGSEGV)",
    );
    // A driver that hangs is cut at the probe deadline.
    let hang: Vec<_> = env
        .into_iter()
        .filter(|(k, _)| *k != "VULKAN_STUB")
        .collect();
    let out = run(
        "wgpu_test",
        &with(
            hang,
            &[
                ("VULKAN_STUB", "hang"),
                (REQUIRE, "wgpu"),
                ("GPU_TEST_PERMIT_PROBE_TIMEOUT", "700ms"),
            ],
        ),
    );
    assert_failed(
        &out,
        "GPU_TEST_PERMIT_REQUIRE=wgpu requires wgpu, but the probe child did not answer within \
         700 ms and was killed",
    );
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains("stub vulkan driver: waiting forever"),
        "{stderr}"
    );
}

fn cuda_stub(mode: &str) -> Vec<(&'static str, OsString)> {
    vec![
        (
            "LD_LIBRARY_PATH",
            crate::stub::driver_dir("cuda_probe").into(),
        ),
        ("CUDA_PROBE_STUB", mode.into()),
    ]
}

#[test]
fn stand_in_cuda_drivers_run_skip_and_fail_a_cuda_test_as_the_policy_says() {
    let out = run(
        "cuda_test",
        &with(
            cuda_stub("ok"),
            &[("CUDA_PROBE_STUB_DEVICES", "2"), (REQUIRE, "cuda")],
        ),
    );
    assert_ran(
        &out,
        "cuda_test",
        "cuda: 2 devices: Stub GPU 0 [cuda, discrete, driver CUDA 12.8, 1.0 GiB]; Stub GPU 1 \
         [cuda, integrated, driver CUDA 12.8, 2.0 GiB]",
    );

    let no_device = "cuda no devices (cuInit reported CUDA_ERROR_NO_DEVICE (100))";
    let out = run("cuda_test", &cuda_stub("nodevice"));
    assert_skipped(
        &out,
        &format!("gpu-test-permit: SKIP cuda_test backend=cuda: {no_device}"),
    );
    let out = run(
        "cuda_test",
        &with(cuda_stub("nodevice"), &[(REQUIRE, "cuda")]),
    );
    assert_failed(
        &out,
        "gpu-test-permit: FAIL backend=cuda: GPU_TEST_PERMIT_REQUIRE=cuda requires cuda, but no \
         devices (cuInit reported CUDA_ERROR_NO_DEVICE (100))",
    );

    let out = run("cuda_test", &cuda_stub("stub"));
    assert_skipped(
        &out,
        "gpu-test-permit: SKIP cuda_test backend=cuda: cuda not installed (cuInit reported \
         CUDA_ERROR_STUB_LIBRARY (34): the libcuda.so.1 found is the toolkit's stub",
    );

    let out = run("cuda_test", &cuda_stub("segv"));
    assert_skipped(
        &out,
        "gpu-test-permit: SKIP cuda_test backend=cuda: the cuda driver is broken, so this test \
         cannot run: the probe child crashed with signal 11 (SIGSEGV)",
    );
    let out = run("cuda_test", &with(cuda_stub("segv"), &[(REQUIRE, "cuda")]));
    assert_failed(
        &out,
        "GPU_TEST_PERMIT_REQUIRE=cuda requires cuda, but the probe child crashed with signal 11 \
         (SIGSEGV)",
    );

    let out = run(
        "cuda_test",
        &with(
            cuda_stub("hang"),
            &[
                (REQUIRE, "cuda"),
                ("GPU_TEST_PERMIT_PROBE_TIMEOUT", "700ms"),
            ],
        ),
    );
    assert_failed(
        &out,
        "GPU_TEST_PERMIT_REQUIRE=cuda requires cuda, but the probe child did not answer within \
         700 ms and was killed",
    );
}

#[test]
fn require_any_fails_only_where_no_backend_has_a_device() {
    let dir = tempdir();
    // CUDA has no device, but lavapipe does: the CUDA test skips.
    let mut env = cuda_stub("nodevice");
    env.extend(lavapipe());
    let out = run("cuda_test", &with(env, &[(REQUIRE, "any")]));
    assert_skipped(
        &out,
        "gpu-test-permit: SKIP cuda_test backend=cuda: cuda no devices",
    );
    // Neither has one: it fails, naming both.
    let mut env = cuda_stub("nodevice");
    env.extend(no_vulkan_driver(dir.path()));
    let out = run("cuda_test", &with(env, &[(REQUIRE, "any")]));
    assert_failed(
        &out,
        "GPU_TEST_PERMIT_REQUIRE=any requires some GPU backend, but cuda: no devices (cuInit \
         reported CUDA_ERROR_NO_DEVICE (100)); wgpu: no devices (vkCreateInstance reported \
         VK_ERROR_INCOMPATIBLE_DRIVER (-9)",
    );
}

/// Without a driver library the CUDA test skips as "not installed" (on a machine with NVIDIA's
/// driver it runs instead).
#[test]
fn without_libcuda_a_cuda_test_skips_as_not_installed() {
    let empty = tempdir();
    let env = vec![("LD_LIBRARY_PATH", empty.path().as_os_str().to_owned())];
    // SAFETY: only asks the dynamic loader whether it finds the library; RTLD_NOLOAD would not
    // tell an installed library from a loaded one, so it is loaded (and left loaded).
    let installed = !unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY) }.is_null();
    let out = run("cuda_test", &env);
    if installed {
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(!stderr.contains("cuda not installed"), "{stderr}");
    } else {
        assert_skipped(
            &out,
            "gpu-test-permit: SKIP cuda_test backend=cuda: cuda not installed (the dynamic \
             loader finds no libcuda.so.1, libcuda.so (the NVIDIA driver library)",
        );
        let out = run("cuda_test", &with(env, &[(REQUIRE, "cuda")]));
        assert_failed(
            &out,
            "GPU_TEST_PERMIT_REQUIRE=cuda requires cuda, but not installed (the dynamic loader \
             finds no libcuda.so.1",
        );
    }
}

/// Under nextest the skips of a project without features are recorded, and `report` names
/// them with their reasons.
#[test]
fn report_names_the_skips_of_a_nextest_run_without_features() {
    let work = tempdir();
    let slots = work.path().join("slots");
    let nextest = |test: &str| {
        vec![
            ("NEXTEST_RUN_ID", OsString::from("native-run")),
            ("NEXTEST_EXECUTION_MODE", "process-per-test".into()),
            (
                "NEXTEST_BINARY_ID",
                "gpu-test-permit-no-features::native".into(),
            ),
            ("NEXTEST_TEST_NAME", test.into()),
            ("NEXTEST_ATTEMPT", "1".into()),
            ("NEXTEST_TOTAL_ATTEMPTS", "1".into()),
            ("NEXTEST_TEST_GROUP", "gpu".into()),
        ]
    };
    let mut env = no_vulkan_driver(work.path());
    env.extend(nextest("wgpu_test"));
    assert_skipped(&run_in(&slots, "wgpu_test", &env), "gpu-test-permit: SKIP");
    let mut env = cuda_stub("nodevice");
    env.extend(nextest("cuda_test"));
    assert_skipped(&run_in(&slots, "cuda_test", &env), "gpu-test-permit: SKIP");
    let out = crate::util::cli(&slots, 2).arg("report").output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("skipped: 2"), "{stdout}");
    for (test, reason) in [
        (
            "wgpu_test",
            "backend=wgpu: wgpu no devices (vkCreateInstance reported \
             VK_ERROR_INCOMPATIBLE_DRIVER (-9)",
        ),
        (
            "cuda_test",
            "backend=cuda: cuda no devices (cuInit reported CUDA_ERROR_NO_DEVICE (100))",
        ),
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(&format!("{test}: {reason}"))),
            "{test}: {reason:?} expected:\n{stdout}"
        );
    }
}
