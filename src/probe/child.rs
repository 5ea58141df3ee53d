//! The probe child: the constructor that answers in it, and the parent side that starts it,
//! enforces the deadline and classifies what came back.
//!
//! # How a probe child runs
//!
//! The parent writes a fresh random token into a new pipe and starts this executable with the
//! pipe's read end as standard input and [`PROBE_REQUEST_VAR`] set to `<kind> <dev>:<inode> <token>`:
//! what to probe, which pipe carries the request, and the token it carries. A process is a probe
//! child only when all three agree: its standard input is that very pipe (same device and
//! inode) and the pipe holds that token. The first look consumes the token and removes the
//! variable, so a variable left in an environment, inherited by a program the child starts, or
//! copied by hand never turns another process into a probe child; such a process removes it,
//! says so on standard error and runs as usual.
//!
//! On Unix the child leads a process group of its own and, on Linux, gets `SIGKILL` when the
//! thread that started it ends (`PR_SET_PDEATHSIG`). That thread is the one that waits for it
//! in [`run`], so the child cannot outlive the probe, not even when the parent is killed.
//!
//! The parent reads both pipes on two threads into bounded buffers (the tail of standard error,
//! the tail of standard output up to its answer) and watches the clock and the child itself:
//! - the deadline is absolute: past it the child is killed, however much it still writes;
//! - the child's exit decides, not the end of its pipes: once it has exited, a pipe that a
//!   process it left behind still holds gets [`DRAIN_GRACE`] to deliver the rest;
//! - a complete answer counts even if the child then fails to exit within [`EXIT_GRACE`];
//! - every way out kills the child's process group (helpers a driver started included) and
//!   reaps the child.

use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Backend, ProbeOptions, ProbeOutcome, backends};
use crate::config::PROBE_REQUEST_VAR;

/// Starts the answer line on the child's standard output. Drivers may print their own lines
/// there; only the last line with this prefix counts.
const MARKER: &str = "GPU_TEST_PERMIT_PROBE_ANSWER:";
/// Version of the answer format, checked by the parent.
const VERSION: u32 = 1;
/// How much of the child's standard error is kept for the report.
const STDERR_TAIL: usize = 2048;
/// How much of the child's standard output is kept while no answer has come: the answer line
/// is far shorter, driver noise before it can be endless.
const STDOUT_KEEP: usize = 64 * 1024;
/// After the child has exited, how long a pipe still held open by a process it left behind may
/// take to deliver the rest of its output.
const DRAIN_GRACE: Duration = Duration::from_millis(100);
/// After a complete answer, how long the child may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// The longest the parent sleeps between looks at the child while nothing happens.
const MAX_NAP: Duration = Duration::from_millis(10);

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

/// A verified request to this process to answer as a probe child.
#[derive(Debug)]
struct Request {
    kind: String,
}

static REQUEST: OnceLock<Option<Request>> = OnceLock::new();

/// The request this process was started for, verified on first use (by the constructor, or
/// earlier by a user's constructor that calls the probe) and remembered.
fn request() -> Option<&'static Request> {
    REQUEST.get_or_init(take_request).as_ref()
}

/// Whether this process was started as a probe child. A probe child never starts another: a
/// constructor that calls the probe before this crate's constructor answered gets an error.
pub(super) fn inside_probe_child() -> bool {
    request().is_some()
}

/// Reads, verifies and removes [`PROBE_REQUEST_VAR`].
fn take_request() -> Option<Request> {
    // SAFETY: runs once, normally in a constructor before `main`, when the process has no
    // other threads that could read the environment at the same time.
    let raw = unsafe { crate::config::take_probe_request() }?;
    let verified = raw.to_str().and_then(verify);
    if verified.is_none() {
        crate::notice::line(&format!(
            "ignoring {PROBE_REQUEST_VAR}={:?}: this process was not started as a probe child \
             (the variable was inherited or set by hand); removed it",
            raw.to_string_lossy()
        ));
    }
    verified
}

/// The variable's value for a request of `kind` over `pipe`.
fn request_value(kind: &str, pipe: (u64, u64), token: &str) -> String {
    format!("{kind} {}:{} {token}", pipe.0, pipe.1)
}

