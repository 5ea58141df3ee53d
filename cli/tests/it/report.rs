//! The `status` and `trace` commands, and the trace summary behind them.

use std::time::Duration;

use gpu_test_permit_cli::trace::{TraceArgs, TraceEvent, summarize};

use crate::util::{Holder, cli, tempdir};

const LONG: Duration = Duration::from_secs(20);

fn hold(dir: &std::path::Path) -> Holder {
    let mut c = cli(dir, 1);
    c.arg("hold")
        .env("NEXTEST_EXECUTION_MODE", "process-per-test")
        .env("NEXTEST_TEST_NAME", "suite::holder_test");
    Holder::spawn(c)
}

#[test]
fn status_lists_the_holder_and_the_waiter_and_forgets_a_killed_waiter() {
    let dir = tempdir();
    let holder = hold(dir.path());
    assert!(holder.held_within(LONG));
    let mut waiter = hold(dir.path());
    assert!(!waiter.held_within(Duration::from_millis(300)));

    let out = cli(dir.path(), 1).arg("status").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let slot = lines.iter().find(|l| l.starts_with("slot 0:")).unwrap();
    assert!(
        slot.contains("held") && slot.contains(&format!("pid {}", holder.child.id())),
        "{text}"
    );
    assert!(slot.contains("suite::holder_test"), "{text}");
    let waiting = lines.iter().find(|l| l.starts_with("waiting")).unwrap();
    assert!(
        waiting.contains(&format!("pid {}", waiter.child.id())),
        "{text}"
    );

    // A waiter killed while waiting leaves a record behind; status must not list it.
    waiter.child.kill().unwrap();
    waiter.child.wait().unwrap();
    let text =
        String::from_utf8(cli(dir.path(), 1).arg("status").output().unwrap().stdout).unwrap();
    assert!(text.contains("waiting: nobody"), "{text}");
    let leftovers = crate::util::files_named(dir.path(), "wait.");
    assert_eq!(leftovers, 0);
    drop(holder);
}

#[test]
fn status_of_a_fresh_directory_says_so() {
    let dir = tempdir();
    let missing = dir.path().join("never-used");
    let out = cli(dir.path(), 1)
        .args(["status", "--dir"])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no slots yet"));
}

fn event(name: &str, test: &str, tid: u64, ts: u64, dur: u64, exclusive: bool) -> TraceEvent {
    TraceEvent {
        name: name.into(),
        cat: "gpu-test-permit".into(),
        ph: "X".into(),
        ts,
        dur,
        pid: 1,
        tid,
        args: TraceArgs {
            test: test.into(),
            thread: format!("t{tid}"),
            slots: vec![0],
            exclusive,
            capacity: 2,
            ..Default::default()
        },
    }
}

