//! Fixture set-up cost: `gpu_test_permit::wgpu::device()` (permit, cached probe verdict,
//! adapter enumeration and choice, device) beside the bare wgpu set-up it wraps (adapter
//! enumeration, first adapter, device), both on a reused instance of the same backends, each
//! dropped at the end of the iteration.
//!
//! Run with `cargo bench --features wgpu --bench fixture`; on a machine without a GPU, Mesa's
//! lavapipe is the device. See BENCHMARKS.md for figures.
#![allow(missing_docs)]

use std::sync::OnceLock;
use std::time::Duration;

use criterion::{Criterion, criterion_group};

fn bare() -> (wgpu::Device, wgpu::Queue) {
    // Like the fixture: one instance, reused (a fresh Vulkan instance per call exhausted
    // NVIDIA's driver after a few dozen on one thread), on the primary backends.
    static INSTANCE: OnceLock<wgpu::Instance> = OnceLock::new();
    let backends = wgpu::Backends::PRIMARY;
    let instance = INSTANCE.get_or_init(|| {
        wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends,
            ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
        })
    });
    let adapter = pollster::block_on(instance.enumerate_adapters(backends))
        .into_iter()
        .next()
        .expect("a wgpu adapter (install mesa-vulkan-drivers for lavapipe)");
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default())).unwrap()
}

fn setup(c: &mut Criterion) {
    // The verdict is probed once per process (or per nextest run); warm it like a test run has.
    let first = gpu_test_permit::wgpu::device().expect("a wgpu device for the benchmark");
    drop(first);
    let mut g = c.benchmark_group("wgpu-setup");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("bare-wgpu", |b| b.iter(bare));
    g.bench_function("gpu-test-permit-fixture", |b| {
        b.iter(|| gpu_test_permit::wgpu::device().unwrap())
    });
    g.finish();
}

criterion_group!(benches, setup);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
