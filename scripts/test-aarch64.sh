#!/usr/bin/env bash
# The crate's unit and integration tests, built for aarch64-unknown-linux-gnu (the architecture
# of GB10 GPU runners) and run under qemu-user on an x86-64 Debian or Ubuntu machine, one
# process per test (cargo nextest). No GPU: the CUDA tests run against the stand-in driver
# libraries (cli/tests/stub/*.c, built for aarch64 with STUB_CC), the wgpu tests against Mesa's
# lavapipe for arm64 where multiarch can install it. Doctests are not run.
#
# Usage: scripts/test-aarch64.sh [FEATURE-SET...]
#   each FEATURE-SET is one build and run: all (the default: --all-features, that is default,
#   cuda and wgpu together), default, cuda or wgpu.
#
# As root it installs what it needs: the aarch64 cross compiler and C library, qemu-user with
# its binfmt handler, and (adding the arm64 architecture to dpkg) libc6, the Vulkan loader and
# lavapipe for arm64; set AARCH64_VULKAN=no to leave dpkg's architectures alone. Run again, it
# installs nothing twice.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
target=aarch64-unknown-linux-gnu
say() { echo "test-aarch64: $*"; }
have() { command -v "$1" >/dev/null 2>&1; }
root() { [ "$(id -u)" = 0 ] && have apt-get; }
apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(all)
for set in "${sets[@]}"; do
    case "$set" in
    all | default | cuda | wgpu) ;;
    *) say "unknown feature set '$set' (all, default, cuda or wgpu)" >&2; exit 2 ;;
    esac
done

if [ "$(uname -m)" = aarch64 ]; then
    say "this machine is aarch64: run scripts/test-all.sh, natively" >&2
    exit 2
fi

# --- Tools: the cross toolchain, qemu-user and its binfmt handler, nextest.
needed=()
have aarch64-linux-gnu-gcc || needed+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
have qemu-aarch64 || needed+=(qemu-user)
if ! grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
    [ -e /usr/share/binfmts/qemu-aarch64 ] || needed+=(qemu-user-binfmt)
    have update-binfmts || needed+=(binfmt-support)
fi
if [ ${#needed[@]} -gt 0 ]; then
    if root; then
        say "installing ${needed[*]}"
        apt-get update -qq
        apt_install "${needed[@]}"
    else
        say "missing ${needed[*]}; install them (sudo apt-get install ${needed[*]}) and run" \
            "again" >&2
        exit 1
    fi
fi
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
have cargo-nextest || cargo install cargo-nextest --locked

# --- binfmt: the tests start the aarch64 CLI and re-execute themselves (probe children,
# helper tests); with qemu registered as the handler for aarch64 executables, the kernel runs
# them under qemu by itself. In a container binfmt_misc may need mounting, or be unavailable.
binfmt=/proc/sys/fs/binfmt_misc
if root && [ ! -e "$binfmt/status" ]; then
    mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null || true
fi
if root && [ -e "$binfmt/register" ] && ! grep -qx enabled "$binfmt/qemu-aarch64" 2>/dev/null; then
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
fi
if grep -qx enabled "$binfmt/qemu-aarch64" 2>/dev/null; then
    binfmt_ok=1
    say "binfmt: aarch64 executables run under qemu ($(head -c 200 "$binfmt/qemu-aarch64" |
        sed -n 's/^interpreter //p'))"
else
    binfmt_ok=0
    say "binfmt: no handler for aarch64 executables could be registered here (no binfmt_misc," \
        "or not root: sudo update-binfmts --enable qemu-aarch64)"
fi

