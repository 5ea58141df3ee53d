//! What a test binary's output says about its tests, and what that makes of the way its
//! process ended: the verdict `gpu-test-permit watch` gives when it runs a test binary as
//! cargo's target runner (`cargo test`: one process, many tests; `cargo nextest run`: a
//! process a test).
//!
//! GPU test binaries lose their verdicts after (or around) their tests: a driver's teardown
//! that segfaults or aborts after every test passed, a thread-local destructor that spins at
//! exit, a crash in one test that costs a `cargo test` binary the results of every test still
//! running. No test runner tells "the tests failed" from "the process failed after the tests".
//! [`Progress`] reads libtest's output as it passes through (the pretty and the terse, `-q`,
//! formats), and [`judge`] tells them apart:
//!
//! | the output says | the process | verdict |
//! |---|---|---|
//! | not a libtest run (no `running N tests`) | any | [`Verdict::NotATestRun`]: as it ended |
//! | tests without a result | died by a signal, or exited non-zero | [`Verdict::Crashed`] (whether a test failed or not) |
//! | a test failed | any other way | [`Verdict::Failed`]: as it ended |
//! | every selected test has its result, none failed | exited 0 | [`Verdict::Passed`] |
//! | every selected test has its result, none failed | died by a signal, or exited non-zero | [`Verdict::Teardown`] |
//!
//! ```
//! use gpu_test_permit_cli::verdict::{Ended, Progress, Verdict, judge};
//!
//! let mut p = Progress::default();
//! for line in ["running 2 tests", "test a ... ok", "test b ... ok", "",
//!              "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"] {
//!     p.line(line);
//! }
//! // Every test passed, then the process died of SIGSEGV: a teardown fault, not a failure.
//! assert!(matches!(judge(&p, Ended::Signal(11)), Verdict::Teardown { .. }));
//! assert_eq!(judge(&p, Ended::Code(0)), Verdict::Passed);
//! ```

/// How a test process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

impl Ended {
    /// Whether it exited 0.
    pub fn success(self) -> bool {
        self == Ended::Code(0)
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Code(code) => write!(f, "exit code {code}"),
            Ended::Signal(sig) => match signal_name(*sig) {
                Some(name) => write!(f, "{name}"),
                None => write!(f, "signal {sig}"),
            },
        }
    }
}

/// The name of signal `sig` (Linux numbering), for the signals that end a process.
pub fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => return None,
    })
}

/// A test's result, as libtest prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `ok` (or a benchmark's `bench:` line).
    Passed,
    /// `FAILED`.
    Failed,
    /// `ignored`.
    Ignored,
}

/// The `test result:` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// `ok` or `FAILED`.
    pub ok: bool,
    /// Tests passed.
    pub passed: usize,
    /// Tests failed.
    pub failed: usize,
}

/// The longest line that is read for results: libtest's own lines are short, and a test's
/// output is passed through whole whatever its length, only not read.
const LONGEST_READ: usize = 64 << 10;

/// What a test binary's standard output has said so far, fed one line at a time.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// The tests it said it runs (`running N tests`), summed over every such line.
    selected: Option<usize>,
    /// The named results, in order.
    results: Vec<(String, Outcome)>,
    /// Results the terse format (`-q`) gave, which name no test.
    terse: usize,
    /// Whether a terse result was a failure.
    terse_failed: bool,
    /// A test whose `test NAME ... ` was printed without its result yet (one test thread).
    pending: Option<String>,
    summary: Option<Summary>,
}

