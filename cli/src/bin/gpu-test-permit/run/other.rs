//! No signals to forward and no process groups: the command is polled, and killed (it
//! alone) once the permit is held past the hold deadline.

use std::io;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpu_test_permit::HoldTimeout;

use super::Ended;

pub(super) struct Forwarder {
    late: Arc<Mutex<Option<HoldTimeout>>>,
}

impl Forwarder {
    pub(super) fn start(hold_deadline: bool) -> Forwarder {
        let late = Arc::new(Mutex::new(None));
        if hold_deadline {
            let handling = Arc::clone(&late);
            let _ = gpu_test_permit::on_hold_timeout(move |t| {
                *handling.lock().unwrap_or_else(PoisonError::into_inner) = Some(t);
            });
        }
        Forwarder { late }
    }

    pub(super) fn run(&self, cmd: &mut Command) -> io::Result<Ended> {
        self.run_with(cmd, |_, _| {})
    }

    pub(super) fn run_with(
        &self,
        cmd: &mut Command,
        spawned: impl FnOnce(&mut Child, Ender),
    ) -> io::Result<Ended> {
        let mut child = cmd.spawn()?;
        let end = Arc::new(AtomicBool::new(false));
        let pid = child.id();
        spawned(
            &mut child,
            Ender {
                end: Arc::clone(&end),
                pid,
            },
        );
        let mut killed = false;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            let late = self
                .late
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some();
            if end.load(Ordering::Relaxed) && !killed {
                killed = true;
                let _ = child.kill();
            }
            if late && !killed {
                killed = true;
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let late = self
            .late
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        Ok(Ended {
            status,
            pid: child.id(),
            late,
            killed,
            own_group: false,
        })
    }
}

/// Runs `cmd` and ends as it did.
pub(super) fn run_in_place(cmd: &mut Command) -> io::Result<std::process::ExitCode> {
    cmd.status().map(super::exit_like)
}

/// Ends one command of a [`Forwarder`] from another thread, while it runs (at its next poll).
#[derive(Clone)]
pub(super) struct Ender {
    end: Arc<AtomicBool>,
    pid: u32,
}

impl Ender {
    pub(super) fn end(&self) -> bool {
        !self.end.swap(true, Ordering::Relaxed)
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid
    }
}
