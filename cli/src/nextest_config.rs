//! The nextest tool config file that `gpu-test-permit nextest-snippet` prints: the GPU test
//! group and the filter that puts tests in it, how to cap a suite that never calls the crate
//! (cargo's target runner, a nextest wrapper script), and the longest-first priorities.
//!
//! The group's filter is, in order of preference:
//!
//! - **learned from the runs** ([`learned_filter`]): after a run under the driver watch
//!   (`gpu-test-permit watch` as cargo's target runner), the slot directory's records say
//!   which tests took a permit and which loaded a GPU driver, with a permit or without; the
//!   filter names exactly those tests, and a new GPU test joins once it has run;
//! - **found** by `gpu-test-permit find-gpu-tests`, for a suite never run watched;
//! - **a guess by name** ([`GUESSED_FILTER`]), where nothing better is known.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub use gpu_test_permit::__private::nextest::{
    GROUP, GUESSED_FILTER, TOOL, TOOL_FILE_HEADER, group_snippet,
};
use gpu_test_permit::__private::runs::{RunRecord, read_run, recorded_runs};

/// The wrapper script of [`wrapper_snippet`].
pub const WRAPPER_SCRIPT: &str = "@tool:gpu-test-permit:gpu-permit";

/// The filter that puts tests in the GPU test group.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupFilter {
    /// A guess by name ([`GUESSED_FILTER`]).
    Guessed,
    /// The tests the recorded runs saw use the GPU ([`learned_filter`]).
    Learned {
        /// The nextest filterset that names them.
        filter: String,
        /// How many tests it names.
        tests: usize,
        /// How many recorded runs of this user they were read from.
        runs: usize,
        /// Of `runs`, those run under the driver watch.
        watched: usize,
    },
}

/// The tool config file that puts GPU tests, as `filter` picks them, in a test group of at
/// most `max_threads` at a time. With [`GroupFilter::Guessed`] it is the library's
/// [`group_snippet`].
///
/// ```
/// use gpu_test_permit_cli::nextest_config::{GroupFilter, group_snippet, tool_config};
///
/// assert_eq!(tool_config(2, &GroupFilter::Guessed), group_snippet(2));
/// ```
pub fn tool_config(max_threads: usize, filter: &GroupFilter) -> String {
    match filter {
        GroupFilter::Guessed => group_snippet(max_threads),
        GroupFilter::Learned {
            filter,
            tests,
            runs,
            watched,
        } => format!(
            "{}[test-groups]
'{GROUP}' = {{ max-threads = {max_threads} }}

[[profile.default.overrides]]
# Learned from this user's {runs} run(s) recorded in the slot directory ({watched} watched):
# the {tests} test(s) that took a permit or loaded a GPU driver. A new GPU test joins once it
# has run under `gpu-test-permit watch` as the target runner.
filter = '''
{filter}
'''
test-group = '{GROUP}'
",
            TOOL_FILE_HEADER,
        ),
    }
}

/// The filter of [`tool_config`]'s override, for the wrapper script's own.
fn filter_text(filter: &GroupFilter) -> String {
    match filter {
        GroupFilter::Guessed => format!("'{GUESSED_FILTER}'"),
        GroupFilter::Learned { filter, .. } => format!("'''\n{filter}\n'''"),
    }
}

