//! Where a request goes: which GPUs, given how many units each has free. Pure: the slots are
//! probed by the caller ([`HostSlots::try_take`](super::HostSlots)), under the gate.
//!
//! - **Best fit** (the default): a request of `u` units on `k` GPUs goes to the `k` GPUs with
//!   the fewest free units that still have `u`, within the one group (of those that can serve
//!   it) whose chosen GPUs have the fewest free units in all. Small requests fill GPUs that are
//!   in use already, so whole GPUs stay free for requests that need them whole.
//! - **Spread** (slot order): the first GPUs in order that have
//!   `u` free units; a one-unit request takes the lowest free slot, and slot `i` is on GPU
//!   `i % gpus`, so one-unit requests spread over every GPU.
//!
//! A group is a set of GPUs a request must stay within (`GPU_TEST_PERMIT_GPUS=0,1,2,3;4,5,6,7`:
//! GPUs that share a switch or a node). Without groups, every GPU is in one group.

pub use crate::config::Placement;

/// The GPUs of a pool, as groups of permit devices a request must stay within.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Topology {
    /// Disjoint, each sorted, together every device `0..gpus`; one group when none are named.
    groups: Vec<Vec<usize>>,
}

impl Topology {
    /// One group of `gpus` devices.
    pub(crate) fn flat(gpus: usize) -> Topology {
        Topology {
            groups: vec![(0..gpus.max(1)).collect()],
        }
    }

    /// `groups` of devices below `gpus`; devices no group names form one more group each, and
    /// a device named twice stays in its first group. (Configuration is parsed and checked
    /// where it is read; this keeps whatever it is given to a usable shape.)
    pub(crate) fn grouped(gpus: usize, groups: &[Vec<usize>]) -> Topology {
        let gpus = gpus.max(1);
        // The devices a group has taken already.
        let mut seen: Vec<usize> = Vec::new();
        let mut out: Vec<Vec<usize>> = Vec::new();
        for group in groups {
            let mut g: Vec<usize> = Vec::new();
            for &d in group {
                if d < gpus && !seen.contains(&d) {
                    seen.push(d);
                    g.push(d);
                }
            }
            crate::order::sort(&mut g);
            if !g.is_empty() {
                out.push(g);
            }
        }
        for d in 0..gpus {
            if !seen.contains(&d) {
                out.push(vec![d]);
            }
        }
        Topology { groups: out }
    }

    /// The groups, each sorted.
    pub(crate) fn groups(&self) -> &[Vec<usize>] {
        &self.groups
    }

    /// The most GPUs one request can have: the largest group's size.
    pub(crate) fn widest(&self) -> usize {
        if self.groups.is_empty() {
            return 1;
        }
        let mut widest = 0;
        for group in &self.groups {
            widest = widest.max(group.len());
        }
        widest
    }

    /// Whether the devices are all one group (no topology named).
    pub(crate) fn is_flat(&self) -> bool {
        self.groups.len() == 1
    }
}

/// The GPUs a request of `units` on each of `k` GPUs goes to, given each GPU's free units
/// (`free[g]`), or `None` when no group has `k` GPUs with `units` free. The GPUs come sorted.
pub(crate) fn place(
    free: &[usize],
    units: usize,
    k: usize,
    topology: &Topology,
    placement: Placement,
) -> Option<Vec<usize>> {
    let mut best: Option<(usize, Vec<usize>)> = None;
    for group in topology.groups() {
        let mut fits: Vec<usize> = Vec::new();
        for &g in group {
            if let Some(&f) = free.get(g)
                && f >= units
            {
                fits.push(g);
            }
        }
        if fits.len() < k {
            continue;
        }
        match placement {
            Placement::Spread => {
                fits.truncate(k);
                return Some(fits);
            }
            Placement::BestFit => {
                // Fewest free first; ties to the lower GPU (the sort is stable).
                crate::order::sort_by(&mut fits, |&a, &b| free[a].cmp(&free[b]));
                fits.truncate(k);
                let mut left = 0;
                for &g in &fits {
                    left += free[g];
                }
                let better = match &best {
                    Some((b, _)) => left < *b,
                    None => true,
                };
                if better {
                    crate::order::sort(&mut fits);
                    best = Some((left, fits));
                }
            }
        }
    }
    let (_, gpus) = best?;
    Some(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_fills_busy_gpus_and_keeps_whole_ones_free() {
        let flat = Topology::flat(4);
        // GPU 2 has one unit left of 2: a one-unit request goes there, not to an idle GPU.
        assert_eq!(
            place(&[2, 2, 1, 2], 1, 1, &flat, Placement::BestFit),
            Some(vec![2])
        );
        // Spread takes the first GPU that fits.
        assert_eq!(
            place(&[2, 2, 1, 2], 1, 1, &flat, Placement::Spread),
            Some(vec![0])
        );
        // Two whole GPUs: the only two that are whole.
        assert_eq!(
            place(&[2, 1, 2, 0], 2, 2, &flat, Placement::BestFit),
            Some(vec![0, 2])
        );
        assert_eq!(place(&[2, 1, 1, 0], 2, 2, &flat, Placement::BestFit), None);
        // Ties go to the lower GPU.
        assert_eq!(
            place(&[2, 2, 2, 2], 1, 2, &flat, Placement::BestFit),
            Some(vec![0, 1])
        );
    }

    #[test]
    fn a_request_stays_within_one_group_the_tightest_that_fits() {
        let t = Topology::grouped(8, &[vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(t.widest(), 4);
        // Four GPUs free across the groups, but no group has four: no fit.
        let free = [1, 1, 0, 0, 1, 1, 0, 0];
        assert_eq!(place(&free, 1, 4, &t, Placement::BestFit), None);
        assert_eq!(
            place(&free, 1, 4, &Topology::flat(8), Placement::BestFit),
            Some(vec![0, 1, 4, 5])
        );
        // Both groups fit two GPUs; the second has fewer units free on them.
        let free = [2, 2, 2, 2, 1, 1, 2, 2];
        assert_eq!(place(&free, 1, 2, &t, Placement::BestFit), Some(vec![4, 5]));
        assert_eq!(place(&free, 1, 2, &t, Placement::Spread), Some(vec![0, 1]));
    }

    #[test]
    fn groups_are_kept_to_a_usable_shape() {
        let t = Topology::grouped(6, &[vec![3, 1], vec![1, 9], vec![]]);
        assert_eq!(t.groups(), [vec![1, 3], vec![0], vec![2], vec![4], vec![5]]);
        assert!(!t.is_flat());
        assert!(Topology::flat(3).is_flat());
        assert_eq!(Topology::flat(0).groups(), [vec![0]]);
    }
}
