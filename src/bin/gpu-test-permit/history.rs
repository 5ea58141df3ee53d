//! `history`: what this host remembers of N — the hangs and contention casualties recorded for
//! the slot directory, in its state directory — and, with `--forget`, forgetting it.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use gpu_test_permit::config::Config;
use gpu_test_permit::hangs::{advice, forget_hangs, recorded_hangs};
use gpu_test_permit::runs::{forget_casualties, recorded_casualties};

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
            gpu_test_permit::hangs::TRUSTED_FOR.as_secs() / 86_400
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
        println!(
            "\nforgot {forgot_hangs} hang{} and {forgot_casualties} casualt{}: every N may be \
             advised again",
            if forgot_hangs == 1 { "" } else { "s" },
            if forgot_casualties == 1 { "y" } else { "ies" }
        );
    }
    Ok(ExitCode::SUCCESS)
}
