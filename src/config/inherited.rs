//! The permit a parent process passes on ([`INHERITED_VAR`](crate::config::INHERITED_VAR)): its value's format, parsed and
//! written.

use std::ffi::OsString;
use std::path::PathBuf;

use super::vars::MAX_CONCURRENCY;

/// A permit held by a parent process for this one: what [`INHERITED_VAR`](crate::config::INHERITED_VAR) carries.
///
/// The parent (`gpu-test-permit run`) holds host slots and passes their open file descriptions
/// to the command it starts, as descriptors without close-on-exec, so that the command and
/// everything it starts share them: a `flock` lock belongs to the open file description, and
/// the slot stays locked while any process holding it lives, the parent killed with SIGKILL
/// included. The variable names those descriptors and what they must be:
///
/// ```text
/// GPU_TEST_PERMIT_INHERITED=1:<per_gpu>x<gpus>:<shared|exclusive>:<slot>=<fd>/<dev>/<ino>[@<gpu>][,...]:<dir>
/// ```
///
/// `1` is the format's version; `<per_gpu>x<gpus>` the GPUs and the permits per GPU that units
/// are counted in (memory declarations are converted with this N); then, per slot held, its
/// index in the slot directory `<dir>` (last, so that it may contain `:`), the descriptor number
/// in this process, the device and inode of the slot file, and the GPU it is for when that is
/// not `<slot> % <gpus>`. A process trusts it only after checking each descriptor: open, the
/// same file (device and inode) as `<dir>/gpu0.slot<i>`, and that file locked through that very
/// description.
///
/// The processes that work inside one inherited permit share its units through slot files of
/// their own, in a directory beside the parent's slots (`<dir>/gpu0.slot<first>.inside-<uid>`): at most
/// as many units as the parent holds are held by all of them together. A process among them
/// that passes its own permit on (a `gpu-test-permit run` inside another) names the slots of
/// that directory, with their GPUs.
///
/// ```
/// use gpu_test_permit::config::InheritedPermit;
///
/// let v = "1:2x1:shared:1=7/2049/131/:/tmp/gpu-test-permit-1000";
/// assert!(InheritedPermit::parse(v.as_ref()).is_err()); // a malformed slot
/// let v = "1:2x1:shared:1=7/2049/131:/tmp/slots:a";
/// let p = InheritedPermit::parse(v.as_ref()).unwrap();
/// assert_eq!((p.slots[0].index, p.slots[0].fd), (1, 7));
/// assert_eq!(p.dir, std::path::Path::new("/tmp/slots:a"));
/// assert_eq!(p.to_os_string(), v);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InheritedPermit {
    /// Permits per GPU in the slot directory.
    pub per_gpu: usize,
    /// GPUs the slot directory serves.
    pub gpus: usize,
    /// Whether the parent holds every slot.
    pub exclusive: bool,
    /// The slots held, by index: as many as a shared permit's units, all of one GPU; every
    /// slot for an exclusive one.
    pub slots: Vec<InheritedSlot>,
    /// The slot directory.
    pub dir: PathBuf,
}

/// One slot of an [`InheritedPermit`].
///
/// ```
/// use gpu_test_permit::config::InheritedPermit;
///
/// // What `gpu-test-permit run` passes on: slot 1 of a directory of 2 per GPU x 1 GPU, held
/// // through descriptor 7.
/// let p = InheritedPermit::parse("1:2x1:shared:1=7/2049/131:/tmp/slots".as_ref()).unwrap();
/// let slot = p.slots[0];
/// assert_eq!((slot.index, slot.fd, slot.dev, slot.ino), (1, 7, 2049, 131));
/// assert_eq!(p.gpu_of(&slot), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InheritedSlot {
    /// The slot's index (`gpu0.slot<index>`).
    pub index: usize,
    /// The descriptor, in the receiving process, of an open file description holding its lock.
    pub fd: u64,
    /// The slot file's device number.
    pub dev: u64,
    /// The slot file's inode number.
    pub ino: u64,
    /// The GPU the slot is for, when that is not its index modulo the GPUs (a slot of the
    /// directory in which the processes inside a permit share it).
    pub gpu: Option<usize>,
}

impl InheritedSlot {
    /// A slot held through descriptor `fd` of file `(dev, ino)`.
    ///
    /// ```
    /// use gpu_test_permit::config::{InheritedPermit, InheritedSlot};
    ///
    /// let slot = InheritedSlot::new(1, 7, 2049, 131);
    /// assert_eq!((slot.index, slot.fd, slot.gpu), (1, 7, None));
    /// ```
    pub fn new(index: usize, fd: u64, dev: u64, ino: u64) -> InheritedSlot {
        InheritedSlot {
            index,
            fd,
            dev,
            ino,
            gpu: None,
        }
    }

    /// The same slot, for GPU `gpu`.
    ///
    /// ```
    /// use gpu_test_permit::config::{InheritedPermit, InheritedSlot};
    ///
    /// assert_eq!(InheritedSlot::new(0, 7, 2049, 131).on_gpu(3).gpu, Some(3));
    /// ```
    pub fn on_gpu(mut self, gpu: usize) -> InheritedSlot {
        self.gpu = Some(gpu);
        self
    }
}

