//! Run, skip or fail: what a GPU test does given what the machine has and what is required.
//!
//! On a laptop without a GPU, GPU tests should skip, visibly. On a GPU runner a skip must never
//! pass silently: `GPU_TEST_PERMIT_REQUIRE` names the backends whose absence is a failure. The
//! decision itself is the pure function [`decide`]; [`check`] feeds it the cached [`probe`] and
//! the environment's [`Policy`], and [`require_backend!`](crate::require_backend) turns it into
//! one line at the top of a test:
//!
//! ```
//! use gpu_test_permit::probe::Backend;
//!
//! fn renders_a_triangle() {
//!     gpu_test_permit::require_backend!(Backend::Wgpu); // returns here on a machine without one
//!     // ... create the wgpu device and test ...
//! }
//! # renders_a_triangle();
//! ```
//!
//! | probe outcome | backend required | not required |
//! |---|---|---|
//! | devices | run | run |
//! | no devices, not installed, not built | **fail** | skip |
//! | crashed, timed out, malformed answer, driver error | **fail** | skip, saying the driver is broken |
//!
//! A broken driver of an optional backend skips rather than fails, because the test cannot run
//! and nobody asked for the backend; the skip reason says "crashed" or "hung" loudly so a
//! person reading the log sees that the machine needs attention. `GPU_TEST_PERMIT_REQUIRE=any`
//! requires *some* backend: a broken driver fails, and an absent backend skips only while
//! another backend has a device ([`decide_any`]).
//!
//! A skip prints one line on standard error, `gpu-test-permit: SKIP <test> backend=<backend>:
//! <reason>`, and appends the same line to the file named by `GPU_TEST_PERMIT_SKIP_LOG`, so CI
//! can count skips (`grep -c`).

use std::io::Write;

pub use crate::backend::{Policy, PolicyError};
use crate::config::{Config, REQUIRE_VAR, SKIP_LOG_VAR};
use crate::probe::{Backend, ProbeOutcome, ProbeReport, probe};

/// What a GPU test should do.
///
/// ```
/// use gpu_test_permit::decision::{decide, Decision, Policy};
/// use gpu_test_permit::probe::{Backend, ProbeReport};
///
/// let absent = ProbeReport::from_json(
///     r#"{"backend":"cuda","outcome":{"status":"not_installed","detail":"no libcuda"},"duration_ms":1,"source":"child"}"#,
/// )?;
/// assert!(matches!(decide(&absent, &Policy::none()), Decision::Skip(_)));
/// let required = Policy::none().require(Backend::Cuda);
/// assert!(matches!(decide(&absent, &required), Decision::Fail(_)));
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The backend has a device: run the test.
    Run,
    /// Skip the test, for this reason.
    Skip(String),
    /// Fail the test, for this reason.
    Fail(String),
}

/// Decides what a test of `report.backend` does. Pure: no probing, no environment.
///
/// See the [module documentation](self) for the table. With [`Policy::any`], an absent
/// backend skips here; [`decide_any`] adds the check that some other backend is present.
///
/// ```
/// use gpu_test_permit::decision::{decide, Decision, Policy};
/// use gpu_test_permit::probe::{probe, Backend};
///
/// let report = probe(Backend::Cuda);
/// match decide(&report, &Policy::none()) {
///     Decision::Run => println!("this machine has CUDA"),
///     Decision::Skip(why) => println!("would skip: {why}"),
///     Decision::Fail(why) => unreachable!("nothing is required: {why}"),
/// }
/// ```
pub fn decide(report: &ProbeReport, policy: &Policy) -> Decision {
    let b = report.backend;
    let outcome = &report.outcome;
    if outcome.has_devices() {
        return Decision::Run;
    }
    let required = policy.requires(b);
    let broken = outcome.is_broken();
    let hint = match outcome {
        ProbeOutcome::NotBuilt if b == Backend::Wgpu => " (without its `wgpu` feature \
             gpu-test-permit probes wgpu through the Vulkan loader, which stands in for wgpu \
             neither on macOS nor where WGPU_BACKEND names no Vulkan; enable the `wgpu` feature \
             in your dev-dependencies)"
            .to_string(),
        ProbeOutcome::NotBuilt => {
            format!(" (enable the `{b}` feature of gpu-test-permit in your dev-dependencies)")
        }
        _ => String::new(),
    };
    // A broken answer another test process found and the run cache kept: say so.
    let cached = match report.run_cache_note() {
        Some(note) => format!(" ({note})"),
        None => String::new(),
    };
    if required {
        Decision::Fail(format!(
            "{REQUIRE_VAR}={policy} requires {b}, but {outcome}{hint}{cached}"
        ))
    } else if broken && policy.requires_any() {
        Decision::Fail(format!(
            "{REQUIRE_VAR}={policy} and the {b} driver is broken: {outcome}{cached}"
        ))
    } else if broken {
        Decision::Skip(format!(
            "the {b} driver is broken, so this test cannot run: {outcome}{cached}. Fix the \
             driver, or set {REQUIRE_VAR}={b} to make this a failure"
        ))
    } else {
        Decision::Skip(format!("{b} {outcome}{hint}"))
    }
}

