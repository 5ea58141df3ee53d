//! A queue between threads with a bounded wait: what the crate needs of a channel (a thread
//! that blocks for another: a lock without a timeout, an NVML call), in a fraction of the code
//! `std::sync::mpsc` instantiates for each message type.

use std::time::{Duration, Instant};

/// Messages of type `T`, in the order sent. Share it with `Arc`: a message sent after every
/// receiver gave up is dropped with the last reference.
#[derive(Debug)]
pub(crate) struct Mailbox<T> {
    items: parking_lot::Mutex<Vec<T>>,
    ready: parking_lot::Condvar,
}

impl<T> Mailbox<T> {
    /// An empty mailbox.
    pub(crate) const fn new() -> Self {
        Self {
            items: parking_lot::Mutex::new(Vec::new()),
            ready: parking_lot::Condvar::new(),
        }
    }

    /// Puts `item` in the mailbox and wakes a receiver.
    pub(crate) fn send(&self, item: T) {
        self.items.lock().push(item);
        self.ready.notify_one();
    }

    /// The oldest message, waiting for one as long as it takes.
    pub(crate) fn recv(&self) -> T {
        let mut items = self.items.lock();
        loop {
            if !items.is_empty() {
                return items.remove(0);
            }
            self.ready.wait(&mut items);
        }
    }

    /// The oldest message, waiting at most `limit` for one; `None` when none came.
    pub(crate) fn recv_within(&self, limit: Duration) -> Option<T> {
        let deadline = Instant::now().checked_add(limit);
        let mut items = self.items.lock();
        loop {
            if !items.is_empty() {
                return Some(items.remove(0));
            }
            match deadline {
                Some(deadline) => {
                    if self.ready.wait_until(&mut items, deadline).timed_out() {
                        if items.is_empty() {
                            return None;
                        }
                        return Some(items.remove(0));
                    }
                }
                None => self.ready.wait(&mut items),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn messages_arrive_in_order_and_a_wait_ends_at_its_limit() {
        let m = Arc::new(Mailbox::new());
        let started = Instant::now();
        assert_eq!(m.recv_within(Duration::from_millis(30)), None::<u32>);
        assert!(started.elapsed() >= Duration::from_millis(30));
        let sender = Arc::clone(&m);
        let t = std::thread::spawn(move || {
            for i in 0..100 {
                sender.send(i);
            }
        });
        let got: Vec<u32> = (0..100).map(|_| m.recv()).collect();
        t.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        m.send(7);
        assert_eq!(m.recv_within(Duration::ZERO), Some(7));
    }

    #[test]
    fn a_message_sent_after_the_receiver_gave_up_is_dropped_with_the_mailbox() {
        struct Flag(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let m = Arc::new(Mailbox::new());
        assert!(m.recv_within(Duration::from_millis(1)).is_none());
        let sender = Arc::clone(&m);
        drop(m);
        sender.send(Flag(Arc::clone(&dropped)));
        assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
        drop(sender);
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
    }
}
