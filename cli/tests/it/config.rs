//! Table tests of every environment variable, good and bad values.

use std::ffi::{OsStr, OsString};
use std::time::Duration;

use gpu_test_permit::config::{CONCURRENCY_VAR, Config, DIR_VAR, SlotDir, TIMEOUT_VAR, TRACE_VAR};

fn with(var: &str, value: impl Into<OsString>) -> Config {
    let value = value.into();
    Config::from_lookup(|name| (name == var).then(|| value.clone()))
}

#[test]
fn auto_and_its_ceiling() {
    use gpu_test_permit::config::MAX_CONCURRENCY_VAR;
    let both = |n: &str, max: &str| {
        let (n, max) = (OsString::from(n), OsString::from(max));
        Config::from_lookup(|name| match name {
            CONCURRENCY_VAR => Some(n.clone()),
            MAX_CONCURRENCY_VAR => Some(max.clone()),
            _ => None,
        })
    };
    for raw in ["auto", " AUTO ", "Auto"] {
        let c = with(CONCURRENCY_VAR, raw);
        assert!(c.auto_concurrency, "{raw:?}");
        assert_eq!((c.concurrency.get(), c.max_concurrency.get()), (2, 4));
        assert!(c.warnings.is_empty(), "{raw:?}");
    }
    // The seed never exceeds the ceiling; a number is never auto.
    let c = both("auto", "1");
    assert_eq!((c.concurrency.get(), c.max_concurrency.get()), (1, 1));
    let c = both("3", "8");
    assert!(!c.auto_concurrency);
    assert_eq!((c.concurrency.get(), c.max_concurrency.get()), (3, 8));
    // A bad ceiling falls back to the default one, said once.
    for (raw, problem) in [
        ("0", "must be at least 1"),
        ("eight", "is not a whole number"),
        ("auto", "is not a whole number"),
    ] {
        let c = both("auto", raw);
        assert_eq!(c.max_concurrency.get(), 4, "{raw}");
        assert_eq!(
            c.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
            [format!(
                "GPU_TEST_PERMIT_MAX_CONCURRENCY='{raw}' {problem}; using 4"
            )]
        );
    }
    // A near miss of `auto` is not auto.
    let c = with(CONCURRENCY_VAR, "atuo");
    assert!(!c.auto_concurrency);
    assert_eq!(c.concurrency.get(), 2);
    assert_eq!(c.warnings.len(), 1);
}

#[cfg(unix)]
fn non_utf8() -> OsString {
    use std::os::unix::ffi::OsStringExt;
    OsString::from_vec(vec![b'2', 0xff])
}

#[test]
fn defaults_when_unset() {
    let c = Config::from_lookup(|_| None);
    assert_eq!(c.concurrency.get(), 2);
    assert_eq!(c.timeout, Duration::from_secs(600));
    assert_eq!(c.slot_dir, SlotDir::Default);
    assert_eq!(c.trace, None);
    assert!(c.nextest.is_none());
    assert!(c.warnings.is_empty());
}

#[test]
fn concurrency_values() {
    let good = [("1", 1), ("2", 2), ("16", 16), ("1024", 1024)];
    for (raw, want) in good {
        let c = with(CONCURRENCY_VAR, raw);
        assert_eq!(c.concurrency.get(), want, "{raw}");
        assert!(c.warnings.is_empty(), "{raw}");
    }
    let bad = [
        ("", "is empty"),
        (" ", "is empty"),
        ("abc", "is not a whole number"),
        ("2 2", "is not a whole number"),
        ("0", "must be at least 1"),
        ("00", "must be at least 1"),
        ("-1", "is not a whole number"),
        ("+2", "is not a whole number"),
        ("1.5", "is not a whole number"),
        ("3abc", "is not a whole number"),
        ("1025", "is larger than the maximum 1024"),
        (
            "99999999999999999999999999",
            "is larger than the maximum 1024",
        ),
    ];
    for (raw, problem) in bad {
        let c = with(CONCURRENCY_VAR, raw);
        assert_eq!(
            c.concurrency.get(),
            2,
            "{raw:?} must fall back to the default"
        );
        assert_eq!(c.warnings.len(), 1, "{raw:?}");
        assert_eq!(
            c.warnings[0].to_string(),
            format!("REALIZAR_GPU_TEST_CONCURRENCY='{raw}' {problem}; using 2")
        );
    }
}

