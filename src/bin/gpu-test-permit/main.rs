//! `gpu-test-permit`: command-line tools around the permit pool.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::process::ExitCode;

use gpu_test_permit::config::Config;
use gpu_test_permit::probe::ProbeMode;

use crate::args::{Args, Operands, Parsed, Spec};

mod args;
mod find;
mod junit;
mod probe;
mod report;
mod run;
mod runs;

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
            synopsis: "[--exclusive | --units K | --memory SIZE] [--for DURATION]",
            about: "take a permit from the pool configured by the environment, print `held ...` (its\n\
                    pid, units and slots), and keep it until standard input closes (or for DURATION,\n\
                    e.g. 500ms, 2s, 1m); --units K holds K of one GPU's N units, as a test that\n\
                    counts as K does; --memory SIZE (e.g. 24GiB, 80GB) the units that much memory\n\
                    takes of the GPU_TEST_PERMIT_GPU_MEMORY budget; --exclusive every unit. With\n\
                    --for, GPU_TEST_PERMIT_HOLD_TIMEOUT does not apply (the hold ends when asked, and\n\
                    is no hang); held until stdin closes, it is watched as a test is. A shell cannot\n\
                    take over this permit (a lock lives in an open file, inherited only from a\n\
                    parent): for a shell that holds one, use `run -- \"$SHELL\"`",
            flags: &["--exclusive"],
            options: &["--for", "--units", "--memory"],
            lists: &[],
            operands: Operands::None,
        },
        run: hold,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "run",
            synopsis: "[--exclusive | --units K | --memory SIZE] [--group GROUP] [--filter TEXT] [--] \
                       COMMAND [ARGS...]",
            about: "run COMMAND while holding a permit, and exit as it did (killed by a signal: the\n\
                    same signal); SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed on to COMMAND and the\n\
                    permit is held until it has exited; COMMAND and ARGS pass byte for byte, and the\n\
                    options end at COMMAND. --units K, --memory SIZE and --exclusive as for `hold`.\n\
                    COMMAND and what it starts work inside the permit (GPU_TEST_PERMIT_INHERITED): a\n\
                    program that uses the crate takes no second one, and gets at most the units run\n\
                    holds. No permit (COMMAND runs in run's place) when ARGS contain --list (nextest\n\
                    listing tests), with --group when NEXTEST_TEST_GROUP is not GROUP, and with\n\
                    --filter when the test's name (NEXTEST_TEST_NAME, else ARGS) does not contain\n\
                    TEXT. `run -- \"$SHELL\"` gives an interactive shell that holds a permit. Past\n\
                    GPU_TEST_PERMIT_HOLD_TIMEOUT, run ends COMMAND (SIGTERM, SIGKILL 5s later; to its\n\
                    process group unless a terminal is attached), then prints the diagnosis, records\n\
                    the hang and exits with 124",
            flags: &["--exclusive"],
            options: &["--group", "--filter", "--units", "--memory"],
            lists: &[],
            operands: Operands::CommandLine,
        },
        run: run::main,
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
            synopsis: "[--run-id ID] [--dir DIR] [--fail-on-casualty]",
            about: "what the records of a cargo nextest run say: its GPU tests, those that skipped\n\
                    and why, contention casualties (failed while other tests held permits, then\n\
                    passed alone on a retry) with the tests beside them, permits never returned,\n\
                    hangs, the peak and the N in force; the last run recorded in the slot directory,\n\
                    or run ID. With --fail-on-casualty, exit 1 when a test passed only alone",
            flags: &["--fail-on-casualty"],
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
            synopsis: "FILE [-o OUT] [--fail-on-skip] [--run-id ID]",
            about: "rewrite nextest's JUnit report FILE (in place, or into OUT) so that each test\n\
                    that skipped at run time is a <testcase> with <skipped message=\"backend=...\">\n\
                    and the skipped counts of its <testsuite> and of <testsuites> agree; the skips\n\
                    are the records of the run in the slot directory: the run of the report's uuid,\n\
                    else run ID, else the last run recorded. A report with no records or no skips\n\
                    is left unchanged. Exits 1 when a marked test's backend is required by\n\
                    GPU_TEST_PERMIT_REQUIRE, and with --fail-on-skip when any test is marked",
            flags: &["--fail-on-skip"],
            options: &["-o", "--run-id"],
            lists: &[],
            operands: Operands::One("FILE"),
        },
        run: junit::main,
        checks_config: true,
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
        run: config,
        checks_config: false,
    },
    Command {
        spec: Spec {
            name: "nextest-snippet",
            synopsis: "[--runner | --wrapper]",
            about: "print a nextest tool config file (for `cargo nextest run --tool-config-file\n\
                    gpu-test-permit:/absolute/path`, which keeps the suite's own\n\
                    .config/nextest.toml) with a test group for GPU tests sized by\n\
                    REALIZAR_GPU_TEST_CONCURRENCY x GPU_TEST_PERMIT_GPUS; its filter is a guess by\n\
                    name: `find-gpu-tests` prints the one that names them. With --runner, the\n\
                    configuration that caps a suite that does not use the crate through\n\
                    `gpu-test-permit run` as cargo's target runner; with --wrapper, the same as a\n\
                    nextest wrapper script (experimental in nextest, since 0.9.98)",
            flags: &["--runner", "--wrapper"],
            options: &[],
            lists: &[],
            operands: Operands::None,
        },
        run: nextest_snippet,
        checks_config: true,
    },
    Command {
        spec: Spec {
            name: "find-gpu-tests",
            synopsis: "[--skip-mark TEXT ...] [-- NEXTEST-ARGS...]",
            about: "run the suite's tests once with every GPU driver hidden (Vulkan, EGL, CUDA) and\n\
                    print the nextest override whose filter names the GPU tests: those that fail\n\
                    or print the crate's skip line then, or a TEXT (a suite's own skip message; a\n\
                    test that skips without a word looks like a CPU test). NEXTEST-ARGS (-p,\n\
                    --workspace, -E, --features, ...) go to both `cargo nextest list` and `cargo\n\
                    nextest run`; the run uses a profile of its own, and its permits a slot\n\
                    directory of its own",
            flags: &[],
            options: &[],
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

/// `nextest-snippet`: the test group, sized to all the permits the host has (N per GPU times
/// the GPUs), and how heavy tests tell nextest their weight. Computed from the configuration,
/// not from a pool: printing text creates no slot files.
fn nextest_snippet(args: &Args) -> Result<ExitCode, String> {
    use gpu_test_permit::nextest;
    let cfg = Config::global();
    let per_gpu = cfg.concurrency.get();
    let gpus = cfg.gpus.map_or_else(detected_gpus, |g| g.get());
    let n = per_gpu.saturating_mul(gpus);
    let text = match (args.flag("--runner"), args.flag("--wrapper")) {
        (true, true) => return Err(args.error("give --runner or --wrapper, not both")),
        // The runner is one command for every test: their permits are all of one unit.
        (true, false) => nextest::runner_snippet(n),
        (false, true) => nextest::wrapper_snippet(n) + &weights_snippet(per_gpu, true),
        (false, false) => nextest::group_snippet(n) + &weights_snippet(per_gpu, false),
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// The GPUs of `GPU_TEST_PERMIT_GPUS=auto`, as the global pool counts them: the CUDA devices
/// the probe finds (in a child process), at least one.
fn detected_gpus() -> usize {
    #[cfg(feature = "cuda")]
    {
        gpu_test_permit::probe::probe(gpu_test_permit::probe::Backend::Cuda)
            .outcome
            .devices()
            .map_or(1, |d| d.len().max(1))
    }
    #[cfg(not(feature = "cuda"))]
    {
        1
    }
}

/// The commented override that gives heavy tests their weight in the `gpu` test group:
/// `threads-required` counts against the group's `max-threads`, so nextest starts no more
/// units than the permits have, and a heavy test's process does not start only to wait.
/// Both overrides put their tests in the same group, so their order does not matter. Empty
/// where N = 1 (every permit is a whole GPU).
fn weights_snippet(per_gpu: usize, wrapper: bool) -> String {
    if per_gpu < 2 {
        return String::new();
    }
    let k = per_gpu.div_ceil(2).max(2);
    let how = if wrapper {
        format!(
            "# Under the wrapper, they need one of their own that holds the units, with\n\
             # `command = 'gpu-test-permit run --units {k} --'` and a filter kept apart from\n\
             # the gpu-permit script's.\n"
        )
    } else {
        String::new()
    };
    format!(
        "
# Heavy tests: a test that takes a permit of k units counts as k tests
# (acquire_weighted(k), acquire_memory(bytes), `gpu-test-permit run --units k`). Tell nextest
# with `threads-required = k` in the group, so that it starts no more units than there are
# permits (k is at most N = {per_gpu}, one GPU's units); e.g. for tests of {k} units:
# [[profile.default.overrides]]
# filter = 'test(/heavy_/)'
# test-group = '{group}'
# threads-required = {k}
{how}",
        group = gpu_test_permit::nextest::GROUP
    )
}

/// Fails before the command does anything when the configuration is rejected under
/// `GPU_TEST_PERMIT_STRICT_CONFIG` (instead of the library's panic).
fn strict_check() -> Result<(), String> {
    match Config::from_env().strict_failure() {
        Some(msg) => Err(msg),
        None => Ok(()),
    }
}

/// `config`: the configuration of this environment and the warnings of the last nextest run.
fn config(_: &Args) -> Result<ExitCode, String> {
    let cfg = Config::from_env();
    let or_off = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map_or_else(|| "off".to_string(), |p| p.display().to_string())
    };
    use gpu_test_permit::config as c;
    let rows = [
        (c::CONCURRENCY_VAR, cfg.concurrency.to_string()),
        (
            c::GPUS_VAR,
            cfg.gpus.map_or_else(|| "auto".into(), |g| g.to_string()),
        ),
        (
            c::GPU_MEMORY_VAR,
            cfg.gpu_memory.map_or_else(
                || "unset (the CUDA probe's device memory on discrete GPUs, else none)".into(),
                |m| m.to_string(),
            ),
        ),
        (c::TIMEOUT_VAR, format!("{:?}", cfg.timeout)),
        (
            c::DIR_VAR,
            cfg.slot_dir_path()
                .map_or_else(|e| format!("invalid: {e}"), |p| p.display().to_string()),
        ),
        (
            c::REQUIRE_VAR,
            cfg.require
                .as_ref()
                .map_or_else(|e| format!("invalid: {e}"), |p| p.to_string()),
        ),
        (c::PROBE_TIMEOUT_VAR, format!("{:?}", cfg.probe_timeout)),
        (
            c::PROBE_VAR,
            match cfg.probe_mode {
                ProbeMode::Child => "child",
                ProbeMode::InProcess => "in-process",
            }
            .to_string(),
        ),
        (c::TRACE_VAR, or_off(&cfg.trace)),
        (c::SKIP_LOG_VAR, or_off(&cfg.skip_log)),
        (c::STRICT_VAR, (cfg.strict as u8).to_string()),
        (
            c::INHERITED_VAR,
            match &cfg.inherited {
                None => "unset".to_string(),
                Some(Ok(p)) => format!(
                    "{} permit on slot(s) {} of {}",
                    if p.exclusive { "exclusive" } else { "shared" },
                    p.slots
                        .iter()
                        .map(|s| s.index.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    p.dir.display()
                ),
                Some(Err(e)) => format!("invalid: {e}"),
            },
        ),
    ];
    println!("configuration from this environment:");
    for (var, value) in rows {
        println!("  {var:<31} {value}");
    }
    if cfg.warnings.is_empty() {
        println!("warnings: none");
    } else {
        println!("warnings:");
        for w in &cfg.warnings {
            println!("  {w}");
        }
    }
    let Ok(dir) = cfg.slot_dir_path() else {
        return Ok(ExitCode::SUCCESS);
    };
    let file = dir.join(c::WARNINGS_FILE);
    match c::recorded_warnings(&dir) {
        Ok(None) => println!(
            "no cargo nextest run recorded configuration warnings in {}",
            file.display()
        ),
        Ok(Some(r)) => {
            println!(
                "configuration warnings of cargo nextest run {} (recorded {} ago in {}):",
                r.run_id,
                report::ago(r.recorded_unix_ms),
                file.display()
            );
            for line in &r.lines {
                println!("  {line}");
            }
        }
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    }
    Ok(ExitCode::SUCCESS)
}

/// The permit `hold` and `run` ask for: `--exclusive`, `--units K`, `--memory SIZE` (both
/// of the last two: the larger counts), or one unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ask {
    exclusive: bool,
    units: Option<usize>,
    memory: Option<u64>,
}

impl Ask {
    /// Reads `--exclusive`, `--units K` and `--memory SIZE`.
    ///
    /// # Errors
    ///
    /// A value that is not a whole number of units or a size (a percentage is a budget, not a
    /// request), and `--exclusive` with either of the others.
    pub(crate) fn from_args(args: &Args) -> Result<Ask, String> {
        use gpu_test_permit::config::{MemoryBudget, ValueError, parse_concurrency, parse_memory};
        let units = args.parsed_value("--units", |v| parse_concurrency(&v.into()))?;
        let memory = args.parsed_value("--memory", |v| match parse_memory(&v.into()) {
            Ok(MemoryBudget::Bytes(b)) => Ok(b),
            // A budget may be a share of the device memory; a request is an amount.
            Ok(MemoryBudget::Percent(_)) => Err(
                "is a percentage; give the memory the command needs as a size like 24GiB, \
                 80GB or 512MiB (only the budget, GPU_TEST_PERMIT_GPU_MEMORY, may be a \
                 percentage)"
                    .to_string(),
            ),
            Err(ValueError::MemoryOutOfRange) => Err("must be a size above zero".to_string()),
            Err(ValueError::NotMemory) => {
                Err("is not a size like 24GiB, 80GB or 512MiB".to_string())
            }
            Err(e) => Err(e.to_string()),
        })?;
        let exclusive = args.flag("--exclusive");
        if exclusive && (units.is_some() || memory.is_some()) {
            let other = if units.is_some() {
                "--units"
            } else {
                "--memory"
            };
            return Err(args.error(format_args!(
                "--exclusive takes every unit; give it or {other}, not both"
            )));
        }
        Ok(Ask {
            exclusive,
            units: units.map(|u| u.get()),
            memory,
        })
    }
}

/// Takes the permit `ask` describes from the global pool, waiting up to its deadline.
pub(crate) fn take(ask: Ask) -> Result<gpu_test_permit::GpuTestPermit, String> {
    let pool = gpu_test_permit::PermitPool::global();
    let mut request = pool.request();
    if ask.exclusive {
        request = request.exclusive();
    }
    if let Some(units) = ask.units {
        request = request.units(units);
    }
    if let Some(bytes) = ask.memory {
        request = request.memory(bytes);
    }
    request
        .acquire_for(pool.timeout())
        .map_err(|e| e.to_string())
}

fn hold(args: &Args) -> Result<ExitCode, String> {
    let ask = Ask::from_args(args)?;
    let duration = args.parsed_value("--for", |v| {
        gpu_test_permit::config::parse_duration(&v.into())
    })?;
    if duration.is_some() {
        // A hold of a set length is what was asked for, not a hang: it ends on time whatever
        // the hold deadline says. (Held until standard input closes, it is watched as a test.)
        let _ = gpu_test_permit::on_hold_timeout(|_| {});
    }
    let permit = take(ask)?;
    let slots: Vec<String> = permit.slots().iter().map(|s| s.to_string()).collect();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "held pid={} units={} slots={}",
        std::process::id(),
        permit.units(),
        slots.join(",")
    )
    .and_then(|()| out.flush())
    .map_err(|e| e.to_string())?;
    drop(out);
    match duration {
        Some(d) => std::thread::sleep(d),
        None => {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        }
    }
    drop(permit);
    println!("released");
    Ok(ExitCode::SUCCESS)
}
