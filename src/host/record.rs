//! The records processes write into the directory's files: holders, waiters, and the
//! padded fixed-size format they share.

use std::fmt::Write;
use std::fs::File;

use crate::json::{self, FieldReader, Fields, OptField, OptText, Record, Text, Value, optional};
use crate::sys;

/// Size of a slot file's holder record.
pub(super) const RECORD_LEN: usize = 1024;
const NAME_LIMIT: usize = 300;

/// What a slot's holder writes about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderRecord {
    /// Process id.
    pub pid: u32,
    /// Test name, as far as it is known.
    pub test: String,
    /// The test binary, as run records name it (nextest's `NEXTEST_BINARY_ID`, else the
    /// executable's name without cargo's hash): with `test`, the key of the test's hold time
    /// on record, which backfilling reads. Records of earlier versions lack it.
    pub binary: Option<String>,
    /// Thread name (or id).
    pub thread: String,
    /// When the permit was granted (in a wait record: when the wait began), milliseconds since
    /// the Unix epoch: for people, as a date. Neither backfilling nor the queue's order reads
    /// it where the record has a boot-clock time of this boot (`since_boot_ms`), and nor do
    /// the ages `status` and the diagnoses show ([`age`](Self::age)): a wall clock can be
    /// stepped, skewed or faked apart from the others.
    pub since_unix_ms: u64,
    /// When the permit was granted (in a wait record: when the wait began), milliseconds of
    /// the host's boot clock (`CLOCK_BOOTTIME`), which every process of the host reads alike
    /// and no wall-clock step moves: what backfilling and the queue's order compare with
    /// their own reading. Records of earlier versions and records written where there is no
    /// boot clock lack it.
    pub since_boot_ms: Option<u64>,
    /// The boot that `since_boot_ms` counts from (Linux's `/proc/sys/kernel/random/boot_id`):
    /// a time of another boot (a record left from before a restart) tells nothing now.
    pub boot_id: Option<String>,
    /// Whether this is part of an exclusive permit.
    pub exclusive: bool,
    /// The holder's permits per GPU, N.
    pub concurrency: usize,
    /// Units of the permit (1; k for a weighted permit; all slots for an exclusive one).
    /// Records of earlier versions lack it: 1.
    pub units: usize,
    /// GPUs the permit spans: its `units` are spread evenly over them (1; k for a k-GPU
    /// permit; 1 for an exclusive one, which holds every GPU). Records of earlier versions
    /// lack it: 1.
    pub gpus: usize,
    /// GPU memory the permit's request declared, bytes.
    pub memory: Option<u64>,
}

/// A holder record (in a slot file, a wait file and the gate): `{"pid":..,"test":"..",
/// "binary":"..","thread":"..","since_unix_ms":..,"since_boot_ms":..,"boot_id":"..",
/// "exclusive":..,"concurrency":..,"units":..,"gpus":..,"memory":..}`; `binary`,
/// `since_boot_ms`, `boot_id` and `memory` only where known, `gpus` only where not 1.
/// Records of earlier versions lack `units` and `gpus`: 1. Unversioned.
impl json::Write for HolderRecord {
    fn write(&self, out: &mut String) {
        out.push_str(&self.text());
    }
}

impl HolderRecord {
    /// The record's text, formatted in one go (see [`Text`]) as
    /// [`Object`](crate::json::Object) would write it.
    fn text(&self) -> String {
        let gpus = if self.gpus != 1 {
            Some(self.gpus as u64)
        } else {
            None
        };
        format!(
            "{{\"pid\":{pid},\"test\":{test}{binary},\"thread\":{thread},\
             \"since_unix_ms\":{since_unix_ms}{since_boot_ms}{boot_id},\"exclusive\":{exclusive},\
             \"concurrency\":{concurrency},\"units\":{units}{gpus}{memory}}}",
            pid = self.pid,
            test = Text(&self.test),
            binary = OptText("binary", self.binary.as_deref()),
            thread = Text(&self.thread),
            since_unix_ms = self.since_unix_ms,
            since_boot_ms = OptField("since_boot_ms", optional(&self.since_boot_ms)),
            boot_id = OptText("boot_id", self.boot_id.as_deref()),
            exclusive = self.exclusive,
            concurrency = self.concurrency,
            units = self.units,
            gpus = OptField("gpus", optional(&gpus)),
            memory = OptField("memory", optional(&self.memory)),
        )
    }
}