# --- A Vulkan driver for aarch64: lavapipe from the arm64 architecture of the same release.
vulkan_pkgs=(libc6:arm64 libvulkan1:arm64 mesa-vulkan-drivers:arm64)
arm64_installed() { dpkg-query -W -f='${Status}\n' "$@" 2>/dev/null | grep -c "ok installed"; }
if [ "$(arm64_installed "${vulkan_pkgs[@]}")" != ${#vulkan_pkgs[@]} ] &&
    [ "${AARCH64_VULKAN:-yes}" != no ] && root; then
    added=0
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        dpkg --add-architecture arm64
        added=1
    fi
    # Where the mirror serves no arm64 packages (Ubuntu keeps them on ports.ubuntu.com), the
    # update fails: the architecture is removed again so that apt keeps working as before.
    if apt-get update -qq >/dev/null 2>&1 && apt_install "${vulkan_pkgs[@]}"; then
        say "installed lavapipe for arm64 (${vulkan_pkgs[*]})"
    else
        say "lavapipe for arm64 could not be installed from this machine's apt sources"
        if [ "$added" = 1 ]; then
            dpkg --remove-architecture arm64 2>/dev/null || true
            apt-get update -qq || true
        fi
    fi
fi
if [ "$(arm64_installed libvulkan1:arm64 mesa-vulkan-drivers:arm64)" = 2 ]; then
    vulkan=1
else
    vulkan=0
fi

# --- How aarch64 programs find their C library. With libc6:arm64 installed (multiarch) the
# dynamic loader is at its usual path and qemu needs no prefix; the cross compiler's copy
# under /usr/aarch64-linux-gnu must not be used then, because its loader would pick the
# multiarch libc.so.6 through ld.so.cache and two different glibc builds hang together.
if [ -e /lib/ld-linux-aarch64.so.1 ]; then
    unset QEMU_LD_PREFIX
else
    export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# The tests build their stand-in driver libraries with this compiler (cli/tests/it/stub.rs).
export STUB_CC=aarch64-linux-gnu-gcc
if [ "$binfmt_ok" = 0 ]; then
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64
fi

# --- What cannot pass under qemu-user, whatever the crate does.
excluded=(
    # qemu-user queues a signal sent to the process on whichever thread the host kernel chose,
    # even one that blocks it; `run` takes the signals it forwards on one thread that waits for
    # them, so under qemu a SIGTERM to `run` is often never seen (2 to 6 times in 10 here).
    cli::run_passes_sigterm_on_and_holds_the_slot_until_the_command_exits
    cli::run_dies_of_a_forwarded_sigterm_or_sigint_with_its_command
    hold_timeout::with_a_hold_deadline_a_signal_run_passes_on_reaches_the_commands_process_group
    # It polls `status` every 60 ms to see a heavy request at the head of the queue, where it
    # stays only briefly; emulated, the polls miss it (the request is still served in time).
    weighted_processes::a_heavy_request_is_served_while_light_holders_keep_coming
    # It expects a 300 ms wait to be reported as "waited 0.3s"; emulated, giving up takes long
    # enough past the deadline that it often reads 0.4s.
    cli::a_timed_out_process_lists_the_holder_and_skips_corrupt_records
    # Ten nextest-like runs on a simulated GPU that is 1.5x faster at N = 3 than at 2, and
    # `auto` must find that out. Emulated, starting each test process costs enough CPU on two
    # cores that a run at 3 sometimes does less work at once than one at 2 (1.69 against 1.85
    # tests at once), and `auto` rightly settles at 2 (seen at this commit and at ddf9367).
    # `choose`'s unit tests still run.
    tune::auto_settles_at_the_fastest_n_that_never_hung_and_reexplores_after_a_driver_change
)
if [ "$vulkan" = 0 ]; then
    # Its stand-in Vulkan driver is loaded through the aarch64 Vulkan loader (libvulkan1:arm64).
    excluded+=(probe::a_crashing_or_hanging_vulkan_driver_is_classified)
fi
filter=""
for t in "${excluded[@]}"; do
    filter+="${filter:+ | }test(=$t)"
done

# --- Build and run each feature set.
summaries=()
status=0
build_s=0
test_s=0
for set in "${sets[@]}"; do
    case "$set" in
    all) flags=(--all-features) ;;
    default) flags=() ;;
    *) flags=(--features "$set") ;;
    esac
    # No CUDA driver under qemu; lavapipe is a real wgpu device where it is installed: require
    # it then, so that a missing adapter fails the run instead of skipping the wgpu tests.
    if [ "$vulkan" = 1 ] && [[ "$set" = all || "$set" = wgpu ]]; then
        require=wgpu
    else
        require=none
    fi
    runs=(--lib --bins --test it)
    if [ "$binfmt_ok" = 0 ]; then
        # Without binfmt the kernel cannot start an aarch64 program: the integration tests
        # start the CLI and re-execute their own binary, so only the unit tests run.
        runs=(--lib --bins)
    fi
    say "== $set: building the tests for $target (${flags[*]:-default features})"
    t0=$(date +%s)
    cargo test -q -p gpu-test-permit -p gpu-test-permit-cli "${flags[@]}" --target "$target" "${runs[@]}" --no-run
    t1=$(date +%s)
    skips=$(mktemp)
    log=$(mktemp)
    say "== $set: running them under qemu (GPU_TEST_PERMIT_REQUIRE=$require)"
    set +e
    GPU_TEST_PERMIT_REQUIRE=$require GPU_TEST_PERMIT_SKIP_LOG="$skips" \
        cargo nextest run -p gpu-test-permit -p gpu-test-permit-cli "${flags[@]}" --target "$target" "${runs[@]}" \
        --no-fail-fast --cargo-quiet --status-level fail --final-status-level slow \
        -E "not ($filter)" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    t2=$(date +%s)
    build_s=$((build_s + t1 - t0))
    test_s=$((test_s + t2 - t1))
    [ "$rc" = 0 ] || status=1
    line=$(grep -E '^ *Summary \[' "$log" | tail -n 1 | sed 's/^ *Summary //')
    summaries+=("$set (GPU_TEST_PERMIT_REQUIRE=$require): ${line:-no summary (nextest exit $rc)}")
    summaries+=("  $(wc -l <"$skips") test(s) skipped themselves (no device for a backend):")
    while IFS= read -r skip; do
        summaries+=("    ${skip#gpu-test-permit: SKIP }")
    done < <(cut -c1-150 "$skips" | sort | uniq | head -n 10)
    rm -f "$skips" "$log"
