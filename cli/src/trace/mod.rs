//! What a trace of permits tells about choosing N: per-test waits and holds, utilisation, the
//! what-if for other N and its model, the memory advice, and a trace drawn as text. The events
//! and their reading are the library's ([`gpu_test_permit::trace`], re-exported here).
//!
//! Files, top to bottom (each uses only those below it):
//!
//! | file | what |
//! |---|---|
//! | `check` | [`check_estimates`]: the measured runs that the model's estimates for their own N do not account for |
//! | `summary`, `timeline` | [`summarize`]: waits, holds, utilisation, the what-if and the model's estimates for other N, memory advice; [`timeline`]: a trace drawn as text |
//! | `replay` | a run's requests replayed on a pool of another size: each hold as long as it was ([`replay_fixed`]), or event by event under the model ([`predict`]) |
//! | `fit` | [`Slowdown::fit`]: the least-squares fit of the model to a trace's holds and its bootstrap range |
//! | `requests` | a trace's requests as the fit and the replay read them: when each was made, the units held beside each hold, which release each followed; [`split_runs`] |
//! | `model` | [`Slowdown`] and its curve `g(o)`, [`SlowdownBasis`], [`Prediction`] |
//!
//! Events flow up: a permit's tracer (in the library) appends them, [`read_trace`] parses them
//! back, `requests` turns their holds into requests, `fit` fits a [`Slowdown`] to those and
//! `replay` plays them at other N; `summary` puts the what-if and the model's estimates together.
//!
//! # The slowdown model
//!
//! The what-if ([`Summary::what_if`]) replays a run's requests on a pool of another size, each
//! hold as long as it was. On a shared GPU that misleads: tests that share the GPU slow each
//! other down, so a run at N = 2 whose holds took twice as long as alone replays at N = 1 as
//! twice as long as it would take, and at N = 4 as faster than it would be. The model
//! ([`Slowdown`], [`Summary::predicted`]) assumes:
//!
//! - **A hold's time grows linearly with the units held beside it, until the GPU is
//!   saturated.** A hold of `u` units that takes `d` alone takes `d x (1 + a x o)` when
//!   other holds keep `o` units of its GPU busy on average over its life (per GPU: the units
//!   of the whole pool divided by its GPUs; a weighted permit's units count as its weight),
//!   and at least `d x (u + o) / s` once the `u + o` units busy exceed the GPU's throughput
//!   `s` (in holds at full speed, [`Slowdown::saturation`]): past it, every hold runs at its
//!   share. `a = 0`: holds do not slow each other until the GPU is saturated; `a = 1`: the
//!   GPU's throughput is fixed, two holds side by side take as long as one after the other.
//!   One `a` and one `s` for all tests: each test has its own time alone, not its own curve.
//!   Without the bound a slope fitted where two tests barely slow each other (lavapipe on two
//!   CPU cores) promises four at once to be twice as fast as two, where they are no faster.
//! - **`a` and `s` come from the trace.** Each hold's `o` is measured from the holds that
//!   overlap it; `a` and `s` are the least-squares fit of `ln d = ln alone + ln g(o)`. Where
//!   tests held permits at concurrencies at least half a unit apart (traces of two runs at
//!   different N in one file, or tests that take permits repeatedly), each such test has its
//!   own time alone ([`SlowdownBasis::RepeatedTests`]). Otherwise, where enough holds ran at
//!   low and at high concurrency, all tests share one ([`SlowdownBasis::Overlap`]: it assumes
//!   the tests that happened to run alone are like the others). A saturated run (every hold
//!   at about N) or a run at N = 1 cannot tell `a` at all ([`SlowdownBasis::NotIdentified`]):
//!   the model then takes `a = 1/2`, the middle of `0..=1`, with no bound, and reports the
//!   whole of `0..=1` as the range. To pin `a` down, trace a run at another N into the same
//!   file, or fit with [`Slowdown::fit`] on the events of both.
//! - **The model promises no throughput it has not seen.** The bound counts as shown when it
//!   fits significantly better than the slope alone (a likelihood-ratio test at 95 %); that
//!   takes holds at three loads or more, one of them past the bound (runs at N = 1, 2 and 4).
//!   Where it is not shown (runs at N = 1 and 2: a slope and a bound fit two loads equally
//!   well), `s` is the most throughput the holds saw: beyond the highest N traced, the point
//!   estimate expects no gain, and the fast end of the range lets the throughput keep growing
//!   along the slope. On the H100 and on lavapipe, the GPU was saturated by N = 2 (see
//!   BENCHMARKS.md).
//! - **The range** is a bootstrap over tests (or holds): the 5th to 95th percentile of `a`
//!   and of `s` over 100 resamples. Its fast end replays the low `a` with the high `s` (no
//!   bound where the trace does not show one), its slow end the high `a` with the low `s`.
//! - **The replay shares the GPU moment by moment.** At another N the holds are simulated
//!   event by event: between a request and a release each hold progresses at `1 / g(o)` of
//!   its speed alone, `o` the units held beside it at that moment, and ends once it has done
//!   its time alone. (The fit measures `o` as the average over a hold's life, which is what
//!   a hold in a run at a steady N sees.)
//! - **Requests are paced by releases.** A test runner runs a fixed number of tests at once
//!   (cargo test's threads; nextest's, each test a process), so after the first few, a test
//!   starts when another ends. The model pairs each request made after a release with a
//!   release (in order) and replays it as long after that release as it came in the trace:
//!   the runner's start-up (a process under nextest) and the test's work before its permit.
//!   The fixed-duration what-if keeps each request at its time, as it always did.
//! - **What the trace does not hold**, the model does not predict: the span runs from the
//!   first request to the last release, so the build, the runner's start-up before the first
//!   test asks and the end after the last release are outside it (about 0.3 s of a nextest
//!   run on the H100). Under a nextest test group whose `max-threads` is below the new N, the
//!   group, not the permits, caps the tests: change both.
//! - **Permits set the pace.** The model explains a run by its permits and the GPU they share.
//!   A suite whose pace something else sets (a CPU-bound suite on a software renderer such as
//!   lavapipe, whose tests slow each other down on the CPU whether or not they hold permits)
//!   runs at other N unlike the model's estimate. Where a trace holds runs the model cannot
//!   account for at their own N, [`check_estimates`] names them, and `gpu-test-permit trace`
//!   says that the estimates are not to be trusted.
//!
//! Checked against runs of the example suite at N = 1 to 8 on an H100 and on lavapipe: see
//! BENCHMARKS.md ("What-if model").

mod check;
mod fit;
mod model;
mod replay;
mod requests;
mod summary;
mod timeline;

pub use check::{Disagreement, ESTIMATE_TOLERANCE, NoGain, check_estimates};
pub use gpu_test_permit::__private::trace::{SkippedLine, TraceFile, read_trace};
pub use gpu_test_permit::trace::{
    TraceArgs, TraceEvent, peak_concurrency, peak_per_gpu, read_events,
};
pub use model::{Prediction, Slowdown, SlowdownBasis};
pub use replay::{predict, replay_fixed};
pub use requests::split_runs;
pub use summary::{
    MODEL_MAX_N, MemoryAdvice, Summary, TestSummary, Unreleased, summarize, summarize_with,
};
pub use timeline::timeline;
