//! The fixtures' weighted forms (`units =`, `memory =`, `exclusive`, `on_skip =`) and the
//! memory they measure, run for real on the wgpu adapter this machine has (lavapipe in CI),
//! checked through the trace file each child process writes.

#[cfg(feature = "wgpu")]
use std::path::Path;
use std::process::Command;

#[cfg(feature = "wgpu")]
use gpu_test_permit::trace::{TraceEvent, read_events};

const ANSWER: &str = "FIXTURE-ANSWER ";
const MIB: u64 = 1 << 20;
/// The buffer the memory scenarios allocate.
#[cfg(feature = "wgpu")]
const BUFFER: u64 = 96 * MIB;

fn answers(mut c: Command) -> Vec<String> {
    let out = c.output().unwrap();
    let (stdout, stderr) = crate::probe::text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
        .lines()
        .filter_map(|l| l.split_once(ANSWER).map(|(_, a)| a.to_string()))
        .collect()
}

/// The child of [`wgpu_fixture_needs_and_measured_memory_reach_the_trace`]: one fixture of
/// each form, one after another, printing what each permit holds.
#[cfg(feature = "wgpu")]
#[test]
#[ignore = "helper: run in a child process by the fixture tests"]
fn wgpu_needs_child() {
    fn buffer(gpu: &gpu_test_permit::wgpu::WgpuFixture, size: u64) -> wgpu::Buffer {
        gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("known size"),
            size,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    }
    fn run() {
        let gpu = gpu_test_permit::wgpu::device_or_skip!();
        println!(
            "{ANSWER}BACKEND {:?} light units={} used={:?}",
            gpu.info().backend,
            gpu.permit().units(),
            gpu.memory_used()
        );
        drop(gpu);

        let gpu = gpu_test_permit::wgpu::device_or_skip!(units = 2);
        println!("{ANSWER}weighted units={}", gpu.permit().units());
        drop(gpu);

        // Asked for while the buffer lives: measured for sure.
        let gpu = gpu_test_permit::wgpu::device_or_skip!(memory = 600 * MIB,);
        let buf = buffer(&gpu, BUFFER);
        let used = gpu.memory_used();
        println!(
            "{ANSWER}memory units={} declared={:?} used-while-alive={used:?}",
            gpu.permit().units(),
            gpu.permit().memory()
        );
        drop(buf);
        drop(gpu);

        // Never asked for: the sample the fixture takes as it drops sees the buffer, which
        // here (unlike in a real test) outlives the fixture.
        let gpu = gpu_test_permit::wgpu::device_or_skip!(memory = 200 * MIB, units = 1);
        let buf = buffer(&gpu, BUFFER);
        drop(gpu);
        drop(buf);

        // More units than a GPU has (N = 4): a failure with the pool's advice, not a wait.
        let err = gpu_test_permit::wgpu::device_for(gpu_test_permit::GpuNeed::default().units(5))
            .unwrap_err();
        println!("{ANSWER}too-large skip={} {err}", err.is_skip());

        let gpu = gpu_test_permit::wgpu::device_or_skip!(exclusive);
        println!(
            "{ANSWER}exclusive units={} exclusive={}",
            gpu.permit().units(),
            gpu.permit().is_exclusive()
        );
    }
    run();
    println!("{ANSWER}DONE");
}

#[cfg(feature = "wgpu")]
fn holds(trace: &Path) -> Vec<TraceEvent> {
    read_events(trace)
        .unwrap()
        .into_iter()
        .filter(|e| e.name == "hold")
        .collect()
}

/// Each macro form holds what it says, and the wgpu fixture's measured memory (the device's
/// allocator report) reaches the trace's hold event: at least the buffer the test allocated.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_fixture_needs_and_measured_memory_reach_the_trace() {
    let dir = crate::util::tempdir();
    let trace = dir.path().join("trace.json");
    let mut c = crate::probe::helper("fixture::wgpu_needs_child");
    c.env("GPU_TEST_PERMIT_DIR", dir.path().join("slots"))
        .env("GPU_TEST_PERMIT_TRACE", &trace)
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "4")
        // Units of 256 MiB: 600 MiB takes 3, 200 MiB one.
        .env("GPU_TEST_PERMIT_GPU_MEMORY", "1GiB");
    let answers = answers(c);
    // A child whose fixture skipped answers only DONE.
    let Some(first) = answers.first().filter(|a| *a != "DONE") else {
        let required = matches!(
            &gpu_test_permit::config::Config::from_env().require,
            Ok(p) if p.requires(gpu_test_permit::probe::Backend::Wgpu)
        );
        assert!(!required, "wgpu is required, but the fixture skipped");
        eprintln!("no wgpu adapter here (install mesa-vulkan-drivers for lavapipe)");
        return;
    };
    assert_eq!(
        answers.last().map(String::as_str),
        Some("DONE"),
        "{answers:?}"
    );
    let vulkan = first.starts_with("BACKEND Vulkan");
    assert!(first.contains("light units=1"), "{first}");
    assert!(
        answers.contains(&"weighted units=2".to_string()),
        "{answers:?}"
    );
    assert!(
        answers.contains(&"exclusive units=4 exclusive=true".to_string()),
        "{answers:?}"
    );
    let too_large = answers
        .iter()
        .find(|a| a.starts_with("too-large "))
        .unwrap();
    assert!(
        too_large.starts_with(
            "too-large skip=false asked for a GPU permit of 5 units, but a GPU has only 4"
        ),
        "{too_large}"
    );
    let memory = answers.iter().find(|a| a.starts_with("memory ")).unwrap();
    assert!(
        memory.starts_with(&format!("memory units=3 declared=Some({})", 600 * MIB)),
        "{memory}"
    );

    let holds = holds(&trace);
    let units: Vec<usize> = holds.iter().map(|h| h.args.units).collect();
    assert_eq!(units, [1, 2, 3, 1, 4], "{holds:#?}");
    let used: Vec<Option<u64>> = holds.iter().map(|h| h.args.memory_used).collect();
    eprintln!("measured memory per hold (bytes): {used:?}; answers: {answers:?}");
    let declared: Vec<Option<u64>> = holds.iter().map(|h| h.args.memory).collect();
    assert_eq!(
        declared,
        [None, None, Some(600 * MIB), Some(200 * MIB), None]
    );
    if !vulkan {
        // GL and Metal devices give no allocator report: nothing measured, nothing recorded.
        eprintln!("not Vulkan ({first}): no allocator report to check");
        return;
    }
    // Every Vulkan device reserves memory for wgpu's own buffers.
    assert!(used.iter().all(|u| u.is_some_and(|u| u > 0)), "{used:?}");
    let at_least_buffer = |u: Option<u64>| u.is_some_and(|u| u >= BUFFER);
    assert!(memory.contains("used-while-alive=Some("), "{memory}");
    assert!(at_least_buffer(used[2]), "asked while alive: {used:?}");
    assert!(at_least_buffer(used[3]), "sampled at drop: {used:?}");
}

