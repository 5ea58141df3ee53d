#!/usr/bin/env bash
# The whole test suite: unit, integration and doc tests under `cargo test`, the same under
# `cargo nextest run` (one process per test), the example GPU suite under both runners with its
# trace checked (never more than N permits held at once), and the loom model check of the permit
# state machine.
#
# Set GPU_TEST_PERMIT_REQUIRE=wgpu (or cuda, cuda,wgpu) on a machine that has those backends, so
# that a missing device fails the run instead of skipping tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the suite needs besides a Rust toolchain: cargo-nextest, a C compiler (the tests build
# stand-in CUDA driver libraries) and a Vulkan driver for the wgpu tests (Mesa's lavapipe on a
# machine without a GPU). Installed here where that is possible (root on Debian or Ubuntu).
have() { command -v "$1" >/dev/null 2>&1; }
apt_install() {
    if [ "$(id -u)" = 0 ] && have apt-get; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    else
        echo "test-all: missing $*; install them (e.g. sudo apt-get install $*) and run again" >&2
        exit 1
    fi
}
have cargo-nextest || cargo install cargo-nextest --locked
have cc || apt_install gcc libc6-dev
# faketime runs a queue head under another wall clock (cli/tests/it/cap_breaks.rs); without it,
# that one test says it was not run.
if ! have faketime && [ "$(id -u)" = 0 ] && have apt-get; then
    apt_install faketime
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' || ! ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && have apt-get; then
        apt_install libvulkan1 mesa-vulkan-drivers
    else
        echo "test-all: no Vulkan driver found: the wgpu tests will skip (and fail where" \
            "GPU_TEST_PERMIT_REQUIRE=wgpu); for a CPU device: sudo apt-get install libvulkan1" \
            "mesa-vulkan-drivers" >&2
    fi
fi

cargo test --workspace --all-features
# The docs (README.md, the guide's pages under docs/guide/, the other Markdown files), named on
# their own: each parsed as CommonMark, every relative link and anchor resolved, each page of
# the guide under 1,500 words, the path to a green CI run under 3,000, the pictures of real runs
# what the command draws from their traces. Already built above, so this only runs them.
cargo test --workspace --all-features --test it -- docs::
# The doctests again, all in one process, as a target runner (qemu, a device runner) runs them:
# an example must not depend on being the first to set up the global pool. Default features, so
# that the build for an explicit target stays small; no backend is built then, so none can be
# required.
host=$(rustc -vV | sed -n 's/^host: //p')
runner_var="CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_RUNNER"
env "$runner_var=env" GPU_TEST_PERMIT_REQUIRE=none cargo test --doc --target "$host"
cargo nextest run --workspace --all-features

# The demos: simulated tests in three processes, and real wgpu compute on six threads (each
# checks its own cap from its trace and fails otherwise).
cargo run -q --example cap_demo
cargo run -q --all-features --example wgpu_demo

# The example suite again, traced, under each runner; the trace proves the cap held. With a
# memory budget, so that its heavy tests (256 MiB declared) hold two units of 128 MiB each
# beside the light ones.
# GPU_TEST_PERMIT_CONCURRENCY wins over REALIZAR_GPU_TEST_CONCURRENCY, as in the crate.
n=${GPU_TEST_PERMIT_CONCURRENCY:-${REALIZAR_GPU_TEST_CONCURRENCY:-2}}
traces=$(mktemp -d)
trap 'rm -rf "$traces"' EXIT
# Under `cargo test` each test binary runs under the watch as cargo's target runner: real wgpu
# work on lavapipe, whose verdict must be a plain pass (a teardown fault would be said).
cargo build -q --all-features --bin gpu-test-permit
GPU_TEST_PERMIT_GPU_MEMORY=256MiB GPU_TEST_PERMIT_TRACE="$traces/cargo-test.json" \
    env "$runner_var=$PWD/target/debug/gpu-test-permit watch --" \
    cargo test -p gpu-test-permit-example-suite --all-features -q 2>&1 | tee "$traces/watched.log"
