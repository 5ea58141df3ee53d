//! `ci [--no-junit] [--allow-unpermitted] [--allow-teardown | --fail-on-teardown]
//! [--fail-on-casualty] [--dry-run] -- COMMAND [ARGS...]`: a CI step in one command.
//!
//! What it does, in order:
//!
//! 1. Runs COMMAND (`cargo nextest run ...`, `cargo test ...`, or anything that runs them) with
//!    cargo's target runner for the target (`CARGO_TARGET_<TRIPLE>_RUNNER`: the triples of
//!    `--target` in the command, else `CARGO_BUILD_TARGET`, else the host's from `rustc -vV`)
//!    set to this executable's `watch --`, and `GPU_TEST_PERMIT_DIR` set to the configuration's
//!    slot directory. A runner the caller set already is refused, unless it is a `watch --`.
//!    Its standard output and input are the command's own; its standard error passes through
//!    unchanged, read line by line on the way: nextest names its run there as it starts
//!    (`Nextest run ID <uuid> with nextest profile: <name>`), and under `cargo test` the watch
//!    says there what it saw (escapes, teardown faults, crashes).
//! 2. Under nextest, finds the run's records: the run id of that line (each `cargo nextest run`
//!    prints its own, so runs side by side in one slot directory are told apart); else the
//!    `uuid` of a JUnit report written since `ci` began; else the one run of this user
//!    recorded since `ci` began (several: refused, naming them).
//! 3. Marks nextest's JUnit report as `junit` does ([`gpu_test_permit_cli::junit::mark`]): the
//!    profile's `[profile.<name>.junit] path` in the suite's nextest configuration (or
//!    `--config-file`), with nextest's inheritance (`inherits`, else `default`), under the store
//!    directory (`[store] dir`, `target/nextest` of the workspace root) and the profile's name.
//! 4. Prints the run's report (the text `report --run-id ID` prints) and how many test
//!    processes were watched; for a `cargo test` run, which has no run records, what the watch
//!    said.
//! 5. Exits with the command's code when it failed, else 1 when a check failed (an escape, a
//!    run that was not watched, a teardown fault under the policy, a contention casualty with
//!    `--fail-on-casualty`), one line each saying why.

use std::ffi::{OsStr, OsString};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::SystemTime;

use gpu_test_permit::__private::runs::{
    RunRecords, RunSummary, first_record_time, read_run, recorded_runs, summarize,
};
use gpu_test_permit::config::{Config, DIR_VAR, TEARDOWN_VAR, Teardown};
use gpu_test_permit_cli::junit::{Skip, Verdict, mark, report_run_id};

use crate::args::Args;
use crate::report::{printable, printable_path};

/// The most test names a failure line lists.
const NAMED: usize = 5;

/// `ci`.
pub(crate) fn main(args: &Args) -> Result<ExitCode, String> {
    if !args.dash_dash() {
        return Err(args.error(
            "put `--` before the test command: gpu-test-permit ci [options] -- cargo nextest \
             run ...",
        ));
    }
    let policy = Policy::from_args(args)?;
    let plan = Plan::new(args.operands(), &policy)?;
    if args.flag("--dry-run") {
        print!("{}", plan.describe(&policy));
        return Ok(ExitCode::SUCCESS);
    }
    let started = SystemTime::now();
    let (status, said) = plan.run()?;
    let mut failures: Vec<String> = Vec::new();
    if !status.success() {
        failures.push(format!(
            "the test command failed ({})",
            printable(&status.to_string())
        ));
    }
    let nextest = said.run.is_some() || plan.nextest;
    if nextest {
        nextest_run(&plan, &policy, &said, started, &mut failures);
    } else {
        cargo_test_run(&policy, &said, &mut failures);
        if let Some(file) = &policy.group_file {
            eprintln!(
                "gpu-test-permit: ci: the GPU test group in {} is judged against a nextest \
                 run's records, which a cargo test run has none of: not judged",
                printable_path(file)
            );
        }
    }
    for why in &failures {
        eprintln!("gpu-test-permit: ci failed: {why}");
    }
    Ok(match exit_code(&status) {
        Some(code) => ExitCode::from(code),
        None if failures.is_empty() => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    })
}

/// The command's own exit code where it failed (128 + the signal that killed it).
fn exit_code(status: &ExitStatus) -> Option<u8> {
    if status.success() {
        return None;
    }
    if let Some(code) = status.code() {
        return Some(code.clamp(1, 255) as u8);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return Some((128 + sig).clamp(1, 255) as u8);
        }
    }
    Some(1)
}

/// What fails the step besides the command's own failure.
struct Policy {
    /// Escapes, and a run that was not watched, fail (not `--allow-unpermitted`).
    unpermitted: bool,
    teardown: Teardown,
    /// Where the teardown policy comes from, as the failure line names it.
    teardown_from: &'static str,
    /// `GPU_TEST_PERMIT_TEARDOWN` for the command, where a flag sets the policy.
    teardown_env: Option<&'static str>,
    casualty: bool,
    junit: bool,
    /// The committed GPU test group (`--group-file`): a run's GPU tests it does not name are
    /// said, and fail the step with `--fail-on-drift`.
    group_file: Option<PathBuf>,
    drift: bool,
}