done

# --- Summary.
echo
say "summary ($target under qemu-user, one process per test)"
for s in "${summaries[@]}"; do
    echo "  $s"
done
echo "  nextest's skipped count: the #[ignore]d helper tests (run as children of other tests)"
echo "  and these ${#excluded[@]}, which cannot pass under qemu-user (see this script for why):"
for t in "${excluded[@]}"; do
    echo "    $t"
done
if [ "$vulkan" = 1 ]; then
    echo "  wgpu: Mesa's lavapipe for arm64, required where the wgpu feature is on"
else
    echo "  wgpu: no Vulkan driver for arm64 here (install libvulkan1:arm64 and"
    echo "    mesa-vulkan-drivers:arm64 through multiarch), so GPU_TEST_PERMIT_REQUIRE=none:"
    echo "    the tests that need a wgpu adapter skip"
fi
echo "  CUDA: stand-in driver libraries built for aarch64; no real CUDA under qemu"
if [ "$binfmt_ok" = 0 ]; then
    echo "  binfmt: not registered, so the tests ran through CARGO_TARGET_..._RUNNER=qemu-aarch64"
    echo "    and only the unit tests (--lib --bins) ran: the integration tests start the"
    echo "    aarch64 CLI and re-execute their own binary, which the kernel cannot start"
    echo "    without binfmt (ENOEXEC)"
fi
echo "  wall time: $(($(date +%s) - started))s (builds ${build_s}s, test runs ${test_s}s)"
if [ "$status" = 0 ]; then
    say "passed"
else
    say "FAILED"
fi
exit "$status"
