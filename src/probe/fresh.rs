//! One probe, now, bypassing every cache ([`probe_with`]): in this process, or in a probe
//! child started by `spawn` and judged by `classify`; and [`self_test`], the round trip of a
//! `ping` child.

use std::time::{Duration, Instant};

use super::backends;
use super::classify::{check_pong, classify};
use super::options::ProbeOptions;
use super::outcome::ProbeOutcome;
use super::report::{ProbeReport, ProbeSource};
use super::spawn::{START_FAILED, run};
use crate::backend::{Backend, ProbeMode};

/// Probes `backend` now with `opts`, bypassing every cache.
///
/// ```
/// use std::time::Duration;
/// use gpu_test_permit::probe::{probe_with, Backend, ProbeOptions, ProbeSource};
///
/// // A fresh answer with a short deadline, in a child process, whatever the caches hold.
/// let opts = ProbeOptions::from_env().timeout(Duration::from_secs(5)).in_process(false);
/// let report = probe_with(Backend::Wgpu, &opts);
/// assert_ne!(report.source, ProbeSource::ProcessCache);
/// ```
pub fn probe_with(backend: Backend, opts: &ProbeOptions) -> ProbeReport {
    let start = Instant::now();
    if !backend.is_built() {
        return ProbeReport {
            backend,
            outcome: ProbeOutcome::NotBuilt,
            duration: start.elapsed(),
            source: ProbeSource::InProcess,
            run_cache: None,
        };
    }
    match opts.mode {
        ProbeMode::InProcess => ProbeReport {
            backend,
            outcome: backends::probe_here_catching(backend),
            duration: start.elapsed(),
            source: ProbeSource::InProcess,
            run_cache: None,
        },
        ProbeMode::Child => {
            let outcome = match run(backend.name(), opts) {
                Ok(run) => classify(&run, opts.timeout),
                Err(e) => ProbeOutcome::Error {
                    detail: format!("{}: {e}", START_FAILED),
                },
            };
            ProbeReport {
                backend,
                outcome,
                duration: start.elapsed(),
                source: ProbeSource::Child,
                run_cache: None,
            }
        }
    }
}

/// Checks that this executable answers probe requests: starts a child of it in probe mode
/// and waits for its constructor to answer. Returns how long the round trip took, or why it
/// failed (for example: the executable does not link this crate's constructor).
///
/// ```
/// let took = gpu_test_permit::probe::self_test(&Default::default()).unwrap();
/// assert!(took.as_secs() < 60);
/// ```
pub fn self_test(opts: &ProbeOptions) -> Result<Duration, String> {
    let start = Instant::now();
    let run = match run("ping", opts) {
        Ok(run) => run,
        Err(e) => return Err(format!("could not start a child: {e}")),
    };
    check_pong(&run, opts.timeout)?;
    Ok(start.elapsed())
}
