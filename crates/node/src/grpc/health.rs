//! The standard gRPC health service (`grpc.health.v1.Health`), on every gRPC listener: what
//! gRPC load balancers, Kubernetes' `grpc` probes and `grpc-health-probe` ask. Its answer is
//! the node's readiness ([`Node::readiness`], the same as `GET /readyz`): `SERVING` while the
//! node can serve every namespace it declares (a node bridging an outage of its authority from
//! its buffers is serving, degraded), `NOT_SERVING` while one cannot, or once the node is
//! draining.
//!
//! Invariants: it is a read (readiness creates and reserves nothing); it needs no token (a
//! probe carries none, as for `/readyz`), and says nothing a token would protect; the service
//! names it knows are `""` (the node) and `idmint.v1.Idmint`, any other is `NOT_FOUND`; a
//! `Watch` stream holds one of the node's stream permits (`server.max_streams`), sends the
//! status at once and then each change (checked every [`WATCH_EVERY`]), and ends with
//! `NOT_SERVING` when the node drains.

use crate::node::Node;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// How often a `Watch` stream re-reads the readiness.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The service name of the idmint API, as a client asks about it.
pub const IDMINT_SERVICE: &str = "idmint.v1.Idmint";

/// `grpc.health.v1.Health` over one node.
#[derive(Debug, Clone)]
pub struct HealthService {
    node: Arc<Node>,
}

impl HealthService {
    /// The service of `node`.
    pub fn new(node: Arc<Node>) -> Self {
        HealthService { node }
    }

    /// The tonic server of it.
    pub fn into_server(self) -> HealthServer<HealthService> {
        HealthServer::new(self)
    }
}

/// The node's status as the health service says it.
async fn status_of(node: &Node) -> ServingStatus {
    match node.readiness().await {
        Ok(r) if r.is_ready() => ServingStatus::Serving,
        _ => ServingStatus::NotServing,
    }
}

fn known(service: &str) -> Result<(), Status> {
    if service.is_empty() || service == IDMINT_SERVICE {
        Ok(())
    } else {
        Err(Status::not_found(format!(
            "unknown service {service:?}: ask about \"\" (the node) or {IDMINT_SERVICE:?}"
        )))
    }
}

fn answer(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status.into(),
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        known(&request.get_ref().service)?;
        Ok(Response::new(answer(status_of(&self.node).await)))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        known(&request.get_ref().service)?;
        let permit = self
            .node
            .stream_permit()
            .map_err(|e| crate::grpc::status::from_id_error(&e))?;
        let node = self.node.clone();
        let stream = async_stream_of(node, permit);
        Ok(Response::new(Box::pin(stream)))
    }
}

/// The `Watch` stream: the status now, then each change, until the node drains (a last
/// `NOT_SERVING`) or the client goes away (the stream is dropped with its permit).
fn async_stream_of(
    node: Arc<Node>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> impl Stream<Item = Result<HealthCheckResponse, Status>> + Send {
    let state = (node, permit, None::<ServingStatus>, false);
    futures_util::stream::unfold(state, |(node, permit, last, ended)| async move {
        if ended {
            return None;
        }
        loop {
            if node.is_draining() {
                let bye = answer(ServingStatus::NotServing);
                return Some((Ok(bye), (node, permit, last, true)));
            }
            let now = status_of(&node).await;
            if last != Some(now) {
                return Some((Ok(answer(now)), (node, permit, Some(now), false)));
            }
            let drained = node.shutdown_handle().clone();
            tokio::select! {
                _ = tokio::time::sleep(WATCH_EVERY) => {}
                _ = drained.draining() => {}
            }
        }
    })
}
