//! The HTTP/JSON front-end (docs/api.md), on axum: parse the request, call the namespace, write
//! the answer as an [`idmint_api`] type, map errors to statuses ([`error`]). It computes nothing
//! about namespaces itself; a second front-end is a sibling of this module.
//!
//! Every error is a status that fits and `{"error": {"code": "snake_case", "message": "..."}}`,
//! including unknown routes, wrong methods and malformed query strings; nothing panics on input.
//! Ids are written as decimal strings (JavaScript-safe) or canonical UUID/ULID text.

pub mod encode;
pub mod error;

use crate::error::IdError;
use crate::metrics::ErrorLabels;
use crate::registry::Node;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
use idmint_api::{BlockResponse, ErrorCode, Health, NamespaceList, Ready};
use std::sync::Arc;
use std::time::Duration;

/// The router of the whole API over `node`.
pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route("/v1/ids/{namespace}", get(get_ids))
        .route("/v1/blocks/{namespace}", post(post_block))
        .route("/v1/decode/{namespace}/{id}", get(decode))
        .route("/v1/namespaces", get(list_namespaces))
        .route("/v1/namespaces/{namespace}", get(get_namespace))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(node)
}

/// Counts the error in the metrics and turns it into its answer.
fn fail(node: &Node, e: IdError) -> Response {
    node.metrics()
        .errors
        .get_or_create(&ErrorLabels {
            code: e.code().as_str(),
        })
        .inc();
    ApiError::from(e).into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "no such route; see /v1/namespaces",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::MethodNotAllowed,
        "method not allowed on this route (ids: GET, blocks: POST)",
    )
}

/// Parses `count` (default 1, 1..=max) from a query string that may hold nothing else.
fn parse_count(query: Option<&str>, max: u64) -> Result<u64, IdError> {
    let mut count = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "count" => count = Some(v),
            other => {
                return Err(IdError::InvalidRequest(format!(
                    "unknown query parameter {other:?}; only count is accepted"
                )))
            }
        }
    }
    let Some(raw) = count else { return Ok(1) };
    let n: u64 = raw.parse().map_err(|_| {
        IdError::InvalidCount(format!(
            "count must be a whole number from 1 to {max}, got {raw:?}"
        ))
    })?;
    if n == 0 {
        return Err(IdError::InvalidCount("count must be at least 1".into()));
    }
    if n > max {
        return Err(IdError::InvalidCount(format!(
            "count {n} is above this server's maximum of {max} (server.max_count)"
        )));
    }
    Ok(n)
}

async fn get_ids(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let result = async {
        let count = parse_count(query.as_deref(), node.config().max_count)?;
        let ns = node.namespace(&name).await?;
        let ids = ns.ids(count).await?;
        Ok::<_, IdError>((ns, ids))
    }
    .await;
    match result {
        Ok((ns, ids)) => (
            [(header::CONTENT_TYPE, "application/json")],
            encode::ids_json(ns.name().as_str(), &ids),
        )
            .into_response(),
        Err(e) => fail(&node, e),
    }
}

async fn post_block(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let result = async {
        let count = parse_count(query.as_deref(), node.config().max_count.max(1_000_000))?;
        node.namespace(&name).await?.block(count).await
    }
    .await;
    match result {
        Ok(b) => axum::Json(BlockResponse {
            start: b.start(),
            end: b.end(),
            step: b.step(),
        })
        .into_response(),
        Err(e) => fail(&node, e),
    }
}

async fn decode(
    State(node): State<Arc<Node>>,
    Path((name, id)): Path<(String, String)>,
) -> Response {
    let result = async { node.namespace(&name).await?.decode(&id) }.await;
    match result {
        Ok(d) => axum::Json(d).into_response(),
        Err(e) => fail(&node, e),
    }
}

async fn list_namespaces(State(node): State<Arc<Node>>) -> Response {
    let now = node.now();
    let namespaces = node.all().iter().map(|ns| ns.info(now)).collect();
    axum::Json(NamespaceList { namespaces }).into_response()
}

async fn get_namespace(State(node): State<Arc<Node>>, Path(name): Path<String>) -> Response {
    match node.namespace(&name).await {
        Ok(ns) => axum::Json(ns.info(node.now())).into_response(),
        Err(e) => fail(&node, e),
    }
}

async fn healthz() -> Response {
    axum::Json(Health {
        status: "ok".into(),
    })
    .into_response()
}

async fn readyz(State(node): State<Arc<Node>>) -> Response {
    if node.is_draining() {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ShuttingDown,
            "the node is shutting down",
        )
        .into_response();
    }
    let authority = node.authority().clone();
    let unavailable = |message: String| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::AuthorityUnavailable,
            message,
        )
        .into_response()
    };
    match tokio::time::timeout(Duration::from_secs(2), authority.list()).await {
        Ok(Ok(_)) => axum::Json(Ready {
            status: "ready".into(),
            authority: authority.kind().into(),
        })
        .into_response(),
        Ok(Err(e)) => unavailable(format!(
            "the {} authority is unavailable: {e}",
            authority.kind()
        )),
        Err(_) => unavailable(format!(
            "the {} authority did not answer within 2s",
            authority.kind()
        )),
    }
}

async fn metrics(State(node): State<Arc<Node>>) -> Response {
    node.refresh_gauges();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        node.metrics().encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn count_parsing() {
        assert_eq!(parse_count(None, 10), Ok(1));
        assert_eq!(parse_count(Some("count=7"), 10), Ok(7));
        for bad in ["count=0", "count=11", "count=-1", "count=abc"] {
            assert_eq!(
                parse_count(Some(bad), 10).unwrap_err().code(),
                ErrorCode::InvalidCount,
                "{bad}"
            );
        }
        assert_eq!(
            parse_count(Some("cnt=1"), 10).unwrap_err().code(),
            ErrorCode::InvalidRequest
        );
    }
}