fn parse_request(value: &str) -> Option<(&str, (u64, u64), &str)> {
    let mut words = value.split(' ');
    let kind = words.next()?;
    let (dev, ino) = words.next()?.split_once(':')?;
    let token = words.next()?;
    if words.next().is_some() || token.len() != 32 || !token.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    Some((kind, (dev.parse().ok()?, ino.parse().ok()?), token))
}

/// A request over a pipe that is this process's standard input and still holds its token.
/// Where pipes have no identity to compare, the request is recognised by its form alone (see
/// [`crate::sys::stdin_carries_token`]).
fn verify(value: &str) -> Option<Request> {
    let (kind, pipe, token) = parse_request(value)?;
    crate::sys::stdin_carries_token(pipe, token).then(|| Request { kind: kind.into() })
}

// Runs in every process that links this crate, before `main`. Outside a probe child it reads
// one environment variable and returns. In a probe child it probes, writes the answer and
// exits at once: no test code, no unwinding, no atexit handlers of a half-initialised driver.
#[ctor::ctor(unsafe)]
fn probe_child_entry() {
    // A user's constructor that called the probe may have verified (and removed) it already.
    if REQUEST.get().is_none() && !crate::config::has_probe_request() {
        return;
    }
    let Some(request) = request() else {
        return;
    };
    let answer = match request.kind.as_str() {
        "ping" => Answer::Pong {
            pid: std::process::id(),
        },
        other => Answer::Probe {
            outcome: match other.parse::<Backend>() {
                Ok(backend) => backends::probe_here_catching(backend),
                Err(_) => ProbeOutcome::Error {
                    detail: format!("the probe child was asked for an unknown backend {other:?}"),
                },
            },
        },
    };
    let json = serde_json::to_string(&Envelope { v: VERSION, answer })
        .unwrap_or_else(|e| format!("serialising failed: {e}"));
    crate::sys::write_stdout_unbuffered(format!("\n{MARKER}{json}\n").as_bytes());
    crate::sys::exit_now();
}

/// How a probe child ended.
#[derive(Debug)]
pub(super) enum End {
    /// It exited or was killed by a signal on its own.
    Status(ExitStatus),
    /// It passed the deadline (or failed to exit after answering) and was killed.
    TimedOut,
}

/// What a probe child produced.
#[derive(Debug)]
pub(super) struct ChildRun {
    pub(super) pid: u32,
    /// The tail of its standard output, up to and including its answer line.
    pub(super) stdout: Vec<u8>,
    pub(super) stderr_tail: String,
    pub(super) end: End,
}

/// Why a probe child could not be started.
pub(super) const START_FAILED: &str = "could not start the probe child";

