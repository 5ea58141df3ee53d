//! Permits on several GPUs across real processes: `gpu-test-permit hold --gpus K` processes on
//! a simulated eight-GPU host (one temporary slot directory, `GPU_TEST_PERMIT_GPUS=8`), their
//! atomicity, the per-GPU cap, fairness to a wide request while narrow ones stream in, killed
//! and stopped holders, topology groups, best fit, and the devices `run --gpus K` exports.

#![cfg(unix)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gpu_test_permit::{AcquireError, PermitPool};

use crate::util::{Holder, cli, tempdir};

const LONG: Duration = Duration::from_secs(20);
/// Long enough for a process that could take its permit to have taken it.
const SETTLE: Duration = Duration::from_millis(400);

/// The CLI on `gpus` simulated GPUs (a count, or a list with groups) with N = `n`.
fn on_gpus(dir: &Path, n: usize, gpus: &str) -> Command {
    let mut c = cli(dir, n);
    c.env("GPU_TEST_PERMIT_GPUS", gpus);
    c
}

/// `hold --gpus k` (plus `extra`) on `gpus` GPUs with N = `n`.
fn hold(dir: &Path, n: usize, gpus: &str, k: usize, extra: &[&str]) -> Holder {
    let mut c = on_gpus(dir, n, gpus);
    c.args(["hold", "--gpus", &k.to_string()]).args(extra);
    Holder::spawn(c)
}

/// The devices of `h`'s `held` line, waiting up to `d` for it.
fn devices_within(h: &Holder, d: Duration) -> Option<Vec<usize>> {
    let line = h.lines.recv_timeout(d).ok()?;
    assert!(line.starts_with("held "), "{line}");
    let devices = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("devices="))
        .unwrap_or_else(|| panic!("no devices in {line:?}"));
    Some(devices.split(',').map(|d| d.parse().unwrap()).collect())
}

fn kill(h: &Holder, signal: libc::c_int) {
    // SAFETY: signals a child of this test that has not been waited for.
    assert_eq!(
        unsafe { libc::kill(h.child.id() as libc::pid_t, signal) },
        0
    );
}

#[test]
fn a_k_gpu_permit_takes_k_distinct_gpus_at_once_and_the_cap_holds_on_each() {
    let dir = tempdir();
    // N = 1 on eight GPUs: two 4-GPU permits fill the host, on disjoint GPUs.
    let a = hold(dir.path(), 1, "8", 4, &[]);
    let da = devices_within(&a, LONG).expect("the first 4-GPU permit");
    let b = hold(dir.path(), 1, "8", 4, &[]);
    let db = devices_within(&b, LONG).expect("the second 4-GPU permit");
    assert_eq!((da.len(), db.len()), (4, 4));
    let all: BTreeSet<usize> = da.iter().chain(&db).copied().collect();
    assert_eq!(all.len(), 8, "{da:?} and {db:?} share a GPU");
    // Nothing is left: a one-GPU request waits, and takes a GPU of the first permit once
    // its holder is killed, not one of the second's.
    let c = hold(dir.path(), 1, "8", 1, &[]);
    assert!(
        devices_within(&c, SETTLE).is_none(),
        "a ninth GPU was granted"
    );
    kill(&a, libc::SIGKILL);
    let dc = devices_within(&c, LONG).expect("a GPU freed by the killed holder");
    assert!(da.contains(&dc[0]), "{dc:?} is not one of {da:?}");
    // A 4-GPU request cannot have its GPUs while only three are free: it takes none of them
    // meanwhile (the three stay free for a one-GPU request of another process).
    let d = hold(dir.path(), 1, "8", 4, &[]);
    assert!(devices_within(&d, SETTLE).is_none());
    let one = PermitPool::builder()
        .concurrency(1)
        .gpus(8)
        .slot_dir(dir.path())
        .build()
        .unwrap();
    // The waiting 4-GPU request heads the queue: a newcomer waits behind it.
    assert!(matches!(
        one.try_acquire(gpu_test_permit::PermitKind::Shared),
        Err(AcquireError::WouldBlock)
    ));
    drop(one);
    let (status, err) = c.release();
    assert!(status.success(), "{err}");
    let dd = devices_within(&d, LONG).expect("four GPUs once a fourth is free");
    assert_eq!(dd, da, "the killed holder's four GPUs, the only four free");
}

