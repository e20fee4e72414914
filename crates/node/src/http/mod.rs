//! The HTTP/JSON front-end (docs/api.md), on axum: parse the request, call the namespace, write
//! the answer as an [`idmint_api`] type, map errors to statuses ([`error`]). It computes nothing
//! about namespaces itself; a second front-end is a sibling of this module.
//!
//! Invariants:
//! - Every error axum lets us answer is a status that fits and
//!   `{"error": {"code": "snake_case", "message": "..."}}`: unknown routes, wrong methods (405
//!   with an `Allow` header naming that route's methods), malformed paths (invalid UTF-8 after
//!   percent-decoding) and query strings, URIs longer than [`MAX_URI_BYTES`] (414). Nothing
//!   panics on input. What hyper answers before the router runs (a URI over 64 KiB: 414; headers
//!   over its buffer: 431; a request line it cannot parse: 400) has an empty body: hyper writes
//!   those itself and offers no hook to change them.
//! - Only `GET /v1/ids`, `POST /v1/blocks` and the two administration routes (`POST
//!   /v1/admin/rebase`, `/v1/admin/retire`: scope `admin`) may create a namespace or move a
//!   watermark; reads go
//!   through [`Node::read_namespace`]. `HEAD` on those two routes is 405 (axum would otherwise
//!   run the GET handler and hand out an id nobody sees). Their answers carry
//!   `Cache-Control: no-store`, so no cache replays an id.
//! - Query strings are percent-decoded; each parameter may appear once.
//! - Every route is added through `routes`, which records its path and allowed methods, and
//!   `GET /openapi.json` ([`openapi`]) documents exactly those (a test compares them). `GET /`
//!   ([`status_page`]) is the HTML view of the same reads.
//!
//! - With `[auth]` ([`crate::auth`]), every route but `/healthz`, `/readyz`, `/openapi.json`
//!   (and `/metrics` unless `[auth] metrics = "read"`) reads `Authorization: Bearer <token>`
//!   first and is refused (401, 403, 429 with `Retry-After`) before it parses anything else or
//!   looks a namespace up: a refused request creates and reserves nothing. The listing shows
//!   only the namespaces the token may read; the status page needs `read` on `*`.
//!
//! Ids are written as decimal strings (JavaScript-safe) or canonical UUID/ULID text.

pub mod encode;
pub mod error;
pub mod listen;
pub mod openapi;
pub mod status_page;

pub use listen::listen;

use crate::auth::{Caller, Scope};
use crate::error::IdError;
use crate::metrics::ErrorLabels;
use crate::registry::Node;
use axum::extract::path::ErrorKind;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use error::ApiError;
use idmint_api::{BlockResponse, ErrorCode, Health, NamespaceList, Ready};
use std::sync::Arc;
use std::time::Duration;

/// The longest request target (path and query) the router answers; longer ones get a JSON 414.
/// Nothing legitimate comes near: names are at most 128 bytes, ids at most 40.
pub const MAX_URI_BYTES: usize = 8 * 1024;

const IDS: &str = "/v1/ids/{namespace}";
const BLOCKS: &str = "/v1/blocks/{namespace}";
const DECODE: &str = "/v1/decode/{namespace}/{id}";
const NAMESPACES: &str = "/v1/namespaces";
const NAMESPACE: &str = "/v1/namespaces/{namespace}";
const OPENAPI: &str = "/openapi.json";
const REBASE: &str = "/v1/admin/rebase/{namespace}";
const RETIRE: &str = "/v1/admin/retire/{namespace}";
/// The methods of the read-only routes: `HEAD` runs the GET handler without the body, which is
/// harmless because reads never write.
const READ: &str = "GET, HEAD";

/// The router of the whole API over `node`.
pub fn router(node: Arc<Node>) -> Router {
    routes()
        .router
        .fallback(not_found)
        // Every route above has its own; this one is for a route added without one.
        .method_not_allowed_fallback(method_not_allowed)
        .layer(tower::layer::layer_fn(RefuseLongUri))
        .with_state(node)
}

/// The routes, and what each allows: `GET /openapi.json` must document exactly these (a test
/// compares them), so a route added without documentation fails the build's tests.
pub(crate) struct Routes {
    router: Router<Arc<Node>>,
    /// `(path, Allow header)` of every route, in the order added.
    pub(crate) allowed: Vec<(&'static str, &'static str)>,
}

impl Routes {
    /// Adds `path` served by `methods`; every other method answers 405 naming `allow`.
    fn route(
        mut self,
        path: &'static str,
        allow: &'static str,
        methods: MethodRouter<Arc<Node>>,
    ) -> Self {
        self.router = self
            .router
            .route(path, methods.fallback(refuse(path, allow)));
        self.allowed.push((path, allow));
        self
    }
}

