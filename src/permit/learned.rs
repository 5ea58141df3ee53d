//! Learned weights ([`WEIGHTS_VAR`](crate::config::WEIGHTS_VAR)`=learned`): the units of a
//! request that declares nothing, from the most GPU memory its test was measured to use in the
//! runs this host recorded, plus [`LEARNED_MARGIN_PERCENT`]. Read once per pool, at the first
//! request that could use them; a pool without learned weights never comes here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use super::budget::Budget;
use crate::config::LEARNED_MARGIN_PERCENT;

/// The learned peaks of a pool's slot directory. Who holds a learned permit (a test, whose
/// other threads join it) is kept with the pool's other holders, in `holder`.
#[derive(Debug)]
pub(super) struct Learned {
    dir: PathBuf,
    /// Bytes by test (`<binary>::<test>`), read at the first request that declares nothing.
    peaks: OnceLock<HashMap<String, u64>>,
}

impl Learned {
    /// Learned weights from the history of slot directory `dir`.
    pub(super) fn new(dir: PathBuf) -> Learned {
        Learned {
            dir,
            peaks: OnceLock::new(),
        }
    }

    /// The measured peaks by test, `None` when none is known. The first call brings the
    /// history up to date (the runs recorded since, but this one) and reads it.
    pub(super) fn peaks(&self) -> Option<&HashMap<String, u64>> {
        let peaks = self
            .peaks
            .get_or_init(|| crate::tune::learned_peaks(&self.dir, super::observe::run_id()));
        (!peaks.is_empty()).then_some(peaks)
    }
}

/// `peak` bytes with the margin: `peak x (100 + LEARNED_MARGIN_PERCENT) / 100`, rounded up,
/// at most `u64::MAX`.
pub(super) fn with_margin(peak: u64) -> u64 {
    let scaled = (peak as u128 * (100 + LEARNED_MARGIN_PERCENT) as u128).div_ceil(100);
    scaled.min(u64::MAX as u128) as u64
}

/// The units a test measured at `peak` bytes holds under `budget`, for permits of at most
/// `limit` units: those of its peak with the margin, at least 1, and, where that is more than
/// the budget, a whole GPU (`limit`): a learned weight never refuses a test.
pub(super) fn learned_units(peak: u64, budget: &Budget, limit: usize) -> usize {
    let bytes = with_margin(peak).min(budget.bytes);
    let units = usize::try_from(budget.units(bytes)).unwrap_or(usize::MAX);
    units.clamp(1, limit.max(1))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn the_margin_is_a_quarter_rounded_up_and_saturates() {
        assert_eq!(LEARNED_MARGIN_PERCENT, 25);
        assert_eq!(with_margin(0), 0);
        assert_eq!(with_margin(100), 125);
        assert_eq!(with_margin(1), 2);
        assert_eq!(with_margin(700 * MIB), 875 * MIB);
        assert_eq!(with_margin(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_measured_peak_takes_the_units_of_its_peak_and_margin() {
        // 1 GiB at N = 4: 256 MiB a unit.
        let budget = Budget::new(GIB, 4, 4);
        // 875 MiB: 3.4 units.
        assert_eq!(learned_units(700 * MIB, &budget, 4), 4);
        // 375 MiB: 1.5 units.
        assert_eq!(learned_units(300 * MIB, &budget, 4), 2);
        // 250 MiB is within one unit; 205 MiB with the margin, 256 MiB exactly, still one.
        assert_eq!(learned_units(200 * MIB, &budget, 4), 1);
        assert_eq!(learned_units(1024 * MIB / 5, &budget, 4), 1);
        assert_eq!(learned_units(1024 * MIB / 5 + 1, &budget, 4), 2);
        // A third of the budget with the margin is 42 %: two units of four.
        assert_eq!(learned_units(GIB / 3, &budget, 4), 2);
        // Nothing measured to speak of: one unit, never none.
        assert_eq!(learned_units(0, &budget, 4), 1);
        assert_eq!(learned_units(1, &budget, 4), 1);
    }

    #[test]
    fn a_peak_above_the_budget_takes_a_whole_gpu_and_is_never_refused() {
        for n in [1, 2, 3, 4, 8, 1024] {
            let budget = Budget::new(GIB, n, n);
            for peak in [GIB, GIB - 1, 900 * MIB, 2 * GIB, u64::MAX / 2, u64::MAX] {
                assert_eq!(learned_units(peak, &budget, n), n, "{peak} at N = {n}");
            }
        }
        // Within a permit limit below N (units come from one GPU), at most the limit.
        let budget = Budget::new(GIB, 8, 3);
        assert_eq!(learned_units(700 * MIB, &budget, 3), 3);
        assert_eq!(learned_units(100 * MIB, &budget, 3), 1);
    }

    #[test]
    fn a_budget_of_one_unit_gives_one_unit() {
        let budget = Budget::new(GIB, 1, 1);
        for peak in [0, MIB, GIB, u64::MAX] {
            assert_eq!(learned_units(peak, &budget, 1), 1);
        }
    }
}
