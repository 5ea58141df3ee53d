//! wgpu compute tests: each takes a permit-holding device with one line, runs a kernel and
//! checks it against the CPU. Copy the shape: `device_or_skip!()` first, GPU work after.
//!
//! On a machine without a wgpu adapter these skip with one line each; with
//! `GPU_TEST_PERMIT_REQUIRE=wgpu` (a GPU CI lane) they fail instead.
//!
//! Most tests are light: a few 16 KiB buffers, one permit unit each. The `gpu_heavy_*` tests at
//! the end move a million times more data and say so (`device_or_skip!(memory = ...)`), so
//! that they count as several light tests when a memory budget is set; both kinds share the
//! GPU in one run.

use gpu_test_permit_example_suite::{close, floats, map2, ramp, words};

const N: usize = 4096;

/// One test per float kernel: name, WGSL expression over `a` and `b`, CPU reference, tolerance.
macro_rules! float_tests {
    ($($name:ident: $expr:literal, |$a:ident, $b:ident| $cpu:expr, $tol:expr;)*) => {$(
        #[test]
        fn $name() {
            let gpu = gpu_test_permit::wgpu::device_or_skip!();
            let a = floats(N, 1, 0.5, 4.0);
            let b = floats(N, 2, 0.5, 4.0);
            let got: Vec<f32> = map2(&gpu, $expr, &a, &b);
            let want: Vec<f32> = a.iter().zip(&b).map(|(&$a, &$b)| $cpu).collect();
            close(&got, &want, $tol).unwrap();
        }
    )*};
}

/// One test per integer kernel, compared exactly.
macro_rules! word_tests {
    ($($name:ident: $expr:literal, |$a:ident, $b:ident| $cpu:expr;)*) => {$(
        #[test]
        fn $name() {
            let gpu = gpu_test_permit::wgpu::device_or_skip!();
            let a = words(N, 3);
            let b = words(N, 4);
            let got: Vec<u32> = map2(&gpu, $expr, &a, &b);
            let want: Vec<u32> = a.iter().zip(&b).map(|(&$a, &$b)| $cpu).collect();
            assert_eq!(got, want);
        }
    )*};
}

float_tests! {
    gpu_f32_add: "a + b", |a, b| a + b, 1e-6;
    gpu_f32_sub: "a - b", |a, b| a - b, 1e-6;
    gpu_f32_mul: "a * b", |a, b| a * b, 1e-6;
    gpu_f32_div: "a / b", |a, b| a / b, 1e-5;
    gpu_f32_min: "min(a, b)", |a, b| a.min(b), 0.0;
    gpu_f32_max: "max(a, b)", |a, b| a.max(b), 0.0;
    gpu_f32_abs_diff: "abs(a - b)", |a, b| (a - b).abs(), 1e-6;
    gpu_f32_sqrt: "sqrt(a)", |a, _b| a.sqrt(), 1e-5;
    gpu_f32_fma: "fma(a, b, 1.0)", |a, b| a.mul_add(b, 1.0), 1e-5;
    gpu_f32_clamp: "clamp(a, 1.0, 2.0)", |a, _b| a.clamp(1.0, 2.0), 0.0;
    gpu_f32_floor: "floor(a * b)", |a, b| (a * b).floor(), 0.0;
    gpu_f32_ceil: "ceil(a * b)", |a, b| (a * b).ceil(), 0.0;
    gpu_f32_fract: "fract(a * b)", |a, b| (a * b).fract(), 1e-5;
    gpu_f32_exp: "exp(a)", |a, _b| a.exp(), 1e-4;
    gpu_f32_log: "log(a)", |a, _b| a.ln(), 1e-4;
    gpu_f32_sin: "sin(a)", |a, _b| a.sin(), 1e-4;
    gpu_f32_cos: "cos(b)", |_a, b| b.cos(), 1e-4;
    gpu_f32_pow: "pow(a, 1.5)", |a, _b| a.powf(1.5), 1e-4;
    gpu_f32_hypot: "sqrt(a * a + b * b)", |a, b| a.hypot(b), 1e-5;
    gpu_f32_select: "select(b, a, a > b)", |a, b| if a > b { a } else { b }, 0.0;
    gpu_f32_step: "step(a, b)", |a, b| if b >= a { 1.0 } else { 0.0 }, 0.0;
    gpu_f32_mix: "mix(a, b, 0.25)", |a, b| a + (b - a) * 0.25, 1e-5;
    gpu_f32_saxpy: "2.5 * a + b", |a, b| 2.5 * a + b, 1e-5;
    gpu_f32_sign_diff: "sign(a - b)", |a, b| if a > b { 1.0 } else if a < b { -1.0 } else { 0.0 }, 0.0;
}

