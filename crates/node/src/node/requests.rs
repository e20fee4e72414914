//! The node's operations: the one path every request of every front-end takes. A front-end
//! parses its protocol, calls one of these, and encodes the answer or maps the [`IdError`]; it
//! authenticates, authorizes, limits, counts and computes nothing itself.
//!
//! Every operation runs the same steps, in this order:
//! 1. **who**: the request's [`Credentials`] become a [`Caller`] (a bearer token per request, or
//!    a connection's session);
//! 2. **how many**: one count rule for every front-end ([`count_rule`]): absent means 1; 0, or
//!    more than the node's limit for the operation (`server.max_count` for ids,
//!    `server.max_block_request` for blocks), is `invalid_count`;
//! 3. **may it**: the token, its scope on the namespace and its `max_count`
//!    ([`crate::auth::Auth::admit`]), before the namespace is looked up, so a refused request
//!    creates and reserves nothing;
//! 4. **which namespace**: looked up, or created on first use, by the requests that take ids or
//!    blocks only; reads, give-backs and decodes never create ([`Node::read_namespace`]). A
//!    request for ids that names a shard or key ([`ShardRoute`]) is refused first when the
//!    name's configuration rules a route out, so it creates nothing;
//! 5. **the rate quota**, from the namespace's own buckets ([`crate::auth::Admitted::take_quota`]);
//! 6. **carry out**, through the namespace ([`crate::namespace`]);
//! 7. **count**: ids handed out to the token (`idmint_auth_ids_total`), and every error by its
//!    code (`idmint_errors_total`), here and nowhere else.
//!
//! What it does not do: parse or encode any protocol, or map errors to statuses (each
//! front-end's `error` module).

use super::{Node, Served};
use crate::auth::{Admitted, Caller, Scope};
use crate::error::IdError;
use crate::metrics::ErrorLabels;
use crate::namespace::route::{self, ShardRoute};
use crate::namespace::{Ids, Namespace, NamespaceView};
use crate::supply::{Lease, TakeBack};
use idmint_api as api;
use idmint_core::{Block, NamespaceName};
use idmint_store::Advance;
use std::sync::Arc;

/// The most ids one stream ([`Node::open_stream`]) may ask for.
pub const MAX_STREAM_TOTAL: u64 = 100_000_000;

/// Who sends a request, as the front-end received it.
#[derive(Debug, Clone, Copy)]
pub enum Credentials<'a> {
    /// The value of the request's `Authorization` header (HTTP) or `authorization` metadata
    /// (gRPC), if it has one.
    Header(Option<&'a [u8]>),
    /// A connection's session (RESP): the caller its `AUTH` established; `None` before one
    /// succeeded (or with `[auth]` on, a connection that never sent one).
    Session(Option<Caller>),
}

/// Which limit a count is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Ids of one request: `server.max_count`.
    Ids,
    /// One block for a lower tier: `server.max_block_request`.
    Block,
}

/// The one count rule: `requested` absent is 1; 0 or above `max` is refused naming `key`.
pub fn count_rule(requested: Option<u64>, max: u64, key: &str) -> Result<u64, IdError> {
    match requested {
        None => Ok(1),
        Some(0) => Err(IdError::InvalidCount(format!(
            "count must be at least 1 (at most {max}, {key})"
        ))),
        Some(n) if n > max => Err(IdError::InvalidCount(format!(
            "count {n} is above this server's maximum of {max} ({key})"
        ))),
        Some(n) => Ok(n),
    }
}

/// Ids handed out by [`Node::take_ids`], with the namespace that handed them out (whose name
/// and kind an answer may need).
#[derive(Debug)]
pub struct Taken {
    /// The namespace.
    pub namespace: Arc<Namespace>,
    /// The ids, increasing.
    pub ids: Ids,
}

