//! GPU ids and device export: `GPU_TEST_PERMIT_GPUS` as a list, the visibility variables a
//! process started under a permit gets, wgpu's own adapter variables, and the fixtures that
//! follow them (through stand-in drivers and lavapipe).

use std::ffi::OsString;

use gpu_test_permit::config::{
    AdapterName, Config, GPUS_VAR, PowerPref, WGPU_ADAPTER_NAME_VAR, WGPU_ADAPTER_VAR,
    WGPU_POWER_PREF_VAR,
};
use gpu_test_permit::devices::{ExportError, VisibleDevices, export};

fn with(vars: &[(&str, &str)]) -> Config {
    Config::from_lookup(|name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| OsString::from(v))
    })
}

/// Marks a helper child's answer on its standard output.
#[cfg(any(feature = "cuda", feature = "wgpu"))]
const ANSWER: &str = "FIXTURE-ANSWER ";

// ---- GPU_TEST_PERMIT_GPUS ----

#[test]
fn gpus_takes_auto_a_count_or_a_list_of_ids() {
    // (value, count, list, ids of the pool for 2 auto-detected GPUs)
    type Case<'a> = (&'a str, Option<usize>, Option<&'a [usize]>, &'a [usize]);
    let cases: &[Case] = &[
        ("auto", None, None, &[0, 1]),
        (" auto ", None, None, &[0, 1]),
        ("3", Some(3), None, &[0, 1, 2]),
        ("0,2,3", Some(3), Some(&[0, 2, 3]), &[0, 2, 3]),
        (" 3 , 1 ", Some(2), Some(&[3, 1]), &[3, 1]),
        ("3,", Some(1), Some(&[3]), &[3]),
        ("0,1,", Some(2), Some(&[0, 1]), &[0, 1]),
    ];
    for &(raw, count, list, ids) in cases {
        let c = with(&[(GPUS_VAR, raw)]);
        assert!(c.warnings.is_empty(), "{raw:?}: {:?}", c.warnings);
        assert_eq!(c.gpus.map(|g| g.get()), count, "{raw:?}");
        assert_eq!(c.gpu_list.as_deref(), list, "{raw:?}");
        assert_eq!(c.gpu_ids(count.unwrap_or(2)), ids, "{raw:?}");
    }
    let c = with(&[(GPUS_VAR, "0,2,3")]);
    assert_eq!((c.gpu_id(0), c.gpu_id(1), c.gpu_id(2)), (0, 2, 3));
    assert_eq!(with(&[(GPUS_VAR, "4")]).gpu_id(3), 3);
}

#[test]
fn a_bad_list_of_gpus_falls_back_to_auto_with_a_warning() {
    for (raw, problem) in [
        (
            "0,,2",
            "is not a count, a list of GPU ids like 0,2,3, or groups like 0,1,2,3;4,5,6,7",
        ),
        (
            ",",
            "is not a count, a list of GPU ids like 0,2,3, or groups like 0,1,2,3;4,5,6,7",
        ),
        (
            "0,a",
            "is not a count, a list of GPU ids like 0,2,3, or groups like 0,1,2,3;4,5,6,7",
        ),
        (
            "0,-1",
            "is not a count, a list of GPU ids like 0,2,3, or groups like 0,1,2,3;4,5,6,7",
        ),
        (
            "0,1,,",
            "is not a count, a list of GPU ids like 0,2,3, or groups like 0,1,2,3;4,5,6,7",
        ),
        (
            "GPU-8f3c,GPU-1a2b",
            "is not a count, a list of GPU ids like 0,2,3, or groups like 0,1,2,3;4,5,6,7",
        ),
        ("1,2,1", "lists GPU 1 more than once"),
    ] {
        let c = with(&[(GPUS_VAR, raw)]);
        assert_eq!((c.gpus, c.gpu_list.as_deref()), (None, None), "{raw}");
        assert_eq!(
            c.warnings[0].to_string(),
            format!("GPU_TEST_PERMIT_GPUS='{raw}' {problem}; using auto")
        );
    }
    let many: String = (0..1025).map(|i| format!("{i},")).collect();
    let c = with(&[(GPUS_VAR, &many)]);
    assert!(c.warnings[0].problem.contains("more than 1024 GPUs"));
}