impl Record for HolderRecord {
    fn to_text(&self) -> String {
        self.text()
    }

    fn read_json(v: &Value) -> Result<HolderRecord, String> {
        let f = Fields::of(v, "holder record")?;
        let mut r = FieldReader::new(f);
        let record = HolderRecord {
            pid: r.req("pid"),
            test: r.req("test"),
            binary: r.opt("binary"),
            thread: r.req("thread"),
            since_unix_ms: r.req("since_unix_ms"),
            since_boot_ms: r.opt("since_boot_ms"),
            boot_id: r.opt("boot_id"),
            exclusive: r.req("exclusive"),
            concurrency: r.req("concurrency"),
            units: r.or("units", 1),
            gpus: r.or("gpus", 1),
            memory: r.opt("memory"),
        };
        match r.error() {
            None => Ok(record),
            Some(e) => Err(e),
        }
    }
}

impl HolderRecord {
    /// How long ago the record's time was — the grant, in a slot's record; the start of the
    /// wait, in a wait file's or the gate's — as this process can tell: on the boot clock
    /// where the record has a time of this boot (`since_boot_ms`), else on the wall clock
    /// (`since_unix_ms`). `None` where that time cannot be told: one later than now (a wall
    /// clock ahead of this process's, a forged record), or one before this host booted (a
    /// wall clock behind by more than the host has been up). A wall clock behind by less
    /// cannot be seen: it reads as that much longer.
    pub fn age(&self) -> Option<std::time::Duration> {
        self.age_at(crate::clock::boot_now(), crate::clock::now_unix_ms())
    }

    /// [`age`](Self::age) with the boot clock reading `boot` (`None`: no boot clock) and the
    /// wall clock `wall_ms`.
    pub(crate) fn age_at(
        &self,
        boot: Option<crate::clock::BootTime>,
        wall_ms: u64,
    ) -> Option<std::time::Duration> {
        if let Some(now) = boot
            && let Some(at) = self.boot_ms_in(now)
        {
            return Some(std::time::Duration::from_millis(now.ms.checked_sub(at)?));
        }
        let ms = wall_ms.checked_sub(self.since_unix_ms)?;
        // A process that lives now began to wait or hold in this boot.
        if let Some(now) = boot
            && ms > now.ms
        {
            return None;
        }
        Some(std::time::Duration::from_millis(ms))
    }

