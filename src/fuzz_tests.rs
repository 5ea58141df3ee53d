//! Property tests over arbitrary bytes for the readers of files that another user or program
//! can write: the JSON parser, and the records, history lines and test lines read through it
//! (here), the ELF reader (`drivers::elf`), the `/proc/self/maps` line reader (`sys::linux`)
//! and the driver manifests (`icd`), in their modules' tests.
//!
//! No fuzzing crate: a seeded generator ([`Rng`], splitmix64) makes each case, from arbitrary
//! bytes or from a valid input mutated ([`mutate`]: bit flips, cuts, splices, huge numbers,
//! deep nesting), and [`run`] runs cases until a count or a wall-clock budget is spent, so that
//! CI's two cores pay about two seconds a reader. `GTP_FUZZ_ITERS` and `GTP_FUZZ_SECONDS` raise
//! both for a long local run; `GTP_FUZZ_SEED` sets the first case's seed. A failing case prints
//! its seed: `GTP_FUZZ_SEED=<seed> GTP_FUZZ_ITERS=1 cargo test <test>` replays it alone.
//!
//! Every input that once broke a reader is kept under `tests/data/fuzz/<reader>/` and read
//! again by each run ([`corpus`]).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::json::{self, Record, Value};

/// A small, fast, seeded generator (splitmix64): a case is its seed.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 where `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// True one time in `n`.
    pub(crate) fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One of `items`.
    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// One of `samples`.
    pub(crate) fn sample<'a>(&mut self, samples: &[&'a [u8]]) -> &'a [u8] {
        samples[self.below(samples.len())]
    }

    /// A length, mostly small: up to 16, 256 or 4096 bytes.
    pub(crate) fn len(&mut self) -> usize {
        match self.below(8) {
            0..=3 => self.below(17),
            4..=6 => self.below(257),
            _ => self.below(4097),
        }
    }

    /// Arbitrary bytes: uniformly random, or drawn from `alphabet` (a reader's own punctuation,
    /// so that the cases get past its first byte).
    pub(crate) fn bytes(&mut self, alphabet: &[u8]) -> Vec<u8> {
        let len = self.len();
        let from_alphabet = !alphabet.is_empty() && self.one_in(2);
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(if from_alphabet {
                *self.pick(alphabet)
            } else {
                self.next_u64() as u8
            });
        }
        out
    }

    /// An integer near a boundary: 0, 1, the largest of each width and its neighbours, a
    /// power of two, or any.
    pub(crate) fn edge_u64(&mut self) -> u64 {
        let (power, any) = (1 << self.below(64), self.next_u64());
        let base = *self.pick(&[
            0,
            1,
            0x7f,
            0xff,
            0x7fff,
            0xffff,
            0x7fff_ffff,
            0xffff_ffff,
            i64::MAX as u64,
            u64::MAX,
            power,
            any,
        ]);
        match self.below(4) {
            0 => base.wrapping_sub(1 + self.below(16) as u64),
            1 => base.wrapping_add(1 + self.below(16) as u64),
            _ => base,
        }
    }
}

/// How many cases a reader's test runs, and for how long at most.
struct Limits {
    iters: u64,
    time: Duration,
    seed: u64,
}

/// Whether `GTP_FUZZ_KEEP` asks the tests to write their kept inputs anew instead of checking
/// them (`GTP_FUZZ_KEEP=1 cargo test the_file_whose_string`).
pub(crate) fn keep() -> bool {
    std::env::var_os("GTP_FUZZ_KEEP").is_some()
}

/// [`Limits`] from the environment, over `default_iters` cases and two seconds.
fn limits(default_iters: u64) -> Limits {
    let var = |name: &str| -> Option<u64> {
        match std::env::var(name) {
            Ok(v) => v.trim().parse().ok(),
            Err(_) => None,
        }
    };
    let seed = match var("GTP_FUZZ_SEED") {
        Some(seed) => seed,
        None => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            now.as_nanos() as u64 ^ u64::from(std::process::id()) << 32
        }
    };
    Limits {
        iters: var("GTP_FUZZ_ITERS").unwrap_or(default_iters),
        time: Duration::from_secs(var("GTP_FUZZ_SECONDS").unwrap_or(2)),
        seed,
    }
}