#[test]
fn a_wide_request_is_served_while_narrow_ones_stream_in() {
    let dir = tempdir();
    // Six of eight GPUs busy; a 4-GPU request waits for two of them.
    let busy: Vec<Holder> = (0..6).map(|_| hold(dir.path(), 1, "8", 1, &[])).collect();
    for h in &busy {
        devices_within(h, LONG).expect("a one-GPU permit");
    }
    let wide = hold(dir.path(), 1, "8", 4, &[]);
    assert!(devices_within(&wide, SETTLE).is_none());
    // Four streams of one-GPU requests, each holding for a moment, arrive from now on: were
    // they served while the wide request waits, the GPUs freed below would go to them.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let streams: Vec<_> = (0..4)
        .map(|_| {
            let (stop, dir) = (stop.clone(), dir.path().to_path_buf());
            std::thread::spawn(move || {
                let mut granted = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let h = hold(&dir, 1, "8", 1, &["--for", "50ms"]);
                    if devices_within(&h, LONG).is_some() {
                        granted.push(Instant::now());
                    }
                    let _ = h.release();
                }
                granted
            })
        })
        .collect();
    std::thread::sleep(SETTLE);
    // Freed one at a time: two free GPUs (of the four the wide request needs) at the first
    // release, four at the second.
    let mut busy = busy.into_iter();
    for h in busy.by_ref().take(2) {
        let (status, err) = h.release();
        assert!(status.success(), "{err}");
        std::thread::sleep(Duration::from_millis(150));
    }
    let got = devices_within(&wide, LONG).expect("the wide request, while others streamed in");
    let wide_granted = Instant::now();
    assert_eq!(got.len(), 4);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // Streams still in flight wait for the wide permit; release it so that they finish.
    let (status, err) = wide.release();
    assert!(status.success(), "{err}");
    let early: usize = streams
        .into_iter()
        .map(|t| {
            t.join()
                .unwrap()
                .iter()
                .filter(|&&at| at < wide_granted)
                .count()
        })
        .sum();
    // A stream's request arrived after the wide one began to wait: none went first. (The
    // wide grant is seen a moment after it happens; a stream grant in that moment would be
    // on a GPU the wide permit does not hold, so it is counted, and must not be there.)
    assert_eq!(
        early, 0,
        "one-GPU requests were served while the wide one waited"
    );
}

#[test]
fn a_stopped_k_gpu_holder_keeps_its_gpus_until_it_resumes() {
    let dir = tempdir();
    let a = hold(dir.path(), 1, "4", 4, &[]);
    devices_within(&a, LONG).expect("every GPU");
    kill(&a, libc::SIGSTOP);
    let b = hold(dir.path(), 1, "4", 1, &[]);
    assert!(
        devices_within(&b, SETTLE).is_none(),
        "took a stopped holder's GPU"
    );
    kill(&a, libc::SIGCONT);
    let (status, err) = a.release();
    assert!(status.success(), "{err}");
    assert!(devices_within(&b, LONG).is_some());
}