/// What became of a tail handed back ([`Node::give_back`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenBack {
    /// Whether the ids are back in front of the buffer (they will be handed out next).
    pub given_back: bool,
    /// How many ids went back.
    pub ids: u64,
    /// Why they did not, when they did not: the tail is then burned.
    pub reason: String,
}

impl Node {
    /// The caller `who` names (step 1).
    pub fn caller(&self, who: Credentials<'_>) -> Result<Caller, IdError> {
        match who {
            Credentials::Header(header) => self.auth().authenticate_header(header),
            Credentials::Session(Some(caller)) => Ok(caller),
            Credentials::Session(None) if !self.auth().enabled() => Ok(Caller::Open),
            Credentials::Session(None) => Err(IdError::Unauthorized(
                "Authentication required: this node has [auth] on; send AUTH <token> first".into(),
            )),
        }
    }

    /// Counts `e` in `idmint_errors_total` by its code: for the errors a front-end finds itself
    /// while parsing, before any operation runs (the operations count their own).
    pub fn count_error(&self, e: &IdError) {
        self.metrics()
            .errors
            .get_or_create(&ErrorLabels {
                code: e.code().as_str(),
            })
            .inc();
    }

    /// `result`, its error counted.
    pub(super) fn counted<T>(&self, result: Result<T, IdError>) -> Result<T, IdError> {
        if let Err(e) = &result {
            self.count_error(e);
        }
        result
    }

    /// `count` held to `limit` (step 2).
    fn count_of(&self, requested: Option<u64>, limit: Limit) -> Result<u64, IdError> {
        match limit {
            Limit::Ids => count_rule(requested, self.config().max_count, "server.max_count"),
            Limit::Block => count_rule(
                requested,
                self.config().max_block_request,
                "server.max_block_request",
            ),
        }
    }

    /// Steps 1 to 5 of a request that takes ids from `name` (creating it on first use); a
    /// `route` the configuration of `name` rules out is refused before step 4.
    async fn admit_taking(
        &self,
        who: Credentials<'_>,
        name: &str,
        scope: Scope,
        count: u64,
        route: Option<ShardRoute>,
    ) -> Result<(Served, Admitted), IdError> {
        let caller = self.caller(who)?;
        let admitted = self.auth().admit(caller, name, scope, count)?;
        if let Some(route) = route {
            self.route_possible(name, route)?;
        }
        let served = self.namespace(name).await?;
        admitted.take_quota(self.auth(), &served.buckets, name, count)?;
        Ok((served, admitted))
    }

    /// Refuses `route` when the configuration of `name` rules it out (a name that is not set
    /// up at all is left to the lookup, which answers what it answers for any request).
    fn route_possible(&self, name: &str, route: ShardRoute) -> Result<(), IdError> {
        let parsed = NamespaceName::new(name)?;
        let config = self.config();
        let declared = config.namespaces.get(&parsed);
        let defaults =
            declared.is_none() && (config.family_of(&parsed).is_some() || config.auto_create);
        if (declared.is_some() || defaults) && route::refused_before_setup(declared) {
            return Err(route::not_routed(name, route));
        }
        Ok(())
    }

    /// Steps 1 and 3 of a read of `name`, then the namespace without creating it (step 4).
    async fn admit_reading(
        &self,
        who: Credentials<'_>,
        name: &str,
        scope: Scope,
    ) -> Result<NamespaceView, IdError> {
        let caller = self.caller(who)?;
        self.auth().admit(caller, name, scope, 0)?;
        self.read_namespace(name).await.map_err(|e| match e {
            IdError::UnknownNamespace(name) if self.config().auto_create => {
                IdError::NotCreatedByReads(name)
            }
            other => other,
        })
    }