/// Writes `events` as a trace file.
fn trace_file(dir: &std::path::Path, events: &[TraceEvent]) -> std::path::PathBuf {
    let path = dir.join("trace.json");
    let mut text = String::from("[\n");
    for e in events {
        text += &e.to_json();
        text += ",\n";
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Three 100 ms tests on N = 2, the third waiting for the first, then an exclusive one.
fn run_events() -> Vec<TraceEvent> {
    vec![
        event("wait", "a", 1, 0, 0, false),
        event("hold", "a", 1, 0, 100_000, false),
        event("wait", "b", 2, 0, 0, false),
        event("hold", "b", 2, 0, 100_000, false),
        event("wait", "c", 3, 0, 100_000, false),
        event("hold", "c", 3, 100_000, 100_000, false),
        event("wait", "x", 4, 0, 200_000, true),
        event("hold", "x", 4, 200_000, 50_000, true),
    ]
}

#[test]
fn summary_counts_waits_holds_peak_and_replays_other_n() {
    let s = summarize(&run_events()).unwrap();
    assert_eq!(s.capacity, 2);
    assert_eq!(s.span_us, 250_000);
    assert_eq!(s.peak, 2);
    // Longest wait first.
    assert_eq!(s.tests[0].test, "x");
    assert_eq!(s.tests[0].wait_us, 200_000);
    assert_eq!(s.tests[1].test, "c");
    // Held: 3 x 100 ms + 50 ms x 2 units, over 2 x 250 ms.
    assert!((s.utilisation - 0.8).abs() < 1e-9, "{}", s.utilisation);
    // N = 1: a, b, c one after another, then x: 350 ms. N = 3: a, b, c at once, then x.
    assert_eq!(s.what_if[0], (1, 350_000));
    assert_eq!(s.what_if[1], (2, 250_000));
    assert_eq!(s.what_if[2], (3, 150_000));
    assert_eq!(summarize(&[event("wait", "a", 1, 0, 5, false)]), None);
}

#[test]
fn trace_command_prints_the_summary_and_checks_the_peak() {
    let dir = tempdir();
    let path = trace_file(dir.path(), &run_events());
    let ok = cli(dir.path(), 2).arg("trace").arg(&path).output().unwrap();
    assert!(ok.status.success());
    let text = String::from_utf8(ok.stdout).unwrap();
    assert!(text.contains("peak concurrency 2"), "{text}");
    assert!(
        text.contains("N = 1") && text.contains("350.0 ms"),
        "{text}"
    );

    let within = cli(dir.path(), 2)
        .arg("trace")
        .arg(&path)
        .args(["--max-peak", "2"])
        .status()
        .unwrap();
    assert!(within.success());
    let above = cli(dir.path(), 2)
        .arg("trace")
        .arg(&path)
        .args(["--max-peak", "1"])
        .output()
        .unwrap();
    assert_eq!(above.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&above.stderr).contains("peak concurrency 2 is above 1"));

    let bad = cli(dir.path(), 2)
        .args(["trace", "/nonexistent/trace.json"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot read /nonexistent/trace.json"));
}

#[test]
fn trace_options_in_any_order_give_the_same_result() {
    let dir = tempdir();
    let path = trace_file(dir.path(), &run_events());
    let trace = |args: &[&str]| {
        let out = cli(dir.path(), 2)
            .arg("trace")
            .args(
                args.iter()
                    .map(|a| a.replace("FILE", path.to_str().unwrap())),
            )
            .output()
            .unwrap();
        (out.status.code(), out.stdout, out.stderr)
    };
    let first = trace(&["FILE", "--max-peak", "1", "--timeline"]);
    assert_eq!(first.0, Some(1), "{first:?}");
    assert!(String::from_utf8_lossy(&first.1).contains("pid 1 t3 "));
    for other in [
        &["--timeline", "--max-peak=1", "FILE"][..],
        &["--max-peak", "1", "FILE", "--timeline"],
    ] {
        assert_eq!(trace(other), first, "{other:?}");
    }
}

#[test]
fn trace_command_draws_a_timeline_and_rejects_bad_arguments() {
    let dir = tempdir();
    let path = trace_file(dir.path(), &run_events());
    let out = cli(dir.path(), 2)
        .arg("trace")
        .arg(&path)
        .arg("--timeline")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // One row per hold; the test that waited 100 ms shows its wait before its hold.
    assert_eq!(
        text.lines().filter(|l| l.starts_with("pid 1 ")).count(),
        4,
        "{text}"
    );
    let c_row = text.lines().find(|l| l.starts_with("pid 1 t3 ")).unwrap();
    assert!(c_row.contains(".#"), "{text}");
    for bad in [
        &["trace"][..],
        &["trace", "--max-peak"],
        &["trace", "f", "--bogus"],
    ] {
        let out = cli(dir.path(), 2).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("gpu-test-permit: trace: "), "{err}");
        assert!(err.contains("usage: gpu-test-permit trace FILE"), "{err}");
    }
}

#[test]
fn trace_command_shows_the_model_beside_the_fixed_replay() {
    let dir = tempdir();
    let path = trace_file(dir.path(), &run_events());
    let out = cli(dir.path(), 2).arg("trace").arg(&path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("fixed hold times") && text.contains("model (range)"),
        "{text}"
    );
    // Every hold here ran at about the same concurrency: the slope is not known.
    assert!(
        text.contains("a = 0.50 (0.00-1.00), not identified"),
        "{text}"
    );
    let s = summarize(&run_events()).unwrap();
    let p = s.predicted[0];
    let row = text.lines().find(|l| l.starts_with("  N = 1 ")).unwrap();
    assert!(
        row.contains("350.0 ms")
            && row.contains(&format!(
                "{:.1} ms ({:.1}-{:.1})",
                p.span_us as f64 / 1000.0,
                p.low_us as f64 / 1000.0,
                p.high_us as f64 / 1000.0
            )),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("  N = 2 ") && l.ends_with("(this run)")),
        "{text}"
    );
}

#[test]
fn summary_and_trace_command_suggest_weights_for_tests_over_their_memory() {
    const MIB: u64 = 1 << 20;
    // N = 4 on one GPU with a 4 GiB budget: a unit stands for 1 GiB.
    let with = |mut e: TraceEvent, units, declared: Option<u64>, used: Option<u64>| {
        e.args.capacity = 4;
        e.args.gpus = 1;
        e.args.units = units;
        e.args.memory = declared;
        e.args.memory_used = used;
        e.args.memory_budget = Some(4096 * MIB);
        e
    };
    let events = vec![
        // Within its share and its declaration.
        with(
            event("hold", "small", 1, 0, 10, false),
            1,
            Some(512 * MIB),
            Some(500 * MIB),
        ),
        // 2.5 GiB on one unit: needs 3.
        with(
            event("hold", "big", 2, 0, 10, false),
            1,
            None,
            Some(2560 * MIB),
        ),
        // Declared 1 GiB, used 1.5 GiB, within its 2 units' share: declare more.
        with(
            event("hold", "liar", 3, 0, 10, false),
            2,
            Some(1024 * MIB),
            Some(1536 * MIB),
        ),
        // More than the whole GPU's budget.
        with(
            event("hold", "huge", 4, 20, 10, false),
            4,
            None,
            Some(5000 * MIB),
        ),
        // No measurement: nothing to say.
        with(
            event("hold", "unmeasured", 5, 0, 10, false),
            1,
            Some(MIB),
            None,
        ),
    ];
    let s = summarize(&events).unwrap();
    let by: Vec<(&str, Option<usize>, bool)> = s
        .memory
        .iter()
        .map(|m| (m.test.as_str(), m.suggested_units, m.over_budget))
        .collect();
    assert_eq!(
        by,
        [
            ("big", Some(3), false),
            ("huge", Some(4), true),
            ("liar", Some(2), false)
        ]
    );
    let liar = &s.memory[2];
    assert_eq!(
        (liar.share, liar.suggested_memory),
        (Some(2048 * MIB), 1536 * MIB)
    );

    let dir = tempdir();
    let path = trace_file(dir.path(), &events);
    let out = cli(dir.path(), 4).arg("trace").arg(&path).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "  big: used 2560.0 MiB, share of the budget for 1 unit(s) 1024.0 MiB; take 3 units"
        ),
        "{text}"
    );
    assert!(
        text.contains("  huge: used 5000.0 MiB") && text.contains("more than a whole GPU's budget"),
        "{text}"
    );
    assert!(text.contains("  liar: used 1536.0 MiB, declared 1024.0 MiB, share of the budget for 2 unit(s) 2048.0 MiB; declare 1536.0 MiB"), "{text}");
    assert!(
        !text.contains("  small:") && !text.contains("  unmeasured:"),
        "{text}"
    );
}

