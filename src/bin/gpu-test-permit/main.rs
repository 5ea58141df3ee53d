//! `gpu-test-permit`: command-line tools around the permit pool.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use gpu_test_permit::config::Config;
use gpu_test_permit::probe::ProbeMode;

mod probe;
mod report;
mod run;

const USAGE: &str = "\
usage: gpu-test-permit <command> [options]

commands:
  probe [--json] [cuda|wgpu ...]
        probe GPU backends (each in a child process) and print what this machine has as a
        table, or as JSON; exits 1 when GPU_TEST_PERMIT_REQUIRE would fail a test
  hold [--exclusive] [--for DURATION]
        take a permit from the pool configured by the environment, print `held ...`, and keep
        it until standard input closes (or for DURATION, e.g. 500ms, 2s, 1m)
  run [--exclusive] -- COMMAND [ARGS...]
        run COMMAND while holding a permit, and exit as it did (killed by a signal: the
        same signal); SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed on to COMMAND and the
        permit is held until it has exited
  status [--dir DIR]
        who holds the host slots now, since when, and who waits
  trace FILE [--max-peak N] [--timeline]
        summarise a GPU_TEST_PERMIT_TRACE file: per-test wait and hold times,
        utilisation, peak concurrency and an estimate for other N; with --max-peak,
        exit 1 when more than N permits were held at once; with --timeline, draw who
        held the GPU when
  config
        print the configuration this environment gives, its warnings, and the
        configuration warnings recorded by the last cargo nextest run that had any
  nextest-snippet
        print a .config/nextest.toml test group for GPU tests sized by
        REALIZAR_GPU_TEST_CONCURRENCY x GPU_TEST_PERMIT_GPUS
  help  print this text
";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let result = match cmd.to_str() {
        Some("help" | "--help" | "-h") => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Some("config") => config(rest),
        Some("trace") => report::trace(rest),
        Some(cmd) => strict_check().and_then(|()| match cmd {
            "hold" => utf8_args(rest).and_then(|a| hold(&a)),
            "run" => run::main(rest),
            "probe" => utf8_args(rest).and_then(|a| probe::main(&a)),
            "status" => report::status(rest),
            "nextest-snippet" => {
                // N per GPU times the GPUs: all the permits the host has.
                let n = gpu_test_permit::PermitPool::global().capacity();
                print!(
                    "{}",
                    gpu_test_permit::nextest::GROUP_SNIPPET
                        .replace("max-threads = 2", &format!("max-threads = {n}"))
                );
                Ok(ExitCode::SUCCESS)
            }
            other => Err(format!("unknown command `{other}`\n{USAGE}")),
        }),
        None => Err(format!(
            "unknown command `{}` (not valid UTF-8)\n{USAGE}",
            cmd.to_string_lossy()
        )),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("gpu-test-permit: {msg}");
            ExitCode::from(2)
        }
    }
}

/// The arguments as UTF-8, for commands whose arguments are all words and numbers.
fn utf8_args(args: &[OsString]) -> Result<Vec<String>, String> {
    args.iter()
        .map(|a| {
            a.to_str()
                .map(str::to_string)
                .ok_or_else(|| format!("argument '{}' is not valid UTF-8", a.to_string_lossy()))
        })
        .collect()
}

/// Fails before the command does anything when the configuration is rejected under
/// `GPU_TEST_PERMIT_STRICT_CONFIG` (instead of the library's panic).
fn strict_check() -> Result<(), String> {
    match Config::from_env().strict_failure() {
        Some(msg) => Err(msg
            .strip_prefix("gpu-test-permit: ")
            .unwrap_or(&msg)
            .to_string()),
        None => Ok(()),
    }
}

/// `config`: the configuration of this environment and the warnings of the last nextest run.
fn config(args: &[OsString]) -> Result<ExitCode, String> {
    if !args.is_empty() {
        return Err("config: usage: config".into());
    }
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

pub(crate) fn take(exclusive: bool) -> Result<gpu_test_permit::GpuTestPermit, String> {
    let pool = gpu_test_permit::PermitPool::global();
    let timeout = pool.timeout();
    if exclusive {
        pool.try_acquire_exclusive_for(timeout)
    } else {
        pool.try_acquire_for(timeout)
    }
    .map_err(|e| e.to_string())
}

fn hold(args: &[String]) -> Result<ExitCode, String> {
    let mut exclusive = false;
    let mut duration: Option<Duration> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--exclusive" => exclusive = true,
            "--for" => {
                let v = it.next().ok_or("--for needs a duration")?;
                duration = Some(
                    gpu_test_permit::config::parse_duration(&v.into())
                        .map_err(|p| format!("--for '{v}' {p}"))?,
                );
            }
            other => return Err(format!("hold: unknown option `{other}`")),
        }
    }
    let permit = take(exclusive)?;
    let slots: Vec<String> = permit.slots().map(|s| s.to_string()).collect();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "held pid={} slots={}",
        std::process::id(),
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
