//! NVML asked from a thread of its own and waited for within a limit: NVML calls into the
//! driver, and a wedged driver can keep a call from returning.

use super::nvml::{GpuMemory, memory, nvml};

/// How long a query of NVML may take before the permits stop waiting for it: NVML calls into
/// the driver, and a wedged driver can keep a call from returning.
pub(crate) const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// [`memory`], asked of a thread of its own and waited for at most `limit`: `None` as well
/// when NVML does not answer by then, or has not answered an earlier query yet (a wedged
/// driver: the queries stop until it does, and the caller goes on without NVML's numbers).
pub(crate) fn memory_within(gpu: usize, limit: std::time::Duration) -> Option<GpuMemory> {
    within(limit, move || memory(gpu)).flatten()
}

/// Whether a query of NVML did not come back within its limit and has not come back since.
pub(crate) fn stuck() -> bool {
    STUCK.load(std::sync::atomic::Ordering::Acquire)
}

static STUCK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

type Query = Box<dyn FnOnce() + Send>;

/// Runs `query` on the NVML thread (started at the first query) and waits up to `limit` for
/// its answer. Queries run one at a time; while one is stuck, the others are not sent.
fn within<T: Send + 'static>(
    limit: std::time::Duration,
    query: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    use crate::mailbox::Mailbox;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    if stuck() {
        return None;
    }
    let answered = Arc::new(Mailbox::new());
    let answer = Arc::clone(&answered);
    let job: Query = Box::new(move || {
        let value = query();
        STUCK.store(false, Ordering::Release);
        answer.send(value);
    });
    if !send_to_nvml_thread(job) {
        return None;
    }
    match answered.recv_within(limit) {
        Some(value) => Some(value),
        None => {
            STUCK.store(true, Ordering::Release);
            None
        }
    }
}

/// Hands `job` to the NVML thread, starting it at the first job. Returns whether it could:
/// `false` where the thread cannot be started.
fn send_to_nvml_thread(job: Query) -> bool {
    use crate::mailbox::Mailbox;
    /// The NVML thread's queries; whether it was started.
    static JOBS: Mailbox<Query> = Mailbox::new();
    static STARTED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut started = match STARTED.lock() {
        Ok(started) => started,
        Err(e) => e.into_inner(),
    };
    /// The NVML thread: runs the queries as they come.
    fn answer_queries() {
        loop {
            (JOBS.recv())();
        }
    }
    if !*started {
        if crate::sys::spawn_named("gpu-test-permit-nvml", answer_queries).is_err() {
            return false;
        }
        *started = true;
    }
    JOBS.send(job);
    true
}

/// The name of a process for a message: the system's (`/proc/<pid>/comm` on Linux), else
/// NVML's (`nvmlSystemGetProcessName`: a process of another pid namespace), asked within
/// [`ANSWER_WITHIN`], else `None`.
pub(crate) fn process_name(pid: u32) -> Option<String> {
    if let Some(name) = crate::sys::process_name(pid) {
        return Some(name);
    }
    within(ANSWER_WITHIN, move || match nvml() {
        Some(n) => n.process_name(pid),
        None => None,
    })
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_query_stops_the_others_until_it_answers() {
        use std::sync::mpsc;
        use std::time::{Duration, Instant};
        let (release, wait) = mpsc::channel::<()>();
        let short = Duration::from_millis(50);
        // A query that does not come back in time: none, and NVML counts as stuck.
        assert_eq!(within(short, move || wait.recv().is_ok()), None);
        assert!(stuck());
        // While it is stuck, another query is not sent and does not wait.
        let started = Instant::now();
        assert_eq!(within(Duration::from_secs(5), || 1), None);
        assert!(started.elapsed() < Duration::from_secs(1));
        // Once it answers, queries are answered again.
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while stuck() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(within(Duration::from_secs(5), || 2), Some(2));
    }
}
