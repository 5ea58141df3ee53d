#!/usr/bin/env bash
# Validates gpu-test-permit on this machine's GPU, without Rust: runs the binaries that
# scripts/gpu-validate.sh put in this script's folder (gpu-run/ by default), and prints a dated
# Markdown section for docs/gpu-validation.md.
#
# What it runs, with GPU_TEST_PERMIT_REQUIRE=cuda,wgpu (wgpu alone where no CUDA driver is
# installed: the CUDA parts are then reported as "skipped: no CUDA driver", never run and passed):
#   1. `gpu-test-permit probe`, and its exit status under the requirement;
#   2. the crate's integration tests of the capture guard, the fixtures and the probe
#      (`it capture:: fixture:: probe::`), run directly and under nextest;
#   2b. `gpu-test-permit probe --json` built without features (libcuda and the Vulkan loader)
#      against the one built with every feature, and fixtures/no-features' tests required;
#   2c. `find-gpu-tests --by loads` over the example suite's archive: its GPU tests named by the
#      drivers they loaded (NVIDIA's, here), its CPU tests not;
#   2c'. NVML's calls as the crate makes them (bin/nvml-loads): each one's wall time, and what
#      `nvmlInit` maps;
#   2d. the driver watch on the GPU's driver: fixtures/adopter under nextest with each test
#      process under `watch` (`report` names exactly its tests that open the GPU without a
#      permit), a driver loaded by a process the watched command started, the probe's children
#      (never named), a program linked to libcuda at build time (never named); then
#      `nextest-snippet` alone (its group names exactly the tests that loaded a driver), and an
#      unwatched run (`report --fail-on-unpermitted` exits 1, saying the run was not watched);
#   3. the example suite at each N of GPU_VALIDATE_NS ("1 2 3 4 8"): its test binaries run
#      directly, as `cargo test` runs them, GPU_VALIDATE_ROUNDS times (5), and `cargo nextest
#      run --archive-file --retries 1` once, with the test group's max-threads = N; each run
#      traced and checked to have held at most N permits; `gpu-test-permit report` counts the
#      nextest run's contention casualties (tests that failed beside others and passed alone);
#      its JUnit report through `gpu-test-permit junit` marks skipped exactly the tests that
#      printed a skip line;
#   4. GPU_VALIDATE_AUTO_RUNS (6) nextest runs in a row with REALIZAR_GPU_TEST_CONCURRENCY=auto
#      (ceiling GPU_VALIDATE_AUTO_MAX, 8) and a fresh state directory: the N each chose;
#   5. `gpu-test-permit trace` over each runner's traces: the measured memory the fixtures
#      recorded (NVML's for CUDA), the summary and the estimate for other N.
#
# Environment: GPU_VALIDATE_NS, GPU_VALIDATE_ROUNDS; GPU_VALIDATE_REQUIRE (the requirement,
# instead of the one chosen from the CUDA probe); GPU_VALIDATE_RUN_TIMEOUT (seconds one test
# binary or nextest run may take before it counts as hung, 180); GPU_VALIDATE_OUT (where the
# report, the log and the traces go: $OUT when set, else results/ in this folder). The crate's
# own variables pass through (GPU_TEST_PERMIT_GPU_MEMORY, say); GPU_TEST_PERMIT_HOLD_TIMEOUT is
# 120s unless set, so that a wedged test fails with a diagnosis and the what-if knows its N.
# Vulkan: where the dynamic loader finds no libvulkan.so.1, the loader in debs/ is unpacked
# into a scratch folder; where VK_DRIVER_FILES is unset and the NVIDIA ICD manifest is in a
# known place, the loader is pointed at it.
#
# Exit status 0 when every part passed, 1 otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ns=${GPU_VALIDATE_NS:-1 2 3 4 8}
rounds=${GPU_VALIDATE_ROUNDS:-5}
run_timeout=${GPU_VALIDATE_RUN_TIMEOUT:-180}
out=${GPU_VALIDATE_OUT:-${OUT:-$here/results}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-validate.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$out/log.txt
report=$out/gpu-validation.md
: >"$log"
mkdir -p "$work/traces" "$work/skips" "$work/slots" "$work/tmp"
chmod 700 "$work/slots"
export GPU_TEST_PERMIT_HOLD_TIMEOUT=${GPU_TEST_PERMIT_HOLD_TIMEOUT:-120s}
export GPU_TEST_PERMIT_STRICT_CONFIG=1
# Hangs and contention casualties are recorded per N in each N's slot directory, where the
# trace step below gathers them: not in the machine's state directory.
unset GPU_TEST_PERMIT_STATE
export NEXTEST_HIDE_PROGRESS_BAR=1 CARGO_TERM_COLOR=never
# The stand-in drivers the probe and capture tests build, out of the tree that built the tests.
export CARGO_TARGET_TMPDIR=$work/tmp
failures=0
rows=()

say() { echo "gpu-device: $*" | tee -a "$log"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
median() { sort -n | awk '{ a[NR] = $1 } END { if (NR) printf "%.1f", a[int((NR + 1) / 2)] }'; }
# One row of the report's table: part, result, wall time.
row() { rows+=("| $1 | $2 | $3 |"); }
fail() { failures=$((failures + 1)); }

# --- the machine -------------------------------------------------------------------------------
gpu_name=$(nvidia-smi -L 2>/dev/null | head -n 1 | sed 's/^GPU 0: //; s/ (UUID.*//' || true)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
gpu_mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader 2>/dev/null | head -n 1 || true)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -gt 0 ] || gpus=

vulkan_note="the system's Vulkan loader"
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; then
    deb=$(find "$here/debs" -name 'libvulkan1_*.deb' 2>/dev/null | head -n 1 || true)
    if [ -n "$deb" ]; then
        mkdir -p "$work/vulkan"
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$deb" "$work/vulkan"
        else
            (cd "$work/vulkan" && ar x "$deb" && tar -xf data.tar.*)
        fi
        lib=$(dirname "$(find "$work/vulkan" -name 'libvulkan.so.1' | head -n 1)")
        export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        vulkan_note="the loader from $(basename "$deb") (the system has none)"
    else
        vulkan_note="no Vulkan loader (none installed, none in debs/)"
    fi
