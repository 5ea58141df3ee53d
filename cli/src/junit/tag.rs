//! Tags: counts patched in place; `<skipped>`, `<properties>` and `<system-err>` written.

use std::ops::Range;

use super::walk::parse_count;
use super::{JunitErrorKind, Skip, VERDICT_PROPERTY, Verdict};

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

/// The indent one step further in than `indent`: a tab where it has tabs, else four spaces.
pub(super) fn indent_step(indent: &str) -> &'static str {
    if indent.contains('\t') { "\t" } else { "    " }
}

/// `indent` one step further in.
pub(super) fn inner_indent(indent: &str) -> String {
    format!("{indent}{}", indent_step(indent))
}

/// A line break and `indent`, where elements are on lines of their own; else nothing.
pub(super) fn line_break(indent: Option<&str>) -> String {
    match indent {
        Some(i) => format!("\n{i}"),
        None => String::new(),
    }
}

/// Self-closing tag `tag` of element `name` opened, with `content` and its end tag after it.
pub(super) fn close_empty(
    tag: &[u8],
    name: &str,
    content: &str,
) -> Result<Vec<u8>, JunitErrorKind> {
    let open = tag.strip_suffix(b"/>").ok_or(JunitErrorKind::Changed)?;
    let mut out = Vec::with_capacity(tag.len() + content.len() + name.len() + 4);
    out.extend_from_slice(open);
    out.push(b'>');
    out.extend_from_slice(content.as_bytes());
    out.extend_from_slice(format!("</{name}>").as_bytes());
    Ok(out)
}

/// The `<skipped>` of `skip`.
pub(super) fn skipped(skip: &Skip) -> String {
    format!(
        "<skipped message=\"{}\"/>",
        escape_attribute(&skip.message())
    )
}

/// The `<property>` of verdict `v`.
pub(super) fn property(v: &Verdict) -> String {
    format!(
        "<property name=\"{VERDICT_PROPERTY}\" value=\"{}\"/>",
        escape_attribute(&v.value())
    )
}

/// The `<property>` of each of `verdicts`, each after a line break and `indent`.
pub(super) fn property_lines<'v>(
    indent: Option<&str>,
    verdicts: impl Iterator<Item = &'v Verdict>,
) -> String {
    let mut out = String::new();
    for v in verdicts {
        out.push_str(&line_break(indent));
        out.push_str(&property(v));
    }
    out
}

/// `<properties>` (at `indent`) with the `<property>` of each of `verdicts`.
pub(super) fn properties<'v>(
    indent: Option<&str>,
    verdicts: impl Iterator<Item = &'v Verdict>,
) -> String {
    let inner = indent.map(inner_indent);
    format!(
        "<properties>{}{}</properties>",
        property_lines(inner.as_deref(), verdicts),
        line_break(indent)
    )
}

/// The lines `verdicts` add to a `<system-err>`: `gpu-test-permit: <said>` each, escaped,
/// one a line (no line break after the last).
pub(super) fn system_err_lines<'v>(verdicts: impl Iterator<Item = &'v Verdict>) -> String {
    let mut out = String::new();
    for v in verdicts {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("gpu-test-permit: ");
        out.push_str(&escape_text(&v.said));
    }
    out
}

/// A `<system-err>` of `lines` (escaped already).
pub(super) fn system_err(lines: &str) -> String {
    format!("<system-err>{lines}</system-err>")
}

/// How the text of a `<system-err>` ends so far, as read from its raw bytes: whether a line
/// appended to it needs a line break first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tail {
    /// No text yet.
    Empty,
    /// A line break.
    Newline,
    /// Anything else.
    Other,
}

impl Tail {
    /// After text `raw`.
    pub(super) fn text(&mut self, raw: &[u8]) {
        if let Some(&last) = raw.last() {
            *self = if last == b'\n' {
                Tail::Newline
            } else {
                Tail::Other
            };
        }
    }

    /// After CDATA section `raw` (`<![CDATA[...]]>`).
    pub(super) fn cdata(&mut self, raw: &[u8]) {
        if let Some(inner) = raw
            .strip_prefix(b"<![CDATA[")
            .and_then(|r| r.strip_suffix(b"]]>"))
        {
            self.text(inner);
        }
    }

    /// After entity or character reference `raw` (`&lt;`, `&#10;`).
    pub(super) fn reference(&mut self, raw: &[u8]) {
        let name = raw
            .strip_prefix(b"&")
            .and_then(|r| r.strip_suffix(b";"))
            .unwrap_or(raw);
        let text = String::from_utf8_lossy(name);
        let code = match text.strip_prefix("#x").or_else(|| text.strip_prefix("#X")) {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => text.strip_prefix('#').and_then(|d| d.parse().ok()),
        };
        *self = if code == Some(10) {
            Tail::Newline
        } else {
            Tail::Other
        };
    }

    /// What goes before a line appended: a line break after text that does not end with one.
    pub(super) fn separator(self) -> &'static str {
        match self {
            Tail::Other => "\n",
            Tail::Empty | Tail::Newline => "",
        }
    }
}

/// `text` as element content: markup escaped, a carriage return as a character reference (a
/// parser would make a line break of it), and characters XML cannot carry at all written as
/// Rust escapes (`\u{1b}`), as [`escape_attribute`] does.
pub(super) fn escape_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => out.push_str("&#13;"),
            '\t' | '\n' => out.push(c),
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
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
