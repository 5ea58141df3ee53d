//! The two passes over a report.
//!
//! [`plan`] walks the report once and decides which testcases (by their number in document
//! order) get `<skipped>` or a verdict, and how many each suite (by its number) gains
//! skipped. [`rewrite`] walks it again, copying the bytes read through unchanged ([`Tee`])
//! but for the start tags of the suites that gain, and the tags of the marked testcases and
//! of the children that take a verdict (`<properties>`, `<system-err>`). Both keep a
//! [`Document`] of where they are, and check it the same way, so they number the suites and
//! testcases alike.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufReader, Read, Write};

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

use super::error::{Failure, xml_failure};
use super::file::{Input, Tee};
use super::tag::{
    Tail, add_skipped, close_empty, indent_step, inner_indent, line_break, properties, property,
    property_lines, skipped, system_err, system_err_lines,
};
use super::{JunitErrorKind, Left, Marked, Skip, VERDICT_PROPERTY, Verdict};

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

/// The verdicts by (binary, test): each test's verdicts (one per attempt that had one) are
/// a group, in the order given.
pub(super) struct VerdictIndex<'a> {
    by_key: HashMap<(&'a str, &'a str), usize>,
    /// Per group, its verdicts' indexes.
    pub(super) groups: Vec<Vec<usize>>,
    /// Per verdict, its group.
    pub(super) group_of: Vec<usize>,
}

impl<'a> VerdictIndex<'a> {
    pub(super) fn new(verdicts: &'a [Verdict]) -> VerdictIndex<'a> {
        let mut by_key = HashMap::with_capacity(verdicts.len());
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of = Vec::with_capacity(verdicts.len());
        for (i, v) in verdicts.iter().enumerate() {
            let g = *by_key
                .entry((v.binary.as_str(), v.test.as_str()))
                .or_insert(groups.len());
            if g == groups.len() {
                groups.push(Vec::new());
            }
            groups[g].push(i);
            group_of.push(g);
        }
        VerdictIndex {
            by_key,
            groups,
            group_of,
        }
    }

    pub(super) fn find(&self, binary: &str, test: &str) -> Option<usize> {
        self.by_key.get(&(binary, test)).copied()
    }
}

/// What to write into a report, indexed.
pub(super) struct Marks<'a> {
    pub(super) skips: &'a [Skip],
    pub(super) verdicts: &'a [Verdict],
    pub(super) skip_index: SkipIndex<'a>,
    pub(super) verdict_index: VerdictIndex<'a>,
}

impl<'a> Marks<'a> {
    pub(super) fn new(skips: &'a [Skip], verdicts: &'a [Verdict]) -> Marks<'a> {
        Marks {
            skips,
            verdicts,
            skip_index: SkipIndex::new(skips),
            verdict_index: VerdictIndex::new(verdicts),
        }
    }

    /// The verdicts of group `g`.
    fn group(&self, g: usize) -> impl Iterator<Item = &'a Verdict> + '_ {
        self.verdict_index.groups[g]
            .iter()
            .map(|&i| &self.verdicts[i])
    }

    /// The test a marked testcase is named for.
    fn test_of(&self, mark: &CaseMark) -> &'a str {
        match (mark.skip, mark.verdicts) {
            (Some(s), _) => &self.skips[s].test,
            (None, Some(g)) => &self.verdicts[self.verdict_index.groups[g][0]].test,
            (None, None) => "",
        }
    }
}

/// A testcase the second pass changes, and where its children are.
#[derive(Debug)]
pub(super) struct CaseMark {
    /// Its number in document order.
    pub(super) number: u64,
    /// The skip it is marked with.
    pub(super) skip: Option<usize>,
    /// The verdict group it is marked with.
    pub(super) verdicts: Option<usize>,
    /// Its first `<properties>` child, by its number among the testcase's children.
    pub(super) properties: Option<u32>,
    /// Its last `<system-err>` child, likewise.
    pub(super) system_err: Option<u32>,
}

/// What the first pass decided.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// Marked testcases, in document order.
    pub(super) marked: Vec<CaseMark>,
    /// Testcases marked skipped, per suite number.
    pub(super) per_suite: Vec<u64>,
    /// Testcases marked skipped in all.
    pub(super) total: u64,
    /// Testcases marked with a verdict.
    pub(super) with_verdict: u64,
    /// Per skip: marked, else why left, else unmatched (`None`).
    pub(super) fate: HashMap<usize, Result<(), Left>>,
    /// Per verdict group, likewise.
    pub(super) verdict_fate: HashMap<usize, Result<(), Left>>,
}

