//! `run [--exclusive | --units K | --memory SIZE] [--group GROUP] [--filter TEXT] [--] COMMAND
//! [ARGS...]`: run a command while holding a permit, and end the way it ended.
//!
//! - The command works inside the permit: it inherits the open files that hold the permit's
//!   slot locks and finds them named in `GPU_TEST_PERMIT_INHERITED`, so a command that itself
//!   uses this crate (and everything it starts) takes no second slot (see
//!   `GpuTestPermit::pass_to`). Should `run` be killed with SIGKILL, the slot stays locked until
//!   the command and its descendants are gone too.
//! - Straight through, with no permit, `run` executes the command in its own place when the
//!   arguments contain `--list` (nextest lists a binary's tests through the target runner),
//!   with `--group GROUP` when `NEXTEST_TEST_GROUP` is not GROUP, and with `--filter TEXT` when
//!   the test's name (`NEXTEST_TEST_NAME`, else the arguments) does not contain TEXT.
//! - The command and its arguments are passed on byte for byte (they need not be UTF-8).
//! - Its exit code is ours. On Unix, when a signal killed it, we release the permit and then
//!   die of the same signal (with core dumps off: the command's dump is the useful one), so a
//!   parent such as nextest sees a crash as a crash; should we survive it, we exit with
//!   128 + the signal number, as a shell reports it.
//! - On Unix, SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to `run` are passed on to the command,
//!   and the permit stays held until the command has exited. A signal that arrives before the
//!   command has started ends `run` as it would have without the forwarding. On Linux a signal
//!   the terminal sent (Ctrl-C) is not passed on: the terminal sent it to the whole foreground
//!   process group, the command included.
//! - The hold deadline (`GPU_TEST_PERMIT_HOLD_TIMEOUT`) is the command's: held past it, the
//!   permit is the command's hang. `run` does not abort (that would leave the command holding
//!   the slot, unwatched): it sends the command SIGTERM, and SIGKILL [`KILL_GRACE`] later if it
//!   still runs; once it has exited, `run` returns the permit, prints the watchdog's diagnosis
//!   naming the command, records the hang and exits with [`HOLD_TIMEOUT_EXIT`].
//! - Process groups, on Unix: with a hold deadline in force and no terminal on standard input,
//!   output or error, the command leads a process group of its own, so that the deadline ends
//!   what it started too, and forwarded signals go to that group. With a terminal attached it
//!   stays in `run`'s group, so that Ctrl-C, Ctrl-Z and the shell's job control reach it as
//!   they did; the deadline then signals the command alone. Without a deadline it stays in
//!   `run`'s group too, so that a runner which kills `run`'s group (nextest past its
//!   `slow-timeout`) kills the command with it. So keep the deadline below nextest's
//!   termination, as for tests: its SIGTERM still reaches the command (passed on to the group),
//!   its SIGKILL would not. A process that left the group (`setsid`) is reached by neither,
//!   and keeps the slot until it exits.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Command, ExitCode, ExitStatus};
use std::time::Duration;

use gpu_test_permit::config::{Config, NextestEnv};

use crate::args::Args;

/// The exit code of `run` whose command held its permit past the hold deadline and was
/// ended (as `timeout(1)` exits when its command times out).
pub(crate) const HOLD_TIMEOUT_EXIT: u8 = 124;

/// How long a command past the hold deadline has between SIGTERM and SIGKILL.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(5);

/// `run`.
pub(crate) fn main(args: &Args) -> Result<ExitCode, String> {
    let ask = crate::Ask::from_args(args)?;
    // The parser has checked that there is a command, and left it and its arguments as given.
    let (program, program_args) = args.operands().split_first().ok_or("no command given")?;
    let cannot_run =
        |e: std::io::Error| format!("cannot run `{}`: {e}", Path::new(program).display());
    let mut cmd = Command::new(program);
    cmd.args(program_args);
    let cfg = Config::from_env();
    if pass_through(
        program_args,
        args.value("--group"),
        args.value("--filter"),
        cfg.nextest.as_ref(),
    ) {
        return sys::run_in_place(&mut cmd).map_err(cannot_run);
    }
    // Before anything else starts a thread, so that every thread inherits the blocked mask.
    let signals = sys::Forwarder::start(Config::global().hold_timeout.is_some());
    let permit = crate::take(ask)?;
    match permit.pass_to(&mut cmd) {
        Ok(()) => {}
        // Where descriptors are not inherited, a command that uses the crate takes its own.
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {}
        Err(e) => return Err(format!("cannot pass the permit on: {e}")),
    }
    export_devices(&permit, &mut cmd)?;
    let ended = signals.run(&mut cmd).map_err(cannot_run)?;
    // The run's records say how the command ended (a test's failure, for `report`).
    gpu_test_permit::runs::set_command_outcome(ended.status.code(), signal_of(&ended.status));
    drop(permit);
    let Some(late) = ended.late else {
        return Ok(exit_like(ended.status));
    };
    // The command has exited: report its hang as the watchdog would have.
    let late = late.held_by_command(command_line(program, program_args), ended.pid);
    let target = if ended.own_group {
        "process group"
    } else {
        "process"
    };
    let how = if ended.killed {
        format!(
            "SIGTERM, then SIGKILL {}s later, to its {target}",
            KILL_GRACE.as_secs()
        )
    } else {
        format!("SIGTERM to its {target}")
    };
    eprintln!(
        "{}\ngpu-test-permit: ended the command with {how} ({}); exiting with \
         {HOLD_TIMEOUT_EXIT}.",
        late.diagnosis(),
        ended.status
    );
    late.record();
    Ok(ExitCode::from(HOLD_TIMEOUT_EXIT))
}

