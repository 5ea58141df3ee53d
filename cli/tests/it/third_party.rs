//! The README's recipes on a real GPU test suite that knows nothing of this crate: the unit
//! tests of `isomesh-gpu` 0.0.13 (wgpu 30 compute pipelines checked against the CPU, and CPU-only
//! tests of its grid, shader composition and WGSL tables), fetched through cargo at run time,
//! checked against a pinned SHA-256, unpacked, and run by `cargo nextest` with
//! `gpu-test-permit run` as the target runner and as a wrapper script. The trace must show at
//! most N permits at once, held by every GPU test and by nothing else.
//!
//! Runs with the `wgpu` feature where the probe finds a wgpu adapter (lavapipe in CI); skips
//! otherwise, unless `GPU_TEST_PERMIT_REQUIRE` requires wgpu. The first run downloads and
//! builds the suite (about a minute on two cores) into `target/tmp/third-party`.
//! `GPU_TEST_PERMIT_THIRD_PARTY=off` skips it on a machine that cannot reach crates.io.
//!
//! Wall times, uncapped against each recipe (not asserted: machines are noisy):
//! `cargo test --all-features --test it third_party -- --ignored --nocapture`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gpu_test_permit::decision::{Decision, check};
use gpu_test_permit::probe::Backend;
use gpu_test_permit::trace::{peak_concurrency, read_events};

use crate::recipes::{TOOL_FILE, tool_config_with};
use crate::util::{bin, clear_permit_env, tempdir};

const CRATE: &str = "isomesh-gpu";
const VERSION: &str = "0.0.13";
/// SHA-256 of `isomesh-gpu-0.0.13.crate`, as in the crates.io index.
const SHA256: &str = "1a9db01112a02fc349e47ec063a15a23412aef0078ead4df14b064151e932375";

/// Permits per GPU in these runs; nextest runs more test processes than this at once.
const N: usize = 2;
const TEST_THREADS: &str = "6";

/// Tests that open a wgpu device (48): each fails without a Vulkan driver, or (the last three
/// here) prints that it skips, which the checks below refuse.
const GPU_TESTS: [&str; 48] = [
    "buffers::tests::a_deferred_queue_returns_the_bytes_under_their_key",
    "buffers::tests::a_deferred_readback_of_nothing_is_ready_at_once",
    "buffers::tests::a_deferred_readback_returns_the_bytes_it_was_asked_for",
    "buffers::tests::a_full_deferred_queue_refuses_and_stays_where_it_was",
    "buffers::tests::a_mismatched_sample_count_is_refused_rather_than_repaired",
    "buffers::tests::a_sampled_field_survives_the_round_trip_bit_for_bit",
    "buffers::tests::an_unaligned_deferred_readback_is_refused",
    "buffers::tests::an_unaligned_readback_is_refused",
    "buffers::tests::draining_an_empty_deferred_queue_harvests_nothing",
    "buffers::tests::f32_is_what_crosses_the_boundary",
    "buffers::tests::x_varies_fastest",
    "field_sampler::tests::a_base_of_a_different_size_is_refused",
    "field_sampler::tests::a_fold_over_an_uploaded_base_matches_the_cpu",
    "field_sampler::tests::a_gpu_evaluated_field_extracts_the_same_mesh",
    "field_sampler::tests::a_gpu_folded_log_extracts_the_same_mesh",
    "field_sampler::tests::a_mixed_log_matches_the_cpu_in_order",
    "field_sampler::tests::an_empty_fold_copies_the_base_bit_for_bit",
    "field_sampler::tests::an_empty_log_is_the_base_field",
    "field_sampler::tests::every_brush_op_matches_the_cpu_fold",
    "field_sampler::tests::every_brush_shape_matches_the_cpu",
    "field_sampler::tests::the_flat_index_is_not_transposed",
    "field_sampler::tests::the_gpu_field_matches_the_cpu_within_a_measured_bound",
    "headless::tests::a_device_opens_without_a_window",
    "headless::tests::the_headless_device_has_no_experimental_features",
    "marching_cubes::tests::a_budget_smaller_than_the_surface_truncates_detectably",
    "marching_cubes::tests::a_field_with_no_surface_extracts_nothing",
    "marching_cubes::tests::empty_extraction_still_yields_bindable_buffers",
    "marching_cubes::tests::every_gpu_vertex_is_a_cpu_vertex_to_within_one_ulp",
    "marching_cubes::tests::extract_buffers_matches_extract_and_skips_the_geometry_readback",
    "marching_cubes::tests::extraction_is_deterministic",
    "marching_cubes::tests::normals_face_away_from_the_solid",
    "marching_cubes::tests::the_agreement_is_a_distance_and_holds_at_a_non_power_of_two_spacing",
    "marching_cubes::tests::the_indirect_path_produces_the_same_geometry",
    "marching_cubes::tests::the_triangle_count_matches_the_cpu_on_every_field",
    "mesh_render::tests::an_unsupported_device_is_refused_rather_than_crashed",
    "mesh_shader::tests::the_probe_reports_every_adapter",
    "scan::tests::a_realistic_sparse_distribution_matches_the_cpu",
    "scan::tests::a_scan_wider_than_the_dispatch_limit_is_refused",
    "scan::tests::a_single_block_matches_the_cpu",
    "scan::tests::degenerate_inputs_match_the_cpu",
    "scan::tests::exactly_one_full_block_matches_the_cpu",
    "scan::tests::scanning_zero_elements_matches_the_cpu_and_reads_nothing",
    "scan::tests::three_levels_match_the_cpu",
    "scan::tests::two_levels_with_a_partial_tail_match_the_cpu",
    "shader::tests::the_grid_module_is_valid_wgsl_on_a_real_device",
    "jump_flood::tests::a_field_with_no_surface_stays_finite",
    "jump_flood::tests::jump_flood_error_against_the_exact_transform",
    "marching_cubes::tests::the_timestamp_instrument_reports_a_positive_span_for_each_compute_pass",
];

