//! Tags: counts patched in place, `<skipped>` written.

use std::ops::Range;

use super::walk::parse_count;
use super::{JunitErrorKind, Skip};

/// The attributes of start tag `tag` (`<name a="1" b='2'>`, or `.../>`), as the byte ranges
/// of each key and value (between the quotes). The tag has passed quick-xml's checks: a
/// malformed one only ends the list early.
pub(super) fn attribute_ranges(tag: &[u8]) -> Vec<(Range<usize>, Range<usize>)> {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let skip_ws = |i: &mut usize| {
        while tag.get(*i).is_some_and(ws) {
            *i += 1;
        }
    };
    let mut i = 1 + tag[1..]
        .iter()
        .position(|b| ws(b) || matches!(b, b'/' | b'>'))
        .unwrap_or(tag.len() - 1);
    let mut out = Vec::new();
    loop {
        skip_ws(&mut i);
        let key_start = i;
        while tag
            .get(i)
            .is_some_and(|b| !ws(b) && !matches!(b, b'=' | b'/' | b'>'))
        {
            i += 1;
        }
        let key = key_start..i;
        skip_ws(&mut i);
        if key.is_empty() || tag.get(i) != Some(&b'=') {
            return out;
        }
        i += 1;
        skip_ws(&mut i);
        let Some(&quote) = tag.get(i).filter(|q| matches!(q, b'"' | b'\'')) else {
            return out;
        };
        let value_start = i + 1;
        let Some(len) = tag[value_start..].iter().position(|b| *b == quote) else {
            return out;
        };
        out.push((key, value_start..value_start + len));
        i = value_start + len + 1;
    }
}

/// Start tag `tag` of a suite with its `skipped` count grown by `added` (the attribute
/// added after the others when absent). Only that count's bytes change.
pub(super) fn add_skipped(tag: &[u8], added: u64) -> Result<Vec<u8>, JunitErrorKind> {
    let attrs = attribute_ranges(tag);
    let name_end = 1 + tag[1..]
        .iter()
        .position(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'/' | b'>'))
        .unwrap_or(tag.len() - 1);
    let element = || String::from_utf8_lossy(&tag[1..name_end]).into_owned();
    let mut out = Vec::with_capacity(tag.len() + 16);
    match attrs.iter().find(|(k, _)| &tag[k.clone()] == b"skipped") {
        Some((_, v)) => {
            let raw = String::from_utf8_lossy(&tag[v.clone()]);
            let old = quick_xml::escape::unescape(&raw)
                .ok()
                .and_then(|text| parse_count(&text));
            let new =
                old.and_then(|n| n.checked_add(added))
                    .ok_or_else(|| JunitErrorKind::BadCount {
                        element: element(),
                        attribute: "skipped",
                        value: raw.to_string(),
                    })?;
            out.extend_from_slice(&tag[..v.start]);
            out.extend_from_slice(new.to_string().as_bytes());
            out.extend_from_slice(&tag[v.end..]);
        }
        None => {
            // After the last attribute's closing quote, or the name.
            let at = attrs.last().map_or(name_end, |(_, v)| v.end + 1);
            out.extend_from_slice(&tag[..at]);
            out.extend_from_slice(format!(" skipped=\"{added}\"").as_bytes());
            out.extend_from_slice(&tag[at..]);
        }
    }
    Ok(out)
}

/// Testcase start tag `tag` (element `name`; `empty` when self-closing) followed by its
/// `<skipped>` child for `skip`, on a line of its own when the testcase has an `indent`.
pub(super) fn mark(
    tag: &[u8],
    name: &str,
    empty: bool,
    indent: Option<&str>,
    skip: &Skip,
) -> Result<Vec<u8>, JunitErrorKind> {
    let skipped = format!(
        "<skipped message=\"{}\"/>",
        escape_attribute(&skip.message())
    );
    let (child, close) = match indent {
        Some(i) => {
            let step = if i.contains('\t') { "\t" } else { "    " };
            (format!("\n{i}{step}"), format!("\n{i}"))
        }
        None => (String::new(), String::new()),
    };
    let mut out = Vec::with_capacity(tag.len() + skipped.len() + 64);
    if empty {
        let open = tag.strip_suffix(b"/>").ok_or(JunitErrorKind::Changed)?;
        out.extend_from_slice(open);
        out.push(b'>');
        out.extend_from_slice(format!("{child}{skipped}{close}</{name}>").as_bytes());
    } else {
        out.extend_from_slice(tag);
        out.extend_from_slice(format!("{child}{skipped}").as_bytes());
    }
    Ok(out)
}

/// `text` as a double-quoted attribute value: markup and quotes escaped, line breaks and
/// tabs as character references (a parser would turn them into spaces), and characters XML
/// cannot carry at all written as Rust escapes (`\u{1b}`).
pub(super) fn escape_attribute(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}
