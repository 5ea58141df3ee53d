#!/usr/bin/env bash
# Miri over the in-process permit (cli/tests/it/in_process.rs): the seats' unsafe code, the guards
# that move between threads, a pool freed by its last permit. Needs the nightly toolchain with
# the miri component (`rustup component add --toolchain nightly miri rust-src`).
#
# Permissive provenance: parking_lot's word lock stores pointers in integers (not this crate's
# code); Miri warns about it otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-permissive-provenance}" \
    cargo +nightly miri test -p gpu-test-permit-cli --test it -- in_process::
# And the library's sorts, which move elements as bytes (`order::permute`): strings, boxes and
# zero-sized elements among them.
MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-permissive-provenance}" \
    cargo +nightly miri test -p gpu-test-permit --lib -- order::