/// What the suite prints where a GPU test returns early instead of running.
const SKIP_MARKS: [&str; 2] = [
    "no GPU adapter; skipping",
    "TIMESTAMP_QUERY unavailable on this adapter; span check skipped",
];

/// Tests that never touch the GPU (34): they pass without any Vulkan driver.
const CPU_TESTS: [&str; 34] = [
    "buffers::tests::a_deferred_queue_of_no_capacity_is_refused",
    "grid::tests::a_grid_needs_two_samples_on_every_axis",
    "grid::tests::a_grid_too_large_to_address_is_refused",
    "grid::tests::a_sample_position_is_not_a_fused_multiply_add",
    "grid::tests::a_sample_position_is_the_index_multiplied_not_accumulated",
    "grid::tests::counts_are_samples_and_cells_respectively",
    "grid::tests::geometry_must_be_finite_and_positive",
    "grid::tests::packing_is_deterministic",
    "grid::tests::the_uniform_layout_is_two_vec4s_little_endian",
    "jump_flood::tests::strides_halve_from_half_the_longest_axis",
    "marching_cubes::tests::the_uploaded_table_is_isomeshs_own",
    "marching_cubes::tests::the_wgsl_corner_offset_is_the_documented_bit_layout",
    "marching_cubes::tests::the_wgsl_edge_corners_are_isomeshs_own",
    "mesh_render::tests::the_camera_uniform_is_column_major_and_64_bytes",
    "mesh_render::tests::the_draw_uniform_is_padded_to_sixteen_bytes",
    "mesh_render::tests::the_mesh_shader_is_a_builtin_and_composes",
    "mesh_shader::tests::naga_implements_the_wgsl_mesh_shader_extension",
    "scan::tests::the_cpu_reference_is_an_exclusive_scan",
    "shader::tests::a_cycle_is_an_error_rather_than_being_absorbed",
    "shader::tests::a_disabled_region_still_tracks_nesting",
    "shader::tests::a_malformed_include_is_refused",
    "shader::tests::a_missing_module_is_named",
    "shader::tests::a_module_included_twice_appears_once",
    "shader::tests::an_include_in_a_dead_branch_is_neither_pasted_nor_consumed",
    "shader::tests::an_include_pastes_the_module_in_place",
    "shader::tests::composition_is_deterministic",
    "shader::tests::every_shader_permutation_validates",
    "shader::tests::ifdef_and_ifndef_select_opposite_branches",
    "shader::tests::regions_nest",
    "shader::tests::text_without_directives_passes_through",
    "shader::tests::the_grid_module_declares_what_the_cpu_side_packs",
    "shader::tests::the_validator_rejects_invalid_wgsl",
    "shader::tests::the_variant_sweep_is_the_full_cross_product",
    "shader::tests::unbalanced_directives_are_refused_with_a_line_number",
];

