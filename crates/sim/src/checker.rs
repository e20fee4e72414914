//! The checker: what every run must satisfy, whatever the faults.
//!
//! - **unique**: no id is served twice (sequence ids to clients, and snowflake ids);
//! - **increasing per writer**: the ids a node takes for its clients, in the order it takes
//!   them, increase per residue class; a snowflake generator's ids increase;
//! - **above the rebase**: once a node applied a rebase to `F`, nothing it takes is below `F`;
//! - **inside a grant**: every sequence id served lies in a block the store granted;
//! - **accounted**: every buffer keeps `received = served + buffered + burned + given back`.
//!
//! The strict namespace adds, besides its linearizability check at the end of a run
//! (`linearizable::check`): its ids are unique and inside a grant of its authority, and its
//! buffers are accounted.
//!
//! The shard-owned snowflake namespace adds, for every answer a range holder issues:
//! - **one issuer per shard at a time**: the store holds the issuer's range lease, live, as it
//!   issues;
//! - **its shard**: every id decodes to the shard asked for;
//! - **unique**: no id is issued twice, across holders;
//! - **increasing per issuer**: the ids one lease issued for a shard increase;
//! - **above earlier issuers**: a shard's ids under a later lease (a larger fencing token) are
//!   above every id of it under an earlier one (the takeover starts above the floor).
//!
//! A restore of a member rolls back what was served and granted of its class at or above the
//! restored watermark (that history is undone with the data), and restarts the order per writer.

use std::collections::{BTreeMap, HashSet};

/// Which member a sequence id belongs to: its residue class.
pub fn class_of(id: u64) -> usize {
    (id % 2) as usize
}

/// Every check of one run; the first violation is kept.
#[derive(Debug, Default)]
pub struct Checker {
    served: HashSet<u64>,
    snowflakes: HashSet<u64>,
    /// Per class, granted intervals `start -> end` (ids of that class), merged.
    grants: [BTreeMap<u64, u64>; 2],
    /// The strict namespace: ids served, granted intervals.
    strict_served: HashSet<u64>,
    strict_grants: BTreeMap<u64, u64>,
    /// Per (writer, class): answered takes by take order, each with its lowest and highest id.
    order: BTreeMap<(usize, usize), BTreeMap<u64, (u64, u64)>>,
    /// Per writer of snowflakes (node, generation): the last id.
    snow_order: BTreeMap<(usize, u64), u64>,
    /// Per node, the highest rebase floor it applied.
    floors: BTreeMap<usize, u64>,
    /// The shard namespace: ids issued.
    shard_ids: HashSet<u64>,
    /// Per shard, per lease token: the lowest and highest id it issued, and the last.
    shard_spans: BTreeMap<u64, BTreeMap<u64, (u64, u64, u64)>>,
    /// Shard ids issued in all.
    pub shard_count: u64,
    /// The first violation.
    pub violation: Option<String>,
    /// Ids served in all.
    pub served_count: u64,
    /// Snowflake ids issued in all.
    pub snowflake_count: u64,
}

impl Checker {
    /// Records a violation (the first is kept).
    pub fn fail(&mut self, why: String) {
        if self.violation.is_none() {
            self.violation = Some(why);
        }
    }

    /// The store granted `[start, end)` of `class`.
    pub fn grant(&mut self, class: usize, start: u64, end: u64) {
        merge(&mut self.grants[class], start, end);
    }

    /// The strict namespace's authority granted `[start, end)`.
    pub fn strict_grant(&mut self, start: u64, end: u64) {
        merge(&mut self.strict_grants, start, end);
    }

    /// `ids` of the strict namespace were handed to a client of `node`.
    pub fn strict_served(&mut self, node: usize, ids: &[u64]) {
        for &id in ids {
            self.served_count += 1;
            if !inside(&self.strict_grants, id) {
                self.fail(format!(
                    "node {node} served strict id {id}, inside no grant"
                ));
            }
            if !self.strict_served.insert(id) {
                self.fail(format!(
                    "strict id {id} served twice (second time by node {node})"
                ));
            }
        }
    }

    fn granted(&self, id: u64) -> bool {
        inside(&self.grants[class_of(id)], id)
    }

    /// Node `node` applied a rebase to `to`.
    pub fn floor_applied(&mut self, node: usize, to: u64) {
        let f = self.floors.entry(node).or_insert(0);
        *f = (*f).max(to);
    }

    /// The floor `node` applied (0: none).
    pub fn floor_of(&self, node: usize) -> u64 {
        self.floors.get(&node).copied().unwrap_or(0)
    }

    /// `node` answered a client with `ids`, which it took from its buffer as its `seq`th take,
    /// when the floor it had applied was `floor`. Only answered takes count: a failed request's
    /// ids may come out again.
    pub fn taken(&mut self, node: usize, seq: u64, ids: &[u64], floor: u64) {
        for &id in ids {
            if id < floor {
                self.fail(format!(
                    "node {node} took id {id} below its rebase floor {floor}"
                ));
            }
        }
        for class in 0..2 {
            let mut of_class = ids.iter().copied().filter(|&id| class_of(id) == class);
            let Some(lo) = of_class.next() else {
                continue;
            };
            let hi = of_class.next_back().unwrap_or(lo);
            let takes = self.order.entry((node, class)).or_default();
            let before = takes.range(..seq).next_back().map(|(_, &(_, h))| h);
            let after = takes.range(seq + 1..).next().map(|(_, &(l, _))| l);
            takes.insert(seq, (lo, hi));
            if let Some(h) = before.filter(|&h| h >= lo) {
                self.fail(format!(
                    "node {node} took id {lo} after {h} (not increasing per writer)"
                ));
            }
            if let Some(l) = after.filter(|&l| l <= hi) {
                self.fail(format!(
                    "node {node} took id {l} after {hi} (not increasing per writer)"
                ));
            }
        }
    }

