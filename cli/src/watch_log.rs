//! What a watched command's dynamic-loader logs say (`gpu-test-permit watch`, `run --watch`):
//! the GPU drivers each process loaded, with a permit or without, and those its program was
//! linked to at build time. The test processes write the held and free marks into their logs
//! (the library's [`HELD_MARK`], [`FREE_MARK`]); the command reads the logs here once the
//! command has ended, however long they are, and records what they say in the run's records.
//!
//! ```
//! use gpu_test_permit_cli::watch_log::read_watch_log;
//!
//! let log = "\
//!     4242:\tfile=libcuda.so.1 [0];  needed by ./tests [0]
//!     4242:\tfile=libcuda.so.1 [0];  generating link map
//!     4242:\ttransferring control: ./tests
//!     4242:\tfile=libvulkan_radeon.so [0];  dynamically loaded by libvulkan.so.1 [0]
//!     4242:\tfile=libvulkan_radeon.so [0];  generating link map
//! gpu-test-permit: held
//!     4242:\tfile=/usr/lib/libvulkan_lvp.so [0];  dynamically loaded by libvulkan.so.1 [0]
//!     4242:\tfile=/usr/lib/libvulkan_lvp.so [0];  generating link map
//! gpu-test-permit: free
//! ";
//! let seen = read_watch_log(log);
//! assert_eq!(seen.linked, ["libcuda.so.1"]); // linked at build time: not an escape
//! assert_eq!(seen.loaded, ["libvulkan_radeon.so", "/usr/lib/libvulkan_lvp.so"]);
//! assert_eq!(seen.unpermitted, ["libvulkan_radeon.so"]);
//! assert!(seen.before_first_permit);
//! ```

use gpu_test_permit::__private::drivers::{FREE_MARK, HELD_MARK, driver_library, library_name};

/// What a watched process's loader log says (or, merged with [`WatchLog::merge`], the logs of
/// every process of a watched command).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchLog {
    /// The GPU driver libraries it loaded as it ran (by `dlopen`, or as a dependency of a
    /// library it loaded so), in order, each once. Not those in `linked`.
    pub loaded: Vec<String>,
    /// Those it loaded while it held no permit (each once).
    pub unpermitted: Vec<String>,
    /// Whether one of them was loaded before the process's first permit.
    pub before_first_permit: bool,
    /// Whether it held a permit at all.
    pub held: bool,
    /// Whether a process the command started (a tool or helper a test runs), not the
    /// command's own, loaded one of `unpermitted`. Set by the watcher, which knows which log
    /// is whose; [`merge`](Self::merge) keeps it where either has it.
    pub started_process: bool,
    /// The GPU driver libraries the program was linked to at build time: mapped as the
    /// program started, before its first instruction (the loader's `transferring control`),
    /// as the executable's dependencies (`DT_NEEDED`, transitively). Mapping a driver touches
    /// no GPU (creating a context does), so these are never loads without a permit.
    pub linked: Vec<String>,
}

impl WatchLog {
    /// Records what this says of watched command `pid` (the running test's) in the run's
    /// records, when this runs under nextest: a record for every watched test, one that
    /// loaded no driver too, so that `report` knows the run was watched. Returns whether a
    /// record was written (not under nextest, none is).
    pub fn record(&self, pid: u32) -> bool {
        gpu_test_permit::__private::record_watched(gpu_test_permit::__private::Watched {
            pid,
            loaded: self.loaded.clone(),
            unpermitted: self.unpermitted.clone(),
            before_first_permit: self.before_first_permit,
            held: self.held,
            linked: self.linked.clone(),
            started_process: self.started_process,
        })
    }

    /// Adds what another process's log says: the drivers of both, each once; held where
    /// either held a permit, before a first permit where either loaded one so.
    pub fn merge(&mut self, other: WatchLog) {
        for lib in &other.loaded {
            add_once(&mut self.loaded, lib);
        }
        // Each of `unpermitted` is one of `loaded`, where `loaded` had room for it.
        for lib in &other.unpermitted {
            if self.loaded.contains(lib) {
                add_once(&mut self.unpermitted, lib);
            }
        }
        for lib in &other.linked {
            add_once(&mut self.linked, lib);
        }
        self.before_first_permit |= other.before_first_permit;
        self.held |= other.held;
        self.started_process |= other.started_process;
    }
}