/// GPU tests left out of every run: they fail on a software adapter by the suite's own design
/// (it refuses a CPU adapter, and two expect a GPU's `f32` results bit for bit equal to libm).
const NOT_ON_LAVAPIPE: [&str; 3] = [
    "headless::tests::the_adapter_is_not_a_software_rasteriser",
    "field_sampler::tests::no_field_agrees_with_libm_bit_for_bit",
    "field_sampler::tests::the_field_of_exact_operations_is_the_closest",
];

/// `test(=a) | test(=b) | ...`: a nextest filterset naming exactly `tests`.
fn filterset(tests: &[&str]) -> String {
    tests
        .iter()
        .map(|t| format!("test(={t})"))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Whether this run should go ahead: prints why not where it should not.
fn should_run() -> bool {
    if std::env::var("GPU_TEST_PERMIT_THIRD_PARTY").is_ok_and(|v| v == "off") {
        eprintln!("third_party: SKIPPED, GPU_TEST_PERMIT_THIRD_PARTY=off");
        return false;
    }
    match check(Backend::Wgpu) {
        Decision::Run => {}
        Decision::Skip(why) => {
            eprintln!("third_party: SKIPPED, {CRATE}'s GPU tests need a wgpu adapter: {why}");
            return false;
        }
        Decision::Fail(why) => panic!("third_party: {why}"),
    }
    let nextest = Command::new(cargo_bin())
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !nextest {
        eprintln!(
            "third_party: SKIPPED, cargo-nextest is not installed (cargo install cargo-nextest)"
        );
    }
    nextest
}

fn cargo_bin() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| "cargo".into(), PathBuf::from)
}

/// Cargo in `dir`, with no permit or nextest variables of the run it is part of. No debug
/// info in the suite's build: a quarter less compile time, and no test reads it.
fn cargo(dir: &Path) -> Command {
    let mut c = Command::new(cargo_bin());
    clear_permit_env(&mut c);
    c.current_dir(dir).env("CARGO_PROFILE_DEV_DEBUG", "0");
    c
}

fn run_ok(c: &mut Command, what: &str) -> Output {
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("third_party: {what}: {e}"));
    assert!(
        out.status.success(),
        "third_party: {what} failed ({})\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The suite's source and the target directory its build goes to, ready and built once per
/// process.
struct Suite {
    source: PathBuf,
    target: PathBuf,
}

fn suite() -> &'static Suite {
    static SUITE: OnceLock<Suite> = OnceLock::new();
    SUITE.get_or_init(|| {
        let source = unpacked().unwrap_or_else(|e| {
            panic!(
                "third_party: could not get {CRATE} {VERSION} through cargo: {e}\n\
                 (the test needs crates.io; GPU_TEST_PERMIT_THIRD_PARTY=off skips it)"
            )
        });
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("third-party");
        // Its own Cargo.lock, as published: the same dependencies on every run.
        run_ok(
            cargo(&source).args(["fetch", "--locked"]),
            &format!("fetching the dependencies of {CRATE} {VERSION}"),
        );
        let built = Instant::now();
        run_ok(
            cargo(&source)
                .args(["nextest", "run", "--offline", "--locked", "--no-run"])
                .arg("--target-dir")
                .arg(&target),
            &format!("building the tests of {CRATE} {VERSION}"),
        );
        eprintln!(
            "third_party: {CRATE} {VERSION} in {}, built in {:.0?}",
            source.display(),
            built.elapsed()
        );
        Suite { source, target }
    })
}

