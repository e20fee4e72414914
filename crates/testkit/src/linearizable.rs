//! A linearizability checker for id generators whose ids must increase in real time across
//! every node (`order = "strict"`).
//!
//! A history is one [`Op`] per request: when its caller started it, when the answer came back
//! (any one monotonic time unit for the whole history), and the ids it got. [`check`] proves:
//!
//! - **unique**: no id appears in two requests, or twice in one;
//! - **real-time order**: for every two requests `a`, `b` with `a.end < b.start`,
//!   `max(a.ids) < min(b.ids)`. Requests that overlap in time may get their ids in any order.
//!
//! A failed request (no ids) constrains nothing: its ids, if any were taken, were never
//! returned. A history with no ids at all is an error ([`Violation::Empty`]): a checker that
//! passes on nothing proves nothing.
//!
//! Cost: `O(n log n)` in the number of ids and requests (sort by end, sweep by start keeping
//! the largest id of every request that ended before). Pure std, so the simulation compiles
//! this file into itself (`#[path]`) without the test kit's dependencies.

use std::fmt;

/// One request: `start <= end`, in one monotonic time unit shared by the whole history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// When the caller sent it.
    pub start: u64,
    /// When the caller had its answer.
    pub end: u64,
    /// The ids it got, in the order it got them; empty for a failed request.
    pub ids: Vec<u64>,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request [{}, {}] ", self.start, self.end)?;
        match (self.ids.iter().min(), self.ids.iter().max()) {
            (Some(lo), Some(hi)) if self.ids.len() <= 8 => {
                write!(f, "got {:?} (min {lo}, max {hi})", self.ids)
            }
            (Some(lo), Some(hi)) => write!(f, "got {} ids, min {lo}, max {hi}", self.ids.len()),
            _ => write!(f, "got no ids"),
        }
    }
}

/// What a passing history held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// Requests with ids.
    pub ops: usize,
    /// Failed requests (no ids), which constrain nothing.
    pub failed: usize,
    /// Ids in all.
    pub ids: usize,
}

/// Why a history is not linearizable (or not checkable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// No request got an id: nothing was checked.
    Empty {
        /// Requests in the history (all failed).
        ops: usize,
    },
    /// A request ended before it started.
    Invalid(Op),
    /// `id` was handed out twice (`first` and `second` may be the same request).
    Duplicate {
        /// The id.
        id: u64,
        /// One request that got it.
        first: Op,
        /// Another (or the same one again).
        second: Op,
    },
    /// `later` started after `earlier` ended, but got an id at or below one of `earlier`'s.
    Stale {
        /// The request that ended first.
        earlier: Op,
        /// The request that started after it.
        later: Op,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Empty { ops } => write!(
                f,
                "nothing to check: {ops} requests, none got an id (a checker must not pass on nothing)"
            ),
            Violation::Invalid(op) => write!(f, "{op} ended before it started"),
            Violation::Duplicate { id, first, second } => {
                write!(f, "id {id} handed out twice: {first}; and {second}")
            }
            Violation::Stale { earlier, later } => {
                let hi = earlier.ids.iter().max().copied().unwrap_or(0);
                let lo = later.ids.iter().min().copied().unwrap_or(0);
                write!(
                    f,
                    "not linearizable: {later} started at {} after {earlier} ended at {}, \
                     but got id {lo} <= {hi}",
                    later.start, earlier.end
                )
            }
        }
    }
}

impl std::error::Error for Violation {}