    /// `count` ids of namespace `name` (1 when absent), increasing: HTTP `GET /v1/ids`, gRPC
    /// `Next`, RESP `INCR`, `IDMINT.NEXT`. With a `route` (the request's `shard` or `key`),
    /// the ids of that shard ([`Namespace::ids_routed`]); a name whose configuration rules a
    /// route out is refused before it is looked up, so the refusal creates nothing.
    pub async fn take_ids(
        &self,
        who: Credentials<'_>,
        name: &str,
        count: Option<u64>,
        route: Option<ShardRoute>,
    ) -> Result<Taken, IdError> {
        let result = async {
            let count = self.count_of(count, Limit::Ids)?;
            let (served, admitted) = self
                .admit_taking(who, name, Scope::Ids, count, route)
                .await?;
            let ids = served.ns.ids_routed(count, route).await?;
            admitted.served(self.auth(), ids.len() as u64);
            Ok(Taken {
                namespace: served.ns,
                ids,
            })
        }
        .await;
        self.counted(result)
    }

    /// The proof this node gives with the answer to a forward that carried `challenge`
    /// ([`crate::peers::proof`], keyed by its `[peers]` token); empty on a node without
    /// `[peers]`, which answers no forward.
    pub fn peer_proof(&self, challenge: &[u8], term: u64, ids: &[u64]) -> Vec<u8> {
        self.peers
            .as_ref()
            .map(|p| p.prove(challenge, term, ids))
            .unwrap_or_default()
    }

    /// A forward is answered only for a peer: a caller presenting this cluster's `[peers]`
    /// token ([`crate::peers::Peers::admits`]), whatever `[auth]` says. A node without
    /// `[peers]` forwards nothing and answers no forward.
    fn admit_peer(&self, who: &Credentials<'_>) -> Result<(), IdError> {
        let Some(peers) = &self.peers else {
            return Err(IdError::Forbidden(
                "this node has no [peers] section: it answers no forward".into(),
            ));
        };
        match who {
            Credentials::Header(header) if peers.admits(*header) => Ok(()),
            _ => Err(IdError::Unauthorized(
                "a forward is answered only for a node of this cluster: send this cluster's peer \
                 token ([peers] token) as the bearer token"
                    .into(),
            )),
        }
    }

    /// Ids another node forwarded (gRPC `Forward`): of strict namespace `name` for the requests
    /// a follower batched, served only while this node leads it; or of a shard-owned snowflake
    /// namespace, `count` ids of `shard`, or for each of `parts` (shard, count, in order, summing
    /// to `count`) its ids, served only while this node holds each shard's range (taking it if
    /// nobody does). Never forwarded again (one hop): otherwise `no_leader`.
    /// Returns the ids and the fencing token they were served under (the leader's term, the
    /// range lease's token).
    ///
    /// Admitted as a request for ids is, under the forwarding node's own token: the `peer`
    /// scope on `name` (no application token holds it), the count rule with
    /// `server.max_count` (a follower's batches are cut to it, [`crate::peers::batch`]), the
    /// token's `max_count`, then its rate quota.
    pub async fn take_forwarded(
        &self,
        who: Credentials<'_>,
        name: &str,
        count: u64,
        consecutive: bool,
        shard: Option<u64>,
        parts: &[(u64, u64)],
    ) -> Result<(Vec<u64>, u64), IdError> {
        let result = async {
            self.admit_peer(&who)?;
            let count = self.count_of(Some(count), Limit::Ids)?;
            let parts = match (shard, parts) {
                (None, []) => Vec::new(),
                (Some(shard), []) => vec![(shard, count)],
                (None, parts)
                    if parts
                        .iter()
                        .map(|&(_, n)| n)
                        .try_fold(0u64, u64::checked_add)
                        == Some(count)
                        && parts.iter().all(|&(_, n)| n > 0) =>
                {
                    parts.to_vec()
                }
                _ => {
                    return Err(IdError::InvalidRequest(
                        "a forward names one shard, or parts of at least one id each whose \
                         counts sum to its count"
                            .into(),
                    ))
                }
            };
            let route = parts.first().map(|&(shard, _)| ShardRoute::Shard(shard));
            let (served, admitted) = self
                .admit_taking(who, name, Scope::Peer, count, route)
                .await?;
            let not_forwarded = || {
                IdError::WrongKind(format!(
                    "namespace {name:?} takes no forwards of this kind: only a strict namespace \
                     (without a shard) or a shard-owned snowflake namespace (with one) is \
                     forwarded; ask any node for its ids"
                ))
            };
            let (ids, token) = match (&*served.ns, parts.is_empty()) {
                (Namespace::Snowflake(s), false) if !consecutive => {
                    s.serve_forwarded(&parts).await?
                }
                (Namespace::Sequence(s), true) => match s.strict_order() {
                    Some(strict) => strict.serve_forwarded(count, consecutive).await?,
                    None => return Err(not_forwarded()),
                },
                _ => return Err(not_forwarded()),
            };
            admitted.served(self.auth(), ids.len() as u64);
            Ok((ids, token))
        }
        .await;
        self.counted(result)
    }

