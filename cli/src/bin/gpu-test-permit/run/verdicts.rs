//! The verdict of a watched test binary (`watch` as cargo's target runner): its standard
//! output passed through unchanged and read for libtest's results
//! ([`gpu_test_permit_cli::verdict`]), its exit awaited for at most the exit grace once every
//! test has its result, and what the two together say: a teardown fault (every test had its
//! result, then the process crashed or hung), or a crash while tests ran, whose tests without
//! a result run again, each alone, until each has one.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use gpu_test_permit::config::{Config, Teardown};
use gpu_test_permit_cli::verdict::{
    Ended, Progress, Verdict, judge, listed_tests, options_without_filters,
};

use super::sys::Forwarder;

/// The most tests without a result that a crash makes run again, each in a process of its own.
const MOST_RERUNS: usize = 64;
/// How long the output is still read once the process has exited (a process it started may
/// keep the pipe open).
const DRAIN: Duration = Duration::from_secs(2);
/// The most threads of a process hung at exit that are named.
const MOST_THREADS: usize = 16;

/// A test process run and watched to its end.
pub(super) struct Judged {
    pub(super) status: ExitStatus,
    pub(super) pid: u32,
    pub(super) progress: Progress,
    /// Where it hung at exit (and was ended): what its threads waited in.
    pub(super) hung: Option<String>,
}

impl Judged {
    pub(super) fn verdict(&self) -> Verdict {
        judge(&self.progress, ended(self.status))
    }
}

/// How `status` ended, as the verdict reads it.
fn ended(status: ExitStatus) -> Ended {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return Ended::Signal(sig);
        }
    }
    Ended::Code(status.code().unwrap_or(1))
}

/// Whether the process ended once its tests were done, and when they were.
#[derive(Default)]
struct Finish {
    /// Every test had its result (the output said so).
    complete: bool,
    /// The process has exited.
    exited: bool,
}

/// Runs `cmd` through `signals` with its standard output passed through to ours unchanged and
/// read for its results; once every test has its result, the process has `grace` to exit,
/// past which what its threads wait in is read and it is ended (with what it started, where it
/// leads a group).
pub(super) fn run_judged(
    signals: &Forwarder,
    cmd: &mut Command,
    grace: Duration,
) -> std::io::Result<Judged> {
    cmd.stdout(Stdio::piped());
    let progress = Arc::new(Mutex::new(Progress::default()));
    let finish = Arc::new((Mutex::new(Finish::default()), Condvar::new()));
    let hung: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let (drained_tx, drained) = mpsc::channel::<()>();
    let ended = signals.run_with(cmd, |child, ender| {
        let Some(out) = child.stdout.take() else {
            return;
        };
        let (progress, finish_out) = (Arc::clone(&progress), Arc::clone(&finish));
        std::thread::spawn(move || {
            pass_through(out, &progress, &finish_out);
            let _ = drained_tx.send(());
        });
        let (finish, hung) = (Arc::clone(&finish), Arc::clone(&hung));
        std::thread::spawn(move || {
            let (state, changed) = &*finish;
            let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
            while !s.complete && !s.exited {
                s = changed.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
            let give_up = Instant::now() + grace;
            while !s.exited {
                let left = give_up.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let threads = threads_of(ender.pid());
                    let descendants = descendants_of(ender.pid());
                    if ender.end() {
                        end_all(&descendants);
                        *hung.lock().unwrap_or_else(PoisonError::into_inner) = Some(threads);
                    }
                    return;
                }
                s = changed
                    .wait_timeout(s, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        });
    })?;
    {
        let (state, changed) = &*finish;
        state.lock().unwrap_or_else(PoisonError::into_inner).exited = true;
        changed.notify_all();
    }
    let _ = drained.recv_timeout(DRAIN);
    let progress = progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let hung = hung.lock().unwrap_or_else(PoisonError::into_inner).take();
    Ok(Judged {
        status: ended.status,
        pid: ended.pid,
        progress,
        hung,
    })
}

/// Copies `out` to standard output as it comes, byte for byte, and feeds its lines to
/// `progress`; says when every test has its result.
fn pass_through(mut out: impl Read, progress: &Mutex<Progress>, finish: &(Mutex<Finish>, Condvar)) {
    let mut buf = vec![0u8; 64 << 10];
    let mut line: Vec<u8> = Vec::new();
    // A line longer than this is passed through, not read.
    const LONGEST: usize = 64 << 10;
    let mut overlong = false;
    let stdout = std::io::stdout();
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        {
            let mut to = stdout.lock();
            let _ = to.write_all(&buf[..n]);
            let _ = to.flush();
        }
        let mut complete = false;
        {
            let mut p = progress.lock().unwrap_or_else(PoisonError::into_inner);
            for &b in &buf[..n] {
                if b == b'\n' {
                    if !overlong {
                        p.line(&String::from_utf8_lossy(&line));
                    }
                    line.clear();
                    overlong = false;
                } else if line.len() < LONGEST {
                    line.push(b);
                } else {
                    overlong = true;
                }
            }
            complete |= p.complete();
        }
        if complete {
            let (state, changed) = finish;
            let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
            if !s.complete {
                s.complete = true;
                changed.notify_all();
            }
        }
    }
    if !line.is_empty() && !overlong {
        progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .line(&String::from_utf8_lossy(&line));
    }
}

/// What the threads of process `pid` wait in, as `/proc/<pid>/task` tells: `name (wait
/// channel)` each, the most [`MOST_THREADS`].
fn threads_of(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "its threads cannot be read".to_string();
    };
    let mut seen = Vec::new();
    let mut more = 0usize;
    for task in tasks.flatten() {
        if seen.len() == MOST_THREADS {
            more += 1;
            continue;
        }
        let read = |file: &str| {
            let mut text = String::new();
            let _ = std::fs::File::open(task.path().join(file))
                .and_then(|f| f.take(256).read_to_string(&mut text));
            text.trim().to_string()
        };
        let name = read("comm");
        let wchan = match read("wchan") {
            w if w.is_empty() || w == "0" => "running".to_string(),
            w => w,
        };
        seen.push(format!("{name} ({wchan})"));
    }
    if more > 0 {
        seen.push(format!("and {more} more"));
    }
    seen.join(", ")
}

