//! Memory declarations turned into units: one GPU's budget and the conversion.

/// One GPU's memory budget, with what turns a declaration into units without a division,
/// worked out once per pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Budget {
    /// Bytes (at least 1).
    pub(super) bytes: u64,
    /// `floor((2^64 - 1) / bytes)`.
    inverse: u64,
    /// The N declarations are converted with.
    per_gpu: u64,
    /// Declarations of fewer bytes are served without checks: they are within the budget,
    /// their units within what one permit can hold, and their bytes times `per_gpu` fit in a
    /// `u64` (0: none is).
    inline_below: u64,
}

impl Budget {
    /// `bytes` of one GPU, converted with `per_gpu` units per GPU, for permits of at most
    /// `limit` units.
    pub(super) fn new(bytes: u64, per_gpu: usize, limit: usize) -> Budget {
        let (n, limit) = (per_gpu as u128, limit as u128);
        // `need` takes `ceil(need x N / bytes)` units: at most `limit` when
        // `need x N <= limit x bytes`.
        let inline_below = if n == 0 || limit == 0 {
            0
        } else {
            let most = (bytes as u128)
                .min(limit * bytes as u128 / n)
                .min(u64::MAX as u128 / n);
            // `most` fits in a `u64`, being at most `bytes`; at `u64::MAX` that one
            // declaration takes the checked path.
            (most as u64).saturating_add(1)
        };
        Budget {
            bytes,
            inverse: u64::MAX / bytes,
            per_gpu: per_gpu as u64,
            inline_below,
        }
    }

    /// `ceil(need x per_gpu / bytes)`: the units `need` bytes take of a GPU's `per_gpu`.
    pub(super) fn units(&self, need: u64) -> u64 {
        match need.checked_mul(self.per_gpu) {
            Some(0) => 0,
            // ceil(x / bytes) = floor((x - 1) / bytes) + 1 for x >= 1.
            Some(scaled) => self.div_floor(scaled - 1) + 1,
            None => (need as u128 * self.per_gpu as u128).div_ceil(self.bytes as u128) as u64,
        }
    }

    /// The units of `need` bytes (at least 1) when it is below `inline_below`, which makes it
    /// a declaration that cannot be refused; `None` otherwise.
    #[inline(always)]
    pub(super) fn inline_units(&self, need: u64) -> Option<usize> {
        if need >= self.inline_below {
            return None;
        }
        // Below `inline_below`, `need x per_gpu` does not overflow, and the units are at most
        // the permit limit, a `usize`. `max(ceil(x / bytes), 1)` is
        // `floor((max(x, 1) - 1) / bytes) + 1`.
        let scaled = need * self.per_gpu;
        Some(self.div_floor(scaled.saturating_sub(1)) as usize + 1)
    }

    /// `floor(x / bytes)`. Multiplies by the inverse and corrects the estimate, which is at
    /// most 1 short: the inverse is at least `2^64 / bytes - 1`, so the product falls short
    /// of `x x 2^64 / bytes` by at most `x`, less than `2^64`.
    #[inline(always)]
    fn div_floor(&self, x: u64) -> u64 {
        let q = ((x as u128 * self.inverse as u128) >> 64) as u64;
        // q x bytes <= x, so this neither wraps nor overflows.
        let rest = x - q * self.bytes;
        debug_assert!(
            (rest as u128) < 2 * self.bytes as u128,
            "the estimate was more than 1 short"
        );
        q + u64::from(rest >= self.bytes)
    }
}

/// The smallest device memory the CUDA probe reports, in bytes; `None` without the `cuda`
/// feature, without CUDA devices, or (unless `unified_too`) when a device shares its memory
/// with the CPU: there the budget is what the user says it is.
pub(super) fn probed_memory(unified_too: bool) -> Option<u64> {
    #[cfg(feature = "cuda")]
    {
        use crate::probe::{Backend, DeviceKind};
        let outcome = crate::probe::probe(Backend::Cuda).outcome;
        let devices = outcome.devices()?;
        let mut smallest: Option<u64> = None;
        for d in devices {
            if !unified_too && d.kind == DeviceKind::Integrated {
                return None;
            }
            if let Some(bytes) = d.memory_bytes {
                smallest = Some(match smallest {
                    Some(s) => s.min(bytes),
                    None => bytes,
                });
            }
        }
        smallest
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = unified_too;
        None
    }
}

/// Says once per process that a memory declaration counts as one unit for want of a budget.
#[cold]
pub(super) fn no_budget_notice(bytes: u64) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::notice::line(&format!(
            "a test declared {} of GPU memory, but no memory budget is known, so memory \
             declarations count as one permit unit; set {} (e.g. 64GiB, or 90% of the device \
             memory the CUDA probe reports)",
            crate::config::format_bytes(bytes),
            crate::config::GPU_MEMORY_VAR
        ));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Budget;

    #[test]
    fn memory_to_units_without_a_division_matches_div_ceil() {
        // `limit` below `per_gpu`: inside an inherited permit of fewer units than N.
        let check = |bytes: u64, need: u64, per_gpu: usize, limit: usize| {
            let exact = (need as u128 * per_gpu as u128).div_ceil(bytes as u128) as u64;
            let budget = Budget::new(bytes, per_gpu, limit);
            let at = format!("{need} of {bytes} at N = {per_gpu}, limit {limit}");
            assert_eq!(budget.units(need), exact, "{at}");
            let units = exact.max(1);
            let servable = need <= bytes && units <= limit as u64;
            match budget.inline_units(need) {
                Some(inline) => {
                    assert!(servable, "{at}: served inline but refused when checked");
                    assert_eq!(inline as u64, units, "{at}");
                }
                // Only a declaration whose conversion overflows (or `u64::MAX` bytes) is left
                // to the checked path although it would be served.
                None => assert!(
                    !servable || need.checked_mul(per_gpu as u64).is_none() || need == u64::MAX,
                    "{at}: servable but not inline"
                ),
            }
        };
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200_000 {
            let bytes = (next() >> (next() % 64)).max(1);
            let need = next() >> (next() % 64);
            let per_gpu = (next() % 1024 + 1) as usize;
            let limit = if next() % 2 == 0 {
                per_gpu
            } else {
                (next() % per_gpu as u64 + 1) as usize
            };
            check(bytes, need, per_gpu, limit);
        }
        for bytes in [1, 2, 3, 7, 1 << 30, 80_000_000_000, u64::MAX / 3, u64::MAX] {
            for need in [
                0,
                1,
                bytes / 2,
                bytes / 2 + 1,
                bytes - 1,
                bytes,
                bytes.saturating_add(1),
                u64::MAX / 1024,
                u64::MAX,
            ] {
                for per_gpu in [1, 2, 3, 8, 1024] {
                    for limit in [1, (per_gpu / 2).max(1), per_gpu] {
                        check(bytes, need, per_gpu, limit);
                    }
                }
            }
        }
    }
}
