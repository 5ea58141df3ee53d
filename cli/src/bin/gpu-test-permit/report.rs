//! `status` and `trace`: what the permits are doing now, and what they did in a traced run.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpu_test_permit::__private::host::{
    HolderRecord, SlotStatus, recorded_hangs, status as host_status,
};
use gpu_test_permit::__private::runs::{CasualtyRecord, casualties_in_trace, recorded_casualties};
use gpu_test_permit::config::Config;
use gpu_test_permit_cli::trace::{
    Disagreement, SkippedLine, Slowdown, SlowdownBasis, Summary, check_estimates, read_trace,
    split_runs, summarize_with, timeline,
};

use crate::args::Args;

/// How long ago Unix milliseconds `since_unix_ms` were by this process's wall clock (`1.5s`);
/// `an unknown time` for a time later than now, which only a clock set apart from this one
/// can have written.
pub(crate) fn ago(since_unix_ms: u64) -> String {
    let since = UNIX_EPOCH + Duration::from_millis(since_unix_ms);
    seconds(SystemTime::now().duration_since(since).ok())
}

/// `1.5s`, or `an unknown time`.
fn seconds(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.1}s", d.as_secs_f64()),
        None => "an unknown time".to_string(),
    }
}

/// How long ago a holder's grant, or a waiter's start, was ([`HolderRecord::age`]: on the boot
/// clock where the record allows, so that a process whose wall clock is set apart shows the
/// time it really held or waited); `for an unknown time` where it cannot be told.
fn record_age(r: &HolderRecord) -> String {
    match r.age() {
        Some(d) => seconds(Some(d)),
        None => "for an unknown time".to_string(),
    }
}

fn who(r: &HolderRecord) -> String {
    let mut text = format!(
        "pid {} {} ({})",
        r.pid,
        printable(&r.test),
        printable(&r.thread)
    );
    if r.exclusive {
        text.push_str(" exclusive");
    } else if r.gpus > 1 {
        text.push_str(&format!(
            ", {} unit(s) on each of {} GPUs",
            r.units / r.gpus,
            r.gpus
        ));
    } else if r.units > 1 {
        text.push_str(&format!(", {} units", r.units));
    }
    if let Some(bytes) = r.memory {
        text.push_str(&format!(
            ", declared {}",
            gpu_test_permit::__private::config::format_bytes(bytes)
        ));
    }
    text
}

/// The slots of `slots` that one permit holds, permit by permit, in the order of their first
/// slot: a permit of k units (every slot, when exclusive) wrote the same record into each of
/// its k slots. Equal records from more slots than the permit has units are separate permits.
fn permits_by_record(slots: &[SlotStatus]) -> Vec<(&HolderRecord, Vec<usize>)> {
    let mut out: Vec<(&HolderRecord, Vec<usize>)> = Vec::new();
    for slot in slots {
        let Some(r) = &slot.holder else { continue };
        match out
            .iter_mut()
            .find(|(seen, held)| *seen == r && held.len() < r.units.max(1))
        {
            Some((_, held)) => held.push(slot.index),
            None => out.push((r, vec![slot.index])),
        }
    }
    out
}

/// Text that other processes wrote (test and thread names in slot records) or named (paths),
/// made safe for a terminal: control characters, which could clear the screen, move the cursor
/// or start a forged line, and bidirectional overrides, which reorder what is shown, are
/// escaped the way Rust writes them (`\r`, `\u{1b}`).
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn printable_path(path: &Path) -> String {
    printable(&path.to_string_lossy())
}

