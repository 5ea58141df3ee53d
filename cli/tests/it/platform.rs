//! The library keeps its platform code in `src/sys/`: no platform `cfg` anywhere else in the
//! library's sources (the CLI binary under `src/bin/` keeps its own signal code).

use std::path::Path;

use crate::util::rust_files;

/// The `cfg` predicates that pick a platform.
const PLATFORM_KEYS: [&str; 5] = [
    "unix",
    "windows",
    "target_os",
    "target_family",
    "target_vendor",
];

/// The platform conditions in `text`, as `(line, condition)`: every `cfg(...)`, `cfg!(...)` and
/// `cfg_attr(...)` (over several lines too) that names a platform key outside a string.
fn platform_cfgs(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(i) = text[at..].find("cfg").map(|i| at + i) {
        at = i + 3;
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let rest = &text[at..];
        let open = ["(", "!(", "_attr("]
            .iter()
            .find(|p| rest.starts_with(**p))
            .map(|p| at + p.len());
        let (true, Some(open)) = (starts_word, open) else {
            continue;
        };
        // The condition up to its matching parenthesis, without string literals.
        let (mut depth, mut in_str, mut end, mut cond) = (1, false, open, String::new());
        for (j, c) in text[open..].char_indices() {
            end = open + j;
            match c {
                '"' => in_str = !in_str,
                _ if in_str => {}
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                break;
            }
            if !in_str && c != '"' {
                cond.push(c);
            }
        }
        let names_platform = cond
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|word| PLATFORM_KEYS.contains(&word));
        if names_platform {
            let line = text[..i].matches('\n').count() + 1;
            found.push((line, text[i..=end].to_string()));
        }
    }
    found
}

#[test]
fn matcher_finds_platform_cfgs_and_only_those() {
    let text = "#[cfg(unix)]\nfn a() {}\n#[cfg(all(test, not(\n    target_os = \"linux\")))]\n\
                if cfg!(windows) {}\n#[cfg_attr(target_family = \"unix\", allow(x))]\n\
                #[cfg(feature = \"windows\")]\n#[cfg(test)]\n// unix and windows in prose\n";
    let lines: Vec<usize> = platform_cfgs(text).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, [1, 3, 5, 6]);
}

#[test]
fn platform_cfgs_live_only_in_sys() {
    let root = crate::util::workspace_root();
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let outside = |p: &Path| !(p.starts_with(src.join("sys")) || p.starts_with(src.join("bin")));
    let mut offenders = Vec::new();
    let mut scanned = 0;
    for file in files.iter().filter(|p| outside(p)) {
        scanned += 1;
        let text = std::fs::read_to_string(file).unwrap();
        for (line, cond) in platform_cfgs(&text) {
            let shown = file.strip_prefix(&root).unwrap().display();
            offenders.push(format!("{shown}:{line}: {cond}"));
        }
    }
    assert!(
        scanned >= 10,
        "only {scanned} library files found under {}",
        src.display()
    );
    assert!(
        offenders.is_empty(),
        "platform code belongs in src/sys/ (see its module docs); platform cfgs found \
         elsewhere:\n{}",
        offenders.join("\n")
    );
    // The platform layer itself is where they are, so the search does see them.
    let sys = std::fs::read_to_string(src.join("sys/mod.rs")).unwrap();
    assert!(!platform_cfgs(&sys).is_empty());
}