/// The child of [`fixture_macros_return_the_on_skip_value_with_their_needs`].
#[test]
#[ignore = "helper: run in a child process by the fixture tests"]
fn skip_child() {
    #[cfg(feature = "wgpu")]
    {
        fn weighted() -> &'static str {
            let _gpu = gpu_test_permit::wgpu::device_or_skip!(units = 2, on_skip = "skipped");
            "ran"
        }
        fn unit() -> Option<u32> {
            let _gpu = gpu_test_permit::wgpu::device_or_skip!(on_skip = None, memory = 1 << 30);
            Some(1)
        }
        println!("{ANSWER}wgpu {} {:?}", weighted(), unit());
    }
    #[cfg(feature = "cuda")]
    {
        fn cuda() -> Result<(), &'static str> {
            let _gpu =
                gpu_test_permit::cuda::context_or_skip!(memory = 8 << 30, on_skip = Err("skipped"));
            Ok(())
        }
        fn whole() -> u8 {
            let _gpu = gpu_test_permit::cuda::context_or_skip!(exclusive, on_skip = 7);
            0
        }
        println!("{ANSWER}cuda {:?} {}", cuda(), whole());
    }
}

/// Without a device (wgpu asked for a backend this platform lacks, CUDA through the stand-in
/// driver that reports none) the macros' new forms skip and return their `on_skip` value.
#[test]
fn fixture_macros_return_the_on_skip_value_with_their_needs() {
    let dir = crate::util::tempdir();
    let mut c = crate::probe::helper("fixture::skip_child");
    c.env("GPU_TEST_PERMIT_DIR", dir.path())
        .env("WGPU_BACKEND", "dx12")
        .env("GPU_TEST_PERMIT_REQUIRE", "none");
    #[cfg(feature = "cuda")]
    c.env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
        .env("CUDA_PROBE_STUB", "zero");
    let answers = answers(c);
    #[cfg(feature = "wgpu")]
    assert!(
        answers.contains(&"wgpu skipped None".to_string()),
        "{answers:?}"
    );
    #[cfg(feature = "cuda")]
    assert!(
        answers.contains(&"cuda Err(\"skipped\") 7".to_string()),
        "{answers:?}"
    );
    let _ = answers;
}

/// The child of [`the_memory_budget_comes_from_discrete_cuda_devices_only`]: what a 512 MiB
/// declaration holds.
#[test]
#[ignore = "helper: run in a child process by the fixture tests"]
fn budget_child() {
    let permit = gpu_test_permit::acquire_memory(512 * MIB);
    println!("{ANSWER}units={}", permit.units());
}

/// Without `GPU_TEST_PERMIT_GPU_MEMORY` the budget is a discrete CUDA device's memory; a
/// device that shares memory with the CPU (as a GB10 does) gives none, so a declaration counts
/// as one unit and the process says so, until the variable sets one. (The stand-in driver
/// reports 1 GiB discrete device 0 and, with two devices, an integrated device 1.)
#[cfg(feature = "cuda")]
#[test]
fn the_memory_budget_comes_from_discrete_cuda_devices_only() {
    let run = |devices: &str, budget: Option<&str>| {
        let dir = crate::util::tempdir();
        let mut c = crate::probe::helper("fixture::budget_child");
        c.env("GPU_TEST_PERMIT_DIR", dir.path())
            .env("REALIZAR_GPU_TEST_CONCURRENCY", "4")
            .env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
            .env("CUDA_PROBE_STUB", "ok")
            .env("CUDA_PROBE_STUB_DEVICES", devices);
        if let Some(b) = budget {
            c.env("GPU_TEST_PERMIT_GPU_MEMORY", b);
        }
        let out = c.output().unwrap();
        let (stdout, stderr) = crate::probe::text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let units = stdout
            .lines()
            .find_map(|l| l.split_once(ANSWER).map(|(_, a)| a.to_string()))
            .unwrap_or_else(|| panic!("no answer in:\n{stdout}\n{stderr}"));
        (units, stderr.contains("no memory budget is known"))
    };
    // Discrete, 1 GiB: units of 256 MiB, 512 MiB takes two.
    assert_eq!(run("1", None), ("units=2".into(), false));
    // One of the devices is integrated: no budget from the probe.
    assert_eq!(run("2", None), ("units=1".into(), true));
    // A budget set by hand: 2 GiB in units of 512 MiB.
    assert_eq!(run("2", Some("2GiB")), ("units=1".into(), false));
    assert_eq!(run("2", Some("1GiB")), ("units=2".into(), false));
}
