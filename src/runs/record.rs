//! The records: one JSON object a line, each with its run id, its time and its process.

use crate::json::{self, FieldReader, Fields, Object, OptField, Record, Text, Value, optional};

/// One line of a run's record file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunRecord {
    /// A test skipped: its backend had no device and was not required.
    Skip(SkipRecord),
    /// A permit was granted to a test.
    Grant(GrantRecord),
    /// A permit granted before was returned.
    Release(ReleaseRecord),
    /// `REALIZAR_GPU_TEST_CONCURRENCY=auto` chose the run's N (see [`tune`](crate::__private::tune)).
    Choice(ChoiceRecord),
    /// A test process loaded GPU drivers (see [`drivers`](crate::__private::drivers)).
    Drivers(DriversRecord),
    /// A watched test process crashed or hung after (or around) its tests: its verdict
    /// (`gpu-test-permit watch`).
    Verdict(VerdictRecord),
}

/// A line of a run's record file: `{"kind":"<skip|grant|release|choice|drivers|verdict>", ...}`,
/// the record's fields after the kind, in their order. Fields added after the first release
/// are left out where they hold their default, and read as it where absent. Unversioned.
impl json::Write for RunRecord {
    fn write(&self, out: &mut String) {
        out.push_str(&self.text());
    }
}

impl RunRecord {
    /// The record's line, without its newline.
    fn text(&self) -> String {
        match self {
            RunRecord::Skip(r) => Object::new()
                .field("kind", "skip")
                .field("run", &r.run)
                .field("unix_us", r.unix_us)
                .field("pid", r.pid)
                .field("binary", &r.binary)
                .field("test", &r.test)
                .field("attempt", r.attempt)
                .field("backend", &r.backend)
                .field("reason", &r.reason)
                .finish(),
            // The records a permit writes, formatted in one go (see [`Text`]), as [`Object`]
            // would write them.
            RunRecord::Grant(r) => {
                format!(
                    "{{\"kind\":\"grant\",\"run\":{run},\"unix_us\":{unix_us},\"pid\":{pid},\
                     \"hold\":{hold},\"binary\":{binary},\"test\":{test},\"attempt\":{attempt},\
                     \"total_attempts\":{total_attempts},\"units\":{units},\"exclusive\":{exclusive},\
                     \"per_gpu\":{per_gpu},\"gpus\":{gpus},\"alone\":{alone},\
                     \"waited_us\":{waited_us}{learned}}}",
                    run = Text(&r.run),
                    unix_us = r.unix_us,
                    pid = r.pid,
                    hold = r.hold,
                    binary = Text(&r.binary),
                    test = Text(&r.test),
                    attempt = r.attempt,
                    total_attempts = r.total_attempts,
                    units = r.units,
                    exclusive = r.exclusive,
                    per_gpu = r.per_gpu,
                    gpus = r.gpus,
                    alone = r.alone,
                    waited_us = r.waited_us,
                    learned = OptField("learned", optional(&r.learned)),
                )
            }
            RunRecord::Release(r) => {
                format!(
                    "{{\"kind\":\"release\",\"run\":{run},\"unix_us\":{unix_us},\"pid\":{pid},\
                     \"hold\":{hold},\"outcome\":{outcome}{memory_used}}}",
                    run = Text(&r.run),
                    unix_us = r.unix_us,
                    pid = r.pid,
                    hold = r.hold,
                    outcome = OutcomeJson(r.outcome),
                    memory_used = OptField("memory_used", optional(&r.memory_used)),
                )
            }
            RunRecord::Choice(r) => Object::new()
                .field("kind", "choice")
                .field("run", &r.run)
                .field("unix_us", r.unix_us)
                .field("pid", r.pid)
                .field("per_gpu", r.per_gpu)
                .field("gpus", r.gpus)
                .field("gpu", &r.gpu)
                .field("why", &r.why)
                .finish(),
            RunRecord::Drivers(r) => Object::new()
                .field("kind", "drivers")
                .field("run", &r.run)
                .field("unix_us", r.unix_us)
                .field("pid", r.pid)
                .field("binary", &r.binary)
                .field("test", &r.test)
                .field("attempt", r.attempt)
                .field("drivers", &r.drivers)
                .field("unpermitted", &r.unpermitted)
                .field("before_first_permit", r.before_first_permit)
                .field("held", r.held)
                .field("seen", &r.seen)
                .when(!r.linked.is_empty(), "linked", &r.linked)
                .when(r.started_process, "started_process", true)
                .finish(),
            RunRecord::Verdict(r) => Object::new()
                .field("kind", "verdict")
                .field("run", &r.run)
                .field("unix_us", r.unix_us)
                .field("pid", r.pid)
                .field("binary", &r.binary)
                .field("test", &r.test)
                .field("attempt", r.attempt)
                .field("fault", &r.fault)
                .field("ended", &r.ended)
                .field("failed", r.failed)
                .field("said", &r.said)
                .finish(),
        }
    }
}