/// The configuration that caps a test suite that does not use this crate, through
/// `gpu-test-permit run` as cargo's target runner: every test binary runs under `run`, which
/// takes a permit only for tests in the [`GROUP`] test group (and none for nextest's `--list`),
/// so `max_threads` should be all the permits the host has. Two files: `.cargo/config.toml`
/// and the tool config file of [`tool_config`].
///
/// ```
/// use gpu_test_permit_cli::nextest_config::{GroupFilter, runner_snippet};
///
/// let snippet = runner_snippet(2, &GroupFilter::Guessed);
/// assert!(snippet.contains(
///     r#"runner = ["gpu-test-permit", "run", "--group", "@tool:gpu-test-permit:gpu", "--"]"#
/// ));
/// ```
pub fn runner_snippet(max_threads: usize, filter: &GroupFilter) -> String {
    format!(
        "# .cargo/config.toml: test binaries run under `gpu-test-permit run`; tests in the GPU
# test group hold a permit, the others (and nextest's --list) run straight through. Or set
# CARGO_TARGET_<TRIPLE>_RUNNER='gpu-test-permit run --group {GROUP} --'
# on the GPU runner only.
[target.'cfg(all())']
runner = [\"gpu-test-permit\", \"run\", \"--group\", \"{GROUP}\", \"--\"]

{}",
        tool_config(max_threads, filter)
    )
}

/// The configuration that caps a test suite that does not use this crate, through
/// `gpu-test-permit run` as a nextest wrapper script (experimental in nextest, available
/// since 0.9.98): only the tests the script's filter picks run under `run`, and listing
/// never does. Two files: a line for the suite's `.config/nextest.toml` (only a repository's
/// own configuration may turn an experimental feature on) and the tool config file.
///
/// ```
/// use gpu_test_permit_cli::nextest_config::{GroupFilter, wrapper_snippet};
///
/// let snippet = wrapper_snippet(2, &GroupFilter::Guessed);
/// assert!(snippet.contains("run-wrapper = '@tool:gpu-test-permit:gpu-permit'"));
/// ```
pub fn wrapper_snippet(max_threads: usize, filter: &GroupFilter) -> String {
    // The script between the tool config file's header and its group.
    let config = tool_config(max_threads, filter);
    let group = config.strip_prefix(TOOL_FILE_HEADER).unwrap_or(&config);
    format!(
        "# .config/nextest.toml (nextest 0.9.98 or later): wrapper scripts are experimental, and
# only the suite's own configuration may turn them on. At its top:
experimental = [\"wrapper-scripts\"]

{TOOL_FILE_HEADER}# GPU tests run under `gpu-test-permit run`, which holds a permit while the test runs.
[scripts.wrapper.'{WRAPPER_SCRIPT}']
command = 'gpu-test-permit run --'

[[profile.default.scripts]]
# The same filter as the group's below.
filter = {}
run-wrapper = '{WRAPPER_SCRIPT}'

{group}",
        filter_text(filter)
    )
}

/// The GPU tests of this user's runs recorded in slot directory `dir`, as a
/// [`GroupFilter::Learned`]: every test that took a permit, and every test seen loading a GPU
/// driver (with a permit or without; a driver its program was linked to at build time does
/// not count). `None` where none of those runs was watched: a run that was not watched sees
/// only the drivers still mapped when a test process looked at itself, so its tests that
/// reach the GPU without a permit and unload the driver again (as wgpu does) would be left out
/// of the group; `find-gpu-tests` is for such a suite.
pub fn learned_filter(dir: &Path) -> Option<GroupFilter> {
    let mut tests: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let (mut runs, mut watched) = (0, 0);
    for run in recorded_runs(dir).into_iter().filter(|r| r.mine) {
        let Ok(Some(records)) = read_run(dir, &run.run_id) else {
            continue;
        };
        runs += 1;
        let mut was_watched = false;
        for r in &records.records {
            let (binary, test) = match r {
                RunRecord::Grant(g) => (&g.binary, &g.test),
                RunRecord::Drivers(d) => {
                    was_watched |= d.seen == "watched";
                    if d.drivers.is_empty() {
                        continue;
                    }
                    (&d.binary, &d.test)
                }
                _ => continue,
            };
            // A test without a name cannot be named in a filter.
            if !binary.is_empty() && !test.is_empty() {
                tests
                    .entry(binary.clone())
                    .or_default()
                    .insert(test.clone());
            }
        }
        watched += usize::from(was_watched);
    }
    if watched == 0 {
        return None;
    }
    Some(GroupFilter::Learned {
        tests: tests.values().map(BTreeSet::len).sum(),
        filter: filterset(&tests),
        runs,
        watched,
    })
}

/// The nextest filterset that names exactly `tests` (binary id to test names), one binary a
/// line: `(binary_id(=ID) & (test(=a) | test(=b)))`; `none()` where there are none.
///
/// ```
/// use std::collections::{BTreeMap, BTreeSet};
/// use gpu_test_permit_cli::nextest_config::filterset;
///
/// let tests = BTreeMap::from([("s::t".to_string(), BTreeSet::from(["a".to_string()]))]);
/// assert_eq!(filterset(&tests), "(binary_id(=s::t) & (test(=a)))");
/// ```
pub fn filterset(tests: &BTreeMap<String, BTreeSet<String>>) -> String {
    filterset_with(tests, |_| false)
}

/// [`filterset`], naming a binary whole (`binary_id(=ID)`) where `whole` says every test it
/// has is among `tests`.
///
/// ```
/// use std::collections::{BTreeMap, BTreeSet};
/// use gpu_test_permit_cli::nextest_config::filterset_with;
///
/// let tests = BTreeMap::from([
///     ("s::all".to_string(), BTreeSet::from(["a".to_string()])),
///     ("s::some".to_string(), BTreeSet::from(["b".to_string()])),
/// ]);
/// assert_eq!(
///     filterset_with(&tests, |binary| binary == "s::all"),
///     "binary_id(=s::all)\n| (binary_id(=s::some) & (test(=b)))"
/// );
/// ```
pub fn filterset_with(
    tests: &BTreeMap<String, BTreeSet<String>>,
    whole: impl Fn(&str) -> bool,
) -> String {
    let mut parts = Vec::new();
    for (binary, names) in tests {
        if names.is_empty() {
            continue;
        }
        let id = format!("binary_id(={})", filter_name(binary));
        if whole(binary) {
            parts.push(id);
            continue;
        }
        let names: Vec<String> = names
            .iter()
            .map(|t| format!("test(={})", filter_name(t)))
            .collect();
        let inline = format!("({id} & ({}))", names.join(" | "));
        if inline.len() <= 96 {
            parts.push(inline);
        } else {
            parts.push(format!("({id} & (\n    {}\n))", names.join("\n  | ")));
        }
    }
    if parts.is_empty() {
        "none()".to_string()
    } else {
        parts.join("\n| ")
    }
}

/// Priorities reach this many of the longest tests; shorter ones keep nextest's default (0).
pub const PRIORITIZED_MOST: usize = 100;

/// The longest tests first: nextest overrides that give the tests in `tests` (binary id, name,
/// reference hold time), the longest first, priorities from 100 down, one level a distinct
/// hold time (at most [`PRIORITIZED_MOST`] tests; shorter and unknown tests keep priority 0,
/// and run after them). Starting the longest jobs first is the classic longest-processing-time
/// rule: no long test starts last and leaves the other permits idle while it ends the run.
/// Empty when `tests` is. nextest reads priorities from 0.9.91.
///
/// ```
/// use std::time::Duration;
/// use gpu_test_permit_cli::nextest_config::priority_block;
///
/// let block = priority_block(&[
///     ("suite::gpu", "long_render", Duration::from_secs(2)),
///     ("suite::gpu", "short_copy", Duration::from_millis(100)),
/// ]);
/// assert!(block.contains("filter = 'binary_id(=suite::gpu) & test(=long_render)'\npriority = 100\n"));
/// assert!(block.contains("filter = 'binary_id(=suite::gpu) & test(=short_copy)'\npriority = 99\n"));
/// ```
pub fn priority_block(tests: &[(&str, &str, std::time::Duration)]) -> String {
    // A test or binary without a name cannot be named in a filter (`test(=)` is an error, and
    // any other matcher would match other tests too): left out, and said so.
    let (mut sorted, unnamed): (Vec<&(&str, &str, std::time::Duration)>, Vec<_>) = tests
        .iter()
        .partition(|(binary, test, _)| !binary.is_empty() && !test.is_empty());
    sorted.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (a.0, a.1).cmp(&(b.0, b.1))));
    sorted.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    sorted.truncate(PRIORITIZED_MOST);
    if sorted.is_empty() && unnamed.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "
# Longest first: this host's history of the GPU tests' hold times (`gpu-test-permit
# nextest-snippet` after runs under the crate refreshes it). The suite's own overrides come
# first, so a test its .config/nextest.toml gives a priority keeps that one; tests not named
# here keep priority 0 and start after these.
",
    );
    if !unnamed.is_empty() {
        out.push_str(&format!(
            "# Left out: {} test(s) the history records with an empty test or binary name, which\n\
             # no filter can name alone.\n",
            unnamed.len()
        ));
    }
    let mut priority = 100i32;
    let mut last: Option<std::time::Duration> = None;
    for (binary, test, hold) in sorted {
        if last.is_some_and(|l| l != *hold) {
            priority -= 1;
        }
        last = Some(*hold);
        out.push_str(&format!(
            "[[profile.default.overrides]]\n# {:.3} s\nfilter = 'binary_id(={}) & test(={})'\npriority = {priority}\n",
            hold.as_secs_f64(),
            filter_name(binary),
            filter_name(test),
        ));
    }
    out
}