fi
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
    for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
        /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
        if [ -f "$icd" ]; then
            export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
            break
        fi
    done
fi
icd_note=${VK_DRIVER_FILES:-${VK_ICD_FILENAMES:-as the loader finds it}}

# --- the binaries ------------------------------------------------------------------------------
cli=$here/bin/gpu-test-permit
nextest=$work/cargo-nextest
xz -dc "$here/bin/cargo-nextest.xz" >"$nextest"
chmod +x "$nextest"
archive=$here/tests.tar.zst
ws=$here/workspace
ex=$work/extracted
# Unpacked once for the direct runs; the nextest runs unpack the archive themselves.
mkdir -p "$ex"
if ! "$nextest" nextest list --archive-file "$archive" --workspace-remap "$ws" --extract-to "$ex" \
    -E 'none()' >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    say "cannot unpack $archive (above; all of it in $log)"
    exit 1
fi
deps=$ex/target/release/deps
binary() { find "$deps" -maxdepth 1 -type f -perm -u+x -name "$1-*" | head -n 1; }
example_tests=$(sed -n 's/^example_tests=//p' "$here/build-info")

# --- the probe, and what it says about CUDA ----------------------------------------------------
say "probe"
s=$(now)
probe_table=$(GPU_TEST_PERMIT_REQUIRE=none "$cli" probe 2>&1 || true)
echo "$probe_table" >>"$log"
cuda_json=$(GPU_TEST_PERMIT_REQUIRE=none "$cli" probe --json cuda 2>>"$log" || true)
if grep -q '"status": "not_installed"' <<<"$cuda_json"; then
    cuda=no
    require=${GPU_VALIDATE_REQUIRE:-wgpu}
else
    cuda=yes
    require=${GPU_VALIDATE_REQUIRE:-cuda,wgpu}
fi
export GPU_TEST_PERMIT_REQUIRE=$require
if "$cli" probe >>"$log" 2>&1; then
    row "\`gpu-test-permit probe\`, REQUIRE=$require" "pass (exit 0)" "$(secs "$s" "$(now)") s"
else
    row "\`gpu-test-permit probe\`, REQUIRE=$require" "**FAIL** (exit $?)" "$(secs "$s" "$(now)") s"
    fail
fi
budget=$("$cli" config 2>&1 | awk '$1 == "GPU_TEST_PERMIT_GPU_MEMORY" { $1 = ""; sub(/^ +/, ""); print }' || true)
[ -n "$gpu_name" ] || gpu_name=$(GPU_TEST_PERMIT_REQUIRE=none "$cli" probe --json wgpu 2>/dev/null |
    sed -n 's/^ *"name": "\(.*\)",\{0,1\}$/\1/p' | head -n 1 || true)
[ -n "$gpu_name" ] || gpu_name="no GPU found"
if [ "$cuda" = no ]; then
    row "CUDA: capture guard on the device (\`capture::cuda_device_*\`), CUDA fixture tests" \
        "skipped: no CUDA driver" "-"
fi

# Passed and failed counts of a libtest log (every binary's "test result" line).
libtest_counts() {
    awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i - 1); if ($(i) ~ /^failed/) f += $(i - 1) } }
        END { printf "%d %d", p, f }' "$1"
}
# Passed and failed counts of a nextest log (its "Summary" line).
nextest_counts() {
    awk '/Summary \[/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p = $(i - 1); if ($(i) ~ /^failed/) f = $(i - 1) } }
        END { printf "%d %d", p, f }' "$1"
}
# The tests a `report` log (file $1) names as having loaded a GPU driver without a permit,
# sorted, joined with ';'.
reported_escapes() {
    awk '/loaded a GPU driver without a permit: /{on=1; next}
        on && /^  /{sub(/^  /, ""); sub(/: .*/, ""); print; next} on{on=0}' "$1" |
        sort | paste -sd';' -
}
# Why a run ended badly, from its exit status.
why() {
    case $1 in
    124 | 137) echo "hung: killed after ${run_timeout} s" ;;
    *) echo "exit $1" ;;
    esac
}
# The run id nextest prints as it starts (`Nextest run ID <uuid> with nextest profile: ...`) in log
# $1: `report` reads the run it is named, never a guess between the runs of one slot directory.
run_id() { grep -m1 'Nextest run' "$1" | grep -oE '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}' || true; }
skips() { if [ -f "$work/skips/$1" ]; then wc -l <"$work/skips/$1"; else echo 0; fi; }

# --- the crate's capture, fixture and probe tests ----------------------------------------------
it=$(binary it)
it_env=(env "CARGO_MANIFEST_DIR=$ws/cli" "CARGO_BIN_EXE_gpu-test-permit=$ex/target/release/gpu-test-permit"
    "GPU_TEST_PERMIT_DIR=$work/slots/crate" "GPU_TEST_PERMIT_SKIP_LOG=$work/skips/crate-direct")
skip_args=()
nextest_skip=
if [ "$cuda" = no ]; then
    skip_args=(--skip capture::cuda_device_)
    nextest_skip=' & not test(/^capture::cuda_device_/)'
fi
say "crate tests (capture, fixture, probe), run directly"
s=$(now)
rc=0
(cd "$ws" && timeout -k 10 "$run_timeout" "${it_env[@]}" "$it" capture:: fixture:: probe:: \
    --skip native_probe:: "${skip_args[@]}") >"$work/crate-direct.log" 2>&1 || rc=$?
cat "$work/crate-direct.log" >>"$log"
read -r p f <<<"$(libtest_counts "$work/crate-direct.log")"
result="$p passed, $f failed, $(skips crate-direct) skip lines"
if [ "$rc" -ne 0 ] || [ "$p" -eq 0 ]; then result="**FAIL** ($(why "$rc")): $result"; fail; fi
row "crate tests \`capture:: fixture:: probe::\`, run directly" "$result" "$(secs "$s" "$(now)") s"

