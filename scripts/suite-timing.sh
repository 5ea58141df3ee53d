#!/usr/bin/env bash
# Wall time of the example GPU suite (example-suite/) at N = 1, 2, 4 under `cargo test` and
# `cargo nextest run`, against `cargo test -- --test-threads=1`. Medians of RUNS runs (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
pkg=gpu-test-permit-example-suite
cargo test -p "$pkg" --all-features --no-run -q 2>/dev/null
cargo nextest run -p "$pkg" --all-features --no-run 2>/dev/null

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_runs() { # label, command...
    local label=$1; shift
    local t
    for _ in $(seq "$runs"); do
        local s e
        s=$(date +%s.%N)
        "$@" >/dev/null 2>&1
        e=$(date +%s.%N)
        awk "BEGIN { print $e - $s }"
    done | median | { read -r t; printf '%-44s %6.2f s\n' "$label" "$t"; }
}

echo "example suite, median of $runs runs, $(nproc) cores"
time_runs "cargo test --test-threads=1" \
    cargo test -p "$pkg" --all-features -q -- --test-threads=1
for n in 1 2 4; do
    time_runs "cargo test, N = $n" \
        env GPU_TEST_PERMIT_CONCURRENCY=$n REALIZAR_GPU_TEST_CONCURRENCY=$n cargo test -p "$pkg" --all-features -q
    # The `gpu` test group in .config/nextest.toml starts at most 2 GPU tests at once.
    time_runs "cargo nextest run, N = $n (group max 2)" \
        env GPU_TEST_PERMIT_CONCURRENCY=$n REALIZAR_GPU_TEST_CONCURRENCY=$n cargo nextest run -p "$pkg" --all-features
done
