#!/usr/bin/env bash
# The adversary (fixtures/chaos, docs/adversary.md): seeded scenarios of real processes that try
# to break the cap, with oracles that flag a broken promise. Exits non-zero on any violation.
#
#   scripts/chaos.sh --ci                     the fixed seeds CI runs (about four minutes)
#   CHAOS_KEEP=1 scripts/chaos.sh ...         keep every scenario's directory (trace, logs, records)
#   scripts/chaos.sh --minutes M [--seed S]   scenarios of one seed for M minutes
#   scripts/chaos.sh --seed S [--scenario K]  replay one seed (its first scenario, or scenario K)
#
# As root it also runs processes of another user (setpriv, uid 65534) and small tmpfs slot
# directories; as another user it skips those and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build -q -p gpu-test-permit-cli --bin gpu-test-permit
cargo build -q -p gpu-test-permit-chaos --features multi-gpu
bin=${CARGO_TARGET_DIR:-target}/debug
# The test suite that crashes or hangs after (or around) its tests (fixtures/verdicts), which
# some scenarios run under `gpu-test-permit watch`, and the stand-in library whose destructor
# does so as it is unloaded. Without them the driver leaves that operation out, and says so.
suite_args=()
suite=$(cargo test -q -p gpu-test-permit-verdicts --test suite --no-run --message-format=json |
    grep '"name":"suite"' | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | tail -n 1) || suite=
if [ -n "$suite" ]; then
    suite_args=(--suite "$suite")
    unload=$bin/libverdicts-unload.so
    if cc -shared -fPIC -O1 -o "$unload" cli/tests/stub/verdicts_unload.c 2>/dev/null; then
        suite_args+=(--unload-lib "$unload")
    fi
fi
drive() { "$bin/chaos" --cli "$bin/gpu-test-permit" --client "$bin/chaos-client" "${suite_args[@]}" "$@"; }

# The CI set: seeds whose scenarios, at 2acda4f, found the background job that outlives `run`,
# fork without exec, two users under one `run` and a killed `run`'s layout rewritten, and at
# bd56f07 find-gpu-tests' permits outside the host's cap, a head delayed by a request let past
# it on a holder's grant time an hour ahead, a waiter whose wait-file name was taken never
# listed, and watched tests' driver loads named wrongly (docs/adversary.md).
# Whenever the driver changes, run the set against builds of those commits too and record what
# it still finds (docs/adversary.md, "The CI set against the commits before each round's fixes").
CI_SEEDS=(1 2 3)
CI_SCENARIOS=8
# And single scenarios of other seeds whose attack is a timeout storm (a timed-out wait's
# diagnostics once unlocked another thread's slot, at eb6b051), and the quiet scenarios of
# another user's doing that found the fifth round's breaks at 8a0be2f: the layout raised by a
# plain write (7/7), a unit leaked by a panic inside acquire() (15/1), this user's run records
# pushed out by another user's run files dated ahead (14/4), a first permit delayed by another
# user's large run files (33/3), and this user's record files emptied by another user (15/2).
# And two whose draw runs test suites under `gpu-test-permit watch` (fixtures/verdicts), which
# at 8a0be2f (no verdicts) failed their teardown faults and hung on a process that never
# exits: 25/7 (a test that always crashes, then a crash at exit under
# GPU_TEST_PERMIT_TEARDOWN=fail) and 51/5 (a library's destructor that spins as it is unloaded,
# then an exit handler that spins under GPU_TEST_PERMIT_TEARDOWN=fail).
# And 7/2, a slot directory restored from an earlier job at a higher N (an ephemeral runner's
# CI cache), on which the next run's short tests backfill by the hold times it learns from it.
CI_SINGLE=("33 0" "14 0" "7 7" "15 1" "14 4" "33 3" "15 2" "25 7" "51 5" "7 2")

case "${1:-}" in
    --ci)
        status=0
        for seed in "${CI_SEEDS[@]}"; do
            drive --seed "$seed" --scenarios "$CI_SCENARIOS" || status=1
        done
        for one in "${CI_SINGLE[@]}"; do
            set -- $one
            drive --seed "$1" --scenario "$2" || status=1
        done
        exit "$status"
        ;;
    --minutes)
        shift
        minutes=$1
        shift
        seed=$(date +%s)
        [ "${1:-}" = --seed ] && seed=$2
        drive --seed "$seed" --minutes "$minutes"
        ;;
    --seed)
        drive "$@"
        ;;
    *)
        echo "usage: scripts/chaos.sh --ci | --minutes M [--seed S] | --seed S [--scenario K]" >&2
        exit 2
        ;;
esac
