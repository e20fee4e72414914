//! The upstream authority (cargo feature `upstream`): blocks from another idmint node over
//! gRPC (`idmint.v1`, docs/grpc.md), so nodes form tiers: a global tier on a durable store,
//! regional tiers whose authority is the global tier, clients below (design.md, "tier").
//!
//! Each operation is one call to an upper node: [`Authority::reserve`] is `Block`,
//! [`Authority::give_back`] is `GiveBack` with the block's lease, `state`/`list` and
//! `ensure_namespace` read `Namespace`/`Namespaces`, and worker leases are `AcquireWorker`,
//! `RenewWorker`, `ReleaseWorker` and `WorkerGroup` (`upstream/leases.rs`). The upper node's own supply
//! decides where its blocks come from, and its own authority holds the leases; this module
//! only carries them down and the unused tail back up.
//!
//! Invariants (docs/design.md):
//! - (1, transitively) a block is returned only once the upper node granted it, and the upper
//!   node grants only ids of blocks its own authority recorded durably; no `Block` is ever sent
//!   twice to one upper node (a lost answer is [`StoreError::Unavailable`]: that block is
//!   burned, never served);
//! - (2) a tail goes back only with the lease of the newest block this authority got for the
//!   namespace, to the node that granted it, once; the upper node takes it only while nothing
//!   was handed out after the block (its compare-and-swap), and hands it on to its own
//!   authority at its own clean shutdown, so a clean restart of every tier burns nothing; a
//!   tail that began in an older block (the node's buffer merged contiguous blocks) goes back
//!   from the newest block's start only, and the rest is burned ([`GiveBack::Partly`]);
//! - blocks of one namespace are returned in increasing order per residue class (as the node's
//!   buffer requires; a multi upper tier's classes interleave): a block from another upper
//!   node that lies below the highest one of its class returned (two upper nodes alive on one
//!   store, after a failover) is cut to its part above, and the part below is burned (never
//!   handed back: the upper node would grant it again, and with no other upper node alive the
//!   lower node would never get past it); a block entirely below is burned and the call answers
//!   `Unavailable`, moving on to the next url. Never a block the node's buffer would refuse as
//!   out of order;
//! - across restarts, every class's floor starts at the highest end the node record holds
//!   ([`Authority::note_floor`]), and each `Block` asks the upper node for nothing below the
//!   floor (`min_start`): a restarted node never serves below what it served before, whichever
//!   upper node answers;
//! - (5) the residue classes are the upper node's (`SequenceSettings.residues`), learned by
//!   `ensure_namespace` before any block of the namespace is served, so the node's block gate
//!   accepts a multi upper tier's classes and nothing else;
//! - every call is bounded by `op_timeout`; no lock is held across `.await` (the small maps
//!   below are `std::sync::Mutex`es held for a lookup or an insert).
//!
//! Several urls: calls go to the last url that answered; on `UNAVAILABLE`, `DEADLINE_EXCEEDED`,
//! `INTERNAL`, a connection error or the timeout, the next url is tried, in order, each at most
//! once per call. Other statuses are answers: `NOT_FOUND` is
//! [`StoreError::UnknownNamespace`], `RESOURCE_EXHAUSTED` with `namespace_exhausted` is
//! [`StoreError::Exhausted`], `FAILED_PRECONDITION` with `namespace_retired` is
//! [`StoreError::Retired`] (the upper node's namespace was retired; its state's `retired`
//! says so too), `DATA_LOSS` is [`StoreError::Lost`], `INVALID_ARGUMENT` and
//! `FAILED_PRECONDITION` (a block larger than the upper node's `server.max_block_request`, a
//! namespace of another kind or settings) are [`StoreError::InvalidSetup`].
//!
//! A namespace the upper node does not have is created there by `ensure_namespace` the only
//! way the API allows, a `Block` of one id (the upper node must have `auto_create` on, else
//! [`StoreError::UnknownNamespace`]), whose id is handed back at once (burned only when the
//! upper namespace has cache `off`, which leases nothing); then its settings are read and
//! compared, so on `Ok` the namespace exists durably upstream with the same spec.
//!
//! With `token` in its configuration every call carries `authorization: Bearer <token>`, for an
//! upper tier with `[auth]` (the token needs `blocks` and `read` on the namespaces).
//!
//! `https://` urls are dialled over TLS ([`idmint_proto::tls`]): the upper nodes' certificates
//! must chain to `ca_file` (else to the public roots), and `client_cert`/`client_key` are
//! presented to an upper tier that requires client certificates. The files are read once, by
//! [`UpstreamAuthority::connect`]; an unreadable or invalid one stops the node, naming the file
//! and the key. An `http://` url stays plain HTTP/2 (the token travels in the clear there).
//!
//! What it does not do: buffering (the node's supply does it, sized by its `buffer_seconds`),
//! or retrying a `Block` on the node that may have granted it.