word_tests! {
    gpu_u32_wrapping_add: "a + b", |a, b| a.wrapping_add(b);
    gpu_u32_wrapping_mul: "a * b", |a, b| a.wrapping_mul(b);
    gpu_u32_xor: "a ^ b", |a, b| a ^ b;
    gpu_u32_and_or: "(a & b) | (a >> 16u)", |a, b| (a & b) | (a >> 16);
    gpu_u32_shift_left: "a << (b & 31u)", |a, b| a << (b & 31);
    gpu_u32_popcount: "countOneBits(a)", |a, _b| a.count_ones();
    gpu_u32_reverse_bits: "reverseBits(a)", |a, _b| a.reverse_bits();
    gpu_u32_leading_zeros: "countLeadingZeros(a >> (b & 31u))", |a, b| (a >> (b & 31)).leading_zeros();
    gpu_u32_min_max: "max(a, b) - min(a, b)", |a, b| a.max(b) - a.min(b);
}

#[test]
fn gpu_u32_invocation_index() {
    let gpu = gpu_test_permit::wgpu::device_or_skip!();
    let zeros = vec![0u32; N];
    let got: Vec<u32> = map2(&gpu, "i * 3u + 7u", &zeros, &zeros);
    let want: Vec<u32> = (0..N as u32).map(|i| i * 3 + 7).collect();
    assert_eq!(got, want);
}

#[test]
fn gpu_i32_negative_arithmetic() {
    let gpu = gpu_test_permit::wgpu::device_or_skip!();
    let a: Vec<i32> = (0..N as i32).map(|i| i - 2000).collect();
    let b: Vec<i32> = (0..N as i32).map(|i| 7 - i % 13).collect();
    let got: Vec<i32> = map2(&gpu, "a * b - abs(a)", &a, &b);
    let want: Vec<i32> = a.iter().zip(&b).map(|(&a, &b)| a * b - a.abs()).collect();
    assert_eq!(got, want);
}

#[test]
fn gpu_f32_to_u32_conversion() {
    let gpu = gpu_test_permit::wgpu::device_or_skip!();
    let a = floats(N, 5, 0.0, 1000.0);
    let got: Vec<u32> = map2(&gpu, "u32(a)", &a, &a);
    let want: Vec<u32> = a.iter().map(|&a| a as u32).collect();
    assert_eq!(got, want);
}

/// Two fixtures on one thread: the second is a nested permit and never waits on the first.
#[test]
fn gpu_two_devices_one_thread() {
    let first = gpu_test_permit::wgpu::device_or_skip!();
    let second = gpu_test_permit::wgpu::device_or_skip!();
    assert!(second.permit().is_nested());
    let a = floats(256, 6, 1.0, 2.0);
    let x: Vec<f32> = map2(&first, "a * 2.0", &a, &a);
    let y: Vec<f32> = map2(&second, "a * 2.0", &a, &a);
    assert_eq!(x, y);
}

/// Worker threads share the test's permit: their work runs under the one permit.
#[test]
fn gpu_worker_threads_share_the_device() {
    let gpu = gpu_test_permit::wgpu::device_or_skip!();
    let gpu = &gpu;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..3u32)
            .map(|k| {
                s.spawn(move || {
                    let _shared = gpu.permit().share();
                    let a = floats(512, 10 + k, 1.0, 2.0);
                    let got: Vec<f32> = map2(gpu, "a + 1.0", &a, &a);
                    let want: Vec<f32> = a.iter().map(|a| a + 1.0).collect();
                    close(&got, &want, 1e-6)
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap().unwrap();
        }
    });
}

/// Elements of a heavy test: four buffers of 16 MB (the most one 1-D dispatch of 64-wide
/// workgroups reaches is 65,535 x 64).
const HEAVY_N: usize = 4_000_000;

/// What a heavy test declares. Measured on lavapipe, such a test's device reserves 192 MiB
/// (wgpu's allocator takes memory in 64 to 256 MiB blocks; a device without buffers of its own
/// reserves 64 MiB). With `GPU_TEST_PERMIT_GPU_MEMORY=256MiB` and N = 2 a heavy test holds both
/// units, with N = 4 all four, and with no budget one (the process says so once).
const HEAVY_MEMORY: u64 = 256 << 20;

/// One heavy test per kernel, over [`HEAVY_N`] elements; the CPU checks every 997th.
macro_rules! heavy_tests {
    ($($name:ident: $expr:literal, |$a:ident, $b:ident| $cpu:expr, $tol:expr;)*) => {$(
        #[test]
        fn $name() {
            let gpu = gpu_test_permit::wgpu::device_or_skip!(memory = HEAVY_MEMORY);
            let a = ramp(HEAVY_N, 0.5, 4.0);
            let b = ramp(HEAVY_N, 1.0, 3.0);
            let got: Vec<f32> = map2(&gpu, $expr, &a, &b);
            assert_eq!(got.len(), HEAVY_N);
            let picked = |v: &[f32]| v.iter().copied().step_by(997).collect::<Vec<_>>();
            let want: Vec<f32> = picked(&a)
                .into_iter()
                .zip(picked(&b))
                .map(|($a, $b)| $cpu)
                .collect();
            close(&picked(&got), &want, $tol).unwrap();
        }
    )*};
}

heavy_tests! {
    gpu_heavy_saxpy: "2.5 * a + b", |a, b| 2.5 * a + b, 1e-5;
    gpu_heavy_hypot: "sqrt(a * a + b * b)", |a, b| a.hypot(b), 1e-5;
}
