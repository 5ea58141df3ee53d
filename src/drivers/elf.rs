//! Just enough of ELF to follow an executable's dependencies: the `DT_NEEDED` names and the
//! `DT_SONAME` of a file, read through its program headers as the loader reads them.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The most of a file's dynamic section and string table that is read: a library's are a
/// few KiB.
const MOST: u64 = 4 << 20;

/// What the dynamic section of an ELF file names.
#[derive(Debug, Default)]
pub(super) struct Dynamic {
    /// Its `DT_NEEDED` entries: the libraries it was linked to.
    pub(super) needed: Vec<String>,
    /// Its `DT_SONAME`, the name others are linked to it by.
    pub(super) soname: Option<String>,
}

/// Reads the dynamic section of the ELF file at `path`; `None` where it is not one (or has
/// none). Only a regular file is opened: a process also maps devices (`/dev/nvidia0`,
/// `/dev/dri/renderD128`), and opening one of those is no look at all.
pub(super) fn dynamic(path: &Path) -> Option<Dynamic> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => {}
        _ => return None,
    }
    let Ok(mut file) = File::open(path) else {
        return None;
    };
    let mut ident = [0u8; 64];
    if file.read_exact(&mut ident[..16]).is_err() {
        return None;
    }
    if &ident[..4] != b"\x7fELF" {
        return None;
    }
    let wide = match ident[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little = match ident[5] {
        1 => true,
        2 => false,
        _ => return None,
    };
    let header_len = if wide { 64 } else { 52 };
    if file.read_exact(&mut ident[16..header_len]).is_err() {
        return None;
    }
    let r = Reader { wide, little };
    let h = &ident[..header_len];
    let phoff = r.word(h, 32, 28);
    let (phentsize, phnum) = if wide { (54, 56) } else { (42, 44) };
    let (phentsize, phnum) = (
        u64::from(r.u16(&h[phentsize..])),
        u64::from(r.u16(&h[phnum..])),
    );
    if phentsize < if wide { 56 } else { 32 } || phnum == 0 || phnum * phentsize > MOST {
        return None;
    }
    let headers = read_at(&mut file, phoff, phnum * phentsize)?;
    // (vaddr, offset, filesz) of each PT_LOAD; (offset, filesz) of PT_DYNAMIC.
    let mut loads = Vec::new();
    let mut dynamic = None;
    for h in headers.chunks_exact(phentsize as usize) {
        let kind = r.u32(h);
        let (offset, vaddr, filesz) = (r.word(h, 8, 4), r.word(h, 16, 8), r.word(h, 32, 16));
        match kind {
            1 => loads.push((vaddr, offset, filesz)),
            2 => dynamic = Some((offset, filesz)),
            _ => {}
        }
    }
    let (offset, size) = dynamic?;
    let entries = read_at(&mut file, offset, size.min(MOST))?;
    let entry = if wide { 16 } else { 8 };
    let (mut strtab, mut strsz, mut needed, mut soname) = (None, None, Vec::new(), None);
    for e in entries.chunks_exact(entry) {
        let (tag, val) = (r.word(e, 0, 0), r.word(e, 8, 4));
        match tag {
            0 => break,
            1 => needed.push(val),
            5 => strtab = Some(val),
            10 => strsz = Some(val),
            14 => soname = Some(val),
            _ => {}
        }
    }
    // DT_STRTAB is an address: the file offset is that of the segment holding it.
    let strtab = strtab?;
    let mut segment = None;
    for &(vaddr, seg_offset, filesz) in &loads {
        if strtab >= vaddr && strtab - vaddr < filesz {
            segment = Some((vaddr, seg_offset));
            break;
        }
    }
    let (vaddr, seg_offset) = segment?;
    let strings = read_at(
        &mut file,
        seg_offset + (strtab - vaddr),
        strsz.unwrap_or(MOST).min(MOST),
    )?;
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

/// The NUL-terminated string at offset `at` of string table `strings`.
fn string_at(strings: &[u8], at: u64) -> Option<String> {
    let rest = strings.get(usize::try_from(at).ok()?..)?;
    // None where the table ends before a NUL.
    let mut end = 0;
    while *rest.get(end)? != 0 {
        end += 1;
    }
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Up to `len` bytes of `file` from `offset` (fewer where it ends first).
fn read_at(file: &mut File, offset: u64, len: u64) -> Option<Vec<u8>> {
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return None;
    }
    let mut out = Vec::new();
    file.take(len).read_to_end(&mut out).ok()?;
    Some(out)
}

/// Reads the file's integers in its class and byte order.
struct Reader {
    wide: bool,
    little: bool,
}

impl Reader {
    fn u16(&self, b: &[u8]) -> u16 {
        let b = [b[0], b[1]];
        if self.little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }
    }

    fn u32(&self, b: &[u8]) -> u64 {
        let b = [b[0], b[1], b[2], b[3]];
        u64::from(if self.little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    }

    /// The word of the file's class (8 bytes or 4) at `wide_at` or `narrow_at` of `b`.
    fn word(&self, b: &[u8], wide_at: usize, narrow_at: usize) -> u64 {
        if self.wide {
            self.u64(&b[wide_at..])
        } else {
            self.u32(&b[narrow_at..])
        }
    }

    fn u64(&self, b: &[u8]) -> u64 {
        debug_assert!(self.wide);
        let b = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        if self.little {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        }
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
