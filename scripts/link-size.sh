#!/usr/bin/env bash
# What linking the library puts into a test binary, counted (not timed): the same one-test crate
# as scripts/link-cost.sh (a test that takes a permit, one that takes none), default dev
# profile, CARGO_INCREMENTAL=0, built twice, without the crate and with this checkout as a path
# dependency. For each binary it prints
#
#   text      bytes of machine code (.text);
#   relocs    dynamic relocations: the loader applies every one of them in every test process
#             before `main` (R_X86_64_RELATIVE, nearly all of them);
#   got       entries of the GOT, one for every function the binary's code calls through it (in
#             the dev profile every exported function: the crate's, and the generics that are
#             instantiated for its types and closures);
#
# and what the library adds to each. These counts do not depend on the machine's load, so they
# can be checked: with --check, the run fails where the library adds more relocations than
# LINK_SIZE_MAX_RELOCS (default below: what this revision adds, and a margin for other
# toolchains). The CPU these cost each process is measured by scripts/link-cost.sh.
#
# Usage: scripts/link-size.sh [--check]
# Needs readelf (binutils) and an x86-64 Linux host; elsewhere it says so and does nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# What the library added at the revision that set it, about 10 % more, rounded.
max_relocs=${LINK_SIZE_MAX_RELOCS:-6000}
check=
[ "${1:-}" = --check ] && check=1

if [ "$(uname -sm)" != "Linux x86_64" ] || ! command -v readelf >/dev/null 2>&1; then
    echo "link-size: counts ELF x86-64 relocations; this host is $(uname -sm)$(command -v readelf >/dev/null || echo ', without readelf'): not run"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target=${LINK_SIZE_TARGET:-$work/target}

. "$root/scripts/one-test-crate.sh"

# `text relocs got` of binary $1.
counts() {
    local text relocs got
    # Section lines read "[Nr] Name Type Address Off Size ...": the size is hexadecimal.
    text=$(readelf -SW "$1" | sed 's/^ *\[ *[0-9]*\]//' | awk '$1 == ".text" { print $5 }')
    got=$(readelf -SW "$1" | sed 's/^ *\[ *[0-9]*\]//' | awk '$1 == ".got" { print $5 }')
    relocs=$(readelf -rW "$1" | grep -c '^[0-9a-f]\{16\} ' || true)
    echo "$((16#${text:-0})) $relocs $((16#${got:-0} / 8))"
}

one_test_crate "$work/without" link-size-without ""
one_test_crate "$work/with" link-size-with "$root"
# The versions of the library's dependencies this checkout is tested with.
cp "$root/Cargo.lock" "$work/with/Cargo.lock"
read -r wt wr wg < <(counts "$(test_binary "$work/without" "$target")")
read -r nt nr ng < <(counts "$(test_binary "$work/with" "$target")")
printf '%-22s %12s %10s %8s\n' binary text relocs got
printf '%-22s %12s %10s %8s\n' "without the library" "$wt" "$wr" "$wg"
printf '%-22s %12s %10s %8s\n' "with the library" "$nt" "$nr" "$ng"
printf '%-22s %12s %10s %8s\n' "the library adds" "$((nt - wt))" "$((nr - wr))" "$((ng - wg))"
if [ -n "$check" ]; then
    if [ $((nr - wr)) -gt "$max_relocs" ]; then
        echo "link-size: the library adds $((nr - wr)) dynamic relocations to a test binary, more than $max_relocs: every test process pays for each at start. See CONTRIBUTING.md, \"Code a test process links\"; where the rise is wanted, raise LINK_SIZE_MAX_RELOCS in scripts/link-size.sh and say why." >&2
        exit 1
    fi
    echo "link-size: the library adds $((nr - wr)) dynamic relocations (at most $max_relocs)"
fi
