#!/usr/bin/env bash
# The CPU the crate adds to a test process as cargo nextest runs it (one test a process), with
# the test harness a user's test binary has: a crate of two tests, `takes_a_permit` (one permit
# from the global pool) and `takes_none`, made in a temporary directory with a path dependency
# on this checkout, built three ways:
#
#   dev           the test profile most suites run with;
#   dev-crate-o3  the same, with this crate alone optimised
#                 (`[profile.dev.package.gpu-test-permit] opt-level = 3`);
#   release
#
# then run by `benches/process_cost.rs` (PROCESS_COST_TESTS), each test a process, the kinds in
# turn, each permit paired with the baseline process of its binary started beside it.
#
# Given a git revision, the same three builds of that revision of the crate run beside them in
# the same rotation, each against its own baseline: what a change did.
#
# Usage: scripts/process-cost.sh [REV]      # 1,000 processes a kind (about 3 minutes here,
#                                           # 6 with REV)
#        PROCESSES=3000 scripts/process-cost.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The test crate in `$1`, depending on the crate at `$2`.
make_crate() {
    mkdir -p "$1/src" "$1/tests"
    printf '%s\n' \
        '[package]' \
        'name = "process-cost-tests"' \
        'version = "0.0.0"' \
        'edition = "2024"' \
        'publish = false' \
        '' \
        '[dependencies]' \
        "gpu-test-permit = { path = \"$2\" }" \
        '' \
        '[workspace]' >"$1/Cargo.toml"
    : >"$1/src/lib.rs"
    printf '%s\n' \
        '#[test]' \
        'fn takes_a_permit() {' \
        '    let _permit = gpu_test_permit::acquire();' \
        '}' \
        '' \
        '#[test]' \
        'fn takes_none() {' \
        '    std::hint::black_box(gpu_test_permit::PermitKind::Shared);' \
        '}' >"$1/tests/trivial.rs"
}

# The test binary cargo builds in crate `$1`, into target directory `$2`, with the profile
# arguments that follow.
build() {
    local crate=$1 target=$2
    shift 2
    (cd "$crate" && CARGO_TARGET_DIR="$crate/$target" cargo test --quiet --no-run \
        --message-format=json "$@" 2>/dev/null) |
        grep -o '"executable":"[^"]*trivial-[^"]*"' | cut -d'"' -f4 | tail -n1
}

# Builds crate `$1` three ways and links the binaries into `$work/bin`, named with suffix `$2`.
bins=
build_three() {
    local crate=$1 suffix=$2 dev opt release
    echo "process-cost: building the test binary three ways${suffix:+ ($suffix)}" >&2
    dev=$(build "$crate" target-dev)
    opt=$(build "$crate" target-o3 --config 'profile.dev.package.gpu-test-permit.opt-level=3')
    release=$(build "$crate" target-release --release)
    for bin in "$dev" "$opt" "$release"; do
        [ -x "$bin" ] || { echo "process-cost: a test binary was not built" >&2; exit 1; }
    done
    ln -s "$dev" "$work/bin/dev$suffix"
    ln -s "$opt" "$work/bin/dev-crate-o3$suffix"
    ln -s "$release" "$work/bin/release$suffix"
    bins="${bins:+$bins:}$work/bin/dev$suffix:$work/bin/dev-crate-o3$suffix:$work/bin/release$suffix"
}

mkdir -p "$work/bin"
make_crate "$work/now" "$root"
build_three "$work/now" ""
if [ $# -gt 0 ]; then
    rev=$(git -C "$root" rev-parse --verify "$1^{commit}")
    mkdir -p "$work/src"
    git -C "$root" archive --format=tar "$rev" | tar -x -C "$work/src"
    make_crate "$work/then" "$work/src"
    build_three "$work/then" "-at-${rev:0:7}"
fi
cd "$root"
PROCESSES=${PROCESSES:-1000} PROCESS_COST_TESTS="$bins" cargo bench --quiet --bench process_cost
