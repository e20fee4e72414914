//! Which node to send a shard's request to first: the shard map of each shard-owned namespace
//! (`SnowflakeInfo.shards`, docs/api.md), learned from the nodes and cached, so a request goes
//! to the node holding its shard's range and is served there without a forward.
//!
//! Invariants:
//! - The map only picks the node tried first; [`Nodes::call_from`] falls back to the usual
//!   order, so a wrong or missing map costs a forward, never an answer.
//! - Learning a map asks every configured node for the namespace's info at once: each answer's
//!   `this_node` says which configured node has which advertise url, the ranges come from any
//!   answer. A holder that is not a configured node, or a range nobody holds, has no node: the
//!   usual order. A failed or partial fetch never fails a request.
//! - One entry per namespace; a namespace that is not shard-owned (or unknown) is remembered
//!   as such for the refresh period, and not asked about again meanwhile.
//! - The first routed request of a namespace waits for the fetch; a map older than the refresh
//!   period is refreshed in the background by the next routed request, at most one fetch per
//!   namespace in flight. A chosen node that failed (no answer, `no_leader`) loses its range
//!   until the next fetch, which is due at once.
//! - The lock is a std mutex, held to read or update an entry, never across `.await`.

use crate::config::SharedClock;
use crate::nodes::Nodes;
use crate::shard::ShardRoute;
use idmint_proto::v1 as proto;
use proto::namespace_info::Kind as InfoKind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A namespace's shards and the configured node holding each range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Routes {
    logical_shards: u64,
    shard_range: u64,
    /// Range index → index of the configured node holding it.
    holders: HashMap<u64, usize>,
}

/// The node a routed request goes to first, and the range that chose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice {
    pub(crate) node: usize,
    pub(crate) range: u64,
}

impl Routes {
    /// The routes of the maps the configured nodes answered (`(node index, map)`): node `i`
    /// is the one whose `this_node` is a holder's url; the ranges are the first answer's that
    /// read the authority (else the first answer's). `None` without an answer, or with shard
    /// counts no node could serve.
    pub(crate) fn from_answers(answers: &[(usize, proto::ShardMap)]) -> Option<Routes> {
        let base = answers
            .iter()
            .find(|(_, m)| m.error.is_none())
            .or_else(|| answers.first())
            .map(|(_, m)| m)?;
        if base.logical_shards == 0 || base.shard_range == 0 {
            return None;
        }
        let mut by_url: HashMap<&str, usize> = HashMap::new();
        for (node, map) in answers {
            if !map.this_node.is_empty() {
                // The first configured node with that url (a node may be listed twice).
                by_url.entry(map.this_node.as_str()).or_insert(*node);
            }
        }
        let holders = base
            .ranges
            .iter()
            .filter_map(|r| by_url.get(r.holder.as_str()).map(|&node| (r.range, node)))
            .collect();
        Some(Routes {
            logical_shards: base.logical_shards,
            shard_range: base.shard_range,
            holders,
        })
    }

    /// The shard `route` names: its own, or its key's (`key % logical_shards`).
    pub(crate) fn shard_of(&self, route: ShardRoute) -> u64 {
        match route {
            ShardRoute::Shard(shard) => shard,
            ShardRoute::Key(key) => key % self.logical_shards,
        }
    }

    /// The node holding `route`'s range, if a configured node does. A shard out of range
    /// has none (the node answers `invalid_request`).
    pub(crate) fn choose(&self, route: ShardRoute) -> Option<Choice> {
        let shard = self.shard_of(route);
        if shard >= self.logical_shards {
            return None;
        }
        let range = shard / self.shard_range;
        self.holders.get(&range).map(|&node| Choice { node, range })
    }
}