impl Record for RunRecord {
    fn to_text(&self) -> String {
        self.text()
    }

    fn read_json(v: &Value) -> Result<RunRecord, String> {
        const KINDS: [(&str, u8); 6] = [
            ("skip", 0),
            ("grant", 1),
            ("release", 2),
            ("choice", 3),
            ("drivers", 4),
            ("verdict", 5),
        ];
        let f = Fields::of(v, "run record")?;
        let kind = f.req_one_of("kind", &KINDS)?;
        let mut r = FieldReader::new(f);
        let record = match kind {
            0 => RunRecord::Skip(SkipRecord {
                run: r.req("run"),
                unix_us: r.req("unix_us"),
                pid: r.req("pid"),
                binary: r.req("binary"),
                test: r.req("test"),
                attempt: r.req("attempt"),
                backend: r.req("backend"),
                reason: r.req("reason"),
            }),
            1 => RunRecord::Grant(GrantRecord {
                run: r.req("run"),
                unix_us: r.req("unix_us"),
                pid: r.req("pid"),
                hold: r.req("hold"),
                binary: r.req("binary"),
                test: r.req("test"),
                attempt: r.req("attempt"),
                total_attempts: r.req("total_attempts"),
                units: r.req("units"),
                exclusive: r.req("exclusive"),
                per_gpu: r.req("per_gpu"),
                gpus: r.req("gpus"),
                alone: r.or_default("alone"),
                waited_us: r.or_default("waited_us"),
                learned: r.opt("learned"),
            }),
            2 => RunRecord::Release(ReleaseRecord {
                run: r.req("run"),
                unix_us: r.req("unix_us"),
                pid: r.req("pid"),
                hold: r.req("hold"),
                outcome: match r.value("outcome") {
                    Some(v) => r.keep(Outcome::read_field(v), Outcome::Passed),
                    None => Outcome::Passed,
                },
                memory_used: r.opt("memory_used"),
            }),
            3 => RunRecord::Choice(ChoiceRecord {
                run: r.req("run"),
                unix_us: r.req("unix_us"),
                pid: r.req("pid"),
                per_gpu: r.req("per_gpu"),
                gpus: r.req("gpus"),
                gpu: r.req("gpu"),
                why: r.req("why"),
            }),
            5 => RunRecord::Verdict(VerdictRecord {
                run: r.req("run"),
                unix_us: r.req("unix_us"),
                pid: r.req("pid"),
                binary: r.req("binary"),
                test: r.req("test"),
                attempt: r.req("attempt"),
                fault: r.req("fault"),
                ended: r.req("ended"),
                failed: r.req("failed"),
                said: r.req("said"),
            }),
            _ => RunRecord::Drivers(DriversRecord {
                run: r.req("run"),
                unix_us: r.req("unix_us"),
                pid: r.req("pid"),
                binary: r.req("binary"),
                test: r.req("test"),
                attempt: r.req("attempt"),
                drivers: r.req("drivers"),
                unpermitted: r.req("unpermitted"),
                before_first_permit: r.req("before_first_permit"),
                held: r.req("held"),
                seen: r.req("seen"),
                linked: r.or_default("linked"),
                started_process: r.or_default("started_process"),
            }),
        };
        match r.error() {
            None => Ok(record),
            Some(e) => Err(e),
        }
    }
}

