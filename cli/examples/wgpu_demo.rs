//! Six threads do real wgpu compute through the crate's fixture, under a cap of N permits.
//!
//! ```sh
//! cargo run --features wgpu --example wgpu_demo
//! REALIZAR_GPU_TEST_CONCURRENCY=3 cargo run --features wgpu --example wgpu_demo
//! ```
//!
//! Each thread takes `gpu_test_permit::wgpu::device()` (permit, probe verdict, adapter, device),
//! runs a compute shader over 64 Ki floats, checks every value against the CPU, and drops the
//! device before the permit. The demo runs the threads in a copy of itself with a private slot
//! directory and trace file, then prints a timeline of who held the GPU when. On a machine
//! without a GPU, Mesa's lavapipe is the device (`apt-get install mesa-vulkan-drivers`).

use std::process::{Command, ExitCode};
use std::thread;

use gpu_test_permit::config::{CONCURRENCY_VAR, Config, DIR_VAR, TRACE_VAR};
use gpu_test_permit::wgpu::{FixtureError, WgpuFixture};
use gpu_test_permit_cli::trace::{peak_concurrency, read_events, timeline};
use wgpu::util::DeviceExt;

const THREADS: u32 = 6;
const LEN: usize = 64 * 1024;
/// Iterations of the shader's inner loop: enough work to see the holds on a timeline.
const ROUNDS: u32 = 256;
const CHILD_VAR: &str = "WGPU_DEMO_CHILD";

fn main() -> ExitCode {
    if std::env::var_os(CHILD_VAR).is_some() {
        return child();
    }
    let n = Config::global().concurrency.get();
    let dir =
        std::env::temp_dir().join(format!("gpu-test-permit-wgpu-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating the demo directory");
    let trace = dir.join("trace.json");
    println!("{THREADS} threads doing wgpu compute, {CONCURRENCY_VAR}={n}");
    let status = Command::new(std::env::current_exe().expect("finding the demo executable"))
        .env(CHILD_VAR, "1")
        .env(DIR_VAR, dir.join("slots"))
        .env(TRACE_VAR, &trace)
        .env(CONCURRENCY_VAR, n.to_string())
        .env_remove("GPU_TEST_PERMIT_CONCURRENCY")
        .status()
        .expect("starting the demo process");
    let events = read_events(&trace).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    if !status.success() {
        eprintln!("the demo process failed: {status}");
        return ExitCode::FAILURE;
    }
    if events.is_empty() {
        return ExitCode::SUCCESS; // skipped: no wgpu adapter
    }
    println!("\n{}", timeline(&events, 25));
    let peak = peak_concurrency(&events);
    println!("at most {peak} threads held the GPU at once (N = {n})");
    if peak > n {
        eprintln!("the cap was not kept");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn child() -> ExitCode {
    let results: Vec<Result<String, FixtureError>> = thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|k| {
                s.spawn(move || {
                    let gpu = gpu_test_permit::wgpu::device()?;
                    let checked = compute_and_check(&gpu, k);
                    Ok(format!(
                        "thread {k}: {checked} values checked on '{}' ({:?})",
                        gpu.info().name,
                        gpu.info().backend
                    ))
                    // `gpu` drops here: queue, device and adapter, then the permit.
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for r in results {
        match r {
            Ok(line) => println!("{line}"),
            Err(FixtureError::Skip(reason)) => {
                println!("no wgpu device here, nothing to show: {reason}");
                return ExitCode::SUCCESS;
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Runs `x -> x * 0.5 + k` ROUNDS times per element on the GPU and checks the result.
fn compute_and_check(gpu: &WgpuFixture, k: u32) -> usize {
    let (device, queue) = (gpu.device(), gpu.queue());
    let input: Vec<f32> = (0..LEN).map(|i| (i % 1000) as f32).collect();
    let shader = format!(
        "@group(0) @binding(0) var<storage, read_write> data: array<f32>;
         @compute @workgroup_size(64)
         fn main(@builtin(global_invocation_id) id: vec3<u32>) {{
             if (id.x >= arrayLength(&data)) {{ return; }}
             var x = data[id.x];
             for (var r = 0u; r < {ROUNDS}u; r++) {{ x = x * 0.5 + {k}.0; }}
             data[id.x] = x;
         }}"
    );
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("wgpu_demo"),
        source: wgpu::ShaderSource::Wgsl(shader.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("wgpu_demo"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bytes: Vec<u8> = input.iter().flat_map(|x| x.to_le_bytes()).collect();
    let data = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("data"),
        contents: &bytes,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    });
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: bytes.len() as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("wgpu_demo"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: data.as_entire_binding(),
        }],
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups((LEN as u32).div_ceil(64), 1, 1);
    }
    enc.copy_buffer_to_buffer(&data, 0, &readback, 0, bytes.len() as u64);
    queue.submit([enc.finish()]);
    readback.map_async(wgpu::MapMode::Read, .., |r| r.expect("mapping the result"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("waiting for the GPU");
    let view = readback.get_mapped_range(..).expect("reading the result");
    let got: Vec<f32> = view
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    for (i, (&g, &x0)) in got.iter().zip(&input).enumerate() {
        let mut x = x0;
        for _ in 0..ROUNDS {
            x = x * 0.5 + k as f32;
        }
        assert!(
            (g - x).abs() <= 1e-3 * x.abs().max(1.0),
            "thread {k}, element {i}: GPU {g}, CPU {x}"
        );
    }
    got.len()
}
