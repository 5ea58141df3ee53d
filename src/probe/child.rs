//! The probe child's side: the constructor that, in a process started as a probe child,
//! verifies the request, probes and writes the answer before `main` runs.
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

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::backends;
use super::outcome::ProbeOutcome;
use super::protocol::{Answer, Envelope, MARKER, VERSION, parse_request};
use crate::backend::Backend;
use crate::config::PROBE_REQUEST_VAR;

/// A verified request to this process to answer as a probe child.
#[derive(Debug)]
struct Request {
    kind: String,
}

static REQUEST: OnceLock<Option<Request>> = OnceLock::new();

/// Whether [`REQUEST`] was looked for: the constructor's common case reads this flag, not the
/// `OnceLock` (see the constructor).
static LOOKED: AtomicBool = AtomicBool::new(false);

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
    LOOKED.store(true, Ordering::Release);
    // SAFETY: runs once, normally in a constructor before `main`, when the process has no
    // other threads that could read the environment at the same time.
    let raw = unsafe { crate::config::take_probe_request() }?;
    let verified = match raw.to_str() {
        Some(value) => verify(value),
        None => None,
    };
    if verified.is_none() {
        crate::notice::line(&format!(
            "ignoring {PROBE_REQUEST_VAR}={:?}: this process was not started as a probe child \
             (the variable was inherited or set by hand); removed it",
            raw.to_string_lossy()
        ));
    }
    verified
}

/// A request over a pipe that is this process's standard input and still holds its token.
/// Where pipes have no identity to compare, the request is recognised by its form alone (see
/// [`crate::sys::stdin_carries_token`]).
fn verify(value: &str) -> Option<Request> {
    let (kind, pipe, token) = parse_request(value)?;
    if crate::sys::stdin_carries_token(pipe, token) {
        Some(Request { kind: kind.into() })
    } else {
        None
    }
}

// Runs in every process that links this crate, before `main`. Outside a probe child it reads
// one environment variable and returns. In a probe child it probes, writes the answer and
// exits at once: no test code, no unwinding, no atexit handlers of a half-initialised driver.
#[ctor::ctor(unsafe)]
fn probe_child_entry() {
    // The common case first, in straight-line code (`config::is_set`): no request, and none
    // looked for (a user's constructor that called the probe may have verified and removed it
    // already).
    if !crate::config::has_probe_request() && !LOOKED.load(Ordering::Acquire) {
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
    let json = crate::json::Record::to_text(&Envelope { v: VERSION, answer });
    crate::sys::write_stdout_unbuffered(format!("\n{MARKER}{json}\n").as_bytes());
    crate::sys::exit_now();
}
