#!/usr/bin/env bash
# A RUSTC_WRAPPER for the build-cost scripts (scripts/build-cost.sh, scripts/adoption-cost.sh):
# runs rustc and appends `<crate> <lib|test> <user> <sys>` (CPU seconds) to $RUSTC_TIMED_LOG,
# `test` where rustc builds a test harness (`--test`).
crate='?' kind=lib prev=
for a in "$@"; do
    [ "$prev" = --crate-name ] && crate=$a
    [ "$a" = --test ] && kind='test'
    prev=$a
done
TIMEFORMAT='%U %S'
exec 3>&2 4>&1
# rustc's own output goes where cargo reads it; only `time`'s line is captured.
t=$({ time "$@" 1>&4 2>&3; } 2>&1)
rc=$?
# `time` prints after the command; its line is the last of what was captured.
echo "$crate $kind $(printf '%s\n' "$t" | tail -n 1)" >>"$RUSTC_TIMED_LOG"
exit $rc