/// Every route of the API, before the state is given.
pub(crate) fn routes() -> Routes {
    Routes {
        router: Router::new(),
        allowed: Vec::new(),
    }
    .route(IDS, "GET", get(get_ids).head(refuse(IDS, "GET")))
    .route(BLOCKS, "POST", post(post_block))
    .route(REBASE, "POST", post(rebase))
    .route(RETIRE, "POST", post(retire))
    .route(DECODE, READ, get(decode))
    .route(NAMESPACES, READ, get(list_namespaces))
    .route(NAMESPACE, READ, get(get_namespace))
    .route("/healthz", READ, get(healthz))
    .route("/readyz", READ, get(readyz))
    .route("/metrics", READ, get(metrics))
    .route(OPENAPI, READ, get(openapi::serve))
    .route("/", READ, get(status_page))
    .route("/ui", READ, get(status_page))
}

/// The caller the request's `Authorization` header names ([`crate::auth::Auth`]).
fn caller(node: &Node, headers: &HeaderMap) -> Result<Caller, IdError> {
    caller_of(node, headers.get(header::AUTHORIZATION))
}

/// The caller an `Authorization` header value names.
fn caller_of(node: &Node, authorization: Option<&HeaderValue>) -> Result<Caller, IdError> {
    node.auth()
        .authenticate_header(authorization.map(HeaderValue::as_bytes))
}

/// The request's `Authorization` header, alone: the id routes read nothing else from the
/// headers, and extracting the whole `HeaderMap` would clone every header on every request.
struct Authorization(Option<HeaderValue>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Authorization {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        // A `HeaderValue` clone is a reference count, not a copy.
        Ok(Authorization(
            parts.headers.get(header::AUTHORIZATION).cloned(),
        ))
    }
}

/// `GET /` and `/ui`: the status page, which shows every namespace, so with `[auth]` it needs
/// `read` on `*`.
async fn status_page(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let allowed =
        caller(&node, &headers).and_then(|caller| node.auth().authorize_node(caller, Scope::Read));
    match allowed {
        Ok(()) => status_page::serve(State(node)).await,
        Err(e) => fail(&node, e),
    }
}

/// Counts the error in the metrics and turns it into its answer.
fn fail(node: &Node, e: IdError) -> Response {
    count_error(node, e.code());
    ApiError::from(e).into_response()
}

fn count_error(node: &Node, code: ErrorCode) {
    node.metrics()
        .errors
        .get_or_create(&ErrorLabels {
            code: code.as_str(),
        })
        .inc();
}

/// [`fail`] for a read: an unknown namespace is not created by a read, and the message says so
/// (the domain's message is about `auto_create`, which does not matter to a read).
fn fail_read(node: &Node, e: IdError) -> Response {
    match e {
        IdError::UnknownNamespace(name) if node.config().auto_create => {
            count_error(node, ErrorCode::UnknownNamespace);
            ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::UnknownNamespace,
                format!(
                    "namespace {name:?} does not exist; reads do not create namespaces \
                     (GET /v1/ids/{name} does)"
                ),
            )
            .into_response()
        }
        other => fail(node, other),
    }
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
        "method not allowed on this route; the Allow header lists the allowed ones",
    )
}

/// The 405 handler of `route`, whose methods are `allow`: a JSON error naming them, and the
/// `Allow` header (axum leaves a handler's own `Allow` alone).
fn refuse(
    route: &'static str,
    allow: &'static str,
) -> impl Fn(Method) -> std::future::Ready<Response> + Clone + Send + Sync + 'static {
    move |method: Method| {
        let why = if method == Method::HEAD && allow == "GET" {
            " (it would hand out ids nobody sees)"
        } else {
            ""
        };
        let mut answer = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            format!("{method} is not allowed on {route}{why}; allowed: {allow}"),
        )
        .into_response();
        answer
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
        std::future::ready(answer)
    }
}

/// Answers a JSON 414 to a request target longer than [`MAX_URI_BYTES`] before any route runs.
/// A plain wrapper rather than `middleware::from_fn`, which boxes and clones the rest of the
/// router into a `Next` on every request.
#[derive(Clone)]
struct RefuseLongUri<S>(S);

