//! Table tests of every environment variable, good and bad values.

use std::ffi::OsString;
use std::time::Duration;

use gpu_test_permit::config::{CONCURRENCY_VAR, Config, DIR_VAR, SlotDir, TIMEOUT_VAR, TRACE_VAR};

fn with(var: &str, value: impl Into<OsString>) -> Config {
    let value = value.into();
    Config::from_lookup(|name| (name == var).then(|| value.clone()))
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
        (" ", "is not a whole number"),
        (" 2", "is not a whole number"),
        ("2 ", "is not a whole number"),
        ("abc", "is not a whole number"),
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
            format!("gpu-test-permit: REALIZAR_GPU_TEST_CONCURRENCY='{raw}' {problem}; using 2")
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
        "gpu-test-permit: REALIZAR_GPU_TEST_CONCURRENCY='2\u{fffd}' is not valid UTF-8; using 2"
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
        (" 90", "is not a duration like 90, 90s, 1500ms or 10m"),
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
            format!("gpu-test-permit: GPU_TEST_PERMIT_TIMEOUT='{raw}' {problem}; using 600s")
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
        "gpu-test-permit: GPU_TEST_PERMIT_TRACE='' is empty; using no trace"
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
        gpu_test_permit::nextest::group_hint(&n, 3)
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
    assert_eq!(gpu_test_permit::nextest::group_hint(&n, 2), None);

    let c = env(&[
        ("NEXTEST_EXECUTION_MODE", "process-per-test"),
        ("NEXTEST_TEST_GROUP_SLOT", "x1"),
    ]);
    assert_eq!(c.nextest.unwrap().group_slot, None);
    assert_eq!(
        c.warnings[0].to_string(),
        "gpu-test-permit: NEXTEST_TEST_GROUP_SLOT='x1' is not a slot number; using no slot"
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
            c.require.unwrap_err(),
            format!(
                "gpu-test-permit: GPU_TEST_PERMIT_REQUIRE='{raw}' {problem}; use none, any, \
                 cuda, wgpu or a comma-separated list such as cuda,wgpu"
            )
        );
    }
    #[cfg(unix)]
    assert_eq!(
        with(REQUIRE_VAR, non_utf8()).require.unwrap_err(),
        "gpu-test-permit: GPU_TEST_PERMIT_REQUIRE='2\u{fffd}' is not valid UTF-8"
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
            format!("gpu-test-permit: GPU_TEST_PERMIT_PROBE_TIMEOUT='{raw}' {problem}; using 10s")
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
        "gpu-test-permit: GPU_TEST_PERMIT_PROBE='inprocess' is not child or in-process; using child"
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
        "gpu-test-permit: GPU_TEST_PERMIT_SKIP_LOG='' is empty; using no skip log"
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
            format!("gpu-test-permit: GPU_TEST_PERMIT_GPUS='{raw}' {problem}; using auto")
        );
    }
}
