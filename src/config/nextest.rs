//! The variables `cargo nextest` sets for each test process.

use super::read::Lookup;
use super::values::{ConfigWarning, warning};

/// The variables `cargo nextest` sets for each test process.
///
/// ```
/// use gpu_test_permit::config::Config;
///
/// let cfg = Config::from_lookup(|name| match name {
///     "NEXTEST_EXECUTION_MODE" => Some("process-per-test".into()),
///     "NEXTEST_RUN_ID" => Some("0b5c-run".into()),
///     "NEXTEST_TEST_GROUP" => Some("@tool:gpu-test-permit:gpu".into()),
///     "NEXTEST_TEST_GROUP_SLOT" => Some("1".into()),
///     "NEXTEST_ATTEMPT" => Some("2".into()),
///     _ => None,
/// });
/// let nextest = cfg.nextest.expect("under nextest");
/// assert!(nextest.process_per_test);
/// assert_eq!(nextest.group_slot, Some(1));
/// assert!(nextest.is_retry());
/// assert!(Config::from_lookup(|_| None).nextest.is_none());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NextestEnv {
    /// `NEXTEST_EXECUTION_MODE` is `process-per-test` (every test is a process of its own).
    pub process_per_test: bool,
    /// `NEXTEST_RUN_ID`: the same for every process of one run.
    pub run_id: Option<String>,
    /// `NEXTEST_TEST_GROUP`, or `None` for `@global` (the test is in no group).
    pub test_group: Option<String>,
    /// `NEXTEST_TEST_GROUP_SLOT`: this test's slot within its group (0-based), or `None`.
    pub group_slot: Option<u64>,
    /// `NEXTEST_TEST_GLOBAL_SLOT`: this test's slot among all running tests.
    pub global_slot: Option<u64>,
    /// `NEXTEST_TEST_NAME` (recent nextest versions).
    pub test_name: Option<String>,
    /// `NEXTEST_BINARY_ID` (recent nextest versions): the test binary, as the JUnit report's
    /// `<testsuite name>` and `<testcase classname>` name it.
    pub binary_id: Option<String>,
    /// `NEXTEST_ATTEMPT`: which attempt of the test this process is, 1 for the first; above 1
    /// the test failed before and nextest retries it (`--retries`; nextest 0.9.138 and later).
    pub attempt: Option<u32>,
    /// `NEXTEST_TOTAL_ATTEMPTS`: the attempts the test has in all (1 + retries).
    pub total_attempts: Option<u32>,
}

impl NextestEnv {
    /// Whether this process reruns a test that failed before: [`attempt`](Self::attempt) is
    /// above 1.
    ///
    /// ```
    /// use gpu_test_permit::config::Config;
    ///
    /// let retry = Config::from_lookup(|name| match name {
    ///     "NEXTEST_EXECUTION_MODE" => Some("process-per-test".into()),
    ///     "NEXTEST_ATTEMPT" => Some("2".into()),
    ///     _ => None,
    /// });
    /// assert!(retry.nextest.is_some_and(|n| n.is_retry()));
    /// ```
    pub fn is_retry(&self) -> bool {
        matches!(self.attempt, Some(a) if a > 1)
    }
}

impl NextestEnv {
    pub(super) fn from_lookup(
        lookup: &Lookup<'_>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Option<NextestEnv> {
        let text = |name: &str| -> Option<String> {
            let value = lookup(name)?;
            Some(value.to_string_lossy().into_owned())
        };
        let mode = text("NEXTEST_EXECUTION_MODE");
        let run_id = text("NEXTEST_RUN_ID");
        if mode.is_none() && run_id.is_none() {
            return None;
        }
        let mut slot = |var: &'static str| -> Option<u64> {
            let raw = lookup(var)?;
            let s = raw.to_string_lossy();
            let s = s.trim();
            if s == "none" {
                return None;
            }
            match s.parse() {
                Ok(n) => Some(n),
                Err(_) => {
                    warnings.push(warning(var, &raw, &"is not a slot number", &"no slot"));
                    None
                }
            }
        };
        let group_slot = slot("NEXTEST_TEST_GROUP_SLOT");
        let global_slot = slot("NEXTEST_TEST_GLOBAL_SLOT");
        let mut count = |var: &'static str| -> Option<u32> {
            let raw = lookup(var)?;
            match raw.to_string_lossy().trim().parse() {
                Ok(n) if n >= 1 => Some(n),
                _ => {
                    let problem = "is not an attempt number";
                    warnings.push(warning(var, &raw, &problem, &"attempt 1"));
                    None
                }
            }
        };
        let attempt = count("NEXTEST_ATTEMPT");
        let total_attempts = count("NEXTEST_TOTAL_ATTEMPTS");
        let test_group = match text("NEXTEST_TEST_GROUP") {
            Some(g) if g != "@global" && !g.is_empty() => Some(g),
            _ => None,
        };
        Some(NextestEnv {
            process_per_test: mode.as_deref() == Some("process-per-test"),
            run_id,
            test_group,
            group_slot,
            global_slot,
            test_name: non_empty(text("NEXTEST_TEST_NAME")),
            binary_id: non_empty(text("NEXTEST_BINARY_ID")),
            attempt,
            total_attempts,
        })
    }
}

/// `text`, unless it is empty.
fn non_empty(text: Option<String>) -> Option<String> {
    match text {
        Some(t) if t.is_empty() => None,
        t => t,
    }
}
