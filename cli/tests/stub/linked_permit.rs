//! A test program linked to `libcuda` at build time (`DT_NEEDED`, as cudarc's
//! `dynamic-linking` or `cust` link it) that never calls it, and uses this crate: with the
//! argument `permit` it takes a permit, else none; with `run PROGRAM ARGS...` after it, it
//! runs PROGRAM as a child process while it holds the permit, without passing the permit on
//! (the child holds none), and fails where PROGRAM fails. Under nextest the crate looks at what the
//! process has mapped (at the first permit, or as a process without one exits): the driver
//! there is linked at build time, not loaded without a permit. `map FILE` before the rest maps
//! FILE into the process (as a library is mapped, without loading it: the maps name it, the
//! loader's list does not); `twice` takes a permit, returns it, and takes a second one within
//! five seconds. Built by cli/tests/it/watch.rs:
//!
//! ```sh
//! rustc --edition 2024 cli/tests/stub/linked_permit.rs -o linked_permit \
//!     -L dependency=target/debug/deps \
//!     --extern gpu_test_permit=target/debug/deps/libgpu_test_permit-<hash>.rlib \
//!     -L <dir with libcuda.so>
//! ```

#[link(name = "cuda")]
unsafe extern "C" {
    fn cuInit(flags: u32) -> i32;
}

unsafe extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, offset: i64) -> *mut u8;
}

fn main() {
    // Referenced, never called: the link keeps libcuda among the program's dependencies.
    std::hint::black_box(cuInit as unsafe extern "C" fn(u32) -> i32);
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if let [map, file, ..] = args.as_slice()
        && map == "map"
    {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(file).expect("the file to map");
        let len = f.metadata().unwrap().len() as usize;
        // SAFETY: a private read-only mapping of an open file, never read, kept to the end.
        let at = unsafe { mmap(std::ptr::null_mut(), len, 1, 2, f.as_raw_fd(), 0) };
        assert!(!at.is_null() && at as isize != -1, "mmap of {file} failed");
        args.drain(..2);
    }
    if args.first().map(String::as_str) == Some("twice") {
        drop(gpu_test_permit::acquire());
        println!("held a permit");
        let second = gpu_test_permit::try_acquire_for(std::time::Duration::from_secs(5));
        second.expect("a second permit");
        println!("held a second permit");
        return;
    }
    if args.first().map(String::as_str) == Some("permit") {
        let _permit = gpu_test_permit::acquire();
        println!("held a permit");
        if let [_, run, program, rest @ ..] = args.as_slice()
            && run == "run"
        {
            let status = std::process::Command::new(program)
                .args(rest)
                .status()
                .expect("running the child");
            assert!(status.success(), "{program}: {status}");
        }
    }
}
