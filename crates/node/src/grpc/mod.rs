//! The gRPC front-end (`idmint.v1`, `proto/idmint/v1/idmint.proto`, docs/grpc.md), on tonic's
//! service code over hyper's HTTP/2: read the request, call one of the node's operations
//! (`crate::node::requests`), write the answer as a message ([`convert`]), map errors to
//! statuses ([`status`]). A sibling of [`crate::http`] over the same operations: it
//! authenticates, limits and computes nothing itself.
//!
//! Invariants:
//! - Only `Next`, `NextStream` and `Block` may create a namespace or take ids; the node's read
//!   operations (`Decode`, `Namespace`, `Namespaces`) and `GiveBack` never create anything.
//! - Counts follow the node's one count rule: unset is 1, 0 or above the limit
//!   `invalid_count` (`INVALID_ARGUMENT`).
//! - A stream takes its next chunk only when HTTP/2 flow control lets the connection send it
//!   (the stream is produced lazily, inside the connection's task): a client that stops reading
//!   stops the taking, and holds at most one chunk and its send buffer. At most
//!   `server.max_streams` streams are open on the node at once. Ids of a chunk a client never
//!   reads (it went away) are burned, never handed out again. Streams end with `shutting_down`
//!   once the node begins draining.
//! - Every connection is served in its own task (`serve_connection`), policed like every
//!   other ([`crate::server::conn`]): a request in flight keeps it from being idle; draining
//!   sends GOAWAY and lets the requests finish; stop-now aborts the task, dropping every
//!   request future (their ids put back).
//! - With `[auth]`, every method hands its `authorization: Bearer <token>` metadata to the
//!   node's operation (`UNAUTHENTICATED`, `PERMISSION_DENIED`, `RESOURCE_EXHAUSTED` with the
//!   idmint codes `unauthorized`, `forbidden`, `rate_limited`).
//!
//! Beside `idmint.v1`, every gRPC listener answers the standard health service
//! (`grpc.health.v1`, [`health`]) with the node's readiness.
//!
//! What it does not do: reflection, or gRPC-Web.

pub mod convert;
pub mod health;
mod leases;
pub mod status;

/// The generated messages, service and client of `idmint.v1` (generated once, in
/// `idmint-proto`).
pub use idmint_proto::v1 as proto;

use crate::error::IdError;
use crate::metrics::GrpcLabels;
use crate::namespace::route::ShardRoute;
use crate::node::requests::{Credentials, IdStream};
use crate::node::Node;
use crate::server::conn::{Activity, InFlight};
use crate::server::shutdown::Shutdown;
use crate::server::streams::Streams;
use crate::server::Connection;
use idmint_core::Block;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::Stream;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};

/// Most requests one HTTP/2 connection may have in flight at once.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 128;

/// Most bytes an HTTP/2 stream buffers for a client that does not read: bounds the memory a
/// stream holds beyond its one chunk.
pub const MAX_SEND_BUFFER: usize = 64 * 1024;

/// The largest request message decoded (every request is a name and a few numbers).
pub const MAX_REQUEST_MESSAGE: usize = 16 * 1024;

/// The `idmint.v1.Idmint` service over a node.
#[derive(Debug, Clone)]
pub struct IdmintService {
    node: Arc<Node>,
}

/// The tonic server of the service.
pub type IdmintServer = proto::idmint_server::IdmintServer<IdmintService>;

impl IdmintService {
    /// The service over `node`.
    pub fn new(node: Arc<Node>) -> Self {
        IdmintService { node }
    }

    /// The tonic server of this service, with its request size bound.
    pub fn into_server(self) -> IdmintServer {
        proto::idmint_server::IdmintServer::new(self).max_decoding_message_size(MAX_REQUEST_MESSAGE)
    }

    /// Counts a request's outcome in `idmint_grpc_requests_total` and answers it.
    fn answer<T>(
        &self,
        method: &'static str,
        result: Result<T, IdError>,
    ) -> Result<Response<T>, Status> {
        let result = result.map_err(Status::from);
        count(&self.node, method, result.as_ref().err());
        result.map(Response::new)
    }
}

