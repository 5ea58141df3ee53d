//! The vocabulary every other module shares: the GPU backends, which of them a run requires,
//! how probes run, and which wgpu backends are tried in what order. The bottom layer above
//! `sys`: it reads no environment and knows nothing of probes, permits or fixtures, so
//! [`config`](crate::config) can parse into these types and the probe and the fixtures agree
//! on them. Re-exported where they are used: `probe::{Backend, ProbeMode}`,
//! `decision::Policy`.

use std::fmt;

/// A GPU backend this crate can probe.
///
/// ```
/// use gpu_test_permit::probe::Backend;
///
/// let b: Backend = "cuda".parse()?;
/// assert_eq!(b, Backend::Cuda);
/// assert_eq!(Backend::Wgpu.name(), "wgpu");
/// assert_eq!(Backend::ALL, [Backend::Cuda, Backend::Wgpu]);
/// # Ok::<(), gpu_test_permit::probe::UnknownBackend>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// NVIDIA CUDA. Probed through the driver library, with or without the `cuda` feature
    /// (which adds the `cudarc` fixture).
    Cuda,
    /// WebGPU over Vulkan, Metal, DX12 or GL. Probed through `wgpu` with the `wgpu` feature
    /// (which adds the fixture); without it, through the Vulkan loader, on the platforms where
    /// wgpu's default backend is Vulkan (not macOS).
    Wgpu,
}

impl Backend {
    /// Every backend, in a fixed order.
    ///
    /// ```
    /// use gpu_test_permit::probe::{probe, Backend};
    ///
    /// for b in Backend::ALL {
    ///     println!("{b}: {}", probe(b).outcome);
    /// }
    /// ```
    pub const ALL: [Backend; 2] = [Backend::Cuda, Backend::Wgpu];

