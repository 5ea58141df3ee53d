#!/usr/bin/env bash
# What each way of adopting the library costs a large library crate to build: naga 30.0.2 (the
# shader translator under wgpu, 119k lines, 133 `#[test]` functions, no integration test in its
# package) with its front and back ends on (`features` below, passed to every build), as
# published, and the same crate taking `gpu-test-permit` (a path dependency on this tree, no
# features) in two ways:
#
#   none      the crate as published;
#   cfg-test  optional dependency behind feature `test-permits` and a dev-dependency, the
#             crate's use of it (a module with a `pub fn` taking a permit and a `#[test]`
#             calling it) under `#[cfg(any(test, feature = "test-permits"))]`: unit tests get
#             permits with no second build of the library;
#   feature   the same optional dependency, the use under `#[cfg(feature = "test-permits")]`,
#             and a dev-dependency on the crate itself with that feature, so that integration
#             tests would get permits too: `cargo test --lib` then compiles the library twice,
#             once as the dependency and once as the test harness.
#
# With each recipe's dependencies built first (in its own target directory; that first build
# is printed apart), four builds of the crate's own targets, each timed as wall time and the
# user + system CPU of the whole cargo command:
#
#   clean --lib   `cargo test --lib --no-run` after `cargo clean -p naga` and with no
#                 incremental cache (`cargo clean -p` leaves it);
#   edit --lib    the same again after a one-line edit (`BRACE_NESTING_MAXIMUM`, 127 <-> 126,
#                 in src/front/wgsl/parse/mod.rs), the dev profile's incremental compilation on;
#   clean all     `cargo test --no-run` (every test target: for naga, the library and its unit
#                 tests) after `cargo clean -p naga`, no incremental cache;
#                 (each clean build rebuilds naga's build script too, in every recipe)
#   edit all      the same again after the edit.
#
# A RUSTC_WRAPPER counts the crate's own rustc runs; the first build of each recipe is also run
# with `-v`, whose `Running` lines for the crate are counted. ROUNDS rounds (default 3); within a
# round each build in turn for the three recipes; the report gives medians and ratios to `none`.
#
# Usage: scripts/adoption-cost.sh                 # ~18 min on 2 cores at ROUNDS=3
#        ROUNDS=1 scripts/adoption-cost.sh
# Fetches the package once (online if cargo's cache lacks it), then builds --offline.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rounds=${ROUNDS:-3}
name=naga version=30.0.2
features=wgsl-in,spv-in,glsl-in,wgsl-out,spv-out,msl-out,glsl-out,hlsl-out,dot-out,fs,stderr
edit_file=src/front/wgsl/parse/mod.rs edit_a='BRACE_NESTING_MAXIMUM: u8 = 127;'
edit_b='BRACE_NESTING_MAXIMUM: u8 = 126;'
recipes=(none cfg-test feature)
unset CARGO_INCREMENTAL CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR

# The source, through cargo: a throwaway project depending on the exact version.
mkdir -p "$work/fetch/src"
printf '%s\n' '[package]' 'name = "fetch"' 'version = "0.0.0"' 'edition = "2021"' '' \
    '[dependencies]' "$name = \"=$version\"" '' '[workspace]' >"$work/fetch/Cargo.toml"
: >"$work/fetch/src/lib.rs"
(cd "$work/fetch" && cargo fetch -q)
src=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -maxdepth 2 -type d -name "$name-$version" |
    head -n 1)

# The wrapper that times each rustc: scripts/rustc-timed.sh (`<crate> <lib|test> <user> <sys>`).
wrap=$root/scripts/rustc-timed.sh

# Recipe `$1`'s copy of the crate, in $work/$1.
make_crate() {
    local dir=$work/$1 cfg
    cp -r "$src" "$dir"
    chmod -R u+w "$dir"
    if [ "$1" != none ]; then
        sed -i 's/^\[features\]$/[features]\ntest-permits = ["dep:gpu-test-permit"]/' "$dir/Cargo.toml"
        printf '%s\n' '' '[dependencies.gpu-test-permit]' "path = \"$root\"" 'optional = true' \
            >>"$dir/Cargo.toml"
        cfg='any(test, feature = "test-permits")'
    fi
    case $1 in
    cfg-test)
        printf '%s\n' '' '[dev-dependencies.gpu-test-permit]' "path = \"$root\"" >>"$dir/Cargo.toml" ;;
    feature)
        printf '%s\n' '' "[dev-dependencies.$name]" 'path = "."' 'default-features = false' \
            'features = ["test-permits"]' >>"$dir/Cargo.toml"
        cfg='feature = "test-permits"' ;;
    esac
    printf '%s\n' '' '[workspace]' >>"$dir/Cargo.toml"
    if [ "$1" != none ]; then
        printf '%s\n' '' "#[cfg($cfg)]" 'pub mod test_permits;' >>"$dir/src/lib.rs"
        printf '%s\n' '//! GPU test permits for this crate'"'"'s tests.' '' \
            '/// Takes a permit to use the GPU, held until the value is dropped.' \
            'pub fn gpu_permit() -> gpu_test_permit::GpuTestPermit {' \
            '    gpu_test_permit::acquire()' '}' '' '#[test]' 'fn takes_a_permit() {' \
            '    let _permit = gpu_permit();' '}' >"$dir/src/test_permits.rs"
    fi
    (cd "$dir" && cargo fetch -q)
}