/// Runs `case` on fresh seeds until `default_iters` cases (or `GTP_FUZZ_ITERS`) have run or
/// the wall-clock budget (`GTP_FUZZ_SECONDS`, two seconds) is spent. A case that panics is
/// named with its seed, and its panic goes on. Returns how many cases ran.
pub(crate) fn run(reader: &str, default_iters: u64, case: &mut dyn FnMut(&mut Rng)) -> u64 {
    let limits = limits(default_iters);
    let start = Instant::now();
    let mut seed = limits.seed;
    let mut ran = 0;
    while ran < limits.iters && (ran == 0 || start.elapsed() < limits.time) {
        let mut rng = Rng::new(seed);
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| case(&mut rng))) {
            eprintln!(
                "fuzz {reader}: case {ran} failed; replay it with GTP_FUZZ_SEED={seed} \
                 GTP_FUZZ_ITERS=1"
            );
            resume_unwind(panic);
        }
        ran += 1;
        seed = Rng::new(seed).next_u64();
    }
    ran
}

/// The inputs kept under `tests/data/fuzz/<reader>/`, by path: each once broke the reader or
/// nearly did.
pub(crate) fn corpus(reader: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/fuzz")
        .join(reader);
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return out;
    };
    for e in entries {
        let path = e.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            out.push((path, bytes));
        }
    }
    out.sort();
    out
}

/// Tokens that readers of text meet at their edges: huge and odd numbers, escapes, nesting.
const TEXT_TOKENS: &[&[u8]] = &[
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"1e999999999",
    b"-0",
    b"0.0000000000000000000000000000001e-400",
    b"\"\\ud800\"",
    b"\"\\udc00\\ud800\"",
    b"\\u0000",
    b"\xff\xfe",
    b"\xe2\x82",
    b"\n",
    b"\r\n",
    b"\0",
    b"null",
    b"[",
    b"]",
    b"{",
    b"}",
    b"\"",
    b",",
    b":",
    b" (deleted)",
    b"  ",
    b"\t",
];

/// `input` changed one to four times: a bit flipped, a byte set to an edge value, a cut, a
/// range removed or repeated, a splice of `others`, a token of [`TEXT_TOKENS`], an integer
/// written at a random place, nesting opened many times.
pub(crate) fn mutate(rng: &mut Rng, input: &[u8], others: &[&[u8]]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(10) {
            0 if len > 0 => {
                let at = rng.below(len);
                out[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                out[at] = *rng.pick(&[0, 0xff, 0x7f, 0x80, b'"', b'\\', b'\n', b'0', b'9']);
            }
            2 => out.truncate(rng.below(len + 1)),
            3 if len > 0 => {
                let from = rng.below(len);
                let to = from + rng.below(len - from + 1);
                out.drain(from..to);
            }
            4 if len > 0 => {
                let from = rng.below(len);
                let to = from + rng.below((len - from).min(64) + 1);
                let copy = out[from..to].to_vec();
                let at = rng.below(len + 1);
                out.splice(at..at, copy);
            }
            5 if !others.is_empty() => {
                let other = rng.sample(others);
                let from = rng.below(other.len() + 1);
                let to = from + rng.below(other.len() - from + 1);
                let at = rng.below(len + 1);
                out.splice(at..at, other[from..to].iter().copied());
            }
            6 => {
                let token = rng.sample(TEXT_TOKENS);
                let at = rng.below(len + 1);
                out.splice(at..at, token.iter().copied());
            }
            7 => {
                let number = rng.edge_u64().to_string().into_bytes();
                let at = rng.below(len + 1);
                let end = (at + rng.below(8)).min(len);
                out.splice(at..end, number);
            }
            8 => {
                let open = *rng.pick(&[&b"["[..], b"{\"a\":", b"[1,"]);
                let at = rng.below(len + 1);
                let times = *rng.pick(&[2, 127, 128, 129, 5000]);
                let mut nest = Vec::with_capacity(open.len() * times);
                for _ in 0..times {
                    nest.extend_from_slice(open);
                }
                out.splice(at..at, nest);
            }
            _ => {
                out.extend(rng.bytes(b"{}[]\",:0123456789.eE+-tfnul\\ \n"));
            }
        }
    }
    out
}