/// An outcome in a release record: `"passed"`, `"panicked"`, `{"exited":CODE}` or
/// `{"signal":NUMBER}`, to be formatted.
struct OutcomeJson(Outcome);

impl std::fmt::Display for OutcomeJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Outcome::Passed => f.write_str("\"passed\""),
            Outcome::Panicked => f.write_str("\"panicked\""),
            Outcome::Exited(code) => write!(f, "{{\"exited\":{code}}}"),
            Outcome::Signal(sig) => write!(f, "{{\"signal\":{sig}}}"),
        }
    }
}

impl Outcome {
    /// [`Outcome::read_json`], its error named as a run record's field.
    fn read_field(v: &Value) -> Result<Outcome, String> {
        match Outcome::read_json(v) {
            Ok(outcome) => Ok(outcome),
            Err(e) => Err(format!("run record: field `outcome`: {e}")),
        }
    }

    fn read_json(v: &Value) -> Result<Outcome, String> {
        const EXPECTED: &str =
            "expected `passed`, `panicked`, `{\"exited\":CODE}` or `{\"signal\":NUMBER}`";
        match v {
            Value::String(s) if s == "passed" => Ok(Outcome::Passed),
            Value::String(s) if s == "panicked" => Ok(Outcome::Panicked),
            Value::Object(fields) if fields.len() == 1 => {
                let (key, value) = &fields[0];
                let Some(n) = <i32 as json::Read>::read(value) else {
                    return Err(format!("`{key}`: expected an integer that fits in i32"));
                };
                match key.as_str() {
                    "exited" => Ok(Outcome::Exited(n)),
                    "signal" => Ok(Outcome::Signal(n)),
                    _ => Err(format!("unknown outcome `{key}`, {EXPECTED}")),
                }
            }
            other => Err(format!("{EXPECTED}, found {}", other.kind())),
        }
    }
}

impl RunRecord {
    /// The run the record belongs to.
    pub fn run(&self) -> &str {
        match self {
            RunRecord::Skip(r) => &r.run,
            RunRecord::Grant(r) => &r.run,
            RunRecord::Release(r) => &r.run,
            RunRecord::Choice(r) => &r.run,
            RunRecord::Drivers(r) => &r.run,
            RunRecord::Verdict(r) => &r.run,
        }
    }

    /// When it was written, microseconds since the Unix epoch.
    pub fn unix_us(&self) -> u64 {
        match self {
            RunRecord::Skip(r) => r.unix_us,
            RunRecord::Grant(r) => r.unix_us,
            RunRecord::Release(r) => r.unix_us,
            RunRecord::Choice(r) => r.unix_us,
            RunRecord::Drivers(r) => r.unix_us,
            RunRecord::Verdict(r) => r.unix_us,
        }
    }
}

/// A test that skipped at run time ([`require_backend!`](crate::require_backend) or a fixture).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkipRecord {
    /// The run id (nextest's `NEXTEST_RUN_ID`).
    pub run: String,
    /// When, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The test's process.
    pub pid: u32,
    /// The test binary (nextest's `NEXTEST_BINARY_ID`; the JUnit report's `classname`).
    pub binary: String,
    /// The test's name (the JUnit report's `name`).
    pub test: String,
    /// The attempt that skipped (nextest's `NEXTEST_ATTEMPT`, 1 for the first).
    pub attempt: u32,
    /// The backend that had no device: `cuda`, `wgpu`.
    pub backend: String,
    /// Why, as the skip line says it.
    pub reason: String,
}

