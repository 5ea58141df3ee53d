//! `config`: the configuration this environment gives, and the warnings a nextest run recorded.

use std::process::ExitCode;

use gpu_test_permit::config::Config;
use gpu_test_permit::probe::ProbeMode;

use crate::args::Args;
use crate::report;

/// `config`: the configuration of this environment and the warnings of the last nextest run.
pub(crate) fn config(_: &Args) -> Result<ExitCode, String> {
    let cfg = Config::from_env();
    let or_off = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map_or_else(|| "off".to_string(), |p| p.display().to_string())
    };
    use gpu_test_permit::config as c;
    let concurrency = if cfg.auto_concurrency {
        match cfg.slot_dir_path() {
            Ok(dir) => format!("auto; a run starting now: {}", auto_now(&cfg, &dir)),
            Err(_) => "auto (no usable slot directory: the seed, 2)".to_string(),
        }
    } else {
        cfg.concurrency.to_string()
    };
    // N comes from the crate's own name when it is set, whatever the other says.
    let concurrency = if cfg.concurrency_var == c::CONCURRENCY_ALIAS_VAR {
        format!("{concurrency} (wins over {})", c::CONCURRENCY_VAR)
    } else {
        concurrency
    };
    let rows = [
        (cfg.concurrency_var, concurrency),
        (c::MAX_CONCURRENCY_VAR, cfg.max_concurrency.to_string()),
        (
            c::GPUS_VAR,
            match (&cfg.gpu_groups, &cfg.gpu_list) {
                (Some(groups), Some(ids)) => {
                    let mut at = ids.iter();
                    let named: Vec<String> = groups
                        .iter()
                        .map(|g| {
                            let g: Vec<String> = g
                                .iter()
                                .filter_map(|_| at.next())
                                .map(|id| id.to_string())
                                .collect();
                            g.join(",")
                        })
                        .collect();
                    format!(
                        "{} in groups {} (a permit for several GPUs stays within one)",
                        ids.len(),
                        named.join(";")
                    )
                }
                (None, Some(ids)) => {
                    let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
                    format!("{} ({})", ids.len(), ids.join(","))
                }
                _ => cfg.gpus.map_or_else(|| "auto".into(), |g| g.to_string()),
            },
        ),
        (
            c::PLACEMENT_VAR,
            match cfg.placement {
                c::Placement::BestFit => "best-fit (the GPUs with the fewest free units that fit)",
                c::Placement::Spread => "spread (the first GPUs that fit)",
            }
            .to_string(),
        ),
        (
            c::BACKFILL_VAR,
            if cfg.backfill {
                "on (a request behind a waiting head takes free units past it where the hold \
                 times on record say that does not delay the head)"
            } else {
                "off (first come, first served)"
            }
            .to_string(),
        ),
        (
            c::GPU_MEMORY_VAR,
            cfg.gpu_memory.map_or_else(
                || "unset (the CUDA probe's device memory on discrete GPUs, else none)".into(),
                |m| m.to_string(),
            ),
        ),
        (
            c::WEIGHTS_VAR,
            match cfg.weights {
                c::Weights::Declared => {
                    "declared (a test that declares nothing takes one unit)".to_string()
                }
                c::Weights::Learned => format!(
                    "learned (a test that declares nothing takes the units of its measured peak \
                     memory + {}%, with a memory budget)",
                    c::LEARNED_MARGIN_PERCENT
                ),
            },
        ),
        (c::TIMEOUT_VAR, format!("{:?}", cfg.timeout)),
        (
            c::DIR_VAR,
            cfg.slot_dir_path()
                .map_or_else(|e| format!("invalid: {e}"), |p| p.display().to_string()),
        ),
        (
            c::REQUIRE_VAR,
            cfg.require
                .as_ref()
                .map_or_else(|e| format!("invalid: {e}"), |p| p.to_string()),
        ),
        (c::PROBE_TIMEOUT_VAR, format!("{:?}", cfg.probe_timeout)),
        (
            c::PROBE_VAR,
            match cfg.probe_mode {
                ProbeMode::Child => "child",
                ProbeMode::InProcess => "in-process",
            }
            .to_string(),
        ),
        (
            c::STATE_VAR,
            cfg.slot_dir_path().map_or_else(
                |_| "(no usable slot directory)".to_string(),
                |dir| cfg.state_dir_for(&dir).display().to_string(),
            ),
        ),
        (c::TRACE_VAR, or_off(&cfg.trace)),
        (c::SKIP_LOG_VAR, or_off(&cfg.skip_log)),
        (
            c::RETRY_VAR,
            match cfg.retry {
                c::RetryMode::Alone => "alone (a nextest retry holds every unit)",
                c::RetryMode::Same => "same (a nextest retry holds what it asks for)",
            }
            .to_string(),
        ),
        (c::STRICT_VAR, (cfg.strict as u8).to_string()),
        (
            c::INHERITED_VAR,
            match &cfg.inherited {
                None => "unset".to_string(),
                Some(Ok(p)) => format!(
                    "{} permit on slot(s) {} of {}",
                    if p.exclusive { "exclusive" } else { "shared" },
                    p.slots
                        .iter()
                        .map(|s| s.index.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    p.dir.display()
                ),
                Some(Err(e)) => format!("invalid: {e}"),
            },
        ),
    ];
    println!("configuration from this environment:");
    for (var, value) in rows {
        println!("  {var:<32} {value}");
    }
    if cfg.warnings.is_empty() {
        println!("warnings: none");
    } else {
        println!("warnings:");
        for w in &cfg.warnings {
            println!("  {w}");
        }
    }
    let Ok(dir) = cfg.slot_dir_path() else {
        return Ok(ExitCode::SUCCESS);
    };
    let file = dir.join(c::WARNINGS_FILE);
    match gpu_test_permit::__private::config::recorded_warnings(&dir) {
        Ok(None) => println!(
            "no cargo nextest run recorded configuration warnings in {}",
            file.display()
        ),
        Ok(Some(r)) => {
            println!(
                "configuration warnings of cargo nextest run {} (recorded {} ago in {}):",
                r.run_id,
                report::ago(r.recorded_unix_ms),
                file.display()
            );
            for line in &r.lines {
                println!("  {line}");
            }
        }
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    }
    // The hint on adding a test group, said once per run on standard error, which nextest
    // shows for failing tests only.
    match gpu_test_permit_cli::records::recorded_hint(&dir) {
        Ok(Some(hint)) => println!(
            "outside a test group (recorded {} ago): {}",
            report::ago(hint.recorded_unix_ms),
            report::printable(&hint.line())
        ),
        Ok(None) => println!("no cargo nextest run recorded GPU tests outside a test group"),
        Err(e) => println!("cannot read the record of GPU tests outside a test group: {e}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// What `auto` would choose for a run starting now in slot directory `dir`, in one line.
pub(crate) fn auto_now(cfg: &Config, dir: &std::path::Path) -> String {
    let gpus = cfg.gpus.map(|g| g.get()).unwrap_or_else(|| {
        gpu_test_permit::__private::tune::read_history(dir)
            .last()
            .map_or(1, |e| e.gpus)
    });
    gpu_test_permit::__private::tune::choose_now(dir, gpus, None).to_string()
}