/// [`decide`], plus the rule of `GPU_TEST_PERMIT_REQUIRE=any`: a test whose backend is absent
/// fails when no backend in `others` has a device either. Pure.
///
/// ```
/// use gpu_test_permit::decision::{decide_any, Decision, Policy};
/// use gpu_test_permit::probe::ProbeReport;
///
/// let absent = ProbeReport::from_json(
///     r#"{"backend":"cuda","outcome":{"status":"not_installed","detail":"no libcuda"},"duration_ms":1,"source":"child"}"#,
/// )?;
/// let wgpu = ProbeReport::from_json(
///     r#"{"backend":"wgpu","outcome":{"status":"devices","devices":[{"index":0,"name":"llvmpipe","api":"vulkan","kind":"cpu"}]},"duration_ms":9,"source":"child"}"#,
/// )?;
/// let any: Policy = "any".parse().unwrap();
/// // CUDA is absent but wgpu has a device: the CUDA test skips.
/// assert!(matches!(decide_any(&absent, &[wgpu], &any), Decision::Skip(_)));
/// // No backend has one: under `any`, the test fails.
/// assert!(matches!(decide_any(&absent, &[], &any), Decision::Fail(_)));
/// # Ok::<(), String>(())
/// ```
pub fn decide_any(report: &ProbeReport, others: &[ProbeReport], policy: &Policy) -> Decision {
    decide_with_others(report, policy, &|| others.to_vec())
}

/// The one place of the `any` rule; `others` is asked for only where the rule needs them.
fn decide_with_others(
    report: &ProbeReport,
    policy: &Policy,
    others: &dyn Fn() -> Vec<ProbeReport>,
) -> Decision {
    let d = decide(report, policy);
    if !(policy.requires_any() && matches!(d, Decision::Skip(_))) {
        return d;
    }
    let others = others();
    for r in &others {
        if r.outcome.has_devices() {
            return d;
        }
    }
    let mut why = format!("{REQUIRE_VAR}={policy} requires some GPU backend, but ");
    why.push_str(&with_cache_note(report));
    for r in &others {
        why.push_str("; ");
        why.push_str(&with_cache_note(r));
    }
    Decision::Fail(why)
}

/// `report` as text, with its [run cache note](ProbeReport::run_cache_note) where it has one.
fn with_cache_note(report: &ProbeReport) -> String {
    match report.run_cache_note() {
        Some(note) => format!("{report} ({note})"),
        None => format!("{report}"),
    }
}

/// What a test of `backend` should do on this machine: the cached [`probe`] under the
/// environment's policy. An invalid `GPU_TEST_PERMIT_REQUIRE` fails every GPU test with the
/// reason.
///
/// ```
/// use gpu_test_permit::decision::{check, Decision};
/// use gpu_test_permit::probe::Backend;
///
/// if let Decision::Run = check(Backend::Wgpu) {
///     // ... build the wgpu device and test ...
/// }
/// ```
pub fn check(backend: Backend) -> Decision {
    crate::runs::tally::gpu_test(&crate::nextest::current_test_name());
    let policy = match &Config::global().require {
        Ok(p) => p,
        Err(e) => return Decision::Fail(format!("{e}")),
    };
    decide_with_others(&probe(backend), policy, &|| {
        let mut others = Vec::new();
        for b in Backend::ALL {
            if b != backend {
                others.push(probe(b));
            }
        }
        others
    })
}

