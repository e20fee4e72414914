//! The gRPC front-end (`idmint.v1`, `proto/idmint/v1/idmint.proto`, docs/grpc.md), on tonic:
//! read the request, call the namespace, write the answer as a message ([`convert`]), map
//! errors to statuses ([`status`]). A sibling of [`crate::http`]: it computes nothing about
//! namespaces itself.
//!
//! Invariants:
//! - Only `Next`, `NextStream` and `Block` may create a namespace or take ids (through
//!   [`Node::namespace`]); `Decode`, `Namespace`, `Namespaces` and `GiveBack` go through
//!   [`Node::read_namespace`] or [`Node::all`] and never create anything.
//! - Every request is bounded as over HTTP: `count` by `server.max_count` (`Next`, a stream's
//!   `chunk`) or `server.max_block_request` (`Block`); a stream's `total` by
//!   [`MAX_STREAM_TOTAL`]. Nothing panics on input: every field is checked, every error is a
//!   status with the idmint code.
//! - A stream takes a chunk of ids only once the channel to the client has room for it
//!   ([`STREAM_CHUNKS_AHEAD`], then HTTP/2 flow control): a client that stops reading stops the
//!   taking. Ids of chunks a client never reads (it went away) are burned, never handed out
//!   again. Streams end with `shutting_down` when the node begins draining.
//! - `GiveBack` accepts a tail only as [`crate::supply::Supply::take_back`] allows: the newest
//!   lease's, once, with nothing handed out since; anything else is answered
//!   `given_back: false` with the reason, and the tail stays burned.
//! - Every handler holds a [`gate::Pass`] while it may touch the domain and is cut on
//!   `StopNow`, so [`serve::serve`] returns only once no request future is left
//!   ([`gate`]).
//!
//! - With `[auth]` ([`crate::auth`]), every method reads the metadata `authorization: Bearer
//!   <token>` and is refused (`UNAUTHENTICATED`, `PERMISSION_DENIED`, `RESOURCE_EXHAUSTED` with
//!   the idmint codes `unauthorized`, `forbidden`, `rate_limited`) before it looks a namespace
//!   up. `Next`, `NextStream` need `ids`; `Block` and `GiveBack` `blocks`; the reads `read`
//!   (`Namespaces` lists only what the token may read). A stream's chunks each take from the
//!   token's rate quota; one refused ends the stream with its status.
//!
//! What it does not do: TLS, or reflection.

pub mod convert;
pub mod gate;
pub mod serve;
pub mod status;

pub use serve::serve;

/// The generated messages, service and client of `idmint.v1` (generated once, in
/// `idmint-proto`).
pub use idmint_proto::v1 as proto;

use crate::auth::{Caller, Scope};
use crate::error::IdError;
use crate::metrics::{ErrorLabels, GrpcLabels};
use crate::namespace::{Namespace, NamespaceView};
use crate::registry::Node;
use crate::shutdown::{Shutdown, Stage};
use crate::supply::TakeBack;
use gate::{Gate, Pass};
use idmint_api::ErrorCode;
use idmint_core::{Block, SequenceSpec, Width};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};

/// The most ids one `NextStream` may ask for.
pub const MAX_STREAM_TOTAL: u64 = 100_000_000;

/// Chunks a stream's producer may take ahead of the client (beyond what HTTP/2 flow control
/// holds).
pub const STREAM_CHUNKS_AHEAD: usize = 2;

/// The `idmint.v1.Idmint` service over a node.
#[derive(Debug, Clone)]
pub struct IdmintService {
    node: Arc<Node>,
    gate: Arc<Gate>,
    shutdown: Shutdown,
}

/// The tonic server of `service`.
pub type IdmintServer = proto::idmint_server::IdmintServer<IdmintService>;

impl IdmintService {
    /// The service over `node`; its requests pass `gate` and are cut on `shutdown`'s
    /// `StopNow`.
    pub fn new(node: Arc<Node>, gate: Arc<Gate>, shutdown: Shutdown) -> Self {
        IdmintService {
            node,
            gate,
            shutdown,
        }
    }