/// The command line as the hang record and the diagnosis name it (long ones shortened).
fn command_line(program: &OsStr, args: &[OsString]) -> String {
    const LONGEST: usize = 200;
    let mut line = program.to_string_lossy().into_owned();
    for a in args {
        line.push(' ');
        line.push_str(&a.to_string_lossy());
    }
    if let Some((cut, _)) = line.char_indices().nth(LONGEST) {
        line.truncate(cut);
        line.push('…');
    }
    line
}

/// Makes the command see only the permit's GPUs (`CUDA_VISIBLE_DEVICES`, and the HIP/ROCm
/// variables where the caller set them), so that a suite that opens device 0 lands on the
/// permit's GPU; see [`gpu_test_permit::devices::export`]. The command then numbers its GPUs
/// from 0, so its own pool (a command that uses the crate works inside this permit) is told
/// which of them is which through `GPU_TEST_PERMIT_GPUS`: a list whose entry for the permit's
/// device is 0 (the other entries are never used by a shared permit), or every GPU in pool
/// order for an exclusive one.
fn export_devices(
    permit: &gpu_test_permit::GpuTestPermit,
    cmd: &mut Command,
) -> Result<(), String> {
    use gpu_test_permit::devices::{self, VisibleDevices};
    let pool = gpu_test_permit::PermitPool::global();
    let gpus = pool.gpus();
    let ids = Config::global().gpu_ids(gpus);
    let caller = VisibleDevices::from_lookup(|name| std::env::var_os(name));
    let vars = devices::export(permit.device(), &ids, &caller).map_err(|e| e.to_string())?;
    for (name, value) in &vars {
        cmd.env(name, value);
    }
    if vars
        .iter()
        .any(|(name, _)| *name == devices::CUDA_VISIBLE_DEVICES)
    {
        let seen: Vec<usize> = match permit.device() {
            Some(k) => {
                let mut others: Vec<usize> = (1..gpus).collect();
                others.insert(k.min(others.len()), 0);
                others
            }
            None => (0..gpus).collect(),
        };
        let list: Vec<String> = seen.iter().map(usize::to_string).collect();
        // One GPU is written with a trailing comma, so that it reads as a list, not a count.
        let value = match list.as_slice() {
            [one] => format!("{one},"),
            _ => list.join(","),
        };
        cmd.env(gpu_test_permit::config::GPUS_VAR, value);
    }
    Ok(())
}

/// Whether the command runs straight through, without a permit: a listing of tests (`--list`
/// among its arguments), a test outside test group `group`, or one whose name does not
/// contain `filter`.
fn pass_through(
    args: &[OsString],
    group: Option<&OsStr>,
    filter: Option<&OsStr>,
    nextest: Option<&NextestEnv>,
) -> bool {
    if args.iter().any(|a| a == "--list") {
        return true;
    }
    if let Some(group) = group {
        let current = nextest.and_then(|n| n.test_group.as_deref());
        if current.map(OsStr::new) != Some(group) {
            return true;
        }
    }
    if let Some(filter) = filter {
        let filter = filter.to_string_lossy();
        let name = match nextest.and_then(|n| n.test_name.as_deref()) {
            Some(name) => name.contains(&*filter),
            // Without the variable (older nextest, cargo test), the test is named in the
            // arguments.
            None => args.iter().any(|a| a.to_string_lossy().contains(&*filter)),
        };
        if !name {
            return true;
        }
    }
    false
}