#[cfg(unix)]
#[test]
fn non_utf8_values_are_reported_lossily() {
    let c = with(CONCURRENCY_VAR, non_utf8());
    assert_eq!(c.concurrency.get(), 2);
    assert_eq!(
        c.warnings[0].to_string(),
        "REALIZAR_GPU_TEST_CONCURRENCY='2\u{fffd}' is not valid UTF-8; using 2"
    );
    let c = with(TIMEOUT_VAR, non_utf8());
    assert_eq!(c.timeout, Duration::from_secs(600));
    assert_eq!(c.warnings.len(), 1);
}

#[test]
fn timeout_values() {
    let good = [
        ("90", Duration::from_secs(90)),
        ("90s", Duration::from_secs(90)),
        ("1500ms", Duration::from_millis(1500)),
        ("10m", Duration::from_secs(600)),
        ("2h", Duration::from_secs(7200)),
    ];
    for (raw, want) in good {
        let c = with(TIMEOUT_VAR, raw);
        assert_eq!(c.timeout, want, "{raw}");
        assert!(c.warnings.is_empty());
    }
    let bad = [
        ("", "is empty"),
        ("abc", "is not a duration like 90, 90s, 1500ms or 10m"),
        ("0", "must be greater than zero"),
        ("0ms", "must be greater than zero"),
        ("-1", "is not a duration like 90, 90s, 1500ms or 10m"),
        ("1.5", "is not a duration like 90, 90s, 1500ms or 10m"),
        ("3abc", "is not a duration like 90, 90s, 1500ms or 10m"),
        ("10 s", "is not a duration like 90, 90s, 1500ms or 10m"),
        ("99999999999999999999999", "is too large"),
        ("18446744073709551615h", "is too large"),
    ];
    for (raw, problem) in bad {
        let c = with(TIMEOUT_VAR, raw);
        assert_eq!(c.timeout, Duration::from_secs(600), "{raw:?}");
        assert_eq!(
            c.warnings[0].to_string(),
            format!("GPU_TEST_PERMIT_TIMEOUT='{raw}' {problem}; using 600s")
        );
    }
}

#[test]
fn slot_dir_values() {
    assert_eq!(
        with(DIR_VAR, "/var/lib/gpu").slot_dir,
        SlotDir::Explicit("/var/lib/gpu".into())
    );
    for raw in ["", "relative/dir", "./x"] {
        let c = with(DIR_VAR, raw);
        match &c.slot_dir {
            SlotDir::Invalid(msg) => {
                assert!(
                    msg.contains(&format!("GPU_TEST_PERMIT_DIR='{raw}'")),
                    "{msg}"
                );
                assert!(msg.contains("absolute directory path"), "{msg}");
            }
            other => panic!("{raw:?} gave {other:?}"),
        }
        // A bad directory is an error at acquisition, never a silent fallback.
        assert!(c.warnings.is_empty());
    }
}

#[test]
fn trace_values() {
    assert_eq!(
        with(TRACE_VAR, "/tmp/t.json").trace,
        Some("/tmp/t.json".into())
    );
    let c = with(TRACE_VAR, "");
    assert_eq!(c.trace, None);
    assert_eq!(
        c.warnings[0].to_string(),
        "GPU_TEST_PERMIT_TRACE='' is empty; using no trace"
    );
}