/// A permit granted to a test.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrantRecord {
    /// The run id.
    pub run: String,
    /// When it was granted, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The process holding it.
    pub pid: u32,
    /// The permit's number within its process: its [`ReleaseRecord`] carries the same.
    pub hold: u64,
    /// The test binary.
    pub binary: String,
    /// The test's name.
    pub test: String,
    /// The attempt (1 for the first).
    pub attempt: u32,
    /// The attempts the test has in all (1 + nextest's retries).
    pub total_attempts: u32,
    /// Units held: 1, a weight, units for declared memory, or every unit when exclusive.
    pub units: usize,
    /// Whether the permit holds every unit.
    pub exclusive: bool,
    /// Permits per GPU in force, N.
    pub per_gpu: usize,
    /// GPUs the permits span.
    pub gpus: usize,
    /// Whether the permit was made exclusive because the test is a retry
    /// (`GPU_TEST_PERMIT_RETRY=alone`).
    pub alone: bool,
    /// How long the request waited for its permit, microseconds (0 in records written before
    /// waits were kept).
    pub waited_us: u64,
    /// Where the units were learned (`GPU_TEST_PERMIT_WEIGHTS=learned`: the test declared
    /// nothing), the most GPU memory the test was measured to use in earlier runs, bytes,
    /// which its units (with the margin) cover.
    pub learned: Option<u64>,
}

impl GrantRecord {
    /// The units the permit kept from others: every unit of every GPU when exclusive.
    pub fn units_taken(&self) -> usize {
        if self.exclusive {
            self.per_gpu.saturating_mul(self.gpus).max(self.units)
        } else {
            self.units
        }
    }
}

/// A permit returned.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseRecord {
    /// The run id.
    pub run: String,
    /// When it was returned, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The process that held it.
    pub pid: u32,
    /// The permit's number within its process, as in its [`GrantRecord`].
    pub hold: u64,
    /// How the test stood when it returned the permit.
    pub outcome: Outcome,
    /// The most GPU memory its fixture measured it to use, bytes, where the fixture could
    /// measure it.
    pub memory_used: Option<u64>,
}

/// The N that `REALIZAR_GPU_TEST_CONCURRENCY=auto` chose for a run, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChoiceRecord {
    /// The run id.
    pub run: String,
    /// When it was chosen, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The process that chose it.
    pub pid: u32,
    /// Permits per GPU chosen.
    pub per_gpu: usize,
    /// GPUs the permits span.
    pub gpus: usize,
    /// The GPUs and driver the choice was made for, as the probe saw them ("" where the
    /// crate was built without a backend or the probe found no device).
    pub gpu: String,
    /// Why, in one line.
    pub why: String,
}

/// GPU drivers a test process loaded, and whether it held a permit then (see
/// [`drivers`](crate::__private::drivers)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriversRecord {
    /// The run id.
    pub run: String,
    /// When it was written, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The test's process.
    pub pid: u32,
    /// The test binary.
    pub binary: String,
    /// The test's name.
    pub test: String,
    /// The attempt (1 for the first).
    pub attempt: u32,
    /// The GPU driver libraries seen: every one the process (and, watched, each process it
    /// started) loaded as it ran where it was watched, the ones it had mapped where it looked
    /// at itself; in either case not those in `linked`.
    pub drivers: Vec<String>,
    /// Those it loaded while it held no permit.
    pub unpermitted: Vec<String>,
    /// Whether it loaded one before its first permit, or held none at all.
    pub before_first_permit: bool,
    /// Whether the process held a permit at all.
    pub held: bool,
    /// How it was seen: `watched` (the loader's log, every load) or `mapped` (the process
    /// looked at what it had mapped at its first permit or as it exited).
    pub seen: String,
    /// The GPU driver libraries its program was linked to at build time (mapped before its
    /// first instruction, or its executable's dependencies): not in `drivers`, never an
    /// escape (see [`drivers`](crate::__private::drivers)).
    pub linked: Vec<String>,
    /// Whether a process the test started (a tool or helper it runs), not the test's own,
    /// loaded one of `unpermitted` (watched only).
    pub started_process: bool,
}