#[test]
fn a_request_for_more_gpus_than_a_group_has_fails_at_once() {
    let dir = tempdir();
    for (gpus, k, says) in [
        ("4", 5, "the pool spans 4"),
        ("0,1,2,3;4,5,6,7", 5, "the largest has 4"),
    ] {
        let started = Instant::now();
        let out = on_gpus(dir.path(), 2, gpus)
            .args(["hold", "--gpus", &k.to_string(), "--for", "1ms"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{gpus}: {err}");
        assert!(err.contains(says), "{gpus}: {err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}

#[test]
fn a_k_gpu_permit_stays_within_one_group() {
    let dir = tempdir();
    let groups = "0,1,2,3;4,5,6,7";
    // One GPU of the first group in use: a 4-GPU permit takes the whole second group...
    let one = hold(dir.path(), 1, groups, 1, &[]);
    let d1 = devices_within(&one, LONG).unwrap();
    let four = hold(dir.path(), 1, groups, 4, &[]);
    let d4 = devices_within(&four, LONG).unwrap();
    let other: Vec<usize> = if d1[0] < 4 {
        (4..8).collect()
    } else {
        (0..4).collect()
    };
    assert_eq!(d4, other);
    // ...and another waits, though three GPUs of the first group and none else are free:
    // across groups, four are not to be had.
    let again = hold(dir.path(), 1, groups, 4, &[]);
    assert!(devices_within(&again, SETTLE).is_none());
    // Two GPUs fit in the first group.
    drop(again);
    let two = hold(dir.path(), 1, groups, 2, &[]);
    let d2 = devices_within(&two, LONG).unwrap();
    assert!(
        d2.iter().all(|d| !other.contains(d) && *d != d1[0]),
        "{d2:?}"
    );
}

#[test]
fn best_fit_fills_a_gpu_in_use_and_spread_does_not() {
    let dir = tempdir();
    let pool = |placement| {
        PermitPool::builder()
            .concurrency(2)
            .gpus(4)
            .placement(placement)
            .slot_dir(dir.path())
            .build()
            .unwrap()
    };
    use gpu_test_permit::host::Placement;
    let best = pool(Placement::BestFit);
    let first = best.acquire();
    let second = std::thread::scope(|s| s.spawn(|| best.acquire().device()).join().unwrap());
    assert_eq!((first.device(), second), (Some(0), Some(0)));
    // Two GPUs whole: best fit put the second permit beside the first, so three are whole.
    let three = std::thread::scope(|s| {
        s.spawn(|| best.request().gpus(3).units(2).acquire().devices())
            .join()
            .unwrap()
    });
    assert_eq!(three, [1, 2, 3]);
    drop(first);
    drop(best);
    let spread = pool(Placement::Spread);
    let a = spread.acquire();
    let b = std::thread::scope(|s| s.spawn(|| spread.acquire().device()).join().unwrap());
    assert_eq!((a.device(), b), (Some(0), Some(1)));
}

#[test]
fn run_exports_the_permits_gpus_through_the_callers_own_list() {
    let dir = tempdir();
    let out = on_gpus(dir.path(), 1, "4")
        .env("CUDA_VISIBLE_DEVICES", "10,11,12,13")
        .args(["run", "--gpus", "2", "--", "sh", "-c"])
        .arg("echo \"$CUDA_VISIBLE_DEVICES|$GPU_TEST_PERMIT_GPUS\"")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (visible, gpus) = text.trim().split_once('|').unwrap();
    let visible: Vec<&str> = visible.split(',').collect();
    assert_eq!(visible.len(), 2, "{text}");
    assert!(
        visible.iter().all(|v| ["10", "11", "12", "13"].contains(v)),
        "{text}"
    );
    // The command numbers the two GPUs 0 and 1, in the order of its list.
    let gpus: Vec<usize> = gpus.split(',').map(|g| g.parse().unwrap()).collect();
    assert_eq!(gpus.len(), 4, "{text}");
    let mut seen: Vec<(usize, &str)> = Vec::new();
    for (device, &as_seen) in gpus.iter().enumerate() {
        if as_seen < 2 {
            seen.push((as_seen, ["10", "11", "12", "13"][device]));
        }
    }
    seen.sort_unstable();
    assert_eq!(
        seen.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
        visible,
        "{text}"
    );
}

#[test]
fn a_command_inside_a_k_gpu_permit_works_within_its_gpus() {
    let dir = tempdir();
    let bin = crate::util::bin();
    // Inside `run --gpus 2`, the command's own `hold --gpus 2` takes no slot of the host and
    // has the same two GPUs; `--gpus 3` could never fit inside and fails at once.
    let script = format!(
        "'{bin}' hold --gpus 2 --for 1ms && '{bin}' hold --gpus 3 --for 1ms; echo \"three: $?\"",
        bin = bin.display()
    );
    let out = on_gpus(dir.path(), 1, "4")
        .args(["run", "--gpus", "2", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    let held = text.lines().find(|l| l.starts_with("held ")).expect(&text);
    assert!(held.contains(" units=2 "), "{held}");
    assert!(
        text.contains("three: ") && !text.contains("three: 0"),
        "{text}{err}"
    );
    assert!(
        err.contains("on 3 GPUs") && err.contains("which holds 2"),
        "{err}"
    );
}

#[test]
fn status_and_trace_show_each_gpu_and_the_permits_on_several() {
    let dir = tempdir();
    let trace = dir.path().join("trace.json");
    let mut c = on_gpus(dir.path(), 2, "4");
    c.env("GPU_TEST_PERMIT_GPU_MEMORY", "80GiB")
        .env("GPU_TEST_PERMIT_TRACE", &trace)
        .args(["hold", "--gpus", "2", "--memory", "30GiB"]);
    let wide = Holder::spawn(c);
    let devices = devices_within(&wide, LONG).unwrap();
    let out = on_gpus(dir.path(), 2, "4").arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let gpus: Vec<String> = devices.iter().map(usize::to_string).collect();
    assert!(
        text.contains(&format!("(GPUs {})", gpus.join(","))),
        "{text}"
    );
    assert!(
        text.contains("1 unit(s) on each of 2 GPUs, declared 30 GiB"),
        "{text}"
    );
    for gpu in 0..4 {
        let line = if devices.contains(&gpu) {
            format!("GPU {gpu}: 1 of 2 units held, 30 GiB declared")
        } else {
            format!("GPU {gpu}: 0 of 2 units held\n")
        };
        assert!(text.contains(&line), "{line}: {text}");
    }
    let (status, err) = wide.release();
    assert!(status.success(), "{err}");
    let out = on_gpus(dir.path(), 2, "4")
        .arg("trace")
        .arg(&trace)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let peaks: Vec<String> = (0..4)
        .map(|g| format!("GPU {g}: {}", usize::from(devices.contains(&g))))
        .collect();
    assert!(
        text.contains(&format!("peak units per GPU: {}", peaks.join(", "))),
        "{text}"
    );
    assert!(text.contains("permits on several GPUs: 1"), "{text}");
}

/// Without `GPU_TEST_PERMIT_GPUS`, the pool spans the CUDA devices the probe finds: eight from
/// the stand-in driver.
#[cfg(feature = "cuda")]
#[test]
fn the_pool_spans_the_gpus_the_driver_reports() {
    let dir = tempdir();
    let eight = || {
        let mut c = cli(dir.path(), 1);
        c.env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
            .env("CUDA_PROBE_STUB", "ok")
            .env("CUDA_PROBE_STUB_DEVICES", "8");
        c
    };
    let out = eight()
        .args(["hold", "--gpus", "8", "--for", "1ms"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(" devices=0,1,2,3,4,5,6,7\n"), "{text}");
    let out = eight()
        .args(["hold", "--gpus", "9", "--for", "1ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("the pool spans 8"),
        "{err}"
    );
}