#[test]
fn nextest_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        Config::from_lookup(move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.into())
        })
    };
    let c = env(&[
        ("NEXTEST_EXECUTION_MODE", "process-per-test"),
        ("NEXTEST_RUN_ID", "abc"),
        ("NEXTEST_TEST_GROUP", "@global"),
        ("NEXTEST_TEST_GROUP_SLOT", "none"),
        ("NEXTEST_TEST_GLOBAL_SLOT", "7"),
        ("NEXTEST_TEST_NAME", "it::gpu::a"),
    ]);
    let n = c.nextest.unwrap();
    assert!(n.process_per_test);
    assert_eq!(n.run_id.as_deref(), Some("abc"));
    assert_eq!(n.test_group, None);
    assert_eq!(n.group_slot, None);
    assert_eq!(n.global_slot, Some(7));
    assert_eq!(n.test_name.as_deref(), Some("it::gpu::a"));
    assert!(
        gpu_test_permit::__private::nextest::group_hint(&n, 3)
            .unwrap()
            .contains("max-threads = 3")
    );

    let c = env(&[
        ("NEXTEST_EXECUTION_MODE", "process-per-test"),
        ("NEXTEST_TEST_GROUP", "gpu"),
        ("NEXTEST_TEST_GROUP_SLOT", "1"),
    ]);
    let n = c.nextest.unwrap();
    assert_eq!(n.test_group.as_deref(), Some("gpu"));
    assert_eq!(n.group_slot, Some(1));
    assert_eq!(gpu_test_permit::__private::nextest::group_hint(&n, 2), None);

    let c = env(&[
        ("NEXTEST_EXECUTION_MODE", "process-per-test"),
        ("NEXTEST_TEST_GROUP_SLOT", "x1"),
    ]);
    assert_eq!(c.nextest.unwrap().group_slot, None);
    assert_eq!(
        c.warnings[0].to_string(),
        "NEXTEST_TEST_GROUP_SLOT='x1' is not a slot number; using no slot"
    );
}

#[test]
fn require_values() {
    use gpu_test_permit::config::REQUIRE_VAR;
    use gpu_test_permit::probe::Backend;
    let c = Config::from_lookup(|_| None);
    assert_eq!(c.require.as_ref().unwrap().to_string(), "none");
    let good = [
        ("none", "none"),
        ("any", "any"),
        ("cuda", "cuda"),
        ("wgpu, cuda", "cuda,wgpu"),
    ];
    for (raw, shown) in good {
        let c = with(REQUIRE_VAR, raw);
        assert_eq!(c.require.as_ref().unwrap().to_string(), shown, "{raw}");
        assert!(c.warnings.is_empty(), "{raw}");
    }
    assert!(
        with(REQUIRE_VAR, "cuda")
            .require
            .unwrap()
            .requires(Backend::Cuda)
    );
    // A typo is an error kept for every GPU test to fail with, not a warning and a default.
    let bad = [
        ("cdua", "has unknown word 'cdua'"),
        ("", "is empty"),
        ("none,wgpu", "combines none with other words"),
    ];
    for (raw, problem) in bad {
        let c = with(REQUIRE_VAR, raw);
        assert!(c.warnings.is_empty(), "{raw}");
        assert_eq!(
            c.require.unwrap_err().to_string(),
            format!(
                "GPU_TEST_PERMIT_REQUIRE='{raw}' {problem}; use none, any, \
                 cuda, wgpu or a comma-separated list such as cuda,wgpu"
            )
        );
    }
    #[cfg(unix)]
    assert_eq!(
        with(REQUIRE_VAR, non_utf8())
            .require
            .unwrap_err()
            .to_string(),
        "GPU_TEST_PERMIT_REQUIRE='2\u{fffd}' is not valid UTF-8"
    );
}

