//! The HTTP/JSON front-end (docs/api.md), on axum: parse the request, call one of the node's
//! operations (`crate::node::requests`), write the answer as an [`idmint_api`] type, map
//! errors to statuses ([`error`]). It authenticates, limits and computes nothing itself; gRPC
//! and RESP are siblings of this module over the same operations.
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
//!   watermark; the node's read operations (and a give-back) create nothing. `HEAD` on the id
//!   routes is 405 (axum would otherwise run the GET handler and hand out an id nobody sees).
//!   Their answers carry `Cache-Control: no-store`, so no cache replays an id.
//! - Query strings are percent-decoded; each parameter may appear once.
//! - Every route is added through `routes`, which records its path and allowed methods, and
//!   `GET /openapi.json` ([`openapi`]) documents exactly those (a test compares them). `GET /`
//!   ([`status_page`]) is the HTML view of the same reads.
//! - With `[auth]` ([`crate::auth`]), every route but `/healthz`, `/readyz`, `/openapi.json`
//!   (and `/metrics` unless `[auth] metrics = "read"`) hands its `Authorization: Bearer
//!   <token>` header to the node's operation, which refuses (401, 403, 429 with `Retry-After`)
//!   before it looks a namespace up. The listing shows only the namespaces the token may read;
//!   the status page needs `read` on `*`.
//!
//! Ids are written as decimal strings (JavaScript-safe) or canonical UUID/ULID text.

pub(crate) mod connection;
pub mod encode;
pub mod error;
pub mod login;
pub mod openapi;
mod query;
pub mod status_page;

pub(crate) use connection::serve_connection;
use query::{block_query, query_pairs};

use crate::error::IdError;
use crate::node::requests::Credentials;
use crate::node::Node;
use axum::extract::path::ErrorKind;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use error::ApiError;
use idmint_api::{BlockResponse, ErrorCode, GiveBackResponse, Health, NamespaceList, Ready};
use idmint_core::Block;
use std::sync::Arc;

/// The longest request target (path and query) the router answers; longer ones get a JSON 414.
/// Nothing legitimate comes near: names are at most 128 bytes, ids at most 40.
pub const MAX_URI_BYTES: usize = 8 * 1024;

const IDS: &str = "/v1/ids/{namespace}";
const BLOCKS: &str = "/v1/blocks/{namespace}";
const GIVE_BACK: &str = "/v1/blocks/{namespace}/give-back";
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
    .route(GIVE_BACK, "POST", post(give_back))
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
    .route(
        "/login",
        "GET, HEAD, POST",
        get(login::form).post(login_form),
    )
    .route("/logout", "POST", post(login::logout))
}

/// The connection a request came on, as the server accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transport {
    /// Whether it is TLS (a cookie set on it may be `Secure`).
    pub tls: bool,
}

/// `POST /login` ([`login::login`]); a body that is not the form is a 400.
async fn login_form(
    state: State<Arc<Node>>,
    transport: Option<axum::Extension<Transport>>,
    form: Result<axum::Form<login::LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    match form {
        Ok(form) => login::login(state, transport, form).await,
        Err(e) => fail(IdError::InvalidRequest(format!(
            "POST /login takes a form (application/x-www-form-urlencoded) with a token: {e}"
        ))),
    }
}

/// The request's `Authorization` header, alone: the id routes read nothing else from the
/// headers, and extracting the whole `HeaderMap` would clone every header on every request.
struct Authorization(Option<HeaderValue>);

impl Authorization {
    /// What the node's operations take.
    fn credentials(&self) -> Credentials<'_> {
        Credentials::Header(self.0.as_ref().map(HeaderValue::as_bytes))
    }
}

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

/// The answer of an error: its status and JSON body. The node's operations counted it; an
/// error found here, while parsing, is counted with [`parse_error`].
fn fail(e: IdError) -> Response {
    ApiError::from(e).into_response()
}

/// An error found while parsing the request, counted and answered.
fn parse_error(node: &Node, e: IdError) -> Response {
    node.count_error(&e);
    fail(e)
}

