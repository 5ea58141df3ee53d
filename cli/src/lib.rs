//! The analysis behind the `gpu-test-permit` command, apart from the library that test
//! processes link ([`gpu_test_permit`]): what runs read after the fact.
//!
//! - [`trace`]: what a trace of permits tells about choosing N — per-test waits and holds,
//!   utilisation, the what-if for other N and its model, the memory advice, a trace drawn as
//!   text;
//! - [`junit`]: the tests that skipped at run time marked skipped in nextest's JUnit report;
//! - [`nextest_config`]: the nextest tool config file, its GPU test group learned from the runs;
//! - [`watch_log`]: what a watched command's dynamic-loader logs say about GPU drivers;
//! - [`verdict`]: what a test binary's output and its end say: passed, failed, a teardown
//!   fault, a crash while tests ran;
//! - [`records`]: what the slot directory's records say: a nextest run's, the nextest hint's,
//!   and what the host's hang records say about N.
//!
//! A test suite depends on `gpu-test-permit` alone; this crate is for the command
//! (`cargo install gpu-test-permit-cli` installs `gpu-test-permit`) and for tools that read
//! what the runs recorded.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod junit;
pub mod nextest_config;
pub mod records;
pub mod trace;
pub mod verdict;
pub mod watch_log;