if grep -q 'gpu-test-permit: \(teardown fault\|crash\)' "$traces/watched.log"; then
    echo "the example suite on lavapipe had a verdict other than a pass"; exit 1
fi
GPU_TEST_PERMIT_GPU_MEMORY=256MiB GPU_TEST_PERMIT_TRACE="$traces/nextest.json" \
    GPU_TEST_PERMIT_SKIP_LOG="$traces/skips.log" \
    cargo nextest run -p gpu-test-permit-example-suite --all-features --status-level fail
# Its JUnit report as CI would show it: every test that skipped at run time (here the CUDA tests
# where there is no CUDA driver) marked skipped, as many as the skip log counts, none passed.
gtp() { cargo run -q --all-features --bin gpu-test-permit -- "$@"; }
gtp junit target/nextest/default/junit.xml -o "$traces/junit.xml"
# The run that report reads is named: the uuid nextest writes on the JUnit report's root.
gtp report --run-id "$(grep -o 'uuid="[^"]*"' target/nextest/default/junit.xml | head -n1 | cut -d'"' -f2)"
skips=$(grep -c . "$traces/skips.log" || true)
marked=$(grep -c '<skipped message="backend=' "$traces/junit.xml" || true)
echo "== example suite JUnit report: $marked tests marked skipped, $skips skips logged"
[ "$marked" -eq "$skips" ] || { echo "the JUnit report marks $marked skips, the log has $skips"; exit 1; }
grep -q "<testsuites [^>]*skipped=\"$skips\"" "$traces/junit.xml" ||
    { echo "the report's skipped count is not $skips"; exit 1; }
# Without a CUDA device (`probe` exits 1 where CUDA is required and absent), every CUDA test.
if ! GPU_TEST_PERMIT_REQUIRE=cuda gtp probe cuda >/dev/null 2>&1; then
    cuda_tests=$(grep -c '^fn ' example-suite/tests/cuda.rs)
    cuda_marked=$(grep -c '<skipped message="backend=cuda' "$traces/junit.xml" || true)
    [ "$cuda_marked" -eq "$cuda_tests" ] ||
        { echo "without CUDA, $cuda_marked of $cuda_tests CUDA tests are marked skipped"; exit 1; }
fi
for t in cargo-test nextest; do
    echo "== example suite trace ($t)"
    gtp trace "$traces/$t.json" --max-peak "$n" |
        tail -n 12
done

# One CUDA probe per nextest run: the example suite's CUDA tests, one process each, against the
# stand-in driver (cli/tests/stub/cuda_probe.c) that reports no device and counts its cuInit calls.
stub="$traces/stub"
mkdir -p "$stub"
cc -shared -fPIC -O1 -o "$stub/libcuda.so.1" cli/tests/stub/cuda_probe.c
cp "$stub/libcuda.so.1" "$stub/libcuda.so"
LD_LIBRARY_PATH="$stub" CUDA_PROBE_STUB=zero CUDA_PROBE_STUB_COUNT="$stub/cuinit-calls" \
    GPU_TEST_PERMIT_REQUIRE=none GPU_TEST_PERMIT_DIR="$stub/slots" \
    cargo nextest run -p gpu-test-permit-example-suite --all-features -E 'binary(cuda)' \
    --status-level fail
calls=$(wc -l < "$stub/cuinit-calls")
echo "== CUDA probes in a nextest run of $(grep -c '^fn ' example-suite/tests/cuda.rs) test processes: $calls"
[ "$calls" -eq 1 ] || { echo "expected exactly one CUDA probe in the run"; exit 1; }

scripts/chaos.sh --ci  # the adversary: seeded scenarios that try to break the cap (docs/adversary.md)
RUSTFLAGS="--cfg loom" cargo test --release --target-dir target/loom -p gpu-test-permit --lib loom_model
