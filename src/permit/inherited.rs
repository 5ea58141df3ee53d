//! A permit inherited from a parent process, as a pool works inside it.

/// A permit inherited from a parent process (`gpu-test-permit run`). The pool's host slots are
/// those of the directory in which every process inside that permit shares its units
/// ([`crate::host::share_dir`]), so that all of them together hold at most what the parent
/// holds.
pub(super) struct Inherited {
    /// The parent's permit, as it was passed.
    pub(super) permit: crate::config::InheritedPermit,
    /// The GPUs a shared permit holds slots on, in increasing order
    /// ([`InheritedPermit::devices`](crate::config::InheritedPermit::devices), read once).
    devices: Vec<usize>,
    /// This process's descriptors of the parent's slot descriptions (they keep the slots
    /// locked while this process lives).
    _files: Vec<std::fs::File>,
}

impl Inherited {
    /// The parent's `permit`, kept locked through this process's `files`.
    pub(super) fn new(
        permit: crate::config::InheritedPermit,
        files: Vec<std::fs::File>,
    ) -> Inherited {
        Inherited {
            devices: permit.devices(),
            permit,
            _files: files,
        }
    }

    /// The GPUs the parent's permit holds (every GPU of its directory when exclusive).
    pub(super) fn gpus(&self) -> usize {
        if self.permit.exclusive {
            self.permit.gpus.max(1)
        } else {
            self.devices.len().max(1)
        }
    }

    /// The parent's slot that shared slot `index` stands for: for a shared permit, the
    /// `index / k`-th of the parent's slots on its `index % k`-th GPU (of `k`); the same slot
    /// for an exclusive one (whose layout the shared slots copy).
    pub(super) fn parent_slot(&self, index: usize) -> usize {
        if self.permit.exclusive {
            return index;
        }
        let k = self.devices.len().max(1);
        if let Some(&g) = self.devices.get(index % k)
            && let Some(slot) = self.permit.slots_on(g).get(index / k)
        {
            return slot.index;
        }
        index
    }

    /// The GPU shared slot `index` is for, as the parent numbers its GPUs.
    pub(super) fn gpu_of(&self, index: usize) -> usize {
        if self.permit.exclusive {
            index % self.permit.gpus.max(1)
        } else {
            self.devices
                .get(index % self.devices.len().max(1))
                .copied()
                .unwrap_or(0)
        }
    }
}