/// What is known of one namespace.
#[derive(Debug, Default)]
struct Entry {
    /// When the latest fetch ended (the client's monotonic clock); `None` before one did.
    learned_at: Option<u64>,
    /// Its routes; `None` for a namespace that is not shard-owned, or when no node answered.
    routes: Option<Routes>,
    /// A fetch is in flight.
    fetching: bool,
    /// A chosen node failed since the latest fetch: the next routed request fetches again.
    due: bool,
}

impl Entry {
    /// Node `choice.node` failed a request: its range goes by the usual order until the next
    /// fetch, which is due at once.
    fn forget(&mut self, choice: Choice) {
        if let Some(routes) = &mut self.routes {
            if routes.holders.get(&choice.range) == Some(&choice.node) {
                routes.holders.remove(&choice.range);
            }
        }
        self.due = true;
    }
}

/// What a routed request does about the map.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Plan {
    /// Use these routes (`None`: the usual order).
    Use(Option<Routes>),
    /// Nothing known yet: fetch, wait for it, then use what it learned.
    FetchAndWait,
    /// Use these routes and refresh them in the background.
    UseAndRefresh(Option<Routes>),
}

/// The plan for `entry` at `now`, marking a fetch in flight when it starts one.
fn plan(entry: &mut Entry, now: u64, refresh: Duration) -> Plan {
    let refresh = u64::try_from(refresh.as_nanos()).unwrap_or(u64::MAX);
    let routes = entry.routes.clone();
    match entry.learned_at {
        _ if entry.fetching => Plan::Use(routes),
        None => {
            entry.fetching = true;
            Plan::FetchAndWait
        }
        Some(at) if entry.due || now.saturating_sub(at) >= refresh => {
            entry.fetching = true;
            entry.due = false;
            Plan::UseAndRefresh(routes)
        }
        Some(_) => Plan::Use(routes),
    }
}

