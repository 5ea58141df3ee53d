//! Signal forwarding. The forwarded signals are blocked in every thread (the mask is set
//! before any other thread starts, and threads inherit it), and one thread takes them with
//! `sigwait`: no signal handler runs, so no code runs in signal context. The child would
//! inherit the mask, so the mask `run` started with is restored between fork and exec. The
//! command is waited for with `WNOWAIT` first, so its pid (and the id of the process group
//! it leads) cannot be reused while the forwarding thread or the hold-deadline handler may
//! still signal it.
//!
//! The hold deadline: the library's watchdog calls the handler set in [`Forwarder::start`]
//! on its own thread; the handler signals the command, waits up to the grace for it to
//! exit, and kills it. The state behind one mutex (where the command is, whether it is
//! late) keeps the handler, the forwarder and the waiting thread in step.

use std::io;
use std::process::{Child, Command};

use super::Ended;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use gpu_test_permit::HoldTimeout;
use libc::c_int;

use super::KILL_GRACE;

const FORWARDED: [c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

enum Target {
    /// The command has not started: a signal ends `run`.
    NotStarted,
    /// Signals go to this process (and the group it leads, where it leads one).
    Running(libc::pid_t),
    /// The command has exited; `run` is about to.
    Exited,
}

struct State {
    target: Target,
    /// The permit's hold timeout, once the watchdog has reported it.
    late: Option<HoldTimeout>,
    /// Whether the command was sent SIGKILL for it.
    killed: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Notified when the command has exited.
    exited: Condvar,
    /// Whether the command leads a process group of its own.
    own_group: bool,
}

impl Shared {
    /// Sends `sig` to the command (its group, where it leads one).
    fn signal(&self, pid: libc::pid_t, sig: c_int) {
        let to = if self.own_group { -pid } else { pid };
        // SAFETY: `pid` is our child, not reaped yet (see `Forwarder::run`), so it and the
        // group it leads still name what we started.
        unsafe { libc::kill(to, sig) };
    }

    /// What the watchdog calls when the permit is held past the hold deadline: SIGTERM,
    /// then SIGKILL where the command has not exited after the grace.
    fn hold_timeout(&self, late: HoldTimeout) {
        let mut state = lock(&self.state);
        match state.target {
            Target::Exited => return,
            // `Forwarder::run` kills it as soon as it has started.
            Target::NotStarted => {
                state.late = Some(late);
                return;
            }
            Target::Running(pid) => {
                state.late = Some(late);
                self.signal(pid, libc::SIGTERM);
            }
        }
        let give_up = Instant::now() + KILL_GRACE;
        while let Target::Running(pid) = state.target {
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() {
                state.killed = true;
                self.signal(pid, libc::SIGKILL);
                return;
            }
            state = self
                .exited
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

pub(super) struct Forwarder {
    shared: Arc<Shared>,
    /// The signal mask before [`Forwarder::start`], for the command.
    old_mask: libc::sigset_t,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set, sigaddset adds valid signal numbers to it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Whether standard input, output or error is a terminal.
fn on_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    [0, 1, 2]
        .into_iter()
        .any(|fd| unsafe { libc::isatty(fd) } == 1)
}

impl Forwarder {
    /// Blocks the forwarded signals in this thread (and so in every thread it starts
    /// later) and starts the thread that takes them. With `hold_deadline`, the command
    /// will be ended when the permit is held past it (see the module docs of `run`).
    pub(super) fn start(hold_deadline: bool) -> Forwarder {
        let set = forwarded_set();
        // SAFETY: `set` is an initialised signal set; `old_mask` is written by the call
        // (zeroed first, so it is initialised even if the call fails).
        let old_mask = unsafe {
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask);
            old_mask
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                target: Target::NotStarted,
                late: None,
                killed: false,
            }),
            exited: Condvar::new(),
            own_group: hold_deadline && !on_terminal(),
        });
        let forwarding = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("signal-forwarder".into())
            .spawn(move || forward(set, &forwarding))
            .expect("cannot start the signal-forwarding thread");
        if hold_deadline {
            let handling = Arc::clone(&shared);
            // Only `run` sets one in this process.
            let _ = gpu_test_permit::on_hold_timeout(move |late| handling.hold_timeout(late));
        }
        Forwarder { shared, old_mask }
    }

    /// Spawns `cmd`, passes the forwarded signals on to it until it exits, and reaps it.
    pub(super) fn run(&self, cmd: &mut Command) -> io::Result<Ended> {
        self.run_with(cmd, |_, _| {})
    }

    /// [`run`](Self::run), handing the spawned child (its pipes) and an [`Ender`] of it to
    /// `spawned` before waiting for it.
    pub(super) fn run_with(
        &self,
        cmd: &mut Command,
        spawned: impl FnOnce(&mut Child, Ender),
    ) -> io::Result<Ended> {
        use std::os::unix::process::CommandExt;
        let old_mask = self.old_mask;
        if self.shared.own_group {
            cmd.process_group(0);
        }
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed: pthread_sigmask is one, and `old_mask` is a
        // copy owned by the closure.
        unsafe {
            cmd.pre_exec(move || {
                libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
                Ok(())
            })
        };
        let mut child: Child = {
            // Held across the spawn: a signal in between waits, then goes to the command.
            let mut state = lock(&self.shared.state);
            let child = cmd.spawn()?;
            let pid = child.id() as libc::pid_t;
            state.target = Target::Running(pid);
            if state.late.is_some() {
                // Past the hold deadline before it even started.
                state.killed = true;
                self.shared.signal(pid, libc::SIGKILL);
            }
            child
        };
        let pid = child.id();
        spawned(
            &mut child,
            Ender {
                shared: Arc::clone(&self.shared),
                pid: pid as libc::pid_t,
            },
        );
        let waited = wait_without_reaping(pid as libc::pid_t);
        let (late, killed) = {
            let mut state = lock(&self.shared.state);
            state.target = Target::Exited;
            self.shared.exited.notify_all();
            (state.late.take(), state.killed)
        };
        if late.is_some() && self.shared.own_group {
            // What the command started and left behind in its group goes with it (the
            // unreaped command still holds the group's id).
            // SAFETY: kill(2) on the group our unreaped child leads.
            unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
        }
        waited?;
        Ok(Ended {
            status: child.wait()?,
            pid,
            late,
            killed,
            own_group: self.shared.own_group,
        })
    }
}