/// Reads a loader log written with `LD_DEBUG=files` into which this crate wrote its marks
/// (see the [module docs](self)). A library counts where the loader maps it (`generating link
/// map`); lines it does not know are skipped. For a log in a file, [`read_watch_log_from`]
/// reads it as a stream.
pub fn read_watch_log(text: &str) -> WatchLog {
    read_watch_log_from(text.as_bytes()).unwrap_or_default()
}

/// The longest line of a loader log that is looked at: the loader's own lines name one
/// library (a path, at most `PATH_MAX`); a longer one is none of its lines, and is skipped
/// without being kept in memory.
const LONGEST_LINE: usize = 64 << 10;

/// The most drivers each list of a [`WatchLog`] holds: a machine has a few dozen driver
/// libraries. Past it, a log (which every process of the watched command writes, and which a
/// process can fill with lines of its own) adds no more, so that what is read, kept and
/// recorded stays small however the log was written.
const MOST_LIBRARIES: usize = 1024;

/// The most file names [`LogState`] keeps of what was mapped since a program started or a
/// `dlopen` began: a `dlopen` maps a few dozen libraries. Past it, names are not kept, and a
/// library then needed by one of them is taken for a new program's.
const MOST_IN_GROUP: usize = 4096;

/// Adds `name` to `to` where it is not there yet and `to` holds fewer than
/// [`MOST_LIBRARIES`]; whether `name` is in `to` now.
fn add_once(to: &mut Vec<String>, name: &str) -> bool {
    if to.iter().any(|l| l == name) {
        return true;
    }
    if to.len() < MOST_LIBRARIES {
        to.push(name.to_string());
        return true;
    }
    false
}

/// Reads a loader log, as [`read_watch_log`] does, line by line from `log`: however long the
/// log, only one line of it is in memory at a time, so a driver loaded after any amount of
/// logging is seen. Fails only where `log` cannot be read.
///
/// A log can hold more than one program: `exec` keeps the process and its log, and a new
/// program starts in it. The loader names no program's start, so one is recognised where a
/// library is mapped as the dependency (`needed by`) of an object that nothing since the last
/// `dlopen` mapped: that is the new executable itself. The new program starts without a
/// permit, and what it maps before its first instruction is its own `linked`.
pub fn read_watch_log_from(mut log: impl std::io::BufRead) -> std::io::Result<WatchLog> {
    let mut out = WatchLog::default();
    let mut state = LogState {
        starting: true,
        ..LogState::default()
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        match read_line_at_most(&mut log, &mut line, LONGEST_LINE)? {
            LineRead::End => break,
            LineRead::TooLong => continue,
            LineRead::Line => {}
        }
        state.line(&String::from_utf8_lossy(&line), &mut out);
    }
    Ok(out)
}

/// Where a log's reading stands.
#[derive(Default)]
struct LogState {
    /// The program is starting: what is mapped now is its executable's dependencies, linked
    /// at build time. Ends at its first constructor (`calling init`), whose `dlopen`s are
    /// loads of its own, or at `transferring control`.
    starting: bool,
    /// The program holds a permit (by its marks).
    holding: bool,
    /// The file names of the libraries mapped since the program started or since the last
    /// `dlopen` began: the objects whose dependencies may be mapped next.
    group: Vec<String>,
    /// The last `dlopen` was NVIDIA's management library's (`nvmlInit` loads `libcuda`): what
    /// it maps opens no context, and is no load of the test's.
    by_nvml: bool,
}

