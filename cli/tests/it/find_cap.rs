//! `find-gpu-tests` stays inside the host's cap: the suite it runs takes its permits in the
//! caller's slot directory, beside every other GPU user there, and only what the run records
//! is kept apart.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::recipes::have_nextest;
use crate::util::{Holder, bin, clear_permit_env, tempdir};

/// The longest the suite's build, listing and run may take.
const SUITE: Duration = Duration::from_secs(600);

fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

/// The CLI on slot directory `slots` at N = 1 on one GPU.
fn at_n1(slots: &Path) -> Command {
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.env("GPU_TEST_PERMIT_DIR", slots)
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "1")
        .env("GPU_TEST_PERMIT_GPUS", "1");
    c
}

/// Whether `status` on `slots` lists a request waiting for a permit.
fn someone_waits(slots: &Path) -> bool {
    let out = at_n1(slots).arg("status").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with("waiting ") && l != "waiting: nobody")
}

/// The start times (µs since the epoch) of the plain suite's GPU tests, by name, from the
/// records they left in `dir`.
fn started(dir: &Path) -> Vec<(String, u128)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            let f: Vec<&str> = text.split_whitespace().collect();
            (f[0].to_string(), f[2].parse().unwrap())
        })
        .collect()
}

/// A child whose standard output and error are read as it runs (a full pipe must not stop it).
struct Running {
    child: Child,
    output: Vec<std::thread::JoinHandle<String>>,
}

impl Running {
    /// `cmd` in a process group of its own, so that [`Running::kill`] takes what it started.
    fn spawn(mut cmd: Command) -> Running {
        use std::os::unix::process::CommandExt;
        let mut child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let read = |mut r: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = r.read_to_end(&mut bytes);
                String::from_utf8_lossy(&bytes).into_owned()
            })
        };
        let output = vec![
            read(Box::new(child.stdout.take().unwrap())),
            read(Box::new(child.stderr.take().unwrap())),
        ];
        Running { child, output }
    }

    /// Ends it and what it started (where they still run) and gives what it printed.
    fn kill(mut self) -> String {
        // SAFETY: kill(2) of the process group this test started.
        unsafe { libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL) };
        let _ = self.child.wait();
        self.output()
    }

    /// Standard output, then standard error.
    fn output(self) -> String {
        self.output
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// At N = 1, with `hold` keeping the host's only unit, `find-gpu-tests` over the plain suite
/// runs none of its tests: they wait in the caller's slot directory (`status` lists them)
/// until the unit is released, then every test runs, and the run's records stay out of the
/// slot directory.
#[test]
fn find_gpu_tests_takes_the_hosts_permits() {
    if !have_nextest() {
        return;
    }
    let slots = tempdir();
    let records = tempdir();
    let mut hold = at_n1(slots.path());
    hold.arg("hold");
    let holder = Holder::spawn(hold);
    assert!(
        holder.held_within(Duration::from_secs(60)),
        "hold took no permit"
    );

    let mut find = at_n1(slots.path());
    find.current_dir(crate::util::workspace_root())
        .env("PLAIN_SUITE_RECORDS", records.path())
        .args(["find-gpu-tests", "--by", "loads", "--"])
        .args([
            "--offline",
            "-p",
            "gpu-test-permit-plain-suite",
            "--target-dir",
        ])
        .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plain-suite"));
    let mut find = Running::spawn(find);
    let until = Instant::now() + SUITE;
    let mut waiting_since: Option<Instant> = None;
    // Until a request of the run has waited a second in the slot directory, nothing of the
    // suite may have run, nor may find have ended.
    loop {
        let ran = started(records.path());
        if !ran.is_empty() || find.child.try_wait().unwrap().is_some() {
            panic!(
                "while `hold` held the host's only permit, GPU tests ran: {ran:?}\n{}",
                find.kill()
            );
        }
        match waiting_since {
            Some(since) if since.elapsed() > Duration::from_secs(1) => break,
            Some(_) => {}
            None if someone_waits(slots.path()) => waiting_since = Some(Instant::now()),
            None => {}
        }
        if Instant::now() > until {
            panic!(
                "no test of the run waited within {SUITE:?}\n{}",
                find.kill()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let released = micros();
    let (status, err) = holder.release();
    assert!(status.success(), "{err}");

    let status = loop {
        if let Some(status) = find.child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > until {
            panic!(
                "find-gpu-tests did not end within {SUITE:?}\n{}",
                find.kill()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = find.output();
    assert!(status.success(), "{text}");
    assert!(text.contains("found: 0 of the 6 tests run"), "{text}");
    let mut ran = started(records.path());
    ran.sort();
    let names: Vec<&str> = ran.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["gpu_draw", "gpu_matmul", "gpu_reduce", "gpu_scan"],
        "{text}"
    );
    for (name, start) in &ran {
        assert!(
            *start >= released,
            "{name} started {} ms before the host's permit was released",
            (released - start) / 1000
        );
    }
    // The run's records are its own: none in the host's slot directory.
    let recorded: Vec<String> = std::fs::read_dir(slots.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gpu0.run."))
        .collect();
    assert_eq!(recorded, Vec::<String>::new(), "{text}");
}