// ---- device export ----

fn caller(cuda: Option<&str>, hip: Option<&str>, rocr: Option<&str>) -> VisibleDevices {
    VisibleDevices {
        cuda: cuda.map(Into::into),
        hip: hip.map(Into::into),
        rocr: rocr.map(Into::into),
    }
}

#[test]
fn export_maps_the_permits_gpu_through_the_callers_lists() {
    const UUIDS: &str =
        "GPU-8f3c0d6e-1111-2222-3333-444455556666,GPU-1a2b3c4d-aaaa-bbbb-cccc-ddddeeeeffff";
    // (device, pool ids, caller's CUDA, HIP, ROCR lists, expected CUDA, HIP, ROCR)
    type Row<'a> = (
        Option<usize>,
        &'a [usize],
        (Option<&'a str>, Option<&'a str>, Option<&'a str>),
        (&'a str, Option<&'a str>, Option<&'a str>),
    );
    let rows: &[Row] = &[
        // No caller list: the GPU id itself.
        (Some(0), &[0, 1], (None, None, None), ("0", None, None)),
        (Some(1), &[0, 1], (None, None, None), ("1", None, None)),
        (Some(1), &[0, 2, 3], (None, None, None), ("2", None, None)),
        (Some(0), &[0], (None, None, None), ("0", None, None)),
        // The caller's CUDA list: its entry at the GPU id.
        (
            Some(1),
            &[0, 1],
            (Some("2,3"), None, None),
            ("3", None, None),
        ),
        (
            Some(0),
            &[0, 1],
            (Some("2,3"), None, None),
            ("2", None, None),
        ),
        (
            Some(1),
            &[1, 0],
            (Some(" 5, 7 "), None, None),
            ("5", None, None),
        ),
        (
            Some(2),
            &[0, 2, 3],
            (Some("4,5,6,7"), None, None),
            ("7", None, None),
        ),
        // UUIDs pass through as written.
        (
            Some(1),
            &[0, 1],
            (Some(UUIDS), None, None),
            ("GPU-1a2b3c4d-aaaa-bbbb-cccc-ddddeeeeffff", None, None),
        ),
        (
            Some(0),
            &[0, 1],
            (
                Some("MIG-0a1b2c3d-0000-1111-2222-333344445555,1"),
                None,
                None,
            ),
            ("MIG-0a1b2c3d-0000-1111-2222-333344445555", None, None),
        ),
        // HIP where the caller set it.
        (
            Some(1),
            &[0, 1],
            (None, Some("4,6"), None),
            ("1", Some("6"), None),
        ),
        (
            Some(1),
            &[0, 1],
            (Some("2,3"), Some("4,6"), None),
            ("3", Some("6"), None),
        ),
        // ROCr narrows first, and HIP numbers the one device it leaves.
        (
            Some(1),
            &[0, 1],
            (None, None, Some("2,3")),
            ("1", Some("0"), Some("3")),
        ),
        (
            Some(0),
            &[0, 1],
            (None, Some("1,0"), Some("6,7")),
            ("0", Some("0"), Some("7")),
        ),
        (
            Some(1),
            &[0, 1],
            (Some("1,0"), None, Some("6,7")),
            ("0", Some("0"), Some("6")),
        ),
        // A HIP-level UUID names no ROCr position: ROCr stays as the caller set it.
        (
            Some(0),
            &[0],
            (None, Some("GPU-aa11"), Some("2,3")),
            ("0", Some("GPU-aa11"), None),
        ),
        // Exclusive: the whole pool, in pool order.
        (None, &[0, 1], (None, None, None), ("0,1", None, None)),
        (None, &[0, 2, 3], (None, None, None), ("0,2,3", None, None)),
        (
            None,
            &[0, 1],
            (Some("2,3"), None, None),
            ("2,3", None, None),
        ),
        (
            None,
            &[1, 0],
            (Some("2,3"), None, None),
            ("3,2", None, None),
        ),
        (
            None,
            &[0, 1],
            (None, None, Some("4,5,6")),
            ("0,1", Some("0,1"), Some("4,5")),
        ),
        // The list ends at the first empty or negative entry, as in the drivers.
        (
            Some(1),
            &[0, 1],
            (Some("2,3,-1,4"), None, None),
            ("3", None, None),
        ),
    ];
    for &(device, ids, (cuda, hip, rocr), (want_cuda, want_hip, want_rocr)) in rows {
        let mut want = vec![("CUDA_VISIBLE_DEVICES", want_cuda.to_string())];
        want.extend(want_hip.map(|h| ("HIP_VISIBLE_DEVICES", h.to_string())));
        want.extend(want_rocr.map(|r| ("ROCR_VISIBLE_DEVICES", r.to_string())));
        let got = export(device, ids, &caller(cuda, hip, rocr));
        assert_eq!(
            got,
            Ok(want),
            "device {device:?}, ids {ids:?}, caller {cuda:?} {hip:?} {rocr:?}"
        );
    }
}

#[test]
fn export_refuses_to_guess_past_the_callers_list() {
    let err = export(Some(1), &[0, 1], &caller(Some("2"), None, None)).unwrap_err();
    assert_eq!(
        err,
        ExportError::NotListed {
            var: "CUDA_VISIBLE_DEVICES",
            value: "2".into(),
            index: 1,
            listed: 1
        }
    );
    assert_eq!(
        err.to_string(),
        "CUDA_VISIBLE_DEVICES='2' lists 1 devices, so it has no device 1; list every GPU of \
         GPU_TEST_PERMIT_GPUS in it, or list fewer in GPU_TEST_PERMIT_GPUS"
    );
    for (device, ids, c) in [
        (Some(0), &[3][..], caller(Some("0,1,2"), None, None)),
        (Some(1), &[0, 1], caller(Some(""), None, None)),
        (Some(1), &[0, 1], caller(Some("0,-1,2"), None, None)),
        (Some(1), &[0, 1], caller(None, Some("0"), None)),
        (Some(1), &[0, 1], caller(None, None, Some("0"))),
        (None, &[0, 1], caller(Some("5"), None, None)),
    ] {
        assert!(
            matches!(export(device, ids, &c), Err(ExportError::NotListed { .. })),
            "{device:?} {ids:?} {c:?}"
        );
    }
    assert_eq!(
        export(Some(2), &[0, 1], &VisibleDevices::default()),
        Err(ExportError::NoSuchDevice { device: 2, gpus: 2 })
    );
}

#[test]
fn visible_devices_come_from_the_lookup_given() {
    let v = VisibleDevices::from_lookup(|name| match name {
        "CUDA_VISIBLE_DEVICES" => Some("2,3".into()),
        "ROCR_VISIBLE_DEVICES" => Some("".into()),
        _ => None,
    });
    assert_eq!(v, caller(Some("2,3"), None, Some("")));
}

/// A pool over two GPUs, a caller that sees physical GPUs 2 and 3, and a child process whose
/// stand-in driver says which GPU it was given: each permit's child sees exactly its GPU.
#[cfg(feature = "cuda")]
#[test]
fn a_child_started_with_the_export_sees_the_permits_gpu() {
    use gpu_test_permit::PermitPool;
    use gpu_test_permit::probe::{Backend, ProbeOptions, probe_with};
    use std::time::Duration;

    let dir = crate::util::tempdir();
    let cfg = with(&[(GPUS_VAR, "2")]);
    let pool = PermitPool::builder()
        .concurrency(1)
        .gpus(cfg.gpus.unwrap().get())
        .slot_dir(dir.path().join("slots"))
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let ids = cfg.gpu_ids(pool.gpus());
    let callers = caller(Some("2,3"), None, None);
    let driver = crate::stub::driver_dir("cuda_visible");
    // Starts a probe child (it loads libcuda) with `vars`; returns what the driver saw and
    // the devices the probe reports.
    let child = |name: &str, vars: &[(&'static str, String)]| {
        let seen = dir.path().join(name);
        let mut opts = ProbeOptions::from_config(&Config::from_lookup(|_| None))
            .timeout(Duration::from_secs(60))
            .env("LD_LIBRARY_PATH", &driver)
            .env("CUDA_VISIBLE_STUB_SEEN", &seen)
            .env_remove("HIP_VISIBLE_DEVICES")
            .env_remove("ROCR_VISIBLE_DEVICES");
        for (k, v) in vars {
            opts = opts.env(k, v);
        }
        let r = probe_with(Backend::Cuda, &opts);
        let names: Vec<String> = r
            .outcome
            .devices()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|d| d.name.clone())
            .collect();
        (std::fs::read_to_string(&seen).unwrap(), names)
    };

    let first = pool.acquire();
    let second = std::thread::scope(|s| {
        s.spawn(|| {
            let p = pool.acquire();
            let d = p.device();
            (p, d)
        })
        .join()
        .unwrap()
    });
    let (second, second_device) = second;
    assert_eq!((first.device(), second_device), (Some(0), Some(1)));
    for (name, permit, gpu) in [("first", &first, "2"), ("second", &second, "3")] {
        let vars = export(permit.device(), &ids, &callers).unwrap();
        assert_eq!(vars, [("CUDA_VISIBLE_DEVICES", gpu.to_string())]);
        let (seen, names) = child(name, &vars);
        assert_eq!(seen, format!("init {gpu}\n"), "{name}");
        assert_eq!(names, [format!("Stub GPU {gpu}")], "{name}");
    }
    drop((first, second));

    let whole = pool.acquire_exclusive();
    let vars = export(whole.device(), &ids, &callers).unwrap();
    let (seen, names) = child("exclusive", &vars);
    assert_eq!(seen, "init 2,3\n");
    assert_eq!(names, ["Stub GPU 2", "Stub GPU 3"]);
}

/// Helper run in a child process: makes the CUDA fixture and prints its ordinal.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "helper: run in a child process by cuda_fixture_opens_the_listed_gpu"]
fn cuda_fixture_child() {
    match gpu_test_permit::cuda::context() {
        Ok(gpu) => println!(
            "{ANSWER}ORDINAL {} DEVICE {:?}",
            gpu.ordinal(),
            gpu.permit().device()
        ),
        Err(e) => println!("{ANSWER}ERROR {e}"),
    }
}

#[cfg(feature = "cuda")]
fn cuda_fixture(gpus: &str, stub_gpus: &str) -> (String, String) {
    let dir = crate::util::tempdir();
    let seen = dir.path().join("seen");
    let out = crate::probe::helper("devices::cuda_fixture_child")
        .env("GPU_TEST_PERMIT_DIR", dir.path().join("slots"))
        .env("GPU_TEST_PERMIT_GPUS", gpus)
        .env("GPU_TEST_PERMIT_REQUIRE", "cuda")
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "1")
        .env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_visible"))
        .env("CUDA_VISIBLE_STUB_GPUS", stub_gpus)
        .env("CUDA_VISIBLE_STUB_SEEN", &seen)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .output()
        .unwrap();
    let (stdout, stderr) = crate::probe::text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.split_once(ANSWER).map(|(_, a)| a))
        .unwrap_or_else(|| panic!("no answer in:\n{stdout}\n{stderr}"))
        .to_string();
    (line, std::fs::read_to_string(&seen).unwrap_or_default())
}

