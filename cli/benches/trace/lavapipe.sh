#!/usr/bin/env bash
# Checks the trace summary's what-if model on this machine: traces the example suite under
# cargo nextest at each N of NS (default "2 1 3 4 8"), RUNS rounds (default 5), interleaved,
# after one untraced run that warms the caches; then predicts each round's spans at the other
# N from its N = 2 trace alone, and from its N = 1 and N = 2 traces fitted together. The
# repository's nextest config puts the GPU tests in a test group of 2, which would cap N = 4
# at 2: these runs use a config without it, and 16 test threads (as the H100 traces in
# cli/tests/data/h100-example-suite did), so that N alone caps them.
set -euo pipefail
cd "$(dirname "$0")/../../.."
runs=${RUNS:-5}
out=${OUT:-$(mktemp -d)}
pkg=gpu-test-permit-example-suite
config=$out/nextest.toml
printf '[profile.default]\nslow-timeout = { period = "60s", terminate-after = 3 }\n' >"$config"
cargo nextest run -p "$pkg" --all-features --config-file "$config" --no-run 2>/dev/null
mkdir -p "$out/slots" && chmod 700 "$out/slots"
GPU_TEST_PERMIT_DIR=$out/slots GPU_TEST_PERMIT_REQUIRE=wgpu \
    cargo nextest run -p "$pkg" --all-features --config-file "$config" --test-threads 16 >/dev/null 2>&1
for r in $(seq "$runs"); do
    for n in ${NS:-2 1 3 4 8}; do
        trace=$out/nextest-N$n-r$r.json
        rm -f "$trace"
        s=$(date +%s.%N)
        GPU_TEST_PERMIT_DIR=$out/slots GPU_TEST_PERMIT_REQUIRE=wgpu GPU_TEST_PERMIT_TRACE=$trace \
            GPU_TEST_PERMIT_CONCURRENCY=$n REALIZAR_GPU_TEST_CONCURRENCY=$n \
            cargo nextest run -p "$pkg" --all-features --config-file "$config" --test-threads 16 \
            >/dev/null 2>&1
        e=$(date +%s.%N)
        printf 'round %s N = %s: wall %.2f s\n' "$r" "$n" "$(awk "BEGIN { print $e - $s }")"
    done
done
GPU_TEST_PERMIT_MODEL_TRACES=$out cargo nextest run -E 'test(trace_model_on_traces_in_a_directory)' --run-ignored only \
    --no-capture 2>/dev/null | grep '^|'
echo "traces in $out"
