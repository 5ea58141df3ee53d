//! The variables `cargo nextest` sets for each test process.

use std::ffi::OsString;

use super::values::{ConfigWarning, warning};

/// The variables `cargo nextest` sets for each test process.
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
}

impl NextestEnv {
    pub(super) fn from_lookup(
        lookup: &impl Fn(&str) -> Option<OsString>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Option<NextestEnv> {
        let text = |name: &str| lookup(name).map(|v| v.to_string_lossy().into_owned());
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
                    warnings.push(warning(var, &raw, "is not a slot number", "no slot"));
                    None
                }
            }
        };
        let group_slot = slot("NEXTEST_TEST_GROUP_SLOT");
        let global_slot = slot("NEXTEST_TEST_GLOBAL_SLOT");
        Some(NextestEnv {
            process_per_test: mode.as_deref() == Some("process-per-test"),
            run_id,
            test_group: text("NEXTEST_TEST_GROUP").filter(|g| g != "@global" && !g.is_empty()),
            group_slot,
            global_slot,
            test_name: text("NEXTEST_TEST_NAME").filter(|n| !n.is_empty()),
        })
    }
}
