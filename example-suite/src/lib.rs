//! Kernels for the example GPU test suite: a small helper that runs one WGSL expression per
//! element on the GPU of a [`WgpuFixture`], so each test is a line of WGSL and a CPU reference.

use gpu_test_permit::wgpu::WgpuFixture;
use wgpu::util::DeviceExt;

/// Element types the helper moves between CPU and GPU.
pub trait Element: bytemuck::Pod + std::fmt::Debug + PartialEq {
    /// The WGSL type name.
    const WGSL: &'static str;
}

macro_rules! element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const WGSL: &'static str = stringify!($t);
        }
    )*};
}

element!(f32, u32, i32);

/// Computes `out[i] = <expr>` on the GPU, where `expr` is WGSL over `a[i]` and `b[i]` (read as
/// `a` and `b`) and `i` (`u32`). `a` and `b` must have the same length.
///
/// # Panics
///
/// On a shader or device error (wgpu panics on uncaptured errors), and when the lengths differ.
pub fn map2<T: Element, U: Element>(gpu: &WgpuFixture, expr: &str, a: &[T], b: &[T]) -> Vec<U> {
    assert_eq!(a.len(), b.len(), "inputs of different lengths");
    let n = a.len();
    let (device, queue) = (gpu.device(), gpu.queue());
    let src = format!(
        "@group(0) @binding(0) var<storage, read> in_a: array<{t}>;
         @group(0) @binding(1) var<storage, read> in_b: array<{t}>;
         @group(0) @binding(2) var<storage, read_write> out: array<{u}>;
         @compute @workgroup_size(64)
         fn main(@builtin(global_invocation_id) id: vec3<u32>) {{
             let i = id.x;
             if (i >= arrayLength(&out)) {{ return; }}
             let a = in_a[i];
             let b = in_b[i];
             out[i] = {expr};
         }}",
        t = T::WGSL,
        u = U::WGSL,
    );
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("map2"),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("map2"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let input = |label, data: &[T]| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::cast_slice(data),
            usage: wgpu::BufferUsages::STORAGE,
        })
    };
    let (buf_a, buf_b) = (input("a", a), input("b", b));
    let size = (n * 4) as u64;
    let out = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("out"),
        size,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("map2"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: buf_a.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: buf_b.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: out.as_entire_binding(),
            },
        ],
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups((n as u32).div_ceil(64), 1, 1);
    }
    enc.copy_buffer_to_buffer(&out, 0, &readback, 0, size);
    queue.submit([enc.finish()]);
    readback.map_async(wgpu::MapMode::Read, .., |r| r.expect("mapping the result"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("waiting for the GPU");
    let view = readback.get_mapped_range(..).expect("reading the result");
    bytemuck::pod_collect_to_vec(&view)
}

/// `n` deterministic pseudo-random `f32`s in `[lo, hi)`.
pub fn floats(n: usize, seed: u32, lo: f32, hi: f32) -> Vec<f32> {
    words(n, seed)
        .into_iter()
        .map(|x| lo + (hi - lo) * (x >> 8) as f32 / (1u32 << 24) as f32)
        .collect()
}

/// `n` values from `lo` up to (not including) `hi`, in a saw-tooth of 1,000 steps: input for
/// large tests, cheaper to make than [`floats`].
pub fn ramp(n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let step = (hi - lo) / 1000.0;
    (0..n).map(|i| lo + (i % 1000) as f32 * step).collect()
}

/// `n` deterministic pseudo-random `u32`s (xorshift32).
pub fn words(n: usize, seed: u32) -> Vec<u32> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        })
        .collect()
}

/// Whether `got` matches `want` within `tol` relative (or absolute, near zero) error.
pub fn close(got: &[f32], want: &[f32], tol: f32) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} results, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if (g - w).abs() > tol * w.abs().max(1.0) {
            return Err(format!("element {i}: GPU {g}, CPU {w}"));
        }
    }
    Ok(())
}
