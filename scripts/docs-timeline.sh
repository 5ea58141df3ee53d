#!/usr/bin/env bash
# The pictures of the cap in docs/guide/how-it-works.md, from a real run: the example suite's
# 25 `gpu_f32_*` wgpu tests under `cargo test` on 8 test threads, once with N = 2 and once with
# N = 16 (more permits than threads: no cap), each traced (GPU_TEST_PERMIT_TRACE) into
# docs/guide/timeline/, then drawn by `gpu-test-permit trace FILE --timeline`. Needs a Vulkan
# driver (lavapipe: apt-get install -y mesa-vulkan-drivers). `cargo test --test it docs` in
# cli/ checks that the page shows what the command draws from the committed traces.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/guide/timeline
mkdir -p "$out"
cargo build -q -p gpu-test-permit-cli
cargo test -q -p gpu-test-permit-example-suite --all-features --test wgpu_compute --no-run
for run in capped:2 uncapped:16; do
    name=${run%%:*} n=${run##*:}
    slots=$(mktemp -d)
    rm -f "$out/$name.json"
    GPU_TEST_PERMIT_DIR=$slots GPU_TEST_PERMIT_TRACE="$PWD/$out/$name.json" \
        GPU_TEST_PERMIT_REQUIRE=wgpu REALIZAR_GPU_TEST_CONCURRENCY=$n \
        cargo test -q -p gpu-test-permit-example-suite --all-features --test wgpu_compute \
        -- gpu_f32 --test-threads 8 >"$slots/out" 2>&1 || { cat "$slots/out"; exit 1; }
    rm -rf "$slots"
    echo "N = $n ($out/$name.json):"
    target/debug/gpu-test-permit trace "$out/$name.json" --timeline | sed '/^$/q'
done