impl Policy {
    fn from_args(args: &Args) -> Result<Policy, String> {
        let (teardown, teardown_from, teardown_env) = match (
            args.flag("--fail-on-teardown"),
            args.flag("--allow-teardown"),
        ) {
            (true, true) => {
                return Err(args.error(
                    "--fail-on-teardown and --allow-teardown say opposite things; give one",
                ));
            }
            (true, false) => (Teardown::Fail, "--fail-on-teardown", Some("fail")),
            (false, true) => (Teardown::Pass, "--allow-teardown", Some("pass")),
            (false, false) => match Config::global().teardown {
                Teardown::Fail => (Teardown::Fail, "GPU_TEST_PERMIT_TEARDOWN=fail", None),
                _ => (Teardown::Pass, "GPU_TEST_PERMIT_TEARDOWN=pass", None),
            },
        };
        if args.flag("--fail-on-drift") && args.value("--group-file").is_none() {
            return Err(
                args.error("--fail-on-drift judges the group file --group-file names; give it one")
            );
        }
        Ok(Policy {
            unpermitted: !args.flag("--allow-unpermitted"),
            teardown,
            teardown_from,
            teardown_env,
            casualty: args.flag("--fail-on-casualty"),
            junit: !args.flag("--no-junit"),
            group_file: args.value("--group-file").map(PathBuf::from),
            drift: args.flag("--fail-on-drift"),
        })
    }
}

/// The command and how it is run.
struct Plan {
    program: OsString,
    args: Vec<OsString>,
    /// Cargo's target runner variables to set, each with its value.
    runners: Vec<(String, String)>,
    /// Those the caller had set to a `watch --` already, kept as they are.
    kept: Vec<(String, String)>,
    slot_dir: PathBuf,
    records_dir: PathBuf,
    teardown_env: Option<&'static str>,
    /// Whether the command names `nextest run`.
    nextest: bool,
    /// The nextest profile the command names (`--profile`, `-P`), else `NEXTEST_PROFILE`.
    profile: Option<String>,
    /// `--config-file` in the command.
    config_file: Option<PathBuf>,
    /// `--manifest-path` in the command.
    manifest_path: Option<PathBuf>,
    /// The cargo that finds the workspace: the command's, when it is cargo.
    cargo: OsString,
}

impl Plan {
    fn new(operands: &[OsString], policy: &Policy) -> Result<Plan, String> {
        let (program, args) = operands.split_first().ok_or("ci: no command given")?;
        // The command's own options: those before a `--` of its own (after it come the test
        // binaries' arguments, or nextest's filters).
        let own: Vec<String> = args
            .iter()
            .take_while(|a| *a != "--")
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let exe = std::env::current_exe()
            .map_err(|e| format!("ci: cannot tell where this executable is: {e}"))?;
        let exe_text = exe.to_string_lossy().into_owned();
        if exe_text.chars().any(char::is_whitespace) {
            return Err(format!(
                "ci: this executable's path, {}, has a space, and cargo splits its target \
                 runner's value at spaces; install gpu-test-permit where its path has none",
                printable(&exe_text)
            ));
        }
        let runner = format!("{exe_text} watch --");
        let mut triples = option_values(&own, "--target", None);
        if triples.is_empty() {
            match std::env::var("CARGO_BUILD_TARGET") {
                Ok(t) if !t.trim().is_empty() => triples.push(t.trim().to_string()),
                _ => triples.push(host_triple()?),
            }
        }
        let (mut runners, mut kept) = (Vec::new(), Vec::new());
        for triple in &triples {
            let var = runner_var(triple);
            match std::env::var_os(&var) {
                Some(v) if !v.is_empty() => {
                    let v = v.to_string_lossy().into_owned();
                    if !is_watch(&v) {
                        return Err(format!(
                            "ci: {var} is set already, to `{}`: ci runs the tests under `{runner}` \
                             as cargo's target runner and would replace it; unset {var}, or set it \
                             to `gpu-test-permit watch --`",
                            printable(&v)
                        ));
                    }
                    kept.push((var, v));
                }
                _ => runners.push((var, runner.clone())),
            }
        }
        let slot_dir = Config::global().slot_dir_path()?;
        let records_dir = Config::global().records_dir_for(&slot_dir);
        let nextest = names_nextest_run(&own);
        let profile = option_values(&own, "--profile", Some("-P"))
            .pop()
            .or_else(|| {
                std::env::var("NEXTEST_PROFILE")
                    .ok()
                    .filter(|p| !p.is_empty())
            });
        let config_file = option_values(&own, "--config-file", None)
            .pop()
            .map(PathBuf::from);
        let manifest_path = option_values(&own, "--manifest-path", None)
            .pop()
            .map(PathBuf::from);
        let cargo = match Path::new(program).file_name() {
            Some(name) if name == "cargo" => program.clone(),
            _ => std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
        };
        Ok(Plan {
            program: program.clone(),
            args: args.to_vec(),
            runners,
            kept,
            slot_dir,
            records_dir,
            teardown_env: policy.teardown_env,
            nextest,
            profile,
            config_file,
            manifest_path,
            cargo,
        })
    }

    /// The command line, for people.
    fn command_line(&self) -> String {
        let mut line = self.program.to_string_lossy().into_owned();
        for a in &self.args {
            line.push(' ');
            line.push_str(&a.to_string_lossy());
        }
        printable(&line)
    }