say "crate tests (capture, fixture, probe), cargo nextest"
s=$(now)
rc=0
GPU_TEST_PERMIT_DIR=$work/slots/crate GPU_TEST_PERMIT_SKIP_LOG=$work/skips/crate-nextest \
    timeout -k 10 "$run_timeout" "$nextest" nextest run --archive-file "$archive" \
    --workspace-remap "$ws" --no-fail-fast --status-level fail \
    -E "binary(it) & test(/^(capture|fixture|probe)::/)$nextest_skip" \
    >"$work/crate-nextest.log" 2>&1 || rc=$?
cat "$work/crate-nextest.log" >>"$log"
read -r p f <<<"$(nextest_counts "$work/crate-nextest.log")"
result="$p passed, $f failed, $(skips crate-nextest) skip lines"
if [ "$rc" -ne 0 ] || [ "$p" -eq 0 ]; then result="**FAIL** ($(why "$rc")): $result"; fail; fi
row "crate tests \`capture:: fixture:: probe::\`, cargo nextest" "$result" "$(secs "$s" "$(now)") s"

# Live memory: a permit that declares memory waits while a process without a permit holds it
# (NVML), and the wait names that process.
if [ "$cuda" = yes ]; then
    say "live memory against a foreign allocation"
    s=$(now)
    rc=0
    (cd "$ws" && timeout -k 10 "$run_timeout" "${it_env[@]}" "$it" --exact \
        live_memory::cuda_device_live_memory_waits_for_a_foreign_allocation --nocapture) \
        >"$work/live-memory.log" 2>&1 || rc=$?
    cat "$work/live-memory.log" >>"$log"
    read -r p f <<<"$(libtest_counts "$work/live-memory.log")"
    result="$p passed, $f failed"
    if grep -q 'SKIP' "$work/live-memory.log"; then result="skipped: $(grep -m1 SKIP "$work/live-memory.log")"; fi
    if [ "$rc" -ne 0 ] || [ "$p" -eq 0 ]; then result="**FAIL** ($(why "$rc")): $result"; fail; fi
    held_back=$(grep -m1 'Held back by GPU memory' "$work/live-memory.log" | sed 's/.*Held back/Held back/' || true)
    row "live memory: \`hold --memory 8GiB\` beside a process holding all but 6 GiB (${held_back:-no message})" \
        "$result" "$(secs "$s" "$(now)") s"
fi

# What each wgpu fixture form measured (the test prints it).
fixture_memory=$( (cd "$ws" && "${it_env[@]}" "$it" --exact \
    fixture::wgpu_fixture_needs_and_measured_memory_reach_the_trace --nocapture 2>&1) |
    grep 'measured memory per hold' || echo "(the fixture memory test printed no measurement)")

nextest_suite='package(gpu-test-permit-example-suite)'
[ "$cuda" = no ] && nextest_suite="$nextest_suite & not binary(cuda)"

# --- without features: the probe through the driver libraries ----------------------------------
# The CLI built without features probes CUDA through libcuda and wgpu through the Vulkan loader;
# the one built with every feature through wgpu. Both must find the same devices.
nofeat=$here/bin/gpu-test-permit-no-features
say "probe without features"
s=$(now)
native_json=$(GPU_TEST_PERMIT_REQUIRE=none "$nofeat" probe --json 2>>"$log" || true)
full_json=$(GPU_TEST_PERMIT_REQUIRE=none "$cli" probe --json 2>>"$log" || true)
printf 'probe --json, no features:\n%s\nprobe --json, every feature:\n%s\n' "$native_json" "$full_json" >>"$log"
# Each device's name, kind and API (the memory each reports is shown, not compared: wgpu does
# not tell an adapter's memory, the Vulkan loader its heaps).
devices_of() { grep -o '"\(name\|kind\|api\)": "[^"]*"' <<<"$1" | paste -sd' ' -; }
memory_of() { grep -o '"memory_bytes": [0-9a-z]*' <<<"$1" | sed 's/"memory_bytes": //' | paste -sd' ' -; }
result="devices alike: $(devices_of "$native_json"); memory without features: $(memory_of "$native_json"), with every feature: $(memory_of "$full_json")"
rc=0
GPU_TEST_PERMIT_REQUIRE=$require "$nofeat" probe >>"$log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
    result="**FAIL** (\`probe\` without features, REQUIRE=$require: exit $rc): $result"
    fail
elif [ "$(devices_of "$native_json")" != "$(devices_of "$full_json")" ]; then
    result="**differ**: without features $(devices_of "$native_json"); with every feature $(devices_of "$full_json")"
    fail
fi
row "\`gpu-test-permit probe --json\` without features (libcuda, Vulkan loader) against every feature" "$result" "$(secs "$s" "$(now)") s"

say "a crate without features (fixtures/no-features), REQUIRE=$require"
s=$(now)
rc=0
(cd "$work" && GPU_TEST_PERMIT_DIR=$work/slots/crate timeout -k 10 "$run_timeout" \
    "$here/bin/native-no-features" --test-threads 1 --nocapture) >"$work/no-features.log" 2>&1 || rc=$?
cat "$work/no-features.log" >>"$log"
read -r p f <<<"$(libtest_counts "$work/no-features.log")"
ran=$(grep -o 'RAN [a-z_]* on .*' "$work/no-features.log" | paste -sd';' - || true)
result="$p passed, $f failed: ${ran:-nothing ran}"
wanted=1
grep -q 'RAN wgpu_test on' "$work/no-features.log" || wanted=0
[ "$cuda" = no ] || grep -q 'RAN cuda_test on' "$work/no-features.log" || wanted=0
if [ "$rc" -ne 0 ] || [ "$wanted" -ne 1 ]; then result="**FAIL** ($(why "$rc")): $result"; fail; fi
row "a crate on the crate without features (\`fixtures/no-features\`), its wgpu and CUDA tests required" "$result" "$(secs "$s" "$(now)") s"

