#!/usr/bin/env bash
# The whole test suite: unit, integration and doc tests under `cargo test`, the same under
# `cargo nextest run` (one process per test), and the loom model check of the permit state machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-features
cargo nextest run --workspace --all-features
RUSTFLAGS="--cfg loom" cargo test --release --target-dir target/loom --test loom