mod leases;

use crate::config::{redact_url, UpstreamConfig};
use crate::{Authority, GiveBack, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use idmint_proto::nodes::{
    error_code, BearerToken, CallError, LastCall, NodeClient, Nodes, NodesError,
};
use idmint_proto::tls::ClientTls;
use idmint_proto::v1 as proto;
use std::collections::HashMap;
use std::sync::Mutex;
use tonic::Code;

/// An authority whose blocks come from other idmint nodes over gRPC. See the module docs.
#[derive(Debug)]
pub struct UpstreamAuthority {
    /// The upper nodes, labelled by their urls without secrets, and the fallback across them.
    nodes: Nodes,
    /// Per namespace, the newest block granted and the highest end returned. A std mutex: held
    /// for a lookup or an insert, never across `.await`.
    granted: Mutex<HashMap<NamespaceName, Granted>>,
    /// The upper tier's residue classes per spec, learned by `ensure_namespace`. A std mutex, as
    /// above.
    residues: Mutex<HashMap<SequenceSpec, Vec<u64>>>,
}

/// The newest block of a namespace and where it came from.
#[derive(Debug, Clone, Default)]
struct Granted {
    /// The newest block, while its tail may still go back (`None` once it went or cannot).
    newest: Option<Leased>,
    /// Per residue class `(step, start % step)`: every block of the class returned for the
    /// namespace lies below this (the highest end returned, lowered only by a tail taken back).
    /// Per class, as the node's buffer orders blocks: a multi upper tier's classes interleave.
    floors: Vec<((u64, u64), u64)>,
    /// The spec `ensure_namespace` checked, for the width an exhausted namespace reports.
    spec: Option<SequenceSpec>,
    /// Every id below this was granted before this process (the node record, through
    /// [`Authority::note_floor`]): the floor of every class.
    seeded: u64,
}

impl Granted {
    /// The floor of `block`'s class: the seeded floor before its first block.
    fn floor(&self, block: &Block) -> u64 {
        let class = class(block);
        self.floors
            .iter()
            .find(|(c, _)| *c == class)
            .map_or(0, |(_, floor)| *floor)
            .max(self.seeded)
    }

    fn set_floor(&mut self, block: &Block, floor: u64) {
        let class = class(block);
        match self.floors.iter_mut().find(|(c, _)| *c == class) {
            Some((_, f)) => *f = floor,
            None => self.floors.push((class, floor)),
        }
    }

    /// The highest floor of any class.
    fn highest(&self) -> Option<u64> {
        self.floors.iter().map(|(_, floor)| *floor).max()
    }

    /// Where the next block must start, asked of the upper node (`BlockRequest.min_start`):
    /// the class floor when the upper tier has one class, else the seeded floor (a multi
    /// upper tier's classes interleave; the cut in `reserve` keeps each class in order).
    fn min_start(&self, classes: usize) -> u64 {
        if classes <= 1 {
            self.highest().unwrap_or(0).max(self.seeded)
        } else {
            self.seeded
        }
    }
}

/// A block's residue class.
fn class(block: &Block) -> (u64, u64) {
    (block.step(), block.start() % block.step())
}

#[derive(Debug, Clone, Copy)]
struct Leased {
    block: Block,
    lease: u64,
    node: usize,
}

impl UpstreamAuthority {
    /// The authority over `config`'s urls. Channels connect lazily: nothing is contacted here,
    /// so a node starts while its upper tier is down and its operations answer
    /// [`StoreError::Unavailable`] until one url answers. The TLS files (`ca_file`,
    /// `client_cert`, `client_key`) are read here. Must run inside a tokio runtime (each
    /// channel's worker task is spawned here).
    pub fn connect(config: &UpstreamConfig) -> Result<Self, StoreError> {
        let urls = config
            .urls
            .iter()
            .map(|url| (redact_url(url), url.clone()))
            .collect();
        let token = config.token.as_deref().map(BearerToken::new);
        let tls = if config.has_tls_files() {
            let tls = ClientTls::from_files(config.ca_file.as_deref(), config.client_identity())
                .map_err(|e| StoreError::InvalidSetup {
                    message: format!(
                        "the upstream authority's TLS files (ca_file, client_cert, client_key): {e}"
                    ),
                })?;
            Some(tls)
        } else {
            None
        };
        let nodes =
            Nodes::new(urls, config.op_timeout, token.as_ref(), tls.as_ref()).map_err(|e| {
                StoreError::InvalidSetup {
                    message: match e {
                        NodesError::Empty => "an upstream authority needs at least one url".into(),
                        NodesError::InvalidUrl(label) => {
                            format!("upstream url {label} is not a valid http:// or https:// url")
                        }
                        NodesError::InvalidToken => {
                            "the upstream token is empty or not printable ASCII".into()
                        }
                        NodesError::Tls(label, why) => {
                            format!("upstream url {label}: TLS refused: {why}")
                        }
                    },
                }
            })?;
        Ok(UpstreamAuthority {
            nodes,
            granted: Mutex::new(HashMap::new()),
            residues: Mutex::new(HashMap::new()),
        })
    }

    fn granted(&self) -> std::sync::MutexGuard<'_, HashMap<NamespaceName, Granted>> {
        self.granted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The store error of a failed call about `name`.
    fn error(&self, name: &NamespaceName, e: CallError) -> StoreError {
        let status = match e {
            CallError::Unavailable { message, .. } => {
                return StoreError::Unavailable {
                    backend: "upstream",
                    message,
                }
            }
            CallError::Status(_, status) => status,
        };
        let idmint_code = error_code(&status);
        let idmint_code = idmint_code.as_deref().unwrap_or("");
        let message = format!("the upper tier answered: {}", status.message());
        match status.code() {
            Code::NotFound => StoreError::UnknownNamespace { name: name.clone() },
            Code::ResourceExhausted if idmint_code == "namespace_exhausted" => {
                let (bits, watermark) = self.exhausted_at(name);
                StoreError::Exhausted {
                    name: name.clone(),
                    bits,
                    watermark,
                }
            }
            Code::FailedPrecondition if idmint_code == "namespace_retired" => {
                StoreError::Retired { name: name.clone() }
            }
            Code::DataLoss => StoreError::Lost {
                name: name.clone(),
                message,
            },
            Code::InvalidArgument | Code::FailedPrecondition => {
                StoreError::InvalidSetup { message }
            }
            Code::Unauthenticated | Code::PermissionDenied => StoreError::InvalidSetup {
                message: format!(
                    "{message}: set [authority] token to a token of the upper tier with the \
                     blocks and read scopes on {name}"
                ),
            },
            _ => StoreError::Unavailable {
                backend: "upstream",
                message,
            },
        }
    }

    /// The width and watermark an exhausted namespace reports: from the spec checked, else 64
    /// bits; the highest block end returned, else the width's end.
    fn exhausted_at(&self, name: &NamespaceName) -> (u32, u64) {
        let granted = self.granted();
        let entry = granted.get(name);
        let width = entry
            .and_then(|g| g.spec)
            .map_or(Width::Bits64, |spec| spec.width());
        let floor = entry.and_then(Granted::highest);
        (width.bits(), floor.unwrap_or(width.max_id() + 1))
    }

    /// The upper node's record of `name`: `None` if it has none.
    async fn info(&self, name: &NamespaceName) -> Result<Option<Upper>, StoreError> {
        let request = proto::NamespaceRequest {
            namespace: name.to_string(),
        };
        match self
            .nodes
            .call(|mut c| {
                let request = request.clone();
                async move { c.namespace(request).await }
            })
            .await
        {
            Ok((_, info)) => upper(name, info).map(Some),
            Err(CallError::Status(_, s)) if s.code() == Code::NotFound => Ok(None),
            Err(e) => Err(self.error(name, e)),
        }
    }
}

/// A sequence namespace as an upper node describes it.
struct Upper {
    state: NamespaceState,
    residues: Vec<u64>,
}

/// Reads `info` as a sequence namespace's spec, watermark and residue classes.
fn upper(name: &NamespaceName, info: proto::NamespaceInfo) -> Result<Upper, StoreError> {
    let Some(proto::namespace_info::Kind::Sequence(sequence)) = info.kind else {
        return Err(StoreError::InvalidSetup {
            message: format!(
                "namespace {name} is not a sequence namespace on the upper tier: it cannot \
                 grant blocks of it"
            ),
        });
    };
    let corrupt = |what: &str| StoreError::Corrupt {
        message: format!("the upper tier described namespace {name} with {what}"),
    };
    let settings = sequence.settings.ok_or_else(|| corrupt("no settings"))?;
    let state = sequence.state.ok_or_else(|| corrupt("no state"))?;
    let width = Width::from_bits(settings.width).ok_or_else(|| corrupt("an unknown width"))?;
    let spec = SequenceSpec::new(width, settings.start, settings.step, settings.offset)
        .map_err(|e| corrupt(&format!("an invalid spec ({e})")))?;
    let mut residues = settings.residues;
    if residues.is_empty() {
        residues.push(spec.offset());
    }
    if residues.iter().any(|&r| r >= spec.step()) {
        return Err(corrupt("a residue class not below its step"));
    }
    Ok(Upper {
        state: NamespaceState {
            name: name.clone(),
            spec,
            watermark: state.watermark,
            retired: state.retired,
        },
        residues,
    })
}

#[async_trait]
impl Authority for UpstreamAuthority {
    fn kind(&self) -> &'static str {
        "upstream"
    }

    fn upper_nodes(&self) -> Vec<crate::UpperNode> {
        self.nodes
            .health()
            .into_iter()
            .map(|h| {
                let (answered, last_error) = match h.last_call {
                    LastCall::NotYet => (None, None),
                    LastCall::Answered => (Some(true), None),
                    LastCall::Failed(why) => (Some(false), Some(why)),
                };
                crate::UpperNode {
                    url: h.label,
                    current: h.current,
                    answered,
                    last_error,
                }
            })
            .collect()
    }

    /// The upper tier's classes for `spec`, once `ensure_namespace` learned them; the spec's
    /// offset before.
    fn residues(&self, spec: &SequenceSpec) -> Vec<u64> {
        self.residues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(spec)
            .cloned()
            .unwrap_or_else(|| vec![spec.offset()])
    }

    /// Reads the namespace on the upper tier, creating it there first if absent (a one-id
    /// block handed back at once; see the module docs); its spec must be `spec`.
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let upper = match self.info(name).await? {
            Some(upper) => upper,
            None => {
                let probe = self.reserve(name, 1).await?;
                // Refused or unreachable: the one id is burned, which is always safe.
                let _ = self.give_back(name, probe.block).await;
                self.info(name)
                    .await?
                    .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() })?
            }
        };
        if upper.state.spec != spec {
            return Err(StoreError::SpecConflict {
                name: name.clone(),
                existing: upper.state.spec,
                requested: spec,
                server: None,
            });
        }
        self.residues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(spec, upper.residues);
        self.granted().entry(name.clone()).or_default().spec = Some(spec);
        Ok(upper.state)
    }

    /// Leased through the tier above (`upstream/leases.rs`): the upper node holds them in its store.
    fn worker_leases(&self) -> Option<&dyn crate::WorkerLeases> {
        Some(self)
    }

    /// One upper node's view: the blocks it reserved from its own authority.
    fn reports_store_watermark(&self) -> bool {
        false
    }

    fn note_floor(&self, name: &NamespaceName, floor: u64) {
        let mut granted = self.granted();
        let entry = granted.entry(name.clone()).or_default();
        entry.seeded = entry.seeded.max(floor);
    }

    /// One `Block` call; the block's lease is remembered (the newest only) for `give_back`.
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        if count == 0 {
            return Err(StoreError::InvalidCount);
        }
        let spec = self.granted().get(name).and_then(|g| g.spec);
        let classes = spec.map_or(1, |spec| self.residues(&spec).len());
        let min_start = self.granted().get(name).map_or(0, |g| g.min_start(classes));
        let request = proto::BlockRequest {
            namespace: name.to_string(),
            count: Some(count),
            min_start: (min_start > 0).then_some(min_start),
            extends: None,
        };
        let (node, leased) = self
            .nodes
            .call(|mut c| {
                let request = request.clone();
                async move { c.block(request).await }
            })
            .await
            .map_err(|e| self.error(name, e))?;
        let block = Block::new(leased.start, leased.end, leased.step).ok_or_else(|| {
            StoreError::Corrupt {
                message: format!(
                    "the upper tier granted [{}, {}) step {} for namespace {name}: not a block",
                    leased.start, leased.end, leased.step
                ),
            }
        })?;
        // Another upper node's block (two upper nodes alive on one store, after a failover)
        // may lie below what this authority returned already. Its part below the floor is
        // burned, never handed back: handed back, the upper node would put it in front of its
        // buffer and grant it again, and with no other upper node alive the lower node would
        // never get past it. Burning consumes the upper node's stale buffer, after which its
        // refills come from its store above everything granted.
        let outcome = {
            let mut granted = self.granted();
            let entry = granted.entry(name.clone()).or_default();
            let floor = entry.floor(&block);
            let usable = if block.start() >= floor {
                Some(block)
            } else {
                // The first id of the block's class at or above the floor.
                let behind = floor - block.start();
                let skip = behind.div_ceil(block.step()).saturating_mul(block.step());
                block
                    .start()
                    .checked_add(skip)
                    .filter(|&start| start < block.end())
                    .and_then(|start| Block::new(start, block.end(), block.step()))
            };
            match usable {
                Some(part) => {
                    entry.set_floor(&part, part.end());
                    entry.newest = (leased.lease != 0).then_some(Leased {
                        block: part,
                        lease: leased.lease,
                        node,
                    });
                    Ok(part)
                }
                None => Err(floor),
            }
        };
        let block = match outcome {
            Ok(part) => {
                if part.start() != block.start() {
                    tracing::warn!(namespace = %name, upper = %self.nodes.label(node),
                        burned_from = block.start(), burned_to = part.start(),
                        "the upper node granted ids below those another upper node granted already; the part below is burned");
                }
                part
            }
            Err(floor) => {
                self.nodes.move_past(node);
                return Err(StoreError::Unavailable {
                    backend: "upstream",
                    message: format!(
                        "{} granted [{}, {}) for namespace {name}, below {floor} already \
                         granted by another upper node; burned, trying the next url",
                        self.nodes.label(node),
                        block.start(),
                        block.end()
                    ),
                });
            }
        };
        Ok(Reservation {
            block,
            watermark: block.end(),
        })
    }

    /// The upper node's record: its spec and watermark (the highest block end it got from its
    /// own authority).
    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        Ok(self.info(name).await?.map(|upper| upper.state))
    }

    /// The sequence namespaces the upper node serves now, sorted by name.
    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let (_, list) = self
            .nodes
            .call(|mut c| async move { c.namespaces(proto::NamespacesRequest {}).await })
            .await
            .map_err(|e| match e {
                CallError::Unavailable { message, .. } => StoreError::Unavailable {
                    backend: "upstream",
                    message,
                },
                CallError::Status(_, s) => StoreError::Unavailable {
                    backend: "upstream",
                    message: format!("the upper tier answered: {}", s.message()),
                },
            })?;
        let mut states = Vec::new();
        for info in list.namespaces {
            let Ok(name) = NamespaceName::new(&info.namespace) else {
                continue;
            };
            if let Some(proto::namespace_info::Kind::Sequence(_)) = info.kind {
                states.push(upper(&name, info)?.state);
            }
        }
        states.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(states)
    }

    /// `GiveBack` of the tail, with the newest block's lease, to the node that granted it: the
    /// part of the tail within the newest block ([`GiveBack::Partly`] when the tail began in an
    /// older one; those ids are burned). A tail that does not end the newest block is refused
    /// here (and stays burned); the upper node refuses it when it handed out ids since.
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        // The lease is used once, whatever the answer.
        let (newest, floor) = match self.granted().get_mut(name) {
            Some(g) => {
                let newest = g
                    .newest
                    .filter(|n| n.block.end() == tail.end() && n.block.step() == tail.step());
                if newest.is_some() {
                    g.newest = None;
                }
                (newest, g.floor(&tail).max(tail.end()))
            }
            None => (None, tail.end()),
        };
        let Some(newest) = newest else {
            return Ok(GiveBack::Refused { watermark: floor });
        };
        let part = if tail.start() >= newest.block.start() {
            tail
        } else {
            newest.block
        };
        if !self
            .give_back_to(name, newest.node, newest.lease, part)
            .await?
        {
            return Ok(GiveBack::Refused { watermark: floor });
        }
        if let Some(g) = self.granted().get_mut(name) {
            if g.floor(&part) == part.end() {
                g.set_floor(&part, part.start());
            }
        }
        if part == tail {
            Ok(GiveBack::Returned)
        } else {
            Ok(GiveBack::Partly { ids: part.len() })
        }
    }
}

impl UpstreamAuthority {
    /// `GiveBack` of `tail` with `lease` to node `index` alone: whether it was taken back.
    async fn give_back_to(
        &self,
        name: &NamespaceName,
        index: usize,
        lease: u64,
        tail: Block,
    ) -> Result<bool, StoreError> {
        if lease == 0 {
            return Ok(false);
        }
        let request = proto::GiveBackRequest {
            namespace: name.to_string(),
            start: tail.start(),
            end: tail.end(),
            step: tail.step(),
            lease,
        };
        let answer = self
            .nodes
            .call_one(index, &|mut c: NodeClient| {
                let request = request.clone();
                async move { c.give_back(request).await }
            })
            .await
            .map_err(|e| self.error(name, e))?;
        Ok(answer.given_back)
    }
}
