//! The rule that admits a permit by what a GPU's memory holds now ([`admit`]), and the line
//! that says why one waits ([`Shortfall`]).

use std::fmt::Write as _;

use super::nvml::{GpuMemory, GpuProcess};
use super::query::process_name;
use crate::config::format_bytes;

/// What a new test process takes beside its declared memory: its CUDA context (300 to 500 MiB
/// on current GPUs and drivers, more with lazy module loading off) and some slack for the
/// allocator's rounding and for memory freed a moment later than NVML reports.
pub(crate) const MARGIN: u64 = 512 << 20;

/// What [`admit`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// There is room: take the permit.
    Admit,
    /// Not enough free memory yet: wait, and say why.
    Short(Shortfall),
}

/// Why a permit does not fit on a GPU now: the terms of [`admit`]'s rule, and who uses the
/// memory without a permit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shortfall {
    /// The permit's declared memory.
    pub(crate) want: u64,
    /// The GPU's free memory.
    pub(crate) free: u64,
    /// What holders declared and have not yet allocated.
    pub(crate) reserved: u64,
    /// [`MARGIN`].
    pub(crate) margin: u64,
    /// Processes using memory on the GPU that hold no permit (not a holder pid, not own_pid),
    /// most memory first.
    pub(crate) foreign: Vec<GpuProcess>,
}

impl Shortfall {
    /// One line for a wait message, e.g. "GPU 3 has 2.1 GiB free; this permit needs 6 GiB +
    /// 512 MiB margin, and holders declared 1 GiB they have not yet allocated; using memory
    /// without a permit: pid 4242 (python3) 70.2 GiB". Process names come from
    /// [`process_name`].
    pub(crate) fn describe(&self, gpu: usize) -> String {
        self.describe_with(gpu, process_name)
    }

    /// [`Shortfall::describe`] with the names from `name`.
    fn describe_with(&self, gpu: usize, name: impl Fn(u32) -> Option<String>) -> String {
        let mut line = format!(
            "GPU {gpu} has {} free; this permit needs {} + {} margin",
            format_bytes(self.free),
            format_bytes(self.want),
            format_bytes(self.margin)
        );
        if self.reserved > 0 {
            let _ = write!(
                line,
                ", and holders declared {} they have not yet allocated",
                format_bytes(self.reserved)
            );
        }
        if !self.foreign.is_empty() {
            line.push_str("; using memory without a permit:");
            let mut sep = "";
            for p in &self.foreign {
                let _ = write!(line, "{sep} pid {}", p.pid);
                sep = ",";
                if let Some(name) = name(p.pid) {
                    let _ = write!(line, " ({name})");
                }
                match p.used {
                    Some(used) => {
                        let _ = write!(line, " {}", format_bytes(used));
                    }
                    None => line.push_str(" (use not reported)"),
                }
            }
        }
        line
    }
}

/// What NVML says process `pid` uses on the GPU of `mem` (0 where it cannot tell).
fn used_by(mem: &GpuMemory, pid: u32) -> u64 {
    let mut used = 0u64;
    for p in &mem.processes {
        if p.pid == pid
            && let Some(bytes) = p.used
        {
            used = used.saturating_add(bytes);
        }
    }
    used
}

/// Whether `pid` is among the holders' pids of `declared`.
fn declares(declared: &[(u32, u64)], pid: u32) -> bool {
    for &(holder, _) in declared {
        if holder == pid {
            return true;
        }
    }
    false
}

