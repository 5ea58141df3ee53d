//! The probe child: the constructor that answers in it, and the parent side that starts it,
//! enforces the deadline and classifies what came back.

use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Backend, CHILD_VAR, ProbeOptions, ProbeOutcome, backends};

/// Starts the answer line on the child's standard output. Drivers may print their own lines
/// there; only the last line with this prefix counts.
const MARKER: &str = "GPU_TEST_PERMIT_PROBE_ANSWER:";
/// Version of the answer format, checked by the parent.
const VERSION: u32 = 1;
/// How much of the child's standard error is kept for the report.
const STDERR_TAIL: usize = 2048;

#[derive(Serialize, Deserialize)]
struct Envelope {
    v: u32,
    answer: Answer,
}

#[derive(Serialize, Deserialize)]
enum Answer {
    Probe { outcome: ProbeOutcome },
    Pong { pid: u32 },
}

// Runs in every process that links this crate, before `main`. Outside a probe child it reads
// one environment variable and returns. In a probe child it probes, writes the answer and
// exits at once: no test code, no unwinding, no atexit handlers of a half-initialised driver.
#[ctor::ctor(unsafe)]
fn probe_child_entry() {
    let Some(kind) = std::env::var_os(CHILD_VAR) else {
        return;
    };
    let answer = match kind.to_str() {
        Some("ping") => Answer::Pong {
            pid: std::process::id(),
        },
        other => Answer::Probe {
            outcome: match other.map(str::parse::<Backend>) {
                Some(Ok(backend)) => backends::probe_here_catching(backend),
                _ => ProbeOutcome::Error {
                    detail: format!("the probe child was asked for an unknown backend {kind:?}"),
                },
            },
        },
    };
    let json = serde_json::to_string(&Envelope { v: VERSION, answer })
        .unwrap_or_else(|e| format!("serialising failed: {e}"));
    write_stdout(format!("\n{MARKER}{json}\n").as_bytes());
    exit_now();
}

#[cfg(unix)]
fn write_stdout(mut bytes: &[u8]) {
    // Straight to fd 1: std's stdout buffer is not flushed by `_exit`.
    while !bytes.is_empty() {
        // SAFETY: writes from a valid buffer of the given length.
        let n = unsafe { libc::write(1, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

#[cfg(not(unix))]
fn write_stdout(bytes: &[u8]) {
    use std::io::Write;
    let mut out = io::stdout();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}

fn exit_now() -> ! {
    #[cfg(unix)]
    {
        // SAFETY: `_exit` ends the process at once; nothing runs after it.
        unsafe { libc::_exit(0) }
    }
    #[cfg(not(unix))]
    {
        std::process::exit(0)
    }
}

/// How a probe child ended.
#[derive(Debug)]
pub(super) enum End {
    /// It exited or was killed by a signal on its own.
    Status(ExitStatus),
    /// It passed the deadline and was killed.
    TimedOut,
}

/// What a probe child produced.
#[derive(Debug)]
pub(super) struct ChildRun {
    pub(super) pid: u32,
    pub(super) stdout: Vec<u8>,
    pub(super) stderr_tail: String,
    pub(super) end: End,
}

/// Starts this executable as a probe child of `kind` and collects what it says, killing it
/// at the deadline. The child is always reaped before this returns.
pub(super) fn run(kind: &str, opts: &ProbeOptions) -> io::Result<ChildRun> {
    let start = Instant::now();
    let deadline = start + opts.timeout;
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    // If the constructor did not run, a libtest binary given these arguments lists nothing and
    // exits: the parent then reports a missing answer instead of running tests in the child.
    cmd.args(["--list", "--exact", "gpu-test-permit-probe-child"])
        .env(CHILD_VAR, kind)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in &opts.env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();

    let (tx, chunks) = mpsc::channel::<Vec<u8>>();
    let mut out = child.stdout.take().expect("stdout is piped");
    // Reader threads, because std has no read with a deadline. If a driver leaves a
    // grandchild holding the pipes, they outlive this call harmlessly.
    std::thread::Builder::new()
        .name("gpu-test-permit probe stdout".into())
        .spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = out.read(&mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        })?;
    let tail = Arc::new(Mutex::new(Vec::<u8>::new()));
    let (err_done_tx, err_done) = mpsc::channel::<()>();
    {
        let tail = Arc::clone(&tail);
        let mut err = child.stderr.take().expect("stderr is piped");
        std::thread::Builder::new()
            .name("gpu-test-permit probe stderr".into())
            .spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = err.read(&mut buf) {
                    let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                    t.extend_from_slice(&buf[..n]);
                    if t.len() > 2 * STDERR_TAIL {
                        let cut = t.len() - STDERR_TAIL;
                        t.drain(..cut);
                    }
                }
                let _ = err_done_tx.send(());
            })?;
    }

    let mut stdout = Vec::new();
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match chunks.recv_timeout(left) {
            Ok(chunk) => {
                stdout.extend_from_slice(&chunk);
                if complete_answer(&stdout) {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                break;
            }
        }
    }
    let end = if timed_out {
        kill_and_reap(&mut child)?;
        End::TimedOut
    } else {
        match wait_until(&mut child, deadline)? {
            Some(status) => End::Status(status),
            None => {
                kill_and_reap(&mut child)?;
                End::TimedOut
            }
        }
    };
    // The child is gone, so its stderr closes unless a grandchild holds it; do not wait long.
    let _ = err_done.recv_timeout(Duration::from_millis(200));
    let tail = tail.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(ChildRun {
        pid,
        stdout,
        stderr_tail: tail_text(&tail),
        end,
    })
}

fn kill_and_reap(child: &mut Child) -> io::Result<()> {
    // SIGKILL: a driver stuck in the kernel may ignore anything gentler.
    match child.kill() {
        Ok(()) => {}
        // Already exited: still reap it below.
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {}
        Err(e) => return Err(e),
    }
    child.wait().map(drop)
}

/// Waits for the child's exit until `deadline`; `None` if it is still running then. Called
/// once its standard output has closed or it has answered, so the exit is normally at hand.
fn wait_until(child: &mut Child, deadline: Instant) -> io::Result<Option<ExitStatus>> {
    let mut nap = Duration::from_micros(50);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        std::thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(5));
    }
}

