//! Just enough of ELF to follow an executable's dependencies: the `DT_NEEDED` names and the
//! `DT_SONAME` of a file, read through its program headers as the loader reads them.
//!
//! Every file read here is one this process did not write and may not trust: a library it
//! mapped, which any user may have made (a `dlopen` of a path under `/tmp`, a file mapped by a
//! test). So no value of the file is trusted: every offset, size and count is checked
//! (`checked_*`, slices by `get`), every read is bounded ([`MOST`], the process's budget of
//! bytes read from others' files, `sys::FOREIGN_READ_BUDGET`), and a file that is not a
//! regular one once opened (a FIFO put at the name) is not read. A file that is no ELF file,
//! or a wrong one, reads as `None` or as fewer names: never a panic, a hang or a large
//! allocation in a test process's first permit.

use std::path::Path;

use crate::sys::{LookedAt, read_looked_at};

/// The most of a file's program headers, dynamic section and string table that is read: a
/// library's are a few KiB.
const MOST: u64 = 4 << 20;

/// The most `DT_NEEDED` entries of one file that are read: a library names a few dozen.
const MOST_NEEDED: usize = 1024;

/// The longest name read from a string table: a library's name is a file name, at most
/// `NAME_MAX` (255) bytes; a longer one is no library's.
const LONGEST_NAME: usize = 4096;

/// What the dynamic section of an ELF file names.
#[derive(Debug, Default)]
pub(super) struct Dynamic {
    /// Its `DT_NEEDED` entries: the libraries it was linked to (at most [`MOST_NEEDED`]).
    pub(super) needed: Vec<String>,
    /// Its `DT_SONAME`, the name others are linked to it by.
    pub(super) soname: Option<String>,
}

/// Reads the dynamic section of the ELF file at `path`; `None` where it is not one (or has
/// none). Only a regular file is read: a process also maps devices (`/dev/nvidia0`,
/// `/dev/dri/renderD128`), and opening one of those is no look at all. The file is opened
/// without blocking and then asked what it is (`sys::open_to_look`), so that a FIFO put at
/// the name after a look at it blocks nothing.
pub(super) fn dynamic(path: &Path) -> Option<Dynamic> {
    let Ok(mut file) = crate::sys::open_to_look(path) else {
        return None;
    };
    dynamic_of(&mut file)
}

