//! Sorting in code compiled once.
//!
//! The standard library's sorts are generic over the element and the comparison: every
//! `sort_by_key` with its own closure is a copy of the whole sort (about 17 KB of machine code
//! each in the default dev profile), compiled by every project that builds this crate and linked
//! into every test binary that takes a permit. These functions sort the positions `0..len` with
//! one merge sort, compiled once, whose comparison calls back through a `dyn` reference, and
//! then move the elements into that order with swaps of their bytes, also compiled once; only
//! the comparison is generic.
//!
//! Every sort here is stable: elements that compare equal keep their order.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

/// Sorts `v` by `cmp`, stably.
pub(crate) fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    let order = sorted_positions(v.len(), &mut |a: usize, b: usize| cmp(&v[a], &v[b]));
    permute(v, order);
}

/// Sorts `v` by the key `key` gives each element, stably.
pub(crate) fn sort_by_key<T, K: Ord>(v: &mut [T], mut key: impl FnMut(&T) -> K) {
    let order = sorted_positions(v.len(), &mut |a: usize, b: usize| {
        key(&v[a]).cmp(&key(&v[b]))
    });
    permute(v, order);
}

/// Sorts `v` in its elements' order, stably.
pub(crate) fn sort<T: Ord>(v: &mut [T]) {
    let order = sorted_positions(v.len(), &mut |a: usize, b: usize| v[a].cmp(&v[b]));
    permute(v, order);
}

/// Sorts `v` and leaves one of each run of equal elements.
pub(crate) fn sort_dedup<T: Ord>(v: &mut Vec<T>) {
    sort(v);
    v.dedup();
}

/// The positions `0..len` in the order `cmp` gives them (stable): the crate's one sort. Empty
/// where there are fewer than two: nothing to move, and `cmp` is not called.
///
/// A bottom-up merge sort: runs of [`RUN`] positions sorted by insertion, then merged in
/// pairs of runs twice as long each round, a run already in order with the next one copied
/// as it is. Equal positions never pass each other: insertion moves a position only past
/// greater ones, and a merge takes from the right run only what is less than the left's next.
fn sorted_positions(len: usize, cmp: &mut dyn Compare) -> Vec<usize> {
    if len < 2 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..len).collect();
    let mut start = 0;
    while start < len {
        let end = (start + RUN).min(len);
        for i in start + 1..end {
            let mut at = i;
            while at > start && cmp.compare(order[at - 1], order[at]) == Ordering::Greater {
                order.swap(at - 1, at);
                at -= 1;
            }
        }
        start = end;
    }
    let mut merged = vec![0; len];
    let mut width = RUN;
    while width < len {
        let mut low = 0;
        while low < len {
            let mid = (low + width).min(len);
            let high = (low + 2 * width).min(len);
            if mid == high || cmp.compare(order[mid - 1], order[mid]) != Ordering::Greater {
                merged[low..high].copy_from_slice(&order[low..high]);
            } else {
                let (mut left, mut right) = (low, mid);
                for slot in &mut merged[low..high] {
                    let take_right = left == mid
                        || (right < high
                            && cmp.compare(order[right], order[left]) == Ordering::Less);
                    if take_right {
                        *slot = order[right];
                        right += 1;
                    } else {
                        *slot = order[left];
                        left += 1;
                    }
                }
            }
            low = high;
        }
        std::mem::swap(&mut order, &mut merged);
        width *= 2;
    }
    order
}

/// How [`sorted_positions`] compares two positions: any `FnMut(usize, usize) -> Ordering`.
/// A trait of its own, so that each comparison's `dyn` table has the one method it is called
/// through.
trait Compare {
    fn compare(&mut self, a: usize, b: usize) -> Ordering;
}

impl<F: FnMut(usize, usize) -> Ordering> Compare for F {
    fn compare(&mut self, a: usize, b: usize) -> Ordering {
        self(a, b)
    }
}

/// Positions [`sorted_positions`] sorts by insertion before it merges.
const RUN: usize = 16;

/// Moves the elements of `v` so that position `i` holds what was at `order[i]` (no move
/// where `order` is empty). The elements move as their bytes, as every move in Rust does, so
/// that the moving is compiled once for all element types.
fn permute<T>(v: &mut [T], order: Vec<usize>) {
    let len = v.len();
    let elements = Elements {
        base: v as *mut [T] as *mut MaybeUninit<u8>,
        size: const { std::mem::size_of::<T>() },
        len,
        _borrow: PhantomData,
    };
    swap_into_order(order, elements);
}

/// The elements of a slice borrowed mutably, as bytes: `len` elements of `size` bytes each
/// from `base`.
struct Elements<'a> {
    base: *mut MaybeUninit<u8>,
    size: usize,
    len: usize,
    _borrow: PhantomData<&'a mut [MaybeUninit<u8>]>,
}

