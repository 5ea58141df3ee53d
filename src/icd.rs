//! The GPU drivers this machine's driver manifests name: a library that an installed Vulkan ICD
//! manifest or OpenCL vendor file names is a driver here, whatever its file name
//! (SwiftShader's `libvk_swiftshader.so`, an OpenCL ICD, a vendor's driver under a new name).
//!
//! Where the loaders look, and so where this looks (each one that exists; all of them, where the
//! loaders take the first that names any):
//!
//! - Vulkan: the files and directories in `VK_DRIVER_FILES`, `VK_ICD_FILENAMES` and
//!   `VK_ADD_DRIVER_FILES` (`:`-separated); `vulkan/icd.d/*.json` under `XDG_CONFIG_HOME`
//!   (`~/.config`), each of `XDG_CONFIG_DIRS` (`/etc/xdg`), `/etc`, `/usr/local/etc`,
//!   `XDG_DATA_HOME` (`~/.local/share`) and each of `XDG_DATA_DIRS` (`/usr/local/share`,
//!   `/usr/share`). A manifest is JSON, `{"file_format_version": "1.0.0", "ICD":
//!   {"library_path": ...}}`; the path is a bare file name (the dynamic loader finds it) or a
//!   path, relative to the manifest's directory where it is not absolute.
//! - OpenCL: the `*.icd` files in `OCL_ICD_VENDORS` (a directory, one `.icd` file, or a library),
//!   `OPENCL_VENDOR_PATH` and `/etc/OpenCL/vendors`, whose first line names the library; the
//!   libraries `OCL_ICD_FILENAMES` names (`:`-separated).
//! - Level Zero: the libraries `ZE_ENABLE_ALT_DRIVERS` names (`,`-separated).
//!
//! They are read once per process, when the first driver question that the file name cannot
//! answer is asked. A manifest that is not JSON, is not a regular file, is larger than 64 KiB or
//! cannot be read is skipped; so is one that names a loader (`libvulkan`, `libOpenCL`,
//! `libze_loader`), which every process that looks for a GPU loads. A library counts by its
//! name up to `.so` (`libfoo.so.1` and `libfoo.so` are one driver), and, where the manifest
//! names it by path, by the name of the file that path leads to as well.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The largest manifest read; a larger file is not one.
const LARGEST_MANIFEST: u64 = 64 << 10;
/// The most entries of one directory looked at.
const MOST_ENTRIES: usize = 512;
/// The loaders: a manifest that names one is skipped.
pub(crate) const LOADERS: [&str; 3] = ["libvulkan", "libOpenCL", "libze_loader"];

/// Whether the library at `path` (or named `path`) is one that a driver manifest installed on
/// this machine names. Reads the manifests the first time it is asked.
pub(crate) fn named_by_manifest(path: &str) -> bool {
    static INSTALLED: OnceLock<Stems> = OnceLock::new();
    let stem = driver_stem(file_name(path));
    !stem.is_empty()
        && INSTALLED
            .get_or_init(|| installed(crate::config::driver_manifest_var))
            .contains(stem)
}

/// Whether the library at `path` is a loader that finds drivers through manifests (Vulkan's,
/// OpenCL's, Level Zero's): a process without one mapped has loaded no driver through them.
pub(crate) fn is_loader(path: &str) -> bool {
    LOADERS.contains(&driver_stem(file_name(path)))
}

/// What a manifest is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A Vulkan ICD manifest (JSON).
    Vulkan,
    /// An OpenCL vendor file (`*.icd`: the library on its first line).
    OpenCl,
}

/// The environment's variables, as [`installed`] and [`search`] read them.
type Lookup<'a> = dyn Fn(&str) -> Option<OsString> + 'a;

/// The stems of the libraries the manifests that `lookup` (the environment) points to name.
fn installed(lookup: impl Fn(&str) -> Option<OsString>) -> Stems {
    installed_with(&lookup)
}

