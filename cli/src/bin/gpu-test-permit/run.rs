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
    let ask = crate::hold::Ask::from_args(args)?;
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
    let watch = match args.flag("--watch") {
        true => Some(Watch::new()?),
        false => None,
    };
    // Before anything else starts a thread, so that every thread inherits the blocked mask.
    let signals = sys::Forwarder::start(Config::global().hold_timeout.is_some());
    let permit = crate::hold::take(ask)?;
    match permit.pass_to(&mut cmd) {
        Ok(()) => {}
        // Where descriptors are not inherited, a command that uses the crate takes its own.
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {}
        Err(e) => return Err(format!("cannot pass the permit on: {e}")),
    }
    export_devices(&permit, &mut cmd)?;
    if let Some(w) = &watch {
        w.arm(&mut cmd);
    }
    let ended = signals.run(&mut cmd).map_err(cannot_run)?;
    // The run's records say how the command ended (a test's failure, for `report`).
    gpu_test_permit::__private::runs::set_command_outcome(
        ended.status.code(),
        signal_of(&ended.status),
    );
    drop(permit);
    // Read once the permit is back: the log may be long, and its slots are not held for it.
    if let Some(w) = &watch {
        // The command held the permit all its life, and so did what it started (the permit's
        // locks are inherited): whatever they loaded, they loaded with one.
        let mut seen = w.read(ended.pid);
        seen.unpermitted.clear();
        seen.before_first_permit = false;
        seen.started_process = false;
        seen.held = true;
        seen.record(ended.pid);
    }
    // Removed now: a command killed by a signal is died of below, which runs no destructor.
    drop(watch);
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

/// `watch [--] COMMAND [ARGS...]`: run a command with no permit of its own, watching which GPU
/// drivers its process loads and whether it held a permit then (see
/// [`gpu_test_permit::__private::drivers`]), and end the way it ended. Under nextest the run's records get
/// what was seen, for `report`; otherwise a command that loaded a driver without a permit is
/// named on standard error.
///
/// A test binary's verdict is judged too (`verdicts`): its output passes through unchanged and
/// is read for libtest's results, so that a process that crashes or hangs after every test
/// had its result is a teardown fault (passing as its tests did, `GPU_TEST_PERMIT_TEARDOWN`),
/// and one that crashes while tests run has its tests without a result run again, each alone.
pub(crate) fn watch(args: &Args) -> Result<ExitCode, String> {
    let (program, program_args) = args.operands().split_first().ok_or("no command given")?;
    let cannot_run =
        |e: std::io::Error| format!("cannot run `{}`: {e}", Path::new(program).display());
    let mut cmd = Command::new(program);
    cmd.args(program_args);
    if program_args.iter().any(|a| a == "--list") {
        return sys::run_in_place(&mut cmd).map_err(cannot_run);
    }
    let watch = Watch::new()?;
    // In `watch`'s process group, so that a runner that ends the group (nextest past its
    // `slow-timeout`) ends the command too; a process hung at exit is ended with its
    // descendants, looked up one by one (`verdicts`).
    let signals = sys::Forwarder::start(false);
    watch.arm(&mut cmd);
    let judged = verdicts::run_judged(&signals, &mut cmd, Config::global().exit_grace)
        .map_err(cannot_run)?;
    let seen = watch.read(judged.pid);
    let permits = watch.permits(judged.pid);
    drop(watch);
    let recorded = seen.record(judged.pid);
    if !recorded && !seen.unpermitted.is_empty() {
        let names: Vec<&str> = seen
            .unpermitted
            .iter()
            .map(|d| gpu_test_permit::__private::drivers::library_name(d))
            .collect();
        eprintln!(
            "gpu-test-permit: `{}` loaded a GPU driver while it held no permit{}: {}",
            command_line(program, program_args),
            if seen.before_first_permit && seen.held {
                " (before its first permit)"
            } else {
                ""
            },
            names.join(", ")
        );
    }
    let drivers = verdicts::drivers_named(&seen);
    Ok(verdicts::conclude(
        &signals,
        program,
        program_args,
        &judged,
        &verdicts::Around {
            drivers,
            permits: permits.said(),
        },
    ))
}

