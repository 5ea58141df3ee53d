#!/usr/bin/env bash
# Builds, on a machine with Rust, everything a GPU machine without Rust needs to validate this
# crate on its GPU, into one folder (default gpu-run/, ignored by git):
#
#   bin/gpu-test-permit       the CLI, release, every feature, stripped
#   bin/gpu-test-permit-no-features   the CLI built without features
#   bin/native-no-features    fixtures/no-features' tests: a crate using the crate without features
#   bin/cargo-nextest.xz      cargo-nextest itself (xz; the GPU machine needs no Rust)
#   tests.tar.zst             a nextest archive: the crate's integration tests (`it`) and the
#                             example suite's test binaries, release, every feature, stripped
#   adopter.tar.zst           a nextest archive of fixtures/adopter (wgpu 27, no feature of this
#                             crate; some of its tests open the GPU without a permit)
#   bin/nvml-loads            scripts/nvml-loads.c: NVML's calls as the crate makes them, timed,
#                             and the driver libraries mapped after each
#   bin/linked-to-libcuda     a program linked to libcuda.so.1 at build time (DT_NEEDED) that
#                             calls nothing of it: mapped at start, no GPU touched
#   workspace/                what the tests read at run time: the stand-in driver sources
#                             (cli/tests/stub/*.c) and the nextest configuration
#   debs/                     Debian's Vulkan loader (libvulkan1), for a machine without one
#   gpu-device.sh             the script that runs it all there (scripts/gpu-device.sh)
#   order-timing.sh           the example suite before and after its order is learned
#   build-info                the commit and the tool versions, for the report
#
# Usage: scripts/gpu-validate.sh [FOLDER]
# Then, on the GPU machine, from the folder's parent: FOLDER/gpu-device.sh (see that script and
# docs/gpu-validation.md). The build goes to target/gpu-run (GPU_VALIDATE_TARGET_DIR), apart from
# the usual debug and release builds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=${1:-gpu-run}
case $dir in /*) ;; *) dir=$root/$dir ;; esac
target=${GPU_VALIDATE_TARGET_DIR:-$root/target/gpu-run}

# The folder travels beside the working tree, never in a commit: ignore it where it is inside.
case $dir/ in
"$root"/*)
    rel=/${dir#"$root"/}/
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    if ! grep -qxF "$rel" "$exclude" 2>/dev/null; then
        echo "$rel" >>"$exclude"
        echo "gpu-validate: added $rel to $exclude"
    fi
    ;;
esac

command -v cargo-nextest >/dev/null || {
    echo "gpu-validate: cargo-nextest is missing (cargo install cargo-nextest --locked)" >&2
    exit 1
}

# Release and stripped: the binaries travel, and debug ones with debug info are about 120 MB each.
export CARGO_PROFILE_RELEASE_STRIP=true
tests=()
for t in cli/tests/it example-suite/tests/*.rs; do
    t=${t##*/}
    tests+=(--test "${t%.rs}")
done
echo "gpu-validate: building into $target"
nice cargo build -q --release --all-features --target-dir "$target" --bin gpu-test-permit
# Remove an earlier build of the folder, and nothing else.
if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/build-info" ]; then
    echo "gpu-validate: $dir exists and is not a folder this script made; name another" >&2
    exit 1
fi
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/workspace/cli/tests" "$dir/workspace/example-suite" "$dir/debs"
nice cargo nextest archive --release --all-features --target-dir "$target" \
    -p gpu-test-permit-cli -p gpu-test-permit-example-suite "${tests[@]}" \
    --archive-file "$dir/tests.tar.zst" 2>&1 | grep -v '^ *Compiling' || true
[ -s "$dir/tests.tar.zst" ] || { echo "gpu-validate: the nextest archive failed" >&2; exit 1; }
cp "$target/release/gpu-test-permit" "$dir/bin/"
# The adopter, as a project that knows nothing of features uses the crate (its own wgpu).
nice cargo nextest archive --release --target-dir "$target" -p gpu-test-permit-adopter \
    --archive-file "$dir/adopter.tar.zst" 2>&1 | grep -v '^ *Compiling' || true
