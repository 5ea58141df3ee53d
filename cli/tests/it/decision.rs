//! Run / skip / fail: the decision table, the policy syntax, and the macro in real processes.

use std::time::Duration;

use gpu_test_permit::decision::{Decision, Policy, decide, decide_any, skip_line};
use gpu_test_permit::probe::{Backend, Device, ProbeOutcome, ProbeReport, ProbeSource};

fn report(backend: Backend, outcome: ProbeOutcome) -> ProbeReport {
    // ProbeReport is non_exhaustive: build it the way a user would receive it, from JSON.
    let json = format!(
        r#"{{"backend":"{backend}","outcome":{},"duration_ms":12.0,"source":"child"}}"#,
        outcome.to_json()
    );
    let r = ProbeReport::from_json(&json).unwrap();
    assert_eq!(r.source, ProbeSource::Child);
    r
}

fn device() -> Device {
    let json = format!(
        r#"{{"status":"devices","devices":[{{"index":0,"name":"Test GPU","api":"cuda","kind":"discrete","driver":"CUDA 12.8","memory_bytes":{}}}]}}"#,
        1_u64 << 30
    );
    ProbeOutcome::from_json(&json).unwrap().devices().unwrap()[0].clone()
}

/// Every outcome, by name, with a value of it.
fn outcomes() -> Vec<(&'static str, ProbeOutcome)> {
    let tail = || "driver: last words".to_string();
    vec![
        (
            "devices",
            ProbeOutcome::Devices {
                devices: vec![device()],
            },
        ),
        (
            "no-devices",
            ProbeOutcome::NoDevices {
                detail: "none found".into(),
            },
        ),
        (
            "not-installed",
            ProbeOutcome::NotInstalled {
                detail: "no libcuda".into(),
            },
        ),
        ("not-built", ProbeOutcome::NotBuilt),
        (
            "error",
            ProbeOutcome::Error {
                detail: "cuInit failed".into(),
            },
        ),
        (
            "crashed",
            ProbeOutcome::Crashed {
                signal: Some(11),
                exit_code: None,
                stderr_tail: tail(),
            },
        ),
        (
            "timed-out",
            ProbeOutcome::TimedOut {
                after: Duration::from_secs(10),
                stderr_tail: tail(),
            },
        ),
        (
            "malformed",
            ProbeOutcome::Malformed {
                detail: "garbage".into(),
                stderr_tail: tail(),
            },
        ),
    ]
}

fn letter(d: &Decision) -> char {
    match d {
        Decision::Run => 'R',
        Decision::Skip(_) => 'S',
        Decision::Fail(_) => 'F',
    }
}

#[test]
fn decision_table_every_outcome_by_every_policy() {
    let policies = ["none", "any", "cuda", "wgpu", "cuda,wgpu"];
    // For a test of backend `cuda`; columns follow `policies`.
    let want_for_cuda: [(&str, &str); 8] = [
        ("devices", "RRRRR"),
        ("no-devices", "SSFSF"),
        ("not-installed", "SSFSF"),
        ("not-built", "SSFSF"),
        ("error", "SFFSF"),
        ("crashed", "SFFSF"),
        ("timed-out", "SFFSF"),
        ("malformed", "SFFSF"),
    ];
    let outcomes = outcomes();
    assert_eq!(
        outcomes.len(),
        want_for_cuda.len(),
        "every outcome is in the table"
    );
    for backend in Backend::ALL {
        for ((name, outcome), (row, want)) in outcomes.iter().zip(want_for_cuda) {
            assert_eq!(*name, row);
            let r = report(backend, outcome.clone());
            for (col, policy) in policies.iter().enumerate() {
                // The same table holds for wgpu with the cuda and wgpu columns swapped.
                let policy = match (backend, *policy) {
                    (Backend::Wgpu, "cuda") => "wgpu",
                    (Backend::Wgpu, "wgpu") => "cuda",
                    (_, p) => p,
                };
                let p: Policy = policy.parse().unwrap();
                let got = decide(&r, &p);
                let expected = want.as_bytes()[col] as char;
                assert_eq!(
                    letter(&got),
                    expected,
                    "{backend} {name} under {policy}: {got:?}"
                );
                // Reasons name the backend and what happened.
                match &got {
                    Decision::Run => {}
                    Decision::Skip(why) | Decision::Fail(why) => {
                        assert!(why.contains(backend.name()), "{why}");
                        assert!(why.contains(&outcome.to_string()), "{why}");
                    }
                }
            }
        }
    }
}

#[test]
fn reasons_say_what_to_do() {
    let crashed = report(Backend::Cuda, outcomes()[5].1.clone());
    let Decision::Skip(why) = decide(&crashed, &Policy::none()) else {
        panic!()
    };
    assert!(why.contains("driver is broken"), "{why}");
    assert!(why.contains("signal 11 (SIGSEGV)"), "{why}");
    assert!(why.contains("last words"), "{why}");
    assert!(why.contains("GPU_TEST_PERMIT_REQUIRE=cuda"), "{why}");

    let unbuilt = report(Backend::Wgpu, ProbeOutcome::NotBuilt);
    let Decision::Fail(why) = decide(&unbuilt, &Policy::none().require(Backend::Wgpu)) else {
        panic!()
    };
    assert!(
        why.starts_with("GPU_TEST_PERMIT_REQUIRE=wgpu requires wgpu, but not built"),
        "{why}"
    );
    assert!(why.contains("enable the `wgpu` feature"), "{why}");
}

