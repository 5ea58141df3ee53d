//! What a probe found out: [`ProbeOutcome`], with the [`Device`]s of a backend that has some.

use std::fmt;
use std::time::Duration;

use crate::json::{self, Fields, Object, Record, Value};

/// What kind of device an adapter is.
///
/// ```
/// use gpu_test_permit::probe::{DeviceKind, ProbeReport};
///
/// let report = ProbeReport::from_json(
///     r#"{"backend":"cuda","outcome":{"status":"devices","devices":[{"index":0,"name":"NVIDIA GB10","api":"cuda","kind":"integrated","driver":"CUDA 13.0","memory_bytes":128000000000}]},"duration_ms":40,"source":"child"}"#,
/// )?;
/// let device = &report.outcome.devices().expect("devices")[0];
/// assert_eq!(device.kind, DeviceKind::Integrated);
/// assert_eq!(DeviceKind::Cpu.to_string(), "cpu"); // lavapipe, llvmpipe
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A GPU with its own memory.
    Discrete,
    /// A GPU sharing memory with the CPU.
    Integrated,
    /// A software implementation on the CPU, such as Mesa's lavapipe or llvmpipe.
    Cpu,
    /// A virtual or hosted GPU.
    Virtual,
    /// Anything else, or unknown.
    Other,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Discrete => "discrete",
            DeviceKind::Integrated => "integrated",
            DeviceKind::Cpu => "cpu",
            DeviceKind::Virtual => "virtual",
            DeviceKind::Other => "other",
        })
    }
}

/// One device a backend found.
///
/// ```
/// use gpu_test_permit::probe::ProbeReport;
///
/// let report = ProbeReport::from_json(
///     r#"{"backend":"cuda","outcome":{"status":"devices","devices":[{"index":0,"name":"NVIDIA GB10","api":"cuda","kind":"integrated","driver":"CUDA 13.0","memory_bytes":128000000000}]},"duration_ms":40,"source":"child"}"#,
/// )?;
/// let device = &report.outcome.devices().expect("devices")[0];
/// assert_eq!((device.index, device.name.as_str()), (0, "NVIDIA GB10"));
/// assert_eq!(device.memory_bytes, Some(128_000_000_000));
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Device {
    /// Position in the backend's enumeration (the CUDA ordinal for CUDA).
    pub index: u32,
    /// The name the driver gives, e.g. `NVIDIA GB10` or `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// The API the device is reached through: `cuda`, or wgpu's backend (`vulkan`, `metal`,
    /// `dx12`, `gl`; only `vulkan` without the `wgpu` feature).
    pub api: String,
    /// Discrete, integrated, CPU, ...
    pub kind: DeviceKind,
    /// The driver and its version as far as the backend says, e.g. `CUDA 12.8`, `llvmpipe Mesa
    /// 22.3.6` (wgpu) or `22.3.6 (Vulkan 1.3.230)` (the Vulkan loader).
    pub driver: Option<String>,
    /// Total device memory in bytes, where the backend reports it: CUDA does, wgpu does not,
    /// the Vulkan loader gives the sum of the device-local heaps (for a CPU device, what the
    /// driver offers of the host's memory).
    pub memory_bytes: Option<u64>,
}

/// What a probe found out.
///
/// ```
/// use gpu_test_permit::probe::{probe, Backend, ProbeOutcome};
///
/// match probe(Backend::Cuda).outcome {
///     ProbeOutcome::Devices { devices } => println!("{} CUDA device(s)", devices.len()),
///     o if o.is_broken() => println!("the CUDA driver is broken: {o}"),
///     o => println!("no CUDA here: {o}"),
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProbeOutcome {
    /// The backend works and has these devices (never empty).
    Devices {
        /// The devices, in the backend's order.
        devices: Vec<Device>,
    },
    /// The backend's driver is installed but reports no device.
    NoDevices {
        /// What the driver said.
        detail: String,
    },
    /// The backend's driver library is not installed.
    NotInstalled {
        /// What was looked for.
        detail: String,
    },
    /// This build of the crate cannot probe the backend here: wgpu without the `wgpu` feature
    /// where the Vulkan loader cannot stand in for it (macOS, whose wgpu backend is Metal, or
    /// `WGPU_BACKEND` naming no Vulkan).
    NotBuilt,
    /// The driver returned an error.
    Error {
        /// The error, with the driver's numeric code where there is one.
        detail: String,
    },
    /// The probe child died: killed by a signal or exited with a failure status before answering.
    Crashed {
        /// The signal that killed it (Unix), e.g. 11 for SIGSEGV.
        signal: Option<i32>,
        /// Its exit status, when it exited.
        exit_code: Option<i32>,
        /// The end of what it wrote to standard error (the driver's last words).
        stderr_tail: String,
    },
    /// The probe child passed its deadline and was killed.
    TimedOut {
        /// The deadline it passed (`after_ms` in JSON).
        after: Duration,
        /// The end of what it wrote to standard error.
        stderr_tail: String,
    },
    /// The probe child's answer could not be understood.
    Malformed {
        /// What was wrong with it.
        detail: String,
        /// The end of what it wrote to standard error.
        stderr_tail: String,
    },
}