[ -s "$dir/adopter.tar.zst" ] || { echo "gpu-validate: the adopter's nextest archive failed" >&2; exit 1; }
# Linked to libcuda at build time: against a stand-in named as the driver's soname, so that on
# the GPU machine the loader maps the real driver as the program starts.
stub=$(mktemp -d)
printf 'int cuInit(unsigned int flags) { (void)flags; return 0; }\n' >"$stub/cuda.c"
printf 'int main(void) { return 0; }\n' >"$stub/main.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stub/libcuda.so" "$stub/cuda.c"
cc -o "$dir/bin/linked-to-libcuda" "$stub/main.c" -Wl,--no-as-needed -L"$stub" -lcuda
rm -rf "$stub"
# NVML's calls as the crate makes them: what each costs, and what `nvmlInit` maps.
cc -O1 -o "$dir/bin/nvml-loads" scripts/nvml-loads.c -ldl
# Without features, as a project on wgpu or CUDA bindings of its own uses the crate: the CLI, and
# the test binary of fixtures/no-features, each built apart so that no feature of the builds
# above is unified into it.
nice cargo build -q --release --target-dir "$target" --bin gpu-test-permit
cp "$target/release/gpu-test-permit" "$dir/bin/gpu-test-permit-no-features"
native=$(nice cargo test -q --release --no-run --target-dir "$target" -p gpu-test-permit-no-features \
    --test native --message-format json | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$native" ] || { echo "gpu-validate: fixtures/no-features' test binary failed to build" >&2; exit 1; }
cp "$native" "$dir/bin/native-no-features"
nice xz -T0 -6 -c "$(command -v cargo-nextest)" >"$dir/bin/cargo-nextest.xz"

# The tests' files: nextest remaps the workspace to this folder (CARGO_MANIFEST_DIR at run time).
cp -r cli/tests/stub "$dir/workspace/cli/tests/"
cp cli/Cargo.toml "$dir/workspace/cli/"
cp -r .config "$dir/workspace/"
cp Cargo.toml "$dir/workspace/"
cp example-suite/Cargo.toml "$dir/workspace/example-suite/"
mkdir -p "$dir/workspace/fixtures/adopter"
cp fixtures/adopter/Cargo.toml "$dir/workspace/fixtures/adopter/"

# A Vulkan loader for a GPU machine whose image has none (the NVIDIA driver brings only the ICD).
if ! (cd "$dir/debs" && apt-get download -q libvulkan1 >/dev/null 2>&1); then
    cached=$(find /var/cache/apt/archives -name 'libvulkan1_*.deb' 2>/dev/null | head -n 1 || true)
    if [ -n "$cached" ]; then
        cp "$cached" "$dir/debs/"
    else
        echo "gpu-validate: no libvulkan1 package to bring (apt-get download failed): the GPU" \
            "machine must have a Vulkan loader of its own" >&2
    fi
fi

cp scripts/gpu-device.sh scripts/order-timing.sh "$dir/"
{
    changes=$([ -z "$(git status --porcelain)" ] || echo ' with uncommitted changes')
    echo "commit=$(git rev-parse --short=12 HEAD)$changes"
    echo "commit_date=$(git log -1 --format=%cs)"
    echo "built=$(date -u +%Y-%m-%dT%H:%MZ)"
    echo "rustc=$(rustc --version)"
    echo "nextest=$(cargo-nextest nextest --version | head -n 1)"
    echo "example_tests=$(find example-suite/tests -maxdepth 1 -name '*.rs' -printf '%f\n' |
        sed 's/\.rs$//' | sort | paste -sd' ')"
} >"$dir/build-info"

echo "gpu-validate: $dir"
(cd "$dir" && find . -type f -printf '%s %p\n' | sort -k2 |
    awk '{ printf "  %8.1f MiB  %s\n", $1 / 1048576, substr($2, 3) }')
echo "gpu-validate: $(du -sh "$dir" | cut -f1) in all; on the GPU machine: ${dir#"$root"/}/gpu-device.sh"