# --- the GPU tests found by the drivers they load ----------------------------------------------
# `find-gpu-tests --by loads` over the example suite's archive: every test of its cuda and
# wgpu_compute binaries and the two GPU tests of particles must be named by a driver they loaded,
# the three CPU tests of particles not. cargo and rustc are stand-ins: cargo runs cargo-nextest,
# rustc tells the host's triple.
say "find-gpu-tests --by loads over the example suite"
s=$(now)
mkdir -p "$work/shims"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$nextest" >"$work/shims/cargo"
printf '#!/bin/sh\necho "host: %s-unknown-linux-gnu"\n' "$(uname -m)" >"$work/shims/rustc"
chmod +x "$work/shims/cargo" "$work/shims/rustc"
rc=0
(cd "$work" && CARGO=$work/shims/cargo RUSTC=$work/shims/rustc timeout -k 10 "$run_timeout" \
    "$cli" find-gpu-tests --by loads -- --archive-file "$archive" --workspace-remap "$ws" \
    -E "$nextest_suite") >"$work/find.log" 2>&1 || rc=$?
cat "$work/find.log" >>"$log"
named=$(sed -n 's/^find-gpu-tests: GPU test gpu-test-permit-example-suite::\([^ ]*\) \([^:]*\): .*/\1 \2/p' "$work/find.log" | sort)
find_drivers=$(sed -n 's/^find-gpu-tests: GPU test .*: loaded //p' "$work/find.log" | tr ',' '\n' |
    sed 's/^ *//' | sort -u | paste -sd',' - | sed 's/,/, /g')
named_n=$(grep -c . <<<"$named" || true)
cpu_named=$(grep -E '^particles (advance_moves|relaxing_a_flat|close_names)' <<<"$named" | paste -sd';' - || true)
missing=""
for t in boids_advance_as_the_cpu_does water_relaxes_as_the_cpu_does; do
    grep -qx "particles $t" <<<"$named" || missing="$missing particles::$t"
done
for b in cuda wgpu_compute; do
    [ "$b" = cuda ] && [ "$cuda" = no ] && continue
    grep -q "^$b " <<<"$named" || missing="$missing $b (no test of it)"
done
result="$named_n tests named, by: ${find_drivers:-nothing}"
if [ "$rc" -ne 0 ] || [ -n "$missing" ] || [ -n "$cpu_named" ]; then
    result="**FAIL** (exit $rc; not named:${missing:- none}; CPU tests named: ${cpu_named:-none}): $result"
    fail
fi
row "\`find-gpu-tests --by loads\` over the example suite (GPU tests named by the drivers they loaded, CPU tests not)" "$result" "$(secs "$s" "$(now)") s"

# --- NVML on the driver ------------------------------------------------------------------------
# NVML's calls as the crate makes them for live memory (scripts/nvml-loads.c): what the first
# costs (`nvmlInit` included) and each after it, against the 2 s the crate waits for an answer;
# and the driver libraries `nvmlInit` maps (libcuda on driver 580: the crate counts them as its
# own, never a test's).
if [ "$cuda" = yes ] && [ -x "$here/bin/nvml-loads" ]; then
    say "NVML"
    s=$(now)
    rc=0
    "$here/bin/nvml-loads" >"$work/nvml.log" 2>&1 || rc=$?
    cat "$work/nvml.log" >>"$log"
    took() { awk -v c="$1" '$2 == c { printf "%s%s ms", sep, $3; sep = ", " }' "$work/nvml.log"; }
    init_maps=$(awk '$2 == "nvmlInit_v2" { sub(/.*mapped: /, ""); print }' "$work/nvml.log")
    result="nvmlInit_v2 $(took nvmlInit_v2), after it mapped: ${init_maps:-?}; nvmlDeviceGetHandleByIndex_v2 $(took nvmlDeviceGetHandleByIndex_v2); nvmlDeviceGetMemoryInfo $(took nvmlDeviceGetMemoryInfo); compute processes $(took nvmlDeviceGetComputeRunningProcesses_v3); graphics processes $(took nvmlDeviceGetGraphicsRunningProcesses_v3)"
    if [ "$rc" -ne 0 ]; then
        result="**FAIL** (exit $rc): $result"
        fail
    fi
    row "NVML's calls as the crate makes them (\`bin/nvml-loads\`): wall time of each, what \`nvmlInit\` maps" "$result" "$(secs "$s" "$(now)") s"
fi

# --- the driver watch on the GPU's own driver --------------------------------------------------
# fixtures/adopter under nextest, every test process under `gpu-test-permit watch` (cargo's
# target runner): `report` must name exactly its three tests that open the GPU without a permit
# (two through wgpu, one through the suite's own CUDA bindings), and none of those that take
# one. Then, without nextest: a test run by a shell (the driver is loaded in a process the
# watched command started), `gpu-test-permit probe` (its probe children load drivers on
# purpose, without a permit), and a program linked to libcuda at build time that touches no GPU.
say "the driver watch: fixtures/adopter under nextest, watched"
s=$(now)
adopter_slots=$work/slots/adopter
mkdir -p "$adopter_slots" "$work/adopter-ex"
chmod 700 "$adopter_slots"
runner_var="CARGO_TARGET_$(uname -m | tr 'a-z' 'A-Z')_UNKNOWN_LINUX_GNU_RUNNER"
rc=0
env "$runner_var=$cli watch --" GPU_TEST_PERMIT_DIR="$adopter_slots" timeout -k 10 "$run_timeout" \
    "$nextest" nextest run --archive-file "$here/adopter.tar.zst" --workspace-remap "$ws" \
    --extract-to "$work/adopter-ex" --no-fail-fast --status-level fail \
    >"$work/adopter.log" 2>&1 || rc=$?