/// The device kinds that [`DEVICE_KIND_NAMES`] name.
const DEVICE_KINDS: [DeviceKind; 5] = [
    DeviceKind::Discrete,
    DeviceKind::Integrated,
    DeviceKind::Cpu,
    DeviceKind::Virtual,
    DeviceKind::Other,
];

/// The name of each of [`DEVICE_KINDS`] in JSON, with its position there.
const DEVICE_KIND_NAMES: [(&str, u8); 5] = [
    ("discrete", 0),
    ("integrated", 1),
    ("cpu", 2),
    ("virtual", 3),
    ("other", 4),
];

impl json::Write for DeviceKind {
    fn write(&self, out: &mut String) {
        json::Write::write(&self.to_string(), out);
    }
}

/// A device: `{"index":..,"name":"..","api":"..","kind":"..","driver":..,"memory_bytes":..}`,
/// `null` for what is not known.
impl json::Write for Device {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("index", self.index)
                .field("name", &self.name)
                .field("api", &self.api)
                .field("kind", self.kind)
                .field("driver", &self.driver)
                .field("memory_bytes", self.memory_bytes)
                .finish(),
        );
    }
}

impl Record for Device {
    fn read_json(v: &Value) -> Result<Device, String> {
        let f = Fields::of(v, "device")?;
        Ok(Device {
            index: f.req("index")?,
            name: f.req("name")?,
            api: f.req("api")?,
            kind: DEVICE_KINDS[usize::from(f.req_one_of("kind", &DEVICE_KIND_NAMES)?)],
            driver: f.opt("driver")?,
            memory_bytes: f.opt("memory_bytes")?,
        })
    }
}

/// An outcome: `{"status":"<devices|no_devices|not_installed|not_built|error|crashed|timed_out|malformed>", ...}`,
/// the variant's fields after the status (`after_ms` for `after`, milliseconds).
impl json::Write for ProbeOutcome {
    fn write(&self, out: &mut String) {
        let mut o = Object::new();
        match self {
            ProbeOutcome::Devices { devices } => {
                o.field("status", "devices").field("devices", devices);
            }
            ProbeOutcome::NoDevices { detail } => {
                o.field("status", "no_devices").field("detail", detail);
            }
            ProbeOutcome::NotInstalled { detail } => {
                o.field("status", "not_installed").field("detail", detail);
            }
            ProbeOutcome::NotBuilt => {
                o.field("status", "not_built");
            }
            ProbeOutcome::Error { detail } => {
                o.field("status", "error").field("detail", detail);
            }
            ProbeOutcome::Crashed {
                signal,
                exit_code,
                stderr_tail,
            } => {
                o.field("status", "crashed")
                    .field("signal", *signal)
                    .field("exit_code", *exit_code)
                    .field("stderr_tail", stderr_tail);
            }
            ProbeOutcome::TimedOut { after, stderr_tail } => {
                o.field("status", "timed_out")
                    .field("after_ms", millis::of(*after))
                    .field("stderr_tail", stderr_tail);
            }
            ProbeOutcome::Malformed {
                detail,
                stderr_tail,
            } => {
                o.field("status", "malformed")
                    .field("detail", detail)
                    .field("stderr_tail", stderr_tail);
            }
        }
        out.push_str(&o.finish());
    }
}