/// [`installed`], for any lookup.
fn installed_with(lookup: &Lookup<'_>) -> Stems {
    let mut out = Vec::new();
    let (places, libraries) = search(lookup);
    for library in &libraries {
        add(&mut out, library, None);
    }
    for (place, kind) in &places {
        let kind = *kind;
        // ocl-icd reads a file in OCL_ICD_VENDORS that is not a `.icd` as the library itself.
        if kind == Kind::OpenCl
            && place.extension() != Some(OsStr::new("icd"))
            && matches!(std::fs::metadata(place), Ok(m) if m.is_file())
        {
            add(&mut out, &place.to_string_lossy(), None);
            continue;
        }
        for manifest in &manifests_at(place, kind) {
            let Some(text) = read_small(manifest) else {
                continue;
            };
            let library = match kind {
                Kind::Vulkan => vulkan_library(&text),
                Kind::OpenCl => opencl_library(&text),
            };
            if let Some(library) = library {
                add(&mut out, &library, manifest.parent());
            }
        }
    }
    crate::order::sort_dedup(&mut out);
    Stems(out)
}

/// Library stems, sorted, each once.
#[derive(Debug)]
struct Stems(Vec<String>);

impl Stems {
    fn contains(&self, stem: &str) -> bool {
        // A binary search of the sorted stems.
        let (mut low, mut high) = (0, self.0.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match self.0[mid].as_str().cmp(stem) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }
}

/// Where the loaders look for manifests (files or directories, each with its kind), and the
/// libraries named directly by variables.
fn search(lookup: &Lookup<'_>) -> (Vec<(PathBuf, Kind)>, Vec<String>) {
    let home = var(lookup, "HOME").map(PathBuf::from);
    let mut places: Vec<(PathBuf, Kind)> = Vec::new();
    for name in ["VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"] {
        for p in &mut list(lookup, name) {
            places.push((std::mem::take(p), Kind::Vulkan));
        }
    }
    let mut roots = or_home(lookup, "XDG_CONFIG_HOME", &home, ".config");
    roots.append(&mut or_default(lookup, "XDG_CONFIG_DIRS", &["/etc/xdg"]));
    roots.push(PathBuf::from("/etc"));
    roots.push(PathBuf::from("/usr/local/etc"));
    roots.append(&mut or_home(lookup, "XDG_DATA_HOME", &home, ".local/share"));
    roots.append(&mut or_default(
        lookup,
        "XDG_DATA_DIRS",
        &["/usr/local/share", "/usr/share"],
    ));
    for r in &roots {
        places.push((r.join("vulkan/icd.d"), Kind::Vulkan));
    }
    for name in ["OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH"] {
        if let Some(v) = var(lookup, name) {
            places.push((PathBuf::from(v), Kind::OpenCl));
        }
    }
    places.push((PathBuf::from("/etc/OpenCL/vendors"), Kind::OpenCl));
    let mut libraries = Vec::new();
    for p in &list(lookup, "OCL_ICD_FILENAMES") {
        libraries.push(p.to_string_lossy().into_owned());
    }
    if let Some(alt) = var(lookup, "ZE_ENABLE_ALT_DRIVERS") {
        for l in alt.to_string_lossy().split(',') {
            let l = l.trim();
            if !l.is_empty() {
                libraries.push(l.to_string());
            }
        }
    }
    (places, libraries)
}

/// The value of variable `name`, where it is set and not empty.
fn var(lookup: &Lookup<'_>, name: &str) -> Option<OsString> {
    let v = lookup(name)?;
    if v.is_empty() { None } else { Some(v) }
}

/// The paths of the `:`-separated list in variable `name` (none where it is unset).
fn list(lookup: &Lookup<'_>, name: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Some(v) = var(lookup, name) {
        for p in std::env::split_paths(&v) {
            if !p.as_os_str().is_empty() {
                paths.push(p);
            }
        }
    }
    paths
}

/// The directory variable `name` names, else `under` in `home` (none without either).
fn or_home(lookup: &Lookup<'_>, name: &str, home: &Option<PathBuf>, under: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    match (var(lookup, name), home) {
        (Some(v), _) => dirs.push(PathBuf::from(v)),
        (None, Some(h)) => dirs.push(h.join(under)),
        (None, None) => {}
    }
    dirs
}

/// The directories the list in variable `name` names, else `default`.
fn or_default(lookup: &Lookup<'_>, name: &str, default: &[&str]) -> Vec<PathBuf> {
    let named = list(lookup, name);
    if !named.is_empty() {
        return named;
    }
    let mut paths = Vec::with_capacity(default.len());
    for d in default {
        paths.push(PathBuf::from(d));
    }
    paths
}