    /// One contiguous block of up to `count` ids of sequence namespace `name` for a lower
    /// tier, leased so that its unused tail can come back ([`Node::give_back`]): HTTP `POST
    /// /v1/blocks`, gRPC `Block`, RESP `IDMINT.BLOCK`. A 32-bit namespace caps the block at
    /// 1/100,000 of its space unless the token raises it (`max_block_32`). A block starts at or
    /// above `min_start` (gRPC's `BlockRequest.min_start`: a lower tier that restarted asks for
    /// nothing below what it served before) unless the store has nothing there yet; 0 asks
    /// nothing. `extends` is the caller's newest lease of the namespace on this node (0: none):
    /// a block that follows it with nothing handed out in between joins it, so a tail handed
    /// back may start in either (`Lease::from`).
    pub async fn take_block(
        &self,
        who: Credentials<'_>,
        name: &str,
        count: Option<u64>,
        min_start: u64,
        extends: u64,
    ) -> Result<Lease, IdError> {
        let result = async {
            let count = self.count_of(count, Limit::Block)?;
            let (served, admitted) = self
                .admit_taking(who, name, Scope::Blocks, count, None)
                .await?;
            let count = crate::config::block_request(&served.ns, count, admitted.max_block_32());
            let lease = served.ns.lease(count, min_start, extends).await?;
            admitted.served(self.auth(), lease.block.len());
            Ok(lease)
        }
        .await;
        self.counted(result)
    }

    /// `count` consecutive ids of sequence namespace `name` (step 1 only), as Redis's `INCRBY`
    /// promises them: the answer `v` stands for `v-count+1 ..= v`.
    pub async fn take_consecutive(
        &self,
        who: Credentials<'_>,
        name: &str,
        count: u64,
    ) -> Result<u64, IdError> {
        let result = async {
            let count = self.count_of(Some(count), Limit::Ids)?;
            let (served, admitted) = self
                .admit_taking(who, name, Scope::Ids, count, None)
                .await?;
            let seq = match &*served.ns {
                Namespace::Sequence(s) if s.spec().step() == 1 => s,
                Namespace::Sequence(s) => {
                    return Err(IdError::WrongKind(format!(
                        "namespace {name:?} has step {}: INCRBY's answer v stands for the ids \
                         v-n+1..v, which are not all its ids; use IDMINT.NEXT {name} {count}",
                        s.spec().step()
                    )))
                }
                other => {
                    return Err(IdError::WrongKind(format!(
                        "namespace {name:?} is a {} namespace: INCRBY's answer v stands for the \
                         ids v-n+1..v, which only a sequence namespace of step 1 hands out; use \
                         IDMINT.NEXT {name} {count}",
                        other.kind()
                    )))
                }
            };
            let cap = crate::config::block_request(&served.ns, count, admitted.max_block_32());
            if cap < count {
                return Err(IdError::InvalidCount(format!(
                    "INCRBY {name} {count}: a 32-bit namespace hands out at most {cap} ids per \
                     block request; use IDMINT.NEXT {name} {count}"
                )));
            }
            match seq.consecutive(count).await? {
                Some(block) => {
                    admitted.served(self.auth(), count);
                    Ok(block.last())
                }
                None => Err(IdError::InvalidCount(format!(
                    "INCRBY {name} {count}: the namespace's blocks hold fewer than {count} \
                     consecutive ids; use IDMINT.NEXT {name} {count}"
                ))),
            }
        }
        .await;
        self.counted(result)
    }