#[test]
fn probe_timeout_values() {
    use gpu_test_permit::config::PROBE_TIMEOUT_VAR;
    assert_eq!(
        Config::from_lookup(|_| None).probe_timeout,
        Duration::from_secs(10)
    );
    for (raw, want) in [("3", 3000), ("500ms", 500), ("2m", 120_000)] {
        let c = with(PROBE_TIMEOUT_VAR, raw);
        assert_eq!(c.probe_timeout, Duration::from_millis(want), "{raw}");
        assert!(c.warnings.is_empty(), "{raw}");
    }
    for (raw, problem) in [
        ("0", "must be greater than zero"),
        ("soon", "is not a duration like 90, 90s, 1500ms or 10m"),
    ] {
        let c = with(PROBE_TIMEOUT_VAR, raw);
        assert_eq!(c.probe_timeout, Duration::from_secs(10), "{raw}");
        assert_eq!(
            c.warnings[0].to_string(),
            format!("GPU_TEST_PERMIT_PROBE_TIMEOUT='{raw}' {problem}; using 10s")
        );
    }
}

#[test]
fn probe_mode_and_skip_log_values() {
    use gpu_test_permit::config::{PROBE_VAR, SKIP_LOG_VAR};
    use gpu_test_permit::probe::ProbeMode;
    assert_eq!(Config::from_lookup(|_| None).probe_mode, ProbeMode::Child);
    assert_eq!(with(PROBE_VAR, "child").probe_mode, ProbeMode::Child);
    assert_eq!(
        with(PROBE_VAR, "in-process").probe_mode,
        ProbeMode::InProcess
    );
    let c = with(PROBE_VAR, "inprocess");
    assert_eq!(c.probe_mode, ProbeMode::Child);
    assert_eq!(
        c.warnings[0].to_string(),
        "GPU_TEST_PERMIT_PROBE='inprocess' is not child or in-process; using child"
    );

    assert_eq!(Config::from_lookup(|_| None).skip_log, None);
    let c = with(SKIP_LOG_VAR, "/tmp/skips.log");
    assert_eq!(
        c.skip_log.as_deref(),
        Some(std::path::Path::new("/tmp/skips.log"))
    );
    let c = with(SKIP_LOG_VAR, "");
    assert_eq!(c.skip_log, None);
    assert_eq!(
        c.warnings[0].to_string(),
        "GPU_TEST_PERMIT_SKIP_LOG='' is empty; using no skip log"
    );
}

#[test]
fn gpus_values() {
    use gpu_test_permit::config::GPUS_VAR;
    assert_eq!(Config::from_lookup(|_| None).gpus, None);
    assert_eq!(with(GPUS_VAR, "auto").gpus, None);
    assert!(with(GPUS_VAR, "auto").warnings.is_empty());
    assert_eq!(with(GPUS_VAR, "4").gpus.map(|g| g.get()), Some(4));
    for (raw, problem) in [
        ("", "is empty"),
        ("0", "must be at least 1"),
        ("two", "is not a whole number"),
        ("-1", "is not a whole number"),
        ("1.5", "is not a whole number"),
        ("99999999999999999999999", "is larger than the maximum 1024"),
    ] {
        let c = with(GPUS_VAR, raw);
        assert_eq!(c.gpus, None, "{raw}");
        assert_eq!(
            c.warnings[0].to_string(),
            format!("GPU_TEST_PERMIT_GPUS='{raw}' {problem}; using auto")
        );
    }
}