cat "$work/adopter.log" >>"$log"
read -r p f <<<"$(nextest_counts "$work/adopter.log")"
GPU_TEST_PERMIT_DIR=$adopter_slots "$cli" report >"$work/adopter-report.log" 2>&1 || true
cat "$work/adopter-report.log" >>"$log"
escapes=$(reported_escapes "$work/adopter-report.log")
expected=$({
    echo "gpu-test-permit-adopter tests::raw_adapter_is_named"
    echo "gpu-test-permit-adopter::integration raw_adapter_from_outside"
    if [ "$cuda" = yes ]; then echo "gpu-test-permit-adopter::integration cuda_raw_from_outside"; fi
} | sort | paste -sd';' -)
adopter_drivers=$(sed -n '/loaded a GPU driver without a permit: /,/^$/p' "$work/adopter-report.log" |
    grep -o 'lib[A-Za-z0-9_.-]*\.so[0-9.]*' | sort -u | paste -sd' ' -)
result="$p passed, $f failed; escapes named: ${escapes:-none}; by: ${adopter_drivers:-nothing}"
if [ "$rc" -ne 0 ] || [ "$escapes" != "$expected" ]; then
    result="**FAIL** ($(why "$rc"); expected $expected): $result"
    fail
fi
row "fixtures/adopter under nextest, each test under \`watch\`: \`report\` names exactly its 3 tests that open the GPU without a permit" "$result" "$(secs "$s" "$(now)") s"

# After that one watched run, `nextest-snippet` alone prints a tool config whose test group's
# filter names exactly the tests that loaded a driver, with a permit or without: the three
# escapes and the four tests that open the GPU through the adopter's `Gpu`. nextest lists the
# archive's tests through it.
say "the learned GPU test group: nextest-snippet after the watched run"
s=$(now)
rc=0
GPU_TEST_PERMIT_DIR=$adopter_slots REALIZAR_GPU_TEST_CONCURRENCY=2 "$cli" nextest-snippet \
    >"$work/adopter-snippet.toml" 2>>"$log" || rc=$?
cat "$work/adopter-snippet.toml" >>"$log"
filter=$(awk "/^filter = '''\$/{on=1; next} on && /^'''/{exit} on" "$work/adopter-snippet.toml")
listed=""
if [ "$rc" -eq 0 ] && [ -n "$filter" ]; then
    mkdir -p "$work/adopter-list"
    "$nextest" nextest list --archive-file "$here/adopter.tar.zst" --workspace-remap "$ws" \
        --extract-to "$work/adopter-list" --tool-config-file "gpu-test-permit:$work/adopter-snippet.toml" \
        --message-format oneline -E "$filter" >"$work/adopter-list.log" 2>>"$log" || rc=$?
    cat "$work/adopter-list.log" >>"$log"
    listed=$(grep '^gpu-test-permit-adopter' "$work/adopter-list.log" | sort | paste -sd';' - || true)
fi
loaded=$({
    tr ';' '\n' <<<"$expected"
    echo "gpu-test-permit-adopter tests::gpu_doubles"
    echo "gpu-test-permit-adopter tests::gpu_doubles_inside_a_held_gpu"
    echo "gpu-test-permit-adopter::integration gpu_doubles_from_outside"
    echo "gpu-test-permit-adopter::integration gpu_doubles_twice_in_one_test"
} | sort | paste -sd';' -)
result="$(tr ';' '\n' <<<"$listed" | grep -c . || true) tests in the group: ${listed:-none}"
if [ "$rc" -ne 0 ] || [ "$listed" != "$loaded" ] || grep -q 'test(/gpu/)' "$work/adopter-snippet.toml"; then
    result="**FAIL** (exit $rc; expected $loaded): $result"
    fail
fi
row "\`nextest-snippet\` after the watched run: its group names exactly the adopter's tests that loaded a driver (the escapes above and the 4 with a permit)" "$result" "$(secs "$s" "$(now)") s"

# Unwatched, each test process looks at its own maps as it exits: the CUDA driver that the
# adopter's own bindings keep loaded is still mapped and named; a driver unloaded by then goes
# unseen, so `report --fail-on-unpermitted` fails saying the run was not watched.
say "the driver watch: fixtures/adopter under nextest, unwatched"
s=$(now)
unwatched_slots=$work/slots/adopter-unwatched
mkdir -p "$unwatched_slots" "$work/adopter-ex2"
chmod 700 "$unwatched_slots"
rc=0
GPU_TEST_PERMIT_DIR="$unwatched_slots" timeout -k 10 "$run_timeout" \
    "$nextest" nextest run --archive-file "$here/adopter.tar.zst" --workspace-remap "$ws" \
    --extract-to "$work/adopter-ex2" --no-fail-fast --status-level fail \
    >"$work/adopter-unwatched.log" 2>&1 || rc=$?
cat "$work/adopter-unwatched.log" >>"$log"
read -r p f <<<"$(nextest_counts "$work/adopter-unwatched.log")"
frc=0
GPU_TEST_PERMIT_DIR=$unwatched_slots "$cli" report --fail-on-unpermitted \
    >"$work/adopter-unwatched-report.log" 2>&1 || frc=$?
cat "$work/adopter-unwatched-report.log" >>"$log"
escapes=$(reported_escapes "$work/adopter-unwatched-report.log")
expected_unwatched=""
if [ "$cuda" = yes ]; then expected_unwatched="gpu-test-permit-adopter::integration cuda_raw_from_outside"; fi
not_watched=no
grep -q 'was not watched, so --fail-on-unpermitted cannot tell' "$work/adopter-unwatched-report.log" && not_watched=yes
result="$p passed, $f failed; escapes named: ${escapes:-none}; \`report --fail-on-unpermitted\` exit $frc, says the run was not watched: $not_watched"
# NVIDIA's Vulkan driver may stay mapped after wgpu lets it go (lavapipe's does not): an escape
# through wgpu may be named too, but only one of the watched run's; a test with a permit never.
stray=$(comm -23 <(tr ';' '\n' <<<"$escapes" | grep . | sort) <(tr ';' '\n' <<<"$expected" | sort) | paste -sd';' -)
missed=no
[ -z "$expected_unwatched" ] || grep -qF "$expected_unwatched" <<<"$escapes" || missed=yes
if [ "$rc" -ne 0 ] || [ -n "$stray" ] || [ "$missed" = yes ] || [ "$frc" -ne 1 ] || [ "$not_watched" != yes ]; then
    result="**FAIL** ($(why "$rc"); expected escapes: ${expected_unwatched:-none} and none but the watched run's, exit 1): $result"
    fail
