//! `history`: what this host remembers of N — the runs `auto` learns from, and the hangs and
//! contention casualties recorded for the slot directory, in its state directory — and, with
//! `--forget`, forgetting it.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use gpu_test_permit::__private::hangs::{forget_hangs, recorded_hangs};
use gpu_test_permit::__private::runs::{forget_casualties, recorded_casualties};
use gpu_test_permit::__private::tune::{
    HISTORY_KEPT, forget_history, learned_memory, measured_history,
};
use gpu_test_permit::config::Config;
use gpu_test_permit_cli::records::advice;

use crate::args::Args;
use crate::report::{printable, printable_path};

/// `history [--dir DIR] [--forget]`.
pub(crate) fn history(args: &Args) -> Result<ExitCode, String> {
    let cfg = Config::global();
    let dir = args.slot_dir()?;
    let state = cfg.state_dir_for(&dir);
    println!(
        "records of slot directory {} in {}",
        printable_path(&dir),
        printable_path(&state)
    );
    // Measures the runs recorded since (what `auto` does at the start of a run).
    let runs = measured_history(&dir);
    println!(
        "\nruns (the newest {HISTORY_KEPT}; effective = tests' work done at once, waited = share \
         of busy time some test waited for a permit): {}",
        runs.len()
    );
    if !runs.is_empty() {
        println!(
            "  {:<10}  {:>3}  {:<4}  {:>6}  {:>8}  {:>9}  {:>6}  {:>4}  {:>4}  gpu",
            "date", "N", "how", "holds", "busy s", "effective", "waited", "peak", "lost"
        );
    }
    for e in &runs {
        println!(
            "  {:<10}  {:>3}  {:<4}  {:>6}  {:>8.1}  {:>9.2}  {:>5.0}%  {:>4}  {:>4}  {}",
            e.date(),
            e.per_gpu,
            if e.auto { "auto" } else { "set" },
            e.holds,
            e.busy_us as f64 / 1e6,
            e.effective(),
            e.waited() * 100.0,
            e.peak,
            e.unreturned,
            if e.gpu.is_empty() {
                "?".to_string()
            } else {
                printable(&e.gpu)
            }
        );
    }
    if cfg.auto_concurrency {
        println!(
            "\nREALIZAR_GPU_TEST_CONCURRENCY=auto: a run starting now gets {}",
            crate::config::auto_now(cfg, &dir)
        );
    } else {
        println!(
            "\nREALIZAR_GPU_TEST_CONCURRENCY={}: set it to `auto` to let this history choose N",
            cfg.concurrency
        );
    }
    print_learned(cfg, &dir);
    let hangs = recorded_hangs(&dir);
    let casualties = recorded_casualties(&dir);
    println!(
        "\nhangs (permits held past GPU_TEST_PERMIT_HOLD_TIMEOUT): {}",
        hangs.len()
    );
    for h in &hangs {
        println!(
            "  {}  N = {:<3} `{}` held {:.1} s",
            h.date(),
            h.n(),
            printable(&h.test),
            h.held_ms as f64 / 1000.0
        );
    }
    println!(
        "\ncontention casualties (failed beside other tests, passed alone): {}",
        casualties.len()
    );
    for c in &casualties {
        println!(
            "  {}  N = {:<3} `{}` beside {} (run {})",
            c.date(),
            c.n(),
            printable(&c.test),
            printable(&c.beside.join(", ")),
            printable(&c.run)
        );
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let a = advice(&hangs, now_ms);
    match (a.hung_at, a.too_old) {
        (Some(n), _) => println!(
            "\nthe trace advises no N of {n} or more (a permit hung there within {} days)",
            gpu_test_permit::__private::hangs::TRUSTED_FOR.as_secs() / 86_400
        ),
        (None, Some(old)) => println!(
            "\nno N is ruled out: the hang at N = {} on {} is too old to rule it out",
            old.n,
            old.date()
        ),
        (None, None) => println!("\nno N is ruled out by a hang"),
    }
    if !casualties.is_empty() {
        println!(
            "and none at or above a casualty's N for traces that hold that test (`trace` names \
             them)"
        );
    }
    if args.flag("--forget") {
        let forgot_hangs =
            forget_hangs(&dir).map_err(|e| format!("cannot forget the hangs: {e}"))?;
        let forgot_casualties =
            forget_casualties(&dir).map_err(|e| format!("cannot forget the casualties: {e}"))?;
        let forgot_runs =
            forget_history(&dir).map_err(|e| format!("cannot forget the runs: {e}"))?;
        println!(
            "\nforgot {forgot_runs} run{}, {forgot_hangs} hang{} and {forgot_casualties} \
             casualt{}: every N may be advised and chosen again",
            if forgot_runs == 1 { "" } else { "s" },
            if forgot_hangs == 1 { "" } else { "s" },
            if forgot_casualties == 1 { "y" } else { "ies" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The tests whose peak GPU memory was measured, the largest first (at most [`LISTED`]), and
/// what `GPU_TEST_PERMIT_WEIGHTS=learned` makes of them.
fn print_learned(cfg: &Config, dir: &std::path::Path) {
    use gpu_test_permit::config::{LEARNED_MARGIN_PERCENT, Weights};
    const LISTED: usize = 20;
    let peaks = learned_memory(dir);
    println!(
        "\nmeasured peak GPU memory (what GPU_TEST_PERMIT_WEIGHTS=learned weighs a test that \
         declares nothing by, + {LEARNED_MARGIN_PERCENT}%): {}",
        peaks.len()
    );
    for (test, bytes) in peaks.iter().take(LISTED) {
        println!(
            "  {:>10.1} MiB  `{}`",
            *bytes as f64 / (1u64 << 20) as f64,
            printable(test)
        );
    }
    if peaks.len() > LISTED {
        println!("  and {} more", peaks.len() - LISTED);
    }
    if !peaks.is_empty() && cfg.weights == Weights::Declared {
        println!(
            "GPU_TEST_PERMIT_WEIGHTS=declared: set it to `learned` (with a memory budget) to \
             weigh tests that declare nothing by these"
        );
    }
}