    /// Takes back the unused `tail` of the block leased with `lease` ([`Node::take_block`]):
    /// accepted only as `crate::supply::Supply::take_back` allows (the newest lease's exact
    /// tail, once, nothing handed out since); otherwise the tail stays burned and the answer
    /// says why. Never creates a namespace.
    pub async fn give_back(
        &self,
        who: Credentials<'_>,
        name: &str,
        lease: u64,
        tail: Block,
    ) -> Result<GivenBack, IdError> {
        let result = async {
            let view = self.admit_reading(who, name, Scope::Blocks).await?;
            let refused = |reason: String| GivenBack {
                given_back: false,
                ids: 0,
                reason,
            };
            let ns = match view {
                NamespaceView::Served(ns) => ns,
                NamespaceView::Stored(_) => {
                    return Ok(refused(
                        "this node does not serve the namespace now (it restarted?): the tail \
                         is burned"
                            .into(),
                    ))
                }
            };
            Ok(match ns.take_back(lease, tail)? {
                TakeBack::Refused(_) if lease == 0 => refused(
                    "lease 0: the block cannot be given back (cache \"off\"); the tail is burned"
                        .into(),
                ),
                TakeBack::Restored(ids) => GivenBack {
                    given_back: true,
                    ids,
                    reason: String::new(),
                },
                TakeBack::Burned(ids) => refused(format!(
                    "ids were handed out after the block: its {ids} unused ids are burned"
                )),
                TakeBack::Refused(reason) => refused(format!("{reason}; the tail is burned")),
            })
        }
        .await;
        self.counted(result)
    }

    /// What the id `text` says about itself, read as an id of namespace `name`. A read.
    pub async fn decode(
        &self,
        who: Credentials<'_>,
        name: &str,
        text: &str,
    ) -> Result<api::Decoded, IdError> {
        let result = async {
            self.admit_reading(who, name, Scope::Read)
                .await?
                .decode(text)
        }
        .await;
        self.counted(result)
    }

    /// Settings and state of namespace `name` (a read: the worker pool is read from the
    /// authority, nothing is created).
    pub async fn namespace_info(
        &self,
        who: Credentials<'_>,
        name: &str,
    ) -> Result<api::NamespaceInfo, IdError> {
        let result = async {
            let view = self.admit_reading(who, name, Scope::Read).await?;
            let info = view.info_live(self.now(), &**self.authority()).await;
            Ok(self.describe(info))
        }
        .await;
        self.counted(result)
    }

    /// Every namespace served that the caller may read, sorted by name.
    pub async fn namespace_list(
        &self,
        who: Credentials<'_>,
    ) -> Result<Vec<api::NamespaceInfo>, IdError> {
        let result = async {
            let caller = self.caller(who)?;
            let now = self.now();
            let mut namespaces = Vec::new();
            for ns in self.all() {
                if self.auth().may(caller, ns.name().as_str(), Scope::Read) {
                    let info = ns.info_live(now, &**self.authority()).await;
                    namespaces.push(self.describe(info));
                }
            }
            Ok(namespaces)
        }
        .await;
        self.counted(result)
    }

    /// Whether the caller may read the whole node (the status page, and `/metrics` when it
    /// needs a token): `read` on `*`.
    pub fn admit_node_read(&self, who: Credentials<'_>) -> Result<(), IdError> {
        let result = self
            .caller(who)
            .and_then(|caller| self.auth().admit_node(caller, Scope::Read));
        self.counted(result)
    }