/// [`dynamic`] of an open file.
fn dynamic_of(file: &mut LookedAt) -> Option<Dynamic> {
    let ident = read_looked_at(file, 0, 64)?;
    if ident.get(..4)? != b"\x7fELF" {
        return None;
    }
    let wide = match *ident.get(4)? {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little = match *ident.get(5)? {
        1 => true,
        2 => false,
        _ => return None,
    };
    let r = Reader { wide, little };
    let h = ident.get(..if wide { 64 } else { 52 })?;
    let phoff = r.word(h, 32, 28)?;
    let (phentsize, phnum) = if wide { (54, 56) } else { (42, 44) };
    let (phentsize, phnum) = (u64::from(r.u16(h, phentsize)?), u64::from(r.u16(h, phnum)?));
    let table = phnum.checked_mul(phentsize)?;
    if phentsize < if wide { 56 } else { 32 } || phnum == 0 || table > MOST {
        return None;
    }
    let headers = read_looked_at(file, phoff, table)?;
    // (vaddr, offset, filesz) of each PT_LOAD; (offset, filesz) of PT_DYNAMIC.
    let mut loads = Vec::new();
    let mut dynamic = None;
    for h in headers.chunks_exact(usize::try_from(phentsize).ok()?) {
        let kind = r.u32(h, 0)?;
        let (offset, vaddr, filesz) = (r.word(h, 8, 4)?, r.word(h, 16, 8)?, r.word(h, 32, 16)?);
        match kind {
            1 => loads.push((vaddr, offset, filesz)),
            2 => dynamic = Some((offset, filesz)),
            _ => {}
        }
    }
    let (offset, size) = dynamic?;
    let entries = read_looked_at(file, offset, size.min(MOST))?;
    let entry = if wide { 16 } else { 8 };
    let (mut strtab, mut strsz, mut needed, mut soname) = (None, None, Vec::new(), None);
    for e in entries.chunks_exact(entry) {
        let (tag, val) = (r.word(e, 0, 0)?, r.word(e, 8, 4)?);
        match tag {
            0 => break,
            1 if needed.len() < MOST_NEEDED => needed.push(val),
            5 => strtab = Some(val),
            10 => strsz = Some(val),
            14 => soname = Some(val),
            _ => {}
        }
    }
    // DT_STRTAB is an address: the file offset is that of the segment holding it.
    let strtab = strtab?;
    let mut at = None;
    for &(vaddr, seg_offset, filesz) in &loads {
        // Within the segment's bytes in the file, at an offset that fits in a `u64`.
        if let Some(into) = strtab.checked_sub(vaddr)
            && into < filesz
            && let Some(offset) = seg_offset.checked_add(into)
        {
            at = Some(offset);
            break;
        }
    }
    let strings = read_looked_at(file, at?, strsz.unwrap_or(MOST).min(MOST))?;
    let mut names = Vec::new();
    for &at in &needed {
        if let Some(name) = string_at(&strings, at) {
            names.push(name);
        }
    }
    let soname = match soname {
        Some(at) => string_at(&strings, at),
        None => None,
    };
    Some(Dynamic {
        needed: names,
        soname,
    })
}

/// The NUL-terminated string at offset `at` of string table `strings`; `None` where the table
/// ends before its NUL, or it is longer than [`LONGEST_NAME`].
fn string_at(strings: &[u8], at: u64) -> Option<String> {
    let rest = strings.get(usize::try_from(at).ok()?..)?;
    let mut end = 0;
    while *rest.get(end)? != 0 {
        end += 1;
        if end > LONGEST_NAME {
            return None;
        }
    }
    Some(String::from_utf8_lossy(rest.get(..end)?).into_owned())
}

/// Reads the file's integers in its class and byte order; `None` past the end of the bytes.
struct Reader {
    wide: bool,
    little: bool,
}

impl Reader {
    fn u16(&self, b: &[u8], at: usize) -> Option<u16> {
        let b: [u8; 2] = b.get(at..at + 2)?.try_into().ok()?;
        Some(if self.little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        })
    }

    fn u32(&self, b: &[u8], at: usize) -> Option<u64> {
        let b: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(u64::from(if self.little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }))
    }

    /// The word of the file's class (8 bytes or 4) at `wide_at` or `narrow_at` of `b`.
    fn word(&self, b: &[u8], wide_at: usize, narrow_at: usize) -> Option<u64> {
        if self.wide {
            self.u64(b, wide_at)
        } else {
            self.u32(b, narrow_at)
        }
    }

    fn u64(&self, b: &[u8], at: usize) -> Option<u64> {
        let b: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
        Some(if self.little {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        })
    }
}

/// The files among `mapped` (paths) that the executable at `exe` depends on, transitively:
/// each `DT_NEEDED` name is the file of that name among `mapped`, or the one whose
/// `DT_SONAME` it is (a library found through a link: `libcuda.so.1` mapped as
/// `libcuda.so.580.95.05`). Sonames are read only for names no mapped file bears.
pub(super) fn needed_closure(exe: &Path, mapped: &[String]) -> Vec<String> {
    let mut sonames: Option<Vec<Option<String>>> = None;
    let mut reached: Vec<usize> = Vec::new();
    let mut queue: Vec<String> = match dynamic(exe) {
        Some(d) => d.needed,
        None => Vec::new(),
    };
    let mut asked: Vec<String> = Vec::new();
    while let Some(name) = queue.pop() {
        if asked.contains(&name) {
            continue;
        }
        let file = super::library_name(&name);
        let mut found = None;
        for (at, m) in mapped.iter().enumerate() {
            if super::library_name(m) == file {
                found = Some(at);
                break;
            }
        }
        if found.is_none() {
            found = soname_position(mapped, &mut sonames, file);
        }
        asked.push(name);
        let Some(at) = found else { continue };
        if reached.contains(&at) {
            continue;
        }
        reached.push(at);
        if let Some(mut d) = dynamic(Path::new(&mapped[at])) {
            queue.append(&mut d.needed);
        }
    }
    crate::order::sort(&mut reached);
    let mut files = Vec::with_capacity(reached.len());
    for &at in &reached {
        files.push(mapped[at].clone());
    }
    files
}

