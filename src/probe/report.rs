//! The answer to one question about one backend ([`ProbeReport`]): the outcome, how long the
//! probe took and where the answer came from.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::outcome::{ProbeOutcome, millis};
use crate::backend::Backend;
use crate::json::{self, Fields, Object, Record, Value};

/// Where a [`ProbeReport`] came from.
///
/// ```
/// use gpu_test_permit::probe::{probe, Backend, ProbeSource};
///
/// let _first = probe(Backend::Wgpu);
/// let again = probe(Backend::Wgpu);
/// // No second child: the answer comes from a cache (this process's, or the nextest run's).
/// assert_ne!(again.source, ProbeSource::Child);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeSource {
    /// A probe child started for this call.
    Child,
    /// A probe inside the calling process (opt-in, or a backend that is not built).
    InProcess,
    /// This process's cache of an earlier probe.
    ProcessCache,
    /// The cache file shared by the processes of one `cargo nextest` run.
    RunCache,
}

impl fmt::Display for ProbeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeSource::Child => "child",
            ProbeSource::InProcess => "in-process",
            ProbeSource::ProcessCache => "process cache",
            ProbeSource::RunCache => "run cache",
        })
    }
}

/// The answer to "what does this backend have?".
///
/// ```
/// use gpu_test_permit::probe::{probe, Backend};
///
/// let report = probe(Backend::Cuda);
/// assert_eq!(report.backend, Backend::Cuda);
/// println!("{report} ({:?}, from the {})", report.duration, report.source);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeReport {
    /// The backend probed.
    pub backend: Backend,
    /// What was found.
    pub outcome: ProbeOutcome,
    /// How long the probe took where it ran (child start to answer), even when this report
    /// came from a cache (`duration_ms` in JSON).
    pub duration: Duration,
    /// Where this report came from.
    pub source: ProbeSource,
    /// The run cache file the report was read from, when it came from one (also in this
    /// process's later copies of it): another test process of the `cargo nextest` run probed.
    pub run_cache: Option<PathBuf>,
}

/// The sources that [`SOURCE_NAMES`] name.
const SOURCES: [ProbeSource; 4] = [
    ProbeSource::Child,
    ProbeSource::InProcess,
    ProbeSource::ProcessCache,
    ProbeSource::RunCache,
];

/// The name of each of [`SOURCES`] in JSON, with its position there.
const SOURCE_NAMES: [(&str, u8); 4] = [
    ("child", 0),
    ("in-process", 1),
    ("process-cache", 2),
    ("run-cache", 3),
];

impl json::Write for ProbeSource {
    fn write(&self, out: &mut String) {
        let mut name = "child";
        for (n, at) in SOURCE_NAMES {
            if SOURCES[usize::from(at)] == *self {
                name = n;
                break;
            }
        }
        json::Write::write(name, out);
    }
}

/// A report: `{"backend":"cuda","outcome":{...},"duration_ms":12.5,"source":"child"}`, with
/// `"run_cache":"<path>"` last where it came from the run cache. A path that is not UTF-8 is
/// written with its invalid bytes replaced.
impl json::Write for ProbeReport {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("backend", self.backend)
                .field("outcome", &self.outcome)
                .field("duration_ms", millis::of(self.duration))
                .field("source", self.source)
                .some("run_cache", &run_cache_text(&self.run_cache))
                .finish(),
        );
    }
}

/// The run cache's path as text, where there is one.
fn run_cache_text(run_cache: &Option<PathBuf>) -> Option<String> {
    let path = run_cache.as_ref()?;
    Some(path.to_string_lossy().into_owned())
}

impl Record for ProbeReport {
    fn read_json(v: &Value) -> Result<ProbeReport, String> {
        let f = Fields::of(v, "probe report")?;
        Ok(ProbeReport {
            backend: Backend::read_field(&f, "backend")?,
            outcome: f.record("outcome")?,
            duration: match millis::read(&f, "duration_ms") {
                Ok(d) => d,
                Err(e) => return Err(format!("probe report: {e}")),
            },
            source: SOURCES[usize::from(f.req_one_of("source", &SOURCE_NAMES)?)],
            run_cache: f.opt::<String>("run_cache")?.map(PathBuf::from),
        })
    }
}

impl ProbeReport {
    /// The report as JSON, one line, as `gpu-test-permit probe --json` shows it (less the
    /// decision) and the run cache keeps it: `{"backend":"cuda","outcome":{"status":...},
    /// "duration_ms":12.5,"source":"child"}`, with `run_cache` where it came from there.
    ///
    /// ```
    /// use gpu_test_permit::probe::{Backend, probe};
    ///
    /// let json = probe(Backend::Cuda).to_json();
    /// assert!(json.starts_with(r#"{"backend":"cuda","outcome":{"status":"#));
    /// ```
    pub fn to_json(&self) -> String {
        self.to_text()
    }

    /// Reads a report that [`to_json`](Self::to_json) wrote (fields it does not know are
    /// ignored).
    ///
    /// # Errors
    ///
    /// Text that is not JSON, or not a report: the message names the field.
    ///
    /// ```
    /// use gpu_test_permit::probe::{Backend, ProbeReport, ProbeSource};
    ///
    /// let r = ProbeReport::from_json(
    ///     r#"{"backend":"wgpu","outcome":{"status":"not_built"},"duration_ms":0.5,"source":"in-process"}"#,
    /// )?;
    /// assert_eq!((r.backend, r.source), (Backend::Wgpu, ProbeSource::InProcess));
    /// assert_eq!(ProbeReport::from_json(&r.to_json())?, r);
    /// # Ok::<(), String>(())
    /// ```
    pub fn from_json(text: &str) -> Result<ProbeReport, String> {
        ProbeReport::from_text(text)
    }
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.backend, self.outcome)
    }
}