/// The lines of the sample files under `tests/data/<dir>/`, each a valid input.
fn sample_lines(dir: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(dir);
    let mut lines = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if !path.is_file() {
            continue;
        }
        for line in std::fs::read(&path).unwrap().split(|&b| b == b'\n') {
            if !line.is_empty() {
                lines.push(line.to_vec());
            }
        }
    }
    assert!(!lines.is_empty(), "no samples in {}", dir.display());
    lines
}

/// A case's input: arbitrary bytes one time in four; else one of `samples` mutated as bytes
/// ([`mutate`]), or, where it is JSON, as JSON ([`mutate_json`]: still JSON, with values that
/// a record does not expect).
fn input(rng: &mut Rng, samples: &[Vec<u8>]) -> Vec<u8> {
    if samples.is_empty() || rng.one_in(4) {
        return rng.bytes(b"{}[]\",:0123456789.eE+-tfnul\\ \n");
    }
    let sample = rng.pick(samples).clone();
    if rng.one_in(2)
        && let Ok(mut v) = json::parse_bytes(&sample)
    {
        for _ in 0..1 + rng.below(3) {
            mutate_json(rng, &mut v);
        }
        let mut out = String::new();
        write_value(&v, &mut out);
        return out.into_bytes();
    }
    let others: Vec<&[u8]> = samples.iter().map(Vec::as_slice).collect();
    mutate(rng, &sample, &others)
}

/// Changes one place of `v`: a value replaced by another of any kind ([`any_value`]), a field
/// removed, repeated or renamed, an item added.
fn mutate_json(rng: &mut Rng, v: &mut Value) {
    match v {
        Value::Object(fields) if !fields.is_empty() && !rng.one_in(4) => {
            let at = rng.below(fields.len());
            match rng.below(8) {
                0 => {
                    fields.remove(at);
                }
                1 => {
                    let copy = fields[at].clone();
                    fields.insert(rng.below(fields.len() + 1), copy);
                }
                2 => fields[at].0 = String::from_utf8_lossy(&rng.bytes(b"abv_")).into_owned(),
                _ => mutate_json(rng, &mut fields[at].1),
            }
        }
        Value::Array(items) if !items.is_empty() && !rng.one_in(4) => {
            let at = rng.below(items.len());
            if rng.one_in(4) {
                items.push(any_value(rng, 3));
            } else {
                mutate_json(rng, &mut items[at]);
            }
        }
        _ => *v = any_value(rng, 3),
    }
}

/// A value of any kind, nested at most `depth` deep: edge numbers, odd strings.
fn any_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth == 0 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => {
            let n = rng.edge_u64();
            Value::Number(match rng.below(6) {
                0 => format!("-{n}"),
                1 => format!("{n}.5"),
                2 => format!("{n}e{}", rng.edge_u64() % 1000),
                3 => format!("{n}0"),
                _ => n.to_string(),
            })
        }
        3 => Value::String(String::from_utf8_lossy(&rng.bytes(b"a\"\\\n\0")).into_owned()),
        4 => Value::String(
            (*rng.pick(&["", "cuda", "wgpu", "grant", "skip", "release", "\u{e9}\t"])).into(),
        ),
        5 => {
            let mut items = Vec::new();
            for _ in 0..rng.below(4) {
                items.push(any_value(rng, depth - 1));
            }
            Value::Array(items)
        }
        _ => {
            let mut fields = Vec::new();
            for _ in 0..rng.below(4) {
                let key = (*rng.pick(&["kind", "v", "run", "pid", "test", "us", "x"])).into();
                fields.push((key, any_value(rng, depth - 1)));
            }
            Value::Object(fields)
        }
    }
}