/// The shard maps of one client's namespaces.
#[derive(Debug)]
pub(crate) struct ShardMaps {
    nodes: Arc<Nodes>,
    clock: SharedClock,
    refresh: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl ShardMaps {
    pub(crate) fn new(nodes: Arc<Nodes>, clock: SharedClock, refresh: Duration) -> ShardMaps {
        ShardMaps {
            nodes,
            clock,
            refresh,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The node to try first for `route` of `ns`, learning or refreshing the map as due (see
    /// the module docs); `None`: the usual order. With a single node there is nothing to choose.
    pub(crate) async fn choose(self: &Arc<Self>, ns: &str, route: ShardRoute) -> Option<Choice> {
        if self.nodes.len() < 2 {
            return None;
        }
        let plan = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = entries.entry(ns.to_owned()).or_default();
            plan(entry, self.clock.monotonic_nanos(), self.refresh)
        };
        let routes = match plan {
            Plan::Use(routes) => routes,
            // A task of its own, so the fetch in flight ends (and is stored) even when the
            // request waiting for it is dropped.
            Plan::FetchAndWait => self.spawn_fetch(ns).await.ok().flatten(),
            Plan::UseAndRefresh(routes) => {
                drop(self.spawn_fetch(ns));
                routes
            }
        };
        routes?.choose(route)
    }

    /// Node `choice.node` failed a request of `ns` in a way another node may not have: its
    /// range goes by the usual order, and the map is due for a fetch at once.
    pub(crate) fn failed(&self, ns: &str, choice: Choice) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.get_mut(ns) {
            entry.forget(choice);
        }
    }

    /// [`ShardMaps::fetch`] on a task of its own.
    fn spawn_fetch(self: &Arc<Self>, ns: &str) -> tokio::task::JoinHandle<Option<Routes>> {
        let maps = self.clone();
        let ns = ns.to_owned();
        tokio::spawn(async move { maps.fetch(&ns).await })
    }

    /// Asks every node for `ns`'s map at once, stores what they say (ending the fetch in
    /// flight) and returns it.
    async fn fetch(&self, ns: &str) -> Option<Routes> {
        let request = proto::NamespaceRequest {
            namespace: ns.to_owned(),
        };
        let mut asks = tokio::task::JoinSet::new();
        for node in 0..self.nodes.len() {
            let nodes = self.nodes.clone();
            let request = request.clone();
            asks.spawn(async move {
                let op = |mut c: idmint_proto::nodes::NodeClient| {
                    let request = request.clone();
                    async move { c.namespace(request).await }
                };
                (node, nodes.call_one(node, &op).await)
            });
        }
        let mut answers = Vec::new();
        while let Some(joined) = asks.join_next().await {
            let Ok((node, outcome)) = joined else {
                continue;
            };
            // Not shard-owned (`shards` unset, another kind), unknown, or no answer: nothing
            // to learn from this node.
            if let Ok(proto::NamespaceInfo {
                kind: Some(InfoKind::Snowflake(info)),
                ..
            }) = outcome
            {
                if let Some(map) = info.shards {
                    answers.push((node, map));
                }
            }
        }
        answers.sort_by_key(|(node, _)| *node);
        let routes = Routes::from_answers(&answers);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = entries.entry(ns.to_owned()).or_default();
        entry.fetching = false;
        entry.learned_at = Some(self.clock.monotonic_nanos());
        entry.routes = routes.clone();
        routes
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn map(this_node: &str, ranges: &[(u64, &str)]) -> proto::ShardMap {
        proto::ShardMap {
            logical_shards: 64,
            shard_range: 8,
            this_node: this_node.to_owned(),
            ranges: ranges
                .iter()
                .map(|&(range, holder)| proto::ShardRangeHolder {
                    range,
                    first_shard: range * 8,
                    last_shard: range * 8 + 7,
                    holder: holder.to_owned(),
                })
                .collect(),
            error: None,
        }
    }

    const A: &str = "http://10.0.0.1:7879";
    const B: &str = "http://10.0.0.2:7879";
    const C: &str = "http://10.0.0.3:7879";

    #[test]
    fn a_range_goes_to_the_configured_node_whose_advertise_url_holds_it() {
        let ranges = [(0, A), (1, B), (2, C), (7, B)];
        // Configured in another order than the advertise urls: node #0 is C, #1 is A, #2 is B.
        let answers = [
            (0, map(C, &ranges)),
            (1, map(A, &ranges)),
            (2, map(B, &ranges)),
        ];
        let routes = Routes::from_answers(&answers).unwrap();
        let node = |route| routes.choose(route).map(|c| c.node);
        assert_eq!(node(ShardRoute::Shard(0)), Some(1));
        assert_eq!(node(ShardRoute::Shard(7)), Some(1));
        assert_eq!(node(ShardRoute::Shard(8)), Some(2));
        assert_eq!(node(ShardRoute::Shard(23)), Some(0));
        assert_eq!(node(ShardRoute::Shard(63)), Some(2));
        assert_eq!(
            routes.choose(ShardRoute::Shard(17)),
            Some(Choice { node: 0, range: 2 })
        );
    }

    #[test]
    fn a_key_goes_to_its_shard_modulo_the_logical_shards() {
        let ranges = [(0, A), (5, B)];
        let routes = Routes::from_answers(&[(0, map(A, &ranges)), (1, map(B, &ranges))]).unwrap();
        assert_eq!(routes.shard_of(ShardRoute::Key(64 * 1000 + 3)), 3);
        assert_eq!(routes.shard_of(ShardRoute::Key(u64::MAX)), u64::MAX % 64);
        assert_eq!(routes.choose(ShardRoute::Key(64 + 2)).unwrap().node, 0);
        assert_eq!(routes.choose(ShardRoute::Key(41)).unwrap().node, 1);
        assert_eq!(
            routes.choose(ShardRoute::Key(41)),
            routes.choose(ShardRoute::Shard(41))
        );
    }

    #[test]
    fn no_holder_known_means_the_usual_order() {
        // Range 1 held by a node nobody configured, range 2 by nobody, shard 64 out of range.
        let ranges = [(0, A), (1, "http://10.9.9.9:7879")];
        let routes = Routes::from_answers(&[(0, map(A, &ranges))]).unwrap();
        assert_eq!(routes.choose(ShardRoute::Shard(3)).unwrap().node, 0);
        assert_eq!(routes.choose(ShardRoute::Shard(8)), None);
        assert_eq!(routes.choose(ShardRoute::Shard(16)), None);
        assert_eq!(routes.choose(ShardRoute::Shard(64)), None);
        // The ranges come from any answer; a node that answered no url places no range.
        let routes = Routes::from_answers(&[(0, map("", &ranges)), (1, map(A, &[]))]).unwrap();
        assert_eq!(routes.choose(ShardRoute::Shard(3)).unwrap().node, 1);
        assert_eq!(Routes::from_answers(&[]), None);
    }

    #[test]
    fn ranges_come_from_an_answer_that_read_the_authority() {
        let mut failed = map(A, &[]);
        failed.error = Some("the authority did not answer".into());
        let routes = Routes::from_answers(&[(0, failed), (1, map(B, &[(0, A), (1, B)]))]).unwrap();
        assert_eq!(routes.choose(ShardRoute::Shard(0)).unwrap().node, 0);
        assert_eq!(routes.choose(ShardRoute::Shard(9)).unwrap().node, 1);
    }

    #[test]
    fn the_map_is_fetched_first_then_refreshed_once_when_stale() {
        let refresh = Duration::from_secs(10);
        let s = 1_000_000_000;
        let mut entry = Entry::default();
        assert_eq!(plan(&mut entry, 0, refresh), Plan::FetchAndWait);
        // While that fetch is in flight, others go by the usual order.
        assert_eq!(plan(&mut entry, s, refresh), Plan::Use(None));
        let routes = Routes::from_answers(&[(0, map(A, &[(0, A)]))]);
        entry.fetching = false;
        entry.learned_at = Some(2 * s);
        entry.routes = routes.clone();
        assert_eq!(plan(&mut entry, 11 * s, refresh), Plan::Use(routes.clone()));
        assert_eq!(
            plan(&mut entry, 12 * s, refresh),
            Plan::UseAndRefresh(routes.clone())
        );
        // One refresh in flight: the stale routes meanwhile, no second fetch.
        assert_eq!(plan(&mut entry, 13 * s, refresh), Plan::Use(routes));
    }

    #[test]
    fn a_not_owned_namespace_is_not_asked_about_again_within_the_period() {
        let refresh = Duration::from_secs(10);
        let s = 1_000_000_000;
        let mut entry = Entry {
            learned_at: Some(5 * s),
            ..Entry::default()
        };
        assert_eq!(plan(&mut entry, 14 * s, refresh), Plan::Use(None));
        assert_eq!(plan(&mut entry, 15 * s, refresh), Plan::UseAndRefresh(None));
    }

    #[test]
    fn a_failed_holder_loses_its_range_and_the_map_is_fetched_at_once() {
        let refresh = Duration::from_secs(10);
        let s = 1_000_000_000;
        let routes = Routes::from_answers(&[(0, map(A, &[(0, A), (1, B)])), (1, map(B, &[]))]);
        let mut entry = Entry {
            learned_at: Some(s),
            routes,
            ..Entry::default()
        };
        let choice = Choice { node: 1, range: 1 };
        entry.forget(choice);
        let Plan::UseAndRefresh(Some(left)) = plan(&mut entry, 2 * s, refresh) else {
            panic!("a fetch is due at once after a failure");
        };
        assert_eq!(left.choose(ShardRoute::Shard(8)), None);
        assert_eq!(left.choose(ShardRoute::Shard(0)).unwrap().node, 0);
        // That fetch is the one in flight; the next request does not start another.
        assert!(matches!(plan(&mut entry, 2 * s, refresh), Plan::Use(_)));
    }
}