    /// The lower-case name used in environment variables and output: `cuda`, `wgpu`.
    ///
    /// ```
    /// use gpu_test_permit::probe::Backend;
    ///
    /// assert_eq!(Backend::Cuda.name(), "cuda");
    /// assert_eq!(Backend::Cuda.to_string(), "cuda");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Wgpu => "wgpu",
        }
    }

    /// Whether this build of the crate can probe the backend on this platform: CUDA always
    /// (through the driver library); wgpu with the `wgpu` feature, or without it where the
    /// Vulkan loader stands in for it (every Unix but macOS, and Windows).
    ///
    /// ```
    /// use gpu_test_permit::probe::Backend;
    ///
    /// assert!(Backend::Cuda.is_built());
    /// ```
    pub const fn is_built(self) -> bool {
        match self {
            Backend::Cuda => true,
            Backend::Wgpu => {
                cfg!(feature = "wgpu") || !crate::sys::VULKAN_LOADER_LIBRARIES.is_empty()
            }
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Each backend by its name in the files (as [`name`](Self::name) gives it), as its
    /// position in [`ALL`](Self::ALL).
    const NAMES: [(&'static str, u8); 2] = [("cuda", 0), ("wgpu", 1)];

    /// The backend that field `key` of `f` names (see [`NAMES`](Self::NAMES)).
    pub(crate) fn read_field(f: &crate::json::Fields<'_>, key: &str) -> Result<Backend, String> {
        Ok(Backend::ALL[usize::from(f.req_one_of(key, &Backend::NAMES)?)])
    }
}

impl crate::json::Write for Backend {
    fn write(&self, out: &mut String) {
        crate::json::Write::write(self.name(), out);
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = UnknownBackend;

    fn from_str(s: &str) -> Result<Backend, UnknownBackend> {
        match s {
            "cuda" => Ok(Backend::Cuda),
            "wgpu" => Ok(Backend::Wgpu),
            _ => Err(UnknownBackend(s.to_string())),
        }
    }
}

/// A word that names no [`Backend`].
///
/// ```
/// use gpu_test_permit::probe::{Backend, UnknownBackend};
///
/// let e = "rocm".parse::<Backend>().unwrap_err();
/// assert_eq!(e, UnknownBackend("rocm".into()));
/// assert_eq!(e.to_string(), "unknown backend 'rocm'; expected cuda or wgpu");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownBackend(pub String);

impl fmt::Display for UnknownBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown backend '{}'; expected cuda or wgpu", self.0)
    }
}

impl std::error::Error for UnknownBackend {}

/// Which backends must be present, from `GPU_TEST_PERMIT_REQUIRE`.
///
/// ```
/// use gpu_test_permit::decision::Policy;
/// use gpu_test_permit::probe::Backend;
///
/// let p: Policy = "cuda, wgpu".parse().unwrap();
/// assert!(p.requires(Backend::Cuda) && p.requires(Backend::Wgpu));
/// assert_eq!(p.to_string(), "cuda,wgpu");
/// assert!("cdua".parse::<Policy>().unwrap_err().to_string().contains("unknown word 'cdua'"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    required: [bool; 2],
    any: bool,
}

impl Policy {
    /// Nothing is required: every absent backend skips (`none`, the default).
    ///
    /// ```
    /// use gpu_test_permit::decision::Policy;
    /// use gpu_test_permit::probe::Backend;
    ///
    /// assert_eq!(Policy::none(), "none".parse().unwrap());
    /// assert!(!Policy::none().requires(Backend::Cuda));
    /// ```
    pub const fn none() -> Policy {
        Policy {
            required: [false, false],
            any: false,
        }
    }

    /// Some backend must have a device (`any`).
    ///
    /// ```
    /// use gpu_test_permit::decision::Policy;
    /// use gpu_test_permit::probe::Backend;
    ///
    /// assert_eq!(Policy::any(), "any".parse().unwrap());
    /// assert!(Policy::any().requires_any());
    /// ```
    pub const fn any() -> Policy {
        Policy {
            required: [false, false],
            any: true,
        }
    }

    /// `backend` must have a device.
    ///
    /// ```
    /// use gpu_test_permit::decision::Policy;
    /// use gpu_test_permit::probe::Backend;
    ///
    /// let p = Policy::none().require(Backend::Wgpu);
    /// assert!(p.requires(Backend::Wgpu) && !p.requires(Backend::Cuda));
    /// ```
    pub fn require(mut self, backend: Backend) -> Policy {
        self.required[backend as usize] = true;
        self
    }

    /// Whether `backend` must have a device.
    ///
    /// ```
    /// use gpu_test_permit::decision::Policy;
    /// use gpu_test_permit::probe::Backend;
    ///
    /// assert!("cuda".parse::<Policy>().unwrap().requires(Backend::Cuda));
    /// ```
    pub fn requires(&self, backend: Backend) -> bool {
        self.required[backend as usize]
    }

    /// Whether some backend must have a device (`any`).
    ///
    /// ```
    /// use gpu_test_permit::decision::Policy;
    /// use gpu_test_permit::probe::Backend;
    ///
    /// assert!(Policy::any().requires_any());
    /// assert!(!Policy::none().requires_any());
    /// ```
    pub fn requires_any(&self) -> bool {
        self.any
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words: Vec<&str> = Vec::new();
        if self.any {
            words.push("any");
        }
        for b in Backend::ALL {
            if self.requires(b) {
                words.push(b.name());
            }
        }
        if words.is_empty() {
            words.push("none");
        }
        f.write_str(&words.join(","))
    }
}

impl std::str::FromStr for Policy {
    type Err = PolicyError;

    /// Parses `none`, `any`, `cuda`, `wgpu` or a comma-separated list of them. Unknown words
    /// are errors: a typo must not quietly turn a requirement off.
    fn from_str(s: &str) -> Result<Policy, PolicyError> {
        let mut p = Policy::none();
        let mut saw_none = false;
        let mut words = Vec::new();
        let mut all_empty = true;
        for w in s.split(',') {
            let w = w.trim();
            all_empty &= w.is_empty();
            words.push(w);
        }
        if all_empty {
            return Err(PolicyError::Empty);
        }
        for w in &words {
            match *w {
                "" => return Err(PolicyError::EmptyEntry),
                "none" => saw_none = true,
                "any" => p.any = true,
                other => match other.parse::<Backend>() {
                    Ok(b) => p = p.require(b),
                    Err(_) => return Err(PolicyError::UnknownWord(other.to_string())),
                },
            }
        }
        if saw_none && words.len() > 1 {
            return Err(PolicyError::NoneWithOthers);
        }
        Ok(p)
    }
}

/// Why a [`Policy`] could not be parsed. Its message completes a sentence that starts with the
/// value, as in `GPU_TEST_PERMIT_REQUIRE='cdua' has unknown word 'cdua'; use ...`.
///
/// ```
/// use gpu_test_permit::decision::{Policy, PolicyError};
///
/// assert_eq!("none,cuda".parse::<Policy>(), Err(PolicyError::NoneWithOthers));
/// assert_eq!("cuda,,wgpu".parse::<Policy>(), Err(PolicyError::EmptyEntry));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// Nothing but commas and spaces.
    Empty,
    /// An empty entry between commas.
    EmptyEntry,
    /// A word that is not `none`, `any` or a backend.
    UnknownWord(String),
    /// `none` together with other words.
    NoneWithOthers,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Empty => f.write_str("is empty")?,
            PolicyError::EmptyEntry => f.write_str("has an empty entry")?,
            PolicyError::UnknownWord(w) => write!(f, "has unknown word '{w}'")?,
            PolicyError::NoneWithOthers => f.write_str("combines none with other words")?,
        }
        f.write_str("; use none, any, cuda, wgpu or a comma-separated list such as cuda,wgpu")
    }
}

impl std::error::Error for PolicyError {}

/// How probes run: [`ProbeMode::Child`] unless `GPU_TEST_PERMIT_PROBE=in-process`.
///
/// ```
/// use gpu_test_permit::config::{Config, PROBE_VAR};
/// use gpu_test_permit::probe::ProbeMode;
///
/// assert_eq!(Config::from_lookup(|_| None).probe_mode, ProbeMode::Child);
/// let fast = Config::from_lookup(|name| (name == PROBE_VAR).then(|| "in-process".into()));
/// assert_eq!(fast.probe_mode, ProbeMode::InProcess);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProbeMode {
    /// In a child process: a crash or hang of the driver cannot hurt the caller.
    #[default]
    Child,
    /// In the calling process: faster, but a crash or hang of the driver is the caller's.
    InProcess,
}

/// The wgpu backends to try, in order: the ones `WGPU_BACKEND` names, alone, when it is set
/// (`from_env`), else Vulkan, Metal and DX12, then GL. The probe enumerates the same tiers as
/// the fixture, so it answers for what the fixture uses.
#[cfg(feature = "wgpu")]
pub(crate) fn wgpu_tiers(from_env: bool) -> Vec<wgpu::Backends> {
    if from_env {
        vec![wgpu::InstanceDescriptor::new_without_display_handle_from_env().backends]
    } else {
        vec![wgpu::Backends::PRIMARY, wgpu::Backends::SECONDARY]
    }
}