    /// What `--dry-run` prints: what would run, and what would be read after.
    fn describe(&self, policy: &Policy) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "command: {}", self.command_line());
        for (var, value) in &self.runners {
            let _ = writeln!(out, "target runner: {var}={}", printable(value));
        }
        for (var, value) in &self.kept {
            let _ = writeln!(
                out,
                "target runner: {var}={} (set already)",
                printable(value)
            );
        }
        let _ = writeln!(
            out,
            "slot directory: {}{}",
            printable_path(&self.slot_dir),
            if self.records_dir == self.slot_dir {
                String::new()
            } else {
                format!(" (records in {})", printable_path(&self.records_dir))
            }
        );
        let _ = writeln!(
            out,
            "fails on: the command's failure{}{}{}",
            if policy.unpermitted {
                "; a GPU driver loaded without a permit, or a run not watched"
            } else {
                ""
            },
            match policy.teardown {
                Teardown::Fail => format!("; a teardown fault ({})", policy.teardown_from),
                _ => String::new(),
            },
            if policy.casualty {
                "; a contention casualty"
            } else {
                ""
            }
        );
        if self.nextest {
            let profile = self.profile.as_deref().unwrap_or("default");
            let _ = writeln!(out, "nextest profile: {}", printable(profile));
            if policy.junit {
                match self.junit_report(profile) {
                    Ok((path, from)) => {
                        let _ = writeln!(out, "JUnit report: {} ({from})", printable_path(&path));
                    }
                    Err(why) => {
                        let _ = writeln!(out, "JUnit report: none: {why}");
                    }
                }
            }
        } else {
            let _ = writeln!(
                out,
                "not `nextest run`: the run id, and the JUnit report, come from nextest's \
                 output if it runs"
            );
        }
        out
    }

    /// Runs the command, its standard error passed through and read on the way.
    fn run(&self) -> Result<(ExitStatus, Said), String> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .env(DIR_VAR, &self.slot_dir)
            .stderr(Stdio::piped());
        for (var, value) in &self.runners {
            cmd.env(var, value);
        }
        if let Some(policy) = self.teardown_env {
            cmd.env(TEARDOWN_VAR, policy);
        }
        // On a terminal, cargo and nextest would colour their output; through the pipe they
        // do not unless asked.
        if std::io::stderr().is_terminal() && std::env::var_os("CARGO_TERM_COLOR").is_none() {
            cmd.env("CARGO_TERM_COLOR", "always");
        }
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "ci: cannot run `{}`: {e}",
                printable(&self.program.to_string_lossy())
            )
        })?;
        let mut said = Said::default();
        if let Some(mut pipe) = child.stderr.take() {
            relay(&mut pipe, &mut said);
        }
        let status = child
            .wait()
            .map_err(|e| format!("ci: cannot wait for the test command: {e}"))?;
        Ok((status, said))
    }

    /// nextest's JUnit report of profile `profile`, and where its path is configured; or why
    /// there is none.
    fn junit_report(&self, profile: &str) -> Result<(PathBuf, String), String> {
        let root = workspace_root(&self.cargo, self.manifest_path.as_deref())?;
        let config = match &self.config_file {
            Some(file) => file.clone(),
            None => root.join(".config").join("nextest.toml"),
        };
        let text = match std::fs::read_to_string(&config) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                    "no nextest configuration at {}, so no profile writes one",
                    printable_path(&config)
                ));
            }
            Err(e) => return Err(format!("cannot read {}: {e}", printable_path(&config))),
        };
        let strings = toml_strings(&text);
        let Some((path, from)) = junit_path(&strings, profile) else {
            return Err(format!(
                "profile {} has no [profile.{}.junit] path in {} (nor a profile it inherits)",
                printable(profile),
                printable(profile),
                printable_path(&config)
            ));
        };
        let store = lookup(&strings, &["store", "dir"]).unwrap_or("target/nextest");
        Ok((
            root.join(store).join(profile).join(path),
            format!(
                "[profile.{}.junit] path in {}",
                printable(&from),
                printable_path(&config)
            ),
        ))
    }
}

/// The values of option `long` (and `short`) among `args`: `--opt V`, `--opt=V`, `-P V`,
/// `-PV`.
fn option_values(args: &[String], long: &str, short: Option<&str>) -> Vec<String> {
    let mut values = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let named = a == long || short == Some(a.as_str());
        if named {
            if let Some(v) = it.next() {
                values.push(v.clone());
            }
        } else if let Some(v) = a.strip_prefix(long).and_then(|r| r.strip_prefix('=')) {
            values.push(v.to_string());
        } else if let Some(v) = short.and_then(|s| a.strip_prefix(s)) {
            values.push(v.strip_prefix('=').unwrap_or(v).to_string());
        }
    }
    values
}

/// Whether a command's arguments run nextest: `nextest` followed by `run` (or `r`).
fn names_nextest_run(args: &[String]) -> bool {
    args.windows(2)
        .any(|w| w[0] == "nextest" && (w[1] == "run" || w[1] == "r"))
}

/// Whether a target runner already set is the watch: `... watch --`.
fn is_watch(value: &str) -> bool {
    let words: Vec<&str> = value.split_whitespace().collect();
    matches!(words.as_slice(), [.., program, "watch", "--"] if program.contains("gpu-test-permit"))
}