/// Starts this executable as a probe child of `kind` and collects what it says, killing it
/// at the deadline. The child is always reaped before this returns, on every path.
pub(super) fn run(kind: &str, opts: &ProbeOptions) -> io::Result<ChildRun> {
    if inside_probe_child() {
        return Err(io::Error::other(
            "this process is itself a probe child (a constructor called the probe before \
             gpu-test-permit's constructor answered), and a probe child never starts another",
        ));
    }
    let deadline = Instant::now() + opts.timeout;
    let token = new_token();
    let (request_pipe, mut token_writer) = io::pipe()?;
    io::Write::write_all(&mut token_writer, format!("{token}\n").as_bytes())?;
    let value = request_value(kind, crate::sys::pipe_identity(&request_pipe)?, &token);
    let mut cmd = Command::new(std::env::current_exe()?);
    // If the constructor did not run, a libtest binary given these arguments lists nothing and
    // exits: the parent then reports a missing answer instead of running tests in the child.
    cmd.args(["--list", "--exact", "gpu-test-permit-probe-child"])
        .stdin(Stdio::from(request_pipe))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in &opts.env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.env(PROBE_REQUEST_VAR, value);
    // Its own process group, and it dies with this thread.
    crate::sys::contain_child(&mut cmd);
    let mut child = Reaper::new(cmd.spawn()?);
    let pid = child.child.id();

    let shared = Arc::new(Shared::default());
    let out = child.child.stdout.take().expect("stdout is piped");
    let err = child.child.stderr.take().expect("stderr is piped");
    spawn_reader(
        "gpu-test-permit probe stdout",
        out,
        &shared,
        Output::push_stdout,
    )?;
    spawn_reader(
        "gpu-test-permit probe stderr",
        err,
        &shared,
        Output::push_stderr,
    )?;

    let mut exited_at: Option<Instant> = None;
    let mut seen = 0;
    let mut nap = Duration::from_micros(50);
    let end = loop {
        if exited_at.is_none() && child.has_exited()? {
            exited_at = Some(Instant::now());
        }
        let now = Instant::now();
        let out = shared.lock();
        if out.changes != seen {
            // Output moves: the exit is likely near, look again soon.
            seen = out.changes;
            nap = Duration::from_micros(50);
        }
        let until = match exited_at {
            // Judged by the exit: a pipe held by a process the child left behind gets a grace.
            Some(at) if out.open == 0 || now >= at + DRAIN_GRACE => {
                drop(out);
                break End::Status(child.finish()?);
            }
            Some(at) => at + DRAIN_GRACE,
            None => {
                let limit = out
                    .answered
                    .map_or(deadline, |at| deadline.min(at + EXIT_GRACE));
                if now >= limit {
                    drop(out);
                    child.kill()?;
                    break End::TimedOut;
                }
                limit
            }
        };
        // Woken by output; otherwise looks at the child again after the nap.
        drop(shared.changed.wait_timeout(out, (until - now).min(nap)));
        nap = (nap * 2).min(MAX_NAP);
    };
    // The child's group is gone, so its pipes close: collect the last of its output.
    let drained = Instant::now() + DRAIN_GRACE;
    let mut out = shared.lock();
    while out.open > 0 {
        let now = Instant::now();
        if now >= drained {
            break;
        }
        out = shared
            .changed
            .wait_timeout(out, drained - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let run = ChildRun {
        pid,
        stdout: std::mem::take(&mut out.stdout),
        stderr_tail: tail_text(&out.stderr),
        end,
    };
    drop(token_writer);
    Ok(run)
}

/// A fresh random token: 128 bits from std's randomly keyed hasher.
fn new_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let word = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
        h.write_u32(std::process::id());
        h.finish()
    };
    format!("{:016x}{:016x}", word(), word())
}

/// The probe child, killed (with its process group) and reaped whichever way the probe ends.
struct Reaper {
    child: Child,
    /// Set once reaped.
    status: Option<ExitStatus>,
}

impl Reaper {
    fn new(child: Child) -> Reaper {
        Reaper {
            child,
            status: None,
        }
    }

    /// Whether the child has exited. Where the platform allows (Linux) it is left unreaped, so
    /// its process group id cannot be reused before [`Reaper::finish`] kills the group.
    fn has_exited(&mut self) -> io::Result<bool> {
        crate::sys::child_has_exited(&mut self.child, &mut self.status)
    }

    /// Kills what is left of the child's process group and reaps the exited child.
    fn finish(&mut self) -> io::Result<ExitStatus> {
        self.kill_group();
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.child.wait()?;
        self.status = Some(status);
        Ok(status)
    }

    /// Kills the child and its process group (SIGKILL: a driver stuck in the kernel may
    /// ignore anything gentler) and reaps it.
    fn kill(&mut self) -> io::Result<ExitStatus> {
        self.kill_group();
        match self.child.kill() {
            Ok(()) => {}
            // Already exited: still reaped below.
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {}
            Err(e) => return Err(e),
        }
        self.finish()
    }

    fn kill_group(&self) {
        // Once reaped, the id may name another process's group.
        if self.status.is_none() {
            crate::sys::kill_process_group(&self.child);
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.kill();
        }
    }
}

/// What the reader threads collected.
#[derive(Debug)]
struct Output {
    /// The tail of standard output; frozen once it holds a complete answer line.
    stdout: Vec<u8>,
    /// Where the last answer marker in `stdout` starts.
    marker: Option<usize>,
    /// When a complete answer line arrived.
    answered: Option<Instant>,
    /// The tail of standard error.
    stderr: Vec<u8>,
    /// Pipes not yet at end of file.
    open: u8,
    /// Counts arrivals, so the waiter can tell that something happened.
    changes: u64,
}