/// Checks `ops` (any order) for unique ids and real-time order; see the module docs.
pub fn check(ops: &[Op]) -> Result<Checked, Violation> {
    if let Some(op) = ops.iter().find(|o| o.start > o.end) {
        return Err(Violation::Invalid(op.clone()));
    }
    // (min, max, index) of every request with ids.
    let spans: Vec<(u64, u64, usize)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| Some((*o.ids.iter().min()?, *o.ids.iter().max()?, i)))
        .collect();
    let failed = ops.len() - spans.len();
    if spans.is_empty() {
        return Err(Violation::Empty { ops: ops.len() });
    }

    let mut all: Vec<(u64, usize)> = spans
        .iter()
        .flat_map(|&(_, _, i)| ops[i].ids.iter().map(move |&id| (id, i)))
        .collect();
    all.sort_unstable();
    if let Some(w) = all.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Violation::Duplicate {
            id: w[0].0,
            first: ops[w[0].1].clone(),
            second: ops[w[1].1].clone(),
        });
    }

    let mut by_end: Vec<usize> = (0..spans.len()).collect();
    by_end.sort_unstable_by_key(|&k| ops[spans[k].2].end);
    let mut by_start: Vec<usize> = (0..spans.len()).collect();
    by_start.sort_unstable_by_key(|&k| ops[spans[k].2].start);
    // The span with the largest max id among those that ended before the current start.
    let mut ended = 0;
    let mut highest: Option<usize> = None;
    for &b in &by_start {
        let start = ops[spans[b].2].start;
        while ended < by_end.len() && ops[spans[by_end[ended]].2].end < start {
            let a = by_end[ended];
            if highest.is_none_or(|h| spans[a].1 > spans[h].1) {
                highest = Some(a);
            }
            ended += 1;
        }
        if let Some(a) = highest.filter(|&a| spans[a].1 >= spans[b].0) {
            return Err(Violation::Stale {
                earlier: ops[spans[a].2].clone(),
                later: ops[spans[b].2].clone(),
            });
        }
    }
    Ok(Checked {
        ops: spans.len(),
        failed,
        ids: all.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(start: u64, end: u64, ids: &[u64]) -> Op {
        Op {
            start,
            end,
            ids: ids.to_vec(),
        }
    }

    #[test]
    fn a_sequential_history_passes() {
        let h = [op(0, 1, &[1, 2]), op(2, 3, &[3]), op(4, 9, &[7, 8, 9])];
        assert_eq!(
            check(&h),
            Ok(Checked {
                ops: 3,
                failed: 0,
                ids: 6
            })
        );
    }

    #[test]
    fn a_stale_read_fails_and_names_both_requests() {
        // b started after a ended and got a smaller id.
        let h = [op(0, 5, &[10, 11]), op(6, 7, &[9])];
        let err = check(&h).unwrap_err();
        assert_eq!(
            err,
            Violation::Stale {
                earlier: h[0].clone(),
                later: h[1].clone()
            }
        );
        let text = err.to_string();
        assert!(
            text.contains("[0, 5]") && text.contains("[6, 7]") && text.contains("got id 9 <= 11"),
            "{text}"
        );
        // Equal ids across the boundary are stale too (and duplicates: the duplicate is named).
        assert!(check(&[op(0, 1, &[5]), op(2, 3, &[6, 4])]).is_err());
    }

    #[test]
    fn touching_requests_are_concurrent() {
        // a.end == b.start: they overlap at one instant, so any order is allowed.
        assert!(check(&[op(0, 5, &[10]), op(5, 6, &[9])]).is_ok());
    }

    #[test]
    fn overlapping_requests_may_take_any_order() {
        let h = [
            op(0, 10, &[9, 8]),
            op(1, 4, &[3]),
            op(2, 12, &[1, 20]),
            op(3, 5, &[2]),
        ];
        assert_eq!(check(&h).map(|c| c.ids), Ok(6));
        // The stale read is found whatever the order of the input.
        let mut h = vec![op(20, 21, &[4]), op(11, 13, &[5])];
        h.extend_from_slice(&[op(0, 10, &[9, 8]), op(1, 4, &[3])]);
        assert!(matches!(check(&h), Err(Violation::Stale { .. })));
    }

    #[test]
    fn a_duplicate_fails() {
        let err = check(&[op(0, 10, &[1, 2]), op(1, 3, &[2])]).unwrap_err();
        assert!(matches!(err, Violation::Duplicate { id: 2, .. }), "{err}");
        let err = check(&[op(0, 1, &[4, 4])]).unwrap_err();
        assert!(matches!(err, Violation::Duplicate { id: 4, .. }), "{err}");
    }

    #[test]
    fn an_empty_history_fails() {
        assert_eq!(check(&[]), Err(Violation::Empty { ops: 0 }));
        // Failed requests only: nothing was checked either.
        assert_eq!(
            check(&[op(0, 1, &[]), op(2, 3, &[])]),
            Err(Violation::Empty { ops: 2 })
        );
    }

    #[test]
    fn failed_requests_constrain_nothing() {
        let h = [op(0, 1, &[5]), op(2, 3, &[]), op(4, 5, &[6])];
        assert_eq!(
            check(&h),
            Ok(Checked {
                ops: 2,
                failed: 1,
                ids: 2
            })
        );
    }

    #[test]
    fn a_request_ending_before_it_starts_is_refused() {
        assert!(matches!(
            check(&[op(5, 4, &[1])]),
            Err(Violation::Invalid(_))
        ));
    }

    /// SplitMix64, so the property test needs no dependency.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % n
        }
    }

    /// A history of one counter: each request takes its ids at one instant between its start
    /// and end (its linearization point), in the order of those instants; one in ten fails.
    fn counter_history(rng: &mut Rng) -> Vec<Op> {
        let n = 1 + rng.below(60) as usize;
        let mut reqs: Vec<(u64, u64, u64)> = (0..n)
            .map(|_| {
                let start = rng.below(1000);
                let end = start + rng.below(50);
                let at = start + rng.below(end - start + 1);
                (at, start, end)
            })
            .collect();
        reqs.sort_unstable();
        let mut next = 1 + rng.below(10);
        reqs.into_iter()
            .map(|(_, start, end)| {
                let mut ids = Vec::new();
                if rng.below(10) != 0 {
                    for _ in 0..1 + rng.below(4) {
                        ids.push(next);
                        next += 1 + rng.below(3);
                    }
                }
                Op { start, end, ids }
            })
            .collect()
    }

    #[test]
    fn every_history_of_one_counter_passes() {
        let mut rng = Rng(1);
        for round in 0..2000 {
            let h = counter_history(&mut rng);
            if h.iter().all(|o| o.ids.is_empty()) {
                continue;
            }
            if let Err(v) = check(&h) {
                panic!("round {round}: {v}");
            }
        }
    }

    #[test]
    fn one_planted_inversion_always_fails() {
        let mut rng = Rng(2);
        let mut planted = 0;
        while planted < 2000 {
            let mut h = counter_history(&mut rng);
            // A pair in real-time order, both with ids.
            let pairs: Vec<(usize, usize)> = (0..h.len())
                .flat_map(|a| (0..h.len()).map(move |b| (a, b)))
                .filter(|&(a, b)| {
                    h[a].end < h[b].start && !h[a].ids.is_empty() && !h[b].ids.is_empty()
                })
                .collect();
            if pairs.is_empty() {
                continue;
            }
            let (a, b) = pairs[rng.below(pairs.len() as u64) as usize];
            // Swap a's largest id with b's smallest: still unique, b now got a smaller id.
            let ia = (0..h[a].ids.len())
                .max_by_key(|&k| h[a].ids[k])
                .unwrap_or(0);
            let ib = (0..h[b].ids.len())
                .min_by_key(|&k| h[b].ids[k])
                .unwrap_or(0);
            let (x, y) = (h[a].ids[ia], h[b].ids[ib]);
            h[a].ids[ia] = y;
            h[b].ids[ib] = x;
            let shuffled = rng.below(2) == 0;
            if shuffled {
                h.reverse();
            }
            match check(&h) {
                Err(Violation::Stale { earlier, later }) => {
                    assert!(earlier.end < later.start);
                }
                other => panic!("planted inversion {x} <-> {y} not found: {other:?}"),
            }
            planted += 1;
        }
    }
}