#[test]
fn surrounding_whitespace_is_trimmed_in_numbers_durations_and_words() {
    use gpu_test_permit::config::{GPUS_VAR, PROBE_TIMEOUT_VAR, PROBE_VAR};
    use gpu_test_permit::probe::ProbeMode;
    for raw in ["1 ", " 1", "\t1\n", " 1 "] {
        let c = with(CONCURRENCY_VAR, raw);
        assert_eq!(c.concurrency.get(), 1, "{raw:?}");
        assert!(c.warnings.is_empty(), "{raw:?}: {:?}", c.warnings);
    }
    for raw in ["90s ", " 90", "\t90\n"] {
        let c = with(TIMEOUT_VAR, raw);
        assert_eq!(c.timeout, Duration::from_secs(90), "{raw:?}");
        assert!(c.warnings.is_empty(), "{raw:?}: {:?}", c.warnings);
    }
    let c = with(PROBE_TIMEOUT_VAR, " 1500ms ");
    assert_eq!(
        (c.probe_timeout, c.warnings.len()),
        (Duration::from_millis(1500), 0)
    );
    let c = with(GPUS_VAR, " 3 ");
    assert_eq!((c.gpus.map(|g| g.get()), c.warnings.len()), (Some(3), 0));
    let c = with(PROBE_VAR, "in-process ");
    assert_eq!((c.probe_mode, c.warnings.len()), (ProbeMode::InProcess, 0));
    let c = Config::from_lookup(|name| match name {
        "NEXTEST_RUN_ID" => Some("r".into()),
        "NEXTEST_TEST_GROUP_SLOT" => Some(" 1 ".into()),
        "NEXTEST_TEST_GLOBAL_SLOT" => Some("none ".into()),
        _ => None,
    });
    let n = c.nextest.unwrap();
    assert_eq!((n.group_slot, n.global_slot), (Some(1), None));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // Inner whitespace is still wrong, and the warning shows the value as it was.
    let c = with(CONCURRENCY_VAR, " 1 2 ");
    assert_eq!(
        c.warnings[0].to_string(),
        "REALIZAR_GPU_TEST_CONCURRENCY=' 1 2 ' is not a whole number; using 2"
    );
}

#[test]
fn strict_config_values() {
    use gpu_test_permit::config::STRICT_VAR;
    let strict = |value: &str, concurrency: &str| {
        let (value, concurrency) = (OsString::from(value), OsString::from(concurrency));
        Config::from_lookup(|name| match name {
            STRICT_VAR => Some(value.clone()),
            CONCURRENCY_VAR => Some(concurrency.clone()),
            _ => None,
        })
    };
    for on in ["1", "true", " yes", "ON"] {
        let c = strict(on, "4");
        assert!(c.strict, "{on}");
        assert_eq!(c.strict_failure(), None, "no warnings, no failure");
        let msg = strict(on, "4x").strict_failure().unwrap();
        assert!(
            msg.contains("GPU_TEST_PERMIT_STRICT_CONFIG is set"),
            "{msg}"
        );
        assert!(
            msg.contains("REALIZAR_GPU_TEST_CONCURRENCY='4x' is not a whole number; using 2"),
            "{msg}"
        );
    }
    for off in ["0", "false", "no", "off", ""] {
        let c = strict(off, "4x");
        assert!(!c.strict && c.strict_failure().is_none(), "{off:?}");
    }
    // A value that means nothing is a warning and keeps strictness on.
    let c = strict("sometimes", "4");
    assert!(c.strict);
    assert!(c.strict_failure().unwrap().contains(
        "GPU_TEST_PERMIT_STRICT_CONFIG='sometimes' is not 1, true, yes, on, 0, false, no or off"
    ));
}

const CHILD_MARKER: &str = "GTP_TEST_CONFIG_CHILD";

/// Does nothing unless started by the tests below as a child process of this test binary,
/// under libtest's output capture: then it reads the configuration of its environment.
#[test]
fn config_child() {
    if std::env::var_os(CHILD_MARKER).is_some() {
        let _ = Config::global();
    }
}

/// Runs `config_child` in a child libtest process (output captured, as in `cargo test`) with a
/// clean permit environment plus `env`.
fn run_config_child(env: &[(&str, &str)]) -> std::process::Output {
    let dir = crate::util::tempdir();
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args(["config::config_child", "--exact", "--test-threads=1"]);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("GPU_TEST_PERMIT_")
            || k.starts_with("NEXTEST")
            || k.starts_with("RUST_TEST")
            || k == CONCURRENCY_VAR
        {
            c.env_remove(&*k);
        }
    }
    c.env(CHILD_MARKER, "1")
        .env("GPU_TEST_PERMIT_DIR", dir.path());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn config_warnings_reach_the_real_stderr_under_libtest_capture() {
    let out = run_config_child(&[(CONCURRENCY_VAR, "3x")]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains(CONCURRENCY_VAR))
            .collect::<Vec<_>>(),
        ["gpu-test-permit: REALIZAR_GPU_TEST_CONCURRENCY='3x' is not a whole number; using 2"],
        "{stderr}"
    );
}

