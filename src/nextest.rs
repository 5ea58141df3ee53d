//! `cargo nextest` awareness.
//!
//! nextest runs every test in a process of its own, so an in-process semaphore limits nothing
//! there; this crate's host slots do. nextest's own answer to shared resources is a test group
//! with `max-threads`: with one, nextest never starts more GPU test processes than the cap, which
//! is better than starting them and letting them wait. When a test takes a permit under nextest
//! outside any group, the crate says how to add the group (`gpu-test-permit nextest-snippet`
//! prints the tool config file it names): in full once per
//! nextest run (the run is recorded in the slot directory), and in one line in the run's other
//! processes. Those lines go to standard error, which nextest shows for failing tests only
//! (or with `--success-output`): in a green run nobody sees them. So the record stays in the
//! slot directory, and `gpu-test-permit report` (for that run) and
//! `gpu-test-permit config` print it.
//! Inside a group, [`NextestEnv::group_slot`](crate::config::NextestEnv::group_slot) tells which
//! of the group's slots this test has, for choosing a device.
//!
//! ```
//! use gpu_test_permit::nextest;
//!
//! if let Some(run) = nextest::current() {
//!     println!("{} in nextest run {:?}", nextest::current_test_name(), run.run_id);
//! }
//! ```

use std::io::{self, Read, Seek, Write};
use std::path::Path;
use std::sync::Once;

use crate::config::Config;
pub use crate::config::NextestEnv;

/// The nextest tool config file that the hint and the command print, and the record of the
/// hint in the slot directory.
pub(crate) mod tool {
    use super::*;

    /// The tool name under which nextest reads this crate's configuration:
    /// `cargo nextest run --tool-config-file gpu-test-permit:/absolute/path.toml`. A tool config
    /// file adds to the suite's own `.config/nextest.toml` (whose settings win), where
    /// `--config-file` would replace it.
    #[cfg(any(test, feature = "__cli"))]
    pub const TOOL: &str = "gpu-test-permit";

    /// The test group of GPU tests in the snippets. nextest requires the names a tool config file
    /// defines to start with `@tool:<tool>:`; a test in the group sees it as `NEXTEST_TEST_GROUP`.
    pub const GROUP: &str = "@tool:gpu-test-permit:gpu";

    /// The filter the snippets put GPU tests in the group with: a guess by name, which misses
    /// every GPU test whose name lacks "gpu". `gpu-test-permit find-gpu-tests` finds them by
    /// running the suite with every GPU driver hidden, and prints the filter that names them.
    pub const GUESSED_FILTER: &str = "test(/gpu/)";

    /// The first lines of a tool config file the crate prints: how it is passed to nextest (under
    /// the name [`TOOL`]).
    pub const TOOL_FILE_HEADER: &str =
        "# gpu-test-permit.toml, a nextest tool config file: it adds to the suite's own
# .config/nextest.toml instead of replacing it (as --config-file would). Pass its absolute path:
#   cargo nextest run --tool-config-file gpu-test-permit:$PWD/gpu-test-permit.toml
";

    /// The test group and the override that puts GPU tests in it.
    fn group_block(max_threads: usize) -> String {
        format!(
            "[test-groups]
'{GROUP}' = {{ max-threads = {max_threads} }}

[[profile.default.overrides]]
# A guess by name: GPU tests whose names lack \"gpu\" run outside the group. For the filter
# that names them, run `gpu-test-permit find-gpu-tests` (it runs the tests once watching
# which load a GPU driver, once with every driver hidden, and lists the GPU tests).
filter = '{GUESSED_FILTER}'
test-group = '{GROUP}'
"
        )
    }

    /// A nextest tool config file that puts GPU tests in a test group of at most `max_threads` at
    /// a time, for `cargo nextest run --tool-config-file gpu-test-permit:/path/to/it.toml`. Keep
    /// `max_threads` equal to all the permits the host has: `REALIZAR_GPU_TEST_CONCURRENCY` times
    /// the GPUs. Its filter is a guess by name ([`GUESSED_FILTER`]): replace it with the one
    /// `gpu-test-permit find-gpu-tests` prints.
    ///
    /// # Example
    ///
    /// ```
    /// # #[cfg(feature = "__cli")] { // only the command's build has `__private`
    /// use gpu_test_permit::__private::nextest::{group_snippet, GROUP};
    ///
    /// let snippet = group_snippet(2);
    /// assert!(snippet.contains(&format!("'{GROUP}' = {{ max-threads = 2 }}")));
    /// # }
    /// ```
    pub fn group_snippet(max_threads: usize) -> String {
        format!("{TOOL_FILE_HEADER}{}", group_block(max_threads))
    }