impl Default for Output {
    fn default() -> Output {
        Output {
            stdout: Vec::new(),
            marker: None,
            answered: None,
            stderr: Vec::new(),
            open: 2,
            changes: 0,
        }
    }
}

impl Output {
    fn push_stdout(&mut self, bytes: &[u8]) {
        if self.answered.is_some() {
            return;
        }
        let old = self.stdout.len();
        self.stdout.extend_from_slice(bytes);
        let m = MARKER.as_bytes();
        // Only the new bytes (and a marker cut by the previous read) need a look.
        let from = old.saturating_sub(m.len() - 1);
        if let Some(i) = self.stdout[from..].windows(m.len()).rposition(|w| w == m) {
            self.marker = Some(from + i);
        }
        if let Some(at) = self.marker {
            let rest = (at + m.len()).max(old);
            if self.stdout[rest..].contains(&b'\n') {
                self.answered = Some(Instant::now());
                return;
            }
        }
        if self.stdout.len() > 2 * STDOUT_KEEP {
            let cut = self.stdout.len() - STDOUT_KEEP;
            self.stdout.drain(..cut);
            self.marker = self.marker.and_then(|at| at.checked_sub(cut));
        }
    }

    fn push_stderr(&mut self, bytes: &[u8]) {
        self.stderr.extend_from_slice(bytes);
        if self.stderr.len() > 2 * STDERR_TAIL {
            let cut = self.stderr.len() - STDERR_TAIL;
            self.stderr.drain(..cut);
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    output: Mutex<Output>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Output> {
        self.output.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads `pipe` to its end on a thread of its own (std has no read with a deadline), into
/// bounded buffers. A pipe held open by a process that escaped the child's group keeps its
/// thread alive until that process closes it; it holds nothing but those buffers.
fn spawn_reader(
    name: &str,
    mut pipe: impl Read + Send + 'static,
    shared: &Arc<Shared>,
    push: fn(&mut Output, &[u8]),
) -> io::Result<()> {
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let mut out = shared.lock();
                        push(&mut out, &buf[..n]);
                        out.changes += 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
                shared.changed.notify_all();
            }
            let mut out = shared.lock();
            out.open -= 1;
            out.changes += 1;
            drop(out);
            shared.changed.notify_all();
        })
        .map(drop)
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
        format!("; its stderr ended with: {}", tail.replace('\n', " | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn output_is_bounded_and_finds_an_answer_cut_across_reads() {
        let mut out = Output::default();
        for _ in 0..1000 {
            out.push_stdout(&[b'n'; 4096]);
            out.push_stderr(&[b'e'; 4096]);
            assert!(out.stdout.len() <= 2 * STDOUT_KEEP);
            assert!(out.stderr.len() <= 2 * STDERR_TAIL);
        }
        assert!(out.answered.is_none());
        let o = ProbeOutcome::NoDevices { detail: "x".into() };
        let line = format!("\n{}", answer(&o));
        let (a, b) = line.split_at(10); // the marker arrives in two reads
        out.push_stdout(a.as_bytes());
        assert!(out.answered.is_none());
        out.push_stdout(b.as_bytes());
        assert!(out.answered.is_some());
        out.push_stdout(&[b'n'; 4096]); // frozen after the answer
        let r = ChildRun {
            pid: 1,
            stdout: out.stdout,
            stderr_tail: tail_text(&out.stderr),
            end: exited(0),
        };
        assert_eq!(classify(&r, Duration::ZERO), o);
        assert!(r.stderr_tail.len() <= STDERR_TAIL);
    }

    #[test]
    fn only_well_formed_requests_are_considered() {
        let token = "00112233445566778899aabbccddeeff";
        assert_eq!(
            parse_request(&request_value("cuda", (7, 42), token)),
            Some(("cuda", (7, 42), token))
        );
        for bad in [
            "cuda",
            "ping",
            "",
            "cuda 7:42",
            "cuda 7:42 0011",
            "cuda 7-42 00112233445566778899aabbccddeeff",
            "cuda 7:x 00112233445566778899aabbccddeeff",
            "cuda 7:42 00112233445566778899aabbccddeefg",
            "cuda 7:42 00112233445566778899aabbccddeeff extra",
        ] {
            assert_eq!(parse_request(bad), None, "{bad:?}");
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