#[test]
fn strict_config_fails_the_test_that_reads_a_bad_value() {
    let out = run_config_child(&[
        (CONCURRENCY_VAR, "3x"),
        ("GPU_TEST_PERMIT_STRICT_CONFIG", "1"),
    ]);
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("1 failed"), "{all}");
    assert!(
        all.contains("GPU_TEST_PERMIT_STRICT_CONFIG is set, so configuration warnings are errors"),
        "{all}"
    );
    assert!(all.contains("'3x' is not a whole number"), "{all}");
    // Without a bad value strictness changes nothing.
    let out = run_config_child(&[("GPU_TEST_PERMIT_STRICT_CONFIG", "1")]);
    assert!(out.status.success());
}

#[test]
fn inherited_permit_values_round_trip_and_bad_ones_say_why() {
    use gpu_test_permit::config::{INHERITED_VAR, InheritedPermit};
    let good = "1:2x2:exclusive:0=5/1/10,1=6/1/11,2=7/1/12,3=8/1/13:/tmp/slots";
    let p = InheritedPermit::parse(OsStr::new(good)).unwrap();
    assert!(p.exclusive);
    assert_eq!((p.per_gpu, p.gpus, p.slots.len()), (2, 2, 4));
    assert_eq!(p.to_os_string(), good);
    assert_eq!(with(INHERITED_VAR, good).inherited, Some(Ok(p)));
    assert_eq!(with(CONCURRENCY_VAR, "1").inherited, None);
    for (bad, says) in [
        ("", "fewer than five"),
        ("1:1x1:shared:/tmp", "fewer than five"),
        ("2:1x1:shared:0=5/1/10:/tmp", "format version 2"),
        ("1:0x1:shared:0=5/1/10:/tmp", "layout `0x1`"),
        ("1:1x1:both:0=5/1/10:/tmp", "kind `both`"),
        ("1:1x1:shared:0=5/1:/tmp", "slot `0=5/1`"),
        ("1:1x1:shared:0=5/1/10/3:/tmp", "slot `0=5/1/10/3`"),
        ("1:1x1:shared:1=5/1/10:/tmp", "do not fit"),
        ("1:2x1:exclusive:0=5/1/10:/tmp", "do not fit"),
        ("1:2x1:exclusive:1=5/1/10,0=6/1/11:/tmp", "do not fit"),
        ("1:1x1:shared:0=5/1/10:relative", "not an absolute path"),
    ] {
        let err = InheritedPermit::parse(OsStr::new(bad)).unwrap_err();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(matches!(with(INHERITED_VAR, bad).inherited, Some(Err(_))));
        // A bad value is the pool's to report (once, when it is first used), not a warning
        // that GPU_TEST_PERMIT_STRICT_CONFIG would turn into failures.
        assert!(with(INHERITED_VAR, bad).warnings.is_empty());
    }
}

