//! The answer to one question about one backend ([`ProbeReport`]): the outcome, how long the
//! probe took and where the answer came from.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::outcome::{ProbeOutcome, millis};
use crate::backend::Backend;

/// Where a [`ProbeReport`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProbeReport {
    /// The backend probed.
    pub backend: Backend,
    /// What was found.
    pub outcome: ProbeOutcome,
    /// How long the probe took where it ran (child start to answer), even when this report
    /// came from a cache.
    #[serde(with = "millis", rename = "duration_ms")]
    pub duration: Duration,
    /// Where this report came from.
    pub source: ProbeSource,
    /// The run cache file the report was read from, when it came from one (also in this
    /// process's later copies of it): another test process of the `cargo nextest` run probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_cache: Option<PathBuf>,
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.backend, self.outcome)
    }
}