/// Cargo's target runner variable for `triple` (a target spec file: its name).
fn runner_var(triple: &str) -> String {
    let name = match triple.strip_suffix(".json") {
        Some(spec) => Path::new(spec)
            .file_name()
            .map_or(spec.to_string(), |n| n.to_string_lossy().into_owned()),
        None => triple.to_string(),
    };
    let mut var = String::from("CARGO_TARGET_");
    for c in name.chars() {
        var.push(match c {
            '-' | '.' => '_',
            c => c.to_ascii_uppercase(),
        });
    }
    var.push_str("_RUNNER");
    var
}

/// The host's target triple, as `rustc -vV` names it.
fn host_triple() -> Result<String, String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .arg("-vV")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("ci: cannot run `rustc -vV` for the host's target triple: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(|h| h.trim().to_string()))
        .ok_or_else(|| {
            "ci: `rustc -vV` named no host; give the target with --target in the command"
                .to_string()
        })
}

/// The workspace's root, as cargo finds it from here (or from `--manifest-path`).
fn workspace_root(cargo: &OsStr, manifest_path: Option<&Path>) -> Result<PathBuf, String> {
    let mut c = Command::new(cargo);
    c.args(["locate-project", "--workspace", "--message-format", "plain"]);
    if let Some(m) = manifest_path {
        c.arg("--manifest-path").arg(m);
    }
    let out = c
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run `cargo locate-project` for the workspace root: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo locate-project` found no workspace: {}",
            printable(String::from_utf8_lossy(&out.stderr).trim())
        ));
    }
    let manifest = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    manifest
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("`cargo locate-project` named {}", printable_path(&manifest)))
}

/// What the command said on standard error that `ci` reads.
#[derive(Debug, Default)]
struct Said {
    /// nextest's run id and profile, from its first `Nextest run ID` line.
    run: Option<(String, Option<String>)>,
    /// cargo's `Running` lines: test binaries run (under `cargo test`, each through the watch).
    binaries: usize,
    /// The watch's lines (under `cargo test`) on tests that loaded a driver without a permit.
    escapes: Kept,
    /// On teardown faults.
    teardowns: Kept,
    /// On crashes while tests ran.
    crashes: Kept,
    /// On contention casualties.
    casualties: Kept,
    /// Whether the watch said a loader kept no log (its loads were not seen).
    unwatched: bool,
}

/// Lines of one kind the command said, counted all and kept up to [`Kept::MOST`]: a test that
/// floods standard error with them (each up to 64 KiB) costs `ci` no more memory than that.
#[derive(Debug, Default)]
struct Kept {
    lines: Vec<String>,
    count: usize,
}

impl Kept {
    const MOST: usize = 256;

    fn push(&mut self, line: String) {
        self.count += 1;
        if self.lines.len() < Self::MOST {
            self.lines.push(line);
        }
    }

    fn len(&self) -> usize {
        self.count
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl Said {
    fn line(&mut self, raw: &[u8]) {
        let text = strip_ansi(&String::from_utf8_lossy(raw));
        let text = text.trim();
        if self.run.is_none()
            && let Some(rest) = text.strip_prefix("Nextest run ID ")
        {
            let mut words = rest.split_whitespace();
            if let Some(id) = words.next() {
                let profile = rest
                    .split_once("with nextest profile: ")
                    .map(|(_, p)| p.trim().to_string());
                self.run = Some((id.to_string(), profile));
            }
            return;
        }
        if text.starts_with("Running ") {
            self.binaries += 1;
            return;
        }
        let Some(said) = text.strip_prefix("gpu-test-permit: ") else {
            return;
        };
        if said.contains("loaded a GPU driver while it held no permit") {
            self.escapes.push(said.to_string());
        } else if said.starts_with("teardown fault: ") {
            self.teardowns.push(said.to_string());
        } else if said.starts_with("crash: ") {
            self.crashes.push(said.to_string());
        } else if said.contains("the command's dynamic loader kept no log") {
            self.unwatched = true;
        }
        if said.contains("contention casualt") {
            self.casualties.push(said.to_string());
        }
    }
}

/// `text` without its terminal escape sequences (colours).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // CSI: ESC [ ... final byte in @..~; others: ESC and one character.
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            _ => continue,
        }
    }
    out
}

/// Passes `pipe` on to standard error as it comes, unchanged, reading its lines into `said`.
fn relay(pipe: &mut impl Read, said: &mut Said) {
    relay_to(pipe, &mut std::io::stderr(), said);
}

/// [`relay`] to `err`.
fn relay_to(pipe: &mut impl Read, err: &mut impl Write, said: &mut Said) {
    const LONGEST: usize = 64 << 10;
    let mut writable = true;
    let mut buf = [0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // Should standard error go away, the command's output is still read to its end, so
        // that the command never blocks on it.
        if writable {
            writable = err.write_all(&buf[..n]).and_then(|()| err.flush()).is_ok();
        }
        for &b in &buf[..n] {
            if b == b'\n' || b == b'\r' {
                if !line.is_empty() {
                    said.line(&line);
                }
                line.clear();
            } else if line.len() < LONGEST {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        said.line(&line);
    }
}

/// After a nextest run: its run, its JUnit report marked, its report printed and judged.
fn nextest_run(
    plan: &Plan,
    policy: &Policy,
    said: &Said,
    started: SystemTime,
    failures: &mut Vec<String>,
) {
    let profile = said
        .run
        .as_ref()
        .and_then(|(_, p)| p.clone())
        .or_else(|| plan.profile.clone())
        .unwrap_or_else(|| "default".to_string());
    let junit = if policy.junit {
        Some(plan.junit_report(&profile))
    } else {
        None
    };
    // The report is this run's when it was written since `ci` began.
    let fresh_junit = match &junit {
        Some(Ok((path, _))) => std::fs::metadata(path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= started)
            .then(|| path.clone()),
        _ => None,
    };
    let run_id = match &said.run {
        Some((id, _)) => Ok(id.clone()),
        None => match fresh_junit
            .as_deref()
            .and_then(|p| report_run_id(p).ok().flatten())
        {
            Some(id) => Ok(id),
            None => run_since(&plan.records_dir, started),
        },
    };
    let records = match &run_id {
        Ok(id) => match read_run(&plan.records_dir, id) {
            Ok(Some(records)) => Some(records),
            Ok(None) => {
                eprintln!(
                    "gpu-test-permit: ci: no records of run {} in {}: no test process of it \
                     ran under the watch",
                    printable(id),
                    printable_path(&plan.records_dir)
                );
                None
            }
            Err(e) => {
                eprintln!("gpu-test-permit: ci: {e}");
                None
            }
        },
        Err(_) => None,
    };
    match junit {
        None => {}
        Some(Err(why)) => eprintln!("gpu-test-permit: ci: JUnit report: none: {why}"),
        Some(Ok((path, _))) => match (&fresh_junit, &records) {
            (None, _) => eprintln!(
                "gpu-test-permit: ci: JUnit report: {} was not written by this run; left as it is",
                printable_path(&path)
            ),
            (Some(_), None) => eprintln!(
                "gpu-test-permit: ci: JUnit report: {}: no records of its run; left unchanged",
                printable_path(&path)
            ),
            (Some(_), Some(records)) => {
                if let Err(why) = mark_junit(&path, records) {
                    failures.push(why);
                }
            }
        },
    }
    let Some(records) = records else {
        let why = match &run_id {
            Ok(id) => format!(
                "run {} has no records (no test process of it ran under the watch)",
                printable(id)
            ),
            Err(why) => why.clone(),
        };
        if policy.unpermitted {
            failures.push(format!(
                "{why}, so ci cannot tell whether its tests loaded a GPU driver without a permit \
                 (--allow-unpermitted passes it)"
            ));
        } else {
            eprintln!("gpu-test-permit: ci: no run report: {why}");
        }
        return;
    };
    let s = summarize(&records);
    // The report says how many test processes were watched, as `report` does.
    print!("{}", crate::runs::render(&s, &plan.slot_dir, &records.path));
    if records.truncated {
        eprintln!(
            "gpu-test-permit: {} is larger than the most that is read; its end was left out",
            printable_path(&records.path)
        );
    }
    judge(policy, &s, failures);
    if let Some(file) = &policy.group_file {
        drift(file, &records, policy.drift, failures);
    }
}

/// The GPU tests of `records` (those that took a permit, or loaded a GPU driver, watched) that
/// the committed group file `file` does not name: said, and a failure with `fail`. A test is
/// named where the file has both its `binary_id(=BINARY)` and its `test(=NAME)`, as
/// `nextest-snippet` writes them.
fn drift(file: &Path, records: &RunRecords, fail: bool, failures: &mut Vec<String>) {
    use gpu_test_permit::__private::runs::RunRecord;
    use gpu_test_permit_cli::nextest_config::filter_name;
    let text = match std::fs::File::open(file).and_then(|f| {
        let mut text = String::new();
        f.take(4 << 20).read_to_string(&mut text).map(|_| text)
    }) {
        Ok(text) => text,
        Err(e) => {
            failures.push(format!(
                "the GPU test group file {} cannot be read ({e})",
                printable_path(file)
            ));
            return;
        }
    };
    let mut seen: Vec<(String, String)> = Vec::new();
    for r in &records.records {
        let key = match r {
            RunRecord::Grant(g) => (g.binary.clone(), g.test.clone()),
            RunRecord::Drivers(d) if !d.drivers.is_empty() || !d.unpermitted.is_empty() => {
                (d.binary.clone(), d.test.clone())
            }
            _ => continue,
        };
        if !seen.contains(&key) {
            seen.push(key);
        }
    }
    let mut missing: Vec<String> = Vec::new();
    for (binary, test) in &seen {
        let named = text.contains(&format!("binary_id(={})", filter_name(binary)))
            && text.contains(&format!("test(={})", filter_name(test)));
        if !named {
            missing.push(format!("{binary} {test}"));
        }
    }
    if missing.is_empty() {
        println!(
            "the GPU test group in {} names every one of this run's {}",
            printable_path(file),
            plural(seen.len(), "GPU test", "GPU tests")
        );
        return;
    }
    let why = format!(
        "the GPU test group in {} does not name {} this run saw use the GPU: {}; print it anew \
         with `gpu-test-permit nextest-snippet` and commit it",
        printable_path(file),
        plural(missing.len(), "test", "tests"),
        listed(&missing)
    );
    if fail {
        failures.push(format!("{why} (--fail-on-drift)"));
    } else {
        eprintln!("gpu-test-permit: ci: {why}");
    }
}

/// The checks of a run's records, each failure a line in `failures`.
fn judge(policy: &Policy, s: &RunSummary, failures: &mut Vec<String>) {
    if policy.unpermitted {
        if !s.escaped.is_empty() {
            let names: Vec<String> = s.escaped.iter().map(|e| e.key.to_string()).collect();
            failures.push(format!(
                "{} loaded a GPU driver without a permit: {} (--allow-unpermitted passes them)",
                plural(s.escaped.len(), "test", "tests"),
                listed(&names)
            ));
        }
        if s.watched_tests == 0 {
            failures.push(format!(
                "run {} was not watched (no test process of it ran under `gpu-test-permit \
                 watch`), so ci cannot tell whether its tests loaded a GPU driver without a \
                 permit (--allow-unpermitted passes it)",
                printable(&s.run_id)
            ));
        }
    }
    if policy.teardown == Teardown::Fail {
        let faults: Vec<String> = s
            .verdicts
            .iter()
            .filter(|v| v.fault != "crash")
            .map(|v| format!("{} {}", v.binary, v.test))
            .collect();
        if !faults.is_empty() {
            failures.push(format!(
                "{}: {} ({})",
                plural(faults.len(), "teardown fault", "teardown faults"),
                listed(&faults),
                policy.teardown_from
            ));
        }
    }
    if policy.casualty && !s.casualties.is_empty() {
        let names: Vec<String> = s.casualties.iter().map(|c| c.key.to_string()).collect();
        failures.push(format!(
            "{} passed only alone: {} (--fail-on-casualty)",
            plural(s.casualties.len(), "test", "tests"),
            listed(&names)
        ));
    }
}

/// Marks the JUnit report at `path` with the skips and verdicts of `records`, as `junit` does.
fn mark_junit(path: &Path, records: &RunRecords) -> Result<(), String> {
    let file = printable_path(path);
    let run = printable(&records.run_id);
    match report_run_id(path) {
        Ok(Some(id)) if id != records.run_id => {
            eprintln!(
                "gpu-test-permit: ci: JUnit report: {file} is the report of run {} (its uuid), \
                 not of run {run}; left as it is",
                printable(&id)
            );
            return Ok(());
        }
        Ok(_) => {}
        Err(e) => return Err(format!("the JUnit report cannot be marked: {e}")),
    }
    let s = summarize(records);
    let skips: Vec<Skip> = s.skipped.iter().map(Skip::from).collect();
    let verdicts: Vec<Verdict> = s.verdicts.iter().map(Verdict::from).collect();
    if skips.is_empty() && verdicts.is_empty() {
        eprintln!(
            "gpu-test-permit: {file}: run {run} recorded no skips and no verdicts; left unchanged"
        );
        return Ok(());
    }
    let marked = mark(path, path, &skips, &verdicts)
        .map_err(|e| format!("the JUnit report cannot be marked: {e}"))?;
    eprintln!(
        "gpu-test-permit: {file}: {} marked skipped, {} marked with a verdict (run {run})",
        plural(marked.testcases as usize, "test", "tests"),
        plural(marked.verdict_testcases as usize, "test", "tests")
    );
    Ok(())
}

/// Without nextest's line or a fresh JUnit report: the one run of this user recorded since
/// `started` in `dir`.
fn run_since(dir: &Path, started: SystemTime) -> Result<String, String> {
    let runs: Vec<String> = recorded_runs(dir)
        .into_iter()
        .filter(|r| r.mine && r.modified >= started)
        .filter(|r| first_record_time(dir, &r.run_id).is_none_or(|t| t >= started))
        .map(|r| r.run_id)
        .collect();
    match runs.as_slice() {
        [] => Err(format!(
            "nextest named no run on standard error, and no run of this user was recorded in \
             {} since ci began",
            printable_path(dir)
        )),
        [one] => Ok(one.clone()),
        several => Err(format!(
            "nextest named no run on standard error, and {} runs of this user were recorded \
             in {} since ci began ({}): they ran side by side, and ci cannot tell which was \
             its own",
            several.len(),
            printable_path(dir),
            printable(&several.join(", "))
        )),
    }
}

/// After a run that was not nextest's (`cargo test`): no run records, so what the watch said.
fn cargo_test_run(policy: &Policy, said: &Said, failures: &mut Vec<String>) {
    println!(
        "no nextest run: a `cargo test` run has no run records (only nextest runs do: they are \
         keyed by nextest's run id), so `gpu-test-permit report` cannot read it; what the \
         watch said on standard error:"
    );
    if said.binaries > 0 {
        println!(
            "watched {} (each under `gpu-test-permit watch`, cargo's target runner)",
            plural(said.binaries, "test binary", "test binaries")
        );
    }
    for (what, lines) in [
        ("loaded a GPU driver without a permit", &said.escapes),
        ("teardown faults", &said.teardowns),
        ("crashes while tests ran", &said.crashes),
        ("contention casualties", &said.casualties),
    ] {
        println!("{what}: {}", lines.len());
        for l in &lines.lines {
            println!("  {}", printable(l));
        }
        if lines.len() > lines.lines.len() {
            println!("  ... and {} more", lines.len() - lines.lines.len());
        }
    }
    if policy.unpermitted {
        if !said.escapes.is_empty() {
            failures.push(format!(
                "{} loaded a GPU driver without a permit (--allow-unpermitted passes them)",
                plural(said.escapes.len(), "test binary", "test binaries")
            ));
        }
        if said.unwatched {
            failures.push(
                "a test binary's loader kept no log (not glibc's), so ci cannot tell whether \
                 it loaded a GPU driver without a permit (--allow-unpermitted passes it)"
                    .to_string(),
            );
        }
    }
    if policy.teardown == Teardown::Fail && !said.teardowns.is_empty() {
        failures.push(format!(
            "{} ({})",
            plural(said.teardowns.len(), "teardown fault", "teardown faults"),
            policy.teardown_from
        ));
    }
    if policy.casualty && !said.casualties.is_empty() {
        failures.push(format!(
            "{} (--fail-on-casualty)",
            plural(
                said.casualties.len(),
                "contention casualty",
                "contention casualties"
            )
        ));
    }
}

/// Up to [`NAMED`] names, made printable, and how many more.
fn listed(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(NAMED)
        .map(|n| printable(n))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMED {
        text.push_str(&format!(" and {} more", names.len() - NAMED));
    }
    text
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The JUnit path of nextest profile `profile` and the profile that sets it: the profile's own
/// `junit.path`, else that of the profile it inherits (`inherits`, else `default`).
fn junit_path<'a>(
    strings: &'a [(Vec<String>, String)],
    profile: &str,
) -> Option<(&'a str, String)> {
    let mut name = profile.to_string();
    for _ in 0..16 {
        if let Some(path) = lookup(strings, &["profile", &name, "junit", "path"]) {
            return Some((path, name));
        }
        if name == "default" {
            return None;
        }
        name = match lookup(strings, &["profile", &name, "inherits"]) {
            Some(parent) => parent.to_string(),
            None => "default".to_string(),
        };
    }
    None
}

/// The string at `key` (the last one given wins, as TOML allows one).
fn lookup<'a>(strings: &'a [(Vec<String>, String)], key: &[&str]) -> Option<&'a str> {
    strings
        .iter()
        .rfind(|(k, _)| k.iter().map(String::as_str).eq(key.iter().copied()))
        .map(|(_, v)| v.as_str())
}

/// The string values of a TOML document by their full keys, as far as a nextest configuration
/// needs: tables, dotted and quoted keys, basic and literal strings, inline tables. Arrays of
/// tables (nextest's overrides), multi-line strings and arrays are passed over.
fn toml_strings(text: &str) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    // `None` inside an array of tables, whose keys are not wanted.
    let mut table: Option<Vec<String>> = Some(Vec::new());
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with("[[") {
            table = None;
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            table = parse_key(header).and_then(|(key, rest)| {
                let rest = rest.trim_start().strip_prefix(']')?.trim_start();
                (rest.is_empty() || rest.starts_with('#')).then_some(key)
            });
            continue;
        }
        let Some((key, rest)) = parse_key(line) else {
            continue;
        };
        let Some(value) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        // A value that goes on over lines is passed over to its end.
        for close in ["'''", "\"\"\""] {
            if let Some(after) = value.strip_prefix(close)
                && !after.contains(close)
            {
                for next in lines.by_ref() {
                    if next.contains(close) {
                        break;
                    }
                }
            }
        }
        if value.starts_with('[') {
            let mut depth = bracket_depth(value);
            while depth > 0 {
                let Some(next) = lines.next() else { break };
                depth += bracket_depth(next);
            }
            continue;
        }
        let Some(table) = &table else {
            continue;
        };
        let mut full = table.clone();
        full.extend(key);
        if let Some(inline) = value.strip_prefix('{') {
            inline_strings(inline, &full, &mut out);
        } else if let Some((s, _)) = parse_string(value) {
            out.push((full, s));
        }
    }
    out
}

/// The string values of an inline table's body (after `{`), under `prefix`.
fn inline_strings(mut body: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    loop {
        body = body.trim_start().trim_start_matches(',').trim_start();
        if body.is_empty() || body.starts_with('}') {
            return;
        }
        let Some((key, rest)) = parse_key(body) else {
            return;
        };
        let Some(value) = rest.trim_start().strip_prefix('=') else {
            return;
        };
        let value = value.trim_start();
        let mut full = prefix.to_vec();
        full.extend(key);
        if let Some(inner) = value.strip_prefix('{') {
            inline_strings(inner, &full, out);
            return;
        }
        match parse_string(value) {
            Some((s, rest)) => {
                out.push((full, s));
                body = rest;
            }
            // A number, a boolean or an array: to the next comma.
            None => match value.find([',', '}']) {
                Some(at) => body = &value[at..],
                None => return,
            },
        }
    }
}

/// How much a line opens arrays (`[` less `]`, outside strings).
fn bracket_depth(line: &str) -> i32 {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') => break,
            (None, '[') => depth += 1,
            (None, ']') => depth -= 1,
            _ => {}
        }
    }
    depth
}

/// A dotted key at the start of `text` and what follows it.
fn parse_key(text: &str) -> Option<(Vec<String>, &str)> {
    let mut parts = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        let (part, after) = match parse_string(rest) {
            Some(quoted) => quoted,
            None => {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                    .unwrap_or(rest.len());
                if end == 0 {
                    return None;
                }
                (rest[..end].to_string(), &rest[end..])
            }
        };
        parts.push(part);
        match after.trim_start().strip_prefix('.') {
            Some(more) => rest = more,
            None => return Some((parts, after)),
        }
    }
}

/// A one-line basic (`"..."`) or literal (`'...'`) string at the start of `text`, and what
/// follows it.
fn parse_string(text: &str) -> Option<(String, &str)> {
    if let Some(body) = text.strip_prefix('\'') {
        if body.starts_with("''") {
            return None;
        }
        let end = body.find('\'')?;
        return Some((body[..end].to_string(), &body[end + 1..]));
    }
    let body = text.strip_prefix('"')?;
    if body.starts_with("\"\"") {
        return None;
    }
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'e' => out.push('\u{1b}'),
                'u' | 'U' => return None,
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
# comment [profile.x.junit]
[test-groups]
gpu = { max-threads = 2 }

[[profile.default.overrides]]
filter = '''
[profile.ci.junit]
path = "wrong.xml"
'''
test-group = 'gpu'

[profile.default]
slow-timeout = { period = "60s", terminate-after = 3 }

[profile.ci]
retries = 1
experimental = [
  "a",
  "[profile.ci.junit]",
]
junit = { path = "ci.xml", store-success-output = true }

[profile."nightly".junit]
path = 'nightly.xml'   # literal

[profile.child]
inherits = "nightly"

[profile.plain]

[store]
dir = "out/nextest"
"#;

    #[test]
    fn junit_paths_follow_nextest_s_profiles() {
        let strings = toml_strings(CONFIG);
        assert_eq!(
            junit_path(&strings, "ci"),
            Some(("ci.xml", "ci".to_string()))
        );
        assert_eq!(
            junit_path(&strings, "nightly"),
            Some(("nightly.xml", "nightly".to_string()))
        );
        assert_eq!(
            junit_path(&strings, "child"),
            Some(("nightly.xml", "nightly".to_string()))
        );
        assert_eq!(junit_path(&strings, "plain"), None);
        assert_eq!(junit_path(&strings, "default"), None);
        assert_eq!(lookup(&strings, &["store", "dir"]), Some("out/nextest"));
        assert_eq!(
            lookup(&strings, &["profile", "default", "slow-timeout", "period"]),
            Some("60s")
        );
        let with_default = format!("{CONFIG}\n[profile.default.junit]\npath = \"d.xml\"\n");
        let strings = toml_strings(&with_default);
        assert_eq!(
            junit_path(&strings, "plain"),
            Some(("d.xml", "default".to_string()))
        );
        let dotted = toml_strings("[profile.ci]\njunit.path = \"x.xml\"\n");
        assert_eq!(junit_path(&dotted, "ci"), Some(("x.xml", "ci".to_string())));
    }

    #[test]
    fn options_of_the_command_are_found_in_every_spelling() {
        let args: Vec<String> = [
            "nextest",
            "run",
            "--profile",
            "ci",
            "-P",
            "b",
            "-Pc",
            "--profile=d",
            "--target",
            "x86_64-unknown-linux-gnu",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            option_values(&args, "--profile", Some("-P")),
            ["ci", "b", "c", "d"]
        );
        assert_eq!(
            option_values(&args, "--target", None),
            ["x86_64-unknown-linux-gnu"]
        );
        assert!(names_nextest_run(&args));
        assert!(!names_nextest_run(&["test".to_string()]));
        assert_eq!(
            runner_var("x86_64-unknown-linux-gnu"),
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER"
        );
        assert_eq!(
            runner_var("specs/thumbv7em-none.1.json"),
            "CARGO_TARGET_THUMBV7EM_NONE_1_RUNNER"
        );
        assert!(is_watch("/usr/bin/gpu-test-permit watch --"));
        assert!(!is_watch("gpu-test-permit run --"));
        assert!(!is_watch("qemu-aarch64 watch --"));
    }

    #[test]
    fn nextest_s_run_line_and_the_watch_s_lines_are_read() {
        let mut said = Said::default();
        said.line(b"\x1b[1;32m Nextest run ID\x1b[0m 5b0c1c3a-1f0e-4c43-8a43-0b3d2a6c9e10 with nextest profile: ci");
        said.line(b" Nextest run ID 00000000-0000-0000-0000-000000000000 with nextest profile: x");
        said.line(b"     Running unittests src/lib.rs (target/debug/deps/a-1)");
        said.line(b"gpu-test-permit: teardown fault: `a` died by SIGSEGV after all 1 of its tests");
        said.line(
            b"gpu-test-permit: `a` loaded a GPU driver while it held no permit: libcuda.so.1",
        );
        assert_eq!(
            said.run,
            Some((
                "5b0c1c3a-1f0e-4c43-8a43-0b3d2a6c9e10".to_string(),
                Some("ci".to_string())
            ))
        );
        assert_eq!(said.binaries, 1);
        assert_eq!(said.teardowns.len(), 1);
        assert_eq!(said.escapes.len(), 1);
    }

    /// A command that floods standard error with the watch's lines: every one counts, and
    /// what is kept of them is bounded.
    #[test]
    fn a_flood_of_the_watch_s_lines_is_counted_whole_and_kept_bounded() {
        let mut said = Said::default();
        let long = format!(
            "gpu-test-permit: `a` loaded a GPU driver while it held no permit: {}",
            "x".repeat(60 << 10)
        );
        let mut pipe = std::io::Cursor::new(format!("{long}\n").repeat(600).into_bytes());
        relay_to(&mut pipe, &mut std::io::sink(), &mut said);
        assert_eq!(said.escapes.len(), 600);
        assert_eq!(said.escapes.lines.len(), Kept::MOST);
    }
}