#[test]
fn gpu_memory_takes_sizes_and_percentages_and_rejects_the_rest_with_a_warning() {
    use gpu_test_permit::config::{GPU_MEMORY_VAR, MemoryBudget};
    let cases: [(&str, MemoryBudget); 9] = [
        ("64GiB", MemoryBudget::Bytes(64 << 30)),
        (" 64 gib ", MemoryBudget::Bytes(64 << 30)),
        ("80GB", MemoryBudget::Bytes(80_000_000_000)),
        ("80G", MemoryBudget::Bytes(80_000_000_000)),
        ("512MiB", MemoryBudget::Bytes(512 << 20)),
        ("1.5TiB", MemoryBudget::Bytes(3 << 39)),
        ("4096", MemoryBudget::Bytes(4096)),
        ("90%", MemoryBudget::Percent(90.0)),
        ("100 %", MemoryBudget::Percent(100.0)),
    ];
    for (raw, want) in cases {
        let c = with(GPU_MEMORY_VAR, raw);
        assert_eq!(c.gpu_memory, Some(want), "{raw:?}");
        assert!(c.warnings.is_empty(), "{raw:?}: {:?}", c.warnings);
    }
    for raw in [
        "", "lots", "64 GiBs", "0", "0GiB", "0%", "101%", "-5GB", ".5G", "1e9", "NaN%", "5.G",
    ] {
        let c = with(GPU_MEMORY_VAR, raw);
        assert_eq!(c.gpu_memory, None, "{raw:?}");
        assert_eq!(c.warnings.len(), 1, "{raw:?}");
        let text = c.warnings[0].to_string();
        assert!(text.starts_with("GPU_TEST_PERMIT_GPU_MEMORY='"), "{text}");
        assert!(
            text.ends_with("using no memory budget (memory declarations count as one permit)"),
            "{text}"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        let c = with(GPU_MEMORY_VAR, OsString::from_vec(vec![b'6', 0xff]));
        assert_eq!((c.gpu_memory, c.warnings.len()), (None, 1));
    }
}

/// A size too large for any GPU (or for a byte count at all) is refused as too large, not as
/// "a size above zero": in the variable, and in `--memory` of `hold` and `run`.
#[test]
fn a_memory_size_too_large_is_refused_as_too_large() {
    use gpu_test_permit::__private::config::parse_memory;
    use gpu_test_permit::config::{GPU_MEMORY_VAR, MemoryBudget};
    let huge = [
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999999999",
        &"9".repeat(400),
        "2000TB",
        "1025TiB",
        "1125899906842625",
    ];
    for raw in huge {
        let text = parse_memory(&raw.into()).unwrap_err().to_string();
        assert_eq!(text, "is larger than 1 PiB, more than any GPU has", "{raw}");
        let c = with(GPU_MEMORY_VAR, raw);
        assert_eq!(c.gpu_memory, None, "{raw}");
        let warning = c.warnings[0].to_string();
        assert!(
            warning.starts_with(&format!(
                "GPU_TEST_PERMIT_GPU_MEMORY='{raw}' is larger than 1 PiB"
            )),
            "{warning}"
        );
    }
    // 1 PiB itself is taken; zero is still "above zero".
    assert_eq!(
        parse_memory(&"1024TiB".into()),
        Ok(MemoryBudget::Bytes(1 << 50))
    );
    let zero = parse_memory(&"0".into()).unwrap_err().to_string();
    assert!(zero.starts_with("must be a size above zero"), "{zero}");
    let dir = crate::util::tempdir();
    for command in ["hold", "run"] {
        let mut c = crate::util::cli(dir.path(), 2);
        c.args([command, "--memory", "18446744073709551615"]);
        if command == "run" {
            c.args(["--", "true"]);
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {err}");
        assert_eq!(
            err.trim_end(),
            format!(
                "gpu-test-permit: {command}: --memory '18446744073709551615' is larger than 1 \
                 PiB, more than any GPU has"
            ),
            "{command}"
        );
    }
}

#[test]
fn the_state_directory_outlives_a_reboot_and_follows_a_named_slot_directory() {
    use gpu_test_permit::config::{Config, STATE_VAR, default_slot_dir};
    use std::path::{Path, PathBuf};
    let env = |vars: &'static [(&'static str, &'static str)]| {
        Config::from_lookup(move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).into())
        })
    };
    let default = default_slot_dir();
    let named = Path::new("/srv/gpu-slots");
    // XDG_STATE_HOME first, then HOME; for the default slot directory only.
    let cfg = env(&[("XDG_STATE_HOME", "/x/state"), ("HOME", "/home/u")]);
    assert_eq!(
        cfg.state_dir_for(&default),
        PathBuf::from("/x/state/gpu-test-permit")
    );
    assert_eq!(cfg.state_dir_for(named), named);
    let cfg = env(&[("XDG_STATE_HOME", "relative"), ("HOME", "/home/u")]);
    assert_eq!(
        cfg.state_dir_for(&default),
        PathBuf::from("/home/u/.local/state/gpu-test-permit")
    );
    // Neither: the slot directory itself.
    assert_eq!(env(&[]).state_dir_for(&default), default);
    // Named: for every slot directory.
    let cfg = env(&[(STATE_VAR, "/var/lib/gpu-state"), ("HOME", "/home/u")]);
    assert_eq!(
        cfg.state_dir_for(&default),
        PathBuf::from("/var/lib/gpu-state")
    );
    assert_eq!(
        cfg.state_dir_for(named),
        PathBuf::from("/var/lib/gpu-state")
    );
    // A relative path is refused with a warning, never taken relative to wherever a test runs.
    let cfg = env(&[(STATE_VAR, "state"), ("HOME", "/home/u")]);
    assert_eq!(cfg.state_dir, None);
    assert_eq!(
        cfg.warnings[0].to_string(),
        "GPU_TEST_PERMIT_STATE='state' is not an absolute path; using the default state directory"
    );
}