impl LogState {
    fn line(&mut self, line: &str, out: &mut WatchLog) {
        let line = line.trim_end();
        if line == HELD_MARK {
            self.holding = true;
            out.held = true;
            return;
        }
        if line == FREE_MARK {
            self.holding = false;
            return;
        }
        // `  4242:\tMESSAGE`
        let message = line.split_once(":\t").map_or(line, |(_, m)| m).trim_start();
        if [
            "calling init:",
            "initialize program:",
            "transferring control:",
        ]
        .iter()
        .any(|start| message.starts_with(start))
        {
            self.starting = false;
            return;
        }
        // `file=NAME [NS];  needed by OBJECT [NS]` or `...;  dynamically loaded by OBJECT [NS]`
        // come before the library is mapped; `file=NAME [NS];  generating link map` when it is.
        let Some((name, what)) = message
            .strip_prefix("file=")
            .and_then(|rest| rest.split_once("];  "))
            .and_then(|(name, what)| Some((name.rsplit_once(" [")?.0, what)))
        else {
            return;
        };
        if let Some(by) = what.strip_prefix("dynamically loaded by ") {
            let by = by.rsplit_once(" [").map_or(by, |(by, _)| by);
            self.by_nvml = library_name(by).starts_with("libnvidia-ml.");
            self.group.clear();
        } else if let Some(by) = what.strip_prefix("needed by ") {
            let by = by.rsplit_once(" [").map_or(by, |(by, _)| by);
            if !self.starting && !self.group.iter().any(|g| g == library_name(by)) {
                // A dependency of an object nothing mapped: a new program (see
                // `read_watch_log_from`).
                self.starting = true;
                self.holding = false;
                self.by_nvml = false;
                self.group.clear();
            }
        } else if what.trim_end() != "generating link map" {
            return;
        } else {
            self.mapped(name, out);
        }
        let file = library_name(name);
        if self.group.len() < MOST_IN_GROUP && !self.group.iter().any(|g| g == file) {
            self.group.push(file.to_string());
        }
    }

    /// The loader mapped library `name`.
    fn mapped(&self, name: &str, out: &mut WatchLog) {
        if !driver_library(name) || self.by_nvml {
            return;
        }
        if self.starting {
            add_once(&mut out.linked, name);
            return;
        }
        let kept = add_once(&mut out.loaded, name);
        if !self.holding {
            if !out.held {
                out.before_first_permit = true;
            }
            if kept {
                add_once(&mut out.unpermitted, name);
            }
        }
    }
}

/// How [`read_line_at_most`] ended.
enum LineRead {
    Line,
    TooLong,
    End,
}