impl Elements<'_> {
    /// Swaps the elements at `a` and `b`.
    fn swap(&mut self, a: usize, b: usize) {
        assert!(a < self.len && b < self.len, "position out of the slice");
        if a == b {
            return;
        }
        // SAFETY: `a` and `b` are distinct positions of the slice `self` borrows mutably, so
        // the two runs of `size` bytes are inside it and do not overlap. Swapping the bytes
        // (padding included, as `MaybeUninit`) of two values of one type swaps the values.
        unsafe {
            std::ptr::swap_nonoverlapping(
                self.base.add(a * self.size),
                self.base.add(b * self.size),
                self.size,
            );
        }
    }
}

/// Swaps the elements of `v` so that position `i` holds what was at `order[i]`: each cycle
/// of the permutation is followed with swaps (`order` is used up as the marks of where it has
/// been).
fn swap_into_order(mut order: Vec<usize>, mut v: Elements<'_>) {
    const DONE: usize = usize::MAX;
    for start in 0..order.len() {
        let mut at = start;
        while order[at] != DONE {
            let from = order[at];
            order[at] = DONE;
            if from == start {
                break;
            }
            v.swap(at, from);
            at = from;
        }
    }
}

/// A map kept as a vector sorted by key: what the crate's maps need (tens to thousands of
/// entries, iterated in key order), in a fraction of a B-tree's code for each key and value type.
#[derive(Debug, Clone)]
pub(crate) struct SortedMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    /// An empty map.
    pub(crate) const fn new() -> Self {
        Self(Vec::new())
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        // A binary search written out: each key is in the map once, so that the position
        // found is the one `binary_search_by` gives, without its copy for each closure.
        let (mut low, mut high) = (0, self.0.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match self.0[mid].0.borrow().cmp(key) {
                Ordering::Less => low = mid + 1,
                Ordering::Greater => high = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(low)
    }

    /// The map of `pairs`: where a key comes more than once, its later values are folded into
    /// its first by `fold`, in the order `pairs` gives them. One stable sort: `O(n log n)`,
    /// where inserting one at a time moves `O(n)` entries each.
    pub(crate) fn from_pairs(mut pairs: Vec<(K, V)>, mut fold: impl FnMut(&mut V, V)) -> Self {
        // Sorted by key, stably, then reversed: popped from the back, the pairs come in key
        // order, and each key's values in the order given.
        let mut order = sorted_positions(pairs.len(), &mut |a: usize, b: usize| {
            pairs[a].0.cmp(&pairs[b].0)
        });
        order.reverse();
        permute(&mut pairs, order);
        let mut out: Vec<(K, V)> = Vec::with_capacity(pairs.len());
        while let Some((k, v)) = pairs.pop() {
            match out.last_mut() {
                Some(last) if last.0 == k => fold(&mut last.1, v),
                _ => out.push((k, v)),
            }
        }
        Self(out)
    }

    /// The value of `key`, made by `make` where the map has none. Each new key moves the
    /// entries after it: for the small maps that are built a key at a time.
    pub(crate) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let at = match self.find(&key) {
            Ok(at) => at,
            Err(at) => {
                self.0.insert(at, (key, make()));
                at
            }
        };
        &mut self.0[at].1
    }

    /// Sets the value of `key`; returns the one it replaces.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.0[at].1, value)),
            Err(at) => {
                self.0.insert(at, (key, value));
                None
            }
        }
    }

    /// The value of `key`.
    pub(crate) fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        match self.find(key) {
            Ok(at) => Some(&self.0[at].1),
            Err(_) => None,
        }
    }

    /// Whether the map has `key`.
    pub(crate) fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// How many keys the map has.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the map is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The keys and values, in key order.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// The values, in their keys' order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    /// The keys and values, in key order.
    pub(crate) fn into_vec(self) -> Vec<(K, V)> {
        self.0
    }

    /// The values, in their keys' order.
    #[cfg(any(test, feature = "__cli"))]
    pub(crate) fn into_values(self) -> Vec<V> {
        self.0.into_iter().map(|(_, v)| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so that the test needs no dependency.
    fn numbers(seed: u64, n: usize, range: u64) -> Vec<u64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % range
            })
            .collect()
    }

    #[test]
    fn sorts_as_the_standard_library_does_and_keeps_equal_elements_in_order() {
        for (seed, n, range) in [
            (1, 0, 5),
            (2, 1, 5),
            (3, 2, 2),
            (4, 17, 3),
            (5, 300, 40),
            (6, 5000, 7),
        ] {
            // Each element remembers where it was, so that stability can be seen.
            let keys = numbers(seed, n, range);
            let mut ours: Vec<(u64, usize)> = keys.iter().copied().zip(0..).collect();
            let mut theirs = ours.clone();
            sort_by_key(&mut ours, |&(k, _)| k);
            theirs.sort_by_key(|&(k, _)| k);
            assert_eq!(ours, theirs, "seed {seed}, {n} elements");
            let mut reversed = ours.clone();
            sort_by(&mut reversed, |a, b| b.0.cmp(&a.0));
            let mut expected = theirs.clone();
            expected.sort_by_key(|e| std::cmp::Reverse(e.0));
            assert_eq!(reversed, expected);
        }
    }

    #[test]
    fn sorts_boxes_and_zero_sized_elements() {
        // Elements move as their bytes: a box must come out owned once, with its value.
        let mut boxes: Vec<Box<u32>> = [5, 1, 4, 1, 3].map(Box::new).to_vec();
        sort_by(&mut boxes, |a, b| a.cmp(b));
        let values: Vec<u32> = boxes.iter().map(|b| **b).collect();
        assert_eq!(values, [1, 1, 3, 4, 5]);
        let mut units = vec![(); 7];
        sort_by(&mut units, |_, _| Ordering::Equal);
        assert_eq!(units.len(), 7);
        #[derive(Debug, PartialEq)]
        struct Zero;
        let mut zeros = vec![Zero, Zero, Zero];
        sort_by_key(&mut zeros, |_| 0_u8);
        assert_eq!(zeros, [Zero, Zero, Zero]);
    }

    #[test]
    fn sorts_owned_values_without_copying_them() {
        let mut v: Vec<String> = ["pear", "apple", "fig", "apple", "kiwi"]
            .map(String::from)
            .to_vec();
        sort(&mut v);
        assert_eq!(v, ["apple", "apple", "fig", "kiwi", "pear"]);
        sort_dedup(&mut v);
        assert_eq!(v, ["apple", "fig", "kiwi", "pear"]);
        let mut by_len = v.clone();
        sort_by_key(&mut by_len, |s| std::cmp::Reverse(s.len()));
        assert_eq!(by_len, ["apple", "kiwi", "pear", "fig"]);
    }

    #[test]
    fn a_sorted_map_keeps_its_keys_in_order_and_one_value_each() {
        let mut m = SortedMap::new();
        assert!(m.is_empty());
        for (i, k) in numbers(9, 200, 50).into_iter().enumerate() {
            *m.get_or_insert_with(k, || 0) += 1;
            if i % 7 == 0 {
                m.insert(k + 1000, i);
            }
        }
        let keys: Vec<u64> = m.iter().map(|(k, _)| *k).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(keys, sorted, "in order, each key once");
        let counted: usize = m.iter().filter(|(k, _)| **k < 1000).map(|(_, v)| *v).sum();
        assert_eq!(counted, 200, "every count landed on its key");
        let first = keys[0];
        assert!(m.contains_key(&first) && m.get(&first).is_some_and(|v| *v > 0));
        assert!(!m.contains_key(&u64::MAX) && m.get(&u64::MAX).is_none());
        assert_eq!(m.insert(5000, 1), None);
        assert_eq!(m.insert(5000, 2), Some(1));
        assert_eq!(m.iter().next_back(), Some((&5000, &2)));
        assert_eq!(m.len(), m.values().count());
        assert_eq!(m.clone().into_values().len(), m.into_vec().len());
    }

    #[test]
    fn a_map_from_pairs_folds_each_keys_values_in_the_order_given() {
        // Values remember where they came from: the fold must see them in that order.
        let keys = numbers(11, 3000, 97);
        let pairs: Vec<(u64, Vec<usize>)> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| (k, vec![i]))
            .collect();
        let m = SortedMap::from_pairs(pairs, |a, b| a.extend(b));
        let mut one_at_a_time: SortedMap<u64, Vec<usize>> = SortedMap::new();
        for (i, &k) in keys.iter().enumerate() {
            one_at_a_time.get_or_insert_with(k, Vec::new).push(i);
        }
        assert_eq!(m.len(), one_at_a_time.len());
        let (a, b) = (m.into_vec(), one_at_a_time.into_vec());
        assert_eq!(a, b);
        assert!(
            a.windows(2).all(|w| w[0].0 < w[1].0),
            "keys in order, once each"
        );
        assert!(
            a.iter().all(|(_, v)| v.windows(2).all(|w| w[0] < w[1])),
            "values in order"
        );
        assert!(SortedMap::<u8, u8>::from_pairs(Vec::new(), |_, _| {}).is_empty());
    }
}