    /// The tonic server of this service.
    pub fn into_server(self) -> IdmintServer {
        proto::idmint_server::IdmintServer::new(self)
    }

    /// The caller the request's `authorization` metadata names.
    fn caller(&self, metadata: &MetadataMap) -> Result<Caller, IdError> {
        self.node
            .auth()
            .authenticate_header(metadata.get("authorization").map(|v| v.as_bytes()))
    }

    fn enter(&self) -> Result<Pass, Status> {
        self.gate.enter().ok_or_else(shutting_down)
    }

    /// Runs one unary request: holds a pass, is cut on `StopNow`, counts the outcome.
    async fn unary<T>(
        &self,
        method: &'static str,
        work: impl Future<Output = Result<T, Status>>,
    ) -> Result<Response<T>, Status> {
        let result = match self.enter() {
            Ok(_pass) => tokio::select! {
                result = work => result,
                _ = self.shutdown.stopping_now() => Err(shutting_down()),
            },
            Err(refused) => Err(refused),
        };
        count(&self.node, method, result.as_ref().err());
        result.map(Response::new)
    }
}

/// The gRPC form of a rebase's or retirement's answer.
fn advanced(a: idmint_api::AdvanceResponse) -> proto::Advanced {
    proto::Advanced {
        namespace: a.namespace,
        action: a.action,
        previous_watermark: a.previous_watermark,
        watermark: a.watermark,
        burned: a.burned,
        retired: a.retired,
    }
}

/// The status of a request refused or cut because the node is shutting down.
fn shutting_down() -> Status {
    status::from_id_error(&IdError::ShuttingDown)
}

/// Counts a request's outcome: `idmint_grpc_requests`, and `idmint_errors` by idmint code as
/// over HTTP.
fn count(node: &Node, method: &'static str, error: Option<&Status>) {
    let metrics = node.metrics();
    let code = error.map_or(Code::Ok, Status::code);
    metrics
        .grpc_requests
        .get_or_create(&GrpcLabels {
            method,
            code: code_name(code),
        })
        .inc();
    // Statuses of the domain carry the idmint code; a client going away carries none.
    let idmint = error
        .and_then(|e| e.metadata().get(status::ERROR_CODE_KEY))
        .and_then(|v| v.to_str().ok())
        .and_then(error_code);
    if let Some(idmint) = idmint {
        metrics
            .errors
            .get_or_create(&ErrorLabels {
                code: idmint.as_str(),
            })
            .inc();
    }
}

/// The [`ErrorCode`] written as `text`.
fn error_code(text: &str) -> Option<ErrorCode> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).ok()
}

/// A gRPC code in snake_case, for metrics.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

impl From<IdError> for Status {
    fn from(e: IdError) -> Status {
        status::from_id_error(&e)
    }
}

/// `count`, 0 meaning 1, at most `max` (the setting `max_key`).
fn count_or_one(count: u64, max: u64, max_key: &str) -> Result<u64, IdError> {
    let n = count.max(1);
    if n > max {
        return Err(IdError::InvalidCount(format!(
            "count {n} is above this server's maximum of {max} ({max_key})"
        )));
    }
    Ok(n)
}

/// The status of a read's error: an unknown namespace is not created by a read, and the
/// message says so (as over HTTP).
fn read_error(node: &Node, e: IdError) -> Status {
    match e {
        IdError::UnknownNamespace(name) if node.config().auto_create => status::status(
            Code::NotFound,
            ErrorCode::UnknownNamespace,
            format!(
                "namespace {name:?} does not exist; reads do not create namespaces (Next does)"
            ),
        ),
        other => other.into(),
    }
}

#[tonic::async_trait]
impl proto::idmint_server::Idmint for IdmintService {
    async fn next(
        &self,
        request: Request<proto::NextRequest>,
    ) -> Result<Response<proto::Ids>, Status> {
        let caller = self.caller(request.metadata());
        let req = request.into_inner();
        self.unary("Next", async {
            let caller = caller?;
            let max = self.node.config().max_count;
            let count = count_or_one(req.count, max, "server.max_count")?;
            let auth = self.node.auth();
            auth.authorize(caller, &req.namespace, Scope::Ids, count)?;
            let ns = self.node.namespace(&req.namespace).await?;
            let ids = ns.ids(count).await?;
            auth.served(caller, ids.len() as u64);
            Ok(convert::ids(ns.name().as_str(), ids))
        })
        .await
    }