/// A private directory for the loader's logs of a watched command (`LD_DEBUG=files`, glibc):
/// one for each of its processes, `ld.<pid>`. Removed when dropped.
struct Watch(crate::private_dir::PrivateDir);

/// The name every log in the directory starts with; the loader adds `.<pid>`. Those of
/// processes that work inside a permit passed on to them start with
/// [`gpu_test_permit::__private::drivers::INSIDE_PERMIT_LOG`] instead.
const LOG_PREFIX: &str = "ld";

impl Watch {
    /// A new private directory, written to once: where the loader cannot open its log it
    /// writes it to the command's standard output instead, so a directory that takes no file
    /// (a full disk) is an error here.
    fn new() -> Result<Watch, String> {
        let watch = crate::private_dir::PrivateDir::new("watch").map(Watch)?;
        let probe = watch.0.path().join("ld.writable");
        std::fs::write(&probe, b"gpu-test-permit\n")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| {
                format!(
                    "cannot watch: the loader's log cannot be written in {}: {e}",
                    watch.0.path().display()
                )
            })?;
        Ok(watch)
    }

    /// Makes the loader of `cmd`'s process (and of each process it starts, which inherits
    /// the variables) log every library it maps into this directory, and tells the crate in
    /// it where to write its marks.
    fn arm(&self, cmd: &mut Command) {
        let log = self.0.path().join(LOG_PREFIX);
        cmd.env("LD_DEBUG", "files")
            .env("LD_DEBUG_OUTPUT", &log)
            .env(gpu_test_permit::__private::drivers::WATCH_VAR, &log);
    }

    /// What the logs of the command (process `pid`) and of every process it started say,
    /// together; each log is read with its own process's marks, as a stream. A process that
    /// worked inside a permit passed on to it held one all its life.
    fn read(&self, pid: u32) -> gpu_test_permit_cli::watch_log::WatchLog {
        let mut seen = gpu_test_permit_cli::watch_log::WatchLog::default();
        let mut own = false;
        let entries = std::fs::read_dir(self.0.path()).into_iter().flatten();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            let Some((inside, of)) = name.to_str().and_then(|n| {
                let (prefix, of) = n.split_once('.')?;
                let inside = match prefix {
                    LOG_PREFIX => false,
                    gpu_test_permit::__private::drivers::INSIDE_PERMIT_LOG => true,
                    _ => return None,
                };
                Some((inside, of.parse::<u32>().ok()?))
            }) else {
                continue;
            };
            // Only regular files: nothing here may block the read.
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let read = std::fs::File::open(entry.path()).and_then(|f| {
                gpu_test_permit_cli::watch_log::read_watch_log_from(
                    std::io::BufReader::with_capacity(1 << 16, f),
                )
            });
            match read {
                Ok(mut log) => {
                    if inside {
                        log.unpermitted.clear();
                        log.before_first_permit = false;
                        log.held = true;
                    }
                    log.started_process = of != pid && !log.unpermitted.is_empty();
                    seen.merge(log);
                }
                Err(e) => eprintln!(
                    "gpu-test-permit: cannot read the loader's log of process {of} ({}): {e}; \
                     its driver loads are not counted",
                    entry.path().display()
                ),
            }
            own |= of == pid && !inside;
        }
        if !own {
            // The command's loader wrote nothing: not glibc's (musl, a static binary, another
            // system), or the command is not a program of its own (a script's interpreter
            // would have written one).
            eprintln!(
                "gpu-test-permit: the command's dynamic loader kept no log, so its driver loads \
                 were not seen (watching needs glibc's loader, on Linux)"
            );
        }
        seen
    }
}