    /// `ids` were handed to a client.
    pub fn served(&mut self, node: usize, ids: &[u64]) {
        for &id in ids {
            self.served_count += 1;
            if !self.granted(id) {
                self.fail(format!("node {node} served id {id}, inside no grant"));
            }
            if !self.served.insert(id) {
                self.fail(format!("id {id} served twice (second time by node {node})"));
            }
        }
    }

    /// A snowflake generator `(node, generation)` issued `ids`.
    pub fn snowflakes(&mut self, node: usize, generation: u64, ids: &[u64]) {
        for &id in ids {
            self.snowflake_count += 1;
            let last = self.snow_order.entry((node, generation)).or_insert(0);
            if id <= *last {
                let l = *last;
                self.fail(format!(
                    "snowflake generator {node}/{generation} issued {id} after {l}"
                ));
            }
            let last = self.snow_order.entry((node, generation)).or_insert(0);
            *last = id;
            if !self.snowflakes.insert(id) {
                self.fail(format!(
                    "snowflake id {id:#x} issued twice (second by node {node})"
                ));
            }
        }
    }

    /// Node `node`, under its lease of token `token` on the shard's range (`live`: the store
    /// holds that lease, live, now), issued `ids` for `shard`, in order.
    pub fn shard_issued(&mut self, node: usize, shard: u64, token: u64, live: bool, ids: &[u64]) {
        if !live && !ids.is_empty() {
            self.fail(format!(
                "node {node} issued ids of shard {shard} under range lease token {token}, which the store does not hold live: two issuers at once"
            ));
        }
        let layout = crate::shards::layout();
        let spans = self.shard_spans.entry(shard).or_default();
        let below = spans.range(..token).map(|(_, s)| s.1).max();
        let above = spans.range(token + 1..).map(|(_, s)| s.0).min();
        let mut why = Vec::new();
        for &id in ids {
            self.shard_count += 1;
            match layout.decode(id) {
                Ok(d) if d.parts.node == shard => {}
                Ok(d) => why.push(format!(
                    "node {node} answered shard {shard} with id {id:#x} of shard {}",
                    d.parts.node
                )),
                Err(e) => why.push(format!(
                    "node {node} answered id {id:#x}, which does not decode: {e}"
                )),
            }
            if !self.shard_ids.insert(id) {
                why.push(format!(
                    "shard id {id:#x} issued twice (second by node {node}, token {token})"
                ));
            }
            let span = spans.entry(token).or_insert((id, 0, 0));
            if span.2 != 0 && id <= span.2 {
                why.push(format!(
                    "lease {token} issued shard {shard}'s id {id:#x} after {:#x}",
                    span.2
                ));
            }
            span.0 = span.0.min(id);
            span.1 = span.1.max(id);
            span.2 = id;
            if let Some(b) = below.filter(|&b| id <= b) {
                why.push(format!(
                    "node {node} issued shard {shard}'s id {id:#x} under lease {token}, not above {b:#x} of an earlier lease"
                ));
            }
            if let Some(a) = above.filter(|&a| id >= a) {
                why.push(format!(
                    "node {node} issued shard {shard}'s id {id:#x} under lease {token}, not below {a:#x} of a later lease"
                ));
            }
        }
        if let Some(w) = why.into_iter().next() {
            self.fail(w);
        }
    }

    /// A buffer's counters (`strict`: the node's buffer of the strict namespace).
    pub fn accounted(
        &mut self,
        node: usize,
        strict: bool,
        stats: idmint_core::BufferStats,
        buffered: u64,
    ) {
        let out = stats.served + buffered + stats.burned + stats.given_back;
        if stats.received != out {
            let which = if strict { " (strict namespace)" } else { "" };
            self.fail(format!(
                "node {node}{which}: received {} != served {} + buffered {buffered} + burned {} + given back {}",
                stats.received, stats.served, stats.burned, stats.given_back
            ));
        }
    }

    /// Member `class` was restored to `watermark`: its history at or above it is undone.
    pub fn rollback(&mut self, class: usize, watermark: u64) {
        self.served
            .retain(|&id| class_of(id) != class || id < watermark);
        let g = &mut self.grants[class];
        let cut: Vec<(u64, u64)> = g.range(..).map(|(&s, &e)| (s, e)).collect();
        g.clear();
        for (s, e) in cut {
            if s < watermark {
                g.insert(s, e.min(watermark));
            }
        }
        self.order.clear();
    }
}

/// Adds `[start, end)` to the merged intervals `g`.
fn merge(g: &mut BTreeMap<u64, u64>, start: u64, end: u64) {
    let mut s = start;
    let mut e = end;
    if let Some((&ps, &pe)) = g.range(..=s).next_back() {
        if pe >= s {
            s = ps;
            e = e.max(pe);
        }
    }
    let overlapped: Vec<u64> = g.range(s..=e).map(|(&k, _)| k).collect();
    for k in overlapped {
        if let Some(ke) = g.remove(&k) {
            e = e.max(ke);
        }
    }
    g.insert(s, e);
}

/// Whether `id` lies in one of the merged intervals `g`.
fn inside(g: &BTreeMap<u64, u64>, id: u64) -> bool {
    g.range(..=id).next_back().is_some_and(|(_, &end)| id < end)
}