/// `s` for a filterset's name matcher (`test(=...)`, `binary_id(=...)`) inside a TOML literal
/// string (`'...'` or `'''...'''`): `\\` for a backslash; and as the filterset's `\u{..}`
/// escapes, which the matcher reads back as the character itself, the characters that would
/// end the matcher (`(`, `)`, `,`), the quote that would end the TOML string around it, and
/// every control character (a TOML literal string may hold none but a tab, and a line break
/// or a tab in a filter reads as the space between its words) and every whitespace character
/// but the plain space.
///
/// The empty name is returned empty: no matcher can hold it (`test(=)` is an error), so the
/// callers leave such a test out (see [`priority_block`]).
///
/// ```
/// use gpu_test_permit_cli::nextest_config::filter_name;
///
/// assert_eq!(filter_name("m::t"), "m::t");
/// assert_eq!(filter_name("f(1, 2)"), "f\\u{28}1\\u{2c} 2\\u{29}");
/// assert_eq!(filter_name("a\nb\x7f"), "a\\u{a}b\\u{7f}");
/// ```
pub fn filter_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '(' | ')' | ',' | '\'' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn priority_filters_hold_no_control_character_and_leave_out_the_unnamed() {
        let s = Duration::from_secs;
        let tests = [
            ("s::b", "a\nb", s(5)),
            ("s::b", "tab\there\r\u{7f}\u{1}\u{85}\u{2028}", s(4)),
            ("s::b\n", "x", s(3)),
            ("s::b", "'''q'", s(2)),
            ("s::b", "", s(2)),
            ("", "y", s(2)),
        ];
        let block = priority_block(&tests);
        let filters: Vec<&str> = block
            .lines()
            .filter_map(|l| l.strip_prefix("filter = '")?.strip_suffix('\''))
            .collect();
        assert_eq!(
            filters,
            [
                r"binary_id(=s::b) & test(=a\u{a}b)",
                r"binary_id(=s::b) & test(=tab\u{9}here\u{d}\u{7f}\u{1}\u{85}\u{2028})",
                r"binary_id(=s::b\u{a}) & test(=x)",
                r"binary_id(=s::b) & test(=\u{27}\u{27}\u{27}q\u{27})",
            ],
            "{block}"
        );
        // Every line is whole: no control character, no line break inside a string.
        for line in block.lines() {
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
        assert!(
            block.contains(
                "# Left out: 2 test(s) the history records with an empty test or binary name"
            ),
            "{block}"
        );
        let only_unnamed = priority_block(&[("s::b", "", s(1))]);
        assert!(
            !only_unnamed.lines().any(|l| l.starts_with("filter")),
            "{only_unnamed}"
        );
    }

    #[test]
    fn priorities_go_longest_first_ties_share_one_and_only_the_longest_hundred_get_one() {
        let ms = Duration::from_millis;
        let names: Vec<String> = (0..120).map(|i| format!("t{i:03}")).collect();
        let mut tests: Vec<(&str, &str, Duration)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| ("s::b", n.as_str(), ms(1000 - i as u64)))
            .collect();
        tests.push(("s::b", "tie_a", ms(2000)));
        tests.push(("s::b", "tie_b", ms(2000)));
        tests.push(("s::b", "it's (odd), \\", ms(3000)));
        let block = priority_block(&tests);
        let levels: Vec<(String, i32)> = block
            .split("[[profile.default.overrides]]\n")
            .skip(1)
            .map(|o| {
                let filter = o.lines().find_map(|l| l.strip_prefix("filter = ")).unwrap();
                let p = o
                    .lines()
                    .find_map(|l| l.strip_prefix("priority = "))
                    .unwrap();
                (filter.to_string(), p.parse().unwrap())
            })
            .collect();
        assert_eq!(levels.len(), PRIORITIZED_MOST);
        assert_eq!(
            levels[0],
            (
                "'binary_id(=s::b) & test(=it\\u{27}s \\u{28}odd\\u{29}\\u{2c} \\\\)'".to_string(),
                100
            )
        );
        assert_eq!(levels[1].1, 99);
        assert_eq!(levels[2].1, 99, "equal holds share a priority");
        assert_eq!(
            levels[3],
            ("'binary_id(=s::b) & test(=t000)'".to_string(), 98)
        );
        assert_eq!(levels[99].1, 2);
        assert!(!block.contains("t097"), "past the longest hundred: {block}");
        assert_eq!(priority_block(&[]), "");
    }
}
