//! GPU tests named after what they compute, as wgpu's own examples are (`boids`, `water`), beside
//! CPU tests of the references they are checked against. A filter by name such as
//! `test(/gpu/)` misses the GPU ones; `gpu-test-permit find-gpu-tests` finds them (with no
//! driver to be found they print the crate's skip line) and none of the CPU ones.

use gpu_test_permit_example_suite::{close, floats, map2, ramp};

const N: usize = 4096;

/// One particle step: the position advanced by the velocity over a time step of 0.01.
fn advance(position: f32, velocity: f32) -> f32 {
    position + velocity * 0.01
}

/// A water surface relaxing: each height moves halfway to its right neighbour's.
fn relax(height: f32, neighbour: f32) -> f32 {
    (height + neighbour) * 0.5
}

/// `heights` shifted left by one, wrapping: each height's right neighbour.
fn neighbours(heights: &[f32]) -> Vec<f32> {
    heights
        .iter()
        .cycle()
        .skip(1)
        .take(heights.len())
        .copied()
        .collect()
}

#[test]
fn boids_advance_as_the_cpu_does() {
    let gpu = gpu_test_permit::wgpu::device_or_skip!();
    let positions = floats(N, 5, -1.0, 1.0);
    let velocities = floats(N, 6, -0.5, 0.5);
    let got: Vec<f32> = map2(&gpu, "a + b * 0.01", &positions, &velocities);
    let want: Vec<f32> = positions
        .iter()
        .zip(&velocities)
        .map(|(&p, &v)| advance(p, v))
        .collect();
    close(&got, &want, 1e-6).unwrap();
}

#[test]
fn water_relaxes_as_the_cpu_does() {
    let gpu = gpu_test_permit::wgpu::device_or_skip!();
    let heights = ramp(N, 0.0, 1.0);
    let right = neighbours(&heights);
    let got: Vec<f32> = map2(&gpu, "(a + b) * 0.5", &heights, &right);
    let want: Vec<f32> = heights
        .iter()
        .zip(&right)
        .map(|(&h, &r)| relax(h, r))
        .collect();
    close(&got, &want, 1e-6).unwrap();
}

#[test]
fn advance_moves_by_velocity_times_the_step() {
    assert_eq!(advance(1.0, 0.0), 1.0);
    assert!((advance(1.0, 2.0) - 1.02).abs() < 1e-6);
    assert!((advance(0.0, -1.0) + 0.01).abs() < 1e-6);
}

#[test]
fn relaxing_a_flat_surface_keeps_it_flat() {
    let flat = vec![0.25f32; 16];
    let relaxed: Vec<f32> = flat
        .iter()
        .zip(neighbours(&flat))
        .map(|(&h, r)| relax(h, r))
        .collect();
    assert_eq!(relaxed, flat);
}

#[test]
fn close_names_the_first_mismatch() {
    assert_eq!(close(&[1.0, 2.0], &[1.0, 2.0], 0.0), Ok(()));
    assert_eq!(
        close(&[1.0, 2.0, 5.0], &[1.0, 3.0, 6.0], 1e-6),
        Err("element 1: GPU 2, CPU 3".to_string())
    );
}
