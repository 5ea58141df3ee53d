//! `hold`, and the permit `hold` and `run` ask for.

use std::io::{Read, Write};
use std::process::ExitCode;

use crate::args::Args;

/// The permit `hold` and `run` ask for: `--exclusive`, `--units K`, `--memory SIZE` (both
/// of the last two: the larger counts), or one unit; on `--gpus K` GPUs (each with those
/// units), or one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ask {
    exclusive: bool,
    units: Option<usize>,
    memory: Option<u64>,
    gpus: Option<usize>,
}

impl Ask {
    /// Reads `--exclusive`, `--units K`, `--memory SIZE` and `--gpus K`.
    ///
    /// # Errors
    ///
    /// A value that is not a whole number of units or a size (a percentage is a budget, not a
    /// request), and `--exclusive` with either of the others.
    pub(crate) fn from_args(args: &Args) -> Result<Ask, String> {
        use gpu_test_permit::__private::config::{parse_concurrency, parse_memory};
        use gpu_test_permit::config::{MemoryBudget, ValueError};
        let units = args.parsed_value("--units", |v| parse_concurrency(&v.into()))?;
        let memory = args.parsed_value("--memory", |v| match parse_memory(&v.into()) {
            Ok(MemoryBudget::Bytes(b)) => Ok(b),
            // A budget may be a share of the device memory; a request is an amount.
            Ok(MemoryBudget::Percent(_)) => Err(
                "is a percentage; give the memory the command needs as a size like 24GiB, \
                 80GB or 512MiB (only the budget, GPU_TEST_PERMIT_GPU_MEMORY, may be a \
                 percentage)"
                    .to_string(),
            ),
            Err(ValueError::MemoryOutOfRange) => Err("must be a size above zero".to_string()),
            Err(ValueError::NotMemory) => {
                Err("is not a size like 24GiB, 80GB or 512MiB".to_string())
            }
            Err(e) => Err(e.to_string()),
        })?;
        let gpus = args.parsed_value("--gpus", |v| parse_concurrency(&v.into()))?;
        let exclusive = args.flag("--exclusive");
        if exclusive && (units.is_some() || memory.is_some() || gpus.is_some()) {
            let other = if units.is_some() {
                "--units"
            } else if memory.is_some() {
                "--memory"
            } else {
                "--gpus"
            };
            return Err(args.error(format_args!(
                "--exclusive takes every unit; give it or {other}, not both"
            )));
        }
        Ok(Ask {
            exclusive,
            units: units.map(|u| u.get()),
            memory,
            gpus: gpus.map(|g| g.get()),
        })
    }
}

/// Takes the permit `ask` describes from the global pool, waiting up to its deadline.
pub(crate) fn take(ask: Ask) -> Result<gpu_test_permit::GpuTestPermit, String> {
    let pool = gpu_test_permit::PermitPool::global();
    let mut request = pool.request();
    if ask.exclusive {
        request = request.exclusive();
    }
    if let Some(units) = ask.units {
        request = request.units(units);
    }
    if let Some(bytes) = ask.memory {
        request = request.memory(bytes);
    }
    if let Some(gpus) = ask.gpus {
        request = request.gpus(gpus);
    }
    request
        .acquire_for(pool.timeout())
        .map_err(|e| e.to_string())
}

pub(crate) fn hold(args: &Args) -> Result<ExitCode, String> {
    let ask = Ask::from_args(args)?;
    let duration = args.parsed_value("--for", |v| {
        gpu_test_permit::__private::config::parse_duration(&v.into())
    })?;
    if duration.is_some() {
        // A hold of a set length is what was asked for, not a hang: it ends on time whatever
        // the hold deadline says. (Held until standard input closes, it is watched as a test.)
        let _ = gpu_test_permit::on_hold_timeout(|_| {});
    }
    let permit = take(ask)?;
    let slots: Vec<String> = permit.slots().iter().map(|s| s.to_string()).collect();
    // On a pool of several GPUs, which of them.
    let devices = match gpu_test_permit::PermitPool::global().gpus() {
        1 => String::new(),
        _ => {
            let d: Vec<String> = permit.devices().iter().map(|d| d.to_string()).collect();
            format!(" devices={}", d.join(","))
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "held pid={} units={} slots={}{devices}",
        std::process::id(),
        permit.units(),
        slots.join(",")
    )
    .and_then(|()| out.flush())
    .map_err(|e| e.to_string())?;
    drop(out);
    match duration {
        Some(d) => std::thread::sleep(d),
        None => {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        }
    }
    drop(permit);
    println!("released");
    Ok(ExitCode::SUCCESS)
}
