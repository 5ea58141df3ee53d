//! `gpu-test-permit`: command-line tools around the permit pool.

use std::ffi::OsString;
use std::process::ExitCode;

use gpu_test_permit::config::Config;

use crate::args::{Args, Operands, Parsed, Spec};

mod args;
mod ci;
mod config;
mod find;
mod history;
mod hold;
mod junit;
mod private_dir;
mod probe;
mod report;
mod run;
mod runs;
mod snippet;

/// A command: its arguments, what runs it, and whether it reads the global configuration.
struct Command {
    spec: Spec,
    run: fn(&Args) -> Result<ExitCode, String>,
    /// Whether it takes permits or probes, and so fails first where the configuration is
    /// rejected under `GPU_TEST_PERMIT_STRICT_CONFIG` (`config`, which shows why, and `trace`,
    /// which reads a file, run anyway).
    checks_config: bool,
}

static COMMANDS: &[Command] = &[
    Command {
        spec: Spec {
            name: "probe",
            synopsis: "[--json] [cuda|wgpu ...]",
            about: "probe GPU backends (each in a child process) and print what this machine has as a\n\
                    table, or as JSON; exits 1 when GPU_TEST_PERMIT_REQUIRE would fail a test",
            flags: &["--json"],
            options: &[],
            lists: &[],
            operands: Operands::Any,
        },
        run: probe::main,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "hold",
            synopsis: "[--exclusive | --units K | --memory SIZE] [--gpus K] [--for DURATION]",
            about: "take a permit from the pool configured by the environment, print `held ...` (its\n\
                    pid, units and slots, and its GPUs on a pool of several), and keep it until\n\
                    standard input closes (or for DURATION, e.g. 500ms, 2s, 1m); --units K holds K\n\
                    of one GPU's N units, as a test that counts as K does; --memory SIZE (e.g.\n\
                    24GiB, 80GB) the units that much memory takes of the GPU_TEST_PERMIT_GPU_MEMORY\n\
                    budget; --gpus K that much on each of K GPUs at once (within one group of\n\
                    GPU_TEST_PERMIT_GPUS); --exclusive every unit. With\n\
                    --for, GPU_TEST_PERMIT_HOLD_TIMEOUT does not apply (the hold ends when asked, and\n\
                    is no hang); held until stdin closes, it is watched as a test is. A shell cannot\n\
                    take over this permit (a lock lives in an open file, inherited only from a\n\
                    parent): for a shell that holds one, use `run -- \"$SHELL\"`",
            flags: &["--exclusive"],
            options: &["--for", "--units", "--memory", "--gpus"],
            lists: &[],
            operands: Operands::None,
        },
        run: hold::hold,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "run",
            synopsis: "[--exclusive | --units K | --memory SIZE] [--gpus K] [--group GROUP] [--filter TEXT] \
                       [--watch] [--] COMMAND [ARGS...]",
            about: "run COMMAND while holding a permit, and exit as it did (killed by a signal: the\n\
                    same signal); SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed on to COMMAND and the\n\
                    permit is held until it has exited; COMMAND and ARGS pass byte for byte, and the\n\
                    options end at COMMAND. --units K, --memory SIZE, --gpus K and --exclusive as for\n\
                    `hold`; COMMAND sees the permit's GPUs alone (CUDA_VISIBLE_DEVICES), numbered from 0.\n\
                    COMMAND and what it starts work inside the permit (GPU_TEST_PERMIT_INHERITED): a\n\
                    program that uses the crate takes no second one, and gets at most the units run\n\
                    holds. No permit (COMMAND runs in run's place) when ARGS contain --list (nextest\n\
                    listing tests), with --group when NEXTEST_TEST_GROUP is not GROUP, and with\n\
                    --filter when the test's name (NEXTEST_TEST_NAME, else ARGS) does not contain\n\
                    TEXT. `run -- \"$SHELL\"` gives an interactive shell that holds a permit. Past\n\
                    GPU_TEST_PERMIT_HOLD_TIMEOUT, run ends COMMAND (SIGTERM, SIGKILL 5s later; to its\n\
                    process group unless a terminal is attached), then prints the diagnosis, records\n\
                    the hang and exits with 124. --watch records which GPU drivers COMMAND's process\n\
                    loaded (as `watch` does), which `find-gpu-tests` reads",
            flags: &["--exclusive", "--watch"],
            options: &["--group", "--filter", "--units", "--memory", "--gpus"],
            lists: &[],
            operands: Operands::CommandLine,
        },
        run: run::main,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "watch",
            synopsis: "[--] COMMAND [ARGS...]",
            about: "run COMMAND with no permit of its own and watch which GPU drivers its process\n\
                    loads (libcuda, Vulkan drivers, libnvidia-*), and whether it held a permit of\n\
                    the crate's then; exit as it did. As cargo's target runner (for cargo test and\n\
                    nextest) it names the tests that reach a GPU without a permit: under nextest the\n\
                    run's records get what it saw (see `report`), otherwise it says so on standard\n\
                    error. Linux with glibc (the loader's LD_DEBUG log). `run --watch` watches the\n\
                    same way inside run's permit. A test binary's verdict is judged from its output\n\
                    (passed through unchanged) and its end: a crash, non-zero exit or hang (past\n\
                    GPU_TEST_PERMIT_EXIT_GRACE) after every test had its result and none failed is a\n\
                    teardown fault, said and passed (GPU_TEST_PERMIT_TEARDOWN=fail fails it); a crash\n\
                    while tests ran has the tests without a result run again, each alone",
            flags: &[],
            options: &[],
            lists: &[],
            operands: Operands::CommandLine,
        },
        run: run::watch,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "ci",
            synopsis: "[--no-junit] [--allow-unpermitted] [--allow-teardown | --fail-on-teardown] \
                       [--fail-on-casualty] [--group-file FILE [--fail-on-drift]] [--dry-run] -- \
                       COMMAND [ARGS...]",
            about: "a CI step in one command: run COMMAND (cargo nextest run ..., cargo test ...) with\n\
                    cargo's target runner (CARGO_TARGET_<TRIPLE>_RUNNER; the triple of --target in\n\
                    COMMAND, else the host's) set to this executable's `watch --` and the\n\
                    configuration's slot directory, its standard error passed through unchanged and\n\
                    read for nextest's run id (`Nextest run ID <uuid>`); then mark the JUnit report\n\
                    its nextest profile writes ([profile.<name>.junit] path) as `junit` does (not\n\
                    with --no-junit), and print the run's report (as `report --run-id`) and how many\n\
                    test processes were watched. A runner set already is refused, unless it is a\n\
                    `watch --`. Exits with COMMAND's code when it failed; else 1, one line each\n\
                    saying why, when a test loaded a GPU driver without a permit or the run was not\n\
                    watched (--allow-unpermitted passes them), on a teardown fault with\n\
                    --fail-on-teardown or GPU_TEST_PERMIT_TEARDOWN=fail (either flag is passed on\n\
                    to the watch; --allow-teardown passes them), on a contention casualty with\n\
                    --fail-on-casualty. A cargo test run has no run records (only nextest runs do):\n\
                    ci reads what the watch said on standard error instead. With --group-file FILE\n\
                    (the committed output of `nextest-snippet`), the nextest run's GPU tests that\n\
                    FILE does not name are said, and fail with --fail-on-drift. `--` is required;\n\
                    --dry-run prints what would run and which JUnit report would be marked",
            flags: &[
                "--no-junit",
                "--allow-unpermitted",
                "--allow-teardown",
                "--fail-on-teardown",
                "--fail-on-casualty",
                "--fail-on-drift",
                "--dry-run",
            ],
            options: &["--group-file"],
            lists: &[],
            operands: Operands::CommandLine,
        },
        run: ci::main,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "status",
            synopsis: "[--dir DIR]",
            about: "who holds the host slots now, since when, and who waits",
            flags: &[],
            options: &["--dir"],
            lists: &[],
            operands: Operands::None,
        },
        run: report::status,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "trace",
            synopsis: "FILE [--max-peak N] [--timeline]",
            about: "summarise a GPU_TEST_PERMIT_TRACE file: per-test wait and hold times,\n\
                    utilisation, peak concurrency and an estimate for other N; with --max-peak,\n\
                    exit 1 when more than N permits were held at once; with --timeline, draw who\n\
                    held the GPU when",
            flags: &["--timeline"],
            options: &["--max-peak"],
            lists: &[],
            operands: Operands::One("FILE"),
        },
        run: report::trace,
        checks_config: false,
    },
    Command {
        spec: Spec {
            name: "report",
            synopsis: "[--run-id ID] [--dir DIR] [--fail-on-casualty] [--fail-on-unpermitted] \
                       [--fail-on-teardown]",
            about: "what the records of a cargo nextest run say: its GPU tests, the tests that loaded\n\
                    a GPU driver without a permit, those that skipped and why, contention casualties\n\
                    (failed while other tests held permits, then passed alone on a retry) with the\n\
                    tests beside them, permits never returned, hangs, the peak and the N in force;\n\
                    the last run recorded in the slot directory, or run ID. With --fail-on-casualty,\n\
                    exit 1 when a test passed only alone; with --fail-on-unpermitted, when a test\n\
                    loaded a GPU driver without a permit, or when the run was not watched\n\
                    (`gpu-test-permit watch` as the target runner), which cannot tell; with\n\
                    --fail-on-teardown, when a watched test process crashed or hung after all\n\
                    its tests had their results (a teardown fault, which passes by default)",
            flags: &[
                "--fail-on-casualty",
                "--fail-on-unpermitted",
                "--fail-on-teardown",
            ],
            options: &["--run-id", "--dir"],
            lists: &[],
            operands: Operands::None,
        },
        run: runs::report,
        checks_config: false,
    },
    Command {
        spec: Spec {
            name: "junit",
            synopsis: "FILE [-o OUT] [--fail-on-skip] [--run-id ID] [--dir DIR]",
            about: "rewrite nextest's JUnit report FILE (in place, or into OUT) so that each test\n\
                    that skipped at run time is a <testcase> with <skipped message=\"backend=...\">\n\
                    and the skipped counts of its <testsuite> and of <testsuites> agree, and each\n\
                    test whose process had a verdict under `watch` (teardown fault, hang at exit,\n\
                    crash) has <property name=\"gpu-test-permit.verdict\" value=\"teardown: SIGSEGV\">\n\
                    first and the verdict's line in its <system-err>, passed or failed as it was;\n\
                    the skips and verdicts are the records of the run in the slot directory (or\n\
                    DIR): the run of the report's uuid, else run ID, else the last run recorded. A\n\
                    report with no records, skips or verdicts is left unchanged. Exits 1 when a\n\
                    marked test's backend is required by GPU_TEST_PERMIT_REQUIRE, and with\n\
                    --fail-on-skip when any test is marked skipped",
            flags: &["--fail-on-skip"],
            options: &["-o", "--run-id", "--dir"],
            lists: &[],
            operands: Operands::One("FILE"),
        },
        run: junit::main,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "history",
            synopsis: "[--dir DIR] [--forget]",
            about: "what this host remembers of N: the hangs and contention casualties recorded\n\
                    for the slot directory (in its state directory, GPU_TEST_PERMIT_STATE, which a\n\
                    reboot does not empty) and the N they rule out; with --forget, forget them\n\
                    (after a driver update or a fixed test, every N may be advised again)",
            flags: &["--forget"],
            options: &["--dir"],
            lists: &[],
            operands: Operands::None,
        },
        run: history::history,
        checks_config: false,
    },
    Command {
        spec: Spec {
            name: "config",
            synopsis: "",
            about: "print the configuration this environment gives, its warnings, and the\n\
                    configuration warnings recorded by the last cargo nextest run that had any",
            flags: &[],
            options: &[],
            lists: &[],
            operands: Operands::None,
        },
        run: config::config,
        checks_config: false,
    },
    Command {
        spec: Spec {
            name: "nextest-snippet",
            synopsis: "[--runner | --wrapper]",
            about: "print a nextest tool config file (for `cargo nextest run --tool-config-file\n\
                    gpu-test-permit:/absolute/path`, which keeps the suite's own\n\
                    .config/nextest.toml) with a test group for GPU tests sized by N\n\
                    (GPU_TEST_PERMIT_CONCURRENCY, else REALIZAR_GPU_TEST_CONCURRENCY) x\n\
                    GPU_TEST_PERMIT_GPUS; its filter is a guess by name:\n\
                    `find-gpu-tests` prints the one that names them. With --runner, the\n\
                    configuration that caps a suite that does not use the crate through\n\
                    `gpu-test-permit run` as cargo's target runner; with --wrapper, the same as a\n\
                    nextest wrapper script (experimental in nextest, since 0.9.98). Where this\n\
                    host's history knows the GPU tests' hold times (runs recorded in the slot\n\
                    directory), priorities that start the longest first (nextest 0.9.91); print it\n\
                    again after runs to refresh them",
            flags: &["--runner", "--wrapper"],
            options: &[],
            lists: &[],
            operands: Operands::None,
        },
        run: snippet::nextest_snippet,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "find-gpu-tests",
            synopsis: "[--skip-mark TEXT ...] [--by loads|hidden] [-- NEXTEST-ARGS...]",
            about: "find the suite's GPU tests by what they do, and print the nextest override whose\n\
                    filter names them. By default two runs: with the drivers present, every test\n\
                    under `run --watch` (a permit each), and a test whose process loads a GPU driver\n\
                    (libcuda, a Vulkan driver, libnvidia-*; Linux with glibc) or prints the crate's\n\
                    skip line is one; then with every GPU driver hidden (Vulkan, EGL, CUDA), where a\n\
                    test that fails or prints the crate's skip line or a TEXT (a suite's own skip\n\
                    message) is one. --by loads or --by hidden runs one of them. Each GPU test is\n\
                    named on standard error with why. NEXTEST-ARGS (-p, --workspace, -E, --features,\n\
                    -j, ...) go to `cargo nextest run`, and those it shares with `cargo nextest list`\n\
                    to the listing too; the runs use a profile of their own, and their permits a slot\n\
                    directory of their own",
            flags: &[],
            options: &["--by"],
            lists: &["--skip-mark"],
            operands: Operands::Any,
        },
        run: find::main,
        checks_config: false,
    },
    Command {
        spec: Spec {
            name: "help",
            synopsis: "[COMMAND]",
            about: "print this text, or COMMAND's (as `COMMAND --help` does)",
            flags: &[],
            options: &[],
            lists: &[],
            operands: Operands::Any,
        },
        run: help,
        checks_config: false,
    },
];