    /// The record's time on the boot clock of `now`'s boot: its `since_boot_ms` where it was
    /// stamped in that boot; `None` where it has no boot-clock time (an earlier version's
    /// record, a host without a boot clock) or one of another boot.
    pub(crate) fn boot_ms_in(&self, now: crate::clock::BootTime) -> Option<u64> {
        if self.boot_id.as_deref() == now.boot_id {
            self.since_boot_ms
        } else {
            None
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut limit = NAME_LIMIT;
        // Names within the limit (as they almost always are) are written as they are.
        let binary = match &self.binary {
            Some(binary) => binary.len(),
            None => 0,
        };
        if self.test.len() <= limit && self.thread.len() <= limit && binary <= limit {
            let buf = self.to_text().into_bytes();
            if buf.len() < RECORD_LEN {
                return padded(buf, RECORD_LEN);
            }
        }
        let mut r = self.clone();
        loop {
            truncate(&mut r.test, limit);
            truncate(&mut r.thread, limit);
            if let Some(binary) = &mut r.binary {
                truncate(binary, limit);
            }
            let buf = r.to_text().into_bytes();
            // Escaping can make a name up to six times longer; shorten until it fits.
            if buf.len() < RECORD_LEN {
                return padded(buf, RECORD_LEN);
            }
            limit /= 2;
        }
    }

    pub(super) fn decode(raw: &[u8]) -> Result<Option<HolderRecord>, String> {
        let Some(text) = padded_text(raw)? else {
            return Ok(None);
        };
        let mut r = HolderRecord::from_text(text)?;
        // Another process wrote the names: keep them from moving a terminal's cursor or
        // starting a forged line wherever they are shown.
        r.test = escape_controls(&r.test);
        r.thread = escape_controls(&r.thread);
        if let Some(binary) = &r.binary {
            r.binary = Some(escape_controls(binary));
        }
        Ok(Some(r))
    }
}

/// `text` with control characters and bidirectional overrides escaped as Rust writes them
/// (`\r`, `\u{1b}`).
pub(crate) fn escape_controls(text: &str) -> String {
    let mut any = false;
    for c in text.chars() {
        if needs_escape(c) {
            any = true;
            break;
        }
    }
    if !any {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !needs_escape(c) {
            out.push(c);
            continue;
        }
        // What `char::escape_default` writes for the characters escaped here.
        match c {
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            _ => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    out
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A record as the directory's files keep it: `text`, a newline, then spaces up to `len` (a
/// fixed size, so that a rewrite covers the whole of the one before). [`padded_text`] reads it.
pub(super) fn padded(mut text: Vec<u8>, len: usize) -> Vec<u8> {
    // Spaces copied a block at a time: `resize` writes them one by one in the default dev
    // profile.
    text.push(b'\n');
    while text.len() < len {
        let n = (len - text.len()).min(SPACES.len());
        text.extend_from_slice(&SPACES[..n]);
    }
    text
}

/// A block of the padding [`padded`] writes.
const SPACES: [u8; 256] = [b' '; 256];
/// A block of a record never written.
const ZEROS: [u8; 256] = [0; 256];

/// The text of a padded record (blank or all padding: none).
pub(super) fn padded_text(raw: &[u8]) -> Result<Option<&str>, String> {
    let Ok(text) = std::str::from_utf8(raw) else {
        return Err("not UTF-8".to_string());
    };
    // The padding is ASCII: blocks of it, ever smaller, are cut from the end first, with the
    // standard library's compiled comparison (a loop costs some 15 instructions a byte in the
    // default dev profile); then what is left of it with a byte loop (the default dev profile
    // leaves a `char` pattern as calls a character); then what other whitespace is left.
    let padding = if raw.last() == Some(&0) {
        &ZEROS
    } else {
        &SPACES
    };
    let mut end = raw.len();
    let mut n = padding.len();
    while n > 0 {
        if end >= n && raw[end - n..end] == padding[..n] {
            end -= n;
        } else {
            n /= 2;
        }
    }
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < end && matches!(bytes[start], 0 | b' ' | b'\t'..=b'\r') {
        start += 1;
    }
    while end > start && matches!(bytes[end - 1], 0 | b' ' | b'\t'..=b'\r') {
        end -= 1;
    }
    let mut text = &text[start..end];
    while let Some(c) = text.chars().next()
        && is_padding(c)
    {
        text = &text[c.len_utf8()..];
    }
    while let Some(c) = text.chars().next_back()
        && is_padding(c)
    {
        text = &text[..text.len() - c.len_utf8()];
    }
    if text.is_empty() {
        Ok(None)
    } else {
        Ok(Some(text))
    }
}

/// Whether `c` pads a record: whitespace, or NUL.
fn is_padding(c: char) -> bool {
    c.is_whitespace() || c == '\0'
}

fn truncate(s: &mut String, limit: usize) {
    if s.len() > limit {
        let mut end = limit;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
}

pub(super) fn read_record(file: &File) -> Option<HolderRecord> {
    read_decoded(file)?.ok().flatten()
}

/// The holder record in slot file `file`, decoded: `None` where it cannot be read.
pub(super) fn read_decoded(file: &File) -> Option<Result<Option<HolderRecord>, String>> {
    let buf = read_start(file, RECORD_LEN)?;
    Some(HolderRecord::decode(&buf))
}

/// The first `len` bytes of `file` (fewer if it is shorter).
pub(super) fn read_start(file: &File, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = sys::read_at_start(file, &mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_is_trimmed_as_whitespace_and_nul_are_at_both_ends() {
        for (raw, want) in [
            (&b"  {\"a\":1}\n      "[..], Some("{\"a\":1}")),
            (b"\0\x0b\x0c\r\t x y \0\0\0", Some("x y")),
            ("\u{a0}\u{2028}x\u{85}\n  ".as_bytes(), Some("x")),
            (b"\n   \0 \t", None),
            (b"", None),
        ] {
            assert_eq!(padded_text(raw).unwrap(), want, "{raw:?}");
            let slow = std::str::from_utf8(raw)
                .unwrap()
                .trim_matches(|c: char| c.is_whitespace() || c == '\0');
            assert_eq!(want.unwrap_or(""), slow);
        }
        assert!(padded_text(b"\xff  ").is_err());
    }

    #[test]
    fn records_round_trip_and_are_padded() {
        let r = HolderRecord {
            pid: 7,
            test: "t".repeat(2000),
            binary: Some("b".repeat(2000)),
            thread: "main".into(),
            since_unix_ms: 5,
            since_boot_ms: Some(3),
            boot_id: Some("b".into()),
            exclusive: true,
            concurrency: 2,
            units: 2,
            gpus: 1,
            memory: None,
        };
        let enc = r.encode();
        assert_eq!(enc.len(), RECORD_LEN);
        let back = HolderRecord::decode(&enc).unwrap().unwrap();
        assert_eq!(back.pid, 7);
        assert!(back.test.len() <= NAME_LIMIT + '…'.len_utf8());
        assert!(back.binary.unwrap().len() <= NAME_LIMIT + '…'.len_utf8());
        assert_eq!(HolderRecord::decode(&[b' '; 64]).unwrap(), None);
        assert!(HolderRecord::decode(b"{not json").is_err());
        let forged = HolderRecord {
            test: "t\x1b[2J\r\nforged \u{202e}x".into(),
            ..r
        };
        let back = HolderRecord::decode(&forged.encode()).unwrap().unwrap();
        assert_eq!(back.test, "t\\u{1b}[2J\\r\\nforged \\u{202e}x");
        assert!(HolderRecord::decode(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn an_age_is_read_on_the_boot_clock_where_the_record_allows_and_is_never_invented() {
        use crate::clock::BootTime;
        use std::time::Duration;
        const WALL: u64 = 1_700_000_000_000;
        let boot = |ms| {
            Some(BootTime {
                ms,
                boot_id: Some("this"),
            })
        };
        let record = |unix: u64, at: Option<u64>, id: Option<&str>| {
            HolderRecord {
            since_unix_ms: unix,
            since_boot_ms: at,
            boot_id: id.map(str::to_string),
            ..HolderRecord::decode(
                br#"{"pid":7,"test":"t","thread":"main","since_unix_ms":0,"exclusive":false,"concurrency":2}"#,
            )
            .unwrap()
            .unwrap()
        }
        };
        let s = Duration::from_secs;
        let hour = 3_600_000;
        // Written an hour ahead and an hour behind by the wall clock, 5 s ago by the boot clock.
        for unix in [WALL + hour, WALL - hour, WALL] {
            let r = record(unix, Some(95_000_000), Some("this"));
            assert_eq!(r.age_at(boot(100_000_000), WALL), Some(s(5_000)), "{unix}");
        }
        // Later than now on the boot clock (a forged record, another time namespace): unknown.
        let r = record(WALL, Some(100_000_001), Some("this"));
        assert_eq!(r.age_at(boot(100_000_000), WALL), None);
        // No boot-clock time, or one of another boot: the wall clock...
        for (at, id) in [(None, None), (Some(95_000_000), Some("another"))] {
            let r = record(WALL - 5_000, at, id);
            assert_eq!(r.age_at(boot(100_000_000), WALL), Some(s(5)));
            // ... where it tells a time at all: not one later than now, nor one before the
            // host booted (100 000 s ago).
            let ahead = record(WALL + hour, at, id);
            assert_eq!(ahead.age_at(boot(100_000_000), WALL), None);
            let before_boot = record(WALL - 100_000_001, at, id);
            assert_eq!(before_boot.age_at(boot(100_000_000), WALL), None);
            let since_boot = record(WALL - 100_000_000, at, id);
            assert_eq!(since_boot.age_at(boot(100_000_000), WALL), Some(s(100_000)));
        }
        // No boot clock (macOS): the wall clock, never negative.
        let r = record(WALL - 5_000, Some(95_000_000), Some("this"));
        assert_eq!(r.age_at(None, WALL), Some(s(5)));
        assert_eq!(record(WALL + 1, None, None).age_at(None, WALL), None);
    }

    #[test]
    fn a_record_of_an_earlier_version_has_no_boot_clock_time() {
        let old = br#"{"pid":7,"test":"t","thread":"main","since_unix_ms":5,"exclusive":false,"concurrency":2}"#;
        let r = HolderRecord::decode(old).unwrap().unwrap();
        assert_eq!((r.since_boot_ms, r.boot_id.as_deref()), (None, None));
        assert_eq!(r.since_unix_ms, 5);
        // And one without them is written as an earlier version would.
        let text = String::from_utf8(r.encode()).unwrap();
        assert!(!text.contains("boot"), "{text}");
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// What this version writes for [`known`], byte for byte (as the serde-derived code of
    /// earlier versions wrote it); and what it must read.
    const GOLDEN: &str = include_str!("../../tests/data/holder-record/records");

    fn known() -> Vec<HolderRecord> {
        let a = HolderRecord {
            pid: 4242,
            test: "suite::gpu::draws \"x\" \u{e9}".into(),
            binary: Some("suite::gpu".into()),
            thread: "gpu::draws".into(),
            since_unix_ms: 1_764_300_000_000,
            since_boot_ms: Some(3_600_000),
            boot_id: Some("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into()),
            exclusive: false,
            concurrency: 4,
            units: 2,
            gpus: 2,
            memory: Some(8 << 30),
        };
        let b = HolderRecord {
            pid: 7,
            test: String::new(),
            binary: None,
            thread: "ThreadId(2)".into(),
            since_unix_ms: 5,
            since_boot_ms: None,
            boot_id: None,
            exclusive: true,
            concurrency: 1,
            units: 1,
            gpus: 1,
            memory: None,
        };
        vec![a, b]
    }

    #[test]
    fn the_golden_file_reads_and_writes_byte_for_byte() {
        crate::json::check_golden(GOLDEN, &known());
        // As a slot file keeps it: the line, padded.
        for (record, line) in known().iter().zip(GOLDEN.lines()) {
            let raw = record.encode();
            assert_eq!(raw.len(), RECORD_LEN);
            assert_eq!(padded_text(&raw).unwrap(), Some(line));
            assert_eq!(HolderRecord::decode(&raw).unwrap().as_ref(), Some(record));
        }
    }

    /// Records of earlier versions lack `units` and `gpus` (1 each), and the fields added
    /// since.
    #[test]
    fn records_of_earlier_versions_read_with_defaults() {
        let r = HolderRecord::from_text(
            r#"{"pid":7,"test":"t","thread":"main","since_unix_ms":5,"exclusive":false,"concurrency":2,"later":{}}"#,
        )
        .unwrap();
        assert_eq!((r.units, r.gpus, r.binary, r.memory), (1, 1, None, None));
        let e = HolderRecord::from_text(r#"{"pid":"7"}"#).unwrap_err();
        assert!(e.contains("holder record: field `pid`"), "{e}");
    }
}
