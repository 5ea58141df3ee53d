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
use gpu_test_permit_cli::trace::{peak_concurrency, read_events, timeline};

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
                .env_remove("GPU_TEST_PERMIT_CONCURRENCY")
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
    println!("\n{}", timeline(&events, 50));
    let peak = peak_concurrency(&events);
    let holds = events.iter().filter(|e| e.name == "hold").count();
    println!("{holds} tests held the GPU; at most {peak} at once (N = {n})");
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