# Runs `cargo test --no-run $2...` for recipe `$1`; prints `<cpu> <wall> <crate's rustc runs>`.
build() {
    local r=$1 t
    shift
    : >"$work/log"
    TIMEFORMAT='%U %S %R'
    t=$({ time (cd "$work/$r" && RUSTC_TIMED_LOG=$work/log RUSTC_WRAPPER=$wrap \
        cargo test --offline --no-run --features "$features" "$@" >"$work/out" 2>&1); } 2>&1) || {
        echo "adoption-cost: the build of $r failed:" >&2
        cat "$work/out" >&2
        exit 1
    }
    awk -v t="$t" -v c="$name" '$1 == c { n++ }
        END { split(t, a, " "); printf "%.2f %.2f %d\n", a[1] + a[2], a[3], n }' "$work/log"
}

# The one-line edit in recipe `$1`'s copy, one way or back.
edit() {
    local f=$work/$1/$edit_file
    if grep -qF "$edit_a" "$f"; then
        sed -i "s/$edit_a/$edit_b/" "$f"
    else
        sed -i "s/$edit_b/$edit_a/" "$f"
    fi
    grep -qF "$edit_a" "$f" || grep -qF "$edit_b" "$f"
}

echo "$name $version, gpu-test-permit at $root ($(git -C "$root" rev-parse --short HEAD))" >&2
for r in "${recipes[@]}"; do
    make_crate "$r"
    read -r cpu wall runs < <(build "$r" --lib -v)
    kinds=$(awk -v c="$name" '$1 == c { print $2 }' "$work/log" | sort | paste -sd+)
    verbose=$(grep -c "Running \`.*rustc --crate-name $name " "$work/out" || true)
    read -r cpu2 wall2 _ < <(build "$r")
    echo "dependencies and first build, $r: --lib ${cpu}s CPU ${wall}s wall, rustc of the crate:" \
        "$runs ($kinds; -v Running lines: $verbose); then the rest of all ${cpu2}s CPU ${wall2}s wall" >&2
done

steps=("clean --lib" "edit --lib" "clean all" "edit all")
for ((round = 1; round <= rounds; round++)); do
    for step in "${steps[@]}"; do
        for r in "${recipes[@]}"; do
            case $step in
            clean*)
                (cd "$work/$r" && cargo clean -q --offline -p "$name")
                rm -rf "$work/$r/target/debug/incremental" ;;
            edit*) edit "$r" ;;
            esac
            args=()
            [ "${step#* }" = --lib ] && args=(--lib)
            read -r cpu wall runs < <(build "$r" "${args[@]}")
            echo "round $round  $step  $r  CPU ${cpu}s  wall ${wall}s  rustc of the crate: $runs" >&2
            echo "$step|$r|$cpu|$wall|$runs" >>"$work/results"
        done
    done
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { awk -F'|' -v s="$1" -v r="$2" -v c="$3" '$1 == s && $2 == r { print $c }' "$work/results" | median; }
echo
echo "$name $version, dependencies built; median of $rounds rounds; CPU = user + system of the"
echo "whole cargo command, seconds; runs = rustc runs of the crate itself:"
printf '%-12s %-9s %8s %8s %8s %8s %5s\n' build recipe CPU wall CPU/none wall/none runs
for step in "${steps[@]}"; do
    bc=$(col "$step" none 3) bw=$(col "$step" none 4)
    for r in "${recipes[@]}"; do
        c=$(col "$step" "$r" 3) w=$(col "$step" "$r" 4) n=$(col "$step" "$r" 5)
        awk -v s="$step" -v r="$r" -v c="$c" -v w="$w" -v bc="$bc" -v bw="$bw" -v n="$n" \
            'BEGIN { printf "%-12s %-9s %8.2f %8.2f %7.2fx %8.2fx %5d\n", s, r, c, w, c / bc, w / bw, n }'
    done
done
echo "machine: $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC'), $(rustc --version)"
