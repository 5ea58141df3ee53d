//! CUDA tests: each takes a permit-holding context and stream with one line. Without a CUDA
//! driver or device they skip with one line each; with `GPU_TEST_PERMIT_REQUIRE=cuda` they fail
//! instead.

#[test]
fn gpu_cuda_upload_roundtrip() {
    let gpu = gpu_test_permit::cuda::context_or_skip!();
    let host: Vec<f32> = (0..1024).map(|i| i as f32 * 0.5).collect();
    let dev = gpu.stream().clone_htod(&host).unwrap();
    assert_eq!(gpu.stream().clone_dtoh(&dev).unwrap(), host);
}

#[test]
fn gpu_cuda_zeroed_allocation() {
    let gpu = gpu_test_permit::cuda::context_or_skip!();
    let dev = gpu.stream().alloc_zeros::<u32>(4096).unwrap();
    let back = gpu.stream().clone_dtoh(&dev).unwrap();
    assert!(back.iter().all(|&x| x == 0));
}

#[test]
fn gpu_cuda_overwrite_then_zero() {
    let gpu = gpu_test_permit::cuda::context_or_skip!();
    let stream = gpu.stream();
    let mut dev = stream.clone_htod(&[7u8; 512]).unwrap();
    stream.memset_zeros(&mut dev).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(stream.clone_dtoh(&dev).unwrap(), vec![0u8; 512]);
}

#[test]
fn gpu_cuda_device_matches_probe() {
    let gpu = gpu_test_permit::cuda::context_or_skip!();
    let report = gpu_test_permit::probe::probe(gpu_test_permit::probe::Backend::Cuda);
    let devices = report
        .outcome
        .devices()
        .expect("the fixture ran, so the probe found devices");
    let name = gpu.context().name().unwrap();
    assert_eq!(devices[gpu.ordinal()].name, name);
}

/// A heavy test: it declares the memory it needs (1 GiB: with an 80 GiB budget and N = 4, one
/// unit of 20 GiB; with a 2 GiB budget, two of 512 MiB), and where NVML can tell, the
/// fixture's measurement covers the allocation.
#[test]
fn gpu_heavy_cuda_allocation() {
    let gpu = gpu_test_permit::cuda::context_or_skip!(memory = 1 << 30);
    let bytes = 256usize << 20;
    let dev = gpu.stream().alloc_zeros::<u8>(bytes).unwrap();
    gpu.stream().synchronize().unwrap();
    if let Some(used) = gpu.memory_used() {
        // NVML counts the whole process: the context, this buffer, and other tests' at once.
        assert!(used >= bytes as u64, "NVML reports {used} bytes");
    }
    drop(dev);
}