fi
row "fixtures/adopter under nextest, unwatched: the CUDA driver still mapped at exit named, \`report --fail-on-unpermitted\` exits 1 saying the run was not watched" "$result" "$(secs "$s" "$(now)") s"

s=$(now)
adopter_unit=$(find "$work/adopter-ex/target/release/deps" -maxdepth 1 -type f -perm -u+x \
    -name 'gpu_test_permit_adopter-*' | head -n 1)
child=$("$cli" watch -- sh -c "\"$adopter_unit\" --exact tests::raw_adapter_is_named >/dev/null; :" 2>&1 || true)
probe_watched=$("$cli" watch -- "$cli" probe 2>&1 >/dev/null || true)
if [ "$cuda" = yes ]; then
    linked=$("$cli" watch -- "$here/bin/linked-to-libcuda" 2>&1; echo "exit $?")
    linked_to=$(ldd "$here/bin/linked-to-libcuda" 2>&1 | sed -n 's/.*libcuda.so.1 => \([^ ]*\).*/\1/p')
else
    linked="not run: no CUDA driver; exit 0" linked_to="no CUDA driver"
fi
echo "watch, child: $child" >>"$log"
echo "watch, probe: $probe_watched" >>"$log"
echo "watch, linked ($linked_to): $linked" >>"$log"
result="a child's load named ($(sed -n 's/.*while it held no permit[^:]*: //p' <<<"$child" | head -n 1)); the probe's children not; a program linked to ${linked_to:-?}: ${linked//$'\n'/ }"
if ! grep -q 'while it held no permit' <<<"$child" || grep -q 'no permit' <<<"$probe_watched" ||
    grep -q 'no permit' <<<"$linked" || [ "${linked##*exit }" != 0 ] || [ -z "$linked_to" ]; then
    result="**FAIL**: $result (the log has each output)"
    fail
fi
row "\`watch\` without nextest: a driver loaded by a process the command started, the probe's children, a program linked to libcuda" "$result" "$(secs "$s" "$(now)") s"

# --- the example suite at each N ---------------------------------------------------------------
suite=()
for t in $example_tests; do
    [ "$t" = cuda ] && [ "$cuda" = no ] && continue
    suite+=("$(binary "$t")")
done
suite_names=$(for b in "${suite[@]}"; do basename "${b%-*}"; done | paste -sd' ')

for n in $ns; do
    slots=$work/slots/n$n
    mkdir -p "$slots"
    chmod 700 "$slots"
    walls=()
    passed_rounds=0
    totals=""
    peak_ok=yes
    for r in $(seq "$rounds"); do
        say "example suite, run directly, N = $n, round $r of $rounds"
        trace=$work/traces/cargo-test-N$n-r$r.json
        runlog=$work/cargo-test-N$n-r$r.log
        : >"$runlog"
        s=$(now)
        rc=0
        for b in "${suite[@]}"; do
            (cd "$ws/example-suite" && GPU_TEST_PERMIT_CONCURRENCY=$n REALIZAR_GPU_TEST_CONCURRENCY=$n GPU_TEST_PERMIT_DIR=$slots \
                GPU_TEST_PERMIT_TRACE=$trace GPU_TEST_PERMIT_SKIP_LOG=$work/skips/cargo-test-N$n \
                timeout -k 10 "$run_timeout" "$b") >>"$runlog" 2>&1 || rc=$?
            # A hung binary ends the round: the GPU may be wedged.
            case $rc in 124 | 137) break ;; esac
        done
        walls+=("$(secs "$s" "$(now)")")
        cat "$runlog" >>"$log"
        read -r p f <<<"$(libtest_counts "$runlog")"
        totals="$totals $p/$f"
        if [ "$rc" -eq 0 ] && [ "$f" -eq 0 ] && [ "$p" -gt 0 ]; then
            passed_rounds=$((passed_rounds + 1))
        else
            say "round $r at N = $n failed: $(why "$rc"), $p passed, $f failed"
            last_failure="round $r: $(why "$rc")"
        fi
        if [ -s "$trace" ] && ! "$cli" trace "$trace" --max-peak "$n" >>"$log" 2>&1; then
            peak_ok=no
        fi
    done
    wall=$(printf '%s\n' "${walls[@]}" | median)
    range=$(printf '%s\n' "${walls[@]}" | sort -n | sed -n '1p;$p' | paste -sd'-')
    result="$passed_rounds of $rounds rounds passed (passed/failed:$totals); $(skips "cargo-test-N$n") skip lines; peak <= $n: $peak_ok"
    if [ "$passed_rounds" -ne "$rounds" ] || [ "$peak_ok" != yes ]; then
        result="**FAIL** (${last_failure:-peak above N}): $result"
        fail
    fi
    row "example suite run directly ($suite_names), N = $n" "$result" "median $wall s ($range)"
    unset last_failure

    say "example suite, cargo nextest, N = $n"
    nextest_config=$work/nextest-N$n.toml
    # The repository's configuration with its GPU test group as wide as N.
    sed -e "s/max-threads = [0-9]*/max-threads = $n/" \
        -e "s/threads-required = [0-9]*/threads-required = $((n < 2 ? n : 2))/" \
        "$ws/.config/nextest.toml" >"$nextest_config"
    trace=$work/traces/nextest-N$n.json
    runlog=$work/nextest-N$n.log
    # nextest writes the run's JUnit report under the remapped workspace's target/.
    junit_in=$ws/target/nextest/default/junit.xml
    rm -f "$junit_in"
    s=$(now)
    rc=0
    GPU_TEST_PERMIT_CONCURRENCY=$n REALIZAR_GPU_TEST_CONCURRENCY=$n GPU_TEST_PERMIT_DIR=$slots GPU_TEST_PERMIT_TRACE=$trace \
        GPU_TEST_PERMIT_SKIP_LOG=$work/skips/nextest-N$n \
        timeout -k 10 "$run_timeout" "$nextest" nextest run --archive-file "$archive" \
        --workspace-remap "$ws" --config-file "$nextest_config" \
        --no-fail-fast --status-level fail --retries 1 -E "$nextest_suite" >"$runlog" 2>&1 || rc=$?
    wall=$(secs "$s" "$(now)")
    cat "$runlog" >>"$log"
    read -r p f <<<"$(nextest_counts "$runlog")"
    peak_ok=yes
    if [ -s "$trace" ] && ! "$cli" trace "$trace" --max-peak "$n" >>"$log" 2>&1; then
        peak_ok=no
    fi
    # The run's records: a test that failed beside others and passed alone on its retry (which
    # runs with the GPU to itself) is a contention casualty at this N.
    # Every GPU test of the suite takes its permit through a fixture: none may be named as having
    # loaded a driver without one (the crate's own NVML query loads libcuda before a permit that
    # declares memory is granted: that is no test's load).
    GPU_TEST_PERMIT_DIR=$slots "$cli" report --run-id "$(run_id "$runlog")" >"$work/report-N$n.log" 2>&1 || true
    cat "$work/report-N$n.log" >>"$log"
    casualties=$(sed -n 's/^contention casualties: \([0-9]*\).*/\1/p' "$work/report-N$n.log")
    escaped=$(sed -n 's/.*loaded a GPU driver without a permit: \([0-9]*\).*/\1/p' "$work/report-N$n.log" | head -n 1)
    # Its JUnit report as CI would show it: `gpu-test-permit junit` marks as skipped exactly the
    # tests that printed a skip line (none, where every backend is there).
    marked="?"
    if [ -s "$junit_in" ] && GPU_TEST_PERMIT_DIR=$slots "$cli" junit "$junit_in" \
        -o "$work/junit-N$n.xml" >>"$log" 2>&1; then
        marked=$(grep -c '<skipped message="backend=' "$work/junit-N$n.xml" || true)
    fi
    result="$p passed, $f failed, $(skips "nextest-N$n") skip lines; peak <= $n: $peak_ok; contention casualties (retried alone, passed): ${casualties:-?}; \`junit\` marked $marked skipped; tests named as loading a driver without a permit: ${escaped:-0}"
    if [ "$rc" -ne 0 ] || [ "$p" -eq 0 ] || [ "$peak_ok" != yes ] || [ "$marked" != "$(skips "nextest-N$n")" ] ||
        [ "${escaped:-0}" != 0 ]; then
        result="**FAIL** ($(why "$rc")): $result"
        fail
    fi
    row "example suite under \`cargo nextest run --archive-file\`, N = $n" "$result" "$wall s"