    /// The hint printed when a test takes a permit under nextest outside a test group, or `None`
    /// when no hint is due.
    pub fn group_hint(env: &NextestEnv, concurrency: usize) -> Option<String> {
        if !env.process_per_test || env.test_group.is_some() {
            return None;
        }
        Some(format!(
            "gpu-test-permit: this test runs under cargo nextest outside a test group, so nextest \
         starts GPU test processes that then wait for a permit (and the wait counts toward \
         nextest's slow-timeout). Put GPU tests in a group of max-threads = {concurrency} \
         ({} x GPUs) with a nextest tool config file, for example:\n{}\
         (said once per nextest run; `gpu-test-permit nextest-snippet` prints it again)",
            Config::global().concurrency_var,
            group_snippet(concurrency)
        ))
    }

    /// The file in the slot directory that names the last nextest run whose hint was given: its
    /// run id, `max-threads <n>` and `at <unix ms>`, one a line.
    pub const HINT_FILE: &str = "nextest-hint.log";
}

pub(crate) use tool::{HINT_FILE, group_hint};

/// What nextest told this process, or `None` outside nextest.
///
/// ```
/// // Under `cargo nextest run` every test is a process of its own; under `cargo test`, `None`.
/// match gpu_test_permit::nextest::current() {
///     Some(n) if n.test_group.is_none() => println!("a GPU test outside a nextest test group"),
///     Some(n) => println!("in group {:?}, slot {:?}", n.test_group, n.group_slot),
///     None => println!("not under nextest"),
/// }
/// ```
pub fn current() -> Option<&'static NextestEnv> {
    Config::global().nextest.as_ref()
}

/// The running test's name as far as it can be known: nextest's `NEXTEST_TEST_NAME`, else the
/// current thread's name (libtest names each test's thread after the test), else the
/// executable's name.
///
/// ```
/// // libtest names each test's thread after the test.
/// std::thread::Builder::new()
///     .name("gpu::matmul".into())
///     .spawn(|| {
///         if gpu_test_permit::nextest::current().is_none() {
///             assert_eq!(gpu_test_permit::nextest::current_test_name(), "gpu::matmul");
///         }
///     })
///     .unwrap()
///     .join()
///     .unwrap();
/// ```
pub fn current_test_name() -> String {
    if let Some(n) = current()
        && let Some(name) = &n.test_name
    {
        return name.clone();
    }
    // The executable's name does not change: found once.
    static EXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => once(&EXE, exe_name).clone(),
    }
}

/// The executable's file name; `?` where it cannot be told.
fn exe_name() -> String {
    if let Ok(p) = std::env::current_exe()
        && let Some(f) = p.file_name()
    {
        return f.to_string_lossy().into_owned();
    }
    "?".into()
}