impl Plan {
    /// Whether the report is to change.
    pub(super) fn changes(&self) -> bool {
        !self.marked.is_empty()
    }

    pub(super) fn outcome(&self, marks: &Marks<'_>) -> Marked {
        let skips = marks.skips;
        let mut m = Marked {
            testcases: self.total,
            verdict_testcases: self.with_verdict,
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
        for (i, v) in marks.verdicts.iter().enumerate() {
            match self.verdict_fate.get(&marks.verdict_index.group_of[i]) {
                Some(Ok(())) => m.verdicts.push(v.clone()),
                Some(Err(why)) => m.verdicts_left.push((v.clone(), *why)),
                None => m.verdicts_unmatched.push(v.clone()),
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
    pub(super) verdicts: Option<usize>,
    pub(super) failed: bool,
    pub(super) skipped: bool,
    /// It has a `gpu-test-permit.verdict` property already.
    pub(super) has_verdict: bool,
    /// Its children so far.
    pub(super) children: u32,
    pub(super) properties: Option<u32>,
    pub(super) system_err: Option<u32>,
    /// Inside its first `<properties>` child.
    pub(super) in_properties: bool,
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
pub(super) fn plan<R: Read>(input: Input<R>, marks: &Marks<'_>) -> Result<Plan, Failure> {
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
                } else if let Some(c) = case.as_mut().filter(|c| c.child_depth + 1 == depth) {
                    c.in_properties = false;
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
                let (skip, verdicts) = match (&binary, &test) {
                    (Some(b), Some(t)) => {
                        (marks.skip_index.find(b, t), marks.verdict_index.find(b, t))
                    }
                    _ => (None, None),
                };
                let c = Case {
                    number,
                    child_depth: depth + 1,
                    skip,
                    verdicts,
                    failed: false,
                    skipped: false,
                    has_verdict: false,
                    children: 0,
                    properties: None,
                    system_err: None,
                    in_properties: false,
                };
                if empty {
                    decide(&mut plan, &doc, c);
                } else {
                    case = Some(c);
                }
            }
            (Event::Start(e) | Event::Empty(e), Some((_, empty))) => {
                let Some(c) = case.as_mut() else { continue };
                if c.child_depth == depth {
                    let child = c.children;
                    c.children += 1;
                    match e.local_name().as_ref() {
                        "failure" | "error" => c.failed = true,
                        "skipped" => c.skipped = true,
                        "properties" if c.properties.is_none() => {
                            c.properties = Some(child);
                            c.in_properties = !empty;
                        }
                        "system-err" => c.system_err = Some(child),
                        _ => {}
                    }
                } else if c.in_properties
                    && c.child_depth + 1 == depth
                    && e.local_name().as_ref() == "property"
                    && attribute(e, "name", step.start)?.as_deref() == Some(VERDICT_PROPERTY)
                {
                    c.has_verdict = true;
                }
            }
            _ => {}
        }
    }
    Ok(plan)
}

/// Records what becomes of testcase `c`, now that its children are known.
pub(super) fn decide(plan: &mut Plan, doc: &Document, c: Case) {
    let mut mark = CaseMark {
        number: c.number,
        skip: None,
        verdicts: None,
        properties: c.properties,
        system_err: c.system_err,
    };
    if let Some(skip) = c.skip {
        let fate = if c.failed {
            Err(Left::Failed)
        } else if c.skipped {
            Err(Left::AlreadySkipped)
        } else {
            mark.skip = Some(skip);
            plan.total += 1;
            if let Some(&(s, _)) = doc.suites.last() {
                if plan.per_suite.len() <= s {
                    plan.per_suite.resize(s + 1, 0);
                }
                plan.per_suite[s] += 1;
            }
            Ok(())
        };
        settle(&mut plan.fate, skip, fate);
    }
    if let Some(group) = c.verdicts {
        // Failed or passed, a testcase is marked: the marks change neither.
        let fate = if c.has_verdict {
            Err(Left::AlreadyMarked)
        } else {
            mark.verdicts = Some(group);
            plan.with_verdict += 1;
            Ok(())
        };
        settle(&mut plan.verdict_fate, group, fate);
    }
    if mark.skip.is_some() || mark.verdicts.is_some() {
        plan.marked.push(mark);
    }
}

/// Marked once is marked; else the first reason stands.
fn settle(fates: &mut HashMap<usize, Result<(), Left>>, key: usize, fate: Result<(), Left>) {
    let entry = fates.entry(key).or_insert(fate);
    if fate.is_ok() {
        *entry = Ok(());
    }
}

/// The marked testcase the second pass is inside.
struct Open<'p> {
    mark: &'p CaseMark,
    /// The element depth of its children.
    child_depth: usize,
    /// Its children so far.
    children: u32,
    /// Inside the `<properties>` child that takes the verdicts.
    in_properties: bool,
    /// Inside the `<system-err>` child that takes the verdicts: how its text ends so far.
    in_system_err: Option<Tail>,
}

/// The second pass: copies the report to `out` with the changes `plan` decided.
pub(super) fn rewrite<R: Read, W: Write>(
    input: Input<R>,
    out: &mut W,
    plan: &Plan,
    marks: &Marks<'_>,
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
    let mut pending = plan.marked.iter().peekable();
    let mut done = 0;
    let mut open: Option<Open<'_>> = None;
    // The whitespace before the current tag, after its last line break: its indent.
    let mut indent: Option<String> = None;
    loop {
        let depth = doc.open.len();
        let (event, step) = step(&mut reader, &mut buf, &mut doc, input.bom)?;
        let tee = reader.get_mut().get_mut();
        let raw = tee.slice(step.start, step.end);
        let replacement = match (&event, step.element) {
            (Event::Eof, _) => break,
            (Event::Text(t), _) => {
                indent = t.rfind('\n').map(|i| t[i + 1..].to_string());
                if indent.as_ref().is_some_and(|s| !s.trim().is_empty()) {
                    indent = None;
                }
                if let Some(tail) = open.as_mut().and_then(|o| o.in_system_err.as_mut()) {
                    tail.text(raw);
                }
                None
            }
            (Event::CData(_), _) => {
                if let Some(tail) = open.as_mut().and_then(|o| o.in_system_err.as_mut()) {
                    tail.cdata(raw);
                }
                None
            }
            (Event::GeneralRef(_), _) => {
                if let Some(tail) = open.as_mut().and_then(|o| o.in_system_err.as_mut()) {
                    tail.reference(raw);
                }
                None
            }
            (Event::Start(_) | Event::Empty(_), Some((Element::Suites, _))) if plan.total > 0 => {
                Some(add_skipped(raw, plan.total))
            }
            (Event::Start(_) | Event::Empty(_), Some((Element::Suite(n), _))) => {
                match plan.per_suite.get(n).copied().unwrap_or(0) {
                    0 => None,
                    added => Some(add_skipped(raw, added)),
                }
            }
            (Event::Start(e) | Event::Empty(e), Some((Element::Case(n), empty)))
                if open.is_none() && pending.peek().is_some_and(|m| m.number == n) =>
            {
                let mark = pending.next().expect("peeked");
                // The testcase must be the one the first pass saw.
                let name = attribute(e, "name", step.start)?;
                if name.as_deref() != Some(marks.test_of(mark)) {
                    return Err(Failure::at(JunitErrorKind::Changed, step.start));
                }
                done += 1;
                let element = e.name();
                let bytes = open_case(raw, element.as_ref(), empty, indent.as_deref(), mark, marks);
                if !empty {
                    open = Some(Open {
                        mark,
                        child_depth: depth + 1,
                        children: 0,
                        in_properties: false,
                        in_system_err: None,
                    });
                }
                Some(bytes)
            }
            (Event::Start(_) | Event::Empty(_), Some((_, empty))) => match open.as_mut() {
                Some(o) if o.child_depth == depth => {
                    let child = Some(o.children);
                    o.children += 1;
                    let ind = indent.as_deref();
                    if child == o.mark.properties {
                        if empty {
                            Some(fill_properties(raw, ind, o.mark, marks))
                        } else {
                            o.in_properties = true;
                            None
                        }
                    } else if child == o.mark.system_err && o.mark.verdicts.is_some() {
                        if empty {
                            let lines = system_err_lines(marks.group(o.mark.verdicts.unwrap()));
                            Some(close_empty(raw, "system-err", &lines))
                        } else {
                            o.in_system_err = Some(Tail::Empty);
                            None
                        }
                    } else {
                        None
                    }
                }
                _ => None,
            },
            (Event::End(_), _) => match open.as_mut() {
                // The end of a child of the testcase.
                Some(o) if o.child_depth + 1 == depth => {
                    let ind = indent.as_deref();
                    if std::mem::take(&mut o.in_properties) {
                        Some(end_properties(raw, ind, o.mark, marks))
                    } else if let Some(tail) = o.in_system_err.take() {
                        let lines = system_err_lines(marks.group(o.mark.verdicts.unwrap()));
                        let mut bytes = tail.separator().as_bytes().to_vec();
                        bytes.extend_from_slice(lines.as_bytes());
                        bytes.extend_from_slice(raw);
                        Some(Ok(bytes))
                    } else {
                        None
                    }
                }
                // The end of the testcase.
                Some(o) if o.child_depth == depth => {
                    let mark = o.mark;
                    open = None;
                    match mark.verdicts {
                        Some(g) if mark.system_err.is_none() => {
                            let lines = system_err_lines(marks.group(g));
                            let mut bytes = match indent.as_deref() {
                                Some(i) => format!(
                                    "{}{}{}",
                                    indent_step(i),
                                    system_err(&lines),
                                    line_break(Some(i))
                                ),
                                None => system_err(&lines),
                            }
                            .into_bytes();
                            bytes.extend_from_slice(raw);
                            Some(Ok(bytes))
                        }
                        _ => None,
                    }
                }
                _ => None,
            },
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
    if done != plan.marked.len() || pending.next().is_some() {
        return Err(Failure::at(JunitErrorKind::Changed, end));
    }
    Ok(())
}

/// Start tag `tag` of a marked testcase (element `name`, at `indent`) with what goes first
/// in it: `<properties>` with the verdicts and `<skipped>`, unless it has `<properties>`
/// already (they go there, and the skip after it). A self-closing testcase is opened and
/// closed around them, with its `<system-err>` last.
fn open_case(
    tag: &[u8],
    name: &str,
    empty: bool,
    indent: Option<&str>,
    mark: &CaseMark,
    marks: &Marks<'_>,
) -> Result<Vec<u8>, JunitErrorKind> {
    let children = indent.map(inner_indent);
    let children = children.as_deref();
    let mut first = String::new();
    if mark.properties.is_none() {
        if let Some(g) = mark.verdicts {
            first.push_str(&line_break(children));
            first.push_str(&properties(children, marks.group(g)));
        }
        if let Some(s) = mark.skip {
            first.push_str(&line_break(children));
            first.push_str(&skipped(&marks.skips[s]));
        }
    }
    if !empty {
        let mut out = tag.to_vec();
        out.extend_from_slice(first.as_bytes());
        return Ok(out);
    }
    if let Some(g) = mark.verdicts {
        first.push_str(&line_break(children));
        first.push_str(&system_err(&system_err_lines(marks.group(g))));
    }
    first.push_str(&line_break(indent));
    close_empty(tag, name, &first)
}

/// A self-closing `<properties/>` (at `indent`) of a marked testcase, opened around the
/// verdicts, and followed by the skip.
fn fill_properties(
    tag: &[u8],
    indent: Option<&str>,
    mark: &CaseMark,
    marks: &Marks<'_>,
) -> Result<Vec<u8>, JunitErrorKind> {
    let mut out = match mark.verdicts {
        Some(g) => {
            let inner = indent.map(inner_indent);
            let mut lines = property_lines(inner.as_deref(), marks.group(g));
            lines.push_str(&line_break(indent));
            close_empty(tag, "properties", &lines)?
        }
        None => tag.to_vec(),
    };
    if let Some(s) = mark.skip {
        out.extend_from_slice(line_break(indent).as_bytes());
        out.extend_from_slice(skipped(&marks.skips[s]).as_bytes());
    }
    Ok(out)
}

/// End tag `tag` of the `<properties>` of a marked testcase, the end tag at `indent`, with
/// the verdicts before it and the skip after it.
fn end_properties(
    tag: &[u8],
    indent: Option<&str>,
    mark: &CaseMark,
    marks: &Marks<'_>,
) -> Result<Vec<u8>, JunitErrorKind> {
    let mut out = Vec::new();
    if let Some(g) = mark.verdicts {
        // The line break before the end tag is there: each property goes before it, one step
        // further in, and is followed by the line break and indent again.
        for v in marks.group(g) {
            let line = match indent {
                Some(i) => format!("{}{}\n{i}", indent_step(i), property(v)),
                None => property(v),
            };
            out.extend_from_slice(line.as_bytes());
        }
    }
    out.extend_from_slice(tag);
    if let Some(s) = mark.skip {
        out.extend_from_slice(line_break(indent).as_bytes());
        out.extend_from_slice(skipped(&marks.skips[s]).as_bytes());
    }
    Ok(out)
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
