//! The docs as a reader meets them: README.md, the guide's pages (`docs/guide/`) and the other
//! Markdown files, each parsed as CommonMark (as GitHub renders it). Every relative link names
//! a file or directory of the repository, every `#anchor` a heading of the page it points
//! into; each page of the guide stays short, the path from nothing to a green CI run shorter
//! still, every page is reachable from the guide's index, and the pictures of real runs are
//! what the command draws from the traces they came from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

use crate::util::{bin, workspace_root};

/// The longest a page of the guide may be, in words, and README.md with it.
const PAGE_WORDS: usize = 1500;
/// The pages, in order, from nothing to a green CI run, and what they may read together.
const PATH_TO_GREEN_CI: [&str; 2] = ["adopt.md", "ci.md"];
const PATH_WORDS: usize = 3000;

/// The Markdown files a reader of the repository meets: README.md, CONTRIBUTING.md,
/// BENCHMARKS.md and every `.md` under `docs/`.
fn markdown_files() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "BENCHMARKS.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    let mut stack = vec![root.join("docs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Words as `wc -w` counts them: runs of non-whitespace.
fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// GitHub's anchor for a heading's text: lower case, punctuation other than `-` and `_`
/// dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A page as parsed: its anchors (repeated headings get `-1`, `-2`, as on GitHub) and its
/// links' destinations.
struct Page {
    anchors: BTreeSet<String>,
    links: Vec<String>,
}

fn parse(text: &str) -> Page {
    let mut anchors = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut links = Vec::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap());
                let n = seen.entry(base.clone()).or_insert(0);
                anchors.insert(if *n == 0 { base } else { format!("{base}-{n}") });
                *n += 1;
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                links.push(dest_url.to_string());
            }
            _ => {}
        }
    }
    Page { anchors, links }
}

fn page_of(path: &Path) -> Page {
    parse(&std::fs::read_to_string(path).unwrap())
}

/// Every relative link of every Markdown file names what is there: a file or directory, and
/// for an anchor, a heading of the page (this one, or the one the link names).
#[test]
fn every_link_and_anchor_in_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let page = page_of(&file);
        let dir = file.parent().unwrap();
        for link in &page.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", file.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let has = target.extension().is_some_and(|e| e == "md")
                && page_of(&target).anchors.contains(anchor);
            if !has {
                broken.push(format!(
                    "{}: {link}: no heading #{anchor} in {}",
                    file.display(),
                    target.display()
                ));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 100, "only {checked} links checked");
}

fn guide() -> PathBuf {
    workspace_root().join("docs/guide")
}

fn guide_pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(guide())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages
}

/// No page of the guide, nor README.md, runs past [`PAGE_WORDS`]; each has one title; the
/// index links every page.
#[test]
fn the_guide_is_short_pages_each_reachable_from_its_index() {
    let mut long = Vec::new();
    let mut files = guide_pages();
    files.push(workspace_root().join("README.md"));
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let n = words(&text);
        if n > PAGE_WORDS {
            long.push(format!("{}: {n} words", file.display()));
        }
        let titles = Parser::new(&text)
            .filter(|e| {
                matches!(
                    e,
                    Event::Start(Tag::Heading {
                        level: HeadingLevel::H1,
                        ..
                    })
                )
            })
            .count();
        assert_eq!(titles, 1, "{}: {titles} titles", file.display());
    }
    assert!(
        long.is_empty(),
        "over {PAGE_WORDS} words:\n{}",
        long.join("\n")
    );
    assert!(guide_pages().len() >= 10, "{:?}", guide_pages());

    let index = page_of(&guide().join("README.md"));
    let linked: BTreeSet<&str> = index
        .links
        .iter()
        .map(|l| l.split('#').next().unwrap())
        .collect();
    for page in guide_pages() {
        let name = page.file_name().unwrap().to_str().unwrap();
        assert!(
            name == "README.md" || linked.contains(name),
            "the guide's index does not link {name}"
        );
    }
}

/// The two pages from nothing to a green CI run read in under [`PATH_WORDS`] words, link
/// each to the next, and are the path README.md and the index give.
#[test]
fn the_path_to_a_green_ci_run_reads_in_under_3000_words() {
    let total: usize = PATH_TO_GREEN_CI
        .iter()
        .map(|p| words(&std::fs::read_to_string(guide().join(p)).unwrap()))
        .sum();
    assert!(total < PATH_WORDS, "{PATH_TO_GREEN_CI:?}: {total} words");
    let first = page_of(&guide().join(PATH_TO_GREEN_CI[0]));
    assert!(first.links.iter().any(|l| l == PATH_TO_GREEN_CI[1]));
    for (file, prefix) in [
        (workspace_root().join("README.md"), "docs/guide/"),
        (guide().join("README.md"), ""),
    ] {
        let links = page_of(&file).links;
        for page in PATH_TO_GREEN_CI {
            assert!(
                links.contains(&format!("{prefix}{page}")),
                "{} does not link {page}",
                file.display()
            );
        }
    }
}

/// Wherever the docs show a crate's dev-dependency on itself with its permits' feature, its
/// default features are off: cargo adds up the features every dependency asks for, so a
/// self dev-dependency with them on would undo `--no-default-features`.
#[test]
fn every_self_dev_dependency_the_docs_show_keeps_default_features_off() {
    let mut shown = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            if line.contains("path = \".\"") && line.contains("test-permits") {
                shown += 1;
                assert!(
                    line.contains("default-features = false"),
                    "{}: {line}",
                    file.display()
                );
            }
        }
    }
    assert!(shown >= 2, "README.md and the guide each show one");
}

/// The pictures of the cap in a real run (how-it-works.md) are what `gpu-test-permit trace
/// --timeline` draws from the committed traces (`scripts/docs-timeline.sh` makes them), and
/// those traces show what the page says: N = 2 held at most 2 at once, N = 16 more.
#[test]
fn the_pages_pictures_of_the_cap_are_what_the_command_draws_from_the_real_runs() {
    let page = std::fs::read_to_string(guide().join("how-it-works.md")).unwrap();
    for (trace, peak) in [("capped", 2), ("uncapped", 8)] {
        let file = guide().join("timeline").join(format!("{trace}.json"));
        let out = std::process::Command::new(bin())
            .arg("trace")
            .arg(&file)
            .arg("--timeline")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let picture = text.split("\n\n").next().unwrap();
        assert!(
            picture.lines().count() > 20,
            "{trace}: a timeline of the run's tests:\n{picture}"
        );
        assert!(
            page.contains(&format!("```text\n{picture}\n```")),
            "how-it-works.md does not show what `trace {} --timeline` draws:\n{picture}",
            file.display()
        );
        assert!(
            text.contains(&format!("peak concurrency {peak}\n")),
            "{trace}: {text}"
        );
    }
}
