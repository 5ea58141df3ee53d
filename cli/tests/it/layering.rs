//! The modules of `src/` form layers that only point down: no cycles, the configuration is a
//! leaf every module may read, and the probe knows nothing of its consumers. Read from the
//! source text (`use crate::...` and `crate::...` paths), so it checks what a reader sees.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().unwrap() != "bin" {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to (`src/probe/cache.rs` -> `probe`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Root re-exports and exported macros, so `crate::acquire` counts as a use of `permit`.
fn aliases(src: &Path, files: &[PathBuf]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let flat = lib.replace('\n', " ");
    for part in flat.split("pub use ").skip(1) {
        let stmt = part.split(';').next().unwrap();
        let Some((module, rest)) = stmt.split_once("::") else {
            continue;
        };
        let names = rest.trim().trim_start_matches('{').trim_end_matches('}');
        for name in names.split(',') {
            let name = name.trim();
            if !name.is_empty() {
                out.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        for part in text.split("macro_rules! ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name, module_of(src, f));
        }
    }
    // The facade modules in lib.rs that only re-export the fixtures.
    out.insert("wgpu".into(), "fixture".into());
    out.insert("cuda".into(), "fixture".into());
    out
}

/// The module of the property tests' harness, left out of the layers ([`graph`]).
const TEST_HARNESS: &str = "fuzz_tests";

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = crate::util::workspace_root().join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(&src, f))
        .filter(|m| m != "lib")
        .collect();
    let aliases = aliases(&src, &files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let from = module_of(&src, f);
        // `fuzz_tests` is the property tests' harness (`#[cfg(test)]` in lib.rs), which the
        // tests of every layer use and which uses every layer's readers: not a layer.
        if from == "lib" || from == TEST_HARNESS {
            continue;
        }
        // Code only: a doc link is no dependency.
        let text: String = std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut names = Vec::new();
        for part in text.split("crate::").skip(1) {
            if let Some(group) = part.strip_prefix('{') {
                // `use crate::{a, b::c}`
                let inner = group.split('}').next().unwrap();
                names.extend(inner.split(',').map(|s| s.trim().to_string()));
            } else {
                names.push(part.to_string());
            }
        }
        for name in names {
            let head: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let to = if head == TEST_HARNESS {
                continue;
            } else if modules.contains(&head) {
                head
            } else if let Some(m) = aliases.get(&head) {
                m.clone()
            } else {
                continue;
            };
            if to != from {
                g.entry(from.clone()).or_default().insert(to);
            }
        }
        g.entry(from).or_default();
    }
    g
}

fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == n) {
            let mut cycle = stack[i..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in g.keys() {
        if let Some(c) = visit(n, g, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn src_modules_form_layers_without_cycles() {
    let g = graph();
    assert!(g.contains_key("permit") && g.contains_key("probe"), "{g:?}");
    if let Some(cycle) = find_cycle(&g) {
        panic!("modules form a cycle: {}\n{g:#?}", cycle.join(" -> "));
    }
}

#[test]
fn config_is_a_leaf_and_the_probe_knows_nothing_of_its_consumers() {
    let g = graph();
    // `order` (sorting, sorted maps) is a leaf: the configuration may use it.
    let below_config = ["sys", "backend", "clock", "notice", "order"];
    let config: Vec<_> = g["config"]
        .iter()
        .filter(|m| !below_config.contains(&m.as_str()))
        .collect();
    assert!(config.is_empty(), "config reads {config:?}");
    for consumer in ["fixture", "permit", "permitted", "decision", "capture"] {
        assert!(
            !g["probe"].contains(consumer),
            "the probe uses `{consumer}`: {:?}",
            g["probe"]
        );
    }
}

/// Live GPU memory (`live`, NVML read at run time) is a leaf the host slots may ask: it reads
/// only the platform layer, the configuration and the notices, so no permit or slot logic
/// reaches into it and it reaches into none.
#[test]
fn live_memory_is_a_leaf_below_the_host_slots() {
    let g = graph();
    let below_live = ["sys", "notice", "config", "order", "mailbox"];
    let above: Vec<_> = g["live"]
        .iter()
        .filter(|m| !below_live.contains(&m.as_str()))
        .collect();
    assert!(above.is_empty(), "live uses {above:?}");
    assert!(
        !g["config"].contains("live") && !g["sys"].contains("live"),
        "a layer below live uses it: {g:?}"
    );
}

/// The helpers every layer may use (sorting and sorted maps, the mailbox between threads)
/// use no module of the crate, so that using them adds no edge between layers.
#[test]
fn the_shared_helpers_are_leaves() {
    let g = graph();
    let src = crate::util::workspace_root().join("src");
    for leaf in ["order", "mailbox"] {
        assert!(
            src.join(format!("{leaf}.rs")).is_file(),
            "no module `{leaf}`"
        );
        let uses = g.get(leaf).cloned().unwrap_or_default();
        assert!(uses.is_empty(), "`{leaf}` uses {uses:?}");
    }
}

/// `(constant, variable)` for every `pub const *_VAR: &str = "..."` of config.
fn config_variables(config: &str) -> Vec<(String, String)> {
    config
        .lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(": &str = \"")?;
            name.ends_with("_VAR")
                .then(|| (name.to_string(), rest.trim_end_matches("\";").to_string()))
        })
        .collect()
}

#[test]
fn every_variable_is_in_configs_table_exactly_once() {
    let dir = crate::util::workspace_root().join("src/config");
    let config = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
    let constants = std::fs::read_to_string(dir.join("vars.rs")).unwrap();
    let rows: Vec<&str> = config
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `"))
        .map(|l| l.split('`').next().unwrap())
        .collect();
    let vars = config_variables(&constants);
    assert!(vars.len() >= 12, "{vars:?}");
    for (constant, var) in &vars {
        let n = rows.iter().filter(|r| *r == var).count();
        assert_eq!(n, 1, "{constant} = {var} is in the table {n} times");
    }
    for row in rows {
        assert!(
            vars.iter().any(|(_, v)| v == row),
            "the table names {row}, which config has no constant for"
        );
    }
}

#[test]
fn only_config_reads_the_environment() {
    let src = crate::util::workspace_root().join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let readers = [
        "env::var(",
        "env::var_os(",
        "env::vars(",
        "env::vars_os(",
        "env::remove_var(",
        "getenv(",
    ];
    for f in files {
        // `fuzz_tests`, the property tests' harness (`#[cfg(test)]`), reads its own knobs
        // (`GTP_FUZZ_SEED`, ...): nothing a test process built for a user runs.
        if f.starts_with(src.join("config")) || f == src.join("fuzz_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        // `sys` asks the C library for a name `config` gives it (`sys::env_is_set`).
        let readers: &[&str] = if f.starts_with(src.join("sys")) {
            &readers[..readers.len() - 1]
        } else {
            &readers
        };
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for r in readers {
                assert!(
                    !code.contains(r),
                    "{}:{}: reads the environment outside config: {line}",
                    f.display(),
                    i + 1
                );
            }
        }
    }
}

/// Within a module folder split into files (`src/host/`, `src/trace/`, `src/config/`,
/// `src/live/`), the files below
/// `mod.rs` point only sideways and down: each names its siblings (`super::<file>::...` or
/// `crate::<folder>::<file>::...`), never the folder's own items above it, and the files form
/// no cycle. `mod.rs` sits on top and uses them all.
#[test]
fn the_files_of_the_host_trace_config_and_live_folders_form_layers_without_cycles() {
    for folder in ["host", "trace", "config", "live"] {
        folder_layers(folder);
    }
}

/// The same for the permit pool, the probe and the fixtures: the pool's inner state sits below
/// the guards and the pool's public face, the probe child's protocol below both of its sides.
#[test]
fn the_files_of_the_permit_probe_and_fixture_folders_form_layers_without_cycles() {
    for folder in ["permit", "probe", "fixture"] {
        folder_layers(folder);
    }
}

/// Below the crate root, code names items by the module that defines them
/// (`crate::permit::GpuTestPermit`), never by the root's re-exports (`crate::GpuTestPermit`):
/// the root is the top layer, and a re-export hides which module a file depends on. Exported
/// macros (`$crate::...`) name root paths, as their users see them, and are not counted.
#[test]
fn no_module_below_the_root_uses_a_root_re_export() {
    let src = crate::util::workspace_root().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut reexports = BTreeSet::new();
    for part in lib.replace('\n', " ").split("pub use ").skip(1) {
        let stmt = part.split(';').next().unwrap();
        let Some((_, rest)) = stmt.split_once("::") else {
            continue;
        };
        let names = rest.trim().trim_start_matches('{').trim_end_matches('}');
        reexports.extend(
            names
                .split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty() && n != "*"),
        );
    }
    assert!(reexports.contains("GpuTestPermit"), "{reexports:?}");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut found = Vec::new();
    for f in files.iter().filter(|f| **f != src.join("lib.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        for name in crate_paths(&text) {
            if reexports.contains(&name) {
                found.push(format!("{}: crate::{name}", f.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "name these by their defining module:\n{}",
        found.join("\n")
    );
}

/// The first segment of every `crate::` path in code (comments and `$crate::` left out),
/// `use crate::{a, b::c}` groups included.
fn crate_paths(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let macro_path = rest[..at].ends_with('$');
        rest = after;
        if macro_path {
            continue;
        }
        let mut names = Vec::new();
        if let Some(group) = after.strip_prefix('{') {
            let inner = group.split('}').next().unwrap();
            names.extend(inner.split(',').map(str::trim));
        } else {
            names.push(after);
        }
        for n in names {
            let head: String = n
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !head.is_empty() {
                out.push(head);
            }
        }
    }
    out
}

fn folder_layers(folder: &str) {
    let dir = crate::util::workspace_root().join("src").join(folder);
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|m| m != "mod")
        .collect();
    assert!(files.len() >= 3, "{folder}: {files:?}");
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(dir.join(format!("{file}.rs"))).unwrap();
        // Code only (a doc link is no dependency), and the file's own tests may reach up.
        let code: String = text
            .split("mod tests {")
            .next()
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let edges = g.entry(file.clone()).or_default();
        let own = format!("crate::{folder}::");
        let parts = code
            .split("super::")
            .skip(1)
            .chain(code.split(own.as_str()).skip(1));
        let mut names = Vec::new();
        for part in parts {
            match part.strip_prefix('{') {
                // `use super::{a::X, Y}`
                Some(group) => names.extend(group.split('}').next().unwrap().split(',')),
                None => names.push(part),
            }
        }
        for part in names {
            let name: String = part
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                continue;
            }
            if !files.contains(&name) {
                problems.push(format!(
                    "src/{folder}/{file}.rs reaches up to `{name}` of the folder's own items: \
                     name the sibling file it comes from"
                ));
            } else if &name != file {
                edges.insert(name);
            }
        }
    }
    if let Some(cycle) = find_cycle(&g) {
        problems.push(format!("the files form a cycle: {}", cycle.join(" -> ")));
    }
    assert!(
        problems.is_empty(),
        "{folder}:\n{}\n{g:?}",
        problems.join("\n")
    );
}

/// The files that observe permits come and go, relative to `src/`: run records, the trace,
/// the driver watch, nextest's hints, hang records, the hold-deadline watchdog and the permit
/// pool's observers. A folder's name stands for every file in it.
const OBSERVERS: [&str; 8] = [
    "runs",
    "trace",
    "drivers.rs",
    "drivers",
    "nextest.rs",
    "hangs.rs",
    "permit/watchdog.rs",
    "permit/observe.rs",
];

/// What an observer file names that could take or free a slot: the host's slots, its queue
/// and slot files, the process's semaphore, the pool's state and seats, a pool or a guard (a
/// guard frees its slots when it drops), letting go of a lock, and an acquire or release
/// called on anything. `rel` is the file's path below `src/`, `text` its source.
fn slot_reaches(rel: &str, text: &str) -> Vec<String> {
    let code = code_of(text);
    let mut found = Vec::new();
    let words = [
        "HostSlots",
        "Slots",
        "LocalPool",
        "PoolInner",
        "Seat",
        "PermitPool",
        "GpuTestPermit",
        "try_take",
        "take_in_order",
        "unlock_unrecorded",
        "let_go",
    ];
    for word in identifiers(&code) {
        if words.contains(&word.as_str()) {
            found.push(format!("{rel}: names `{word}`"));
        }
    }
    for call in [".acquire(", ".acquire_", ".release(", ".try_acquire"] {
        if code.contains(call) {
            found.push(format!("{rel}: calls `{call}`"));
        }
    }
    for path in full_crate_paths(&code) {
        let segments: Vec<&str> = path.split("::").map(str::trim).collect();
        let slot_taking = matches!(
            segments.as_slice(),
            ["host", "slot" | "queue", ..] | ["permit", ..]
        );
        if slot_taking {
            found.push(format!("{rel}: uses `crate::{path}`"));
        }
    }
    // The permit pool's own observers reach only each other, never the pool's files.
    if rel.starts_with("permit/") {
        for path in super_paths(&code) {
            let head = path.split("::").next().unwrap_or("").trim();
            if !["observe", "watchdog"].contains(&head) {
                found.push(format!("{rel}: uses `super::{path}`"));
            }
        }
    }
    found
}

/// What a file of the permit pool other than its observers names of the observers: run
/// records, the trace, the driver watch, nextest's hints, hang records, the tally, the
/// watchdog. They are reached through `permit/observe.rs` only. `mod.rs` declares the
/// watchdog and re-exports its public items.
fn observer_reaches(rel: &str, text: &str) -> Vec<String> {
    let code = code_of(text);
    let mut found = Vec::new();
    for head in crate_paths(&code) {
        if ["runs", "trace", "drivers", "nextest", "hangs"].contains(&head.as_str()) {
            found.push(format!("{rel}: uses `crate::{head}`"));
        }
    }
    for word in identifiers(&code) {
        if word == "tally" || (word == "watchdog" && rel != "permit/mod.rs") {
            found.push(format!("{rel}: names `{word}`"));
        }
    }
    found
}

/// Code without its comment lines (a doc link is no dependency).
fn code_of(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn identifiers(code: &str) -> Vec<String> {
    code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every path after `prefix` (`crate::` or `super::`) in `code`, a group (`a::{b, c::d}`)
/// counted as one path an item.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in code.split(prefix).skip(1) {
        let head: String = part
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let rest = &part[head.len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let items = group.split('}').next().unwrap_or("");
                for item in items.split(',') {
                    let item = item.trim().trim_start_matches('{');
                    if !item.is_empty() {
                        out.push(format!("{head}{item}"));
                    }
                }
            }
            None => out.push(head.trim_end_matches(':').to_string()),
        }
    }
    out
}

