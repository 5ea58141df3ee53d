//! Live GPU memory from NVML, against the stand-in `libnvidia-ml.so.1` (`cli/tests/stub/nvml.c`):
//! a child of this test binary with the stand-in first in `LD_LIBRARY_PATH` answers queries
//! on its standard input, while the test changes the stand-in's state file between them.
//! They test how the crate reads NVML; they prove nothing about NVIDIA's.

#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::stub::library_dir;
use crate::util::tempdir;

const CHILD_VAR: &str = "LIVE_CHILD";
const ANSWER: &str = "live-answer:";
const GIB: u64 = 1 << 30;

/// The child's side: one answer line for each query line (`memory <gpu>`, `name <pid>`), until
/// its standard input closes.
#[test]
#[ignore = "runs as a child of the live tests"]
fn live_child() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let answer = match line.split_once(' ') {
            Some(("memory", gpu)) => {
                match gpu_test_permit::__private::live_memory(gpu.parse().unwrap()) {
                    None => "none".to_string(),
                    Some((total, free, processes)) => {
                        let processes: Vec<String> = processes
                            .iter()
                            .map(|(pid, used)| match used {
                                Some(used) => format!("{pid}:{used}"),
                                None => format!("{pid}:na"),
                            })
                            .collect();
                        format!("{total} {free} [{}]", processes.join(","))
                    }
                }
            }
            Some(("name", pid)) => {
                gpu_test_permit::__private::live_process_name(pid.parse().unwrap())
                    .unwrap_or_else(|| "none".to_string())
            }
            _ => panic!("unknown query {line:?}"),
        };
        println!("{ANSWER}{answer}");
    }
}

/// A child that queries NVML, and the state file the stand-in reads.
struct Live {
    child: Child,
    stdin: ChildStdin,
    /// The child's standard output, line by line.
    lines: mpsc::Receiver<String>,
    state: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Live {
    fn start(env: &[(&str, &str)]) -> Live {
        Self::start_with(env, "")
    }

    /// A child with `env` over a clean environment, the state file holding `state` first.
    fn start_with(env: &[(&str, &str)], state: &str) -> Live {
        let tmp = tempdir();
        let path = tmp.path().join("nvml-state");
        std::fs::write(&path, state).unwrap();
        let dir = library_dir("nvml", &["libnvidia-ml.so.1", "libnvidia-ml.so"]);
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "live::live_child", "--include-ignored"])
            .args(["--nocapture", "--test-threads", "1"])
            .env(CHILD_VAR, "1")
            .env("LD_LIBRARY_PATH", &dir)
            .env("NVML_STUB_STATE", &path)
            .env_remove("NVML_STUB")
            .env_remove("NVML_STUB_GPUS")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start the test binary as a child");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Live {
            child,
            stdin,
            lines,
            state: path,
            _tmp: tmp,
        }
    }

    fn ask(&mut self, query: &str) -> String {
        writeln!(self.stdin, "{query}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let line = match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("no answer to {query:?} in 60 s"),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the child ended before answering {query:?}")
                }
            };
            // libtest starts the line of its only test with the test's name.
            if let Some((_, answer)) = line.split_once(ANSWER) {
                return answer.to_string();
            }
        }
    }

    fn memory(&mut self, gpu: usize) -> String {
        self.ask(&format!("memory {gpu}"))
    }

    fn name(&mut self, pid: u32) -> String {
        self.ask(&format!("name {pid}"))
    }

    fn set_state(&self, state: &str) {
        write_state(&self.state, state);
    }
}

fn write_state(path: &Path, state: &str) {
    // Whole, at once: the stand-in reads the file at every call.
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, state).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn all_free() -> String {
    format!("{} {} []", 80 * GIB, 80 * GIB)
}

#[test]
fn eight_gpus_all_free_by_default() {
    let mut live = Live::start(&[]);
    for gpu in 0..8 {
        assert_eq!(live.memory(gpu), all_free(), "GPU {gpu}");
    }
    assert_eq!(live.memory(8), "none");
}

#[test]
fn the_answer_follows_the_state_file_within_one_process() {
    let mut live = Live::start_with(&[], "free 2 12345\n");
    assert_eq!(live.memory(2), format!("{} 12345 []", 80 * GIB));
    assert_eq!(live.memory(1), all_free());
    live.set_state("free 2 999\nproc 2 4242 1000\n");
    assert_eq!(live.memory(2), format!("{} 999 [4242:1000]", 80 * GIB));
    live.set_state("");
    assert_eq!(live.memory(2), all_free());
}