/// `GET /` and `/ui`: the status page, which shows every namespace: `read` on `*`, from the
/// `Authorization` header or the cookie of `/login`. A browser refused is sent to `/login`;
/// any other client gets the JSON error.
async fn status_page(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let credentials = login::credentials(&headers);
    match node.admit_node_read(Credentials::Header(credentials.as_deref())) {
        Ok(()) => status_page::serve(State(node)).await,
        Err(IdError::Unauthorized(_) | IdError::Forbidden(_)) if login::from_browser(&headers) => {
            login::to_form()
        }
        Err(e) => fail(e),
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

/// Marks an answer of the id routes as never to be stored by a cache: a replayed id is a
/// duplicate.
fn no_store(mut answer: Response) -> Response {
    answer
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    answer
}

/// `GET /v1/ids/{namespace}?count=N[&shard=S|&key=K]`.
async fn get_ids(
    State(node): State<Arc<Node>>,
    who: Authorization,
    uri: Uri,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let parsed = path_params(path).and_then(|name| Ok((name, query::ids_query(&uri)?)));
    let (name, asked) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return no_store(parse_error(&node, e)),
    };
    let taken = node
        .take_ids(who.credentials(), &name, asked.count, asked.route)
        .await;
    no_store(match taken {
        Ok(taken) => {
            // Built directly: `(headers, String).into_response()` would set `text/plain`
            // first and then replace it.
            let mut answer = Response::new(axum::body::Body::from(encode::ids_json(
                taken.namespace.name().as_str(),
                &taken.ids,
            )));
            answer.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            answer
        }
        Err(e) => fail(e),
    })
}

/// `POST /v1/blocks/{namespace}?count=N&extends=L`: a block leased to a lower tier, joined to
/// its previous lease `L` where the block follows it (`lease_start` says from where a tail may
/// come back).
async fn post_block(
    State(node): State<Arc<Node>>,
    who: Authorization,
    uri: Uri,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let (name, (count, extends)) =
        match path_params(path).and_then(|name| Ok((name, block_query(&uri)?))) {
            Ok(parsed) => parsed,
            Err(e) => return no_store(parse_error(&node, e)),
        };
    no_store(
        match node
            .take_block(who.credentials(), &name, count, 0, extends.unwrap_or(0))
            .await
        {
            Ok(lease) => axum::Json(BlockResponse {
                start: lease.block.start(),
                end: lease.block.end(),
                step: lease.block.step(),
                lease: lease.token.unwrap_or(0),
                lease_start: lease.from,
            })
            .into_response(),
            Err(e) => fail(e),
        },
    )
}

/// `POST /v1/blocks/{namespace}/give-back?lease=L&start=S&end=E&step=K`: the unused tail of a
/// leased block.
async fn give_back(
    State(node): State<Arc<Node>>,
    who: Authorization,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let parsed = path_params(path).and_then(|name| {
        let pairs = query_pairs(query)?;
        let numbers = numbers_param(&pairs, &["lease", "start", "end", "step"])?;
        let [lease, start, end, step] = [numbers[0], numbers[1], numbers[2], numbers[3]];
        let tail = Block::new(start, end, step).ok_or_else(|| {
            IdError::InvalidRequest(format!(
                "[{start}, {end}) step {step} is not a block: start must be below end and step \
                 at least 1"
            ))
        })?;
        Ok((name, lease, tail))
    });
    let (name, lease, tail) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return parse_error(&node, e),
    };
    match node.give_back(who.credentials(), &name, lease, tail).await {
        Ok(g) => axum::Json(GiveBackResponse {
            given_back: g.given_back,
            ids: g.ids,
            reason: g.reason,
        })
        .into_response(),
        Err(e) => fail(e),
    }
}

/// The decimal numbers `names` from query pairs that hold exactly those, each once.
fn numbers_param(pairs: &[(String, String)], names: &[&str]) -> Result<Vec<u64>, IdError> {
    let mut values: Vec<Option<u64>> = vec![None; names.len()];
    for (k, v) in pairs {
        let Some(i) = names.iter().position(|n| n == k) else {
            return Err(IdError::InvalidRequest(format!(
                "unknown query parameter {k:?}; expected {}",
                names.join(", ")
            )));
        };
        if values[i].is_some() {
            return Err(IdError::InvalidRequest(format!(
                "query parameter {k:?} is given more than once; give it once"
            )));
        }
        values[i] = Some(v.parse::<u64>().map_err(|_| {
            IdError::InvalidRequest(format!(
                "{k} must be a whole number from 0 to 18446744073709551615, got {v:?}"
            ))
        })?);
    }
    names
        .iter()
        .zip(values)
        .map(|(n, v)| v.ok_or_else(|| IdError::InvalidRequest(format!("{n}=N is required"))))
        .collect()
}