/// `GPU_TEST_PERMIT_GPUS=2,0`: the first permit is device 0, which is CUDA device 2.
#[cfg(feature = "cuda")]
#[test]
fn cuda_fixture_opens_the_listed_gpu() {
    let (line, seen) = cuda_fixture("2,0", "4");
    assert_eq!(line, "ORDINAL 2 DEVICE Some(0)");
    assert!(seen.contains("ctx 2 gpu 2\n"), "{seen}");
    let (line, _) = cuda_fixture("3,", "2");
    assert_eq!(
        line,
        "ERROR GPU_TEST_PERMIT_GPUS='3' lists CUDA device 3, but the probe finds 2 CUDA \
         devices (ordinals 0 to 1)"
    );
}

// ---- wgpu's own variables ----

#[test]
fn wgpu_adapter_name_power_pref_and_the_crates_own_pin() {
    let c = with(&[(WGPU_ADAPTER_NAME_VAR, " llvmpipe ")]);
    assert_eq!(
        c.wgpu_adapter,
        Some(AdapterName {
            var: "WGPU_ADAPTER_NAME",
            name: "llvmpipe".into()
        })
    );
    let c = with(&[(WGPU_ADAPTER_VAR, "H100")]);
    assert_eq!(c.wgpu_adapter.unwrap().var, "GPU_TEST_PERMIT_WGPU_ADAPTER");
    // The crate's own variable wins; a blank one counts as unset.
    let c = with(&[
        (WGPU_ADAPTER_NAME_VAR, "llvmpipe"),
        (WGPU_ADAPTER_VAR, "H100"),
    ]);
    assert_eq!(c.wgpu_adapter.unwrap().name, "H100");
    let c = with(&[(WGPU_ADAPTER_NAME_VAR, "llvmpipe"), (WGPU_ADAPTER_VAR, " ")]);
    assert_eq!(c.wgpu_adapter.unwrap().name, "llvmpipe");
    assert_eq!(with(&[(WGPU_ADAPTER_NAME_VAR, "")]).wgpu_adapter, None);

    for (raw, want) in [
        ("low", PowerPref::Low),
        ("HIGH", PowerPref::High),
        (" none ", PowerPref::None),
    ] {
        let c = with(&[(WGPU_POWER_PREF_VAR, raw)]);
        assert_eq!((c.wgpu_power, c.warnings.len()), (Some(want), 0), "{raw}");
    }
    assert_eq!(Config::from_lookup(|_| None).wgpu_power, None);
    let c = with(&[(WGPU_POWER_PREF_VAR, "fast")]);
    assert_eq!(c.wgpu_power, None);
    assert_eq!(
        c.warnings[0].to_string(),
        "WGPU_POWER_PREF='fast' is not low, high or none; using the fixture's own order"
    );
}