fn tail_text(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL);
    let text = String::from_utf8_lossy(&bytes[start..]);
    text.trim().to_string()
}

/// The last answer line, if one has been completed (ends in a newline).
fn answer_line(stdout: &[u8]) -> Option<(&[u8], bool)> {
    let marker = MARKER.as_bytes();
    let at = stdout.windows(marker.len()).rposition(|w| w == marker)?;
    let rest = &stdout[at + marker.len()..];
    match rest.iter().position(|&b| b == b'\n') {
        Some(nl) => Some((&rest[..nl], true)),
        None => Some((rest, false)),
    }
}

fn complete_answer(stdout: &[u8]) -> bool {
    matches!(answer_line(stdout), Some((_, true)))
}

fn parse_answer(stdout: &[u8]) -> Result<Option<Answer>, String> {
    let Some((line, complete)) = answer_line(stdout) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(line);
    let shown: String = text.chars().take(120).collect();
    if !complete {
        return Err(format!("the answer was cut off: {shown:?}"));
    }
    let env: Envelope = serde_json::from_slice(line)
        .map_err(|e| format!("the answer is not valid JSON ({e}): {shown:?}"))?;
    if env.v != VERSION {
        return Err(format!(
            "the answer has format version {} but this build reads version {VERSION}",
            env.v
        ));
    }
    Ok(Some(env.answer))
}

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
            return validate(outcome).unwrap_or_else(malformed);
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
            let (signal, code) = status_parts(status);
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

fn status_parts(status: &ExitStatus) -> (Option<i32>, Option<i32>) {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        (status.signal(), status.code())
    }
    #[cfg(not(unix))]
    {
        (None, status.code())
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
        format!("; its stderr ended with: {}", tail.replace('\n', " | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> End {
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            End::Status(ExitStatus::from_raw(code << 8))
        }
        #[cfg(not(unix))]
        {
            use std::os::windows::process::ExitStatusExt;
            End::Status(ExitStatus::from_raw(code as u32))
        }
    }

    fn run(stdout: &str, end: End) -> ChildRun {
        ChildRun {
            pid: 1,
            stdout: stdout.as_bytes().to_vec(),
            stderr_tail: "last words".into(),
            end,
        }
    }

    fn answer(outcome: &ProbeOutcome) -> String {
        let json = serde_json::to_string(&Envelope {
            v: VERSION,
            answer: Answer::Probe {
                outcome: outcome.clone(),
            },
        })
        .unwrap();
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
