//! `report`: what a nextest run's records say about its GPU tests — run, skipped (with
//! reasons), contention casualties (with who they ran beside), permits never returned, hangs,
//! the peak and the N in force.

use std::process::ExitCode;

use gpu_test_permit::__private::host::recorded_hangs;
use gpu_test_permit::__private::runs::{
    RunRecords, RunSummary, TestKey, read_run, recorded_runs, summarize,
};
use gpu_test_permit_cli::records::{JustEnded, just_ended};

use crate::args::Args;
use crate::report::{printable, printable_path};

/// `report [--run-id ID] [--dir DIR] [--fail-on-casualty] [--fail-on-unpermitted]
/// [--fail-on-teardown]`.
pub(crate) fn report(args: &Args) -> Result<ExitCode, String> {
    let dir = args.slot_dir()?;
    let records = match args.value("--run-id") {
        Some(id) => {
            let id = id.to_string_lossy();
            read_run(&dir, &id)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    let known: Vec<String> = recorded_runs(&dir)
                        .into_iter()
                        .rev()
                        .take(5)
                        .map(|r| r.run_id)
                        .collect();
                    format!(
                        "no records of run {} in {}{}",
                        printable(&id),
                        printable_path(&dir),
                        if known.is_empty() {
                            String::new()
                        } else {
                            format!("; the latest recorded: {}", known.join(", "))
                        }
                    )
                })?
        }
        None => the_run_that_just_ended(&dir)?,
    };
    let s = summarize(&records);
    print!("{}", render(&s, &dir, &records.path));
    if records.truncated {
        eprintln!(
            "gpu-test-permit: {} is larger than the most that is read; its end was left out",
            printable_path(&records.path)
        );
    }
    let mut failed = false;
    if args.flag("--fail-on-unpermitted") {
        if !s.escaped.is_empty() {
            eprintln!(
                "gpu-test-permit: {} loaded a GPU driver without a permit (--fail-on-unpermitted)",
                plural(s.escaped.len(), "test", "tests")
            );
            failed = true;
        }
        // "Cannot tell" is not "none": a run that was not watched saw only the drivers still
        // mapped when a test process looked at itself, so it cannot pass this check.
        if s.watched_tests == 0 {
            eprintln!(
                "gpu-test-permit: {}",
                unwatched_cannot_tell(&records.run_id)
            );
            failed = true;
        }
    }
    if args.flag("--fail-on-teardown") {
        let faults = s.verdicts.iter().filter(|v| v.fault != "crash").count();
        if faults > 0 {
            eprintln!(
                "gpu-test-permit: {} (--fail-on-teardown)",
                plural(faults, "teardown fault", "teardown faults")
            );
            failed = true;
        }
    }
    if args.flag("--fail-on-casualty") && !s.casualties.is_empty() {
        eprintln!(
            "gpu-test-permit: {} test{} passed only alone (--fail-on-casualty)",
            s.casualties.len(),
            if s.casualties.len() == 1 { "" } else { "s" }
        );
        failed = true;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Why `--fail-on-unpermitted` fails a run that was not watched, and what to do.
fn unwatched_cannot_tell(run: &str) -> String {
    format!(
        "run {} was not watched, so --fail-on-unpermitted cannot tell whether its tests loaded \
         a GPU driver without a permit: it cannot have seen {UNWATCHED_UNSEEN}. Run the tests \
         under `gpu-test-permit watch --` as cargo's target runner, or leave \
         --fail-on-unpermitted out",
        printable(run)
    )
}

/// What a run that was not watched cannot have seen: the report says it, and so does
/// `--fail-on-unpermitted` as it fails such a run.
const UNWATCHED_UNSEEN: &str = "a driver loaded and unloaded again before a test process \
    looked at itself (wgpu unloads its Vulkan drivers when its instance is dropped), one loaded \
    by a process a test started, or any in a test binary that does not link gpu-test-permit";

/// Without `--run-id`: the one run of this user that may have just ended, or why there is
/// none to choose (see `records::just_ended`).
fn the_run_that_just_ended(dir: &std::path::Path) -> Result<RunRecords, String> {
    let how = "name the run with --run-id ID: cargo nextest prints it as it starts (`Nextest run \
               ID <uuid> with nextest profile: ...`) and writes it as the `uuid` of its JUnit \
               report";
    let id = match just_ended(dir) {
        JustEnded::One(id) => id,
        JustEnded::Nothing { others } => {
            let others = if others == 0 {
                String::new()
            } else {
                format!(
                    "; {} of other users {} there, which `report` reads only when named ({how})",
                    plural(others, "run", "runs"),
                    if others == 1 { "is" } else { "are" }
                )
            };
            return Err(format!(
                "no run recorded in {} by this user (test processes record their run under \
                 cargo nextest, in the slot directory their environment names){others}",
                printable_path(dir)
            ));
        }
        JustEnded::Several(runs) => {
            let now = std::time::SystemTime::now();
            let named: Vec<String> = runs
                .iter()
                .rev()
                .map(|r| {
                    let ago = now.duration_since(r.modified).unwrap_or_default();
                    format!(
                        "{} (last written {:.1} s ago)",
                        printable(&r.run_id),
                        ago.as_secs_f64()
                    )
                })
                .collect();
            return Err(format!(
                "{} of this user in {} may be the run that just ended, newest first: {}. They \
                 ran side by side, or one began within {} s of another's end, so the newest \
                 need not be yours; {how}",
                plural(runs.len(), "run", "runs"),
                printable_path(dir),
                named.join(", "),
                gpu_test_permit_cli::records::BESIDE.as_secs()
            ));
        }
    };
    read_run(dir, &id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "the records of run {} in {} went away as they were read; run `report` again",
                printable(&id),
                printable_path(dir)
            )
        })
}