#[test]
fn trace_command_reads_runs_at_several_n_appended_to_one_file() {
    // Three tests alone at N = 1, then the same three side by side at N = 3, each twice as
    // long: the model is fitted from both, the summary is of the second.
    let mut events = Vec::new();
    for (i, t) in ["a", "b", "c"].into_iter().enumerate() {
        let mut alone = event("hold", t, 1, i as u64 * 100_000, 100_000, false);
        alone.args.capacity = 1;
        let mut shared = event("hold", t, i as u64, 1_000_000, 200_000, false);
        shared.args.capacity = 3;
        events.extend([alone, shared]);
    }
    let dir = tempdir();
    let path = trace_file(dir.path(), &events);
    let out = cli(dir.path(), 3).arg("trace").arg(&path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("holds 2 runs (permits 1, 3): the summary is of the last"),
        "{text}"
    );
    assert!(text.contains("permits 3; span 200.0 ms"), "{text}");
    // 200 ms at 2 units beside each: a = (200 / 100 - 1) / 2 = 0.5.
    assert!(
        text.contains("a = 0.50") && text.contains("fitted from 3 tests"),
        "{text}"
    );
    // Two loads cannot show a saturation: the most throughput the runs delivered stands in,
    // 3 holds at twice their time alone, 1.5 holds' worth.
    assert!(
        text.contains("throughput assumed to stop at the most the trace showed, 1.50 holds' worth"),
        "{text}"
    );
    // At N = 1 the model gives the first run back (3 x 100 ms), the fixed replay 600 ms.
    let row = text.lines().find(|l| l.starts_with("  N = 1 ")).unwrap();
    assert!(
        row.contains("600.0 ms") && row.contains(" 300.0 ms"),
        "{text}"
    );
    // At N = 6 (twice the run's N) the estimate stays at what N = 3 gave, 200 ms.
    let row = text.lines().find(|l| l.starts_with("  N = 6 ")).unwrap();
    assert!(row.contains(" 200.0 ms ("), "{text}");
    // The model accounts for both runs at their own N.
    assert!(!text.contains("not to be trusted"), "{text}");
}