impl<S> tower::Service<Request> for RefuseLongUri<S>
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = UriChecked<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let len = request
            .uri()
            .path_and_query()
            .map_or(0, |pq| pq.as_str().len());
        if len > MAX_URI_BYTES {
            return UriChecked::Refused(Some(
                ApiError::new(
                    StatusCode::URI_TOO_LONG,
                    ErrorCode::InvalidRequest,
                    format!("the request target is {len} bytes long; the limit is {MAX_URI_BYTES}"),
                )
                .into_response(),
            ));
        }
        UriChecked::Routed(self.0.call(request))
    }
}

/// The answer of [`RefuseLongUri`]: the 414, or the router's.
enum UriChecked<F> {
    /// The 414, until polled.
    Refused(Option<Response>),
    /// The router's answer.
    Routed(F),
}

impl<F> std::future::Future for UriChecked<F>
where
    F: std::future::Future<Output = Result<Response, std::convert::Infallible>> + Unpin,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.get_mut() {
            UriChecked::Refused(answer) => {
                // Polled again after Ready only by a broken executor: answer the 414 again.
                std::task::Poll::Ready(Ok(answer
                    .take()
                    .unwrap_or_else(|| StatusCode::URI_TOO_LONG.into_response())))
            }
            UriChecked::Routed(f) => std::pin::Pin::new(f).poll(cx),
        }
    }
}

/// The path parameters, or `invalid_request` naming what is wrong with them (axum's own
/// rejection answers plain text).
fn path_params<T>(path: Result<Path<T>, PathRejection>) -> Result<T, IdError> {
    match path {
        Ok(Path(params)) => Ok(params),
        Err(PathRejection::FailedToDeserializePathParams(e)) => match e.kind() {
            ErrorKind::InvalidUtf8InPathParam { key } => Err(IdError::InvalidRequest(format!(
                "the {key} in the path is not UTF-8 once percent-decoded"
            ))),
            _ => Err(IdError::InvalidRequest(
                "the path's parameters could not be read".into(),
            )),
        },
        Err(_) => Err(IdError::InvalidRequest(
            "the path's parameters could not be read".into(),
        )),
    }
}

/// The query's `(name, value)` pairs, percent-decoded (`+` is a space), in order.
fn query_pairs(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Vec<(String, String)>, IdError> {
    query.map(|Query(pairs)| pairs).map_err(|_| {
        IdError::InvalidRequest("the query string is not a list of name=value pairs".into())
    })
}

/// `count` from the request's query string, as [`parse_count`] reads it. A query with nothing
/// to percent-decode (no `%`, no `+`: every request a client library sends) is split in place,
/// as `application/x-www-form-urlencoded` splits it (on `&`, empty parts skipped, a part
/// without `=` has an empty value), with no allocation; any other goes through axum's `Query`.
fn count_param(uri: &Uri, max: u64, max_key: &str) -> Result<u64, IdError> {
    let raw = uri.query().unwrap_or_default();
    if raw.bytes().any(|b| b == b'%' || b == b'+') {
        return parse_count(&query_pairs(Query::try_from_uri(uri))?, max, max_key);
    }
    let pairs = raw
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| part.split_once('=').unwrap_or((part, "")));
    parse_count_of(pairs, max, max_key)
}

/// Parses `count` (default 1, 1..=max) from query pairs that may hold nothing else, once;
/// `max_key` is the setting `max` comes from, named when a count is above it.
fn parse_count(pairs: &[(String, String)], max: u64, max_key: &str) -> Result<u64, IdError> {
    parse_count_of(
        pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        max,
        max_key,
    )
}

/// [`parse_count`] over borrowed pairs.
fn parse_count_of<'a>(
    pairs: impl Iterator<Item = (&'a str, &'a str)>,
    max: u64,
    max_key: &str,
) -> Result<u64, IdError> {
    let mut count = None;
    for (k, v) in pairs {
        match k {
            "count" if count.is_some() => {
                return Err(IdError::InvalidRequest(
                    "query parameter \"count\" is given more than once; give it once".into(),
                ))
            }
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
            "count {n} is above this server's maximum of {max} ({max_key})"
        )));
    }
    Ok(n)
}

/// Marks an answer of the id routes as never to be stored by a cache: a replayed id is a
/// duplicate.
fn no_store(mut answer: Response) -> Response {
    answer
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    answer
}

