//! The two passes over a report.
//!
//! [`plan`] walks the report once and decides which testcases (by their number in document
//! order) get `<skipped>`, and how many each suite (by its number) gains. [`rewrite`] walks it
//! again, copying the bytes read through unchanged ([`Tee`]) but for the start tags of the
//! suites that gain and of the marked testcases. Both keep a [`Document`] of where they are,
//! and check it the same way, so they number the suites and testcases alike.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufReader, Read, Write};

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

use super::error::{Failure, xml_failure};
use super::file::{Input, Tee};
use super::tag::{add_skipped, mark};
use super::{JunitErrorKind, Left, Marked, Skip};

/// The skips by (binary, test).
pub(super) struct SkipIndex<'a> {
    pub(super) by_key: HashMap<(&'a str, &'a str), usize>,
}

impl<'a> SkipIndex<'a> {
    pub(super) fn new(skips: &'a [Skip]) -> SkipIndex<'a> {
        let mut by_key = HashMap::with_capacity(skips.len());
        for (i, s) in skips.iter().enumerate() {
            // The first of a test's skips is its message.
            by_key
                .entry((s.binary.as_str(), s.test.as_str()))
                .or_insert(i);
        }
        SkipIndex { by_key }
    }

    pub(super) fn find(&self, binary: &str, test: &str) -> Option<usize> {
        self.by_key.get(&(binary, test)).copied()
    }
}

/// What the first pass decided.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// Marked testcases: (testcase number, skip), in document order.
    pub(super) marked: Vec<(u64, usize)>,
    /// Testcases marked, per suite number.
    pub(super) per_suite: Vec<u64>,
    /// Testcases marked in all.
    pub(super) total: u64,
    /// Per skip: marked, else why left, else unmatched (`None`).
    pub(super) fate: HashMap<usize, Result<(), Left>>,
}

impl Plan {
    pub(super) fn outcome(&self, skips: &[Skip]) -> Marked {
        let mut m = Marked {
            testcases: self.total,
            ..Marked::default()
        };
        for (i, s) in skips.iter().enumerate() {
            match self.fate.get(&i) {
                Some(Ok(())) => m.marked.push(s.clone()),
                Some(Err(why)) => m.left.push((s.clone(), *why)),
                // A duplicate of a skip listed before has the first's fate.
                None if skips[..i]
                    .iter()
                    .any(|p| p.binary == s.binary && p.test == s.test) => {}
                None => m.unmatched.push(s.clone()),
            }
        }
        m
    }
}

/// The testcase being read in the first pass.
#[derive(Debug)]
pub(super) struct Case {
    pub(super) number: u64,
    /// The element depth of its children.
    pub(super) child_depth: usize,
    pub(super) skip: Option<usize>,
    pub(super) failed: bool,
    pub(super) skipped: bool,
}

/// Where the walk is: the open elements, the suites, the testcase numbers.
#[derive(Debug, Default)]
pub(super) struct Document {
    /// Names of the open elements.
    pub(super) open: Vec<String>,
    pub(super) root_seen: bool,
    /// The open `<testsuite>`s, innermost last: number and name.
    pub(super) suites: Vec<(usize, Option<String>)>,
    pub(super) next_suite: usize,
    pub(super) next_case: u64,
}

/// The element an event is, as the walk sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Element {
    /// The `<testsuites>` root.
    Suites,
    /// A `<testsuite>`, by number (the root too, when it is one).
    Suite(usize),
    /// A `<testcase>`, by number.
    Case(u64),
    Other,
}

impl Document {
    /// Checks the root element `e`, at `at`.
    pub(super) fn root(&mut self, e: &BytesStart<'_>, at: u64) -> Result<(), Failure> {
        let name = e.local_name();
        if !matches!(name.as_ref(), "testsuites" | "testsuite") {
            return Err(Failure::at(
                JunitErrorKind::NotJunit {
                    root: Some(e.name().as_ref().to_string()),
                },
                at,
            ));
        }
        self.root_seen = true;
        Ok(())
    }