/// Helper run in a child process: makes the wgpu fixture and prints its adapter or error.
#[cfg(feature = "wgpu")]
#[test]
#[ignore = "helper: run in a child process by the wgpu_adapter_name tests"]
fn wgpu_fixture_child() {
    match gpu_test_permit::wgpu::device() {
        Ok(gpu) => println!(
            "{ANSWER}ADAPTER {} ({:?})",
            gpu.info().name,
            gpu.info().device_type
        ),
        Err(e) if e.is_skip() => println!("{ANSWER}SKIP {e}"),
        Err(e) => println!("{ANSWER}ERROR {e}"),
    }
}

/// The fixture's answer in a child with `vars`, or `None` when wgpu has no adapter here (and
/// `GPU_TEST_PERMIT_REQUIRE` does not require one).
#[cfg(feature = "wgpu")]
fn wgpu_fixture(vars: &[(&str, &str)]) -> Option<String> {
    let dir = crate::util::tempdir();
    let mut c = crate::probe::helper("devices::wgpu_fixture_child");
    c.env("GPU_TEST_PERMIT_DIR", dir.path())
        .env_remove("WGPU_ADAPTER_NAME")
        .env_remove("WGPU_POWER_PREF");
    for (k, v) in vars {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let (stdout, stderr) = crate::probe::text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.split_once(ANSWER).map(|(_, a)| a))
        .unwrap_or_else(|| panic!("no answer in:\n{stdout}\n{stderr}"))
        .to_string();
    if line.starts_with("SKIP ") {
        let required = matches!(
            &Config::from_env().require,
            Ok(p) if p.requires(gpu_test_permit::probe::Backend::Wgpu)
        );
        assert!(!required, "wgpu is required, but: {line}");
        eprintln!("no wgpu adapter here (install mesa-vulkan-drivers for lavapipe): {line}");
        return None;
    }
    Some(line)
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_adapter_name_picks_lavapipe() {
    let Some(line) = wgpu_fixture(&[("WGPU_ADAPTER_NAME", "LLVMpipe")]) else {
        return;
    };
    assert!(line.starts_with("ADAPTER llvmpipe"), "{line}");
    let Some(line) = wgpu_fixture(&[
        ("WGPU_ADAPTER_NAME", "llvmpipe"),
        ("WGPU_POWER_PREF", "high"),
    ]) else {
        return;
    };
    assert!(line.starts_with("ADAPTER llvmpipe"), "{line}");
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_adapter_name_without_a_match_fails_and_lists_the_adapters() {
    let Some(line) = wgpu_fixture(&[("WGPU_ADAPTER_NAME", "no-such-gpu")]) else {
        return;
    };
    assert!(
        line.starts_with("ERROR WGPU_ADAPTER_NAME='no-such-gpu' matches none of the adapters: '"),
        "{line}"
    );
    // With lavapipe installed, it is among those listed.
    if wgpu_fixture(&[("WGPU_ADAPTER_NAME", "llvmpipe")])
        .is_some_and(|l| l.starts_with("ADAPTER llvmpipe"))
    {
        assert!(line.contains("'llvmpipe"), "{line}");
    }
    let Some(line) = wgpu_fixture(&[
        ("WGPU_ADAPTER_NAME", "llvmpipe"),
        ("GPU_TEST_PERMIT_WGPU_ADAPTER", "no-such-gpu"),
    ]) else {
        return;
    };
    assert!(
        line.starts_with("ERROR GPU_TEST_PERMIT_WGPU_ADAPTER='no-such-gpu' matches none"),
        "{line}"
    );
}

#[cfg(unix)]
#[test]
fn run_exports_the_permits_gpu_through_the_callers_list() {
    use std::time::Duration;
    let dir = crate::util::tempdir();
    let cli = || {
        let mut c = crate::util::cli(dir.path(), 1);
        c.env("GPU_TEST_PERMIT_GPUS", "2")
            .env("CUDA_VISIBLE_DEVICES", "2,3");
        c
    };
    // What the command of `run <options>` sees.
    let seen = |options: &[&str]| {
        let out = cli()
            .arg("run")
            .args(options)
            .args([
                "--",
                "sh",
                "-c",
                "echo \"$CUDA_VISIBLE_DEVICES $GPU_TEST_PERMIT_GPUS\"",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // The first permit (device 0) is held elsewhere; `run` gets device 1.
    let mut first = cli();
    first.arg("hold");
    let first = crate::util::Holder::spawn(first);
    assert!(first.held_within(Duration::from_secs(20)));
    // Device 1 of the caller's "2,3" is physical GPU 3; the command sees it as its GPU 0.
    assert_eq!(seen(&[]), "3 1,0");
    assert!(first.release().0.success());
    // Exclusive: both of the caller's GPUs, in pool order.
    assert_eq!(seen(&["--exclusive"]), "2,3 0,1");
}

#[test]
fn groups_of_gpus_placement_and_live_memory_read_from_the_environment() {
    use gpu_test_permit::config::{LIVE_MEMORY_VAR, PLACEMENT_VAR, Placement};
    // Groups: device k is the k-th id in order; the groups are of devices.
    let c = with(&[(GPUS_VAR, "4,5;0,1,2")]);
    assert_eq!(c.gpus.map(|g| g.get()), Some(5));
    assert_eq!(c.gpu_ids(5), [4, 5, 0, 1, 2]);
    assert_eq!(c.gpu_groups, Some(vec![vec![0, 1], vec![2, 3, 4]]));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(
        with(&[(GPUS_VAR, "0,1;")]).gpu_groups,
        Some(vec![vec![0, 1]])
    );
    for bad in ["0,1;1,2", "0,1;;2", ";", "0;a"] {
        let c = with(&[(GPUS_VAR, bad)]);
        assert_eq!((c.gpus, c.gpu_groups.clone()), (None, None), "{bad}");
        assert_eq!(c.warnings.len(), 1, "{bad}");
    }
    // Placement and live memory: words, and a bad one falls back with a warning.
    assert_eq!(with(&[]).placement, Placement::BestFit);
    assert_eq!(
        with(&[(PLACEMENT_VAR, " spread ")]).placement,
        Placement::Spread
    );
    let c = with(&[(PLACEMENT_VAR, "first-fit")]);
    assert_eq!(
        (c.placement, c.warnings[0].to_string()),
        (
            Placement::BestFit,
            "GPU_TEST_PERMIT_PLACEMENT='first-fit' is not best-fit or spread; using best-fit"
                .to_string()
        )
    );
    assert!(with(&[]).live_memory);
    assert!(!with(&[(LIVE_MEMORY_VAR, "OFF")]).live_memory);
    let c = with(&[(LIVE_MEMORY_VAR, "no")]);
    assert!(c.live_memory);
    assert_eq!(
        c.warnings[0].to_string(),
        "GPU_TEST_PERMIT_LIVE_MEMORY='no' is not auto or off; using auto"
    );
}
