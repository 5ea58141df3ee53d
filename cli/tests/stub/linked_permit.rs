//! A test program linked to `libcuda` at build time (`DT_NEEDED`, as cudarc's
//! `dynamic-linking` or `cust` link it) that never calls it, and uses this crate: with the
//! argument `permit` it takes a permit, else none; with `run PROGRAM ARGS...` after it, it
//! runs PROGRAM as a child process while it holds the permit, without passing the permit on
//! (the child holds none), and fails where PROGRAM fails. Under nextest the crate looks at what the
//! process has mapped (at the first permit, or as a process without one exits): the driver
//! there is linked at build time, not loaded without a permit. Built by cli/tests/it/watch.rs:
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

fn main() {
    // Referenced, never called: the link keeps libcuda among the program's dependencies.
    std::hint::black_box(cuInit as unsafe extern "C" fn(u32) -> i32);
    let args: Vec<String> = std::env::args().skip(1).collect();
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