fn full_crate_paths(code: &str) -> Vec<String> {
    paths_after(code, "crate::")
}

fn super_paths(code: &str) -> Vec<String> {
    paths_after(code, "super::")
}

/// Every source file under `src/`: its path below `src/` (with `/`) and its text.
fn library_sources() -> Vec<(String, String)> {
    let src = crate::util::workspace_root().join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut out = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        out.push((rel, std::fs::read_to_string(f).unwrap()));
    }
    out
}

/// The cap's path apart from its observers: nothing that observes permits (run records, the
/// trace, the driver watch, nextest's hints, hang records, the watchdog, the pool's
/// observers) names the code that takes or frees a slot, and the permit pool's other files
/// reach the observers only through `permit/observe.rs`, at its named points.
#[test]
fn observers_cannot_reach_the_slots_and_the_permit_path_reaches_them_only_through_observe() {
    let mut problems = Vec::new();
    let mut observers = 0;
    let mut permit_files = 0;
    for (rel, text) in library_sources() {
        let observer = OBSERVERS
            .iter()
            .any(|o| rel == *o || (!o.ends_with(".rs") && rel.starts_with(&format!("{o}/"))));
        if observer {
            observers += 1;
            problems.extend(slot_reaches(&rel, &text));
        } else if rel.starts_with("permit/") {
            permit_files += 1;
            problems.extend(observer_reaches(&rel, &text));
        }
    }
    assert!(
        observers >= 10 && permit_files >= 10,
        "{observers} {permit_files}"
    );
    assert!(
        problems.is_empty(),
        "the cap's path and its observers mix:\n{}",
        problems.join("\n")
    );
}