/// The position among `mapped` of the file whose `DT_SONAME` is `name`; `sonames` holds the
/// sonames of `mapped`, read the first time they are asked for.
fn soname_position(
    mapped: &[String],
    sonames: &mut Option<Vec<Option<String>>>,
    name: &str,
) -> Option<usize> {
    if sonames.is_none() {
        let mut read = Vec::with_capacity(mapped.len());
        for m in mapped {
            read.push(match dynamic(Path::new(m)) {
                Some(d) => d.soname,
                None => None,
            });
        }
        *sonames = Some(read);
    }
    let sonames = sonames.as_ref()?;
    let mut at = 0;
    while at < sonames.len() {
        if sonames[at].as_deref() == Some(name) {
            return Some(at);
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_needs_the_c_library() {
        // Where a process's maps can be read (Linux), its executable is an ELF file.
        let Some(mapped) = crate::sys::mapped_files() else {
            return;
        };
        let exe = std::env::current_exe().unwrap();
        let d = dynamic(&exe).expect("a test binary is a dynamic ELF file");
        assert!(d.needed.iter().any(|n| n.starts_with("libc.so")), "{d:?}");
        let closure = needed_closure(&exe, &mapped);
        assert!(
            closure
                .iter()
                .any(|p| super::super::library_name(p).starts_with("libc.so")),
            "{closure:?}"
        );
        let libc = closure
            .iter()
            .find(|p| super::super::library_name(p).starts_with("libc.so"))
            .unwrap();
        assert_eq!(
            dynamic(Path::new(libc)).unwrap().soname.as_deref(),
            Some("libc.so.6")
        );
        assert!(dynamic(Path::new("/proc/self/status")).is_none());
        assert!(dynamic(Path::new("/dev/null")).is_none());
        assert!(dynamic(Path::new("/nonexistent")).is_none());
    }
}

/// Property tests of [`dynamic`] over files built here and mutated (`crate::fuzz_tests`).
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::fuzz_tests::{Rng, corpus, mutate, run};

    /// An ELF file to build: its class, byte order, `DT_NEEDED` names and `DT_SONAME`.
    struct Elf {
        wide: bool,
        little: bool,
        needed: Vec<String>,
        soname: Option<String>,
    }

    /// The bytes of `e`, and the places (offset, width) of the integers [`dynamic`] reads: the
    /// header's, the program headers', the dynamic entries'. One `PT_LOAD` maps the whole file
    /// at 0x1000; the string table, then the dynamic section, follow the program headers.
    fn build(e: &Elf) -> (Vec<u8>, Vec<(usize, usize)>) {
        let word = if e.wide { 8 } else { 4 };
        let (header, phent) = if e.wide { (64, 56) } else { (52, 32) };
        let mut strings = vec![0u8];
        let mut offsets = Vec::new();
        for n in e.needed.iter().chain(e.soname.iter()) {
            offsets.push(strings.len() as u64);
            strings.extend_from_slice(n.as_bytes());
            strings.push(0);
        }
        let strtab = header + 2 * phent;
        let dynamic = strtab + strings.len();
        let mut entries: Vec<(u64, u64)> = Vec::new();
        for (i, _) in e.needed.iter().enumerate() {
            entries.push((1, offsets[i]));
        }
        if e.soname.is_some() {
            entries.push((14, *offsets.last().unwrap()));
        }
        entries.push((5, 0x1000 + strtab as u64));
        entries.push((10, strings.len() as u64));
        entries.push((0, 0));
        let total = dynamic + entries.len() * 2 * word;
        let mut out = vec![0u8; total];
        let mut fields = Vec::new();
        let mut put = |out: &mut Vec<u8>, at: usize, width: usize, v: u64| {
            let bytes = if e.little {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            let bytes = if e.little {
                &bytes[..width]
            } else {
                &bytes[8 - width..]
            };
            out[at..at + width].copy_from_slice(bytes);
            fields.push((at, width));
        };
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = if e.wide { 2 } else { 1 };
        out[5] = if e.little { 1 } else { 2 };
        let (phoff, phentsize, phnum) = if e.wide { (32, 54, 56) } else { (28, 42, 44) };
        put(&mut out, phoff, word, header as u64);
        put(&mut out, phentsize, 2, phent as u64);
        put(&mut out, phnum, 2, 2);
        // (type, offset, vaddr, filesz) at the class's places.
        let (o_off, o_vaddr, o_filesz) = if e.wide { (8, 16, 32) } else { (4, 8, 16) };
        for (i, (kind, offset, vaddr, filesz)) in [
            (1u64, 0u64, 0x1000u64, total as u64),
            (
                2,
                dynamic as u64,
                0x1000 + dynamic as u64,
                (total - dynamic) as u64,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let at = header + i * phent;
            put(&mut out, at, 4, kind);
            put(&mut out, at + o_off, word, offset);
            put(&mut out, at + o_vaddr, word, vaddr);
            put(&mut out, at + o_filesz, word, filesz);
        }
        out[strtab..strtab + strings.len()].copy_from_slice(&strings);
        for (i, (tag, val)) in entries.into_iter().enumerate() {
            let at = dynamic + i * 2 * word;
            put(&mut out, at, word, tag);
            put(&mut out, at + word, word, val);
        }
        (out, fields)
    }

    /// A random [`Elf`]: names of any bytes, some long.
    fn any_elf(rng: &mut Rng) -> Elf {
        let name = |rng: &mut Rng| -> String {
            let mut n = String::from_utf8_lossy(&rng.bytes(b"libcuda.so.1")).into_owned();
            n.retain(|c| c != '\0');
            // Within the longest name read, a bad byte being three once lossy.
            while n.len() > LONGEST_NAME {
                n.pop();
            }
            n
        };
        let mut needed = Vec::new();
        for _ in 0..rng.below(6) {
            needed.push(name(rng));
        }
        Elf {
            wide: rng.one_in(2),
            little: rng.one_in(2),
            soname: if rng.one_in(2) { Some(name(rng)) } else { None },
            needed,
        }
    }

    /// [`dynamic`] of a file holding `bytes`, written at `path`.
    fn dynamic_of_bytes(path: &Path, bytes: &[u8]) -> Option<Dynamic> {
        std::fs::write(path, bytes).unwrap();
        dynamic(path)
    }

    /// What [`dynamic`] must do with any file: answer, and within its bounds.
    fn check_bounded(d: &Option<Dynamic>) {
        if let Some(d) = d {
            assert!(d.needed.len() <= MOST_NEEDED, "{}", d.needed.len());
            for n in d.needed.iter().chain(d.soname.iter()) {
                // Lossy: a bad byte is three.
                assert!(n.len() <= 3 * LONGEST_NAME, "{}", n.len());
            }
        }
    }

    /// The file of Hardening 5: its `PT_LOAD` says the segment holding the string table starts
    /// near the end of the offsets a `u64` holds, so that the string table's file offset
    /// overflows (a panic in a dev build's first permit, before the offset was checked).
    pub(crate) fn strtab_past_u64() -> Vec<u8> {
        let e = Elf {
            wide: true,
            little: true,
            needed: vec!["libc.so.6".into()],
            soname: Some("libcuda.so.1".into()),
        };
        let (mut bytes, _) = build(&e);
        // The PT_LOAD's p_offset, after the 64-byte header.
        bytes[64 + 8..64 + 16].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        bytes
    }

    #[test]
    fn built_files_read_back_as_built() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.so");
        let mut rng = Rng::new(5);
        for _ in 0..200 {
            let e = any_elf(&mut rng);
            let (bytes, _) = build(&e);
            let d = dynamic_of_bytes(&path, &bytes).expect("a built file is an ELF file");
            assert_eq!(d.needed, e.needed);
            assert_eq!(d.soname, e.soname);
        }
    }

    #[test]
    fn the_file_whose_string_table_offset_overflows_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libcuda.so.1");
        assert!(dynamic_of_bytes(&path, &strtab_past_u64()).is_none());
        // The copy kept for the replay below and the process test (`cli/tests/it/watch.rs`)
        // is this file.
        let kept = corpus("elf");
        if crate::fuzz_tests::keep() {
            // Writes the copy anew: `GTP_FUZZ_KEEP=1 cargo test the_file_whose_string`.
            let at = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/fuzz/elf/strtab-past-u64.elf");
            std::fs::write(at, strtab_past_u64()).unwrap();
            return;
        }
        assert!(
            kept.iter()
                .any(|(p, b)| p.ends_with("strtab-past-u64.elf") && *b == strtab_past_u64()),
            "tests/data/fuzz/elf/strtab-past-u64.elf is not the file built here"
        );
    }

    #[test]
    fn short_odd_and_special_files_read_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for bytes in [
            &b""[..],
            b"\x7fEL",
            b"\x7fELF",
            b"\x7fELF\x02\x01",
            b"\x7fELF\x01\x02\x01",
            b"\x7fELF\x03\x01",
            &[
                0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0,
            ],
        ] {
            assert!(dynamic_of_bytes(&path, bytes).is_none(), "{bytes:?}");
        }
        assert!(dynamic(dir.path()).is_none(), "a directory");
        // A FIFO at a library's name (where the platform has them): refused at the open,
        // never waited on.
        let fifo = dir.path().join("libcuda.so.1");
        if crate::sys::make_fifo(&fifo) {
            assert!(dynamic(&fifo).is_none());
        }
    }

    #[test]
    fn elf_files_of_any_bytes_read_without_a_panic_and_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libfuzz.so");
        for (p, bytes) in corpus("elf") {
            eprintln!("replaying {}", p.display());
            check_bounded(&dynamic_of_bytes(&path, &bytes));
        }
        let mut parsed = 0;
        let ran = run("elf", 5_000, &mut |rng| {
            let e = any_elf(rng);
            let (mut bytes, fields) = build(&e);
            match rng.below(4) {
                // Arbitrary bytes after a valid start.
                0 => {
                    bytes.truncate(rng.below(bytes.len() + 1));
                    bytes.extend(rng.bytes(&[]));
                }
                // Bytes mutated.
                1 => bytes = mutate(rng, &bytes, &[]),
                // Integers the reader trusts set to edge values.
                _ => {
                    for _ in 0..1 + rng.below(3) {
                        let (at, width) = *rng.pick(&fields);
                        let v = rng.edge_u64().to_le_bytes();
                        bytes[at..at + width].copy_from_slice(&v[..width]);
                    }
                }
            }
            let d = dynamic_of_bytes(&path, &bytes);
            parsed += u64::from(d.is_some());
            check_bounded(&d);
        });
        eprintln!("elf: {ran} cases, {parsed} read as ELF files");
    }

    #[test]
    fn many_needed_names_and_long_names_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.so");
        let mut needed = Vec::new();
        for i in 0..MOST_NEEDED + 10 {
            needed.push(format!("lib{i}.so"));
        }
        let e = Elf {
            wide: true,
            little: true,
            needed,
            soname: Some("y".repeat(LONGEST_NAME)),
        };
        let d = dynamic_of_bytes(&path, &build(&e).0).unwrap();
        assert_eq!(d.needed.len(), MOST_NEEDED);
        assert_eq!(d.needed[..], e.needed[..MOST_NEEDED]);
        assert_eq!(d.soname, e.soname);
        let mut long = vec![b'x'; LONGEST_NAME + 1];
        long.push(0);
        assert_eq!(string_at(&long, 0), None);
        assert_eq!(string_at(&long, 1).map(|n| n.len()), Some(LONGEST_NAME));
        assert_eq!(string_at(&long, u64::MAX), None);
        assert_eq!(string_at(b"abc", 0), None, "no NUL");
    }
}