    type NextStreamStream = ReceiverStream<Result<proto::Ids, Status>>;

    async fn next_stream(
        &self,
        request: Request<proto::NextStreamRequest>,
    ) -> Result<Response<Self::NextStreamStream>, Status> {
        let caller = self.caller(request.metadata());
        let req = request.into_inner();
        let pass = match self.enter() {
            Ok(pass) => pass,
            Err(refused) => {
                count(&self.node, "NextStream", Some(&refused));
                return Err(refused);
            }
        };
        let started = async {
            let caller = caller?;
            self.node
                .auth()
                .authorize(caller, &req.namespace, Scope::Ids, 0)?;
            let max = self.node.config().max_count;
            if req.total == 0 || req.total > MAX_STREAM_TOTAL {
                return Err(IdError::InvalidCount(format!(
                    "total must be a whole number from 1 to {MAX_STREAM_TOTAL}, got {}",
                    req.total
                ))
                .into());
            }
            let chunk = if req.chunk == 0 {
                // The token's own limit, if lower, so a default chunk is never refused.
                self.node
                    .auth()
                    .max_count(caller)
                    .map_or(max, |t| t.min(max))
            } else {
                count_or_one(req.chunk, max, "server.max_count")?
            };
            let ns = tokio::select! {
                ns = self.node.namespace(&req.namespace) => ns?,
                _ = self.shutdown.stopping_now() => return Err(shutting_down()),
            };
            Ok::<_, Status>((ns, chunk, caller))
        }
        .await;
        let (ns, chunk, caller) = match started {
            Ok(started) => started,
            Err(e) => {
                count(&self.node, "NextStream", Some(&e));
                return Err(e);
            }
        };
        let (tx, rx) = mpsc::channel(STREAM_CHUNKS_AHEAD);
        tokio::spawn(produce(
            Stream {
                node: self.node.clone(),
                ns,
                total: req.total,
                chunk,
                caller,
                shutdown: self.shutdown.clone(),
                _pass: pass,
            },
            tx,
        ));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn block(
        &self,
        request: Request<proto::BlockRequest>,
    ) -> Result<Response<proto::LeasedBlock>, Status> {
        let caller = self.caller(request.metadata());
        let req = request.into_inner();
        self.unary("Block", async {
            let caller = caller?;
            let max = self.node.config().max_block_request;
            let count = count_or_one(req.count, max, "server.max_block_request")?;
            let auth = self.node.auth();
            auth.authorize(caller, &req.namespace, Scope::Blocks, count)?;
            let ns = self.node.namespace(&req.namespace).await?;
            let count = crate::config::block_request(&ns, count, auth.max_block_32(caller));
            let lease = ns.lease(count).await?;
            auth.served(caller, lease.block.len());
            Ok(proto::LeasedBlock {
                start: lease.block.start(),
                end: lease.block.end(),
                step: lease.block.step(),
                lease: lease.token.unwrap_or(0),
            })
        })
        .await
    }

    async fn give_back(
        &self,
        request: Request<proto::GiveBackRequest>,
    ) -> Result<Response<proto::GiveBackResponse>, Status> {
        let caller = self.caller(request.metadata());
        let req = request.into_inner();
        self.unary("GiveBack", async {
            self.node
                .auth()
                .authorize(caller?, &req.namespace, Scope::Blocks, 0)?;
            let tail = Block::new(req.start, req.end, req.step).ok_or_else(|| {
                IdError::InvalidRequest(format!(
                    "[{}, {}) step {} is not a block: start must be below end and step at \
                     least 1",
                    req.start, req.end, req.step
                ))
            })?;
            let view = self
                .node
                .read_namespace(&req.namespace)
                .await
                .map_err(|e| read_error(&self.node, e))?;
            let refused = |reason: String| proto::GiveBackResponse {
                given_back: false,
                ids: 0,
                reason,
            };
            let ns: Arc<Namespace> = match view {
                NamespaceView::Served(ns) => ns,
                NamespaceView::Stored(_) => {
                    return Ok(refused(
                        "this node does not serve the namespace now (it restarted?): the tail \
                         is burned"
                            .into(),
                    ))
                }
            };
            Ok(match ns.take_back(req.lease, tail)? {
                // No lease is 0: say why the block had none.
                TakeBack::Refused(_) if req.lease == 0 => refused(
                    "lease 0: the block cannot be given back (cache \"off\"); the tail is burned"
                        .into(),
                ),
                TakeBack::Restored(ids) => proto::GiveBackResponse {
                    given_back: true,
                    ids,
                    reason: String::new(),
                },
                TakeBack::Burned(ids) => refused(format!(
                    "ids were handed out after the block: its {ids} unused ids are burned"
                )),
                TakeBack::Refused(reason) => refused(format!("{reason}; the tail is burned")),
            })
        })
        .await
    }

    async fn decode(
        &self,
        request: Request<proto::DecodeRequest>,
    ) -> Result<Response<proto::Decoded>, Status> {
        let caller = self.caller(request.metadata());
        let req = request.into_inner();
        self.unary("Decode", async {
            self.node
                .auth()
                .authorize(caller?, &req.namespace, Scope::Read, 0)?;
            let view = self
                .node
                .read_namespace(&req.namespace)
                .await
                .map_err(|e| read_error(&self.node, e))?;
            Ok(convert::decoded(view.decode(&req.id)?))
        })
        .await
    }

    async fn namespaces(
        &self,
        request: Request<proto::NamespacesRequest>,
    ) -> Result<Response<proto::NamespaceList>, Status> {
        let caller = self.caller(request.metadata());
        self.unary("Namespaces", async {
            let caller = caller?;
            let now = self.node.now();
            let mut namespaces = Vec::new();
            for ns in self.node.all() {
                if !self
                    .node
                    .auth()
                    .may(caller, ns.name().as_str(), Scope::Read)
                {
                    continue;
                }
                // As HTTP's listing: the live worker pool read from the authority (a read).
                let info = ns.info_live(now, &**self.node.authority()).await;
                namespaces.push(with_residues(
                    &self.node,
                    convert::namespace_info(self.node.describe(info)),
                ));
            }
            Ok(proto::NamespaceList { namespaces })
        })
        .await
    }

    async fn rebase(
        &self,
        request: Request<proto::RebaseRequest>,
    ) -> Result<Response<proto::Advanced>, Status> {
        let caller = self.caller(request.metadata());
        let req = request.into_inner();
        self.unary("Rebase", async {
            self.node
                .auth()
                .authorize(caller?, &req.namespace, Scope::Admin, 0)?;
            let a = self
                .node
                .advance(
                    &req.namespace,
                    idmint_store::Advance::Rebase,
                    Some(req.above),
                )
                .await?;
            Ok(advanced(a))
        })
        .await
    }

    async fn retire(
        &self,
        request: Request<proto::RetireRequest>,
    ) -> Result<Response<proto::Advanced>, Status> {
        let caller = self.caller(request.metadata());
        let req = request.into_inner();
        self.unary("Retire", async {
            self.node
                .auth()
                .authorize(caller?, &req.namespace, Scope::Admin, 0)?;
            let a = self
                .node
                .advance(&req.namespace, idmint_store::Advance::Retire, None)
                .await?;
            Ok(advanced(a))
        })
        .await
    }

    async fn namespace(
        &self,
        request: Request<proto::NamespaceRequest>,
    ) -> Result<Response<proto::NamespaceInfo>, Status> {
        let caller = self.caller(request.metadata());
        let req = request.into_inner();
        self.unary("Namespace", async {
            self.node
                .auth()
                .authorize(caller?, &req.namespace, Scope::Read, 0)?;
            let view = self
                .node
                .read_namespace(&req.namespace)
                .await
                .map_err(|e| read_error(&self.node, e))?;
            let info = view
                .info_live(self.node.now(), &**self.node.authority())
                .await;
            Ok(with_residues(
                &self.node,
                convert::namespace_info(self.node.describe(info)),
            ))
        })
        .await
    }
}

/// `info` with the residue classes the node's authority may grant for a sequence namespace
/// (`SequenceSettings.residues`), for a lower tier's block checks: the authority's, so a node
/// on a multi authority (or below one) names every member's class.
fn with_residues(node: &Node, mut info: proto::NamespaceInfo) -> proto::NamespaceInfo {
    if let Some(proto::namespace_info::Kind::Sequence(sequence)) = &mut info.kind {
        if let Some(s) = &mut sequence.settings {
            let spec = Width::from_bits(s.width)
                .and_then(|width| SequenceSpec::new(width, s.start, s.step, s.offset).ok());
            if let Some(spec) = spec {
                s.residues = node.authority().residues(&spec);
            }
        }
    }
    info
}

/// One `NextStream` being produced.
struct Stream {
    node: Arc<Node>,
    ns: Arc<Namespace>,
    total: u64,
    chunk: u64,
    /// Who asked: each chunk takes from its quota.
    caller: Caller,
    shutdown: Shutdown,
    /// Held until the producer ends (see [`gate`]).
    _pass: Pass,
}

/// Sends `stream.total` ids in chunks, each taken only once the channel has room for it; ends
/// early on the first error (sent as the stream's status), when the client goes away, when the
/// node begins draining (`shutting_down`), or at once on `StopNow`.
async fn produce(stream: Stream, tx: mpsc::Sender<Result<proto::Ids, Status>>) {
    let name = stream.ns.name().as_str();
    let mut left = stream.total;
    let outcome: Result<(), Status> = loop {
        if left == 0 {
            break Ok(());
        }
        let permit = tokio::select! {
            permit = tx.reserve() => match permit {
                Ok(permit) => permit,
                Err(_) => break Err(Status::cancelled("the client went away")),
            },
            _ = stream.shutdown.stopping_now() => {
                let cut = shutting_down();
                let _ = tx.try_send(Err(cut.clone()));
                break Err(cut);
            }
        };
        if stream.shutdown.stage() >= Stage::Draining {
            let cut = shutting_down();
            permit.send(Err(cut.clone()));
            break Err(cut);
        }
        let want = left.min(stream.chunk);
        if let Err(e) = stream
            .node
            .auth()
            .authorize(stream.caller, name, Scope::Ids, want)
        {
            let e = Status::from(e);
            permit.send(Err(e.clone()));
            break Err(e);
        }
        let taken = tokio::select! {
            taken = stream.ns.ids(want) => taken,
            _ = stream.shutdown.stopping_now() => Err(IdError::ShuttingDown),
            _ = tx.closed() => break Err(Status::cancelled("the client went away")),
        };
        match taken {
            Ok(ids) if ids.is_empty() => {
                // A sequence namespace answers short only when it runs out; never loop on it.
                let e = Status::from(IdError::Internal(name.to_owned()));
                permit.send(Err(e.clone()));
                break Err(e);
            }
            Ok(ids) => {
                left = left.saturating_sub(ids.len() as u64);
                stream.node.auth().served(stream.caller, ids.len() as u64);
                permit.send(Ok(convert::ids(name, ids)));
            }
            Err(e) => {
                let e = Status::from(e);
                permit.send(Err(e.clone()));
                break Err(e);
            }
        }
    };
    count(&stream.node, "NextStream", outcome.as_ref().err());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_default_to_one_and_are_bounded() {
        assert_eq!(count_or_one(0, 10, "server.max_count"), Ok(1));
        assert_eq!(count_or_one(7, 10, "server.max_count"), Ok(7));
        let e = count_or_one(11, 10, "server.max_count").err();
        assert_eq!(e.map(|e| e.code()), Some(ErrorCode::InvalidCount));
    }

    #[test]
    fn every_error_code_reads_back() {
        for code in [
            ErrorCode::InvalidCount,
            ErrorCode::UnknownNamespace,
            ErrorCode::ShuttingDown,
            ErrorCode::NamespaceLost,
        ] {
            assert_eq!(error_code(code.as_str()), Some(code));
        }
        assert_eq!(error_code("no_such_code"), Some(ErrorCode::Unknown));
    }
}