impl Progress {
    /// Reads one line of the output (without its newline).
    pub fn line(&mut self, line: &str) {
        if line.len() > LONGEST_READ {
            return;
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(n) = running(line) {
            self.selected = Some(self.selected.unwrap_or(0).saturating_add(n));
            return;
        }
        if let Some(rest) = line.strip_prefix("test result: ") {
            self.summary = summary(rest).or(self.summary);
            return;
        }
        if let Some(rest) = line.strip_prefix("test ")
            && let Some((name, result)) = rest.split_once(" ... ")
            && !name.is_empty()
            && !name.contains(char::is_whitespace)
        {
            match outcome(result) {
                Some(o) => self.results.push((name.to_string(), o)),
                // Printed at its start: its result comes on a later line.
                None if result.trim().is_empty() => self.pending = Some(name.to_string()),
                None => {}
            }
            return;
        }
        if let Some(name) = &self.pending
            && let Some(o) = outcome(line.trim())
        {
            self.results.push((name.clone(), o));
            self.pending = None;
            return;
        }
        if self.selected.is_some() && self.summary.is_none() {
            self.terse_line(line);
        }
    }

    /// A line of the terse format's results: `..F.i` and, every so many tests, ` 88/100`.
    fn terse_line(&mut self, line: &str) {
        let (marks, count) = match line.split_once(' ') {
            Some((marks, count)) => (marks, Some(count)),
            None => (line, None),
        };
        if marks.is_empty() || !marks.bytes().all(|b| matches!(b, b'.' | b'F' | b'i')) {
            return;
        }
        if let Some(count) = count {
            let Some((done, of)) = count.trim().split_once('/') else {
                return;
            };
            if done.parse::<usize>().is_err() || of.parse::<usize>().is_err() {
                return;
            }
        }
        self.terse = self.terse.saturating_add(marks.len());
        self.terse_failed |= marks.contains('F');
    }

    /// The tests it said it runs, where it said so.
    pub fn selected(&self) -> Option<usize> {
        self.selected
    }

    /// The results it has given, named or not.
    pub fn results(&self) -> usize {
        self.results.len().saturating_add(self.terse)
    }

    /// The tests it named with a result.
    pub fn named(&self) -> &[(String, Outcome)] {
        &self.results
    }

    /// The `test result:` line, once printed.
    pub fn summary(&self) -> Option<Summary> {
        self.summary
    }

    /// Whether every selected test has its result: the summary is printed, or as many results
    /// as tests selected.
    pub fn complete(&self) -> bool {
        self.summary.is_some() || self.selected.is_some_and(|n| self.results() >= n)
    }

    /// Whether a test failed.
    pub fn any_failed(&self) -> bool {
        self.terse_failed
            || self.summary.is_some_and(|s| !s.ok || s.failed > 0)
            || self.results.iter().any(|(_, o)| *o == Outcome::Failed)
    }
}

/// `N` of `running N tests` (or `running 1 test`).
fn running(line: &str) -> Option<usize> {
    let rest = line.strip_prefix("running ")?;
    let (n, word) = rest.split_once(' ')?;
    matches!(word, "test" | "tests").then_some(())?;
    n.parse().ok()
}

/// A result as libtest prints it after ` ... `.
fn outcome(result: &str) -> Option<Outcome> {
    if result == "ok" || result.starts_with("bench:") {
        return Some(Outcome::Passed);
    }
    if result == "FAILED" || result.starts_with("FAILED ") {
        return Some(Outcome::Failed);
    }
    if result == "ignored" || result.starts_with("ignored,") {
        return Some(Outcome::Ignored);
    }
    None
}

/// What follows `test result: `: `ok. 3 passed; 0 failed; ...` or `FAILED. ...`.
fn summary(rest: &str) -> Option<Summary> {
    let (state, counts) = rest.split_once(". ")?;
    let ok = match state {
        "ok" => true,
        "FAILED" => false,
        _ => return None,
    };
    let mut passed = None;
    let mut failed = None;
    for part in counts.split(';') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<usize>() else { continue };
        match what {
            "passed" => passed = Some(n),
            "failed" => failed = Some(n),
            _ => {}
        }
    }
    Some(Summary {
        ok,
        passed: passed?,
        failed: failed?,
    })
}