async fn get_ids(
    State(node): State<Arc<Node>>,
    Authorization(authorization): Authorization,
    uri: Uri,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let result = async {
        let caller = caller_of(&node, authorization.as_ref())?;
        let name = path_params(path)?;
        let count = count_param(&uri, node.config().max_count, "server.max_count")?;
        node.auth().authorize(caller, &name, Scope::Ids, count)?;
        let ns = node.namespace(&name).await?;
        let ids = ns.ids(count).await?;
        node.auth().served(caller, ids.len() as u64);
        Ok::<_, IdError>((ns, ids))
    }
    .await;
    no_store(match result {
        Ok((ns, ids)) => {
            // Built directly: `(headers, String).into_response()` would set `text/plain`
            // first and then replace it.
            let mut answer = Response::new(axum::body::Body::from(encode::ids_json(
                ns.name().as_str(),
                &ids,
            )));
            answer.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            answer
        }
        Err(e) => fail(&node, e),
    })
}

async fn post_block(
    State(node): State<Arc<Node>>,
    Authorization(authorization): Authorization,
    uri: Uri,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let result = async {
        let caller = caller_of(&node, authorization.as_ref())?;
        let name = path_params(path)?;
        let count = count_param(
            &uri,
            node.config().max_block_request,
            "server.max_block_request",
        )?;
        node.auth().authorize(caller, &name, Scope::Blocks, count)?;
        let ns = node.namespace(&name).await?;
        let count = crate::config::block_request(&ns, count, node.auth().max_block_32(caller));
        let block = ns.block(count).await?;
        node.auth().served(caller, block.len());
        Ok::<_, IdError>(block)
    }
    .await;
    no_store(match result {
        Ok(b) => axum::Json(BlockResponse {
            start: b.start(),
            end: b.end(),
            step: b.step(),
        })
        .into_response(),
        Err(e) => fail(&node, e),
    })
}

/// `POST /v1/admin/rebase/{namespace}?above=N`: every id from now on is above N.
async fn rebase(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    administer(&node, &headers, query, path, idmint_store::Advance::Rebase).await
}

/// `POST /v1/admin/retire/{namespace}`: the namespace hands out no id any more.
async fn retire(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    administer(&node, &headers, query, path, idmint_store::Advance::Retire).await
}

/// A rebase or retirement: the `admin` scope first, then the parameters (`above` for a
/// rebase, none for a retirement), then [`Node::advance`].
async fn administer(
    node: &Node,
    headers: &HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    path: Result<Path<String>, PathRejection>,
    action: idmint_store::Advance,
) -> Response {
    let result = async {
        let caller = caller(node, headers)?;
        let name = path_params(path)?;
        node.auth().authorize(caller, &name, Scope::Admin, 0)?;
        let pairs = query_pairs(query)?;
        let above = match action {
            idmint_store::Advance::Rebase => Some(above_param(&pairs)?),
            idmint_store::Advance::Retire => match pairs.first() {
                Some((k, _)) => {
                    return Err(IdError::InvalidRequest(format!(
                        "unknown query parameter {k:?}; retire takes none"
                    )))
                }
                None => None,
            },
        };
        node.advance(&name, action, above).await
    }
    .await;
    match result {
        Ok(a) => axum::Json(a).into_response(),
        Err(e) => fail(node, e),
    }
}

/// `above` (a decimal id, required, once) from query pairs that may hold nothing else.
fn above_param(pairs: &[(String, String)]) -> Result<u64, IdError> {
    let mut above = None;
    for (k, v) in pairs {
        match k.as_str() {
            "above" if above.is_some() => {
                return Err(IdError::InvalidRequest(
                    "query parameter \"above\" is given more than once; give it once".into(),
                ))
            }
            "above" => {
                above = Some(v.parse::<u64>().map_err(|_| {
                    IdError::InvalidRequest(format!(
                        "above must be a whole number from 0 to 18446744073709551615, got {v:?}"
                    ))
                })?)
            }
            other => {
                return Err(IdError::InvalidRequest(format!(
                    "unknown query parameter {other:?}; only above is accepted"
                )))
            }
        }
    }
    above.ok_or_else(|| {
        IdError::InvalidRequest(
            "above=N is required: the highest id that must never be handed out".into(),
        )
    })
}

