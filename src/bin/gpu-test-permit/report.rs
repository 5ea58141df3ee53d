//! `status` and `trace`: what the permits are doing now, and what they did in a traced run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gpu_test_permit::config::Config;
use gpu_test_permit::host::{HolderRecord, SlotStatus, recorded_hangs, status as host_status};
use gpu_test_permit::trace::{read_events, summarize, timeline};

use crate::args::Args;

pub(crate) fn ago(since_unix_ms: u64) -> String {
    let since = UNIX_EPOCH + Duration::from_millis(since_unix_ms);
    let d = SystemTime::now().duration_since(since).unwrap_or_default();
    format!("{:.1}s", d.as_secs_f64())
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
    } else if r.units > 1 {
        text.push_str(&format!(", {} units", r.units));
    }
    if let Some(bytes) = r.memory {
        text.push_str(&format!(
            ", declared {}",
            gpu_test_permit::config::format_bytes(bytes)
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
fn printable(text: &str) -> String {
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

fn printable_path(path: &Path) -> String {
    printable(&path.to_string_lossy())
}

/// `status [--dir DIR]`: who holds the slots of the configured directory, since when, who waits.
pub(crate) fn status(args: &Args) -> Result<ExitCode, String> {
    let dir = match args.value("--dir") {
        Some(dir) => PathBuf::from(dir),
        None => Config::global().slot_dir_path()?,
    };
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
                println!(
                    "{} {names}: held {} by {}",
                    if held.len() == 1 { "slot" } else { "slots" },
                    ago(r.since_unix_ms),
                    who(r)
                );
            }
            (None, true) => println!("slot {}: held (no readable record)", slot.index),
            (None, false) => println!("slot {}: free", slot.index),
        }
    }
    if let Some(head) = &s.head {
        println!(
            "head of the queue {}: {}{}",
            ago(head.request.since_unix_ms),
            who(&head.request),
            if head.stopped {
                " (process stopped: the requests behind it take free slots past it)"
            } else {
                ""
            }
        );
    }
    if s.waiters.is_empty() {
        println!("waiting: nobody");
    }
    for w in &s.waiters {
        println!("waiting {}: {}", ago(w.since_unix_ms), who(w));
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
    let file = path.display();
    let events = read_events(path).map_err(|e| format!("cannot read {file}: {e}"))?;
    let Some(s) = summarize(&events) else {
        return Err(format!("{file} holds no permit spans"));
    };
    let ms = |us: u64| us as f64 / 1000.0;
    if show_timeline {
        println!("{}", timeline(&events, (s.span_us / 80_000).max(1)));
    }
    println!(
        "{:<60} {:>7} {:>11} {:>11}",
        "test", "permits", "wait ms", "hold ms"
    );
    for t in &s.tests {
        println!(
            "{:<60} {:>7} {:>11.1} {:>11.1}",
            t.test,
            t.permits,
            ms(t.wait_us),
            ms(t.hold_us)
        );
    }
    println!(
        "\npermits {}; span {:.1} ms; utilisation {:.0}%; peak concurrency {}",
        s.capacity,
        ms(s.span_us),
        s.utilisation * 100.0,
        s.peak
    );
    for u in &s.unreleased {
        println!(
            "NOT RELEASED: test `{}` (pid {}) took a permit at {:.1} ms and never returned it: \
             its process was killed or aborted while holding it (a hold deadline, a crash, a \
             wedged driver), or still holds it",
            u.test,
            u.pid,
            ms(u.granted_us)
        );
    }
    // Pool sizes that hung on this host (GPU_TEST_PERMIT_HOLD_TIMEOUT records them).
    let hangs = Config::global()
        .slot_dir_path()
        .map(|dir| recorded_hangs(&dir))
        .unwrap_or_default();
    let hung_at = hangs.iter().map(|h| h.per_gpu * h.gpus).min();
    println!("estimated span with other N (same hold times; on a shared GPU they grow with N):");
    for (n, span) in &s.what_if {
        let mut mark = if *n == s.capacity { "  (this run)" } else { "" }.to_string();
        if let Some(h) = hung_at.filter(|h| n >= h) {
            mark.push_str(&format!(
                "  (not advised: a permit hung at N = {h} on this host)"
            ));
        }
        println!("  N = {n:<3} {:>10.1} ms{mark}", ms(*span));
    }
    match max_peak {
        Some(max) if s.peak > max => {
            eprintln!("peak concurrency {} is above {max}", s.peak);
            Ok(ExitCode::FAILURE)
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}