done

# --- REALIZAR_GPU_TEST_CONCURRENCY=auto --------------------------------------------------------
# GPU_VALIDATE_AUTO_RUNS nextest runs in a row with `auto` (ceiling GPU_VALIDATE_AUTO_MAX, the
# group as wide), a fresh state directory: the N each run chose, its wall time, and the history.
auto_runs=${GPU_VALIDATE_AUTO_RUNS:-6}
auto_max=${GPU_VALIDATE_AUTO_MAX:-8}
if [ "$auto_runs" -gt 0 ]; then
    say "example suite, cargo nextest, auto x $auto_runs"
    auto_slots=$work/slots/auto
    auto_state=$work/state-auto
    mkdir -p "$auto_slots" "$auto_state"
    chmod 700 "$auto_slots" "$auto_state"
    nextest_config=$work/nextest-auto.toml
    sed -e "s/max-threads = [0-9]*/max-threads = $auto_max/" \
        -e "s/threads-required = [0-9]*/threads-required = 2/" \
        "$ws/.config/nextest.toml" >"$nextest_config"
    chosen=()
    auto_ok=yes
    for i in $(seq "$auto_runs"); do
        runlog=$work/nextest-auto-$i.log
        s=$(now)
        rc=0
        GPU_TEST_PERMIT_CONCURRENCY=auto REALIZAR_GPU_TEST_CONCURRENCY=auto GPU_TEST_PERMIT_MAX_CONCURRENCY=$auto_max \
            GPU_TEST_PERMIT_DIR=$auto_slots GPU_TEST_PERMIT_STATE=$auto_state \
            timeout -k 10 "$run_timeout" "$nextest" nextest run --archive-file "$archive" \
            --workspace-remap "$ws" --config-file "$nextest_config" --no-fail-fast \
            --status-level fail -E "$nextest_suite" >"$runlog" 2>&1 || rc=$?
        wall=$(secs "$s" "$(now)")
        cat "$runlog" >>"$log"
        n=$(GPU_TEST_PERMIT_DIR=$auto_slots GPU_TEST_PERMIT_STATE=$auto_state "$cli" report --run-id "$(run_id "$runlog")" 2>&1 |
            tee -a "$log" | sed -n 's/^chosen by REALIZAR_GPU_TEST_CONCURRENCY=auto: N = \([0-9]*\).*/\1/p')
        chosen+=("N=${n:-?} ${wall}s$([ "$rc" -eq 0 ] || echo " ($(why "$rc"))")")
        [ -n "$n" ] || auto_ok=no
    done
    auto_history=$(GPU_TEST_PERMIT_DIR=$auto_slots GPU_TEST_PERMIT_STATE=$auto_state \
        GPU_TEST_PERMIT_CONCURRENCY=auto REALIZAR_GPU_TEST_CONCURRENCY=auto GPU_TEST_PERMIT_MAX_CONCURRENCY=$auto_max \
        "$cli" history 2>&1 | tee -a "$log")
    result="runs: ${chosen[*]}"
    if [ "$auto_ok" != yes ]; then
        result="**FAIL** (a run recorded no choice): $result"
        fail
    fi
    row "example suite under nextest, \`REALIZAR_GPU_TEST_CONCURRENCY=auto\` (ceiling $auto_max)" "$result" "-"
fi