/// Ends one command of a [`Forwarder`] from another thread, while it runs.
#[derive(Clone)]
pub(super) struct Ender {
    shared: Arc<Shared>,
    pid: libc::pid_t,
}

impl Ender {
    /// Sends SIGKILL to the command (and the group it leads, where it leads one), where it
    /// still runs; whether it did.
    pub(super) fn end(&self) -> bool {
        let state = lock(&self.shared.state);
        match state.target {
            Target::Running(pid) if pid == self.pid => {
                self.shared.signal(pid, libc::SIGKILL);
                true
            }
            _ => false,
        }
    }

    /// The command's process id.
    pub(super) fn pid(&self) -> u32 {
        self.pid as u32
    }
}

/// Waits until process `pid` has exited, leaving it a zombie (its pid stays taken).
fn wait_without_reaping(pid: libc::pid_t) -> io::Result<()> {
    loop {
        // SAFETY: `info` is a valid siginfo_t to write to; `pid` is our own child.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn forward(set: libc::sigset_t, shared: &Shared) {
    loop {
        let Some((sig, from_terminal)) = next_signal(&set) else {
            continue;
        };
        match lock(&shared.state).target {
            Target::NotStarted => die_of(sig),
            Target::Running(pid) if !from_terminal => shared.signal(pid, sig),
            Target::Running(_) | Target::Exited => {}
        }
    }
}

/// The next forwarded signal, and whether the terminal sent it.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn next_signal(set: &libc::sigset_t) -> Option<(c_int, bool)> {
    /// `si_code` of a signal the kernel sent, as the terminal driver does for Ctrl-C.
    const SI_KERNEL: c_int = 0x80;
    // SAFETY: `set` is initialised; `info` is a valid siginfo_t to write to.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let sig = libc::sigwaitinfo(set, &mut info);
        (sig > 0).then_some((sig, info.si_code == SI_KERNEL))
    }
}

/// The next forwarded signal, and whether the terminal sent it (not known here).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn next_signal(set: &libc::sigset_t) -> Option<(c_int, bool)> {
    let mut sig: c_int = 0;
    // SAFETY: `set` is initialised; `sig` is a valid c_int to write to.
    let rc = unsafe { libc::sigwait(set, &mut sig) };
    (rc == 0).then_some((sig, false))
}

/// Replaces this process with `cmd`; returns only when that fails.
pub(super) fn run_in_place(cmd: &mut Command) -> io::Result<std::process::ExitCode> {
    use std::os::unix::process::CommandExt;
    Err(cmd.exec())
}

/// Dies of `sig` with its default action; returns only if that does not end the process.
pub(super) fn die_of(sig: c_int) {
    // SAFETY: plain libc calls on valid arguments. The default action replaces any handler
    // (std ignores SIGPIPE), the signal is unblocked in this thread, and `raise` sends it to
    // this thread. Core dumps are turned off first: this process has nothing to show.
    unsafe {
        let mut core: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_CORE, &mut core) == 0 {
            core.rlim_cur = 0;
            libc::setrlimit(libc::RLIMIT_CORE, &core);
        }
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}