/// The credentials of a request: its `authorization` metadata.
fn credentials(metadata: &MetadataMap) -> Credentials<'_> {
    Credentials::Header(metadata.get("authorization").map(|v| v.as_bytes()))
}

/// Counts a request's outcome: `idmint_grpc_requests_total` by method and code (domain errors
/// are counted by the node's operations, by idmint code).
fn count(node: &Node, method: &'static str, error: Option<&Status>) {
    let code = error.map_or(Code::Ok, Status::code);
    node.metrics()
        .grpc_requests
        .get_or_create(&GrpcLabels {
            method,
            code: code_name(code),
        })
        .inc();
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

impl IdmintService {
    /// A parsed lease call carried out; a request that does not parse is counted as the
    /// operations count their own errors.
    async fn lease_call(
        &self,
        metadata: &MetadataMap,
        call: Result<crate::node::leases::LeaseCall, IdError>,
    ) -> Result<crate::node::leases::LeaseOutcome, IdError> {
        match call {
            Ok(call) => self.node.worker_lease(credentials(metadata), call).await,
            Err(e) => {
                self.node.count_error(&e);
                Err(e)
            }
        }
    }
}

/// A stream's chunks as messages, produced one at a time as the connection asks for them.
type ChunkStream = Pin<Box<dyn Stream<Item = Result<proto::Ids, Status>> + Send>>;

#[tonic::async_trait]
impl proto::idmint_server::Idmint for IdmintService {
    async fn next(
        &self,
        request: Request<proto::NextRequest>,
    ) -> Result<Response<proto::Ids>, Status> {
        let (metadata, _, req) = request.into_parts();
        let taken = match ShardRoute::of(req.shard, req.key) {
            Ok(route) => {
                self.node
                    .take_ids(credentials(&metadata), &req.namespace, req.count, route)
                    .await
            }
            Err(e) => {
                self.node.count_error(&e);
                Err(e)
            }
        };
        self.answer(
            "Next",
            taken.map(|t| convert::ids(t.namespace.name().as_str(), t.ids)),
        )
    }

    type NextStreamStream = ChunkStream;

    async fn next_stream(
        &self,
        request: Request<proto::NextStreamRequest>,
    ) -> Result<Response<Self::NextStreamStream>, Status> {
        let (metadata, extensions, req) = request.into_parts();
        let opened = self
            .node
            .open_stream(credentials(&metadata), &req.namespace, req.total, req.chunk)
            .await;
        let stream = match opened {
            Ok(stream) => stream,
            Err(e) => return self.answer("NextStream", Err(e)),
        };
        // The connection is busy (never idle) while the stream is open.
        let in_flight = extensions.get::<Arc<Activity>>().map(Activity::begin);
        Ok(Response::new(chunks(self.node.clone(), stream, in_flight)))
    }

    async fn block(
        &self,
        request: Request<proto::BlockRequest>,
    ) -> Result<Response<proto::LeasedBlock>, Status> {
        let (metadata, _, req) = request.into_parts();
        let lease = self
            .node
            .take_block(
                credentials(&metadata),
                &req.namespace,
                req.count,
                req.min_start.unwrap_or(0),
                req.extends.unwrap_or(0),
            )
            .await;
        self.answer(
            "Block",
            lease.map(|lease| proto::LeasedBlock {
                start: lease.block.start(),
                end: lease.block.end(),
                step: lease.block.step(),
                lease: lease.token.unwrap_or(0),
                lease_start: lease.from,
            }),
        )
    }

    async fn give_back(
        &self,
        request: Request<proto::GiveBackRequest>,
    ) -> Result<Response<proto::GiveBackResponse>, Status> {
        let (metadata, _, req) = request.into_parts();
        let result = match Block::new(req.start, req.end, req.step) {
            Some(tail) => {
                self.node
                    .give_back(credentials(&metadata), &req.namespace, req.lease, tail)
                    .await
            }
            None => {
                let e = IdError::InvalidRequest(format!(
                    "[{}, {}) step {} is not a block: start must be below end and step at \
                     least 1",
                    req.start, req.end, req.step
                ));
                self.node.count_error(&e);
                Err(e)
            }
        };
        self.answer(
            "GiveBack",
            result.map(|g| proto::GiveBackResponse {
                given_back: g.given_back,
                ids: g.ids,
                reason: g.reason,
            }),
        )
    }

    async fn decode(
        &self,
        request: Request<proto::DecodeRequest>,
    ) -> Result<Response<proto::Decoded>, Status> {
        let (metadata, _, req) = request.into_parts();
        let decoded = self
            .node
            .decode(credentials(&metadata), &req.namespace, &req.id)
            .await;
        self.answer("Decode", decoded.map(convert::decoded))
    }

    async fn acquire_worker(
        &self,
        request: Request<proto::AcquireWorkerRequest>,
    ) -> Result<Response<proto::WorkerLeaseAnswer>, Status> {
        let (metadata, _, req) = request.into_parts();
        let result = self.lease_call(&metadata, leases::acquire(req)).await;
        self.answer("AcquireWorker", result.map(leases::answer))
    }

    async fn renew_worker(
        &self,
        request: Request<proto::RenewWorkerRequest>,
    ) -> Result<Response<proto::WorkerLeaseAnswer>, Status> {
        let (metadata, _, req) = request.into_parts();
        let result = self
            .lease_call(&metadata, leases::renew_or_release(req, false))
            .await;
        self.answer("RenewWorker", result.map(leases::answer))
    }

    async fn release_worker(
        &self,
        request: Request<proto::RenewWorkerRequest>,
    ) -> Result<Response<proto::WorkerLeaseAnswer>, Status> {
        let (metadata, _, req) = request.into_parts();
        let result = self
            .lease_call(&metadata, leases::renew_or_release(req, true))
            .await;
        self.answer("ReleaseWorker", result.map(leases::answer))
    }

    async fn forward(
        &self,
        request: Request<proto::ForwardRequest>,
    ) -> Result<Response<proto::ForwardAnswer>, Status> {
        let (metadata, _, req) = request.into_parts();
        let parts: Vec<(u64, u64)> = req.parts.iter().map(|p| (p.shard, p.count)).collect();
        let served = self
            .node
            .take_forwarded(
                credentials(&metadata),
                &req.namespace,
                req.count,
                req.consecutive,
                req.shard,
                &parts,
            )
            .await;
        let answered = served.map(|(ids, term)| {
            let proof = self.node.peer_proof(&req.challenge, term, &ids);
            proto::ForwardAnswer { ids, term, proof }
        });
        self.answer("Forward", answered)
    }

    async fn worker_group(
        &self,
        request: Request<proto::WorkerGroupRequest>,
    ) -> Result<Response<proto::WorkerGroupAnswer>, Status> {
        let (metadata, _, req) = request.into_parts();
        let found = self
            .node
            .worker_group(credentials(&metadata), &req.group)
            .await;
        self.answer("WorkerGroup", found.map(leases::group))
    }

    async fn namespaces(
        &self,
        request: Request<proto::NamespacesRequest>,
    ) -> Result<Response<proto::NamespaceList>, Status> {
        let listed = self
            .node
            .namespace_list(credentials(request.metadata()))
            .await;
        self.answer(
            "Namespaces",
            listed.map(|all| proto::NamespaceList {
                namespaces: all.into_iter().map(convert::namespace_info).collect(),
            }),
        )
    }

    async fn rebase(
        &self,
        request: Request<proto::RebaseRequest>,
    ) -> Result<Response<proto::Advanced>, Status> {
        let (metadata, _, req) = request.into_parts();
        let moved = self
            .node
            .move_watermark(
                credentials(&metadata),
                &req.namespace,
                idmint_store::Advance::Rebase,
                Some(req.above),
            )
            .await;
        self.answer("Rebase", moved.map(advanced))
    }

    async fn retire(
        &self,
        request: Request<proto::RetireRequest>,
    ) -> Result<Response<proto::Advanced>, Status> {
        let (metadata, _, req) = request.into_parts();
        let moved = self
            .node
            .move_watermark(
                credentials(&metadata),
                &req.namespace,
                idmint_store::Advance::Retire,
                None,
            )
            .await;
        self.answer("Retire", moved.map(advanced))
    }

    async fn namespace(
        &self,
        request: Request<proto::NamespaceRequest>,
    ) -> Result<Response<proto::NamespaceInfo>, Status> {
        let (metadata, _, req) = request.into_parts();
        let info = self
            .node
            .namespace_info(credentials(&metadata), &req.namespace)
            .await;
        self.answer("Namespace", info.map(convert::namespace_info))
    }
}

/// The chunks of `stream` as messages, taken one at a time when the connection polls for the
/// next (so only when flow control lets it send one); the stream ends after its first error.
/// `in_flight` marks the connection busy until the stream is dropped.
fn chunks(node: Arc<Node>, stream: IdStream, in_flight: Option<InFlight>) -> ChunkStream {
    /// What the stream holds between chunks; `done` once it ended (its outcome counted).
    struct State {
        node: Arc<Node>,
        stream: IdStream,
        _in_flight: Option<InFlight>,
        done: bool,
    }
    let state = State {
        node,
        stream,
        _in_flight: in_flight,
        done: false,
    };
    Box::pin(futures_util::stream::unfold(
        state,
        |mut state| async move {
            if state.done {
                return None;
            }
            let name = state.stream.namespace().name().to_string();
            match state.stream.next_chunk().await {
                None => {
                    count(&state.node, "NextStream", None);
                    None
                }
                Some(Ok(ids)) => Some((Ok(convert::ids(&name, ids)), state)),
                Some(Err(e)) => {
                    let status = Status::from(e);
                    count(&state.node, "NextStream", Some(&status));
                    state.done = true;
                    Some((Err(status), state))
                }
            }
        },
    ))
}

/// Serves one HTTP/2 connection with the service until it ends, the policy closes it, or
/// draining lets its requests finish (GOAWAY first).
/// Serves one gRPC connection; each request runs in a task of `streams`, waited for (or cut
/// by the server) before the connection counts as closed.
pub(crate) async fn serve_connection(
    node: Arc<Node>,
    conn: Connection,
    shutdown: Shutdown,
    streams: Streams,
) {
    let activity = conn.activity().clone();
    // The idmint API and the standard health service, routed by path.
    let grpc = tonic::service::Routes::new(IdmintService::new(node.clone()).into_server())
        .add_service(health::HealthService::new(node.clone()).into_server())
        .prepare();
    let service = tower::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        // Every request marks the connection busy while it runs, and passes the connection's
        // activity on (a stream keeps the connection busy for as long as it is open).
        let in_flight = activity.begin();
        request.extensions_mut().insert(activity.clone());
        let mut grpc = grpc.clone();
        async move {
            let answer = tower::Service::call(&mut grpc, request).await;
            drop(in_flight);
            answer
        }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(streams.clone());
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .max_send_buf_size(MAX_SEND_BUFFER)
        .max_header_list_size(16 * 1024)
        .keep_alive_interval(None::<Duration>);
    let served = builder.serve_connection(
        hyper_util::rt::TokioIo::new(conn),
        hyper_util::service::TowerToHyperService::new(service),
    );
    tokio::pin!(served);
    tokio::select! {
        result = served.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "grpc connection ended with an error");
            }
            streams.finish().await;
            return;
        }
        _ = shutdown.draining() => {}
    }
    served.as_mut().graceful_shutdown();
    if let Err(e) = served.await {
        tracing::debug!(error = %e, "grpc connection ended with an error while draining");
    }
    streams.finish().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_name() {
        assert_eq!(code_name(Code::Ok), "ok");
        assert_eq!(code_name(Code::ResourceExhausted), "resource_exhausted");
    }
}