/// What the output and the end of a test process make of its run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not a libtest run (a custom harness, `--list`, bad arguments, a doctest's program):
    /// judged by how it ended, as without the runner.
    NotATestRun,
    /// Every selected test has its result, none failed, and the process exited 0.
    Passed,
    /// A test failed: judged as the tests were, whatever the process did after.
    Failed,
    /// Every selected test has its result and none failed, but the process died by a signal
    /// or exited non-zero afterwards: a fault of its teardown, not of its tests.
    Teardown {
        /// How the process ended.
        ended: Ended,
    },
    /// The process died (or exited non-zero) while tests still ran: those named in the
    /// output have results, the others none.
    Crashed {
        /// How the process ended.
        ended: Ended,
        /// Tests it said it runs.
        selected: usize,
        /// Results it gave.
        results: usize,
        /// Whether one of those results was a failure.
        failed: bool,
    },
}

/// The verdict of a test process whose output said `p` and that ended as `ended`.
pub fn judge(p: &Progress, ended: Ended) -> Verdict {
    let Some(selected) = p.selected() else {
        return Verdict::NotATestRun;
    };
    if !p.complete() && !ended.success() {
        return Verdict::Crashed {
            ended,
            selected,
            results: p.results(),
            failed: p.any_failed(),
        };
    }
    if p.any_failed() {
        return Verdict::Failed;
    }
    if p.complete() && !ended.success() {
        return Verdict::Teardown { ended };
    }
    // Exited 0, with every result or without (a harness that printed fewer than it said it
    // would run: its business).
    Verdict::Passed
}

/// The arguments of a libtest binary's command line that select tests (filters) apart from
/// those that say how to run them, so that a test can be run again alone: the options kept,
/// the filters dropped.
pub fn options_without_filters(args: &[String]) -> Vec<String> {
    /// libtest's options that take a value as the next argument.
    const TAKES_VALUE: [&str; 7] = [
        "--test-threads",
        "--skip",
        "--logfile",
        "--format",
        "--color",
        "-Z",
        "--shuffle-seed",
    ];
    let mut kept = Vec::new();
    let mut args = args.iter();
    while let Some(a) = args.next() {
        if a == "--exact" || a == "--test-threads" || a.starts_with("--test-threads=") {
            // `--exact` is added back for the one test; one test needs one thread.
            if a == "--test-threads" {
                args.next();
            }
            continue;
        }
        if a.starts_with('-') {
            kept.push(a.clone());
            if TAKES_VALUE.contains(&a.as_str())
                && let Some(v) = args.next()
            {
                kept.push(v.clone());
            }
            continue;
        }
        // A positional argument: a filter.
    }
    kept
}