/// The signal that ended the command, where there are signals.
fn signal_of(status: &ExitStatus) -> Option<i32> {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.signal()
    }
    #[cfg(not(unix))]
    {
        let _ = status;
        None
    }
}

/// Ends this process the way `status` ended the command, or returns the exit code to use.
fn exit_like(status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => return ExitCode::SUCCESS,
        Some(code) => return ExitCode::from(code.clamp(1, 255) as u8),
        None => {}
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            sys::die_of(sig);
            return ExitCode::from((128 + sig).clamp(1, 255) as u8);
        }
    }
    ExitCode::FAILURE
}

/// How the command ended (from either platform's `sys::Forwarder::run`).
struct Ended {
    status: ExitStatus,
    pid: u32,
    /// The hold timeout, where the permit was held past the hold deadline.
    late: Option<gpu_test_permit::HoldTimeout>,
    /// Whether it was sent SIGKILL for that.
    killed: bool,
    /// Whether it led a process group of its own.
    own_group: bool,
}

#[cfg(unix)]
mod sys {
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
        pub(super) fn run(self, cmd: &mut Command) -> io::Result<Ended> {
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
}

#[cfg(not(unix))]
mod sys {
    //! No signals to forward and no process groups: the command is polled, and killed (it
    //! alone) once the permit is held past the hold deadline.

    use std::io;
    use std::process::Command;
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;

    use gpu_test_permit::HoldTimeout;

    use super::Ended;

    pub(super) struct Forwarder {
        late: Arc<Mutex<Option<HoldTimeout>>>,
    }

    impl Forwarder {
        pub(super) fn start(hold_deadline: bool) -> Forwarder {
            let late = Arc::new(Mutex::new(None));
            if hold_deadline {
                let handling = Arc::clone(&late);
                let _ = gpu_test_permit::on_hold_timeout(move |t| {
                    *handling.lock().unwrap_or_else(PoisonError::into_inner) = Some(t);
                });
            }
            Forwarder { late }
        }

        pub(super) fn run(self, cmd: &mut Command) -> io::Result<Ended> {
            let mut child = cmd.spawn()?;
            let mut killed = false;
            let status = loop {
                if let Some(status) = child.try_wait()? {
                    break status;
                }
                let late = self
                    .late
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_some();
                if late && !killed {
                    killed = true;
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let late = self
                .late
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            Ok(Ended {
                status,
                pid: child.id(),
                late,
                killed,
                own_group: false,
            })
        }
    }

    /// Runs `cmd` and ends as it did.
    pub(super) fn run_in_place(cmd: &mut Command) -> io::Result<std::process::ExitCode> {
        cmd.status().map(super::exit_like)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(group: Option<&str>, name: Option<&str>) -> NextestEnv {
        let lookup = |var: &str| -> Option<OsString> {
            match var {
                "NEXTEST_RUN_ID" => Some("r".into()),
                "NEXTEST_TEST_GROUP" => group.map(Into::into),
                "NEXTEST_TEST_NAME" => name.map(Into::into),
                _ => None,
            }
        };
        Config::from_lookup(lookup).nextest.unwrap()
    }

    #[test]
    fn listings_other_groups_and_unmatched_names_pass_through() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        let gpu = Some(OsStr::new("gpu"));
        let test = args(&["gpu::draws", "--exact", "--nocapture"]);
        let list = args(&["--list", "--format", "terse"]);
        let in_gpu = env(Some("gpu"), Some("gpu::draws"));
        let global = env(Some("@global"), Some("cpu::adds"));
        // (args, group, filter, env, passes through)
        let cases: [(&[OsString], _, _, Option<&NextestEnv>, bool); 10] = [
            (&list, None, None, None, true),
            (&list, gpu, None, Some(&in_gpu), true),
            (&test, None, None, None, false),
            (&test, gpu, None, Some(&in_gpu), false),
            (&test, gpu, None, Some(&global), true),
            (&test, gpu, None, None, true),
            (&test, None, Some(OsStr::new("gpu::")), Some(&in_gpu), false),
            (&test, None, Some(OsStr::new("gpu::")), Some(&global), true),
            // Without NEXTEST_TEST_NAME the arguments name the test.
            (&test, None, Some(OsStr::new("draws")), None, false),
            (&test, gpu, Some(OsStr::new("other")), Some(&in_gpu), true),
        ];
        for (i, (a, group, filter, nextest, expected)) in cases.into_iter().enumerate() {
            assert_eq!(
                pass_through(a, group, filter, nextest),
                expected,
                "case {i}"
            );
        }
    }
}
