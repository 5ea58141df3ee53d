#!/usr/bin/env bash
# What a project pays to build with the library as a dev-dependency: a fresh one-test crate
# (`tests/gpu.rs` takes one permit), `gpu-test-permit` a path dev-dependency without features,
# built clean with `cargo test --no-run` in the default dev profile and with
# `CARGO_INCREMENTAL=0`, as a registry dependency builds. Each build is timed two ways:
#
#   total    user + system CPU of the whole build (cargo, every rustc, every build script);
#   library  user + system CPU of the rustc that compiles `gpu-test-permit` itself (a
#            RUSTC_WRAPPER times each rustc and names its crate);
#
# plus the wall time and the CPU of each dependency, summed over the crates of the build.
#
# The working tree is built, and beside it each git revision given (`git archive` of it, with
# its own Cargo.lock, so each side builds the dependency versions it was tested with), the sides
# in turn, ROUNDS rounds (default 3), each build from an empty target directory; the report
# gives each side's median and its ratio to the first revision given.
#
# Usage: scripts/build-cost.sh [REV ...]          # e.g. scripts/build-cost.sh bd56f07
#        ROUNDS=5 scripts/build-cost.sh bd56f07
# Needs the dependencies in cargo's cache (it builds with --offline after one fetch).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rounds=${ROUNDS:-3}

# The wrapper that times each rustc: scripts/rustc-timed.sh (`<crate> <lib|test> <user> <sys>`).
wrap=$root/scripts/rustc-timed.sh

# The user crate in `$1`, depending on the library at `$2`, with lock file `$3`.
make_crate() {
    mkdir -p "$1/src" "$1/tests"
    printf '%s\n' \
        '[package]' \
        'name = "build-cost-user"' \
        'version = "0.0.0"' \
        'edition = "2024"' \
        'publish = false' \
        '' \
        '[dev-dependencies]' \
        "gpu-test-permit = { path = \"$2\" }" \
        '' \
        '[workspace]' >"$1/Cargo.toml"
    : >"$1/src/lib.rs"
    printf '%s\n' \
        '#[test]' \
        'fn takes_a_permit() {' \
        '    let _permit = gpu_test_permit::acquire();' \
        '}' >"$1/tests/gpu.rs"
    cp "$3" "$1/Cargo.lock"
    # Resolve once (online if it must), so that the timed builds fetch nothing.
    (cd "$1" && cargo fetch -q 2>/dev/null || cargo fetch)
}

labels=(now)
make_crate "$work/user-now" "$root" "$root/Cargo.lock"
for rev in "$@"; do
    full=$(git -C "$root" rev-parse --verify "$rev^{commit}")
    label=${full:0:7}
    mkdir -p "$work/src-$label"
    git -C "$root" archive --format=tar "$full" | tar -x -C "$work/src-$label"
    make_crate "$work/user-$label" "$work/src-$label" "$work/src-$label/Cargo.lock"
    labels+=("$label")
done

# One clean build of side `$1`, round `$2`: prints `<total> <library> <wall>` seconds.
build_once() {
    local dir=$work/user-$1 log=$work/log-$1-$2 start end t
    rm -rf "$dir/target"
    : >"$log"
    start=$(date +%s.%N)
    TIMEFORMAT='%U %S'
    t=$({ time (cd "$dir" && RUSTC_TIMED_LOG=$log RUSTC_WRAPPER=$wrap \
        CARGO_INCREMENTAL=0 cargo test -q --offline --no-run >/dev/null 2>"$work/err"); } 2>&1) || {
        echo "build-cost: the build of $1 failed:" >&2
        cat "$work/err" >&2
        exit 1
    }
    end=$(date +%s.%N)
    awk -v t="$t" -v s="$start" -v e="$end" '
        $1 == "gpu_test_permit" { lib += $3 + $4 }
        END { split(t, a, " "); printf "%.2f %.2f %.2f\n", a[1] + a[2], lib, e - s }' "$log"
}

for ((r = 1; r <= rounds; r++)); do
    for label in "${labels[@]}"; do
        read -r total lib wall < <(build_once "$label" "$r")
        echo "round $r  $label  total ${total}s  library ${lib}s  wall ${wall}s" >&2
        echo "$label $total $lib $wall" >>"$work/results"
    done
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
echo "clean build of a one-test crate with gpu-test-permit as a dev-dependency (dev, no features,"
echo "CARGO_INCREMENTAL=0), median of $rounds rounds, CPU seconds (user + system):"
printf '%-10s %10s %10s %10s\n' side total library wall
base=${labels[1]:-now}
for label in "${labels[@]}"; do
    total=$(awk -v l="$label" '$1 == l { print $2 }' "$work/results" | median)
    lib=$(awk -v l="$label" '$1 == l { print $3 }' "$work/results" | median)
    wall=$(awk -v l="$label" '$1 == l { print $4 }' "$work/results" | median)
    printf '%-10s %10s %10s %10s\n' "$label" "$total" "$lib" "$wall"
    echo "$label $total $lib" >>"$work/medians"
done
if [ "${#labels[@]}" -gt 1 ]; then
    read -r _ bt bl < <(grep "^$base " "$work/medians")
    read -r _ nt nl < <(grep "^now " "$work/medians")
    awk -v nt="$nt" -v bt="$bt" -v nl="$nl" -v bl="$bl" -v b="$base" \
        'BEGIN { printf "now / %s: total %.2fx, library %.2fx\n", b, nt / bt, nl / bl }'
fi
echo
echo "CPU by crate, the last round (seconds, the largest first):"
for label in "${labels[@]}"; do
    echo "  $label: $(awk '{ c[$1] += $3 + $4 } END { for (k in c) printf "%s %.2f\n", k, c[k] }' \
        "$work/log-$label-$rounds" | sort -k2 -rn | head -n 12 | tr '\n' ' ')"
done