    /// `idmint admin rebase` (`above`: every id from now on is above it) or `retire` of
    /// sequence namespace `name`: scope `admin`, then [`Node::advance`].
    pub async fn move_watermark(
        &self,
        who: Credentials<'_>,
        name: &str,
        action: Advance,
        above: Option<u64>,
    ) -> Result<api::AdvanceResponse, IdError> {
        let result = async {
            let caller = self.caller(who)?;
            self.auth().admit(caller, name, Scope::Admin, 0)?;
            self.advance(name, action, above).await
        }
        .await;
        self.counted(result)
    }

    /// Opens a stream of `total` ids of namespace `name` taken in chunks of `chunk` (absent:
    /// the most one request may take, or the token's `max_count` if lower): gRPC `NextStream`.
    /// Each chunk is a request of its own for the token's quota ([`IdStream::next_chunk`]).
    pub async fn open_stream(
        self: &Arc<Self>,
        who: Credentials<'_>,
        name: &str,
        total: u64,
        chunk: Option<u64>,
    ) -> Result<IdStream, IdError> {
        let result = async {
            let caller = self.caller(who)?;
            if total == 0 || total > MAX_STREAM_TOTAL {
                return Err(IdError::InvalidCount(format!(
                    "total must be a whole number from 1 to {MAX_STREAM_TOTAL}, got {total}"
                )));
            }
            let admitted = self.auth().admit(caller, name, Scope::Ids, 0)?;
            let max = self.config().max_count;
            let chunk = match chunk {
                None => admitted.max_count().map_or(max, |t| t.min(max)),
                some => count_rule(some, max, "server.max_count")?,
            };
            let permit = self.stream_permit()?;
            let served = self.namespace(name).await?;
            Ok(IdStream {
                node: self.clone(),
                caller,
                served,
                left: total,
                chunk,
                _permit: permit,
            })
        }
        .await;
        self.counted(result)
    }
}

/// A stream of ids being taken ([`Node::open_stream`]), a chunk at a time.
#[derive(Debug)]
pub struct IdStream {
    node: Arc<Node>,
    caller: Caller,
    served: Served,
    left: u64,
    chunk: u64,
    /// One of `server.max_streams`, held while the stream is open.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl IdStream {
    /// The namespace streamed from.
    pub fn namespace(&self) -> &Arc<Namespace> {
        &self.served.ns
    }

    /// The next chunk, `None` once `total` ids were taken. Each chunk is admitted and counted
    /// like a request of its own (the token's scope, `max_count` and quota); the stream ends at
    /// the first error.
    pub async fn next_chunk(&mut self) -> Option<Result<Ids, IdError>> {
        if self.left == 0 {
            return None;
        }
        let want = self.left.min(self.chunk);
        let node = &self.node;
        let name = self.served.ns.name().as_str();
        let result = async {
            if node.is_draining() {
                return Err(IdError::ShuttingDown);
            }
            let admitted = node.auth().admit(self.caller, name, Scope::Ids, want)?;
            admitted.take_quota(node.auth(), &self.served.buckets, name, want)?;
            let ids = self.served.ns.ids(want).await?;
            if ids.is_empty() {
                // A sequence namespace answers short only when it runs out; never loop on it.
                return Err(IdError::Internal(name.to_owned()));
            }
            admitted.served(node.auth(), ids.len() as u64);
            Ok(ids)
        }
        .await;
        match node.counted(result) {
            Ok(ids) => {
                self.left = self.left.saturating_sub(ids.len() as u64);
                Some(Ok(ids))
            }
            Err(e) => {
                self.left = 0;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idmint_api::ErrorCode;

    #[test]
    fn one_count_rule() {
        assert_eq!(count_rule(None, 10, "server.max_count"), Ok(1));
        assert_eq!(count_rule(Some(7), 10, "server.max_count"), Ok(7));
        for bad in [0, 11] {
            let e = count_rule(Some(bad), 10, "server.max_count").unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidCount);
            assert!(e.to_string().contains("server.max_count"), "{e}");
        }
    }
}
