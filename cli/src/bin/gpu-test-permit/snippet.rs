//! `nextest-snippet`: the nextest tool config file for this host's permits.

use std::process::ExitCode;

use gpu_test_permit::config::Config;
use gpu_test_permit_cli::nextest_config::{self, GroupFilter};

use crate::args::Args;

/// `nextest-snippet`: the test group, sized to all the permits the host has (N per GPU times
/// the GPUs), its filter (the tests this user's watched runs saw use the GPU, else a guess by
/// name), the longest-first priorities, and how heavy tests tell nextest their weight.
/// Computed from the configuration and the records, not from a pool: printing text creates no
/// slot files.
pub(crate) fn nextest_snippet(args: &Args) -> Result<ExitCode, String> {
    let cfg = Config::global();
    let gpus = cfg.gpus.map_or_else(detected_gpus, |g| g.get());
    let mut auto = String::new();
    let per_gpu = match cfg.slot_dir_path() {
        Ok(dir) if cfg.auto_concurrency => {
            let choice = gpu_test_permit::__private::tune::choose_now(&dir, gpus, None);
            auto = format!(
                "# {}=auto: sized for the N a run starting now gets,\n\
                 # {}.\n\
                 # The permits cap each run at the N it chooses, whatever the group's size. A\n\
                 # group smaller than that N keeps tests from waiting for permits, so auto never\n\
                 # sees the cap limit a run and does not step above the group; to let it explore\n\
                 # up to GPU_TEST_PERMIT_MAX_CONCURRENCY ({}), size the group to that (tests past\n\
                 # the chosen N then wait in their processes), and print this again once settled.\n",
                cfg.concurrency_var,
                comment_text(&choice.to_string()),
                cfg.max_concurrency
            );
            choice.per_gpu
        }
        _ => cfg.concurrency.get(),
    };
    let n = per_gpu.saturating_mul(gpus);
    // The group's filter: the tests this user's watched runs saw use the GPU, else a guess.
    // Reading records creates no files.
    let filter = match cfg.slot_dir_path() {
        Ok(dir) if dir.is_dir() => nextest_config::learned_filter(&dir),
        _ => None,
    }
    .unwrap_or(GroupFilter::Guessed);
    let text = match (args.flag("--runner"), args.flag("--wrapper")) {
        (true, true) => return Err(args.error("give --runner or --wrapper, not both")),
        // The runner is one command for every test: their permits are all of one unit.
        (true, false) => nextest_config::runner_snippet(n, &filter),
        (false, true) => {
            nextest_config::wrapper_snippet(n, &filter) + &weights_snippet(per_gpu, true)
        }
        (false, false) => {
            nextest_config::tool_config(n, &filter) + &weights_snippet(per_gpu, false)
        }
    };
    print!("{auto}{text}{}", longest_first(cfg));
    Ok(ExitCode::SUCCESS)
}

/// `text` for a TOML comment line: a line break as a space, and every other control character
/// (which a TOML comment may not hold, but for a tab) as its `\u{..}` escape.
fn comment_text(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' => " ".to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// The priorities that start the longest GPU tests first, from the hold times this host's
/// history knows for the slot directory (empty where it knows none).
fn longest_first(cfg: &Config) -> String {
    // No slot directory, no runs to learn from: printing text creates no files.
    let dir = match cfg.slot_dir_path() {
        Ok(dir) if dir.is_dir() => dir,
        _ => return String::new(),
    };
    let times = gpu_test_permit::__private::tune::hold_times(&dir);
    let tests: Vec<(&str, &str, std::time::Duration)> = times
        .iter()
        .map(|t| (t.binary.as_str(), t.test.as_str(), t.hold))
        .collect();
    nextest_config::priority_block(&tests)
}

/// The GPUs of `GPU_TEST_PERMIT_GPUS=auto`, as the global pool counts them: the CUDA devices
/// the probe finds (in a child process), at least one.
fn detected_gpus() -> usize {
    #[cfg(feature = "cuda")]
    {
        gpu_test_permit::probe::probe(gpu_test_permit::probe::Backend::Cuda)
            .outcome
            .devices()
            .map_or(1, |d| d.len().max(1))
    }
    #[cfg(not(feature = "cuda"))]
    {
        1
    }
}

/// The commented override that gives heavy tests their weight in the `gpu` test group:
/// `threads-required` counts against the group's `max-threads`, so nextest starts no more
/// units than the permits have, and a heavy test's process does not start only to wait.
/// Both overrides put their tests in the same group, so their order does not matter. Empty
/// where N = 1 (every permit is a whole GPU).
fn weights_snippet(per_gpu: usize, wrapper: bool) -> String {
    if per_gpu < 2 {
        return String::new();
    }
    let k = per_gpu.div_ceil(2).max(2);
    let how = if wrapper {
        format!(
            "# Under the wrapper, they need one of their own that holds the units, with\n\
             # `command = 'gpu-test-permit run --units {k} --'` and a filter kept apart from\n\
             # the gpu-permit script's.\n"
        )
    } else {
        String::new()
    };
    format!(
        "
# Heavy tests: a test that takes a permit of k units counts as k tests
# (acquire_weighted(k), acquire_memory(bytes), `gpu-test-permit run --units k`). Tell nextest
# with `threads-required = k` in the group, so that it starts no more units than there are
# permits (k is at most N = {per_gpu}, one GPU's units); e.g. for tests of {k} units:
# [[profile.default.overrides]]
# filter = 'test(/heavy_/)'
# test-group = '{group}'
# threads-required = {k}
{how}",
        group = gpu_test_permit::__private::nextest::GROUP
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_text_holds_no_control_character() {
        let text = comment_text("N = 2 (auto: GPU a\nb\rc\td\u{7f}e\u{0}f)");
        assert_eq!(text, "N = 2 (auto: GPU a b\\u{d}c\\u{9}d\\u{7f}e\\u{0}f)");
        assert!(!text.chars().any(char::is_control), "{text}");
    }
}
