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
# then run by `benches/process_cost.rs` (PROCESS_COST_TESTS), each test a process, the six
# kinds in turn, each permit paired with the baseline process of its binary started beside it.
#
# Usage: scripts/process-cost.sh            # 1,000 processes a kind (about 3 minutes here)
#        PROCESSES=3000 scripts/process-cost.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/tests"
cat >"$work/Cargo.toml" <<EOF
[package]
name = "process-cost-tests"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
gpu-test-permit = { path = "$root" }

[workspace]
EOF
: >"$work/src/lib.rs"
cat >"$work/tests/trivial.rs" <<'EOF'
#[test]
fn takes_a_permit() {
    let _permit = gpu_test_permit::acquire();
}

#[test]
fn takes_none() {
    std::hint::black_box(gpu_test_permit::PermitKind::Shared);
}
EOF
# The test binary cargo builds, by profile arguments and target directory.
build() {
    local target=$1
    shift
    (cd "$work" && CARGO_TARGET_DIR="$work/$target" cargo test --quiet --no-run \
        --message-format=json "$@" 2>/dev/null) |
        grep -o '"executable":"[^"]*trivial-[^"]*"' | cut -d'"' -f4 | tail -n1
}
echo "process-cost: building the test binary three ways" >&2
dev=$(build target-dev)
opt=$(build target-o3 --config 'profile.dev.package.gpu-test-permit.opt-level=3')
release=$(build target-release --release)
for bin in "$dev" "$opt" "$release"; do
    [ -x "$bin" ] || { echo "process-cost: a test binary was not built" >&2; exit 1; }
done
mkdir -p "$work/bin"
ln -s "$dev" "$work/bin/dev"
ln -s "$opt" "$work/bin/dev-crate-o3"
ln -s "$release" "$work/bin/release"
cd "$root"
PROCESSES=${PROCESSES:-1000} \
    PROCESS_COST_TESTS="$work/bin/dev:$work/bin/dev-crate-o3:$work/bin/release" \
    cargo bench --quiet --bench process_cost