# --- what the traces say -----------------------------------------------------------------------
# The hangs recorded at each N, where the what-if looks for them.
mkdir -p "$work/slots/all"
chmod 700 "$work/slots/all"
cat "$work"/slots/n*/gpu0.hangs >"$work/slots/all/gpu0.hangs" 2>/dev/null || true
first_ns=$(echo "$ns" | awk '{ print $1 }')
summaries=""
for runner in cargo-test nextest; do
    # One run per N, in the order they ran: the model is fitted from all, the summary is of
    # the last.
    combined=$runner-all-N.json
    : >"$work/traces/$combined"
    for n in $ns; do
        f=$work/traces/$runner-N$n.json
        [ "$runner" = cargo-test ] && f=$work/traces/$runner-N$n-r1.json
        [ ! -s "$f" ] || cat "$f" >>"$work/traces/$combined"
    done
    [ -s "$work/traces/$combined" ] || continue
    # The summary without its table of tests.
    text=$(
        cd "$work/traces" || exit
        GPU_TEST_PERMIT_DIR=$work/slots/all "$cli" trace "$combined" 2>&1 |
            awk '/holds [0-9]+ runs/ { print; print ""; next } /^permits / { on = 1 } on'
    ) || true
    label="run directly (round 1 of each N)"
    [ "$runner" = nextest ] && label="cargo nextest"
    summaries+=$'\n'"The example suite $label, \`gpu-test-permit trace\` over the runs at N = ${ns// /, } in one file (the summary is of N = ${ns##* }; the runs at N = $first_ns first):"$'\n\n```text\n'"$text"$'\n```\n'
done

# Measured memory per test (the fixtures record it on their permits: NVML's per-process figure
# for CUDA, the allocator's report for wgpu), the largest of every traced run: one row per test
# that declares memory or uses CUDA, the others grouped by what they measured.
memory_error=
memory=$(find "$work/traces" -name '*.json' ! -name '*-all-N.json' -exec cat {} + |
    awk 'function num(key) { return match($0, "\"" key "\":[0-9]+") ? substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 3) + 0 : 0 }
        function mib(b) { return sprintf("%.1f MiB", b / 1048576) }
        /"name":"hold"/ && /"memory_used"/ && match($0, /"test":"[^"]*"/) {
            t = substr($0, RSTART + 8, RLENGTH - 9); u = num("memory_used"); d = num("memory")
            if (u > used[t]) used[t] = u
            if (d > declared[t]) declared[t] = d
            holds[t]++
        }
        END {
            for (t in used) {
                if (declared[t] || t ~ /cuda/) {
                    printf "| `%s` | %s | %s | %d |\n", t, mib(used[t]), declared[t] ? mib(declared[t]) : "-", holds[t]
                } else {
                    v = mib(used[t]); n[v]++; h[v] += holds[t]
                    if (n[v] <= 3) names[v] = names[v] (n[v] > 1 ? ", " : "") "`" t "`"
                }
            }
            for (v in n) printf "| %d other tests (%s%s) | %s each | - | %d |\n", n[v], names[v], (n[v] > 3 ? ", ..." : ""), v, h[v]
        }' 2>>"$log" | sort) || memory_error=yes
cuda_memory=$(echo "$memory" | grep -c 'cuda' || true)

# --- the report --------------------------------------------------------------------------------
info() { sed -n "s/^$1=//p" "$here/build-info"; }
verdict="all $(( ${#rows[@]} )) parts passed"
[ "$failures" -eq 0 ] || verdict="**$failures part(s) FAILED**"
{
    echo "## $(date -u +%Y-%m-%d): one-command validation (\`gpu-device.sh\`)"
    echo
    echo "Machine: ${gpu_name}${gpu_mem:+ ($gpu_mem)}${gpus:+, $gpus GPU(s)}; driver ${driver:-none (no nvidia-smi)}; $(uname -srm); Vulkan through $vulkan_note, ICD $icd_note."
    echo "Built from commit $(info commit) ($(info commit_date)) with $(info rustc), $(info nextest); release binaries, every feature."
    echo "\`GPU_TEST_PERMIT_REQUIRE=$require\`, \`GPU_TEST_PERMIT_HOLD_TIMEOUT=$GPU_TEST_PERMIT_HOLD_TIMEOUT\`, N = ${ns// /, }, $rounds direct round(s) per N, $(nproc) cores. Result: $verdict."
    echo
    echo "| part | result | wall |"
    echo "|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "\`gpu-test-permit probe\`:"
    echo
    echo '```text'
    echo "$probe_table"
    echo '```'
    echo
    echo "Memory budget (\`GPU_TEST_PERMIT_GPU_MEMORY\`): ${budget:-unknown}."
    echo
    if [ -n "$memory_error" ]; then
        echo "**Measured GPU memory: reading it from the traces failed** (the log says why)."
    elif [ -n "$memory" ]; then
        echo "Measured GPU memory the fixtures recorded (CUDA: NVML's per-process figure; wgpu: the allocator's report), the largest over every traced run:"
        echo
        echo "| test | measured | declared | holds |"
        echo "|---|---|---|---|"
        echo "$memory"
    else
        echo "Measured GPU memory: no hold in any trace recorded one."
    fi
    if [ "$cuda" = yes ] && [ "$cuda_memory" -eq 0 ]; then
        echo
        echo "**No CUDA test recorded NVML's measurement** (is \`libnvidia-ml.so.1\` found?)."
    fi
    echo
    echo "wgpu fixture forms (\`fixture::wgpu_fixture_needs_and_measured_memory_reach_the_trace\`): $fixture_memory"
    if [ -n "${auto_history:-}" ]; then
        echo
        echo "\`gpu-test-permit history\` after the \`auto\` runs:"
        echo
        echo '```text'
        echo "$auto_history"
        echo '```'
    fi
    echo "$summaries"
} >"$report"

(cd "$work" && tar -czf "$out/traces.tar.gz" traces)
echo
cat "$report"
echo
say "report: $report; log: $log; traces: $out/traces.tar.gz"
[ "$failures" -eq 0 ]
