//! The wire between a probe parent and its child: the request in [`PROBE_REQUEST_VAR`] (what
//! to probe, over which pipe, with which token) and the answer line on the child's standard
//! output (a marker, then a versioned JSON envelope). Both sides speak it; it knows neither.
//!
//! [`PROBE_REQUEST_VAR`]: crate::config::PROBE_REQUEST_VAR

use serde::{Deserialize, Serialize};

use super::outcome::ProbeOutcome;

/// Starts the answer line on the child's standard output. Drivers may print their own lines
/// there; only the last line with this prefix counts.
pub(super) const MARKER: &str = "GPU_TEST_PERMIT_PROBE_ANSWER:";
/// Version of the answer format, checked by the parent.
pub(super) const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
pub(super) struct Envelope {
    pub(super) v: u32,
    pub(super) answer: Answer,
}

#[derive(Serialize, Deserialize)]
pub(super) enum Answer {
    Probe { outcome: ProbeOutcome },
    Pong { pid: u32 },
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
    if words.next().is_some() || token.len() != 32 || !token.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    Some((kind, (dev.parse().ok()?, ino.parse().ok()?), token))
}

/// The last answer line, if one has been completed (ends in a newline).
pub(super) fn answer_line(stdout: &[u8]) -> Option<(&[u8], bool)> {
    let marker = MARKER.as_bytes();
    let at = stdout.windows(marker.len()).rposition(|w| w == marker)?;
    let rest = &stdout[at + marker.len()..];
    match rest.iter().position(|&b| b == b'\n') {
        Some(nl) => Some((&rest[..nl], true)),
        None => Some((rest, false)),
    }
}

pub(super) fn parse_answer(stdout: &[u8]) -> Result<Option<Answer>, String> {
    let Some((line, complete)) = answer_line(stdout) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(line);
    let shown: String = text.chars().take(120).collect();
    if !complete {
        return Err(format!("the answer was cut off: {shown:?}"));
    }
    let env: Envelope = serde_json::from_slice(line)
        .map_err(|e| format!("the answer is not valid JSON ({e}): {shown:?}"))?;
    if env.v != VERSION {
        return Err(format!(
            "the answer has format version {} but this build reads version {VERSION}",
            env.v
        ));
    }
    Ok(Some(env.answer))
}

#[cfg(test)]
mod tests {
    use super::*;

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