async fn decode(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Response {
    let result = async {
        let caller = caller(&node, &headers)?;
        let (name, id) = path_params(path)?;
        node.auth().authorize(caller, &name, Scope::Read, 0)?;
        node.read_namespace(&name).await?.decode(&id)
    }
    .await;
    match result {
        Ok(d) => axum::Json(d).into_response(),
        Err(e) => fail_read(&node, e),
    }
}

/// Every namespace served; with `[auth]`, those the token may read.
async fn list_namespaces(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let caller = match caller(&node, &headers) {
        Ok(caller) => caller,
        Err(e) => return fail(&node, e),
    };
    let now = node.now();
    let mut namespaces = Vec::new();
    for ns in node.all() {
        if node.auth().may(caller, ns.name().as_str(), Scope::Read) {
            namespaces.push(node.describe(ns.info_live(now, &**node.authority()).await));
        }
    }
    axum::Json(NamespaceList { namespaces }).into_response()
}

async fn get_namespace(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let result = async {
        let caller = caller(&node, &headers)?;
        let name = path_params(path)?;
        node.auth().authorize(caller, &name, Scope::Read, 0)?;
        node.read_namespace(&name).await
    }
    .await;
    match result {
        Ok(ns) => {
            let info = ns.info_live(node.now(), &**node.authority()).await;
            axum::Json(node.describe(info)).into_response()
        }
        Err(e) => fail_read(&node, e),
    }
}

async fn healthz() -> Response {
    axum::Json(Health {
        status: "ok".into(),
    })
    .into_response()
}

/// 200 when the authority answers within 2 s. An authority of several members is probed (its
/// `list` tries every member, and connects a pending one whose back-off has passed), then is
/// ready while at least one member is up: the answer lists every member, the down ones with
/// their latest error; 503 only when none is up.
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
    let probe = tokio::time::timeout(Duration::from_secs(2), authority.list()).await;
    let members = node.members();
    if !members.is_empty() {
        // Whatever the probe said, the members' recorded health decides (a probe cut short by
        // the timeout has still recorded the members it reached).
        if !members.iter().any(|m| m.up) {
            let why: Vec<String> = members
                .iter()
                .map(|m| {
                    format!(
                        "member {} ({}): {}",
                        m.number,
                        m.kind,
                        m.last_error.as_deref().unwrap_or("down")
                    )
                })
                .collect();
            return unavailable(format!(
                "no member of the {} authority is up: {}",
                authority.kind(),
                why.join("; ")
            ));
        }
        return axum::Json(Ready {
            status: "ready".into(),
            authority: authority.kind().into(),
            members,
        })
        .into_response();
    }
    match probe {
        Ok(Ok(_)) => axum::Json(Ready {
            members: Vec::new(),
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

/// The metrics in the format the `Accept` header asks for ([`crate::metrics::Format::negotiate`]):
/// OpenMetrics only when asked for, otherwise the Prometheus text format 0.0.4.
/// With `[auth] metrics = "read"`, only for a token with `read` on `*`.
async fn metrics(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    if node.auth().metrics_need_token() {
        let allowed = caller(&node, &headers)
            .and_then(|caller| node.auth().authorize_node(caller, Scope::Read));
        if let Err(e) = allowed {
            return fail(&node, e);
        }
    }
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let format = crate::metrics::Format::negotiate(Some(&accept));
    node.refresh_gauges();
    node.metrics().refresh_members(
        &node
            .authority()
            .members()
            .map_or_else(Vec::new, |m| m.health()),
    );
    refresh_snowflake_gauges(&node).await;
    (
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::VARY, "Accept"),
        ],
        node.metrics().encode(format),
    )
        .into_response()
}

/// Sets each snowflake namespace's exhaustion gauges from its live state (a read of its
/// group's leases, bounded by [`crate::namespace::POOL_READ_TIMEOUT`]).
async fn refresh_snowflake_gauges(node: &Node) {
    let now = node.now();
    for ns in node.all() {
        if let crate::namespace::Namespace::Snowflake(_) = &*ns {
            if let idmint_api::NamespaceInfo::Snowflake { state, .. } =
                ns.info_live(now, &**node.authority()).await
            {
                node.metrics().refresh_snowflake(ns.name().as_str(), &state);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn count_parsing() {
        assert_eq!(parse_count(&[], 10, "server.max_count"), Ok(1));
        assert_eq!(
            parse_count(&pairs(&[("count", "7")]), 10, "server.max_count"),
            Ok(7)
        );
        for bad in ["0", "11", "-1", "abc", ""] {
            assert_eq!(
                parse_count(&pairs(&[("count", bad)]), 10, "server.max_count")
                    .unwrap_err()
                    .code(),
                ErrorCode::InvalidCount,
                "{bad}"
            );
        }
        assert_eq!(
            parse_count(&pairs(&[("cnt", "1")]), 10, "server.max_count")
                .unwrap_err()
                .code(),
            ErrorCode::InvalidRequest
        );
    }

    /// Regression: `count=2&count=3` was accepted and gave 3 ids.
    #[test]
    fn a_repeated_count_is_refused() {
        let e = parse_count(
            &pairs(&[("count", "2"), ("count", "3")]),
            10,
            "server.max_count",
        )
        .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest);
        assert!(e.to_string().contains("count"), "{e}");
    }
}