/// The overview: every command's usage line and what it does.
fn usage() -> String {
    let mut text = String::from(
        "usage: gpu-test-permit <command> [options]\n       \
         gpu-test-permit <command> --help\n\ncommands:\n",
    );
    for c in COMMANDS {
        text.push_str(format!("  {} {}", c.spec.name, c.spec.synopsis).trim_end());
        text.push('\n');
        for line in c.spec.about.lines() {
            text.push_str("        ");
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let Some(name) = args.first() else {
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    match dispatch(name, &args[1..]) {
        Ok(code) => code,
        Err(msg) => {
            // The one place that says who reports: messages, the library's included, do not.
            eprintln!("gpu-test-permit: {msg}");
            ExitCode::from(2)
        }
    }
}

fn dispatch(name: &OsString, rest: &[OsString]) -> Result<ExitCode, String> {
    if matches!(name.to_str(), Some("--help" | "-h")) {
        print!("{}", usage());
        return Ok(ExitCode::SUCCESS);
    }
    let Some(command) = COMMANDS.iter().find(|c| *name == c.spec.name) else {
        return Err(format!(
            "unknown command `{}`\n{}",
            name.to_string_lossy(),
            usage()
        ));
    };
    match command.spec.parse(rest)? {
        Parsed::Help => {
            print!("{}", command.spec.help());
            Ok(ExitCode::SUCCESS)
        }
        Parsed::Args(args) => {
            if command.checks_config {
                strict_check()?;
            }
            (command.run)(&args)
        }
    }
}

/// `help [COMMAND]`.
fn help(args: &Args) -> Result<ExitCode, String> {
    match args.operands_utf8()?[..] {
        [] => print!("{}", usage()),
        [name] => match COMMANDS.iter().find(|c| c.spec.name == name) {
            Some(c) => print!("{}", c.spec.help()),
            None => return Err(args.error(format_args!("unknown command `{name}`"))),
        },
        [_, extra, ..] => return Err(args.error(format_args!("unexpected argument `{extra}`"))),
    }
    Ok(ExitCode::SUCCESS)
}

/// Fails before the command does anything when the configuration is rejected under
/// `GPU_TEST_PERMIT_STRICT_CONFIG` (instead of the library's panic).
fn strict_check() -> Result<(), String> {
    match Config::from_env().strict_failure() {
        Some(msg) => Err(msg),
        None => Ok(()),
    }
}