/// The crate's published source, unpacked from the `.crate` file that cargo downloaded and
/// checked against the registry index, after a second check against [`SHA256`]. It goes to a
/// directory outside this workspace (a package inside it would be taken for a member), owned
/// by this user and kept between runs, so its build stays fresh.
fn unpacked() -> Result<PathBuf, String> {
    let home = std::env::temp_dir().join(format!(
        "gpu-test-permit-third-party-{}",
        // SAFETY: getuid has no preconditions and cannot fail.
        unsafe { libc::getuid() }
    ));
    private_dir(&home)?;
    let source = home.join(format!("{CRATE}-{VERSION}-{}", &SHA256[..16]));
    if source.join(".verified").is_file() {
        return Ok(source);
    }
    let file = downloaded()?;
    let sum = Command::new("sha256sum")
        .arg(&file)
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    let sum = String::from_utf8_lossy(&sum.stdout);
    let sum = sum.split_whitespace().next().unwrap_or("");
    if sum != SHA256 {
        return Err(format!(
            "{} has SHA-256 {sum:?}, not the pinned {SHA256}",
            file.display()
        ));
    }
    let staging = tempfile::Builder::new()
        .prefix("unpack")
        .tempdir_in(&home)
        .map_err(|e| e.to_string())?;
    let out = Command::new("tar")
        .arg("-xzf")
        .arg(&file)
        .arg("-C")
        .arg(staging.path())
        .output()
        .map_err(|e| format!("tar: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tar -xzf {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let tree = staging.path().join(format!("{CRATE}-{VERSION}"));
    std::fs::write(tree.join(".verified"), SHA256).map_err(|e| e.to_string())?;
    // Another test process may have got there first: its tree is as good as ours.
    if std::fs::rename(&tree, &source).is_err() && !source.join(".verified").is_file() {
        return Err(format!("could not move the source to {}", source.display()));
    }
    Ok(source)
}

/// Creates `dir` (mode 0700) or checks that it is a directory of this user that no one else
/// can write to.
fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a private directory of this user",
            dir.display()
        ));
    }
    Ok(())
}

/// The `.crate` file in cargo's download cache, fetched by a throwaway package that depends on
/// exactly this version where it is not there yet.
fn downloaded() -> Result<PathBuf, String> {
    let cache = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?
        .join("registry")
        .join("cache");
    let find = || {
        std::fs::read_dir(&cache).ok()?.find_map(|e| {
            let p = e.ok()?.path().join(format!("{CRATE}-{VERSION}.crate"));
            p.is_file().then_some(p)
        })
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    let dir = tempdir();
    std::fs::create_dir(dir.path().join("src")).map_err(|e| e.to_string())?;
    std::fs::write(dir.path().join("src/lib.rs"), "").map_err(|e| e.to_string())?;
    std::fs::write(
        dir.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"fetch-third-party-suite\"\nversion = \"0.0.0\"\n\
             edition = \"2021\"\n\n[dependencies]\n{CRATE} = \"={VERSION}\"\n\n[workspace]\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let out = cargo(dir.path())
        .arg("fetch")
        .output()
        .map_err(|e| format!("cargo fetch: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo fetch: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    find().ok_or_else(|| {
        format!(
            "cargo fetch left no {CRATE}-{VERSION}.crate in {}",
            cache.display()
        )
    })
}

/// How the suite is run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Recipe {
    Uncapped,
    TargetRunner,
    Wrapper,
    /// The wrapper recipe without its test group: nextest starts GPU test processes on any
    /// free runner thread, and the permit alone holds the cap.
    WrapperNoGroup,
}

impl Recipe {
    fn name(self) -> &'static str {
        match self {
            Recipe::Uncapped => "uncapped",
            Recipe::TargetRunner => "target runner",
            Recipe::Wrapper => "wrapper script",
            Recipe::WrapperNoGroup => "wrapper, no group",
        }
    }
}

/// One run's findings.
struct RunResult {
    wall: Duration,
    output: String,
    /// Test names of the trace's hold events, sorted.
    held: Vec<String>,
    peak: usize,
}

/// `snippet` with `gpu-test-permit` replaced by the binary under test and the README's example
/// filter by the suite's GPU tests.
fn configured(snippet: &str) -> String {
    snippet
        .replace("gpu-test-permit run", &format!("{} run", bin().display()))
        .replace("\"gpu-test-permit\"", &format!("\"{}\"", bin().display()))
        .replace("test(/gpu/)", &filterset(&GPU_TESTS))
}