/// Admission rule, pure: may a permit declaring `want` bytes be admitted on a GPU whose state
/// is `mem`, given the permit holders now on that GPU as `(pid, declared bytes)` pairs?
///
/// `reserved` is the sum over holder pids of what each pid declared (several holders in one
/// process share its pid: their declarations are summed first) less what NVML says that pid
/// uses, never below 0; a pid NVML does not list, or whose use it cannot tell, has allocated
/// nothing as far as this rule knows. Admitted when `mem.free >= reserved + want + MARGIN`.
///
/// `own_pid` is this process: its memory is not foreign even when it holds no permit yet (it
/// is asking for one).
pub(crate) fn admit(want: u64, mem: &GpuMemory, holders: &[(u32, u64)], own_pid: u32) -> Admission {
    let mut declared: Vec<(u32, u64)> = Vec::new();
    'holders: for &(pid, bytes) in holders {
        for (p, sum) in declared.iter_mut() {
            if *p == pid {
                *sum = sum.saturating_add(bytes);
                continue 'holders;
            }
        }
        declared.push((pid, bytes));
    }
    let mut reserved = 0u64;
    for &(pid, bytes) in &declared {
        reserved = reserved.saturating_add(bytes.saturating_sub(used_by(mem, pid)));
    }
    let needed = reserved.saturating_add(want).saturating_add(MARGIN);
    if mem.free >= needed {
        return Admission::Admit;
    }
    let mut foreign: Vec<GpuProcess> = Vec::new();
    for p in &mem.processes {
        if p.pid != own_pid && !declares(&declared, p.pid) {
            foreign.push(p.clone());
        }
    }
    // Most memory first; unknown use last, then by pid for a stable line.
    crate::order::sort_by(&mut foreign, |a, b| {
        b.used.cmp(&a.used).then(a.pid.cmp(&b.pid))
    });
    Admission::Short(Shortfall {
        want,
        free: mem.free,
        reserved,
        margin: MARGIN,
        foreign,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn process(pid: u32, used: Option<u64>) -> GpuProcess {
        GpuProcess { pid, used }
    }

    fn mem(free: u64, processes: Vec<GpuProcess>) -> GpuMemory {
        GpuMemory {
            total: 80 * GIB,
            free,
            processes,
        }
    }

    fn short(a: Admission) -> Shortfall {
        match a {
            Admission::Short(s) => s,
            Admission::Admit => panic!("admitted"),
        }
    }

    #[test]
    fn a_permit_fits_when_free_memory_covers_want_and_margin() {
        let m = mem(4 * GIB + MARGIN, vec![]);
        assert_eq!(admit(4 * GIB, &m, &[], 1), Admission::Admit);
        let s = short(admit(4 * GIB + 1, &m, &[], 1));
        assert_eq!(
            (s.want, s.free, s.reserved, s.margin),
            (4 * GIB + 1, m.free, 0, MARGIN)
        );
    }

    #[test]
    fn holders_reserve_what_they_declared_and_have_not_allocated() {
        // pid 10 declared 6 GiB and uses 2: 4 reserved; pid 11 declared 1 and uses nothing.
        let m = mem(10 * GIB, vec![process(10, Some(2 * GIB))]);
        let holders = [(10, 6 * GIB), (11, GIB)];
        assert_eq!(short(admit(5 * GIB, &m, &holders, 1)).reserved, 5 * GIB);
        assert_eq!(admit(5 * GIB - MARGIN, &m, &holders, 1), Admission::Admit);
    }

    #[test]
    fn holders_of_one_process_are_summed_before_its_use_is_taken_off() {
        // Two permits of pid 10, 3 GiB each, and it uses 4: 2 GiB reserved, not 0 + 0.
        let m = mem(GIB, vec![process(10, Some(4 * GIB))]);
        let s = short(admit(GIB, &m, &[(10, 3 * GIB), (10, 3 * GIB)], 1));
        assert_eq!(s.reserved, 2 * GIB);
    }

    #[test]
    fn a_holder_using_more_than_it_declared_reserves_nothing() {
        let m = mem(GIB, vec![process(10, Some(9 * GIB))]);
        let s = short(admit(GIB, &m, &[(10, 2 * GIB)], 1));
        assert_eq!(s.reserved, 0);
        assert!(s.foreign.is_empty(), "{s:?}");
    }

    #[test]
    fn a_use_nvml_cannot_tell_counts_as_nothing_allocated() {
        let m = mem(GIB, vec![process(10, None), process(20, None)]);
        let s = short(admit(GIB, &m, &[(10, 3 * GIB)], 1));
        assert_eq!(s.reserved, 3 * GIB);
        assert_eq!(s.foreign, [process(20, None)]);
    }

    #[test]
    fn foreign_processes_are_not_holders_nor_this_process_and_come_most_memory_first() {
        let m = mem(
            GIB,
            vec![
                process(1, Some(5 * GIB)), // this process
                process(10, Some(GIB)),    // a holder
                process(30, Some(2 * GIB)),
                process(31, None),
                process(32, Some(70 * GIB)),
                process(29, Some(2 * GIB)),
            ],
        );
        let s = short(admit(GIB, &m, &[(10, GIB)], 1));
        let pids: Vec<u32> = s.foreign.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [32, 29, 30, 31]);
    }

    #[test]
    fn reserved_saturates_instead_of_overflowing() {
        let m = mem(u64::MAX - 1, vec![]);
        let s = short(admit(1, &m, &[(10, u64::MAX), (11, u64::MAX)], 1));
        assert_eq!(s.reserved, u64::MAX);
    }

    #[test]
    fn a_shortfall_reads_as_one_line() {
        let s = Shortfall {
            want: 6 * GIB,
            free: 2 * GIB + GIB / 10,
            reserved: GIB,
            margin: MARGIN,
            foreign: vec![process(4242, Some(70 * GIB + GIB / 5)), process(7, None)],
        };
        let names = |pid| (pid == 4242).then(|| "python3".to_string());
        assert_eq!(
            s.describe_with(3, names),
            "GPU 3 has 2.1 GiB free; this permit needs 6 GiB + 512 MiB margin, and holders \
             declared 1 GiB they have not yet allocated; using memory without a permit: pid \
             4242 (python3) 70.2 GiB, pid 7 (use not reported)"
        );
        let plain = Shortfall {
            reserved: 0,
            foreign: vec![],
            ..s
        };
        assert_eq!(
            plain.describe_with(0, |_| None),
            "GPU 0 has 2.1 GiB free; this permit needs 6 GiB + 512 MiB margin"
        );
    }
}