/// The text in `cell`, made by `make` the first time: one copy of `OnceLock::get_or_init` for
/// the texts this module finds once.
fn once(cell: &'static std::sync::OnceLock<String>, make: fn() -> String) -> &'static String {
    cell.get_or_init(make)
}

/// Longest test name, binary id or reason a record keeps; longer ones are cut (at a
/// character).
pub(crate) const LONGEST_TEXT: usize = 2048;

/// `text` cut to [`LONGEST_TEXT`] bytes, at a character.
pub(crate) fn cut(mut text: String) -> String {
    let end = cut_str(&text).len();
    text.truncate(end);
    text
}

fn cut_str(text: &str) -> &str {
    let mut end = text.len().min(LONGEST_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The running test's identity, as nextest's JUnit report names it and run records, the
/// history, learned weights and backfilling key it: its binary (`NEXTEST_BINARY_ID`, else the
/// executable's name without cargo's hash) and its name ([`current_test_name`]), each cut to
/// [`LONGEST_TEXT`]. [`test_key`] joins the two.
pub(crate) fn current_test() -> (String, String) {
    (current_test_binary(), cut(current_test_name()))
}

/// The test binary of [`current_test`].
pub(crate) fn current_test_binary() -> String {
    // The process's binary does not change: found once.
    static BINARY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    once(&BINARY, binary_of_process).clone()
}

/// [`current_test_binary`], found: `NEXTEST_BINARY_ID`, else from the executable's name.
fn binary_of_process() -> String {
    if let Some(n) = &Config::global().nextest
        && let Some(id) = &n.binary_id
    {
        return cut(id.clone());
    }
    cut(binary_from_exe())
}

fn binary_from_exe() -> String {
    if let Ok(p) = std::env::current_exe()
        && let Some(stem) = p.file_stem()
    {
        return binary_of_stem(&stem.to_string_lossy()).to_string();
    }
    "?".into()
}

/// The test binary named by executable name `stem` (without its extension): cargo names test
/// executables `<crate>-<16 hex digits>`.
fn binary_of_stem(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && is_hex(hash) => name,
        _ => stem,
    }
}

/// Whether `text` is hex digits only.
fn is_hex(text: &str) -> bool {
    for b in text.bytes() {
        if !b.is_ascii_hexdigit() {
            return false;
        }
    }
    true
}

/// The key of test `name` of binary `binary`, `<binary>::<name>`, each cut as records cut it:
/// what run records, `gpu0.tests`, learned weights and backfilling find a test by.
pub(crate) fn test_key(binary: &str, name: &str) -> String {
    format!("{}::{}", cut_str(binary), cut_str(name))
}

/// The line later processes of the run print in place of the [`group_hint`].
const HINT_REMINDER: &str = "gpu-test-permit: this test runs under cargo nextest outside a \
                             test group; `gpu-test-permit nextest-snippet` prints one\n";

/// Gives the [`group_hint`] where one is due: in full by the first process of a nextest run
/// that takes a permit outside a group, and as one line by the others, whose output nextest
/// would otherwise repeat with every failing test. Where the run cannot be recorded in the
/// slot directory, every process gives it in full.
pub(crate) fn hint_once(concurrency: usize) {
    static ONCE: Once = Once::new();
    if let Some(env) = current() {
        ONCE.call_once(|| {
            let Some(hint) = group_hint(env, concurrency) else {
                return;
            };
            let cfg = Config::global();
            let first = match (&env.run_id, cfg.slot_dir_path()) {
                (Some(run), Ok(dir)) => {
                    first_of_run(&cfg.records_dir_for(&dir), run, concurrency).unwrap_or(true)
                }
                _ => true,
            };
            if first {
                crate::notice::text(&format!("{hint}\n"));
            } else {
                crate::notice::text(HINT_REMINDER);
            }
        });
    }
}

/// Whether this process is the first of nextest run `run_id` to ask: the first writes the run
/// id, the group size the hint gives (`concurrency`) and the time to [`HINT_FILE`] (under its
/// lock), the others find it there. A file naming another run is replaced.
fn first_of_run(dir: &Path, run_id: &str, concurrency: usize) -> io::Result<bool> {
    let mut file =
        crate::sys::open_lock_file(&dir.join(HINT_FILE), crate::sys::is_shared_dir(dir))?;
    file.lock()?;
    let mut recorded = String::new();
    // A file that is not text is replaced like another run's.
    let _ = file.read_to_string(&mut recorded);
    if recorded.lines().next() == Some(run_id) {
        return Ok(false);
    }
    file.set_len(0)?;
    file.seek(io::SeekFrom::Start(0))?;
    let now = crate::clock::now_unix_ms();
    file.write_all(format!("{run_id}\nmax-threads {concurrency}\nat {now}\n").as_bytes())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tool::{TOOL, TOOL_FILE_HEADER};

    #[test]
    fn the_tool_file_header_names_the_tool() {
        assert!(TOOL_FILE_HEADER.contains(&format!("--tool-config-file {TOOL}:$PWD/")));
    }

    #[test]
    fn a_test_is_keyed_by_its_binary_and_name_each_cut_as_records_cut_them() {
        // As run records (measure), the history, learned weights and backfilling key a test.
        assert_eq!(test_key("suite", "gpu_a"), "suite::gpu_a");
        assert_eq!(
            test_key("crate::bin/it", "mod::inner::test"),
            "crate::bin/it::mod::inner::test"
        );
        assert_eq!(test_key("", ""), "::");
        // A name longer than a record keeps: the key of the name as the holder's record has it
        // (whole) and as the run record has it (cut) is one.
        let long = format!("{}\u{e9}tail", "n".repeat(LONGEST_TEXT - 1));
        let recorded = cut(long.clone());
        assert_eq!(
            recorded.len(),
            LONGEST_TEXT - 1,
            "cut before the two-byte character"
        );
        assert_eq!(test_key("b", &long), test_key("b", &recorded));
        assert_eq!(test_key("b", &long), format!("b::{recorded}"));
        let long_binary = "x".repeat(LONGEST_TEXT + 5);
        assert_eq!(
            test_key(&long_binary, "t"),
            format!("{}::t", cut(long_binary.clone()))
        );
        assert_eq!(cut("short".into()), "short");
    }

    #[test]
    fn a_binary_is_its_executables_name_without_cargos_hash() {
        for (stem, binary) in [
            ("it-0123456789abcdef", "it"),
            ("my-crate-0123456789ABCDEF", "my-crate"),
            ("my-crate", "my-crate"),
            ("it-0123456789abcdeg", "it-0123456789abcdeg"),
            ("it-0123456789abcde", "it-0123456789abcde"),
            ("-0123456789abcdef", ""),
            ("plain", "plain"),
        ] {
            assert_eq!(binary_of_stem(stem), binary, "{stem}");
        }
    }
}