/// `POST /v1/admin/rebase/{namespace}?above=N`: every id from now on is above N.
async fn rebase(
    State(node): State<Arc<Node>>,
    who: Authorization,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let parsed = path_params(path).and_then(|name| {
        let pairs = query_pairs(query)?;
        let above = numbers_param(&pairs, &["above"]).map_err(|e| match e {
            IdError::InvalidRequest(m) if m.starts_with("above=N") => IdError::InvalidRequest(
                "above=N is required: the highest id that must never be handed out".into(),
            ),
            other => other,
        })?;
        Ok((name, above[0]))
    });
    let (name, above) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return parse_error(&node, e),
    };
    let moved = node
        .move_watermark(
            who.credentials(),
            &name,
            idmint_store::Advance::Rebase,
            Some(above),
        )
        .await;
    match moved {
        Ok(a) => axum::Json(a).into_response(),
        Err(e) => fail(e),
    }
}

/// `POST /v1/admin/retire/{namespace}`: the namespace hands out no id any more.
async fn retire(
    State(node): State<Arc<Node>>,
    who: Authorization,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let parsed = path_params(path).and_then(|name| {
        if let Some((k, _)) = query_pairs(query)?.first() {
            return Err(IdError::InvalidRequest(format!(
                "unknown query parameter {k:?}; retire takes none"
            )));
        }
        Ok(name)
    });
    let name = match parsed {
        Ok(name) => name,
        Err(e) => return parse_error(&node, e),
    };
    let moved = node
        .move_watermark(
            who.credentials(),
            &name,
            idmint_store::Advance::Retire,
            None,
        )
        .await;
    match moved {
        Ok(a) => axum::Json(a).into_response(),
        Err(e) => fail(e),
    }
}

/// `GET /v1/decode/{namespace}/{id}`.
async fn decode(
    State(node): State<Arc<Node>>,
    who: Authorization,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Response {
    let (name, id) = match path_params(path) {
        Ok(parsed) => parsed,
        Err(e) => return parse_error(&node, e),
    };
    match node.decode(who.credentials(), &name, &id).await {
        Ok(d) => axum::Json(d).into_response(),
        Err(e) => fail(e),
    }
}

/// `GET /v1/namespaces`: every namespace served; with `[auth]`, those the token may read.
async fn list_namespaces(State(node): State<Arc<Node>>, who: Authorization) -> Response {
    match node.namespace_list(who.credentials()).await {
        Ok(namespaces) => axum::Json(NamespaceList { namespaces }).into_response(),
        Err(e) => fail(e),
    }
}

/// `GET /v1/namespaces/{namespace}`.
async fn get_namespace(
    State(node): State<Arc<Node>>,
    who: Authorization,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let name = match path_params(path) {
        Ok(name) => name,
        Err(e) => return parse_error(&node, e),
    };
    match node.namespace_info(who.credentials(), &name).await {
        Ok(info) => axum::Json(info).into_response(),
        Err(e) => fail(e),
    }
}

async fn healthz() -> Response {
    axum::Json(Health {
        status: "ok".into(),
    })
    .into_response()
}

/// 200 while every declared namespace can serve ([`Node::readiness`]): `degraded` while the
/// authority does not answer and the buffers bridge it, with the authority's state (and every
/// member of a multi authority) in the body; 503 `authority_unavailable` naming what cannot
/// serve, or `shutting_down`.
async fn readyz(State(node): State<Arc<Node>>) -> Response {
    let readiness = match node.readiness().await {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if !readiness.is_ready() {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::AuthorityUnavailable,
            readiness.why_not(),
        )
        .into_response();
    }
    let status = if readiness.is_degraded() {
        "degraded"
    } else {
        "ready"
    };
    axum::Json(Ready {
        status: status.into(),
        authority: node.authority().kind().into(),
        authority_up: readiness.authority_up,
        authority_error: readiness.authority_error,
        members: readiness.members,
    })
    .into_response()
}

/// The metrics in the format the `Accept` header asks for ([`crate::metrics::Format::negotiate`]):
/// OpenMetrics only when asked for, otherwise the Prometheus text format 0.0.4.
/// With `[auth] metrics = "read"`, only for a token with `read` on `*`.
async fn metrics(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    if node.auth().metrics_need_token() {
        let who = Credentials::Header(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()));
        if let Err(e) = node.admit_node_read(who) {
            return fail(e);
        }
    }
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let format = crate::metrics::Format::negotiate(Some(&accept));
    (
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::VARY, "Accept"),
        ],
        node.scrape(format).await,
    )
        .into_response()
}