    /// Enters element `e` (a start tag; `empty` for a self-closing one), at `at`.
    pub(super) fn enter(
        &mut self,
        e: &BytesStart<'_>,
        empty: bool,
        at: u64,
    ) -> Result<Element, Failure> {
        let top = self.open.is_empty();
        if top {
            if self.root_seen {
                return Err(Failure::at(
                    JunitErrorKind::NotXml(format!(
                        "a second root element <{}> after the first ended",
                        e.name().as_ref()
                    )),
                    at,
                ));
            }
            self.root(e, at)?;
        }
        // Every attribute must parse (a duplicate or unquoted one is not XML).
        for a in e.attributes().with_checks(true) {
            if let Err(err) = a {
                return Err(Failure::at(
                    JunitErrorKind::NotXml(format!(
                        "bad attribute in <{}>: {err}",
                        e.name().as_ref()
                    )),
                    at,
                ));
            }
        }
        let kind = match e.local_name().as_ref() {
            "testsuites" | "testsuite" => {
                for attr in ["tests", "skipped"] {
                    count(e, attr, at)?;
                }
                if e.local_name().as_ref() == "testsuite" {
                    let n = self.next_suite;
                    self.next_suite += 1;
                    if !empty {
                        let name = attribute(e, "name", at)?;
                        self.suites.push((n, name));
                    }
                    Element::Suite(n)
                } else if top {
                    Element::Suites
                } else {
                    Element::Other
                }
            }
            "testcase" => {
                let n = self.next_case;
                self.next_case += 1;
                Element::Case(n)
            }
            _ => Element::Other,
        };
        if !empty {
            self.open.push(e.name().as_ref().to_string());
        }
        Ok(kind)
    }

    /// Leaves the innermost element (quick-xml has checked its end tag's name).
    pub(super) fn leave(&mut self) {
        if let Some(name) = self.open.pop()
            && local(&name) == "testsuite"
        {
            self.suites.pop();
        }
    }

    /// Checks an event that is not an element: outside the root only whitespace, comments,
    /// processing instructions, the declaration and a DOCTYPE.
    pub(super) fn outside(&self, event: &Event<'_>, at: u64) -> Result<(), Failure> {
        if !self.open.is_empty() {
            return Ok(());
        }
        let bad = match event {
            Event::Text(t) if !t.trim().is_empty() => "text",
            Event::CData(_) => "CDATA",
            Event::GeneralRef(_) => "an entity reference",
            _ => return Ok(()),
        };
        let place = if self.root_seen { "after" } else { "before" };
        Err(Failure::at(
            JunitErrorKind::NotXml(format!("{bad} {place} the root element")),
            at,
        ))
    }

    /// The failure at the end of the file, at byte `end`: an element left open, or no root.
    pub(super) fn at_eof(&self, end: u64) -> Failure {
        let kind = match self.open.last() {
            Some(name) => JunitErrorKind::Truncated {
                open: format!("<{name}>"),
            },
            None => JunitErrorKind::NotJunit { root: None },
        };
        Failure::at(kind, end)
    }

    /// Whether the document is complete.
    pub(super) fn complete(&self) -> bool {
        self.open.is_empty() && self.root_seen
    }
}

/// The local part of a qualified name.
pub(super) fn local(name: &str) -> &str {
    name.rsplit(':').next().unwrap_or(name)
}

/// One event of a walk: where it starts and ends, and what it is.
pub(super) struct Step {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) element: Option<(Element, bool)>,
}

/// Reads the next event and keeps `doc` up to date. Positions count from the file's start
/// (after `bom` bytes of byte order mark, which the reader does not count).
pub(super) fn step<'b, R: io::BufRead>(
    reader: &mut Reader<R>,
    buf: &'b mut Vec<u8>,
    doc: &mut Document,
    bom: u64,
) -> Result<(Event<'b>, Step), Failure> {
    buf.clear();
    let start = reader.buffer_position() + bom;
    let event = reader
        .read_event_into(buf)
        .map_err(|e| xml_failure(reader, bom, e))?;
    let end = reader.buffer_position() + bom;
    let element = match &event {
        Event::Start(e) => Some((doc.enter(e, false, start)?, false)),
        Event::Empty(e) => Some((doc.enter(e, true, start)?, true)),
        Event::End(_) => {
            doc.leave();
            None
        }
        Event::Eof if doc.complete() => None,
        Event::Eof => return Err(doc.at_eof(end)),
        other => {
            doc.outside(other, start)?;
            None
        }
    };
    Ok((
        event,
        Step {
            start,
            end,
            element,
        },
    ))
}