/// A watched test process whose process failed after or around its tests
/// (`gpu-test-permit watch`, see `gpu_test_permit_cli::verdict`): a teardown fault (every
/// test had its result, then the process crashed, exited non-zero or hung at exit), or a crash
/// while tests ran.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerdictRecord {
    /// The run id.
    pub run: String,
    /// When it was written, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The test's process.
    pub pid: u32,
    /// The test binary.
    pub binary: String,
    /// The test's name.
    pub test: String,
    /// The attempt (1 for the first).
    pub attempt: u32,
    /// `teardown` (crashed or exited non-zero after every result), `hang` (hung at exit and
    /// was ended) or `crash` (died while tests ran).
    pub fault: String,
    /// How the process ended: a signal's name (`SIGSEGV`), `exit code 3`.
    pub ended: String,
    /// Whether the watch failed the test for it (`GPU_TEST_PERMIT_TEARDOWN=fail`, or a crash).
    pub failed: bool,
    /// The line the watch said.
    pub said: String,
}

impl DriversRecord {
    /// Whether the process reached a GPU driver without a permit.
    #[cfg(any(test, feature = "__cli"))]
    pub fn escaped(&self) -> bool {
        !self.unpermitted.is_empty()
    }
}

/// How a test stood when its permit was returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Returned in the ordinary way: the test had not failed by then.
    Passed,
    /// Returned while the thread was panicking: the test failed.
    Panicked,
    /// `gpu-test-permit run`'s command exited with this code.
    Exited(i32),
    /// `gpu-test-permit run`'s command was ended by this signal.
    Signal(i32),
}

impl Outcome {
    /// Whether the test failed by the time the permit was returned.
    pub fn failed(self) -> bool {
        !matches!(self, Outcome::Passed | Outcome::Exited(0))
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Passed => f.write_str("passed"),
            Outcome::Panicked => f.write_str("panicked"),
            Outcome::Exited(code) => write!(f, "exited with {code}"),
            Outcome::Signal(sig) => write!(f, "ended by signal {sig}"),
        }
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// What this version writes for [`known`], byte for byte (as the serde-derived code of
    /// earlier versions wrote it); and what it must read.
    const GOLDEN: &str = include_str!("../../tests/data/run-records/records");