/// The processes process `pid` started, and theirs, as `/proc/<pid>/task/*/children` lists
/// them (Linux; none elsewhere), at most a thousand.
fn descendants_of(pid: u32) -> Vec<u32> {
    let mut found: Vec<u32> = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                if found.len() < 1000 && !found.contains(&child) {
                    found.push(child);
                    next.push(child);
                }
            }
        }
    }
    found
}

/// Ends processes `pids` (what a process hung at exit started).
fn end_all(pids: &[u32]) {
    #[cfg(unix)]
    for &pid in pids {
        // SAFETY: kill(2) has no memory effects; a pid reused since it was listed is a risk
        // taken for a moment only, as `pkill -P` takes it.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    #[cfg(not(unix))]
    let _ = pids;
}

/// What a watched process's permits were when it ended, from its marks in the loader's log.
#[derive(Default)]
pub(super) struct Permits {
    /// The tests holding a permit, one entry a permit (at most [`MOST_NAMED`]).
    holding: Vec<String>,
    /// The last tests granted one, oldest first (at most [`LAST_NAMED`]).
    last: Vec<String>,
}

/// The most permits held at once that are kept by name.
const MOST_NAMED: usize = 64;
/// The last grants named.
const LAST_NAMED: usize = 4;

impl Permits {
    pub(super) fn granted(&mut self, test: &str) {
        if self.holding.len() < MOST_NAMED {
            self.holding.push(test.to_string());
        }
        self.last.retain(|t| t != test);
        if self.last.len() == LAST_NAMED {
            self.last.remove(0);
        }
        self.last.push(test.to_string());
    }

    pub(super) fn returned(&mut self, test: &str) {
        if let Some(at) = self.holding.iter().position(|t| t == test) {
            self.holding.remove(at);
        }
    }

    /// The verdict's words for them: who held GPU permits when the process ended, else who
    /// held them last.
    pub(super) fn said(&self) -> String {
        if !self.holding.is_empty() {
            let mut named = self.holding.clone();
            named.dedup();
            return format!("GPU permits held then by {}", named.join(", "));
        }
        if !self.last.is_empty() {
            return format!(
                "no GPU permit held then; held last by {}",
                self.last.join(", ")
            );
        }
        "no GPU permit was taken (or its process is not watched)".to_string()
    }
}

/// What was seen around a watched process: the drivers it had mapped, its permits.
pub(super) struct Around {
    pub(super) drivers: String,
    pub(super) permits: String,
}

/// The drivers a watched process had mapped, by file name, for the verdict's line.
pub(super) fn drivers_named(seen: &gpu_test_permit_cli::watch_log::WatchLog) -> String {
    let mut names: Vec<&str> = Vec::new();
    for d in seen.linked.iter().chain(seen.loaded.iter()) {
        let name = gpu_test_permit::__private::drivers::library_name(d);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        "none seen".to_string()
    } else {
        names.join(", ")
    }
}

/// The verdict of `judged`, a watched run of `program` with `args`: said where it is a
/// teardown fault or a crash (the crash's tests without a result run again, each alone), and
/// the exit code `watch` ends with.
pub(super) fn conclude(
    signals: &Forwarder,
    program: &OsString,
    args: &[OsString],
    judged: &Judged,
    around: &Around,
) -> ExitCode {
    let Around { drivers, permits } = around;
    let cfg = Config::global();
    let binary = binary_name(program);
    match judged.verdict() {
        Verdict::NotATestRun | Verdict::Passed | Verdict::Failed => super::exit_like(judged.status),
        Verdict::Teardown { ended } => {
            let how = match &judged.hung {
                Some(threads) => format!(
                    "hung at exit (still running {:?} after its last result; its threads: \
                     {threads}) and was ended",
                    cfg.exit_grace
                ),
                None => format!("died by {ended}"),
            };
            let policy = match cfg.teardown {
                Teardown::Pass => {
                    "passing it as its tests did (GPU_TEST_PERMIT_TEARDOWN=fail fails it)"
                }
                Teardown::Fail => "failing it (GPU_TEST_PERMIT_TEARDOWN=fail)",
            };
            let said = format!(
                "teardown fault: `{binary}` {how} after all {} of its tests had their results, \
                 none failed; {permits}; drivers mapped: {drivers}; {policy}",
                judged.progress.results()
            );
            eprintln!("gpu-test-permit: {said}");
            let (fault, ended) = match &judged.hung {
                Some(_) => ("hang", "hung at exit".to_string()),
                None => ("teardown", ended.to_string()),
            };
            let failed = cfg.teardown == Teardown::Fail;
            gpu_test_permit::__private::record_verdict(judged.pid, fault, &ended, failed, &said);
            match cfg.teardown {
                Teardown::Pass => ExitCode::SUCCESS,
                Teardown::Fail => super::exit_like(judged.status),
            }
        }
        Verdict::Crashed {
            ended,
            selected,
            results,
            failed,
        } => {
            let how = match &judged.hung {
                Some(threads) => format!("hung (its threads: {threads}) and was ended"),
                None => format!("died by {ended}"),
            };
            let said = format!(
                "crash: `{binary}` {how} while its tests ran: {} of its {selected} tests had no \
                 result; {permits}; drivers mapped: {drivers}; running each of them again, alone",
                selected.saturating_sub(results)
            );
            eprintln!("gpu-test-permit: {said}");
            let alone = rerun_without_result(signals, program, args, &judged.progress);
            let reruns = say_reruns(&binary, &alone);
            eprintln!("gpu-test-permit: {reruns}");
            let failed = failed || !alone.all_passed();
            let ended = match &judged.hung {
                Some(_) => "hung".to_string(),
                None => ended.to_string(),
            };
            gpu_test_permit::__private::record_verdict(
                judged.pid,
                "crash",
                &ended,
                failed,
                &format!("{said}; {reruns}"),
            );
            if failed {
                ExitCode::from(101)
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}

/// What running the tests without a result again, each alone, found.
#[derive(Default)]
struct Alone {
    /// Passed alone: they crashed only beside others (contention casualties).
    passed: Vec<String>,
    /// Failed alone.
    failed: Vec<String>,
    /// Crashed alone: the crash, with how.
    crashed: Vec<(String, String)>,
    /// Not run again: past [`MOST_RERUNS`], or the tests could not be listed.
    not_run: Vec<String>,
    /// Why the tests could not be listed, where they could not.
    unlisted: Option<String>,
}

impl Alone {
    fn all_passed(&self) -> bool {
        self.failed.is_empty()
            && self.crashed.is_empty()
            && self.not_run.is_empty()
            && self.unlisted.is_none()
    }
}

/// Runs each test of `program` that `progress` gives no result for again, in a process of its
/// own (`--exact NAME`, the run's other options kept), under the same watch.
fn rerun_without_result(
    signals: &Forwarder,
    program: &OsString,
    args: &[OsString],
    progress: &Progress,
) -> Alone {
    let mut alone = Alone::default();
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let listed = Command::new(program)
        .args(&args)
        .arg("--list")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let names = match listed {
        Ok(out) if out.status.success() => listed_tests(&String::from_utf8_lossy(&out.stdout)),
        Ok(out) => {
            alone.unlisted = Some(format!("`--list` ended with {}", out.status));
            return alone;
        }
        Err(e) => {
            alone.unlisted = Some(format!("`--list` could not run: {e}"));
            return alone;
        }
    };
    let mut without: Vec<String> = Vec::new();
    for name in names {
        if !progress.named().iter().any(|(n, _)| *n == name) {
            without.push(name);
        }
    }
    // A process of one test (nextest's) crashed alone already.
    if progress.selected() == Some(1) && without.len() == 1 {
        alone
            .crashed
            .push((without.remove(0), "alone already".to_string()));
        return alone;
    }
    let options = options_without_filters(&args);
    let grace = Config::global().exit_grace;
    for (i, name) in without.into_iter().enumerate() {
        if i >= MOST_RERUNS {
            alone.not_run.push(name);
            continue;
        }
        let mut cmd = Command::new(program);
        cmd.args(&options)
            .args(["--exact", "--test-threads", "1"])
            .arg(&name);
        let judged = match run_judged(signals, &mut cmd, grace) {
            Ok(judged) => judged,
            Err(e) => {
                alone
                    .crashed
                    .push((name, format!("could not run again: {e}")));
                continue;
            }
        };
        match judged.verdict() {
            Verdict::Passed => alone.passed.push(name),
            // Alone as in the run: a teardown fault passes or fails by the policy.
            Verdict::Teardown { ended } => match Config::global().teardown {
                Teardown::Pass => alone.passed.push(name),
                Teardown::Fail => alone
                    .failed
                    .push(format!("{name} (a teardown fault: {ended})")),
            },
            Verdict::Failed => alone.failed.push(name),
            Verdict::Crashed { ended, .. } => {
                let how = match judged.hung {
                    Some(_) => "hung".to_string(),
                    None => format!("died by {ended}"),
                };
                alone.crashed.push((name, how));
            }
            Verdict::NotATestRun => alone
                .crashed
                .push((name, format!("gave no results ({})", judged.status))),
        }
    }
    alone
}

/// What the tests run again alone found, in one line.
fn say_reruns(binary: &str, alone: &Alone) -> String {
    let mut parts = Vec::new();
    if let Some(why) = &alone.unlisted {
        parts.push(format!(
            "its tests could not be listed ({why}), so none ran again"
        ));
    }
    if !alone.crashed.is_empty() {
        let named: Vec<String> = alone
            .crashed
            .iter()
            .map(|(n, how)| format!("{n} ({how})"))
            .collect();
        parts.push(format!("crashed alone, the crash: {}", named.join(", ")));
    }
    if !alone.failed.is_empty() {
        parts.push(format!("failed alone: {}", alone.failed.join(", ")));
    }
    if !alone.passed.is_empty() {
        let what = if alone.crashed.is_empty() && alone.failed.is_empty() {
            "every one passed alone, so the crash came only beside other tests (a contention \
             casualty): "
        } else {
            "passed alone: "
        };
        parts.push(format!("{what}{}", alone.passed.join(", ")));
    }
    if !alone.not_run.is_empty() {
        parts.push(format!(
            "not run again (at most {MOST_RERUNS} are): {}",
            alone.not_run.len()
        ));
    }
    let ran = alone.passed.len() + alone.failed.len() + alone.crashed.len();
    format!(
        "`{binary}`: {ran} test(s) run again alone: {}",
        if parts.is_empty() {
            "none had to be".to_string()
        } else {
            parts.join("; ")
        }
    )
}

/// The test binary's file name, as the verdict's lines name it.
fn binary_name(program: &OsString) -> String {
    std::path::Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.to_string_lossy().into_owned())
}