#[test]
fn trace_command_shows_where_the_gpu_saturates_from_runs_at_three_n() {
    // Eight tests of 100 ms alone, traced at N = 1, 2 and 4 into one file, on a GPU that runs
    // two side by side at 1.15 times their time alone and saturates at 1.8 holds' worth.
    let slowdown = |o: f64| (1.0 + 0.15 * o).max((1.0 + o) / 1.8);
    let mut events = Vec::new();
    let mut t0 = 0;
    for n in [1u64, 2, 4] {
        let hold = (100_000.0 * slowdown((n - 1) as f64)).round() as u64;
        for i in 0..8u64 {
            let name = format!("t{i}");
            let begin = t0 + (i / n) * hold;
            let mut e = event("hold", &name, i % n, begin, hold, false);
            e.args.capacity = n as usize;
            events.push(e);
        }
        t0 += 10_000_000;
    }
    let dir = tempdir();
    let path = trace_file(dir.path(), &events);
    let out = cli(dir.path(), 4).arg("trace").arg(&path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("holds 3 runs (permits 1, 2, 4)"), "{text}");
    assert!(
        text.contains("and the GPU's throughput stops at 1.80 holds' worth ("),
        "{text}"
    );
    // At N = 8 all eight run at once, each 8 / 1.8 times as long as alone: 444 ms, where the
    // slope alone (1 + 0.15 x 7) would give 205 ms.
    let row = text.lines().find(|l| l.starts_with("  N = 8 ")).unwrap();
    let model: f64 = row.split_whitespace().nth(5).unwrap().parse().unwrap();
    assert!((model - 444.4).abs() < 5.0, "{text}");
    // N = 2 runs at 1.74 holds' worth, within 5 % of the 1.8 that more permits reach.
    assert!(
        text.contains("suggested N = 2: the smallest whose estimate is within 5 % of the fastest"),
        "{text}"
    );
    // N = 4 was slower than N = 2, and the model, which saw the GPU saturate, says so: its
    // estimates stand.
    assert!(!text.contains("not to be trusted"), "{text}");
}