impl Record for ProbeOutcome {
    fn read_json(v: &Value) -> Result<ProbeOutcome, String> {
        const STATUSES: [(&str, u8); 8] = [
            ("devices", 0),
            ("no_devices", 1),
            ("not_installed", 2),
            ("not_built", 3),
            ("error", 4),
            ("crashed", 5),
            ("timed_out", 6),
            ("malformed", 7),
        ];
        let f = Fields::of(v, "probe outcome")?;
        Ok(match f.req_one_of("status", &STATUSES)? {
            0 => ProbeOutcome::Devices {
                devices: f.records("devices")?,
            },
            1 => ProbeOutcome::NoDevices {
                detail: f.req("detail")?,
            },
            2 => ProbeOutcome::NotInstalled {
                detail: f.req("detail")?,
            },
            3 => ProbeOutcome::NotBuilt,
            4 => ProbeOutcome::Error {
                detail: f.req("detail")?,
            },
            5 => ProbeOutcome::Crashed {
                signal: f.opt("signal")?,
                exit_code: f.opt("exit_code")?,
                stderr_tail: f.req("stderr_tail")?,
            },
            6 => ProbeOutcome::TimedOut {
                after: match millis::read(&f, "after_ms") {
                    Ok(d) => d,
                    Err(e) => return Err(format!("probe outcome: {e}")),
                },
                stderr_tail: f.req("stderr_tail")?,
            },
            _ => ProbeOutcome::Malformed {
                detail: f.req("detail")?,
                stderr_tail: f.req("stderr_tail")?,
            },
        })
    }
}

impl ProbeOutcome {
    /// The outcome as JSON, one line: `{"status":"devices","devices":[...]}`, or the status
    /// and its details (`{"status":"no_devices","detail":"..."}`). Fields are written in a
    /// fixed order; durations as milliseconds (`after_ms`).
    ///
    /// ```
    /// use gpu_test_permit::probe::ProbeOutcome;
    ///
    /// let o = ProbeOutcome::from_json(r#"{"status":"not_installed","detail":"no libcuda"}"#)?;
    /// assert_eq!(o.to_json(), r#"{"status":"not_installed","detail":"no libcuda"}"#);
    /// # Ok::<(), String>(())
    /// ```
    pub fn to_json(&self) -> String {
        self.to_text()
    }

    /// Reads an outcome that [`to_json`](Self::to_json) wrote (fields it does not know are
    /// ignored).
    ///
    /// # Errors
    ///
    /// Text that is not JSON, or not an outcome: the message names the field.
    ///
    /// ```
    /// use gpu_test_permit::probe::ProbeOutcome;
    ///
    /// let o = ProbeOutcome::from_json(r#"{"status":"not_built"}"#)?;
    /// assert_eq!(o, ProbeOutcome::NotBuilt);
    /// assert!(ProbeOutcome::from_json(r#"{"status":"lost"}"#).is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn from_json(text: &str) -> Result<ProbeOutcome, String> {
        ProbeOutcome::from_text(text)
    }

    /// The devices, when the backend has any.
    ///
    /// ```
    /// use gpu_test_permit::probe::ProbeOutcome;
    ///
    /// let found = ProbeOutcome::from_json(
    ///     r#"{"status":"devices","devices":[{"index":0,"name":"llvmpipe","api":"vulkan","kind":"cpu"}]}"#,
    /// )?;
    /// let crashed = ProbeOutcome::from_json(r#"{"status":"crashed","signal":11,"exit_code":null,"stderr_tail":""}"#)?;
    /// assert_eq!(found.devices().map(|d| d.len()), Some(1));
    /// assert!(crashed.devices().is_none());
    /// # Ok::<(), String>(())
    /// ```
    pub fn devices(&self) -> Option<&[Device]> {
        match self {
            ProbeOutcome::Devices { devices } => Some(devices),
            _ => None,
        }
    }

    /// Whether the backend has at least one device.
    ///
    /// ```
    /// use gpu_test_permit::probe::ProbeOutcome;
    ///
    /// let found = ProbeOutcome::from_json(
    ///     r#"{"status":"devices","devices":[{"index":0,"name":"llvmpipe","api":"vulkan","kind":"cpu"}]}"#,
    /// )?;
    /// let crashed = ProbeOutcome::from_json(r#"{"status":"crashed","signal":11,"exit_code":null,"stderr_tail":""}"#)?;
    /// assert!(found.has_devices() && !crashed.has_devices());
    /// # Ok::<(), String>(())
    /// ```
    pub fn has_devices(&self) -> bool {
        matches!(self.devices(), Some(d) if !d.is_empty())
    }

    /// Whether the probe itself went wrong (crash, hang, error, malformed answer), as opposed
    /// to a clean answer of "devices", "no devices", "not installed" or "not built". A broken
    /// probe means a broken driver, which deserves attention even where the backend is optional.
    ///
    /// ```
    /// use gpu_test_permit::probe::ProbeOutcome;
    ///
    /// let found = ProbeOutcome::from_json(
    ///     r#"{"status":"devices","devices":[{"index":0,"name":"llvmpipe","api":"vulkan","kind":"cpu"}]}"#,
    /// )?;
    /// let crashed = ProbeOutcome::from_json(r#"{"status":"crashed","signal":11,"exit_code":null,"stderr_tail":""}"#)?;
    /// assert!(crashed.is_broken() && !found.is_broken());
    /// assert!(!ProbeOutcome::NotBuilt.is_broken());
    /// # Ok::<(), String>(())
    /// ```
    pub fn is_broken(&self) -> bool {
        matches!(
            self,
            ProbeOutcome::Error { .. }
                | ProbeOutcome::Crashed { .. }
                | ProbeOutcome::TimedOut { .. }
                | ProbeOutcome::Malformed { .. }
        )
    }
}

