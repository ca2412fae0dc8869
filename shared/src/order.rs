//! Sorting by a number taken from each element, with one instance of the standard library's sort behind every
//! caller.
//!
//! Why not `v.sort_by(|a, b| a.x.total_cmp(&b.x))` at each call site: every such closure is its own type, so each
//! call site instantiates the whole standard sort (driftsort or ipnsort with its small-sort networks and merges,
//! ≈ 5 KB of wasm each) for its element type. The page's bundle held 22 instances, 134 KB of its code before
//! wasm-opt (docs/page.md, "Where the bytes are"). Here the sort runs once, on `(key, position)` pairs, and only
//! the key extraction and the permutation are generic.
//!
//! Both sorts are stable (ties keep their order) and order keys as `f64::total_cmp` and `u64::cmp` do. Hot paths
//! that sort plain numbers (the percentiles, the engine's queues) keep their own direct sorts.

/// Sorts `v` by `key` (`f64::total_cmp`), stably.
pub fn sort_by_f64_key<T>(v: &mut [T], key: impl Fn(&T) -> f64) {
    let mut keyed: Vec<(f64, usize)> = v.iter().enumerate().map(|(i, x)| (key(x), i)).collect();
    sort_f64_pairs(&mut keyed);
    permute(v, keyed.into_iter().map(|(_, i)| i).collect());
}

/// Sorts `v` by `key`, stably.
pub fn sort_by_u64_key<T>(v: &mut [T], key: impl Fn(&T) -> u64) {
    let mut keyed: Vec<(u64, usize)> = v.iter().enumerate().map(|(i, x)| (key(x), i)).collect();
    keyed.sort_unstable();
    permute(v, keyed.into_iter().map(|(_, i)| i).collect());
}

/// The one instance of the sort for `f64` keys; the position breaks ties, so the unstable sort is stable here.
#[inline(never)]
fn sort_f64_pairs(keyed: &mut [(f64, usize)]) {
    keyed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
}

/// Reorders `v` so that `v[i]` becomes the old `v[from[i]]` (`from` is a permutation of `0..v.len()`), by following
/// its cycles with swaps.
fn permute<T>(v: &mut [T], mut from: Vec<usize>) {
    for start in 0..v.len() {
        let mut cur = start;
        while from[cur] != start {
            let next = from[cur];
            from[cur] = cur;
            v.swap(cur, next);
            cur = next;
        }
        from[cur] = cur;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal to the standard stable sort on the same key, ties and NaN included, for many sizes and orders.
    #[test]
    fn sorts_as_the_standard_stable_sort_does() {
        let mut rng = crate::pyrand::PyRandom::from_u64(7);
        let mut next = move || rng.getrandbits(64);
        for n in [0usize, 1, 2, 3, 7, 20, 100, 1000] {
            let v: Vec<(f64, u64)> = (0..n)
                .map(|i| {
                    let k = match next() % 10 {
                        0 => f64::NAN,
                        1 => -0.0,
                        2 => 0.0,
                        _ => (next() % 17) as f64 - 8.0,
                    };
                    (k, i as u64)
                })
                .collect();
            let mut want = v.clone();
            want.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut got = v.clone();
            sort_by_f64_key(&mut got, |x| x.0);
            assert_eq!(
                got.iter().map(|x| x.1).collect::<Vec<_>>(),
                want.iter().map(|x| x.1).collect::<Vec<_>>(),
                "n = {n}"
            );
            let keys: Vec<(u64, u64)> = v.iter().map(|x| (next() % 5, x.1)).collect();
            let mut want = keys.clone();
            want.sort_by_key(|x| x.0);
            let mut got = keys;
            sort_by_u64_key(&mut got, |x| x.0);
            assert_eq!(got, want, "n = {n}");
            // Stable passes from the last key to the first sort by the tuple of keys (ties keep their order).
            let triples: Vec<(u64, u64, u64, usize)> =
                (0..n).map(|i| (next() % 3, next() % 3, next() % 3, i)).collect();
            let mut want = triples.clone();
            want.sort_by_key(|t| (t.0, t.1, t.2));
            let mut got = triples;
            sort_by_u64_key(&mut got, |t| t.2);
            sort_by_u64_key(&mut got, |t| t.1);
            sort_by_u64_key(&mut got, |t| t.0);
            assert_eq!(got, want, "n = {n}");
        }
    }
}
