//! `gpu-test-permit`: command-line tools around the permit pool.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

mod probe;
mod report;

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
        run COMMAND while holding a permit; exits with its status
  status [--dir DIR]
        who holds the host slots now, since when, and who waits
  trace FILE [--max-peak N] [--timeline]
        summarise a GPU_TEST_PERMIT_TRACE file: per-test wait and hold times,
        utilisation, peak concurrency and an estimate for other N; with --max-peak,
        exit 1 when more than N permits were held at once; with --timeline, draw who
        held the GPU when
  nextest-snippet
        print a .config/nextest.toml test group for GPU tests sized by
        REALIZAR_GPU_TEST_CONCURRENCY x GPU_TEST_PERMIT_GPUS
  help  print this text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let result = match cmd.as_str() {
        "hold" => hold(rest),
        "run" => run(rest),
        "probe" => probe::main(rest),
        "status" => report::status(rest),
        "trace" => report::trace(rest),
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
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(format!("unknown command `{other}`\n{USAGE}")),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("gpu-test-permit: {msg}");
            ExitCode::from(2)
        }
    }
}

fn take(exclusive: bool) -> Result<gpu_test_permit::GpuTestPermit, String> {
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

fn run(args: &[String]) -> Result<ExitCode, String> {
    let (exclusive, rest) = match args.first().map(String::as_str) {
        Some("--exclusive") => (true, &args[1..]),
        _ => (false, args),
    };
    let rest = match rest.first().map(String::as_str) {
        Some("--") => &rest[1..],
        _ => rest,
    };
    let (program, program_args) = rest.split_first().ok_or("run: no command given")?;
    let permit = take(exclusive)?;
    let status = std::process::Command::new(program)
        .args(program_args)
        .status()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    drop(permit);
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(c.clamp(1, 255) as u8),
        None => ExitCode::FAILURE,
    })
}