/// `text` with each line break written ` | `: a child's stderr on one line of a message.
pub(super) fn one_line(text: &str) -> String {
    crate::bars_for(text, b"\n")
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn tail(f: &mut fmt::Formatter<'_>, t: &str) -> fmt::Result {
            let t = t.trim();
            if t.is_empty() {
                Ok(())
            } else {
                write!(f, "; its stderr ended with: {}", one_line(t))
            }
        }
        match self {
            ProbeOutcome::Devices { devices } => {
                let n = devices.len();
                write!(f, "{n} device{}", if n == 1 { "" } else { "s" })?;
                let mut separator = ": ";
                for d in devices {
                    f.write_str(separator)?;
                    separator = "; ";
                    write!(f, "{} [{}, {}", d.name, d.api, d.kind)?;
                    if let Some(drv) = &d.driver {
                        write!(f, ", driver {drv}")?;
                    }
                    if let Some(m) = d.memory_bytes {
                        write!(f, ", {:.1} GiB", m as f64 / (1u64 << 30) as f64)?;
                    }
                    f.write_str("]")?;
                }
                Ok(())
            }
            ProbeOutcome::NoDevices { detail } => write!(f, "no devices ({detail})"),
            ProbeOutcome::NotInstalled { detail } => write!(f, "not installed ({detail})"),
            ProbeOutcome::NotBuilt => f.write_str(
                "not built: without this backend's feature gpu-test-permit cannot probe it here",
            ),
            ProbeOutcome::Error { detail } => write!(f, "driver error: {detail}"),
            ProbeOutcome::Crashed {
                signal,
                exit_code,
                stderr_tail,
            } => {
                match (signal, exit_code) {
                    (Some(s), _) => write!(
                        f,
                        "the probe child crashed with signal {s}{}",
                        match signal_name(*s) {
                            Some(n) => format!(" ({n})"),
                            None => String::new(),
                        }
                    )?,
                    (None, Some(c)) => {
                        write!(f, "the probe child exited with status {c} before answering")?
                    }
                    (None, None) => f.write_str("the probe child died before answering")?,
                }
                tail(f, stderr_tail)
            }
            ProbeOutcome::TimedOut { after, stderr_tail } => {
                write!(
                    f,
                    "the probe child did not answer within {} ms and was killed (a hung \
                     driver; raise GPU_TEST_PERMIT_PROBE_TIMEOUT if it is just slow)",
                    after.as_millis()
                )?;
                tail(f, stderr_tail)
            }
            ProbeOutcome::Malformed {
                detail,
                stderr_tail,
            } => {
                write!(f, "malformed probe answer: {detail}")?;
                tail(f, stderr_tail)
            }
        }
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return None,
    })
}

pub(super) mod millis {
    //! Durations as milliseconds in JSON, a float (`12.5`), readable by people and tools.
    use std::time::Duration;

    /// `d` as milliseconds.
    pub(in crate::probe) fn of(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }

    /// Field `key` of `f`, milliseconds, as a duration: out of range (negative, not finite,
    /// past `Duration::MAX`) is an error, not a panic.
    pub(in crate::probe) fn read(
        f: &crate::json::Fields<'_>,
        key: &str,
    ) -> Result<Duration, String> {
        let ms: f64 = f.req(key)?;
        match Duration::try_from_secs_f64(ms / 1000.0) {
            Ok(d) => Ok(d),
            Err(_) => Err(format!(
                "field `{key}`: {ms} ms is not a duration (a non-negative number of milliseconds)"
            )),
        }
    }
}
