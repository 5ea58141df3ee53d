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
cargo test --workspace --all-features
cargo nextest run --workspace --all-features

# The demos: simulated tests in three processes, and real wgpu compute on six threads (each
# checks its own cap from its trace and fails otherwise).
cargo run -q --example cap_demo
cargo run -q --all-features --example wgpu_demo

# The example suite again, traced, under each runner; the trace proves the cap held.
n=${REALIZAR_GPU_TEST_CONCURRENCY:-2}
traces=$(mktemp -d)
trap 'rm -rf "$traces"' EXIT
GPU_TEST_PERMIT_TRACE="$traces/cargo-test.json" \
    cargo test -p gpu-test-permit-example-suite --all-features -q
GPU_TEST_PERMIT_TRACE="$traces/nextest.json" \
    cargo nextest run -p gpu-test-permit-example-suite --all-features --status-level fail
for t in cargo-test nextest; do
    echo "== example suite trace ($t)"
    cargo run -q --all-features --bin gpu-test-permit -- trace "$traces/$t.json" --max-peak "$n" |
        tail -n 12
done

# One CUDA probe per nextest run: the example suite's CUDA tests, one process each, against the
# stand-in driver (tests/stub/cuda_probe.c) that reports no device and counts its cuInit calls.
stub="$traces/stub"
mkdir -p "$stub"
cc -shared -fPIC -O1 -o "$stub/libcuda.so.1" tests/stub/cuda_probe.c
cp "$stub/libcuda.so.1" "$stub/libcuda.so"
LD_LIBRARY_PATH="$stub" CUDA_PROBE_STUB=zero CUDA_PROBE_STUB_COUNT="$stub/cuinit-calls" \
    GPU_TEST_PERMIT_REQUIRE=none GPU_TEST_PERMIT_DIR="$stub/slots" \
    cargo nextest run -p gpu-test-permit-example-suite --all-features -E 'binary(cuda)' \
    --status-level fail
calls=$(wc -l < "$stub/cuinit-calls")
echo "== CUDA probes in a nextest run of $(grep -c '^fn ' example-suite/tests/cuda.rs) test processes: $calls"
[ "$calls" -eq 1 ] || { echo "expected exactly one CUDA probe in the run"; exit 1; }

RUSTFLAGS="--cfg loom" cargo test --release --target-dir target/loom --test loom