/// The manifests at `place`: the file itself, or a directory's files of the kind's extension
/// (in name order).
fn manifests_at(place: &Path, kind: Kind) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(meta) = std::fs::metadata(place) else {
        return files;
    };
    if !meta.is_dir() {
        files.push(place.to_path_buf());
        return files;
    }
    let Ok(entries) = std::fs::read_dir(place) else {
        return files;
    };
    let extension = match kind {
        Kind::Vulkan => "json",
        Kind::OpenCl => "icd",
    };
    for entry in entries.take(MOST_ENTRIES) {
        let Ok(entry) = entry else {
            continue;
        };
        let path = entry.path();
        if path.extension() == Some(OsStr::new(extension)) {
            files.push(path);
        }
    }
    crate::order::sort(&mut files);
    files
}

/// The text of the manifest at `path`, where it is a regular file of at most
/// [`LARGEST_MANIFEST`] bytes that opens without blocking and is UTF-8. A manifest another
/// user owns counts against the process's budget of bytes read from others' files
/// (`sys::FOREIGN_READ_BUDGET`): past it, none is read.
fn read_small(path: &Path) -> Option<String> {
    let Ok(mut file) = crate::sys::open_to_look(path) else {
        return None;
    };
    if file.len() > LARGEST_MANIFEST {
        return None;
    }
    // As the ELF reader reads: one reader, bounded by the length the file had when opened.
    let bytes = crate::sys::read_looked_at(&mut file, 0, LARGEST_MANIFEST)?;
    String::from_utf8(bytes).ok()
}

/// The library a Vulkan ICD manifest names (`ICD.library_path`), as written; `None` where it
/// is not such a manifest.
fn vulkan_library(text: &str) -> Option<String> {
    let v = crate::json::parse(text).ok()?;
    let path = v.get("ICD")?.get("library_path")?.as_str()?;
    if path.trim().is_empty() {
        None
    } else {
        Some(path.to_string())
    }
}

/// The library an OpenCL vendor file names: its first line that is not blank.
fn opencl_library(text: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.trim();
        if !line.is_empty() {
            return Some(line.to_string());
        }
    }
    None
}

/// Adds the stem of `library` (named in a manifest in directory `manifest_dir`, or by a
/// variable) to `out`, and, where it is a path, the stem of the file it leads to.
fn add(out: &mut Vec<String>, library: &str, manifest_dir: Option<&Path>) {
    let mut stems = Vec::new();
    stems.push(driver_stem(file_name(library)).to_string());
    if library.contains('/') {
        let path = match manifest_dir {
            Some(dir) if Path::new(library).is_relative() => dir.join(library),
            _ => PathBuf::from(library),
        };
        if let Ok(real) = std::fs::canonicalize(&path)
            && let Some(name) = real.file_name()
        {
            stems.push(driver_stem(&name.to_string_lossy()).to_string());
        }
    }
    for stem in &mut stems {
        if !stem.is_empty() && !LOADERS.contains(&stem.as_str()) {
            out.push(std::mem::take(stem));
        }
    }
}

/// The file name of `path`: after its last `/` or `\\`, else all of it.
pub(crate) fn file_name(path: &str) -> &str {
    // Both separators are ASCII, so the cut is at a character boundary.
    let bytes = path.as_bytes();
    let mut start = bytes.len();
    while start > 0 && bytes[start - 1] != b'/' && bytes[start - 1] != b'\\' {
        start -= 1;
    }
    &path[start..]
}

