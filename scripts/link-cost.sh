#!/usr/bin/env bash
# The CPU a test process pays for linking this crate, as cargo nextest runs it (one test a
# process, nextest's variables set): a one-crate test binary built twice in a temporary
# directory, default dev profile, CARGO_INCREMENTAL=0,
#
#   without   no dependency: two tests, `takes_none` and `takes_a_permit`, that do trivial work;
#   now       the same tests with this checkout as a path dependency: `takes_none` touches a
#             type of the crate and takes no permit, `takes_a_permit` takes one
#             (`gpu_test_permit::acquire()`, N = 8, a slot directory of its own, in a nextest
#             test group);
#   now-opt1  `now` with this crate optimised in the dev profile
#             (`[profile.dev.package.gpu-test-permit] opt-level = 1`, as docs/guide/faq.md
#             suggests; `LINK_COST_OPT_LEVEL=3` for another level), the rest of the build as is;
#   now-cpu   `now` as a binary of CPU tests: neither test takes a permit, so none reaches
#             `acquire()` (its `takes_a_permit` row is a second `takes_none`): what a test binary
#             whose tests never take a permit pays, the constructors' code linked and run;
#   floor     the same tests with a crate written here as the dependency instead: the least a
#             cross-process cap on file locks does (the N slot files opened in turn until
#             `flock` takes one; its guard closes it), in 40 lines over `libc`, as this crate
#             uses it: what any such cap costs a test process, built alike;
#
# then run by `benches/process_cost.rs` (PROCESS_COST_TESTS, PROCESS_COST_WITHOUT): each test
# a process (`BIN --exact NAME --nocapture`), the binaries in turn, the order rotated, each
# process paired with the process of the same test without the crate started beside it. It
# prints, for each binary's test, the median CPU per process (user + sys of the child) and,
# over the pairs, the median and mean (with its 95 % interval) of what it adds.
#
# Given git revisions, each revision of the crate (`git archive REV`) is built as a binary of
# its own, `at-REV`, and runs in the same rotation: what a change did, in one sitting.
#
# Usage: scripts/link-cost.sh [REV...]       # 2,000 processes a test a binary (about 2
#                                            # minutes of runs here, and 1 more a REV, after
#                                            # the builds)
#        PROCESSES=5000 scripts/link-cost.sh bd56f07
#        LINK_COST_TARGET=DIR scripts/link-cost.sh   # keep the builds' target directory
#        LINK_COST_COPY=1 scripts/link-cost.sh       # run copies of the binaries
#        LINK_COST_CPU=1 scripts/link-cost.sh REV    # each REV also as a binary of CPU tests,
#                                            # as now-cpu (at-REV-cpu)
#        LINK_COST_OUT=DIR scripts/link-cost.sh [REV...]  # build only: the binaries, the bench
#                                            # and DIR/run.sh, to run on another machine of
#                                            # this architecture that has no Rust
#                                            # (PROCESSES=N DIR/run.sh there)
#
# The binaries run as the linker left them, as nextest runs a suite cargo just built: in the
# page cache as the linker wrote them. A copy of the same binary (`LINK_COST_COPY=1`, written
# by `cp`) takes fewer page faults to start (`perf stat -e page-faults`), and so less CPU:
# compare binaries built, or copied, alike, in one sitting.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target=${LINK_COST_TARGET:-$work/target}

. "$root/scripts/one-test-crate.sh"

# The floor's library in `$1`: a slot file of the directory's N taken with `flock`.
make_floor() {
    mkdir -p "$1/src"
    printf '%s\n' '[package]' 'name = "floor-cap"' 'version = "0.0.0"' 'edition = "2024"' \
        'publish = false' '' '[dependencies]' 'libc = "0.2"' >"$1/Cargo.toml"
    cat >"$1/src/lib.rs" <<'RUST'
//! The least a cross-process cap on file locks does: the N slot files of the directory opened in
//! turn until `flock(LOCK_EX | LOCK_NB)` takes one (blocking on the first when none is free);
//! the guard closes it, which lets the lock go.
use std::ffi::CString;

pub struct Permit(libc::c_int);

impl Drop for Permit {
    fn drop(&mut self) {
        unsafe { libc::close(self.0) };
    }
}

#[derive(Clone, Copy)]
pub enum PermitKind {
    Shared,
}

pub fn acquire() -> Permit {
    let dir = std::env::var_os("GPU_TEST_PERMIT_DIR").expect("a slot directory");
    let n: usize = match std::env::var("REALIZAR_GPU_TEST_CONCURRENCY") {
        Ok(v) => v.parse().unwrap_or(2),
        Err(_) => 2,
    };
    let mut first = -1;
    for i in 0..n {
        let mut path = std::path::PathBuf::from(&dir);
        path.push(format!("floor.slot{i}"));
        let path = CString::new(path.into_os_string().into_encoded_bytes()).unwrap();
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC;
        let fd = unsafe { libc::open(path.as_ptr(), flags, 0o600) };
        assert!(fd >= 0, "cannot open a slot file");
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            if first >= 0 {
                unsafe { libc::close(first) };
            }
            return Permit(fd);
        }
        if first < 0 {
            first = fd;
        } else {
            unsafe { libc::close(fd) };
        }
    }
    unsafe { libc::flock(first, libc::LOCK_EX) };
    Permit(first)
}
RUST
}

