//! `gpu-test-permit probe`: what this machine has, per backend, and what tests would do.

use std::process::ExitCode;

use gpu_test_permit::config::{Config, REQUIRE_VAR};
use gpu_test_permit::decision::{Decision, Policy, decide_any};
use gpu_test_permit::probe::{Backend, ProbeReport, probe};

use crate::args::Args;

/// `probe [--json] [cuda|wgpu ...]`.
pub(crate) fn main(args: &Args) -> Result<ExitCode, String> {
    let json = args.flag("--json");
    let mut backends = args
        .operands_utf8()?
        .into_iter()
        .map(|b| b.parse::<Backend>().map_err(|e| args.error(e)))
        .collect::<Result<Vec<_>, _>>()?;
    if backends.is_empty() {
        backends = Backend::ALL.to_vec();
    }
    let policy = Config::global().require.clone().map_err(|e| e.to_string());
    // Every backend is probed, also for a subset, because `any` looks at all of them.
    let reports: Vec<ProbeReport> = Backend::ALL.into_iter().map(probe).collect();
    let rows: Vec<(&ProbeReport, Decision)> = reports
        .iter()
        .filter(|r| backends.contains(&r.backend))
        .map(|r| {
            let others: Vec<ProbeReport> = reports
                .iter()
                .filter(|o| o.backend != r.backend)
                .cloned()
                .collect();
            let d = match &policy {
                Ok(p) => decide_any(r, &others, p),
                Err(msg) => Decision::Fail(msg.clone()),
            };
            (r, d)
        })
        .collect();
    let failed = rows.iter().any(|(_, d)| matches!(d, Decision::Fail(_)));
    if json {
        print_json(&policy, &rows)?;
    } else {
        print_table(&policy, &rows);
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_json(
    policy: &Result<Policy, String>,
    rows: &[(&ProbeReport, Decision)],
) -> Result<(), String> {
    let backends: Vec<serde_json::Value> = rows
        .iter()
        .map(|(r, d)| {
            let mut v: serde_json::Value =
                serde_json::from_str(&r.to_json()).expect("a report is JSON");
            let (what, reason) = match d {
                Decision::Run => ("run", None),
                Decision::Skip(why) => ("skip", Some(why)),
                Decision::Fail(why) => ("fail", Some(why)),
            };
            v["decision"] = serde_json::json!({ "action": what, "reason": reason });
            v
        })
        .collect();
    let out = serde_json::json!({
        "require": match policy {
            Ok(p) => serde_json::json!(p.to_string()),
            Err(msg) => serde_json::json!({ "error": msg }),
        },
        "backends": backends,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
    );
    Ok(())
}

fn print_table(policy: &Result<Policy, String>, rows: &[(&ProbeReport, Decision)]) {
    let mut table: Vec<[String; 7]> =
        vec![["BACKEND", "#", "DEVICE", "API", "KIND", "DRIVER", "MEMORY"].map(String::from)];
    let mut notes = Vec::new();
    for (r, _) in rows {
        match r.outcome.devices() {
            Some(devices) => {
                for d in devices {
                    table.push([
                        r.backend.to_string(),
                        d.index.to_string(),
                        d.name.clone(),
                        d.api.clone(),
                        d.kind.to_string(),
                        d.driver.clone().unwrap_or_else(|| "-".into()),
                        d.memory_bytes.map_or_else(
                            || "-".into(),
                            |m| format!("{:.1} GiB", m as f64 / (1u64 << 30) as f64),
                        ),
                    ]);
                }
            }
            None => notes.push(format!("{r}")),
        }
    }
    let widths: Vec<usize> = (0..7)
        .map(|c| {
            table
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    // Only the header: no backend has a device, the notes below say why.
    let rows_to_print = if table.len() > 1 { &table[..] } else { &[] };
    for row in rows_to_print {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    for n in notes {
        println!("{n}");
    }
    println!();
    match policy {
        Ok(p) => println!("{REQUIRE_VAR}={p}:"),
        Err(msg) => println!("{msg}"),
    }
    for (r, d) in rows {
        let how = format!("probed in {} ms ({})", r.duration.as_millis(), r.source);
        match d {
            Decision::Run => println!("  {}: GPU tests run; {how}", r.backend),
            Decision::Skip(why) => println!("  {}: GPU tests skip: {why}; {how}", r.backend),
            Decision::Fail(why) => println!("  {}: GPU tests FAIL: {why}; {how}", r.backend),
        }
    }
}
