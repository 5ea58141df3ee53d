//! The library's examples run as doctests, merged into one process on many threads (edition
//! 2024): they share the process id and the environment. Read from the source text, so that a new
//! example cannot break another one that runs beside it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::util::rust_files;

/// One example: where it starts, its fence's attributes, its lines.
struct Example {
    at: String,
    attrs: String,
    body: Vec<String>,
}

/// The code blocks of the doc comments (`///` and `//!`) of `file`.
fn examples(file: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    let mut open: Option<Example> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let Some(doc) = t.strip_prefix("///").or_else(|| t.strip_prefix("//!")) else {
            if let Some(ex) = open.take() {
                panic!("{}: the example is not closed", ex.at);
            }
            continue;
        };
        let doc = doc.strip_prefix(' ').unwrap_or(doc);
        if let Some(attrs) = doc.trim_start().strip_prefix("```") {
            match open.take() {
                Some(ex) => out.push(ex),
                None => {
                    open = Some(Example {
                        at: format!("{}:{}", file.display(), i + 1),
                        attrs: attrs.to_string(),
                        body: Vec::new(),
                    })
                }
            }
        } else if let Some(ex) = open.as_mut() {
            ex.body.push(doc.to_string());
        }
    }
    out
}

/// Whether rustdoc runs the example whose fence says `attrs` (separated by commas or spaces).
fn runs_as_rust(attrs: &str) -> bool {
    !attrs
        .split(|c: char| c == ',' || c.is_whitespace())
        .any(|a| {
            matches!(
                a,
                "text" | "toml" | "sh" | "console" | "json" | "ignore" | "compile_fail" | "no_run"
            )
        })
}

fn all_examples() -> Vec<Example> {
    let root = crate::util::workspace_root();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("cli/src"), &mut files);
    files.sort();
    files.iter().flat_map(|f| examples(f)).collect()
}

#[test]
fn the_parser_finds_the_examples() {
    let all = all_examples();
    // The crate documents its public API with examples: far more than a handful.
    assert!(all.len() > 200, "{} examples found", all.len());
    assert!(all.iter().any(|e| e.attrs.contains("standalone_crate")));
}

/// Examples that run beside each other in one process name their temporary files apart: the
/// process id is the same for all of them, and one example's clean-up would remove the other's.
#[test]
fn no_two_examples_share_a_temporary_path() {
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ex in all_examples().iter().filter(|e| runs_as_rust(&e.attrs)) {
        for line in &ex.body {
            for part in line.split("temp_dir().join(").skip(1) {
                let arg = part.trim_start_matches("format!(");
                let Some(rest) = arg.strip_prefix('"') else {
                    continue;
                };
                let name: String = rest
                    .chars()
                    .take_while(|c| *c != '"' && *c != '{')
                    .collect();
                names.entry(name).or_default().push(ex.at.clone());
            }
        }
    }
    assert!(names.len() > 5, "temporary paths found: {names:?}");
    let shared: Vec<_> = names.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(
        shared.is_empty(),
        "examples sharing a temporary path: {shared:?}"
    );
}

/// An example that changes the environment or the working directory runs in a process of its
/// own (`standalone_crate`): in the merged process another example's thread reads them.
#[test]
fn examples_that_change_the_process_run_alone() {
    let mut wrong = Vec::new();
    for ex in all_examples().iter().filter(|e| runs_as_rust(&e.attrs)) {
        let changes = ex.body.iter().any(|l| {
            ["set_var(", "remove_var(", "set_current_dir("]
                .iter()
                .any(|c| l.contains(c))
        });
        if changes && !ex.attrs.contains("standalone_crate") {
            wrong.push(ex.at.clone());
        }
    }
    assert!(
        wrong.is_empty(),
        "examples that change the process without standalone_crate: {wrong:?}"
    );
}
