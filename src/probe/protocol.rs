//! The wire between a probe parent and its child: the request in [`PROBE_REQUEST_VAR`] (what
//! to probe, over which pipe, with which token) and the answer line on the child's standard
//! output (a marker, then a versioned JSON envelope). Both sides speak it; it knows neither.
//!
//! [`PROBE_REQUEST_VAR`]: crate::config::PROBE_REQUEST_VAR

use super::outcome::ProbeOutcome;
use crate::json::{self, Fields, Object, Record, Value};

/// Starts the answer line on the child's standard output. Drivers may print their own lines
/// there; only the last line with this prefix counts.
pub(super) const MARKER: &str = "GPU_TEST_PERMIT_PROBE_ANSWER:";
/// Version of the answer format, checked by the parent.
pub(super) const VERSION: u32 = 1;

/// The answer line's JSON: `{"v":1,"answer":{"Probe":{"outcome":{...}}}}`, or
/// `{"v":1,"answer":{"Pong":{"pid":N}}}` for a ping.
#[derive(Debug, PartialEq)]
pub(super) struct Envelope {
    pub(super) v: u32,
    pub(super) answer: Answer,
}

#[derive(Debug, PartialEq)]
pub(super) enum Answer {
    Probe { outcome: ProbeOutcome },
    Pong { pid: u32 },
}

impl json::Write for Envelope {
    fn write(&self, out: &mut String) {
        let answer = match &self.answer {
            Answer::Probe { outcome } => Object::new()
                .field(
                    "Probe",
                    json::Raw(Object::new().field("outcome", outcome).finish()),
                )
                .finish(),
            Answer::Pong { pid } => Object::new()
                .field("Pong", json::Raw(Object::new().field("pid", *pid).finish()))
                .finish(),
        };
        out.push_str(
            &Object::new()
                .field("v", self.v)
                .field("answer", json::Raw(answer))
                .finish(),
        );
    }
}

impl Envelope {
    /// The envelope's version, read before the rest: an answer of another version may differ
    /// in shape.
    fn version(v: &Value) -> Result<u32, String> {
        Fields::of(v, "probe answer")?.req("v")
    }
}

impl Record for Envelope {
    fn read_json(v: &Value) -> Result<Envelope, String> {
        let f = Fields::of(v, "probe answer")?;
        let answer = match f.value("answer")? {
            Value::Object(fields) if fields.len() == 1 => {
                let (kind, body) = &fields[0];
                match kind.as_str() {
                    "Probe" => Answer::Probe {
                        outcome: Fields::of(body, "probe answer")?.record("outcome")?,
                    },
                    "Pong" => Answer::Pong {
                        pid: Fields::of(body, "probe answer")?.req("pid")?,
                    },
                    other => {
                        return Err(format!(
                            "probe answer: unknown variant `{other}`, expected `Probe` or `Pong`"
                        ));
                    }
                }
            }
            other => {
                return Err(format!(
                    "probe answer: field `answer`: expected an object with one field, found {}",
                    other.kind()
                ));
            }
        };
        Ok(Envelope {
            v: f.req("v")?,
            answer,
        })
    }
}

/// The variable's value for a request of `kind` over `pipe`.
pub(super) fn request_value(kind: &str, pipe: (u64, u64), token: &str) -> String {
    format!("{kind} {}:{} {token}", pipe.0, pipe.1)
}

pub(super) fn parse_request(value: &str) -> Option<(&str, (u64, u64), &str)> {
    let mut words = value.split(' ');
    let kind = words.next()?;
    let (dev, ino) = words.next()?.split_once(':')?;
    let token = words.next()?;
    if words.next().is_some() || token.len() != 32 || !is_hex(token) {
        return None;
    }
    Some((kind, (dev.parse().ok()?, ino.parse().ok()?), token))
}

/// The last answer line, if one has been completed (ends in a newline).
pub(super) fn answer_line(stdout: &[u8]) -> Option<(&[u8], bool)> {
    let marker = MARKER.as_bytes();
    let at = last_position(stdout, marker)?;
    let rest = &stdout[at + marker.len()..];
    let mut nl = 0;
    while nl < rest.len() {
        if rest[nl] == b'\n' {
            return Some((&rest[..nl], true));
        }
        nl += 1;
    }
    Some((rest, false))
}

/// Whether `s` is made of hexadecimal digits only.
fn is_hex(s: &str) -> bool {
    for b in s.bytes() {
        if !b.is_ascii_hexdigit() {
            return false;
        }
    }
    true
}

/// Where the last whole `needle` (not empty) in `haystack` starts.
pub(super) fn last_position(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let mut end = haystack.len();
    while end >= needle.len() {
        if haystack[end - needle.len()..end] == *needle {
            return Some(end - needle.len());
        }
        end -= 1;
    }
    None
}

pub(super) fn parse_answer(stdout: &[u8]) -> Result<Option<Answer>, String> {
    let Some((line, complete)) = answer_line(stdout) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(line);
    let mut shown = String::new();
    for c in text.chars().take(120) {
        shown.push(c);
    }
    if !complete {
        return Err(format!("the answer was cut off: {shown:?}"));
    }
    let not_json =
        |e: &dyn std::fmt::Display| format!("the answer is not valid JSON ({e}): {shown:?}");
    let value = match json::parse_bytes(line) {
        Ok(value) => value,
        Err(e) => return Err(not_json(&e)),
    };
    let v = match Envelope::version(&value) {
        Ok(v) => v,
        Err(e) => return Err(not_json(&e)),
    };
    if v != VERSION {
        return Err(format!(
            "the answer has format version {v} but this build reads version {VERSION}"
        ));
    }
    match Envelope::read_json(&value) {
        Ok(envelope) => Ok(Some(envelope.answer)),
        Err(e) => Err(not_json(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer of another version is named as such, whatever its shape: its version is read
    /// before the rest.
    #[test]
    fn an_answer_of_another_version_is_named_by_its_version() {
        let line = format!(
            "{MARKER}{{\"v\":2,\"answer\":{{\"Probe\":{{\"outcome\":{{\"status\":\"new\"}}}}}}}}\n"
        );
        let e = parse_answer(line.as_bytes()).unwrap_err();
        assert!(e.contains("format version 2"), "{e}");
        let line = format!(
            "{MARKER}{{\"v\":1,\"answer\":{{\"Probe\":{{\"outcome\":{{\"status\":\"new\"}}}}}}}}\n"
        );
        let e = parse_answer(line.as_bytes()).unwrap_err();
        assert!(e.contains("unknown variant `new`"), "{e}");
    }

    #[test]
    fn only_well_formed_requests_are_considered() {
        let token = "00112233445566778899aabbccddeeff";
        assert_eq!(
            parse_request(&request_value("cuda", (7, 42), token)),
            Some(("cuda", (7, 42), token))
        );
        for bad in [
            "cuda",
            "ping",
            "",
            "cuda 7:42",
            "cuda 7:42 0011",
            "cuda 7-42 00112233445566778899aabbccddeeff",
            "cuda 7:x 00112233445566778899aabbccddeeff",
            "cuda 7:42 00112233445566778899aabbccddeefg",
            "cuda 7:42 00112233445566778899aabbccddeeff extra",
        ] {
            assert_eq!(parse_request(bad), None, "{bad:?}");
        }
    }
}
