//! Three processes with three threads each — nine "GPU tests" — share N = 2 permits.
//!
//! ```sh
//! cargo run --example cap_demo
//! REALIZAR_GPU_TEST_CONCURRENCY=3 cargo run --example cap_demo
//! ```
//!
//! The demo starts copies of itself as child processes, like `cargo nextest` starts one process
//! per test, on a private slot directory and trace file. Each simulated test takes a permit,
//! "uses the GPU" for 300 ms and releases it. Afterwards the parent reads the trace and prints a
//! timeline of who held the GPU when, and checks that never more than N held it at once.

use std::process::{Command, ExitCode};
use std::thread;
use std::time::Duration;

use gpu_test_permit::config::{CONCURRENCY_VAR, Config, DIR_VAR, TRACE_VAR};
use gpu_test_permit::trace::{TraceEvent, peak_concurrency, read_events};

const PROCESSES: usize = 3;
const THREADS: usize = 3;
const HOLD: Duration = Duration::from_millis(300);
const CHILD_VAR: &str = "CAP_DEMO_CHILD";

fn main() -> ExitCode {
    if std::env::var_os(CHILD_VAR).is_some() {
        child();
        return ExitCode::SUCCESS;
    }
    let n = Config::global().concurrency.get();
    let dir = std::env::temp_dir().join(format!("gpu-test-permit-demo-{}", std::process::id()));
    let slots = dir.join("slots");
    let trace = dir.join("trace.json");
    std::fs::create_dir_all(&dir).expect("creating the demo directory");

    println!(
        "{PROCESSES} processes x {THREADS} threads, each test holds the GPU for {} ms; \
         {CONCURRENCY_VAR}={n}",
        HOLD.as_millis()
    );
    let exe = std::env::current_exe().expect("finding the demo executable");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .env(CHILD_VAR, "1")
                .env(DIR_VAR, &slots)
                .env(TRACE_VAR, &trace)
                .env(CONCURRENCY_VAR, n.to_string())
                .spawn()
                .expect("starting a demo process")
        })
        .collect();
    for mut c in children {
        let status = c.wait().expect("waiting for a demo process");
        if !status.success() {
            eprintln!("a demo process failed: {status}");
            return ExitCode::FAILURE;
        }
    }

    let events = read_events(&trace).expect("reading the trace");
    let _ = std::fs::remove_dir_all(&dir);
    print_timeline(&events);
    let peak = peak_concurrency(&events);
    let holds = events.iter().filter(|e| e.name == "hold").count();
    println!("\n{holds} tests held the GPU; at most {peak} at once (N = {n})");
    if holds != PROCESSES * THREADS || peak > n {
        eprintln!("the cap was not kept");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// One "test process": three test threads, each taking a permit from the process-wide pool.
fn child() {
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let _permit = gpu_test_permit::acquire();
                thread::sleep(HOLD); // the GPU work
            });
        }
    });
}

/// One row per hold: `#` while the test held the GPU, `.` while it waited, 50 ms a character.
fn print_timeline(events: &[TraceEvent]) {
    let Some(start) = events.iter().map(|e| e.ts).min() else {
        return;
    };
    let mut holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    holds.sort_by_key(|e| e.ts);
    const TICK_US: u64 = 50_000;
    println!(
        "\n{:<24} {:<6} timeline (50 ms per character)",
        "process/thread", "slot"
    );
    for h in holds {
        let waited = events
            .iter()
            .find(|w| w.name == "wait" && w.pid == h.pid && w.tid == h.tid && w.ts <= h.ts)
            .map_or(h.ts, |w| w.ts);
        let col = |t: u64| ((t - start) / TICK_US) as usize;
        let row: String = " ".repeat(col(waited))
            + &".".repeat(col(h.ts) - col(waited))
            + &"#".repeat((col(h.ts + h.dur) - col(h.ts)).max(1));
        let slots = h
            .args
            .slots
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",");
        println!(
            "{:<24} {:<6} {row}",
            format!("pid {} {}", h.pid, h.args.thread),
            slots
        );
    }
}