impl InheritedPermit {
    /// A permit of `slots` in `dir`, laid out as `per_gpu` x `gpus`.
    ///
    /// ```
    /// use gpu_test_permit::config::{InheritedPermit, InheritedSlot};
    ///
    /// let permit = InheritedPermit::new(2, 2, false, vec![InheritedSlot::new(3, 7, 2049, 131)], "/tmp/slots".into());
    /// assert_eq!(permit.devices(), [1]); // slot 3 of 2 x 2 is on GPU 1
    /// ```
    pub fn new(
        per_gpu: usize,
        gpus: usize,
        exclusive: bool,
        slots: Vec<InheritedSlot>,
        dir: PathBuf,
    ) -> InheritedPermit {
        InheritedPermit {
            per_gpu,
            gpus,
            exclusive,
            slots,
            dir,
        }
    }

    /// Parses the value of [`INHERITED_VAR`](crate::config::INHERITED_VAR).
    ///
    /// # Errors
    ///
    /// What is wrong with it, completing "GPU_TEST_PERMIT_INHERITED='...' ...".
    ///
    /// ```
    /// use gpu_test_permit::config::{InheritedPermit, InheritedSlot};
    ///
    /// let p = InheritedPermit::parse("1:2x1:shared:1=7/2049/131:/tmp/slots".as_ref())?;
    /// assert_eq!((p.per_gpu, p.gpus, p.exclusive), (2, 1, false));
    /// assert!(InheritedPermit::parse("garbage".as_ref()).is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn parse(raw: &std::ffi::OsStr) -> Result<InheritedPermit, String> {
        let bytes = raw.as_encoded_bytes();
        // The directory follows the fourth `:` and may contain more of them.
        let mut colons = 0;
        let mut fourth = None;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b':' {
                colons += 1;
                if colons == 4 {
                    fourth = Some(i);
                    break;
                }
            }
            i += 1;
        }
        let Some(split) = fourth else {
            return Err("has fewer than five `:`-separated fields".into());
        };
        let Ok(head) = std::str::from_utf8(&bytes[..split]) else {
            return Err("is not valid UTF-8".into());
        };
        // SAFETY: the tail comes from `as_encoded_bytes` of one `OsStr`, split right after an
        // ASCII `:`, as `from_encoded_bytes_unchecked` requires.
        let dir = unsafe { std::ffi::OsStr::from_encoded_bytes_unchecked(&bytes[split + 1..]) };
        let mut fields = head.split(':');
        let (Some(version), Some(layout), Some(kind), Some(slots), None) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            return Err("has fewer than five `:`-separated fields".into());
        };
        if version != "1" {
            return Err(format!("has format version {version}, not 1"));
        }
        let Some((per_gpu, gpus)) = parse_layout(layout) else {
            return Err(format!("has layout `{layout}`, not <per_gpu>x<gpus>"));
        };
        let exclusive = match kind {
            "shared" => false,
            "exclusive" => true,
            _ => return Err(format!("has kind `{kind}`, not shared or exclusive")),
        };
        let mut held = Vec::new();
        for s in slots.split(',') {
            match parse_slot(s) {
                Some(slot) => held.push(slot),
                None => {
                    return Err(format!(
                        "has slot `{s}`, not <slot>=<fd>/<dev>/<ino>[@<gpu>]"
                    ));
                }
            }
        }
        let permit = InheritedPermit::new(per_gpu, gpus, exclusive, held, PathBuf::from(dir));
        if !permit.slots_fit() {
            return Err(format!(
                "holds slots that do not fit a {kind} permit of {per_gpu}x{gpus}"
            ));
        }
        if !permit.dir.is_absolute() {
            return Err("names a slot directory that is not an absolute path".into());
        }
        Ok(permit)
    }

    /// Whether the slots are those of a permit of this layout and kind: every slot, in order,
    /// for an exclusive one; for a shared (weighted) one, 1 to N distinct slots on each of its
    /// GPUs, as many on each.
    fn slots_fit(&self) -> bool {
        let slots = &self.slots;
        let total = self.per_gpu.saturating_mul(self.gpus);
        if self.exclusive {
            if slots.len() != total {
                return false;
            }
            // Slots 0, 1, 2, ... in order, each on the GPU its index gives.
            let mut next = 0;
            for s in slots {
                if s.index != next || self.gpu_of(s) != s.index % self.gpus {
                    return false;
                }
                next = s.index + 1;
            }
            return true;
        }
        let mut indices = Vec::with_capacity(slots.len());
        let mut on = Vec::with_capacity(slots.len());
        for s in slots {
            indices.push(s.index);
            on.push(self.gpu_of(s));
        }
        crate::order::sort_dedup(&mut indices);
        crate::order::sort_dedup(&mut on);
        let each = slots.len() / on.len().max(1);
        if indices.len() != slots.len() || each > self.per_gpu || each * on.len() != slots.len() {
            return false;
        }
        for &g in &on {
            let mut on_g = 0;
            for s in slots {
                if self.gpu_of(s) == g {
                    on_g += 1;
                }
            }
            if on_g != each {
                return false;
            }
        }
        for s in slots {
            if s.index >= total {
                return false;
            }
        }
        true
    }

    /// The GPU slot `slot` of this permit is for.
    ///
    /// ```
    /// use gpu_test_permit::config::{InheritedPermit, InheritedSlot};
    ///
    /// let p = InheritedPermit::new(2, 2, false, vec![InheritedSlot::new(3, 7, 2049, 131)], "/s".into());
    /// assert_eq!(p.gpu_of(&p.slots[0]), 1);
    /// assert_eq!(p.gpu_of(&InheritedSlot::new(3, 7, 2049, 131).on_gpu(0)), 0);
    /// ```
    pub fn gpu_of(&self, slot: &InheritedSlot) -> usize {
        slot.gpu.unwrap_or(slot.index % self.gpus.max(1))
    }

    /// The GPUs the permit holds slots on, in increasing order: every GPU of the directory for
    /// an exclusive permit.
    ///
    /// ```
    /// use gpu_test_permit::config::{InheritedPermit, InheritedSlot};
    ///
    /// let all = InheritedPermit::new(2, 2, true, vec![], "/s".into());
    /// assert_eq!(all.devices(), [0, 1]);
    /// ```
    pub fn devices(&self) -> Vec<usize> {
        if self.exclusive {
            return (0..self.gpus.max(1)).collect();
        }
        let mut on = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            on.push(self.gpu_of(s));
        }
        crate::order::sort_dedup(&mut on);
        on
    }

    /// The slots the permit holds on GPU `gpu`, in increasing order.
    ///
    /// ```
    /// use gpu_test_permit::config::{InheritedPermit, InheritedSlot};
    ///
    /// let p = InheritedPermit::new(2, 2, false, vec![InheritedSlot::new(1, 7, 2049, 131)], "/s".into());
    /// assert_eq!(p.slots_on(1).len(), 1);
    /// assert!(p.slots_on(0).is_empty());
    /// ```
    pub fn slots_on(&self, gpu: usize) -> Vec<InheritedSlot> {
        let mut on = Vec::new();
        for s in &self.slots {
            if self.gpu_of(s) == gpu {
                on.push(*s);
            }
        }
        crate::order::sort_by_key(&mut on, |s| s.index);
        on
    }

    /// The value of [`INHERITED_VAR`](crate::config::INHERITED_VAR) that [`parse`](Self::parse) reads back.
    ///
    /// ```
    /// use gpu_test_permit::config::{InheritedPermit, InheritedSlot};
    ///
    /// let p = InheritedPermit::new(2, 1, false, vec![InheritedSlot::new(1, 7, 2049, 131)], "/tmp/slots".into());
    /// let value = p.to_os_string(); // what `INHERITED_VAR` is set to
    /// assert_eq!(InheritedPermit::parse(&value).unwrap(), p);
    /// ```
    pub fn to_os_string(&self) -> OsString {
        let mut slots = String::new();
        for s in &self.slots {
            if !slots.is_empty() {
                slots.push(',');
            }
            let gpu = match s.gpu {
                Some(g) if g != s.index % self.gpus.max(1) => format!("@{g}"),
                _ => String::new(),
            };
            slots.push_str(&format!("{}={}/{}/{}{gpu}", s.index, s.fd, s.dev, s.ino));
        }
        let kind = if self.exclusive {
            "exclusive"
        } else {
            "shared"
        };
        let mut out = OsString::from(format!(
            "1:{}x{}:{kind}:{}:",
            self.per_gpu, self.gpus, slots
        ));
        out.push(&self.dir);
        out
    }
}

