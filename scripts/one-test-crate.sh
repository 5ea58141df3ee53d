# shellcheck shell=bash
# The one-crate test binary that scripts/link-cost.sh and scripts/link-size.sh build: sourced
# by both, so that both measure the same binary.

# A test crate in `$1` named `$2`, with two tests: `takes_a_permit` and `takes_none`. With a
# crate at `$3` as a path dependency (the package `$4`, gpu-test-permit where none is named),
# `takes_a_permit` calls its `acquire()` and `takes_none` touches its `PermitKind`; without
# (`$3` empty), both do trivial work. With `$5` = `cpu-only`, a binary of CPU tests that links the
# crate: both tests touch its `PermitKind`, neither takes a permit (so nothing reaches `acquire()`).
one_test_crate() {
    mkdir -p "$1/src" "$1/tests"
    {
        printf '%s\n' '[package]' "name = \"$2\"" 'version = "0.0.0"' \
            'edition = "2024"' 'publish = false' '' '[dependencies]'
        [ -z "${3:-}" ] || printf '%s = { path = "%s" }\n' "${4:-gpu-test-permit}" "$3"
        printf '%s\n' '' '[workspace]'
    } >"$1/Cargo.toml"
    : >"$1/src/lib.rs"
    if [ -z "${3:-}" ]; then
        printf '%s\n' \
            '#[test]' \
            'fn takes_a_permit() {' \
            '    std::hint::black_box(1_u8);' \
            '}' \
            '' \
            '#[test]' \
            'fn takes_none() {' \
            '    std::hint::black_box(0_u8);' \
            '}' >"$1/tests/trivial.rs"
    else
        local lib
        lib=$(printf '%s' "${4:-gpu-test-permit}" | tr - _)
        local permit="    let _permit = ${lib}::acquire();"
        [ "${5:-}" != cpu-only ] || permit="    std::hint::black_box(${lib}::PermitKind::Shared);"
        printf '%s\n' \
            '#[test]' \
            'fn takes_a_permit() {' \
            "$permit" \
            '}' \
            '' \
            '#[test]' \
            'fn takes_none() {' \
            "    std::hint::black_box(${lib}::PermitKind::Shared);" \
            '}' >"$1/tests/trivial.rs"
    fi
}

# Builds the test crate in `$1` (dev, CARGO_INCREMENTAL=0) in target directory `$2`, with
# cargo's further arguments after them, and prints the path of its test binary.
test_binary() {
    local dir=$1 target=$2 bin
    shift 2
    bin=$(cd "$dir" && CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$target" cargo test --quiet \
        --no-run --message-format=json "$@" 2>/dev/null |
        grep -o '"executable":"[^"]*trivial-[^"]*"' | cut -d'"' -f4 | tail -n1)
    [ -x "$bin" ] || {
        echo "$(basename "$0" .sh): the test binary of $dir was not built" >&2
        exit 1
    }
    echo "$bin"
}