/// The checks above catch what they are for, in planted sources.
#[test]
fn the_observer_checks_catch_planted_reaches() {
    let planted = [
        "use crate::host::HostSlots;",
        "use crate::host::{Layout, queue::Waiting};",
        "let s = crate::host::slot::Slots::new();",
        "fn f(p: &PoolInner) { p.local.release(1); }",
        "fn f(h: &H) { h.acquire(&take, None, &record); }",
        "let g = crate::permit::PermitPool::global();",
        "use super::inner::PoolInner;",
        "use super::{observe, local::LocalPool};",
    ];
    for text in planted {
        assert!(
            !slot_reaches("permit/observe.rs", text).is_empty(),
            "not caught: {text}"
        );
    }
    assert!(slot_reaches("runs/write.rs", "use crate::host::Layout;\nuse crate::sys;").is_empty());
    for text in [
        "crate::runs::granted(dir, g);",
        "use crate::{sys, trace::Tracer};",
        "crate::runs::tally::gpu_test(&t);",
        "super::watchdog::watch(w);",
        "crate::drivers::permit_taken();",
        "crate::nextest::hint_once(n);",
    ] {
        assert!(
            !observer_reaches("permit/pool.rs", text).is_empty(),
            "not caught: {text}"
        );
    }
    assert!(observer_reaches("permit/pool.rs", "use super::observe::Grant;").is_empty());
}