fn name(k: &TestKey) -> String {
    printable(&k.to_string())
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The report's sections on drivers beyond the escapes: those linked at build time, and, for a
/// run that was not watched, what it cannot have seen.
fn render_drivers(s: &RunSummary, out: &mut String) {
    use std::fmt::Write;
    if !s.linked_drivers.is_empty() {
        // By binary: every test of a program that links a driver maps it.
        let mut binaries: Vec<(&str, Vec<&str>, usize)> = Vec::new();
        for (key, drivers) in &s.linked_drivers {
            let at = match binaries.iter().position(|(b, _, _)| *b == key.binary) {
                Some(at) => at,
                None => {
                    binaries.push((&key.binary, Vec::new(), 0));
                    binaries.len() - 1
                }
            };
            let (_, names, tests) = &mut binaries[at];
            *tests += 1;
            for d in drivers {
                let d = gpu_test_permit::__private::drivers::library_name(d);
                if !names.contains(&d) {
                    names.push(d);
                }
            }
        }
        let _ = writeln!(
            out,
            "\nlinked to a GPU driver at build time: {} (mapped as the program starts, in \
             every test; not an escape: mapping a driver touches no GPU, creating a context \
             does, and the driver watch cannot tell which of these tests did)",
            plural(binaries.len(), "test binary", "test binaries")
        );
        for (binary, names, tests) in binaries {
            let _ = writeln!(
                out,
                "  {}: {} ({})",
                printable(binary),
                printable(&names.join(", ")),
                plural(tests, "test", "tests")
            );
        }
    }
    if s.watched_tests > 0 {
        let _ = writeln!(
            out,
            "\nwatched {} (each under `gpu-test-permit watch`, cargo's target runner): {}",
            plural(s.watched_tests, "test process", "test processes"),
            if s.escaped.is_empty() {
                "none loaded a GPU driver without a permit".to_string()
            } else {
                format!(
                    "{} loaded a GPU driver without a permit",
                    plural(s.escaped.len(), "test", "tests")
                )
            }
        );
    }
    if s.watched_tests == 0 && s.gpu_tests + s.escaped.len() + s.linked_drivers.len() > 0 {
        let _ = writeln!(
            out,
            "\ndriver loads: this run was not watched, so only drivers still mapped when a test \
             process looked at itself (at its first permit, or as it exited without one) were \
             seen{}; not {UNWATCHED_UNSEEN}. To see every load, run the tests under the watch: \
             cargo's target runner `gpu-test-permit watch --` (CARGO_TARGET_<TRIPLE>_RUNNER, on \
             Linux with glibc).",
            if s.escaped.is_empty() {
                ": none without a permit"
            } else {
                ""
            }
        );
    }
}

/// The report's text.
/// The test processes that crashed or hung after or around their tests, as their watch judged
/// them (`gpu-test-permit watch`).
fn render_verdicts(s: &RunSummary, out: &mut String) {
    use std::fmt::Write;
    if s.verdicts.is_empty() {
        return;
    }
    let teardowns = s.verdicts.iter().filter(|v| v.fault != "crash").count();
    let crashes = s.verdicts.len() - teardowns;
    let _ = writeln!(
        out,
        "\nprocesses that failed after or around their tests: {} (teardown faults and hangs at \
         exit: every test had its result), {} (crashes while tests ran)",
        teardowns, crashes
    );
    for v in &s.verdicts {
        let _ = writeln!(
            out,
            "  {} ({}): {} ({}){}",
            printable(&v.test),
            printable(&v.binary),
            v.fault,
            printable(&v.ended),
            if v.failed {
                ", failed"
            } else {
                ", passed as its tests did"
            }
        );
        let _ = writeln!(out, "    {}", printable(&v.said));
    }
}

pub(crate) fn render(s: &RunSummary, dir: &std::path::Path, path: &std::path::Path) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let secs = s
        .span_us
        .map(|(a, b)| b.saturating_sub(a) as f64 / 1e6)
        .unwrap_or(0.0);
    let _ = writeln!(
        out,
        "run {} ({}): {} that took permits or skipped, {} granted, over {secs:.1} s",
        printable(&s.run_id),
        printable_path(path),
        plural(s.gpu_tests, "GPU test", "GPU tests"),
        plural(s.permits, "permit", "permits"),
    );
    let layouts: Vec<String> = s
        .layouts
        .iter()
        .map(|(n, g)| format!("N = {n} per GPU x {}", plural(*g, "GPU", "GPUs")))
        .collect();
    if !layouts.is_empty() {
        let _ = writeln!(
            out,
            "in force: {}; peak {} held at once",
            layouts.join(", then "),
            plural(s.peak_units, "unit", "units")
        );
    }
    if let Some(c) = &s.choice {
        let _ = writeln!(
            out,
            "chosen by REALIZAR_GPU_TEST_CONCURRENCY=auto: N = {} ({})",
            c.per_gpu,
            printable(&c.why)
        );
    }
    // Said on standard error when it happened, which nextest shows for failing tests only.
    if let Ok(Some(hint)) = gpu_test_permit_cli::records::recorded_hint(dir)
        && hint.run_id == s.run_id
    {
        let _ = writeln!(out, "outside a test group: {}", printable(&hint.line()));
    }
    if s.unreadable > 0 {
        let _ = writeln!(
            out,
            "({} of the file left out: not records of this run)",
            plural(s.unreadable, "line", "lines")
        );
    }
    render_verdicts(s, &mut out);
    if !s.escaped.is_empty() {
        let _ = writeln!(
            out,
            "\nloaded a GPU driver without a permit: {} (they escaped the cap: take a permit \
             before building the GPU object)",
            s.escaped.len()
        );
        for e in &s.escaped {
            let when = if e.held && e.started_process {
                // The permit was the test's; the process that loaded it held none.
                "while holding none"
            } else if e.held {
                "while holding none (before its first permit, or between two)"
            } else {
                "and took no permit"
            };
            let how = if e.seen == "watched" && e.started_process {
                "watched, in a process it started"
            } else if e.seen == "watched" {
                "watched"
            } else {
                "still mapped when looked at"
            };
            let _ = writeln!(
                out,
                "  {}: loaded {} {when} ({how})",
                name(&e.key),
                printable(
                    &e.drivers
                        .iter()
                        .map(|d| gpu_test_permit::__private::drivers::library_name(d))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
    render_drivers(s, &mut out);
    let _ = writeln!(out, "\nskipped: {}", s.skipped.len());
    for k in &s.skipped {
        let _ = writeln!(out, "  {}: {}", name(&k.key), printable(&k.message()));
    }
    let _ = writeln!(
        out,
        "\ncontention casualties: {} (failed while other tests held permits, then passed \
         alone)",
        s.casualties.len()
    );
    for c in &s.casualties {
        let beside: Vec<String> = c.beside.iter().map(name).collect();
        let _ = writeln!(
            out,
            "  {}: failed at attempt {} at N = {} beside {} ({} held beside it at most); \
             passed alone at attempt {}",
            name(&c.key),
            c.failed_attempt,
            c.n(),
            beside.join(", "),
            plural(c.units_beside, "unit", "units"),
            c.passed_attempt
        );
    }
    let other_retries: Vec<&(TestKey, u32)> = s
        .retried
        .iter()
        .filter(|(k, _)| !s.casualties.iter().any(|c| &c.key == k))
        .collect();
    if !other_retries.is_empty() {
        let _ = writeln!(
            out,
            "\nretried, not casualties: {} (failed alone too, failed in their last attempt, \
             or were not retried alone)",
            other_retries.len()
        );
        for (k, attempts) in other_retries {
            let _ = writeln!(out, "  {}: {attempts} attempts", name(k));
        }
    }
    if !s.unreleased.is_empty() {
        let _ = writeln!(
            out,
            "\nnever returned: {} (the process died holding it: a crash, an abort, a hold \
             deadline, a kill; or it still holds it)",
            plural(s.unreleased.len(), "permit", "permits")
        );
        for u in &s.unreleased {
            let _ = writeln!(
                out,
                "  {} attempt {} (pid {})",
                name(&u.key),
                u.attempt,
                u.pid
            );
        }
    }
    if !s.learned.is_empty() {
        let _ = writeln!(
            out,
            "\nlearned weights: {} (declared nothing; GPU_TEST_PERMIT_WEIGHTS=learned gave \
             them the units of their measured peak memory + {}%)",
            plural(s.learned.len(), "test", "tests"),
            gpu_test_permit::config::LEARNED_MARGIN_PERCENT
        );
        for w in &s.learned {
            let _ = writeln!(
                out,
                "  `{}` held {} for its measured {:.1} MiB",
                name(&w.key),
                plural(w.units, "unit", "units"),
                w.learned as f64 / (1u64 << 20) as f64
            );
        }
    }
    if let Some((first, last)) = s.span_us {
        let (from, to) = (first / 1000, last / 1000 + 1000);
        let hangs: Vec<_> = recorded_hangs(dir)
            .into_iter()
            .filter(|h| h.unix_ms >= from && h.unix_ms <= to)
            .collect();
        if !hangs.is_empty() {
            let _ = writeln!(out, "\nhangs (held past GPU_TEST_PERMIT_HOLD_TIMEOUT):");
            for h in hangs {
                let _ = writeln!(
                    out,
                    "  {}: held {:.1} s at N = {}",
                    printable(&h.test),
                    h.held_ms as f64 / 1000.0,
                    h.n()
                );
            }
        }
    }
    out
}