/// Test names of 60 to 90 characters leave the columns of `trace`'s tables aligned, and are
/// shown in full in the per-test table.
#[test]
fn trace_tables_stay_aligned_with_long_test_names() {
    let dir = tempdir();
    let names: Vec<String> = [60, 75, 90, 1]
        .iter()
        .map(|&len| {
            let mut name = format!("crate::tests::len_{len}_");
            while name.len() < len {
                name.push('x');
            }
            name
        })
        .collect();
    let mut events = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let tid = i as u64 + 1;
        let ts = i as u64 * 50_000;
        let mut wait = event("wait", name, tid, ts, 0, false);
        let mut hold = event("hold", name, tid, ts, 100_000, false);
        // libtest names a test's thread after the test.
        wait.args.thread = name.clone();
        hold.args.thread = name.clone();
        events.extend([wait, hold]);
    }
    let path = trace_file(dir.path(), &events);
    let out = cli(dir.path(), 2)
        .arg("trace")
        .arg(&path)
        .arg("--timeline")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Per-test table: every number ends in the same column, the full name follows.
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("permits"))
        .unwrap_or_else(|| panic!("no table: {text}"));
    let hold_end = header.find("hold ms").unwrap() + "hold ms".len();
    for name in &names {
        let row = text
            .lines()
            .find(|l| l.ends_with(&format!("  {name}")))
            .unwrap_or_else(|| panic!("no row for {name}: {text}"));
        assert!(row[..hold_end].ends_with(".0"), "{row}\n{text}");
        assert_eq!(&row[hold_end..hold_end + 2], "  ", "{row}\n{text}");
    }
    // Timeline: labels of at most 64 characters, so every row's slot column is at one place.
    let timeline: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("process/thread"))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(timeline.len(), 1 + names.len(), "{text}");
    let slot_at = timeline[0].find("slot").unwrap();
    for row in &timeline[1..] {
        assert_eq!(&row[slot_at - 1..slot_at + 1], " 0", "{row}\n{text}");
    }
    assert!(timeline.iter().any(|r| r.contains("...")), "{text}");
}

/// A suite that something other than permits paces: at N = 1 its eight 100 ms tests ran back
/// to back, all asking at once; at N = 2 its tests held their permits no longer, but asked for
/// them only 300 ms after the previous pair let go (work outside the permits, on a busy CPU),
/// so the run was no faster. The model explains runs by permits: it cannot account for both.
#[test]
fn trace_command_says_when_the_estimates_are_not_to_be_trusted() {
    let mut events = Vec::new();
    for i in 0..8u64 {
        let name = format!("t{i}");
        let mut wait = event("wait", &name, i, 0, i * 100_000, false);
        let mut hold = event("hold", &name, i, i * 100_000, 100_000, false);
        wait.args.capacity = 1;
        hold.args.capacity = 1;
        events.extend([wait, hold]);
    }
    let t0 = 10_000_000;
    for i in 0..8u64 {
        let name = format!("t{i}");
        let begin = t0 + (i / 2) * 400_000;
        events.push(event("wait", &name, i, begin, 0, false));
        events.push(event("hold", &name, i, begin, 100_000, false));
    }
    let dir = tempdir();
    let path = trace_file(dir.path(), &events);
    let out = cli(dir.path(), 2).arg("trace").arg(&path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // The model, fitted from both runs (holds as long alone as in pairs: a = 0), replays the
    // second run's requests at N = 1 one after another, each as long after the release before
    // it as in the trace: 1.4 s, where the first run took 0.8 s.
    let line = text
        .lines()
        .find(|l| l.starts_with("NOT TO BE TRUSTED: "))
        .unwrap_or_else(|| panic!("no warning: {text}"));
    assert_eq!(
        line,
        "NOT TO BE TRUSTED: measured 800.0 ms at N = 1, predicted 1.4 s (with more permits no \
         faster: 1.3 s at N = 2 against 800.0 ms at N = 1, where tests waited for permits): \
         something other than permits limits this suite (the CPU, memory, the disk?), so these \
         estimates are not to be trusted",
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("suggested N = ")
            && l.ends_with(
                "; not to be trusted: the model does not account for the runs measured (above)"
            )),
        "{text}"
    );
}