/// What a file of the permit pool names of holding that only `permit/holder.rs` may: a
/// thread-local store of held permits, or a holder's entry. Reentrancy by thread and the
/// learned join by test are one layer with one key; `learned` keeps measured weights, not who
/// holds a permit.
fn holder_reaches(rel: &str, text: &str) -> Vec<String> {
    let code = code_of(text);
    let mut found = Vec::new();
    if rel == "permit/holder.rs" || !rel.starts_with("permit/") {
        return found;
    }
    if code.contains("thread_local!") {
        found.push(format!(
            "{rel} keeps thread-local state: who holds a permit is `holder`'s"
        ));
    }
    for word in identifiers(&code) {
        if word == "Holding" && !code.contains("use super::holder::") {
            found.push(format!("{rel} names `Holding` without `holder`"));
        }
        if rel == "permit/learned.rs" && ["seat", "generation", "Mutex"].contains(&word.as_str()) {
            found.push(format!(
                "{rel} names `{word}`: a learned permit's holder is `holder`'s"
            ));
        }
    }
    found.dedup();
    found
}

/// Who holds a permit, for joining it, is one layer (`permit/holder.rs`) with one key: no other
/// file of the pool keeps a thread's permits, and learned weights keep no holders of their own.
#[test]
fn who_holds_a_permit_is_kept_in_one_layer() {
    let mut problems = Vec::new();
    let mut holder = false;
    for (rel, text) in library_sources() {
        holder |= rel == "permit/holder.rs";
        problems.extend(holder_reaches(&rel, &text));
    }
    assert!(holder, "permit/holder.rs is where holders are kept");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // It catches what it is for.
    assert!(!holder_reaches("permit/seat.rs", "thread_local! { static T: u8 = 0; }").is_empty());
    assert!(
        !holder_reaches(
            "permit/learned.rs",
            "held: parking_lot::Mutex<Vec<(String, usize, u64)>>,\nfn hold(seat: usize) {}"
        )
        .is_empty()
    );
    assert!(holder_reaches("permit/holder.rs", "thread_local! { static T: u8 = 0; }").is_empty());
}