#[test]
fn weights_are_declared_or_learned_and_a_bad_value_falls_back_to_declared() {
    use gpu_test_permit::config::{WEIGHTS_VAR, Weights};
    assert_eq!(Config::from_lookup(|_| None).weights, Weights::Declared);
    for (raw, want) in [
        ("declared", Weights::Declared),
        (" Declared\n", Weights::Declared),
        ("learned", Weights::Learned),
        ("\tLEARNED ", Weights::Learned),
    ] {
        let c = with(WEIGHTS_VAR, raw);
        assert_eq!(c.weights, want, "{raw:?}");
        assert!(c.warnings.is_empty(), "{raw:?}: {:?}", c.warnings);
    }
    for raw in ["", "learn", "auto", "learned,declared", "1"] {
        let c = with(WEIGHTS_VAR, raw);
        assert_eq!(c.weights, Weights::Declared, "{raw:?}");
        assert_eq!(
            c.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
            [format!(
                "GPU_TEST_PERMIT_WEIGHTS='{raw}' is not declared or learned; using declared"
            )],
        );
    }
    #[cfg(unix)]
    {
        let c = with(WEIGHTS_VAR, non_utf8());
        assert_eq!((c.weights, c.warnings.len()), (Weights::Declared, 1));
    }
}

/// An empty `GPU_TEST_PERMIT_CONCURRENCY` (as a CI file's `VAR=` leaves it) is unset: a
/// process with `REALIZAR_GPU_TEST_CONCURRENCY=1` beside it lays out N = 1 and warns of
/// nothing, and `config` names the variable N came from; the other way round likewise.
#[test]
fn an_empty_concurrency_name_leaves_n_to_the_other() {
    use crate::util::{bin, clear_permit_env, tempdir};
    use gpu_test_permit::config::CONCURRENCY_ALIAS_VAR;
    for (empty, set) in [
        (CONCURRENCY_ALIAS_VAR, CONCURRENCY_VAR),
        (CONCURRENCY_VAR, CONCURRENCY_ALIAS_VAR),
    ] {
        let dir = tempdir();
        let command = |args: &[&str]| {
            let mut c = std::process::Command::new(bin());
            clear_permit_env(&mut c);
            c.env(DIR_VAR, dir.path())
                .env(empty, "")
                .env(set, "1")
                .args(args);
            c.output().unwrap()
        };
        let out = command(&["hold", "--for", "1ms"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{empty}='': {err}");
        assert!(!err.contains("CONCURRENCY"), "{empty}='': {err}");
        let out = command(&["status"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines()
                .any(|l| l == "layout: N = 1 permit(s) per GPU x 1 GPU(s)"),
            "{empty}='': {text}"
        );
        let out = command(&["config"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(set) && l.contains(" 1")),
            "{empty}='': {text}"
        );
        assert!(
            !text.contains("using \n") && !text.ends_with("using "),
            "{text}"
        );
    }
}
