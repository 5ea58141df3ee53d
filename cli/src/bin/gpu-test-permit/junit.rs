//! `junit`: the skips and the verdicts of a nextest run written into its JUnit report.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gpu_test_permit::__private::runs::{RunRecords, read_run, summarize};
use gpu_test_permit::config::{Config, REQUIRE_VAR};
use gpu_test_permit::probe::Backend;
use gpu_test_permit_cli::junit::{Left, Marked, Skip, Verdict, mark, mark_skipped, report_run_id};
use gpu_test_permit_cli::records::last_run;

use crate::args::Args;
use crate::report::{printable, printable_path};

/// The most tests a note lists by name.
const LISTED: usize = 10;

/// `junit FILE [-o OUT] [--fail-on-skip] [--run-id ID] [--dir DIR]`.
pub(crate) fn main(args: &Args) -> Result<ExitCode, String> {
    // Exactly one operand: the parser checked. The file name need not be UTF-8.
    let report = Path::new(&args.operands()[0]);
    let output = args
        .value("-o")
        .map_or_else(|| report.to_path_buf(), PathBuf::from);
    let file = printable_path(report);
    let dir = args.slot_dir()?;
    let (records, taken) = find_run(args, report, &dir)?;
    let records = match records {
        Ok(records) => records,
        Err(why) => {
            let unchanged = unchanged(report, &output)?;
            eprintln!("gpu-test-permit: {file}: {why}; {unchanged}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let run = printable(&records.run_id);
    let summary = summarize(&records);
    let skips: Vec<Skip> = summary.skipped.iter().map(Skip::from).collect();
    let verdicts: Vec<Verdict> = summary.verdicts.iter().map(Verdict::from).collect();
    if skips.is_empty() && verdicts.is_empty() {
        let unchanged = unchanged(report, &output)?;
        if let Some(taken) = taken {
            eprintln!("{taken}");
        }
        eprintln!(
            "gpu-test-permit: {file}: run {run} recorded no skips and no verdicts; {unchanged}"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let marked = mark(report, &output, &skips, &verdicts).map_err(|e| e.to_string())?;
    // Said once the report is known to be one.
    if let Some(taken) = taken {
        eprintln!("{taken}");
    }
    let into = if output == report {
        String::new()
    } else {
        format!(", written to {}", printable_path(&output))
    };
    eprintln!(
        "gpu-test-permit: {file}: {} marked skipped, {} marked with a verdict (run {run}){into}",
        plural(marked.testcases, "test", "tests"),
        plural(marked.verdict_testcases, "test", "tests")
    );
    notes(&marked, &file, &run);
    verdict_notes(&marked, &file, &run);
    if records.truncated {
        eprintln!(
            "gpu-test-permit: {} is larger than the most that is read; its end was left out",
            printable_path(&records.path)
        );
    }
    exit_code(args, &marked)
}

/// The records of the report's run: the run of its `uuid`, else `--run-id`, else the last run
/// recorded in `dir`, with the line that says so. `Err` inside: why there are none, the report
/// to be left as it is.
type Found = (Result<RunRecords, String>, Option<String>);

fn find_run(args: &Args, report: &Path, dir: &Path) -> Result<Found, String> {
    let file = printable_path(report);
    let in_report = report_run_id(report).map_err(|e| e.to_string())?;
    let asked = args
        .value("--run-id")
        .map(|id| id.to_string_lossy().into_owned());
    let (id, how) = match (in_report, asked) {
        (Some(id), Some(asked)) if id != asked => {
            return Err(args.error(format_args!(
                "{file} is the report of run {} (its uuid), not of run {}: give no --run-id, \
                 or the report of that run",
                printable(&id),
                printable(&asked)
            )));
        }
        (Some(id), _) => (id, "the report's uuid"),
        (None, Some(asked)) => (asked, "--run-id"),
        (None, None) => {
            let Some(records) = last_run(dir).map_err(|e| e.to_string())? else {
                return Ok((
                    Err(format!(
                        "the report names no run (no uuid on <testsuites>) and no run is \
                         recorded in {}",
                        printable_path(dir)
                    )),
                    None,
                ));
            };
            let taken = format!(
                "gpu-test-permit: {file} names no run (no uuid on <testsuites>): taking the last \
                 run recorded in {}, {}",
                printable_path(dir),
                printable(&records.run_id)
            );
            return Ok((Ok(records), Some(taken)));
        }
    };
    let records = read_run(dir, &id).map_err(|e| e.to_string())?;
    let records = records.ok_or_else(|| {
        format!(
            "no records of run {} ({how}) in {}",
            printable(&id),
            printable_path(dir)
        )
    });
    Ok((records, None))
}

/// Checks the report when nothing is to be marked in it, and says what became of the output:
/// the report as it was, or with `-o`, a copy of it (a CI step that reads the output finds
/// it).
fn unchanged(report: &Path, output: &Path) -> Result<String, String> {
    let marked = mark_skipped(report, output, &[]).map_err(|e| e.to_string())?;
    Ok(if marked.written {
        format!("copied unchanged to {}", printable_path(output))
    } else {
        "left unchanged".to_string()
    })
}

/// Notes on the skips that marked nothing: tests the report does not have, and tests left as
/// the report says (failed, or already skipped).
fn notes(marked: &Marked, file: &str, run: &str) {
    if !marked.unmatched.is_empty() {
        let names: Vec<String> = marked
            .unmatched
            .iter()
            .map(|s| format!("{} {}", s.binary, s.test))
            .collect();
        let one = names.len() == 1;
        eprintln!(
            "gpu-test-permit: note: {} that the records of run {run} say skipped {} no \
             testcase of {file}: {}",
            plural(names.len() as u64, "test", "tests"),
            if one { "matches" } else { "match" },
            listed(&names)
        );
    }
    for (why, one, many) in [
        (
            Left::Failed,
            "failed in the report, and is left failed",
            "failed in the report, and are left failed",
        ),
        (
            Left::AlreadySkipped,
            "is already skipped in the report",
            "are already skipped in the report",
        ),
    ] {
        let names: Vec<String> = marked
            .left
            .iter()
            .filter(|(_, w)| *w == why)
            .map(|(s, _)| format!("{} {}", s.binary, s.test))
            .collect();
        if !names.is_empty() {
            let what = if names.len() == 1 { one } else { many };
            eprintln!(
                "gpu-test-permit: note: {} that the records say skipped {what}: {}",
                plural(names.len() as u64, "test", "tests"),
                listed(&names)
            );
        }
    }
}

/// Notes on the verdicts that marked nothing: tests the report does not have, and testcases
/// marked before.
fn verdict_notes(marked: &Marked, file: &str, run: &str) {
    let names = |verdicts: &mut dyn Iterator<Item = &Verdict>| {
        let mut names: Vec<String> = Vec::new();
        for v in verdicts {
            let name = format!("{} {}", v.binary, v.test);
            // A test's attempts are one test.
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    };
    let unmatched = names(&mut marked.verdicts_unmatched.iter());
    if !unmatched.is_empty() {
        let one = unmatched.len() == 1;
        eprintln!(
            "gpu-test-permit: note: {} that the records of run {run} give a verdict {} no \
             testcase of {file}: {}",
            plural(unmatched.len() as u64, "test", "tests"),
            if one { "matches" } else { "match" },
            listed(&unmatched)
        );
    }
    let left = names(&mut marked.verdicts_left.iter().map(|(v, _)| v));
    if !left.is_empty() {
        eprintln!(
            "gpu-test-permit: note: {} already {} a verdict in the report: {}",
            plural(left.len() as u64, "test", "tests"),
            if left.len() == 1 { "has" } else { "have" },
            listed(&left)
        );
    }
}

/// 1 with `--fail-on-skip` when a test was marked skipped; else 1 when a marked skip's backend
/// is required by `GPU_TEST_PERMIT_REQUIRE` here; else 0.
fn exit_code(args: &Args, marked: &Marked) -> Result<ExitCode, String> {
    if marked.testcases == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    if args.flag("--fail-on-skip") {
        eprintln!(
            "gpu-test-permit: {} skipped (--fail-on-skip)",
            plural(marked.testcases, "test", "tests")
        );
        return Ok(ExitCode::FAILURE);
    }
    let policy = Config::global()
        .require
        .as_ref()
        .map_err(|e| format!("{e}; cannot tell which skips fail the run"))?;
    let required: Vec<&Skip> = marked
        .marked
        .iter()
        .filter(|s| {
            policy.requires_any()
                || s.backend
                    .parse::<Backend>()
                    .is_ok_and(|b| policy.requires(b))
        })
        .collect();
    if required.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let names: Vec<String> = required
        .iter()
        .map(|s| format!("{} {} (backend={})", s.binary, s.test, s.backend))
        .collect();
    eprintln!(
        "gpu-test-permit: {} skipped for want of a backend that {REQUIRE_VAR}={policy} \
         requires: {}",
        plural(required.len() as u64, "test", "tests"),
        listed(&names)
    );
    Ok(ExitCode::FAILURE)
}

/// Up to [`LISTED`] names, made printable, and how many more.
fn listed(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(LISTED)
        .map(|n| printable(n))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED {
        text.push_str(&format!(" and {} more", names.len() - LISTED));
    }
    text
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