impl Watch {
    /// What the loader's log of process `pid` says of its permits (the crate's
    /// [`GRANTED_MARK`](gpu_test_permit::__private::drivers::GRANTED_MARK) and
    /// [`RETURNED_MARK`](gpu_test_permit::__private::drivers::RETURNED_MARK) lines): the tests
    /// that held one when it ended, and the last ones granted one.
    fn permits(&self, pid: u32) -> verdicts::Permits {
        use gpu_test_permit::__private::drivers::{GRANTED_MARK, RETURNED_MARK};
        use std::io::{BufRead, Read};
        let mut permits = verdicts::Permits::default();
        let path = self.0.path().join(format!("{LOG_PREFIX}.{pid}"));
        let Ok(file) = std::fs::File::open(&path) else {
            return permits;
        };
        let mut reader = std::io::BufReader::new(file);
        let mut line = Vec::new();
        loop {
            line.clear();
            // A line is read to its end, at most 4 KiB of it kept.
            match (&mut reader).take(4096).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') {
                let _ = reader.skip_until(b'\n');
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            if let Some(test) = text
                .strip_prefix(GRANTED_MARK)
                .and_then(|t| t.strip_prefix(' '))
            {
                permits.granted(test);
            } else if let Some(test) = text
                .strip_prefix(RETURNED_MARK)
                .and_then(|t| t.strip_prefix(' '))
            {
                permits.returned(test);
            }
        }
        permits
    }
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
/// permit's GPU; see [`gpu_test_permit::devices::export_devices`]. The command then numbers
/// its GPUs from 0, so its own pool (a command that uses the crate works inside this permit)
/// is told which of them is which through `GPU_TEST_PERMIT_GPUS`: a list whose entries for the
/// permit's devices are 0, 1, ... in order (the other entries, numbered after them, are never
/// used inside a shared permit), or every GPU in pool order for an exclusive one.
fn export_devices(
    permit: &gpu_test_permit::GpuTestPermit,
    cmd: &mut Command,
) -> Result<(), String> {
    use gpu_test_permit::devices::{self, VisibleDevices};
    let pool = gpu_test_permit::PermitPool::global();
    let gpus = pool.gpus();
    let ids = Config::global().gpu_ids(gpus);
    let caller = VisibleDevices::from_lookup(|name| std::env::var_os(name));
    let held = match permit.devices() {
        // A multi-GPU pool without host slots places nothing: the command sees every GPU.
        d if d.is_empty() => (0..gpus).collect(),
        d => d,
    };
    let vars = devices::export_devices(&held, &ids, &caller).map_err(|e| e.to_string())?;
    for (name, value) in &vars {
        cmd.env(name, value);
    }
    if vars
        .iter()
        .any(|(name, _)| *name == devices::CUDA_VISIBLE_DEVICES)
    {
        let value = seen_as(&held, gpus);
        cmd.env(gpu_test_permit::config::GPUS_VAR, value);
    }
    Ok(())
}

/// `GPU_TEST_PERMIT_GPUS` for a command that sees the pool's devices `held` (of `gpus`) as its
/// own 0, 1, ...: entry `d` is the command's number for pool device `d`; devices it does not
/// see are numbered after those it does. One GPU is written with a trailing comma, so that it
/// reads as a list, not a count.
fn seen_as(held: &[usize], gpus: usize) -> String {
    let mut next = held.len();
    let list: Vec<String> = (0..gpus.max(held.iter().max().map_or(0, |m| m + 1)))
        .map(|d| match held.iter().position(|&h| h == d) {
            Some(at) => at,
            None => {
                next += 1;
                next - 1
            }
        })
        .map(|n| n.to_string())
        .collect();
    match list.as_slice() {
        [one] => format!("{one},"),
        _ => list.join(","),
    }
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
#[path = "run/unix.rs"]
mod sys;

#[path = "run/verdicts.rs"]
mod verdicts;

#[cfg(not(unix))]
#[path = "run/other.rs"]
mod sys;

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