    /// The records of [`GOLDEN`]: every kind, every outcome, optional fields present and absent.
    fn known() -> Vec<RunRecord> {
        vec![
            RunRecord::Skip(SkipRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_000,
                pid: 4242,
                binary: "suite::gpu".into(),
                test: "draws \"quoted\" \u{e9}\ttab".into(),
                attempt: 1,
                backend: "cuda".into(),
                reason: "no CUDA device: the driver reports none\n(second line)".into(),
            }),
            RunRecord::Grant(GrantRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_100,
                pid: 4242,
                hold: 1,
                binary: "suite::gpu".into(),
                test: "heavy".into(),
                attempt: 2,
                total_attempts: 3,
                units: 2,
                exclusive: false,
                per_gpu: 4,
                gpus: 2,
                alone: true,
                waited_us: 1500,
                learned: Some(8 << 30),
            }),
            RunRecord::Grant(GrantRecord {
                run: "run-1".into(),
                unix_us: 18_446_744_073_709_551_615,
                pid: 4243,
                hold: 18_446_744_073_709_551_615,
                binary: "suite::gpu".into(),
                test: "light".into(),
                attempt: 1,
                total_attempts: 1,
                units: 8,
                exclusive: true,
                per_gpu: 4,
                gpus: 2,
                alone: false,
                waited_us: 0,
                learned: None,
            }),
            RunRecord::Release(ReleaseRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_200,
                pid: 4242,
                hold: 1,
                outcome: Outcome::Passed,
                memory_used: Some(123_456_789),
            }),
            RunRecord::Release(ReleaseRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_300,
                pid: 4243,
                hold: 2,
                outcome: Outcome::Panicked,
                memory_used: None,
            }),
            RunRecord::Release(ReleaseRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_400,
                pid: 4244,
                hold: 3,
                outcome: Outcome::Exited(-3),
                memory_used: None,
            }),
            RunRecord::Release(ReleaseRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_500,
                pid: 4245,
                hold: 4,
                outcome: Outcome::Signal(9),
                memory_used: None,
            }),
            RunRecord::Choice(ChoiceRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_050,
                pid: 4242,
                per_gpu: 3,
                gpus: 1,
                gpu: "NVIDIA GB10 (CUDA 12.8)".into(),
                why: "N = 3: 2 runs at 3 kept the GPU 98% busy".into(),
            }),
            RunRecord::Drivers(DriversRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_600,
                pid: 4246,
                binary: "suite::gpu".into(),
                test: "escapes".into(),
                attempt: 1,
                drivers: vec![
                    "/usr/lib/libcuda.so.1".into(),
                    "/usr/lib/libvulkan_lvp.so".into(),
                ],
                unpermitted: vec!["/usr/lib/libvulkan_lvp.so".into()],
                before_first_permit: true,
                held: true,
                seen: "watched".into(),
                linked: vec!["/usr/lib/libOpenCL.so.1".into()],
                started_process: true,
            }),
            RunRecord::Verdict(VerdictRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_800,
                pid: 4248,
                binary: "suite::gpu".into(),
                test: "matmul".into(),
                attempt: 1,
                fault: "teardown".into(),
                ended: "SIGSEGV".into(),
                failed: false,
                said: "teardown fault: `gpu` died by SIGSEGV after all 1 of its tests had their \
                       results"
                    .into(),
            }),
            RunRecord::Drivers(DriversRecord {
                run: "run-1".into(),
                unix_us: 1_764_300_000_000_700,
                pid: 4247,
                binary: "suite::gpu".into(),
                test: "clean".into(),
                attempt: 1,
                drivers: vec![],
                unpermitted: vec![],
                before_first_permit: false,
                held: false,
                seen: "mapped".into(),
                linked: vec![],
                started_process: false,
            }),
        ]
    }

    #[test]
    fn the_golden_file_reads_and_writes_byte_for_byte() {
        crate::json::check_golden(GOLDEN, &known());
    }

    /// Records of earlier versions, which lack the fields added since, and fields in another
    /// order, with unknown ones: read as the defaults.
    #[test]
    fn records_of_earlier_versions_read_with_defaults() {
        let grant = RunRecord::from_text(
            r#"{"run":"r","kind":"grant","unix_us":5,"pid":1,"hold":2,"binary":"b","test":"t","attempt":1,"total_attempts":1,"units":1,"exclusive":false,"per_gpu":2,"gpus":1,"new_field":[1]}"#,
        )
        .unwrap();
        let RunRecord::Grant(g) = grant else {
            panic!("{grant:?}")
        };
        assert_eq!((g.alone, g.waited_us, g.learned), (false, 0, None));
        let drivers = RunRecord::from_text(
            r#"{"kind":"drivers","run":"r","unix_us":5,"pid":1,"binary":"b","test":"t","attempt":1,"drivers":["d"],"unpermitted":[],"before_first_permit":false,"held":true,"seen":"mapped"}"#,
        )
        .unwrap();
        let RunRecord::Drivers(d) = drivers else {
            panic!("{drivers:?}")
        };
        assert_eq!((d.linked, d.started_process), (vec![], false));
        for (bad, why) in [
            (r#"{"kind":"hold","run":"r"}"#, "unknown variant `hold`"),
            (r#"{"run":"r"}"#, "missing field `kind`"),
            (
                r#"{"kind":"release","run":"r","unix_us":0,"pid":1,"hold":1,"outcome":{"exited":"x"}}"#,
                "field `outcome`",
            ),
            (
                r#"{"kind":"skip","run":"r","unix_us":-1}"#,
                "field `unix_us`",
            ),
        ] {
            let e = RunRecord::from_text(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