/// `v` written back as JSON (numbers as their text), to read again.
fn write_value(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(n),
        Value::String(s) => json::Write::write(s.as_str(), out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            out.push('{');
            for (i, (k, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json::Write::write(k.as_str(), out);
                out.push(':');
                write_value(item, out);
            }
            out.push('}');
        }
    }
}

/// How deeply `v`'s arrays and objects nest (a scalar: 0).
fn depth(v: &Value) -> usize {
    let mut deepest = 0;
    match v {
        Value::Array(items) => {
            for item in items {
                deepest = deepest.max(depth(item));
            }
        }
        Value::Object(fields) => {
            for (_, item) in fields {
                deepest = deepest.max(depth(item));
            }
        }
        _ => return 0,
    }
    deepest + 1
}

/// What [`json::parse_bytes`] must do with any input: answer without a panic; refuse what is
/// nested deeper than [`json::MAX_DEPTH`]; name a place within the input in an error; and
/// read back what it read, written again, as the same value. Every number it accepts reads
/// as each kind of number without a panic.
fn check_json(bytes: &[u8]) -> bool {
    match json::parse_bytes(bytes) {
        Err(e) => {
            assert!(e.at <= bytes.len(), "{e:?} of {} bytes", bytes.len());
            false
        }
        Ok(v) => {
            assert!(depth(&v) <= json::MAX_DEPTH, "nested {} deep", depth(&v));
            let mut again = String::new();
            write_value(&v, &mut again);
            assert!(again.len() <= bytes.len(), "{again:?} grew");
            assert_eq!(json::parse(&again).as_ref(), Ok(&v), "{again:?}");
            touch_numbers(&v);
            true
        }
    }
}

/// Asks each number of `v` for every kind of number.
fn touch_numbers(v: &Value) {
    match v {
        Value::Number(_) => {
            let _ = (v.as_u64(), v.as_i64(), v.as_f64());
        }
        Value::Array(items) => {
            for item in items {
                touch_numbers(item);
            }
        }
        Value::Object(fields) => {
            for (_, item) in fields {
                touch_numbers(item);
            }
        }
        _ => {}
    }
}

/// A sample of every file kind the crate reads through JSON, to mutate.
fn json_samples() -> Vec<Vec<u8>> {
    let mut samples = Vec::new();
    for dir in [
        "run-records",
        "history",
        "gpu0.tests",
        "casualties",
        "holder-record",
    ] {
        samples.append(&mut sample_lines(dir));
    }
    samples
}

#[test]
fn json_reads_any_bytes_without_a_panic_and_what_it_reads_writes_back() {
    for (path, bytes) in corpus("json") {
        eprintln!("replaying {}", path.display());
        check_json(&bytes);
    }
    let samples = json_samples();
    for s in &samples {
        check_json(s);
    }
    let mut read = 0;
    let ran = run("json", 20_000, &mut |rng| {
        read += u64::from(check_json(&input(rng, &samples)));
    });
    eprintln!("json: {ran} cases, {read} read as JSON");
}

#[test]
fn json_refuses_deep_nesting_at_once_and_without_recursing() {
    // Far past the limit: refused at the limit, not by running out of stack.
    for open in ["[", "{\"a\":", "[{\"b\":[", "[1,"] {
        let deep = open.repeat(1_000_000);
        let e = json::parse(&deep).unwrap_err();
        assert_eq!(e.what, "nested too deeply", "{open}");
        assert!(e.at <= json::MAX_DEPTH * open.len(), "{e:?}");
    }
    let just = format!(
        "{}{}",
        "[".repeat(json::MAX_DEPTH),
        "]".repeat(json::MAX_DEPTH)
    );
    assert!(json::parse(&just).is_ok());
    let past = format!("[{just}]");
    assert!(json::parse(&past).is_err());
}

#[test]
fn json_numbers_of_any_length_read_without_a_panic() {
    for n in [
        "1".repeat(100_000),
        format!("-{}", "9".repeat(100_000)),
        format!("0.{}e-99999999999999999999", "1".repeat(10_000)),
        format!("1e{}", "9".repeat(10_000)),
    ] {
        let v = json::parse(&n).unwrap();
        let _ = (v.as_u64(), v.as_i64(), v.as_f64());
    }
}