# Builds crate `$1` (dev) and links its test binary as `$work/bin/$2`; with `$3`, this crate
# at that opt-level (a target directory of its own: the test binary's name would not change).
build() {
    local bin
    echo "link-cost: building $2" >&2
    if [ -n "${3:-}" ]; then
        bin=$(test_binary "$1" "$target-opt$3" \
            --config "profile.dev.package.gpu-test-permit.opt-level=$3")
    else
        bin=$(test_binary "$1" "$target")
    fi
    if [ -n "${LINK_COST_COPY:-}" ]; then
        cp "$bin" "$work/bin/$2"
    else
        ln -s "$bin" "$work/bin/$2"
    fi
}

mkdir -p "$work/bin"
one_test_crate "$work/without" link-cost-tests ""
build "$work/without" without
one_test_crate "$work/now" link-cost-tests "$root"
build "$work/now" now
opt=${LINK_COST_OPT_LEVEL:-1}
build "$work/now" "now-opt$opt" "$opt"
# A package name of its own: the test binary of the same package name, built from the same
# dependencies, would have the same file name in the shared target directory.
one_test_crate "$work/now-cpu" link-cost-cpu-tests "$root" gpu-test-permit cpu-only
build "$work/now-cpu" now-cpu
make_floor "$work/floor-cap"
one_test_crate "$work/floor" link-cost-tests "$work/floor-cap" floor-cap
build "$work/floor" floor
bins="$work/bin/now:$work/bin/now-opt$opt:$work/bin/now-cpu:$work/bin/floor"
for arg in "$@"; do
    rev=$(git -C "$root" rev-parse --verify "$arg^{commit}")
    mkdir -p "$work/src-${rev:0:7}"
    git -C "$root" archive --format=tar "$rev" | tar -x -C "$work/src-${rev:0:7}"
    one_test_crate "$work/at-${rev:0:7}" link-cost-tests "$work/src-${rev:0:7}"
    build "$work/at-${rev:0:7}" "at-${rev:0:7}"
    bins="$bins:$work/bin/at-${rev:0:7}"
    if [ -n "${LINK_COST_CPU:-}" ]; then
        one_test_crate "$work/at-${rev:0:7}-cpu" link-cost-cpu-tests "$work/src-${rev:0:7}" \
            gpu-test-permit cpu-only
        build "$work/at-${rev:0:7}-cpu" "at-${rev:0:7}-cpu"
        bins="$bins:$work/bin/at-${rev:0:7}-cpu"
    fi
done
cd "$root"
if [ -n "${LINK_COST_OUT:-}" ]; then
    # Build only. Copies, written alike: a copy starts with fewer page faults than the file the
    # linker wrote, so every binary of the rotation is a copy there.
    mkdir -p "$LINK_COST_OUT/bin"
    rm -f "$LINK_COST_OUT"/bin/*
    for b in $work/bin/*; do cp -L "$b" "$LINK_COST_OUT/bin/"; done
    bench=$(cargo bench --no-run --quiet --bench process_cost --message-format=json 2>/dev/null |
        grep -o '"executable":"[^"]*process_cost-[^"]*"' | cut -d'"' -f4 | tail -n1)
    cp "$bench" "$LINK_COST_OUT/process_cost"
    rel=$(for b in ${bins//:/ }; do printf '%s:' "\$here/bin/$(basename "$b")"; done)
    cat >"$LINK_COST_OUT/run.sh" <<RUN
#!/bin/sh
# Written by scripts/link-cost.sh (LINK_COST_OUT) at $(git rev-parse --short=12 HEAD): the same
# rotation as the script runs, over the binaries beside this file.
here=\$(cd "\$(dirname "\$0")" && pwd)
PROCESSES=\${PROCESSES:-2000} PROCESS_COST_WITHOUT="\$here/bin/without" \\
    PROCESS_COST_TESTS="${rel%:}" exec "\$here/process_cost" --bench
RUN
    chmod +x "$LINK_COST_OUT/run.sh"
    trap - EXIT
    rm -rf "$work"
    echo "link-cost: built into $LINK_COST_OUT; run $LINK_COST_OUT/run.sh"
    exit 0
fi
PROCESSES=${PROCESSES:-2000} PROCESS_COST_WITHOUT="$work/bin/without" PROCESS_COST_TESTS="$bins" \
    cargo bench --quiet --bench process_cost
