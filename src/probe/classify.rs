//! What a probe child's run means: its answer, or how it died, as a [`ProbeOutcome`]; and
//! whether a `ping` child answered as itself.

use std::time::Duration;

use super::outcome::{ProbeOutcome, one_line};
use super::protocol::{Answer, parse_answer};
use super::spawn::{ChildRun, End};

/// Checks what a child may claim: only a clean answer, never a crash or timeout of itself.
fn validate(outcome: ProbeOutcome) -> Result<ProbeOutcome, String> {
    match &outcome {
        ProbeOutcome::Devices { devices } if devices.is_empty() => {
            Err("the answer lists devices but the list is empty".into())
        }
        ProbeOutcome::Devices { .. }
        | ProbeOutcome::NoDevices { .. }
        | ProbeOutcome::NotInstalled { .. }
        | ProbeOutcome::NotBuilt
        | ProbeOutcome::Error { .. } => Ok(outcome),
        _ => Err(format!("a probe child cannot report {outcome:?}")),
    }
}

/// Turns what a probe child did into an outcome.
pub(super) fn classify(run: &ChildRun, timeout: Duration) -> ProbeOutcome {
    let malformed = |detail: String| ProbeOutcome::Malformed {
        detail,
        stderr_tail: run.stderr_tail.clone(),
    };
    match parse_answer(&run.stdout) {
        // A complete, valid answer counts even if the child then had to be killed.
        Ok(Some(Answer::Probe { outcome })) => {
            return match validate(outcome) {
                Ok(outcome) => outcome,
                Err(e) => malformed(e),
            };
        }
        Ok(Some(Answer::Pong { .. })) => {
            return malformed("the child answered a ping instead of a probe".into());
        }
        // A cut-off answer from a child that was killed is a timeout, not garbage.
        Err(_) if matches!(run.end, End::TimedOut) => {}
        Err(e) => return malformed(e),
        Ok(None) => {}
    }
    match &run.end {
        End::TimedOut => ProbeOutcome::TimedOut {
            after: timeout,
            stderr_tail: run.stderr_tail.clone(),
        },
        End::Status(status) => {
            let (signal, code) = (crate::sys::exit_signal(status), status.code());
            if signal.is_none() && code == Some(0) {
                malformed(
                    "the probe child exited with status 0 without answering: the driver may \
                     have called exit() while initialising, or this executable does not run \
                     gpu-test-permit's constructor (check with probe::self_test)"
                        .into(),
                )
            } else {
                ProbeOutcome::Crashed {
                    signal,
                    exit_code: code,
                    stderr_tail: run.stderr_tail.clone(),
                }
            }
        }
    }
}

/// Checks a `ping` child's answer.
pub(super) fn check_pong(run: &ChildRun, timeout: Duration) -> Result<(), String> {
    match parse_answer(&run.stdout) {
        Ok(Some(Answer::Pong { pid })) if pid == run.pid => Ok(()),
        Ok(Some(Answer::Pong { pid })) => Err(format!(
            "a process answered with pid {pid}, but the child was pid {}",
            run.pid
        )),
        Ok(Some(Answer::Probe { .. })) => Err("the child answered a probe, not the ping".into()),
        Err(e) => Err(e),
        Ok(None) => Err(match classify(run, timeout) {
            ProbeOutcome::Malformed { .. } => format!(
                "the child exited without answering: this executable does not run \
                 gpu-test-permit's constructor. Make sure the binary links the crate (call \
                 into it from the binary) and does not strip constructors{}",
                stderr_note(&run.stderr_tail)
            ),
            other => format!("the child did not answer: {other}"),
        }),
    }
}

fn stderr_note(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with: {}", one_line(tail))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::probe::protocol::{Envelope, MARKER, VERSION};

    fn exited(code: i32) -> End {
        End::Status(crate::sys::exit_status(code))
    }

    fn run(stdout: &str, end: End) -> ChildRun {
        ChildRun {
            pid: 1,
            stdout: stdout.as_bytes().to_vec(),
            stderr_tail: "last words".into(),
            end,
        }
    }

    pub(in crate::probe) fn answer(outcome: &ProbeOutcome) -> String {
        let json = crate::json::Record::to_text(&Envelope {
            v: VERSION,
            answer: Answer::Probe {
                outcome: outcome.clone(),
            },
        });
        format!("{MARKER}{json}\n")
    }

    fn malformed_detail(o: ProbeOutcome) -> String {
        match o {
            ProbeOutcome::Malformed {
                detail,
                stderr_tail,
            } => {
                assert_eq!(stderr_tail, "last words");
                detail
            }
            other => panic!("expected a malformed answer, got {other:?}"),
        }
    }

    #[test]
    fn valid_answer_wins_over_driver_noise() {
        let o = ProbeOutcome::NoDevices {
            detail: "none".into(),
        };
        let out = format!("driver says hi\n{MARKER}junk\n{}more noise\n", answer(&o));
        assert_eq!(classify(&run(&out, exited(0)), Duration::ZERO), o);
    }

    #[test]
    fn garbage_answers_are_malformed() {
        let t = Duration::from_secs(1);
        let cases = [
            (format!("{MARKER}{{\"v\":1,\"answer\"\n"), "not valid JSON"),
            (format!("{MARKER}{{\"v\":1,\"ans"), "cut off"),
            (format!("{MARKER}null\n"), "not valid JSON"),
            (
                format!("{MARKER}{{\"v\":2,\"answer\":{{\"Pong\":{{\"pid\":1}}}}}}\n"),
                "format version 2",
            ),
            (
                format!("{MARKER}{{\"v\":1,\"answer\":{{\"Pong\":{{\"pid\":1}}}}}}\n"),
                "ping instead of a probe",
            ),
            (
                answer(&ProbeOutcome::Devices { devices: vec![] }),
                "list is empty",
            ),
            (
                answer(&ProbeOutcome::TimedOut {
                    after: t,
                    stderr_tail: String::new(),
                }),
                "cannot report",
            ),
            (String::new(), "without answering"),
            ("lots of noise but no answer\n".into(), "without answering"),
        ];
        for (stdout, want) in cases {
            let detail = malformed_detail(classify(&run(&stdout, exited(0)), t));
            assert!(detail.contains(want), "{stdout:?}: {detail}");
        }
    }

    #[test]
    fn deaths_without_answer() {
        let t = Duration::from_millis(250);
        assert_eq!(
            classify(&run("", exited(3)), t),
            ProbeOutcome::Crashed {
                signal: None,
                exit_code: Some(3),
                stderr_tail: "last words".into()
            }
        );
        assert_eq!(
            classify(&run(&format!("{MARKER}{{\"v\""), End::TimedOut), t),
            ProbeOutcome::TimedOut {
                after: t,
                stderr_tail: "last words".into()
            }
        );
    }
}