/// One `cargo nextest run` of the suite (less [`NOT_ON_LAVAPIPE`]) with N = [`N`], traced.
fn run_suite(recipe: Recipe) -> RunResult {
    let suite = suite();
    let work = tempdir();
    let trace = work.path().join("trace.json");
    let mut c = cargo(&suite.source);
    c.args(["nextest", "run", "--offline", "--locked"])
        .arg("--target-dir")
        .arg(&suite.target)
        .args(["--test-threads", TEST_THREADS, "--no-fail-fast"])
        .args([
            "--success-output",
            "immediate",
            "--failure-output",
            "immediate",
        ])
        .args(["-E", &format!("not ({})", filterset(&NOT_ON_LAVAPIPE))])
        .env("GPU_TEST_PERMIT_DIR", work.path().join("slots"))
        .env("REALIZAR_GPU_TEST_CONCURRENCY", N.to_string())
        .env("GPU_TEST_PERMIT_TRACE", &trace);
    let tool_file = work.path().join("gpu-test-permit.toml");
    match recipe {
        Recipe::Uncapped => {}
        Recipe::TargetRunner => {
            // Only a tool config file: the suite's own configuration stays in force.
            let snippet = configured(&gpu_test_permit_cli::nextest_config::runner_snippet(
                N,
                &gpu_test_permit_cli::nextest_config::GroupFilter::Guessed,
            ));
            let at = snippet.find(TOOL_FILE).unwrap();
            let (cargo_part, tool_part) = snippet.split_at(at);
            let runner = cargo_part
                .lines()
                .find_map(|l| l.strip_prefix("runner = "))
                .unwrap();
            std::fs::write(&tool_file, tool_part).unwrap();
            let mut tool = std::ffi::OsString::from("gpu-test-permit:");
            tool.push(&tool_file);
            c.arg("--tool-config-file")
                .arg(tool)
                .arg("--config")
                .arg(format!("target.'cfg(all())'.runner={runner}"));
        }
        Recipe::Wrapper | Recipe::WrapperNoGroup => {
            // The experimental feature has to be the suite's own configuration's.
            let snippet = configured(&gpu_test_permit_cli::nextest_config::wrapper_snippet(
                N,
                &gpu_test_permit_cli::nextest_config::GroupFilter::Guessed,
            ));
            let at = snippet.find(TOOL_FILE).unwrap();
            let (suite_part, tool_part) = snippet.split_at(at);
            let tool_part = match recipe {
                Recipe::WrapperNoGroup => tool_part.split("[test-groups]").next().unwrap(),
                _ => tool_part,
            };
            std::fs::write(&tool_file, tool_part).unwrap();
            c.args(tool_config_with(&tool_file, suite_part));
        }
    }
    let start = Instant::now();
    let out = run_ok(&mut c, &format!("{CRATE}'s tests, {recipe:?}"));
    let wall = start.elapsed();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let events = if trace.exists() {
        read_events(&trace).unwrap()
    } else {
        Vec::new()
    };
    let mut held: Vec<String> = events
        .iter()
        .filter(|e| e.name == "hold")
        .map(|e| e.args.test.clone())
        .collect();
    held.sort();
    RunResult {
        wall,
        output,
        held,
        peak: peak_concurrency(&events),
    }
}

/// The suite ran whole on the device (no GPU test returned early), and the cap held: every GPU
/// test held a permit once, no CPU test did, and never more than N at once.
fn check_capped(recipe: Recipe) {
    let run = run_suite(recipe);
    let all = GPU_TESTS.len() + CPU_TESTS.len();
    assert!(
        run.output
            .contains(&format!("{all} tests run: {all} passed")),
        "{recipe:?}: not every test passed:\n{}",
        run.output
    );
    for mark in SKIP_MARKS {
        assert!(
            !run.output.contains(mark),
            "{recipe:?}: a GPU test did not run ({mark:?}):\n{}",
            run.output
        );
    }
    if let Some(adapter) = run.output.lines().find(|l| l.contains("advertised")) {
        eprintln!("third_party: {recipe:?}: {}", adapter.trim());
    }
    let mut gpu: Vec<&str> = GPU_TESTS.to_vec();
    gpu.sort();
    assert_eq!(
        run.held, gpu,
        "{recipe:?}: the permits held are not exactly the GPU tests'"
    );
    for t in CPU_TESTS {
        assert!(
            !run.held.iter().any(|h| h == t),
            "{recipe:?}: {t} took a permit"
        );
    }
    assert!(
        (1..=N).contains(&run.peak),
        "{recipe:?}: {} permits held at once, N = {N}",
        run.peak
    );
    eprintln!(
        "third_party: {recipe:?}: {} GPU tests held permits, peak {}, {:.1?}",
        run.held.len(),
        run.peak,
        run.wall
    );
}

#[test]
fn target_runner_recipe_caps_a_third_party_suite() {
    if should_run() {
        check_capped(Recipe::TargetRunner);
    }
}