/// A library's name up to `.so` (where `.so` ends the name or a `.` follows it: `libfoo.so.1`
/// and `libfoo.so` are one), or without `.dll`.
fn driver_stem(name: &str) -> &str {
    let mut from = 0;
    while let Some(i) = name[from..].find(".so") {
        let at = from + i;
        let after = &name[at + 3..];
        if after.is_empty() || after.starts_with('.') {
            return &name[..at];
        }
        from = at + 3;
    }
    name.strip_suffix(".dll").unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vulkan_manifest_names_its_library() {
        let m = r#"{"file_format_version": "1.0.0", "ICD": {"library_path": "libvk_swiftshader.so", "api_version": "1.3.0"}}"#;
        assert_eq!(vulkan_library(m).as_deref(), Some("libvk_swiftshader.so"));
        let m = r#"{"file_format_version": "1.0.1", "ICD": {"library_path": "./lib/x.so"}}"#;
        assert_eq!(vulkan_library(m).as_deref(), Some("./lib/x.so"));
        for bad in [
            "",
            "not json",
            r#"{"file_format_version": "1.0.0"}"#,
            r#"{"ICD": {"library_path": 3}}"#,
            r#"{"ICD": {"library_path": " "}}"#,
            r#"{"layer": {"library_path": "libVkLayer_x.so"}}"#,
            r#"{"ICD": {"library_path": "libx.so"}"#,
        ] {
            assert_eq!(vulkan_library(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_opencl_vendor_file_names_its_library_on_its_first_line() {
        assert_eq!(
            opencl_library("\n  libigdrcl.so  \nignored\n").as_deref(),
            Some("libigdrcl.so")
        );
        assert_eq!(opencl_library(" \n\n"), None);
    }

    #[test]
    fn a_library_counts_by_its_name_up_to_so() {
        for (name, stem) in [
            ("libvk_swiftshader.so", "libvk_swiftshader"),
            ("libamdocl64.so.1.2", "libamdocl64"),
            ("libfoo.something.so", "libfoo.something"),
            ("libsoap.so", "libsoap"),
            ("nvcuda.dll", "nvcuda"),
            ("plain", "plain"),
        ] {
            assert_eq!(driver_stem(name), stem, "{name}");
        }
    }

    #[test]
    fn manifests_are_found_where_the_loaders_look_and_bad_ones_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let data = root.join("data");
        let icd = data.join("vulkan/icd.d");
        std::fs::create_dir_all(&icd).unwrap();
        let lib = root.join("real/libvk_real.so.1.0");
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::write(&lib, b"").unwrap();
        std::fs::create_dir_all(icd.join("lib")).unwrap();
        std::os::unix::fs::symlink(&lib, icd.join("lib/libvk_link.so")).unwrap();
        let manifest = |library: &str| {
            let mut path = String::new();
            crate::json::Write::write(library, &mut path);
            format!(r#"{{"file_format_version": "1.0.0", "ICD": {{"library_path": {path}}}}}"#)
        };
        std::fs::write(icd.join("a.json"), manifest("libvk_bare.so.1")).unwrap();
        // Relative to the manifest's directory; leads to libvk_real.
        std::fs::write(icd.join("b.json"), manifest("./lib/libvk_link.so")).unwrap();
        std::fs::write(icd.join("c.json"), "{ not json").unwrap();
        std::fs::write(icd.join("d.json"), manifest("libvulkan.so.1")).unwrap();
        std::fs::write(icd.join("e.txt"), manifest("libvk_not_a_manifest.so")).unwrap();
        std::fs::create_dir(icd.join("f.json")).unwrap();
        std::fs::write(icd.join("g.json"), " ".repeat(70 << 10)).unwrap();
        let added = root.join("added.json");
        std::fs::write(&added, manifest("/opt/x/libvk_added.so")).unwrap();
        let vendors = root.join("vendors");
        std::fs::create_dir(&vendors).unwrap();
        std::fs::write(vendors.join("intel.icd"), "libigdrcl.so\n").unwrap();
        let vars = [
            ("XDG_DATA_DIRS", data.as_os_str().to_owned()),
            ("VK_ADD_DRIVER_FILES", added.as_os_str().to_owned()),
            ("OCL_ICD_VENDORS", vendors.as_os_str().to_owned()),
            ("OCL_ICD_FILENAMES", OsString::from("/opt/y/libpocl.so.2")),
            ("ZE_ENABLE_ALT_DRIVERS", OsString::from("libze_other.so,")),
            ("HOME", root.join("home").into_os_string()),
        ];
        let lookup = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        };
        let found = installed(lookup);
        for yes in [
            "libvk_bare",
            "libvk_link",
            "libvk_real",
            "libvk_added",
            "libigdrcl",
            "libpocl",
            "libze_other",
        ] {
            assert!(found.contains(yes), "{yes} not in {found:?}");
        }
        for no in ["libvulkan", "libvk_not_a_manifest", ""] {
            assert!(!found.contains(no), "{no:?} in {found:?}");
        }
        let (places, _) = search(&lookup);
        let places: Vec<&Path> = places.iter().map(|(p, _)| p.as_path()).collect();
        for dir in [
            root.join("home/.config/vulkan/icd.d"),
            root.join("home/.local/share/vulkan/icd.d"),
            PathBuf::from("/etc/xdg/vulkan/icd.d"),
            PathBuf::from("/etc/vulkan/icd.d"),
            icd.clone(),
            PathBuf::from("/etc/OpenCL/vendors"),
        ] {
            assert!(
                places.contains(&dir.as_path()),
                "{} not in {places:?}",
                dir.display()
            );
        }
        // A file in OCL_ICD_VENDORS that is not a `.icd` is the library itself.
        let library = root.join("libamd_elsewhere.so.1");
        std::fs::write(&library, b"\x7fELF").unwrap();
        let found =
            installed(|name| (name == "OCL_ICD_VENDORS").then(|| library.as_os_str().to_owned()));
        assert!(found.contains("libamd_elsewhere"), "{found:?}");
        // XDG_DATA_DIRS replaces the default data directories, as the loader does.
        assert!(
            !places.contains(&Path::new("/usr/share/vulkan/icd.d")),
            "{places:?}"
        );
    }

    #[test]
    fn a_manifest_is_read_up_to_its_bound_and_a_fifo_is_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("m.json");
        let body = r#"{"ICD": {"library_path": "libvk_x.so"}}"#;
        let just = format!(
            "{body}{}",
            " ".repeat(LARGEST_MANIFEST as usize - body.len())
        );
        std::fs::write(&at, &just).unwrap();
        assert_eq!(read_small(&at).as_deref(), Some(just.as_str()));
        std::fs::write(&at, format!("{just} ")).unwrap();
        assert_eq!(read_small(&at), None);
        std::fs::write(&at, b"\xff\xfe").unwrap();
        assert_eq!(read_small(&at), None, "not UTF-8");
        // A FIFO among the manifests: skipped at once.
        let fifo = dir.path().join("fifo.json");
        assert!(crate::sys::make_fifo(&fifo));
        assert_eq!(read_small(&fifo), None);
        let found = installed(|name| (name == "VK_DRIVER_FILES").then(|| fifo.clone().into()));
        // Nothing more than the machine's own manifests name.
        assert_eq!(found.0, installed(|_| None).0);
    }

    #[test]
    fn manifests_of_any_bytes_read_without_a_panic() {
        use crate::fuzz_tests::{corpus, mutate, run};
        let samples: Vec<&[u8]> = vec![
            br#"{"file_format_version": "1.0.0", "ICD": {"library_path": "libvk_swiftshader.so", "api_version": "1.3.0"}}"#,
            br#"{"file_format_version": "1.0.1", "ICD": {"library_path": "./lib/x.so"}}"#,
            b"\n  libigdrcl.so  \nignored\n",
            b"/opt/rocm/lib/libamdocl64.so\n",
        ];
        let check = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            if let Some(library) = vulkan_library(&text) {
                assert!(!library.trim().is_empty() && library.len() <= text.len());
            }
            if let Some(library) = opencl_library(&text) {
                assert!(!library.is_empty() && library.trim() == library);
                assert!(text.contains(&library));
            }
            let stem = driver_stem(file_name(&text));
            assert!(text.ends_with(file_name(&text)) && file_name(&text).starts_with(stem));
        };
        for (_, bytes) in corpus("icd") {
            check(&bytes);
        }
        let ran = run("icd", 20_000, &mut |rng| {
            let input = if rng.one_in(4) {
                rng.bytes(b"{}[]\":,ICD library_path./\\\n ")
            } else {
                let sample = rng.sample(&samples);
                mutate(rng, sample, &samples)
            };
            check(&input);
        });
        eprintln!("icd: {ran} cases");
        // Whole directories of such files, read as the loaders' places.
        let dir = tempfile::tempdir().unwrap();
        let mut rng = crate::fuzz_tests::Rng::new(ran);
        for i in 0..20 {
            let sample = rng.sample(&samples);
            let bytes = mutate(&mut rng, sample, &samples);
            std::fs::write(dir.path().join(format!("{i}.json")), &bytes).unwrap();
            std::fs::write(dir.path().join(format!("{i}.icd")), &bytes).unwrap();
        }
        let at = dir.path().as_os_str().to_owned();
        let found = installed(|name| match name {
            "VK_DRIVER_FILES" | "OCL_ICD_VENDORS" => Some(at.clone()),
            _ => None,
        });
        // Each file adds a name, and the file a path leads to, to the machine's own.
        let machine = installed(|_| None).0.len();
        assert!(found.0.len() <= machine + 2 * 40, "{found:?}");
    }

    #[test]
    fn loaders_are_known() {
        assert!(is_loader("/usr/lib/x86_64-linux-gnu/libvulkan.so.1"));
        assert!(is_loader("libOpenCL.so.1"));
        assert!(!is_loader("libvulkan_lvp.so"));
    }
}
