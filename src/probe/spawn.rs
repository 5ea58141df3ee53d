//! The parent's side of a probe child: start it ([`run`]), read its pipes into bounded
//! buffers, enforce the deadline, kill and reap it on every way out.
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

use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::child::inside_probe_child;
use super::options::ProbeOptions;
use super::protocol::{MARKER, request_value};
use crate::config::PROBE_REQUEST_VAR;

/// How much of the child's standard error is kept for the report.
pub(super) const STDERR_TAIL: usize = 2048;
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
    if crate::config::is_watched() {
        // Watched (`gpu-test-permit watch`): the child loads drivers without a permit on
        // purpose, and is not one of the test's processes. It is started without the loader's
        // log, so it leaves none in the watch directory: the watcher reads every log there as
        // the test's, and needs to tell nothing apart. Recognising the child by its log
        // instead would trust what a process wrote about itself, and the loader logs its
        // first loads before any code of the child could say what it is.
        for var in ["LD_DEBUG", "LD_DEBUG_OUTPUT", crate::config::WATCH_VAR] {
            cmd.env_remove(var);
        }
    }
    // Its own process group, and it dies with this thread.
    crate::sys::contain_child(&mut cmd);
    let mut child = Reaper::new(cmd.spawn()?);
    let pid = child.child.id();

    let shared = Arc::new(Shared::default());
    let mut out = child.child.stdout.take().expect("stdout is piped");
    let mut err = child.child.stderr.take().expect("stderr is piped");
    // Each pipe is read through a closure of one method, not a `dyn Read` of many.
    spawn_reader(
        "gpu-test-permit probe stdout",
        Box::new(move |buf: &mut [u8]| out.read(buf)),
        &shared,
        Output::push_stdout,
    )?;
    spawn_reader(
        "gpu-test-permit probe stderr",
        Box::new(move |buf: &mut [u8]| err.read(buf)),
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
                let limit = match out.answered {
                    Some(at) => deadline.min(at + EXIT_GRACE),
                    None => deadline,
                };
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
        out = match shared.changed.wait_timeout(out, drained - now) {
            Ok((out, _)) => out,
            Err(poisoned) => poisoned.into_inner().0,
        };
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
        if let Some(i) = super::protocol::last_position(&self.stdout[from..], m) {
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
            self.marker = match self.marker {
                Some(at) => at.checked_sub(cut),
                None => None,
            };
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
        match self.output.lock() {
            Ok(out) => out,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// A pipe's `read`.
type PipeRead = Box<dyn FnMut(&mut [u8]) -> io::Result<usize> + Send>;

/// Reads a pipe to its end through `read` on a thread of its own (std has no read with a
/// deadline), into bounded buffers. A pipe held open by a process that escaped the child's group keeps its
/// thread alive until that process closes it; it holds nothing but those buffers.
fn spawn_reader(
    name: &str,
    mut read: PipeRead,
    shared: &Arc<Shared>,
    push: fn(&mut Output, &[u8]),
) -> io::Result<()> {
    let shared = Arc::clone(shared);
    crate::sys::spawn_boxed(
        name,
        Box::new(move || {
            let mut buf = [0u8; 8192];
            loop {
                match read(&mut buf) {
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
        }),
    )
}

fn tail_text(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL);
    let text = String::from_utf8_lossy(&bytes[start..]);
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::classify::classify;
    use crate::probe::outcome::ProbeOutcome;

    fn exited(code: i32) -> End {
        End::Status(crate::sys::exit_status(code))
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
        let line = format!("\n{}", crate::probe::classify::tests::answer(&o));
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
}
