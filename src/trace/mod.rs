//! Wait and hold spans as Chrome trace-event JSON (`GPU_TEST_PERMIT_TRACE=<file>`).
//!
//! The file is in the JSON Array Format of the trace-event spec: a `[` line, then one complete
//! event object per line, each followed by a comma; the closing `]` is optional in that format,
//! so processes can keep appending. Perfetto (ui.perfetto.dev) and `chrome://tracing` open it.
//! Each event is written with a single `write` to a file opened in append mode, so events from
//! many processes never interleave within a line. Timestamps are microseconds since the Unix
//! epoch, so spans from different processes line up.
//!
//! The path may be a symbolic link (it is followed, as for any output file), but what it names
//! must be a regular file: a FIFO, socket, device or directory is refused with one line on
//! standard error and tracing is off, the permits work as ever. A new file is made under a
//! temporary name beside it that is never opened through a link.
//!
//! [`read_events`] returns the events of such a file, or an error naming the first line it
//! could not use (a line cut short by a full disk, events no pool writes); [`peak_concurrency`]
//! and [`peak_per_gpu`] say how many units were held at once, which is how a test checks from
//! its trace that the cap held. What
//! a trace tells about choosing N (the summary, the what-if and its model, the timeline) is the
//! command-line tool's: `gpu-test-permit trace`, and the `gpu-test-permit-cli` crate's
//! `trace` module.
//!
//! ```no_run
//! use gpu_test_permit::trace::{peak_concurrency, read_events};
//!
//! let events = read_events("target/gpu-trace.json".as_ref())?;
//! assert!(peak_concurrency(&events) <= 2, "more than N = 2 permit units were held at once");
//! # Ok::<(), std::io::Error>(())
//! ```

mod event;
mod peak;
pub(crate) mod read;

pub(crate) use event::Tracer;
pub use event::{TraceArgs, TraceEvent};
pub(crate) use peak::peak_of;
pub use peak::{peak_concurrency, peak_per_gpu};
pub use read::read_events;