/// The line printed for a skip: `gpu-test-permit: SKIP <test> backend=<backend>: <reason>`
/// (newlines in the reason become ` | `, so it stays one line).
///
/// ```
/// use gpu_test_permit::decision::skip_line;
/// use gpu_test_permit::probe::Backend;
///
/// assert_eq!(
///     skip_line("gpu::matmul", Backend::Cuda, "CUDA is not installed\nno libcuda"),
///     "gpu-test-permit: SKIP gpu::matmul backend=cuda: CUDA is not installed | no libcuda"
/// );
/// ```
pub fn skip_line(test: &str, backend: Backend, reason: &str) -> String {
    format!(
        "gpu-test-permit: SKIP {test} backend={backend}: {}",
        crate::one_line(reason)
    )
}

/// Reports a skip of the running test: prints [`skip_line`] on standard error and appends it
/// to `GPU_TEST_PERMIT_SKIP_LOG` when that is set (one `O_APPEND` write, so lines from
/// concurrent test processes never interleave). The test name comes from
/// [`nextest::current_test_name`](crate::nextest::current_test_name). Under nextest the skip is
/// also recorded for the run, so that `gpu-test-permit junit` can
/// mark it skipped in the JUnit report; under `cargo test` the binary counts it in the line it
/// prints at exit.
///
/// ```
/// use gpu_test_permit::decision::{check, report_skip, Decision};
/// use gpu_test_permit::probe::Backend;
///
/// // What `require_backend!` does, by hand.
/// fn gpu_test() {
///     match check(Backend::Cuda) {
///         Decision::Run => { /* ... the test ... */ }
///         Decision::Skip(reason) => return report_skip(Backend::Cuda, &reason),
///         Decision::Fail(reason) => panic!("{reason}"),
///     }
/// }
/// # let _ = gpu_test;
/// ```
pub fn report_skip(backend: Backend, reason: &str) {
    let test = crate::nextest::current_test_name();
    let line = skip_line(&test, backend, reason);
    crate::runs::tally::skipped(&test, format!("backend={backend}: {}", reason));
    crate::runs::record_skip(backend.name(), reason);
    crate::notice::text(&format!("{line}\n"));
    if let Some(path) = &Config::global().skip_log {
        let appended = match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(mut f) => f.write_all(format!("{line}\n").as_bytes()),
            Err(e) => Err(e),
        };
        if let Err(e) = appended {
            crate::notice::line(&format!(
                "cannot append to {SKIP_LOG_VAR}={}: {e}",
                path.display()
            ));
        }
    }
}

/// Skips (returns early from) or fails the calling test unless `backend` may run, per
/// [`check`]. On a skip it prints the stable skip line ([`report_skip`]) and returns from the
/// enclosing function; on a failure it panics with the reason.
///
/// It needs none of the crate's features, so a project on its own wgpu or CUDA bindings uses it
/// before building its own device: the probe loads the CUDA driver library and, without the
/// `wgpu` feature, the Vulkan loader at run time ([what is asked](crate::probe#what-is-asked)).
///
/// The plain form `return`s `()`; in a test that returns something else, give the value to
/// return on a skip as a second argument.
///
/// ```
/// use gpu_test_permit::probe::Backend;
///
/// fn uses_cuda() {
///     gpu_test_permit::require_backend!(Backend::Cuda);
///     // only reached when CUDA has a device
/// }
///
/// fn uses_wgpu() -> Result<(), String> {
///     gpu_test_permit::require_backend!(Backend::Wgpu, Ok(()));
///     // only reached when wgpu has an adapter
///     Ok(())
/// }
/// # uses_cuda();
/// # uses_wgpu().unwrap();
/// ```
///
/// # Panics
///
/// When the decision is [`Decision::Fail`]: the backend is required (`GPU_TEST_PERMIT_REQUIRE`)
/// and absent or broken, or `GPU_TEST_PERMIT_REQUIRE` is invalid.
#[macro_export]
macro_rules! require_backend {
    ($backend:expr) => {
        $crate::require_backend!($backend, ())
    };
    ($backend:expr, $on_skip:expr) => {{
        let backend: $crate::probe::Backend = $backend;
        match $crate::decision::check(backend) {
            $crate::decision::Decision::Run => {}
            $crate::decision::Decision::Skip(reason) => {
                $crate::decision::report_skip(backend, &reason);
                return $on_skip;
            }
            $crate::decision::Decision::Fail(reason) => {
                panic!("gpu-test-permit: FAIL backend={}: {}", backend, reason)
            }
        }
    }};
}