#[test]
fn wrapper_script_recipe_caps_a_third_party_suite() {
    if should_run() {
        check_capped(Recipe::Wrapper);
    }
}

/// The GPU and CPU lists above are the suite's tests at this version, less those left out.
#[test]
fn the_third_party_suite_is_partitioned() {
    if !should_run() {
        return;
    }
    let suite = suite();
    let out = run_ok(
        cargo(&suite.source)
            .args(["nextest", "list", "--offline", "--locked"])
            .args(["--message-format", "oneline"])
            .arg("--target-dir")
            .arg(&suite.target),
        "listing the suite",
    );
    let listed: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    let ours: BTreeSet<String> = GPU_TESTS
        .iter()
        .chain(&CPU_TESTS)
        .chain(&NOT_ON_LAVAPIPE)
        .map(|t| t.to_string())
        .collect();
    assert_eq!(ours.len(), GPU_TESTS.len() + CPU_TESTS.len() + 3);
    assert_eq!(listed, ours);
}

/// `find-gpu-tests` on a suite that does not use the crate: its filter names exactly the GPU
/// tests, those that fail with every driver hidden and the three that return early saying so
/// in the suite's own words (`--skip-mark`, once for each of its two messages), and none of
/// the CPU tests.
#[test]
fn find_gpu_tests_names_the_gpu_tests_of_a_third_party_suite() {
    if !should_run() {
        return;
    }
    let suite = suite();
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.current_dir(&suite.source)
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .arg("find-gpu-tests")
        .args(SKIP_MARKS.iter().flat_map(|m| ["--skip-mark", m]))
        .args(["--", "--offline", "--locked", "--target-dir"])
        .arg(&suite.target);
    let out = run_ok(&mut c, "find-gpu-tests");
    let text = String::from_utf8_lossy(&out.stdout);
    let filter = text.split("'''").nth(1).unwrap_or_else(|| panic!("{text}"));
    let out = run_ok(
        cargo(&suite.source)
            .args(["nextest", "list", "--offline", "--locked"])
            .args(["--message-format", "oneline", "-E", filter])
            .arg("--target-dir")
            .arg(&suite.target),
        "listing the tests of the filter",
    );
    let named: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    let gpu: BTreeSet<String> = GPU_TESTS
        .iter()
        .chain(&NOT_ON_LAVAPIPE)
        .map(|t| t.to_string())
        .collect();
    assert_eq!(named, gpu, "{filter}");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Wall time of the whole `cargo nextest run` (built already), uncapped and under each recipe,
/// taking turns, `THIRD_PARTY_RUNS` (default 5) rounds; prints the medians, and the median of
/// each round's ratio to that round's uncapped run (rounds pair up runs made close in time,
/// which a machine whose load drifts needs).
#[test]
#[ignore = "timing: run with --ignored --nocapture"]
fn third_party_suite_timing() {
    if !should_run() {
        return;
    }
    let runs: usize = std::env::var("THIRD_PARTY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let recipes = [
        Recipe::Uncapped,
        Recipe::TargetRunner,
        Recipe::Wrapper,
        Recipe::WrapperNoGroup,
    ];
    let mut walls = vec![Vec::new(); recipes.len()];
    let mut peaks = vec![0; recipes.len()];
    run_suite(Recipe::Uncapped); // warm-up: caches, page cache
    for round in 0..runs {
        for (i, r) in recipes.iter().enumerate() {
            let run = run_suite(*r);
            eprintln!(
                "round {round} {:<18} {:6.2} s  peak {}",
                r.name(),
                run.wall.as_secs_f64(),
                run.peak
            );
            walls[i].push(run.wall.as_secs_f64());
            peaks[i] = peaks[i].max(run.peak);
        }
    }
    eprintln!(
        "{CRATE} {VERSION}, N = {N}, --test-threads {TEST_THREADS}, {} cores, {runs} rounds:",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    eprintln!("  recipe              median  ratio  peak  runs (s)");
    for (i, r) in recipes.iter().enumerate() {
        let ratios = walls[i].iter().zip(&walls[0]).map(|(w, u)| w / u).collect();
        let all: Vec<String> = walls[i].iter().map(|w| format!("{w:.2}")).collect();
        eprintln!(
            "  {:<18} {:6.2} s  {:.3}  {:4}  {}",
            r.name(),
            median(walls[i].clone()),
            median(ratios),
            peaks[i],
            all.join(" ")
        );
    }
}