#[test]
fn a_foreign_process_is_listed_with_its_name() {
    let state = format!(
        "free 0 {}\nproc 0 4242 {}\nproc 0 4243 na\nname 4242 /usr/bin/python3\n",
        10 * GIB,
        70 * GIB
    );
    let mut live = Live::start_with(&[], &state);
    assert_eq!(
        live.memory(0),
        format!("{} {} [4242:{},4243:na]", 80 * GIB, 10 * GIB, 70 * GIB)
    );
    assert_eq!(live.name(4242), "python3");
    // Not one NVML names: the system's name, here the child's own.
    let pid = live.child.id();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(live.name(pid), comm.trim_end());
    assert_eq!(live.name(u32::MAX), "none");
}

#[test]
fn compute_and_graphics_processes_are_one_entry_per_pid() {
    let state = "proc 1 10 1000\nproc 1 10 500\ngproc 1 10 1200\ngproc 1 20 300\n";
    let mut live = Live::start_with(&[], state);
    assert_eq!(
        live.memory(1),
        format!("{} {} [10:1500,20:300]", 80 * GIB, 80 * GIB)
    );
}

#[test]
fn a_long_process_list_is_read_whole() {
    // More than the first buffer holds: NVML answers "insufficient size" and is asked again.
    let state: String = (0..150)
        .map(|i| format!("proc 3 {} 1\n", 1000 + i))
        .collect();
    let mut live = Live::start_with(&[], &state);
    let answer = live.memory(3);
    let list = answer.split('[').nth(1).unwrap().trim_end_matches(']');
    assert_eq!(list.split(',').count(), 150, "{answer}");
}

#[test]
fn cuda_visible_devices_maps_ordinals_to_nvml_devices() {
    let state = "free 3 333\nfree 5 555\n";
    let mut live = Live::start_with(&[("CUDA_VISIBLE_DEVICES", "3,5")], state);
    assert_eq!(live.memory(0), format!("{} 333 []", 80 * GIB));
    assert_eq!(live.memory(1), format!("{} 555 []", 80 * GIB));
    assert_eq!(live.memory(2), "none");
    // The list ends at the first entry the driver would not take.
    let mut live = Live::start_with(&[("CUDA_VISIBLE_DEVICES", "5,-1,3")], state);
    assert_eq!(live.memory(0), format!("{} 555 []", 80 * GIB));
    assert_eq!(live.memory(1), "none");
    // ... and at the first that names no device.
    let mut live = Live::start_with(&[("CUDA_VISIBLE_DEVICES", "3,9,5")], state);
    assert_eq!(live.memory(0), format!("{} 333 []", 80 * GIB));
    assert_eq!(live.memory(2), "none");
    let mut live = Live::start_with(&[("CUDA_VISIBLE_DEVICES", "3,GPU-ffff,5")], state);
    assert_eq!(live.memory(2), "none");
}

#[test]
fn cuda_visible_devices_names_gpus_by_uuid_or_a_unique_prefix() {
    let uuid = "GPU-5b3a2f1e-0d4c-7b6a-9988-0123456789ab";
    let state = format!("uuid 6 {uuid}\nfree 6 666\nfree 2 222\n");
    let visible = format!("{uuid},2");
    let mut live = Live::start_with(&[("CUDA_VISIBLE_DEVICES", &visible)], &state);
    assert_eq!(live.memory(0), format!("{} 666 []", 80 * GIB));
    assert_eq!(live.memory(1), format!("{} 222 []", 80 * GIB));
    let mut live = Live::start_with(&[("CUDA_VISIBLE_DEVICES", "GPU-5b3a2f")], &state);
    assert_eq!(live.memory(0), format!("{} 666 []", 80 * GIB));
    // The default UUIDs share a long prefix: not unique, so no device.
    let mut live = Live::start_with(&[("CUDA_VISIBLE_DEVICES", "GPU-0000")], &state);
    assert_eq!(live.memory(0), "none");
    let mut live = Live::start_with(&[("CUDA_VISIBLE_DEVICES", "GPU-ffffffff")], &state);
    assert_eq!(live.memory(0), "none");
}

#[test]
fn without_nvml_nothing_is_known() {
    let mut live = Live::start(&[("NVML_STUB", "initfail")]);
    assert_eq!(live.memory(0), "none");
    // The system still names processes.
    let pid = live.child.id();
    assert_ne!(live.name(pid), "none");
}

#[test]
fn fewer_gpus_answer_for_fewer_ordinals() {
    let mut live = Live::start(&[("NVML_STUB_GPUS", "2")]);
    assert_eq!(live.memory(1), all_free());
    assert_eq!(live.memory(2), "none");
}