/// The permits per GPU and the GPUs of a layout `<per_gpu>x<gpus>`, each 1 to
/// [`MAX_CONCURRENCY`].
fn parse_layout(layout: &str) -> Option<(usize, usize)> {
    let (n, g) = layout.split_once('x')?;
    Some((parse_count(n)?, parse_count(g)?))
}

/// A count of 1 to [`MAX_CONCURRENCY`].
fn parse_count(s: &str) -> Option<usize> {
    let n = s.parse::<usize>().ok()?;
    if (1..=MAX_CONCURRENCY).contains(&n) {
        Some(n)
    } else {
        None
    }
}

/// One slot, `<slot>=<fd>/<dev>/<ino>[@<gpu>]`.
fn parse_slot(s: &str) -> Option<InheritedSlot> {
    let (index, rest) = s.split_once('=')?;
    let (rest, gpu) = match rest.split_once('@') {
        Some((rest, gpu)) => (rest, Some(gpu.parse::<usize>().ok()?)),
        None => (rest, None),
    };
    let mut ids = rest.split('/');
    let fd = ids.next()?.parse::<u64>().ok()?;
    let dev = ids.next()?.parse::<u64>().ok()?;
    let ino = ids.next()?.parse::<u64>().ok()?;
    if ids.next().is_some() {
        return None;
    }
    let slot = InheritedSlot::new(index.parse().ok()?, fd, dev, ino);
    Some(match gpu {
        Some(g) => slot.on_gpu(g),
        None => slot,
    })
}