#[test]
fn any_requires_some_backend_with_a_device() {
    let any = Policy::any();
    let absent = |b| {
        report(
            b,
            ProbeOutcome::NotInstalled {
                detail: "nothing".into(),
            },
        )
    };
    let present = report(
        Backend::Wgpu,
        ProbeOutcome::Devices {
            devices: vec![device()],
        },
    );
    let cuda = absent(Backend::Cuda);
    assert!(matches!(
        decide_any(&cuda, std::slice::from_ref(&present), &any),
        Decision::Skip(_)
    ));
    match decide_any(&cuda, &[absent(Backend::Wgpu)], &any) {
        Decision::Fail(why) => {
            assert!(why.contains("requires some GPU backend"), "{why}");
            assert!(why.contains("cuda: not installed") && why.contains("wgpu: not installed"));
        }
        other => panic!("{other:?}"),
    }
    // Without `any`, decide_any is decide.
    assert_eq!(
        decide_any(&cuda, &[absent(Backend::Wgpu)], &Policy::none()),
        decide(&cuda, &Policy::none())
    );
    assert_eq!(decide_any(&present, &[], &any), Decision::Run);
}

#[test]
fn policy_syntax() {
    let good = [
        ("none", "none"),
        ("any", "any"),
        ("cuda", "cuda"),
        ("wgpu", "wgpu"),
        ("cuda,wgpu", "cuda,wgpu"),
        ("wgpu, cuda", "cuda,wgpu"),
        (" cuda ", "cuda"),
        ("cuda,cuda", "cuda"),
        ("any,cuda", "any,cuda"),
    ];
    for (raw, shown) in good {
        let p: Policy = raw.parse().unwrap_or_else(|e| panic!("{raw:?}: {e}"));
        assert_eq!(p.to_string(), shown, "{raw:?}");
        assert_eq!(
            p.to_string().parse::<Policy>().unwrap(),
            p,
            "round trip {raw:?}"
        );
    }
    let bad = [
        ("", "is empty"),
        ("  ", "is empty"),
        ("cdua", "unknown word 'cdua'"),
        ("CUDA", "unknown word 'CUDA'"),
        ("cuda;wgpu", "unknown word 'cuda;wgpu'"),
        ("all", "unknown word 'all'"),
        ("cuda,", "has an empty entry"),
        ("none,cuda", "combines none"),
        ("vulkan", "unknown word 'vulkan'"),
    ];
    for (raw, problem) in bad {
        let e = raw.parse::<Policy>().unwrap_err().to_string();
        assert!(e.contains(problem), "{raw:?}: {e}");
        assert!(e.contains("use none, any, cuda, wgpu"), "{raw:?}: {e}");
    }
}

#[test]
fn skip_line_is_one_stable_line() {
    assert_eq!(
        skip_line(
            "gpu::matmul",
            Backend::Wgpu,
            "wgpu no devices (x)\nsecond line"
        ),
        "gpu-test-permit: SKIP gpu::matmul backend=wgpu: wgpu no devices (x) | second line"
    );
}

// ---- the macro, in child processes with their own environment ----

/// Helper run in a child: a test guarded by the macro.
#[test]
#[ignore = "helper: run in a child process by macro_* tests"]
fn macro_helper() {
    gpu_test_permit::require_backend!(Backend::Cuda);
    println!("REACHED the test body");
}

fn macro_child(mode: &str, require: Option<&str>, log: &std::path::Path) -> std::process::Output {
    let mut c = crate::probe::helper("decision::macro_helper");
    c.env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
        .env("CUDA_PROBE_STUB", mode)
        .env("GPU_TEST_PERMIT_SKIP_LOG", log);
    if let Some(r) = require {
        c.env("GPU_TEST_PERMIT_REQUIRE", r);
    }
    c.output().unwrap()
}

#[test]
fn macro_skips_with_one_line_and_a_ledger_entry() {
    let dir = crate::util::tempdir();
    let log = dir.path().join("skips.log");
    let outs: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|_| s.spawn(|| macro_child("nodevice", None, &log)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want = "gpu-test-permit: SKIP decision::macro_helper backend=cuda: cuda no devices \
                (cuInit reported CUDA_ERROR_NO_DEVICE (100))";
    for out in &outs {
        let (stdout, stderr) = crate::probe::text(out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(!stdout.contains("REACHED"), "{stdout}");
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(" SKIP ")).collect();
        assert_eq!(lines, [want], "{stderr}");
    }
    let ledger = std::fs::read_to_string(&log).unwrap();
    assert_eq!(ledger, format!("{want}\n").repeat(3));
}

#[test]
fn macro_runs_fails_and_rejects_typos() {
    let dir = crate::util::tempdir();
    let log = dir.path().join("skips.log");

    let out = macro_child("ok", Some("cuda"), &log);
    let (stdout, stderr) = crate::probe::text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("REACHED the test body"), "{stdout}");

    let out = macro_child("segv", Some("cuda"), &log);
    let (stdout, stderr) = crate::probe::text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "gpu-test-permit: FAIL backend=cuda: GPU_TEST_PERMIT_REQUIRE=cuda requires cuda, \
             but the probe child crashed with signal 11 (SIGSEGV)"
        ),
        "{stderr}"
    );

    let out = macro_child("ok", Some("cdua"), &log);
    let (stdout, stderr) = crate::probe::text(&out);
    assert!(
        !out.status.success(),
        "a typo must fail, not skip: {stdout}\n{stderr}"
    );
    assert!(!stdout.contains("REACHED"), "{stdout}");
    assert!(
        stderr.contains("GPU_TEST_PERMIT_REQUIRE='cdua' has unknown word 'cdua'"),
        "{stderr}"
    );
    assert!(!log.exists(), "no skips were logged");
}