/// The names of the tests a libtest binary's `--list` output lists (`NAME: test`).
pub fn listed_tests(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in list.lines() {
        if let Some(name) = line.strip_suffix(": test") {
            out.push(name.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(lines: &[&str]) -> Progress {
        let mut p = Progress::default();
        for l in lines {
            p.line(l);
        }
        p
    }

    const PASSED: [&str; 6] = [
        "",
        "running 2 tests",
        "test a::one ... ok",
        "test a::two ... ignored, needs a GPU",
        "",
        "test result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s",
    ];

    #[test]
    fn a_passing_run_that_crashes_after_is_a_teardown_fault() {
        let p = fed(&PASSED);
        assert_eq!(p.selected(), Some(2));
        assert_eq!(p.results(), 2);
        assert!(p.complete());
        assert_eq!(judge(&p, Ended::Code(0)), Verdict::Passed);
        for ended in [
            Ended::Signal(11),
            Ended::Signal(6),
            Ended::Code(101),
            Ended::Code(1),
        ] {
            assert_eq!(judge(&p, ended), Verdict::Teardown { ended });
        }
        // Every result but no summary line yet (a thread-local destructor at the last test
        // thread's exit): complete all the same.
        let p = fed(&PASSED[..4]);
        assert!(p.complete() && p.summary().is_none());
        assert_eq!(
            judge(&p, Ended::Signal(11)),
            Verdict::Teardown {
                ended: Ended::Signal(11)
            }
        );
    }

    #[test]
    fn a_failed_test_stays_a_failure_however_the_process_ends() {
        let p = fed(&[
            "running 2 tests",
            "test a ... ok",
            "test b ... FAILED",
            "failures:",
            "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        ]);
        for ended in [Ended::Code(101), Ended::Signal(11), Ended::Code(0)] {
            assert_eq!(judge(&p, ended), Verdict::Failed);
        }
        // A failure the summary alone tells (the result lines were lost to the test's own
        // output).
        let p = fed(&[
            "running 1 test",
            "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        ]);
        assert_eq!(judge(&p, Ended::Signal(6)), Verdict::Failed);
        // A failure, then a crash before the others had their results: a crash that says a
        // test failed.
        let p = fed(&["running 3 tests", "test a ... FAILED"]);
        assert_eq!(
            judge(&p, Ended::Signal(11)),
            Verdict::Crashed {
                ended: Ended::Signal(11),
                selected: 3,
                results: 1,
                failed: true
            }
        );
    }

    #[test]
    fn a_crash_while_tests_run_says_how_many_had_no_result() {
        let p = fed(&["running 3 tests", "test a ... ok"]);
        assert!(!p.complete());
        assert_eq!(
            judge(&p, Ended::Signal(11)),
            Verdict::Crashed {
                ended: Ended::Signal(11),
                selected: 3,
                results: 1,
                failed: false
            }
        );
        assert_eq!(p.named(), &[("a".to_string(), Outcome::Passed)]);
    }

    #[test]
    fn the_terse_format_counts_results_that_name_no_test() {
        let p = fed(&["", "running 5 tests", "..i.."]);
        assert_eq!(p.results(), 5);
        assert!(p.complete() && !p.any_failed());
        let p = fed(&["running 200 tests", &".".repeat(88), " 88/200"]);
        // ` 88/200` alone is no marks line; the marks before it are counted.
        assert_eq!(p.results(), 88);
        let p = fed(&["running 100 tests", &format!("{} 88/100", ".".repeat(88))]);
        assert_eq!(p.results(), 88);
        let p = fed(&["running 3 tests", ".F."]);
        assert!(p.any_failed() && p.complete());
        assert_eq!(judge(&p, Ended::Code(101)), Verdict::Failed);
        let p = fed(&["running 3 tests", ".."]);
        assert!(matches!(
            judge(&p, Ended::Signal(6)),
            Verdict::Crashed { results: 2, .. }
        ));
    }

    #[test]
    fn a_result_printed_apart_from_its_name_is_read() {
        // One test thread, `--nocapture`: the name first, the test's output, then the result.
        let p = fed(&[
            "running 1 test",
            "test gpu::matmul ... ",
            "some output of the test",
            "ok",
        ]);
        assert_eq!(p.named(), &[("gpu::matmul".to_string(), Outcome::Passed)]);
        assert!(p.complete());
    }

    #[test]
    fn what_is_not_a_libtest_run_is_judged_by_its_end() {
        for lines in [
            &["hello"][..],
            &["a: test", "b: test", "", "2 tests, 0 benchmarks"][..],
            &[][..],
        ] {
            let p = fed(lines);
            assert_eq!(judge(&p, Ended::Signal(11)), Verdict::NotATestRun);
        }
    }

    #[test]
    fn garbage_and_huge_lines_change_nothing() {
        let mut p = fed(&PASSED);
        let before = format!("{p:?}");
        for line in [
            "test ",
            "test  ...  ",
            "running x tests",
            "running 99999999999999999999999 tests",
            "test result: maybe",
            "test result: ok. many passed",
            &"test x ... ok".repeat(10_000),
        ] {
            p.line(line);
        }
        assert_eq!(format!("{p:?}"), before);
    }

    #[test]
    fn a_rerun_keeps_the_options_and_drops_the_filters() {
        let args: Vec<String> = [
            "gpu",
            "--nocapture",
            "--test-threads",
            "8",
            "--skip",
            "slow",
            "--exact",
            "--include-ignored",
            "--color=always",
            "matmul",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            options_without_filters(&args),
            [
                "--nocapture",
                "--skip",
                "slow",
                "--include-ignored",
                "--color=always"
            ]
        );
        assert_eq!(
            listed_tests("a::b: test\nc: test\nd: benchmark\n\n2 tests, 1 benchmark\n"),
            ["a::b", "c"]
        );
    }
}