/// What a record reader must do with any input: answer without a panic, and for a record it
/// reads, write text that reads back as the same record.
fn check_record<T: Record + PartialEq + std::fmt::Debug>(bytes: &[u8]) -> bool {
    let Ok(record) = T::from_bytes(bytes) else {
        return false;
    };
    let text = record.to_text();
    match T::from_text(&text) {
        Ok(again) => assert_eq!(again, record, "{text}"),
        // A value that reads but cannot be written back as read (a float past f64's range
        // reads as infinity, which is written `null`) is not a round trip's failure.
        Err(e) => assert!(text.contains("null"), "{e}: {text}"),
    }
    true
}

#[test]
fn run_records_read_any_bytes_without_a_panic_and_round_trip() {
    let samples = sample_lines("run-records");
    for s in &samples {
        let r = crate::runs::RunRecord::from_bytes(s).unwrap();
        assert_eq!(crate::runs::RunRecord::from_text(&r.to_text()), Ok(r));
    }
    for (_, bytes) in corpus("run-record") {
        check_record::<crate::runs::RunRecord>(&bytes);
    }
    let mut read = 0;
    let ran = run("run-record", 20_000, &mut |rng| {
        read += u64::from(check_record::<crate::runs::RunRecord>(&input(
            rng, &samples,
        )));
    });
    eprintln!("run records: {ran} cases, {read} read as records");
}

#[test]
fn history_lines_read_any_text_without_a_panic_and_round_trip() {
    let samples = sample_lines("history");
    for s in &samples {
        let text = std::str::from_utf8(s).unwrap();
        crate::tune::HistoryEntry::from_json(text).unwrap();
    }
    let check = |bytes: &[u8]| -> bool {
        let text = String::from_utf8_lossy(bytes);
        match crate::tune::HistoryEntry::from_json(&text) {
            Ok(e) => check_record::<crate::tune::HistoryEntry>(e.to_text().as_bytes()),
            Err(_) => false,
        }
    };
    for (_, bytes) in corpus("history") {
        check(&bytes);
    }
    let mut read = 0;
    let ran = run("history", 20_000, &mut |rng| {
        read += u64::from(check(&input(rng, &samples)));
    });
    eprintln!("history: {ran} cases, {read} read as entries");
}

#[test]
fn test_lines_read_any_text_without_a_panic_and_count_each_line_once() {
    let samples = sample_lines("gpu0.tests");
    let check = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        let (lines, bad) = crate::host::tests_file::parse(&text);
        let mut written = 0;
        for l in text.lines() {
            if !l.trim().is_empty() {
                written += 1;
            }
        }
        assert!(
            lines.len() + bad <= written,
            "{} + {bad} of {written}",
            lines.len()
        );
        for line in &lines {
            let again = line.to_text();
            let (read, bad) = crate::host::tests_file::parse(&again);
            assert_eq!(
                (read.as_slice(), bad),
                (std::slice::from_ref(line), 0),
                "{again}"
            );
        }
    };
    let whole: Vec<u8> = samples.join(&b'\n');
    check(&whole);
    for (_, bytes) in corpus("tests-file") {
        check(&bytes);
    }
    let ran = run("tests-file", 10_000, &mut |rng| {
        // Whole files: several lines, some mutated.
        let mut file = Vec::new();
        for _ in 0..1 + rng.below(4) {
            file.extend(input(rng, &samples));
            file.push(b'\n');
        }
        check(&file);
    });
    eprintln!("tests file: {ran} cases");
}

#[test]
fn the_generator_is_seeded_and_the_mutations_stay_small() {
    let (mut a, mut b) = (Rng::new(7), Rng::new(7));
    for _ in 0..100 {
        assert_eq!(a.next_u64(), b.next_u64());
    }
    let mut rng = Rng::new(1);
    for _ in 0..1000 {
        let m = mutate(&mut rng, b"{\"a\":1}", &[b"[2]"]);
        // Each of at most four changes adds at most 5,000 nestings of 5 bytes.
        assert!(m.len() <= 7 + 4 * 25_000, "{}", m.len());
    }
}