/// Reads one line (without its newline) into `line`, or skips it where it is longer than
/// `most` bytes.
fn read_line_at_most(
    log: &mut impl std::io::BufRead,
    line: &mut Vec<u8>,
    most: usize,
) -> std::io::Result<LineRead> {
    let mut too_long = false;
    let mut any = false;
    loop {
        let buf = match log.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            break;
        }
        any = true;
        let (part, used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (&buf[..at], at + 1, true),
            None => (buf, buf.len(), false),
        };
        if !too_long && line.len() + part.len() <= most {
            line.extend_from_slice(part);
        } else {
            too_long = true;
            line.clear();
        }
        log.consume(used);
        if done {
            break;
        }
    }
    Ok(match (any, too_long) {
        (false, _) => LineRead::End,
        (true, true) => LineRead::TooLong,
        (true, false) => LineRead::Line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drivers_that_nvml_loads_are_no_loads_of_the_tests() {
        // As glibc logs `nvmlInit` on NVIDIA's driver 580: NVML `dlopen`s `libcuda.so.1`
        // (and keeps it). A driver the test `dlopen`s next, without a permit, is its own.
        let log = "\
   77:\ttransferring control: ./t
   77:\tfile=libnvidia-ml.so.1 [0];  dynamically loaded by ./t [0]
   77:\tfile=libnvidia-ml.so.1 [0];  generating link map
   77:\tfile=libpthread.so.0 [0];  needed by /usr/local/nvidia/lib64/libnvidia-ml.so.1 [0]
   77:\tfile=libpthread.so.0 [0];  generating link map
   77:\topening file=/usr/local/nvidia/lib64/libnvidia-ml.so.1 [0]; direct_opencount=1
   77:\tfile=libcuda.so.1 [0];  dynamically loaded by /usr/local/nvidia/lib64/libnvidia-ml.so.1 [0]
   77:\tfile=libcuda.so.1 [0];  generating link map
   77:\tfile=libm.so.6 [0];  needed by /usr/local/nvidia/lib64/libcuda.so.1 [0]
   77:\tfile=libm.so.6 [0];  generating link map
gpu-test-permit: held
gpu-test-permit: free
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  dynamically loaded by ./t [0]
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  generating link map
";
        let seen = read_watch_log(log);
        assert_eq!(seen.loaded, ["/usr/lib/libvulkan_lvp.so"]);
        assert_eq!(seen.unpermitted, ["/usr/lib/libvulkan_lvp.so"]);
        assert!(!seen.before_first_permit && seen.held);
        // The same `libcuda` loaded by the test itself is its load.
        let own = log.replace(
            "dynamically loaded by /usr/local/nvidia/lib64/libnvidia-ml.so.1",
            "dynamically loaded by ./t",
        );
        let seen = read_watch_log(&own);
        assert_eq!(
            seen.unpermitted,
            ["libcuda.so.1", "/usr/lib/libvulkan_lvp.so"]
        );
        assert!(seen.before_first_permit);
        // A library named like NVML is not NVML.
        let like = log.replace("libnvidia-ml.so.1", "libnvidia-mlx.so.1");
        assert_eq!(
            read_watch_log(&like).unpermitted,
            ["libcuda.so.1", "/usr/lib/libvulkan_lvp.so"]
        );
    }

    #[test]
    fn a_watch_log_says_which_drivers_came_without_a_permit() {
        let log = "\
   77:\t
   77:\tfile=libm.so.6 [0];  needed by ./t [0]
   77:\tfile=libm.so.6 [0];  generating link map
   77:\t  dynamic: 0x1  base: 0x2   size: 0x3
   77:\t
   77:\ttransferring control: ./t
   77:\t
gpu-test-permit: held
   77:\tfile=libvulkan.so.1 [0];  dynamically loaded by ./t [0]
   77:\tfile=libvulkan.so.1 [0];  generating link map
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  dynamically loaded by libvulkan.so.1 [0]
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  generating link map
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  destroying link map
gpu-test-permit: free
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  generating link map
   77:\tfile=libcuda.so.1 [0];  generating link map
gpu-test-permit: held
   77:\tfile=libcuda.so.1 [0];  generating link map
garbage line file= without an end
";
        let seen = read_watch_log(log);
        assert_eq!(seen.loaded, ["/usr/lib/libvulkan_lvp.so", "libcuda.so.1"]);
        assert_eq!(
            seen.unpermitted,
            ["/usr/lib/libvulkan_lvp.so", "libcuda.so.1"]
        );
        assert!(!seen.before_first_permit);
        assert!(seen.held);

        let never = read_watch_log(
            "   9:\ttransferring control: ./t\n   9:\tfile=libcuda.so.1 [0];  generating link map\n",
        );
        assert!(never.before_first_permit && !never.held);
        assert_eq!(never.unpermitted, ["libcuda.so.1"]);
        assert_eq!(read_watch_log(""), WatchLog::default());
    }

    #[test]
    fn drivers_mapped_as_a_program_starts_are_linked_not_loaded() {
        // As glibc 2.36 writes it: the executable's dependencies, the constructors (one of
        // which loads a driver: a load of its own), then the first instruction; then an
        // `exec` in the same process, whose program links a driver too.
        let log = "\
    5:\t
    5:\tfile=libcuda.so.1 [0];  needed by ./linked [0]
    5:\tfile=libcuda.so.1 [0];  generating link map
    5:\tfile=libnvidia-ptxjitcompiler.so.1 [0];  needed by /stub/libcuda.so.1 [0]
    5:\tfile=libnvidia-ptxjitcompiler.so.1 [0];  generating link map
    5:\tcalling init: /lib/x86_64-linux-gnu/libc.so.6
    5:\tinitialize program: ./linked
    5:\tfile=libvulkan_lvp.so [0];  dynamically loaded by ./linked [0]
    5:\tfile=libvulkan_lvp.so [0];  generating link map
    5:\tfile=libLLVM-15.so.1 [0];  needed by /usr/lib/libvulkan_lvp.so [0]
    5:\tfile=libLLVM-15.so.1 [0];  generating link map
    5:\tcalling init: /usr/lib/libvulkan_lvp.so
    5:\topening file=/usr/lib/libvulkan_lvp.so [0]; direct_opencount=1
    5:\ttransferring control: ./linked
gpu-test-permit: held
    5:\tfile=libc.so.6 [0];  needed by /bin/other [0]
    5:\tfile=libc.so.6 [0];  generating link map
    5:\tfile=libvulkan_intel.so [0];  needed by /bin/other [0]
    5:\tfile=libvulkan_intel.so [0];  generating link map
    5:\ttransferring control: /bin/other
    5:\tfile=libvulkan_radeon.so [0];  dynamically loaded by /bin/other [0]
    5:\tfile=libvulkan_radeon.so [0];  generating link map
";
        let seen = read_watch_log(log);
        assert_eq!(
            seen.linked,
            [
                "libcuda.so.1",
                "libnvidia-ptxjitcompiler.so.1",
                "libvulkan_intel.so"
            ]
        );
        // The constructor's load, and the new program's load: it held none of the old one's
        // permit.
        assert_eq!(seen.loaded, ["libvulkan_lvp.so", "libvulkan_radeon.so"]);
        assert_eq!(seen.unpermitted, seen.loaded);
        assert!(seen.before_first_permit && seen.held);

        // A linked driver alone is no escape.
        let linked_only = read_watch_log(
            "  6:\tfile=libcuda.so.1 [0];  needed by ./t [0]\n  6:\tfile=libcuda.so.1 [0];  \
             generating link map\n  6:\ttransferring control: ./t\n",
        );
        assert_eq!(linked_only.linked, ["libcuda.so.1"]);
        assert!(linked_only.unpermitted.is_empty() && !linked_only.before_first_permit);
    }

    /// A small seeded generator (splitmix64), as the library's property tests use.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            if n == 0 {
                0
            } else {
                (self.next() % n as u64) as usize
            }
        }
    }

    /// The lines the loader and this crate write, to build logs from.
    const LINES: &[&str] = &[
        "   77:\tfile=libnvidia-ml.so.1 [0];  dynamically loaded by ./t [0]",
        "   77:\tfile=libcuda.so.1 [0];  dynamically loaded by /x/libnvidia-ml.so.1 [0]",
        "   77:\tfile=libcuda.so.1 [0];  generating link map",
        "   77:\tfile=libm.so.6 [0];  needed by /usr/local/nvidia/lib64/libcuda.so.1 [0]",
        "   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  dynamically loaded by ./t [0]",
        "   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  generating link map",
        "   77:\tfile=libvulkan_intel.so [0];  needed by /bin/other [0]",
        "   77:\tfile=libvulkan_intel.so [0];  generating link map",
        "   77:\tcalling init: /lib/x86_64-linux-gnu/libc.so.6",
        "   77:\ttransferring control: ./t",
        "   77:\t",
        HELD_MARK,
        FREE_MARK,
        "garbage line file= without an end",
    ];

    /// A log of up to 64 lines: the loader's, each maybe cut or changed, and bytes of any
    /// kind.
    fn any_log(rng: &mut Rng) -> Vec<u8> {
        let mut log = Vec::new();
        for _ in 0..rng.below(64) {
            let mut line = LINES[rng.below(LINES.len())].as_bytes().to_vec();
            match rng.below(6) {
                0 => line.truncate(rng.below(line.len() + 1)),
                1 if !line.is_empty() => {
                    let at = rng.below(line.len());
                    line[at] ^= 1 << rng.below(8);
                }
                2 => {
                    for _ in 0..rng.below(32) {
                        line.push(rng.next() as u8);
                    }
                }
                _ => {}
            }
            log.extend_from_slice(&line);
            if rng.below(16) != 0 {
                log.push(b'\n');
            }
        }
        log
    }

    /// How many cases, and for how long: `GTP_FUZZ_ITERS`, `GTP_FUZZ_SECONDS`, as the
    /// library's property tests read them, and the first seed (`GTP_FUZZ_SEED`).
    fn limits(default_iters: u64) -> (u64, std::time::Duration, u64) {
        let var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse().ok());
        let seed = var("GTP_FUZZ_SEED").unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.unwrap_or_default().as_nanos() as u64
        });
        let secs = var("GTP_FUZZ_SECONDS").unwrap_or(2);
        (
            var("GTP_FUZZ_ITERS").unwrap_or(default_iters),
            std::time::Duration::from_secs(secs),
            seed,
        )
    }

    /// What reading any log must give: an answer without a panic, lists within their bounds,
    /// names that the log wrote, loads without a permit among the loads, and the same answer
    /// however the stream is cut into reads.
    fn check_log(log: &[u8], read_size: usize) {
        let whole = read_watch_log_from(log).unwrap();
        let text = String::from_utf8_lossy(log);
        for list in [&whole.loaded, &whole.unpermitted, &whole.linked] {
            assert!(list.len() <= MOST_LIBRARIES);
            for name in list.iter() {
                assert!(text.contains(name.as_str()), "{name:?}");
                assert!(driver_library(name), "{name:?}");
            }
        }
        for name in &whole.unpermitted {
            assert!(whole.loaded.contains(name), "{name:?}");
        }
        let cut = std::io::BufReader::with_capacity(read_size.max(1), log);
        assert_eq!(read_watch_log_from(cut).unwrap(), whole);
    }

    #[test]
    fn logs_of_any_bytes_read_without_a_panic_and_alike_however_they_are_read() {
        let (iters, time, seed) = limits(5_000);
        let start = std::time::Instant::now();
        let mut seed = seed;
        let mut ran = 0;
        while ran < iters && (ran == 0 || start.elapsed() < time) {
            let mut rng = Rng(seed);
            let log = if rng.below(4) == 0 {
                let mut bytes = Vec::new();
                for _ in 0..rng.below(2048) {
                    bytes.push(rng.next() as u8);
                }
                bytes
            } else {
                any_log(&mut rng)
            };
            let read_size = 1 + rng.below(64);
            let case = std::panic::catch_unwind(|| check_log(&log, read_size));
            if let Err(panic) = case {
                eprintln!(
                    "fuzz watch-log: case {ran} failed; replay it with GTP_FUZZ_SEED={seed} \
                     GTP_FUZZ_ITERS=1"
                );
                std::panic::resume_unwind(panic);
            }
            ran += 1;
            seed = Rng(seed).next();
        }
        eprintln!("watch log: {ran} cases");
    }

    #[test]
    fn a_line_without_end_is_read_in_bounded_memory() {
        // 64 MiB of one line, never in memory: the line kept stays within its bound.
        struct Endless(u64);
        impl std::io::Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0 as usize);
                buf[..n].fill(b'x');
                self.0 -= n as u64;
                Ok(n)
            }
        }
        let mut log = std::io::BufReader::with_capacity(1 << 16, Endless(64 << 20));
        let mut line = Vec::new();
        assert!(matches!(
            read_line_at_most(&mut log, &mut line, LONGEST_LINE).unwrap(),
            LineRead::TooLong
        ));
        assert!(
            line.capacity() <= 2 * LONGEST_LINE + (1 << 16),
            "{}",
            line.capacity()
        );
        assert!(matches!(
            read_line_at_most(&mut log, &mut line, LONGEST_LINE).unwrap(),
            LineRead::End
        ));
    }

    #[test]
    fn the_lists_stop_at_their_bound() {
        let mut log = String::from("  1:\ttransferring control: ./t\n");
        for i in 0..MOST_LIBRARIES + 10 {
            log.push_str(&format!(
                "  1:\tfile=libvulkan_{i}.so [0];  generating link map\n"
            ));
        }
        let seen = read_watch_log(&log);
        assert_eq!(seen.loaded.len(), MOST_LIBRARIES);
        assert_eq!(seen.unpermitted, seen.loaded);
        assert!(seen.before_first_permit);
        let mut merged = seen.clone();
        merged.merge(read_watch_log(&log.replace("vulkan_", "vulkan_x")));
        assert_eq!(merged.loaded.len(), MOST_LIBRARIES);
        assert_eq!(merged.unpermitted, merged.loaded);
    }

    #[test]
    fn logs_merge_and_overlong_lines_are_skipped_without_being_kept() {
        let mut a = read_watch_log("gpu-test-permit: held\n");
        let mut long = b"  7:\ttransferring control: ./t\n  7:\tfile=".to_vec();
        long.extend(std::iter::repeat_n(b'x', LONGEST_LINE));
        long.extend_from_slice(b"libcuda.so [0];  generating link map\n");
        long.extend_from_slice(b"  7:\tfile=libcuda.so.1 [0];  generating link map");
        let b = read_watch_log_from(&long[..]).unwrap();
        assert_eq!(b.loaded, ["libcuda.so.1"], "the last line has no newline");
        a.merge(b);
        assert!(a.held && a.before_first_permit);
        assert_eq!(a.unpermitted, ["libcuda.so.1"]);
    }
}