/// The first pass: what to mark.
pub(super) fn plan<R: Read>(input: Input<R>, skips: &SkipIndex<'_>) -> Result<Plan, Failure> {
    let mut reader = Reader::from_reader(BufReader::with_capacity(1 << 16, input.rest));
    let mut buf = Vec::new();
    let mut doc = Document::default();
    let mut plan = Plan::default();
    let mut case: Option<Case> = None;
    loop {
        let depth = doc.open.len();
        let (event, step) = step(&mut reader, &mut buf, &mut doc, input.bom)?;
        match (&event, step.element) {
            (Event::Eof, _) => break,
            (Event::End(_), _) => {
                if let Some(c) = case.take_if(|c| c.child_depth == depth) {
                    decide(&mut plan, &doc, c);
                }
            }
            (Event::Start(e) | Event::Empty(e), Some((Element::Case(number), empty)))
                if case.is_none() =>
            {
                // A testcase's binary is its classname, else its suite's name.
                let binary = match attribute(e, "classname", step.start)? {
                    Some(c) => Some(c),
                    None => doc.suites.last().and_then(|(_, name)| name.clone()),
                };
                let test = attribute(e, "name", step.start)?;
                let c = Case {
                    number,
                    child_depth: depth + 1,
                    skip: binary.zip(test).and_then(|(b, t)| skips.find(&b, &t)),
                    failed: false,
                    skipped: false,
                };
                if empty {
                    decide(&mut plan, &doc, c);
                } else {
                    case = Some(c);
                }
            }
            (Event::Start(e) | Event::Empty(e), _) => {
                if let Some(c) = case.as_mut().filter(|c| c.child_depth == depth) {
                    match e.local_name().as_ref() {
                        "failure" | "error" => c.failed = true,
                        "skipped" => c.skipped = true,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(plan)
}

/// Records what becomes of testcase `c`, now that its children are known.
pub(super) fn decide(plan: &mut Plan, doc: &Document, c: Case) {
    let Some(skip) = c.skip else { return };
    let fate = if c.failed {
        Err(Left::Failed)
    } else if c.skipped {
        Err(Left::AlreadySkipped)
    } else {
        plan.marked.push((c.number, skip));
        plan.total += 1;
        if let Some(&(s, _)) = doc.suites.last() {
            if plan.per_suite.len() <= s {
                plan.per_suite.resize(s + 1, 0);
            }
            plan.per_suite[s] += 1;
        }
        Ok(())
    };
    // Marked once is marked; else the first reason stands.
    let entry = plan.fate.entry(skip).or_insert(fate);
    if fate.is_ok() {
        *entry = Ok(());
    }
}

/// The second pass: copies the report to `out` with the changes `plan` decided.
pub(super) fn rewrite<R: Read, W: Write>(
    input: Input<R>,
    out: &mut W,
    plan: &Plan,
    skips: &[Skip],
) -> Result<(), Failure> {
    out.write_all(&input.bom_bytes).map_err(Failure::write)?;
    let tee = Tee {
        inner: input.rest,
        seen: Vec::new(),
        base: input.bom,
    };
    let mut reader = Reader::from_reader(BufReader::with_capacity(1 << 16, tee));
    let mut buf = Vec::new();
    let mut doc = Document::default();
    let mut copied = input.bom;
    let mut marks = plan.marked.iter().peekable();
    let mut total = 0;
    // The whitespace before the current tag, after its last line break: its indent.
    let mut indent: Option<String> = None;
    loop {
        let (event, step) = step(&mut reader, &mut buf, &mut doc, input.bom)?;
        let tee = reader.get_mut().get_mut();
        let replacement = match (&event, step.element) {
            (Event::Eof, _) => break,
            (Event::Text(t), _) => {
                indent = t.rfind('\n').map(|i| t[i + 1..].to_string());
                if indent.as_ref().is_some_and(|s| !s.trim().is_empty()) {
                    indent = None;
                }
                None
            }
            (Event::Start(_) | Event::Empty(_), Some((Element::Suites, _))) if plan.total > 0 => {
                Some(add_skipped(tee.slice(step.start, step.end), plan.total))
            }
            (Event::Start(_) | Event::Empty(_), Some((Element::Suite(n), _))) => {
                match plan.per_suite.get(n).copied().unwrap_or(0) {
                    0 => None,
                    added => Some(add_skipped(tee.slice(step.start, step.end), added)),
                }
            }
            (Event::Start(e) | Event::Empty(e), Some((Element::Case(n), empty)))
                if marks.peek().is_some_and(|(m, _)| *m == n) =>
            {
                let (_, skip) = marks.next().expect("peeked");
                let skip = &skips[*skip];
                // The testcase must be the one the first pass saw.
                let name = attribute(e, "name", step.start)?;
                if name.as_deref() != Some(skip.test.as_str()) {
                    return Err(Failure::at(JunitErrorKind::Changed, step.start));
                }
                total += 1;
                let tag = tee.slice(step.start, step.end);
                Some(mark(tag, e.name().as_ref(), empty, indent.as_deref(), skip))
            }
            _ => None,
        };
        if !matches!(event, Event::Text(_)) {
            indent = None;
        }
        drop(event);
        let tee = reader.get_mut().get_mut();
        if let Some(bytes) = replacement {
            let bytes = bytes.map_err(|k| Failure::at(k, step.start))?;
            tee.copy(out, copied, step.start).map_err(Failure::write)?;
            out.write_all(&bytes).map_err(Failure::write)?;
            copied = step.end;
            tee.forget(copied);
        } else if step.end - copied >= 1 << 16 {
            tee.copy(out, copied, step.end).map_err(Failure::write)?;
            copied = step.end;
            tee.forget(copied);
        }
    }
    let end = reader.buffer_position() + input.bom;
    let tee = reader.get_mut().get_mut();
    tee.copy(out, copied, end).map_err(Failure::write)?;
    if total != plan.total || marks.next().is_some() {
        return Err(Failure::at(JunitErrorKind::Changed, end));
    }
    Ok(())
}

/// The value of attribute `name` of `e` (at byte `at`), entities resolved.
pub(super) fn attribute(
    e: &BytesStart<'_>,
    name: &str,
    at: u64,
) -> Result<Option<String>, Failure> {
    let bad = |err: &dyn fmt::Display| {
        Failure::at(
            JunitErrorKind::NotXml(format!("bad attribute in <{}>: {err}", e.name().as_ref())),
            at,
        )
    };
    for a in e.attributes().with_checks(false) {
        let a = a.map_err(|err| bad(&err))?;
        if a.key.as_ref() == name {
            let value = a
                .normalized_value(XmlVersion::Implicit1_0)
                .map_err(|err| bad(&err))?;
            return Ok(Some(value.into_owned()));
        }
    }
    Ok(None)
}

/// Count attribute `name` of suite `e` (at byte `at`), when present.
pub(super) fn count(
    e: &BytesStart<'_>,
    name: &'static str,
    at: u64,
) -> Result<Option<u64>, Failure> {
    let Some(value) = attribute(e, name, at)? else {
        return Ok(None);
    };
    match parse_count(&value) {
        Some(n) => Ok(Some(n)),
        None => Err(Failure::at(
            JunitErrorKind::BadCount {
                element: e.name().as_ref().to_string(),
                attribute: name,
                value,
            },
            at,
        )),
    }
}

/// A count: digits, with whitespace around them allowed.
pub(super) fn parse_count(value: &str) -> Option<u64> {
    let digits = value.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
