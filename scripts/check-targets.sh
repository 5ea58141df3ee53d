#!/usr/bin/env bash
# The library and the CLI, with every feature and with none (the probe's driver libraries
# loaded at run time differ by platform), type-check for the other platforms the crate
# supports: Linux on aarch64 (GB10 runners), macOS and Windows. Only Linux x86-64 runs the tests
# here; this at least compiles each platform's `sys` code. Needs each target's standard library
# (`rustup target add`, done below where rustup can fetch it).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(aarch64-unknown-linux-gnu x86_64-apple-darwin x86_64-pc-windows-gnu)
rustup target add "${targets[@]}" >/dev/null
for t in "${targets[@]}"; do
    echo "== cargo check --target $t"
    cargo check -q -p gpu-test-permit -p gpu-test-permit-cli --lib --bins --all-features --target "$t"
    echo "== cargo check --target $t (no features)"
    cargo check -q -p gpu-test-permit -p gpu-test-permit-cli --lib --bins --target "$t"
done