/// `status [--dir DIR]`: who holds the slots of the configured directory, since when, who waits.
pub(crate) fn status(args: &Args) -> Result<ExitCode, String> {
    let dir = args.slot_dir()?;
    let s = host_status(&dir).map_err(|e| format!("cannot read {}: {e}", printable_path(&dir)))?;
    println!("slot directory {}", printable_path(&s.dir));
    if let Some(layout) = &s.layout {
        println!("layout: {layout}");
    }
    if s.slots.is_empty() {
        println!("no slots yet (no permit was taken with this directory)");
    }
    // One line per permit (at its first slot), however many slots it holds.
    let permits = permits_by_record(&s.slots);
    for slot in &s.slots {
        match (&slot.holder, slot.held) {
            (Some(_), _) => {
                let Some((r, held)) = permits.iter().find(|(_, held)| held[0] == slot.index) else {
                    continue;
                };
                let names = held
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                let on = match s.layout {
                    Some(l) if l.gpus > 1 => {
                        let gpus: Vec<String> =
                            gpus_of(held, l.gpus).iter().map(usize::to_string).collect();
                        let word = if gpus.len() == 1 { "GPU" } else { "GPUs" };
                        format!(" ({word} {})", gpus.join(","))
                    }
                    _ => String::new(),
                };
                println!(
                    "{} {names}{on}: held {} by {}{}",
                    if held.len() == 1 { "slot" } else { "slots" },
                    record_age(r),
                    who(r),
                    exited(r.pid)
                );
            }
            (None, true) => match slot.owner {
                Some(pid) => println!(
                    "slot {}: held (no readable record) by pid {pid}{}{}",
                    slot.index,
                    if slot.owner_stopped {
                        ", its process stopped (SIGSTOP, Ctrl-Z or a debugger)"
                    } else {
                        ""
                    },
                    exited(pid)
                ),
                None => println!("slot {}: held (no readable record)", slot.index),
            },
            (None, false) => println!("slot {}: free", slot.index),
        }
    }
    if let Some(layout) = s.layout.filter(|l| l.gpus > 1 && !s.slots.is_empty()) {
        for gpu in 0..layout.gpus {
            let on: Vec<&SlotStatus> = s
                .slots
                .iter()
                .filter(|slot| slot.index % layout.gpus == gpu)
                .collect();
            let held = on.iter().filter(|slot| slot.held).count();
            let declared: u64 = on
                .iter()
                .filter_map(|slot| slot.holder.as_ref())
                .filter_map(|r| r.memory.map(|m| (m, r.units.max(1) / r.gpus.max(1))))
                // A permit's declaration is per GPU, written into each of its slots there.
                .map(|(m, slots_here)| m / slots_here.max(1) as u64)
                .sum();
            let memory = if declared > 0 {
                format!(
                    ", {} declared",
                    gpu_test_permit::__private::config::format_bytes(declared)
                )
            } else {
                String::new()
            };
            println!("GPU {gpu}: {held} of {} units held{memory}", layout.per_gpu);
        }
    }
    if let Some(layout) = s.layout.filter(|_| !s.slots.is_empty()) {
        print_gpu_memory(&s, layout);
    }
    if let Some(head) = &s.head {
        println!(
            "head of the queue {}: {}{}",
            record_age(&head.request),
            who(&head.request),
            if head.liveness.keeps_turn() {
                String::new()
            } else {
                format!(
                    " ({}: the requests behind it take free slots past it)",
                    head.liveness
                )
            }
        );
    }
    if s.waiters.is_empty() && s.in_process.is_empty() {
        println!("waiting: nobody");
    }
    for (w, liveness) in s.waiters.iter().zip(&s.waiter_liveness) {
        let lost = if liveness.keeps_turn() {
            String::new()
        } else {
            format!(" ({liveness}: it lost its turn to the requests behind it)")
        };
        println!("waiting {}: {}{lost}", record_age(w), who(w));
    }
    // The threads of one process queue inside it, behind its one request at the slots.
    for t in &s.in_process {
        println!(
            "pid {}: {} thread{} waiting in-process (since {:.1}s)",
            t.pid,
            t.threads,
            if t.threads == 1 { "" } else { "s" },
            t.waited.as_secs_f64(),
        );
    }
    for f in &s.skipped {
        println!(
            "skipped {}: {}",
            printable_path(&f.path),
            printable(&f.reason)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The GPUs slots `slots` are on (slot `i` on GPU `i % gpus`), in increasing order.
fn gpus_of(slots: &[usize], gpus: usize) -> Vec<usize> {
    let mut on: Vec<usize> = slots.iter().map(|i| i % gpus.max(1)).collect();
    on.sort_unstable();
    on.dedup();
    on
}

/// Each GPU's memory as NVML reports it, where it does (`libnvidia-ml.so.1`): free of total,
/// and the processes that use memory there without a permit (a permit holder's descendants,
/// such as `run`'s command, count as the holder).
fn print_gpu_memory(
    s: &gpu_test_permit::__private::host::HostStatus,
    layout: gpu_test_permit::host::Layout,
) {
    use gpu_test_permit::__private::config::format_bytes;
    let ids = gpu_test_permit::config::Config::global().gpu_ids(layout.gpus);
    for gpu in 0..layout.gpus {
        let holders: Vec<u32> = s
            .slots
            .iter()
            .filter(|slot| slot.index % layout.gpus == gpu)
            .filter_map(|slot| slot.holder.as_ref().map(|r| r.pid))
            .collect();
        let ordinal = ids.get(gpu).copied().unwrap_or(gpu);
        let Some(memory) = gpu_test_permit::__private::host::gpu_memory(ordinal, &holders) else {
            // No NVML here: nothing to say for any GPU.
            return;
        };
        let others: Vec<String> = memory
            .processes
            .iter()
            .filter(|p| p.holder.is_none() && p.pid != std::process::id())
            .map(|p| {
                let name = p
                    .name
                    .as_deref()
                    .map(|n| format!(" ({})", printable(n)))
                    .unwrap_or_default();
                let used = p
                    .used
                    .map_or_else(|| "use not reported".to_string(), format_bytes);
                format!("pid {}{name} {used}", p.pid)
            })
            .collect();
        let without = if others.is_empty() {
            "no process uses it without a permit".to_string()
        } else {
            format!("used without a permit by {}", others.join(", "))
        };
        println!(
            "GPU {gpu} memory (NVML): {} free of {}; {without}",
            format_bytes(memory.free),
            format_bytes(memory.total)
        );
    }
}

/// What completes the line of a slot held by `pid` when no process here has that pid: a
/// slot's lock lives as long as any process has its open file, so the processes that
/// inherited it (those `gpu-test-permit run` started, when `run` was killed) hold it now.
fn exited(pid: u32) -> String {
    if process_is_visible(pid) {
        return String::new();
    }
    format!(
        " (pid {pid} has exited; the processes it started still hold the slot through the \
         descriptor they inherited, or it runs in another PID namespace)"
    )
}

/// Whether a process with id `pid` exists here (`kill(pid, 0)`: allowed, or refused for want of
/// permission); true where that cannot be told.
#[cfg(unix)]
pub(crate) fn process_is_visible(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

#[cfg(not(unix))]
pub(crate) fn process_is_visible(_pid: u32) -> bool {
    true
}

/// `trace FILE [--max-peak N] [--timeline]`: per-test wait and hold times, utilisation, peak
/// concurrency and an estimate for other N, optionally a timeline. With `--max-peak`, exits 1
/// when the peak was higher.
pub(crate) fn trace(args: &Args) -> Result<ExitCode, String> {
    // Exactly one operand: the parser checked. The file name need not be UTF-8.
    let path = Path::new(&args.operands()[0]);
    let max_peak = args.parsed_value("--max-peak", |n| {
        n.to_str()
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or("is not a whole number")
    })?;
    let show_timeline = args.flag("--timeline");
    let file = printable_path(path);
    let read = read_trace(path).map_err(|e| format!("cannot read {file}: {e}"))?;
    print_skipped(path, &read.skipped);
    for c in &read.choices {
        println!(
            "REALIZAR_GPU_TEST_CONCURRENCY=auto chose {}",
            printable(&c.args.test)
        );
    }
    let all = read.events;
    // Runs at several N appended to one file: the summary is of the last, the model is
    // fitted from all of them (each test seen at several concurrencies).
    let mut runs = split_runs(&all);
    let events = runs.pop().expect("at least one run");
    let fitted = (!runs.is_empty()).then(|| Slowdown::fit(&all));
    let Some(s) = summarize_with(&events, fitted.as_ref()) else {
        return Err(format!("{file} holds no permit spans"));
    };
    if !runs.is_empty() {
        let ns: Vec<String> = runs
            .iter()
            .chain([&events])
            .map(|r| r[0].args.capacity.to_string())
            .collect();
        println!(
            "{} holds {} runs (permits {}): the summary is of the last, the model fitted \
             from all\n",
            printable_path(path),
            ns.len(),
            ns.join(", ")
        );
    }
    let ms = |us: u64| us as f64 / 1000.0;
    if show_timeline {
        println!("{}", timeline(&events, (s.span_us / 80_000).max(1)));
    }
    // The name last: a name of any length leaves the numbers' columns aligned.
    println!("{:>7} {:>11} {:>11}  test", "permits", "wait ms", "hold ms");
    for t in &s.tests {
        println!(
            "{:>7} {:>11.1} {:>11.1}  {}",
            t.permits,
            ms(t.wait_us),
            ms(t.hold_us),
            printable(&t.test)
        );
    }
    println!(
        "\npermits {}; span {:.1} ms; utilisation {:.0}%; peak concurrency {}",
        s.capacity,
        ms(s.span_us),
        s.utilisation * 100.0,
        s.peak
    );
    if s.backfilled > 0 {
        println!(
            "backfilled: {} of the holds were granted past a request waiting at the head of the \
             queue, where the hold times on record said that did not delay it",
            s.backfilled
        );
    }
    let per_gpu = gpu_test_permit_cli::trace::peak_per_gpu(&events);
    if !per_gpu.is_empty() {
        let peaks: Vec<String> = per_gpu
            .iter()
            .enumerate()
            .map(|(gpu, peak)| format!("GPU {gpu}: {peak}"))
            .collect();
        println!("peak units per GPU: {}", peaks.join(", "));
        let wide: Vec<&gpu_test_permit::trace::TraceEvent> = events
            .iter()
            .filter(|e| {
                e.name == "hold"
                    && !e.args.exclusive
                    && gpus_of(&e.args.slots, e.args.gpus).len() > 1
            })
            .collect();
        if !wide.is_empty() {
            let most = wide.iter().map(|e| e.args.slots.len()).max().unwrap_or(0);
            println!(
                "permits on several GPUs: {} (at most {most} units each)",
                wide.len()
            );
        }
    }
    for u in &s.unreleased {
        println!(
            "NOT RELEASED: test `{}` (pid {}) took a permit at {:.1} ms and never returned it: \
             its process was killed or aborted while holding it (a hold deadline, a crash, a \
             wedged driver), or still holds it",
            printable(&u.test),
            u.pid,
            ms(u.granted_us)
        );
    }
    print_memory(&s);
    print_learned(&events);
    print_slowdown(&s);
    // Pool sizes that hung on this host (GPU_TEST_PERMIT_HOLD_TIMEOUT records them), for as
    // long as a record is trusted.
    let hangs = Config::global()
        .slot_dir_path()
        .map(|dir| recorded_hangs(&dir))
        .unwrap_or_default();
    let advice = gpu_test_permit_cli::records::advice(
        &hangs,
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64,
    );
    let hung_at = advice.hung_at;
    // Tests of this trace that failed beside others at some N and passed alone: that N is too
    // high for them on this host (weaker than a hang: only for the tests they name). Found in
    // the trace itself (its holds carry attempts and failures under nextest retries), and in
    // the slot directory's records of such tests.
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let mut casualties: Vec<Marked> = casualties_in_trace(&all)
        .into_iter()
        .map(|c| Marked {
            n: c.n(),
            beside: c
                .beside
                .iter()
                .map(|k| k.test.clone())
                .collect::<Vec<_>>()
                .join(", "),
            test: c.key.test,
            whence: "in this trace".to_string(),
        })
        .collect();
    let recorded: Vec<CasualtyRecord> = Config::global()
        .slot_dir_path()
        .map(|dir| recorded_casualties(&dir))
        .unwrap_or_default();
    for c in recorded {
        let recent = now_ms.saturating_sub(c.unix_ms)
            <= gpu_test_permit::__private::hangs::TRUSTED_FOR.as_millis() as u64;
        let known = casualties.iter().any(|m| m.test == c.test && m.n == c.n());
        if recent && !known && s.tests.iter().any(|t| t.test == c.test) {
            casualties.push(Marked {
                n: c.n(),
                beside: c.beside.join(", "),
                whence: format!("run {}", c.run),
                test: c.test,
            });
        }
    }
    for c in &casualties {
        println!(
            "CONTENTION CASUALTY: test `{}` failed at N = {} beside {} and passed alone ({})",
            printable(&c.test),
            c.n,
            printable(&c.beside),
            printable(&c.whence)
        );
    }
    let casualty = casualties.iter().min_by_key(|c| c.n);
    let casualty_at = casualty.map(|c| c.n);
    println!(
        "estimated span with other N:\n  {:<8} {:>18}   model (range)",
        "", "fixed hold times"
    );
    for (n, span) in &s.what_if {
        let model = match s.predicted.iter().find(|p| p.n == *n) {
            Some(p) => format!(
                "{:>10.1} ms ({:.1}-{:.1})",
                ms(p.span_us),
                ms(p.low_us),
                ms(p.high_us)
            ),
            None => String::new(),
        };
        let mut mark = if *n == s.capacity { "  (this run)" } else { "" }.to_string();
        if let Some(h) = hung_at.filter(|h| n >= h) {
            mark.push_str(&format!(
                "  (not advised: a permit hung at N = {h} on this host)"
            ));
        } else if let (Some(at), Some(c)) = (casualty_at.filter(|at| n >= at), casualty) {
            mark.push_str(&format!(
                "  (not advised: `{}` failed at N = {at} beside others and passed alone)",
                printable(&c.test)
            ));
        } else if let Some(old) = advice.too_old.filter(|o| *n >= o.n) {
            mark.push_str(&format!(
                "  (a permit hung at N = {} on {}, too old to rule N = {n} out)",
                old.n,
                old.date()
            ));
        }
        let row = format!("  N = {n:<4} {:>15.1} ms   {model:<34}{mark}", ms(*span));
        println!("{}", row.trim_end());
    }
    // The runs measured, at their own N, against what the model makes of them.
    let measured: Vec<Vec<gpu_test_permit::trace::TraceEvent>> =
        runs.iter().cloned().chain([events.clone()]).collect();
    let disagreements = check_estimates(&measured, &s);
    print_disagreements(&disagreements);
    print_suggestion(&s, hung_at, casualty, !disagreements.is_empty());
    match max_peak {
        Some(max) if s.peak > max => {
            eprintln!("peak concurrency {} is above {max}", s.peak);
            Ok(ExitCode::FAILURE)
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// One line on standard error for the lines of the trace file that were left out: how many,
/// their numbers (the first 20) and why the first was.
fn print_skipped(path: &Path, skipped: &[SkippedLine]) {
    let Some(first) = skipped.first() else {
        return;
    };
    const LISTED: usize = 20;
    let mut numbers: Vec<String> = skipped
        .iter()
        .take(LISTED)
        .map(|s| s.line.to_string())
        .collect();
    if skipped.len() > LISTED {
        numbers.push(format!("and {} more", skipped.len() - LISTED));
    }
    eprintln!(
        "gpu-test-permit: {}: skipped {} unreadable line{}: {} (line {}: {}); the summary is \
         of the other lines",
        printable_path(path),
        skipped.len(),
        if skipped.len() == 1 { "" } else { "s" },
        numbers.join(", "),
        first.line,
        printable(&first.reason)
    );
}

/// A contention casualty the trace command marks: from the trace itself, or recorded for one
/// of its tests in the slot directory.
struct Marked {
    test: String,
    n: usize,
    /// The tests beside it, joined.
    beside: String,
    /// Where it was found: "in this trace", or "run <id>".
    whence: String,
}

/// The smallest N whose model estimate is within 5 % of the fastest, below any N that hung on
/// this host: more permits than that buy little time and load the GPU (and its driver) more.
/// A span for a sentence: seconds from 1 s on, else milliseconds.
fn duration_text(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.1} s", us as f64 / 1e6)
    } else {
        format!("{:.1} ms", us as f64 / 1e3)
    }
}

/// The measured runs that the model's estimates for their own N do not account for, and what
/// that means for the estimates.
fn print_disagreements(found: &[Disagreement]) {
    if found.is_empty() {
        return;
    }
    let runs: Vec<String> = found
        .iter()
        .map(|d| {
            let mut text = format!(
                "measured {} at N = {}, predicted {}",
                duration_text(d.measured_us),
                d.n,
                if d.low_us.abs_diff(d.high_us) < 50 {
                    duration_text(d.low_us)
                } else {
                    format!("{}-{}", duration_text(d.low_us), duration_text(d.high_us))
                }
            );
            if let Some(g) = d.no_gain {
                text.push_str(&format!(
                    " (with more permits no faster: {} at N = {} against {} at N = {}, where \
                     tests waited for permits)",
                    duration_text(g.more.1),
                    g.more.0,
                    duration_text(g.fewer.1),
                    g.fewer.0
                ));
            }
            text
        })
        .collect();
    println!(
        "NOT TO BE TRUSTED: {}: something other than permits limits this suite (the CPU, \
         memory, the disk?), so these estimates are not to be trusted",
        runs.join("; ")
    );
}

fn print_suggestion(
    s: &Summary,
    hung_at: Option<usize>,
    casualty: Option<&Marked>,
    untrusted: bool,
) {
    let casualty_at = casualty.map(|c| c.n);
    let allowed: Vec<_> = s
        .predicted
        .iter()
        .filter(|p| hung_at.is_none_or(|h| p.n < h) && casualty_at.is_none_or(|c| p.n < c))
        .collect();
    let Some(best) = allowed.iter().min_by_key(|p| p.span_us) else {
        if let Some(h) = hung_at {
            println!(
                "suggested N: none: a permit hung at N = {h} on this host; fix or avoid what \
                 hung (GPU_TEST_PERMIT_HOLD_TIMEOUT names the test) before choosing N"
            );
        } else if let Some(c) = casualty {
            println!(
                "suggested N: none: `{}` failed at N = {} beside others and passed alone; \
                 give it more of the GPU (a weight, or a memory declaration) or run it alone",
                printable(&c.test),
                c.n
            );
        }
        return;
    };
    let pick = allowed
        .iter()
        .filter(|p| p.span_us as f64 <= best.span_us as f64 * 1.05)
        .min_by_key(|p| p.n)
        .expect("the fastest is within 5 % of itself");
    let mut line = format!(
        "suggested N = {}: the smallest whose estimate is within 5 % of the fastest ({:.1} ms \
         at N = {})",
        pick.n,
        best.span_us as f64 / 1000.0,
        best.n
    );
    if let Some(h) = hung_at {
        line.push_str(&format!(
            "; N = {h} and above left out, a permit hung there"
        ));
    }
    if let Some(c) = casualty.filter(|c| hung_at.is_none_or(|h| c.n < h)) {
        line.push_str(&format!(
            "; N = {} and above left out, `{}` failed there beside others and passed alone",
            c.n,
            printable(&c.test)
        ));
    }
    if untrusted {
        line.push_str(
            "; not to be trusted: the model does not account for the runs measured (above)",
        );
    } else if s.slowdown.basis == SlowdownBasis::NotIdentified {
        line.push_str(
            "; a guess: this trace cannot tell how holds slow each other (trace a run at \
             another N into the same file)",
        );
    }
    println!("{line}");
}

/// The slowdown model the estimates rest on, in a sentence or two.
fn print_slowdown(s: &Summary) {
    let m = &s.slowdown;
    let basis = match m.basis {
        SlowdownBasis::RepeatedTests { tests } => {
            format!("fitted from {tests} tests that held permits at different concurrencies")
        }
        SlowdownBasis::Overlap { holds } => format!(
            "fitted across {holds} holds at different concurrencies (assumes the tests that \
             ran alone are like the others)"
        ),
        SlowdownBasis::NotIdentified => "not identified: every hold ran at about the same \
             concurrency, so the range runs from hold times fixed (0) to GPU throughput fixed \
             (1); trace a run at another N into the same file to fit it"
            .to_string(),
        _ => "given".to_string(),
    };
    println!(
        "model: a hold takes 1 + a x (units held beside it) times as long as alone, the \
         requests paced as in the trace; a = {:.2} ({:.2}-{:.2}), {basis}",
        m.factor, m.low, m.high
    );
    let holds = |s: f64| format!("{s:.2} holds' worth");
    match (m.saturation, m.saturation_low, m.saturation_high) {
        (Some(s), low, Some(high)) => println!(
            "  and the GPU's throughput stops at {} ({}-{}): past it, every hold runs at its \
             share",
            holds(s),
            holds(low.unwrap_or(s)),
            holds(high)
        ),
        (Some(s), _, None) => println!(
            "  and the GPU's throughput assumed to stop at the most the trace showed, {}: \
             above the highest N traced the estimate expects no gain (the range's fast end \
             lets it grow along a)",
            holds(s)
        ),
        _ => {}
    }
}

/// Tests whose units were learned (`GPU_TEST_PERMIT_WEIGHTS=learned`), from their hold
/// events: the most units each held, and the measured peak they were learned from.
fn print_learned(events: &[gpu_test_permit::trace::TraceEvent]) {
    let mut learned: Vec<(&str, usize, u64)> = Vec::new();
    for e in events.iter().filter(|e| e.name == "hold") {
        let Some(bytes) = e.args.learned else {
            continue;
        };
        let units = e.args.units.max(1);
        match learned.iter_mut().find(|(t, _, _)| *t == e.args.test) {
            Some(w) if w.1 < units => (w.1, w.2) = (units, bytes),
            Some(_) => {}
            None => learned.push((&e.args.test, units, bytes)),
        }
    }
    if learned.is_empty() {
        return;
    }
    learned.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    println!("learned weights (GPU_TEST_PERMIT_WEIGHTS=learned; the tests declared nothing):");
    for (test, units, bytes) in learned {
        println!(
            "  `{}` held {units} unit{} for its measured {:.1} MiB",
            printable(test),
            if units == 1 { "" } else { "s" },
            bytes as f64 / (1u64 << 20) as f64
        );
    }
}

/// Tests that used more GPU memory than they declared or than their units' share of the
/// budget, with the weight or declaration that would cover it.
fn print_memory(s: &Summary) {
    if s.memory.is_empty() {
        return;
    }
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    println!("GPU memory above what a test declared or its units' share of the budget:");
    for m in &s.memory {
        let mut line = format!("  {}: used {}", printable(&m.test), mib(m.used));
        if let Some(d) = m.declared {
            line.push_str(&format!(", declared {}", mib(d)));
        }
        if let Some(share) = m.share {
            line.push_str(&format!(
                ", share of the budget for {} unit(s) {}",
                m.units,
                mib(share)
            ));
        }
        match m.suggested_units {
            Some(k) if m.over_budget => line.push_str(&format!(
                "; more than a whole GPU's budget: take {k} units (the whole GPU) and raise the \
                 budget or shrink the test"
            )),
            Some(k) if k <= m.units => {
                line.push_str(&format!("; declare {}", mib(m.suggested_memory)))
            }
            Some(k) => line.push_str(&format!(
                "; take {k} units (a weight of {k}) or declare {}",
                mib(m.suggested_memory)
            )),
            None => line.push_str(&format!("; declare {}", mib(m.suggested_memory))),
        }
        println!("{line}");
    }
}
