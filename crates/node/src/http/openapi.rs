//! `GET /openapi.json`: the OpenAPI 3.1 document of the HTTP API (docs/api.md), built with
//! utoipa from the wire types themselves ([`idmint_api`] derives `utoipa::ToSchema` beside its
//! serde attributes), so a field renamed or retyped in a type changes the document with it.
//!
//! Invariants:
//! - Every route of `super::routes` is documented with exactly the methods its `Allow` header
//!   names, and no other path or method is (a test compares the two).
//! - Every operation lists each status it answers, with the [`ErrorBody`] schema for each error
//!   status of docs/api.md's table that the operation can produce; the id routes document their
//!   `Cache-Control: no-store`.
//! - The one thing taken from the node is each `count`'s maximum (`server.max_count`,
//!   `server.max_block_request`), so a client reads the limits of the server it talks to.
//! - Authentication (`[auth]`, docs/api.md): the `bearer` security scheme is always described,
//!   and every operation but `/healthz`, `/readyz` and `/openapi.json` documents its 401
//!   (`WWW-Authenticate`) and 403 answers, the id routes their 429 (`Retry-After`). The
//!   operations *require* the scheme only in the document of a node with `[auth]` on
//!   ([`with_security`]), so a node with authentication off (the Schemathesis test's) does not
//!   claim a requirement it does not enforce.
//! - Serving the document reads nothing of the namespaces and changes nothing; it is the same
//!   for the life of the process, so caches may keep it a few minutes.
//!
//! The functions below only carry the `#[utoipa::path]` documentation of the handlers in
//! [`super`]; they are never called.

use crate::node::Node;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use idmint_api::{
    AdvanceResponse, BlockResponse, CacheSettings, Decoded, ErrorBody, ErrorCode, ErrorDetail,
    FieldOrder, GiveBackResponse, Health, IdsResponse, LayoutSettings, LeaseStatus, MemberState,
    NamespaceInfo, NamespaceList, Ready, SequenceHeadroom, SequenceSettings, SequenceState,
    ShardMap, ShardRangeHolder, SnowflakeSettings, SnowflakeState, WorkerLeaseState, WorkerPool,
};
use serde_json::Value;
use std::sync::Arc;
use utoipa::OpenApi;

/// The document's skeleton: every operation and schema, `count` maxima at their defaults.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "idmint",
        description = "Distributed unique ids over HTTP/JSON: sequences from leased blocks, \
                       snowflakes, UUIDv7 and ULID. Reference: docs/api.md."
    ),
    paths(
        get_ids,
        post_block,
        give_back,
        rebase,
        retire,
        decode,
        list_namespaces,
        get_namespace,
        healthz,
        readyz,
        metrics,
        openapi_json,
        status_page,
        status_page_ui,
        login_form,
        login,
        logout
    ),
    components(schemas(
        crate::http::login::LoginForm,
        IdsResponse,
        BlockResponse,
        GiveBackResponse,
        AdvanceResponse,
        Decoded,
        NamespaceList,
        NamespaceInfo,
        SequenceSettings,
        CacheSettings,
        SequenceState,
        SnowflakeSettings,
        LayoutSettings,
        FieldOrder,
        SnowflakeState,
        WorkerPool,
        ShardMap,
        ShardRangeHolder,
        SequenceHeadroom,
        WorkerLeaseState,
        LeaseStatus,
        MemberState,
        Health,
        Ready,
        ErrorBody,
        ErrorDetail,
        ErrorCode
    )),
    tags(
        (name = "ids", description = "Hand out ids: the only routes that create namespaces or reserve ids"),
        (name = "namespaces", description = "Read-only: settings, live state, decoding"),
        (name = "admin", description = "Forward-only administration (scope `admin`): move a sequence namespace's watermark up, recorded in the authority's audit ledger"),
        (name = "operations", description = "Health, readiness, metrics and this document")
    )
)]
pub struct ApiDoc;

/// The document a node with these limits serves: [`ApiDoc`] with each `count` parameter's
/// maximum set to the node's.
pub fn document(max_count: u64, max_block_request: u64) -> Value {
    // Serialising a document of plain data cannot fail; an empty object would fail the tests.
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    for (path, method, max) in [
        (super::IDS, "get", max_count),
        (super::BLOCKS, "post", max_block_request),
    ] {
        let params = doc
            .pointer_mut(&format!("/paths/{}/{method}/parameters", escape(path)))
            .and_then(Value::as_array_mut);
        for p in params.into_iter().flatten() {
            if p["name"] == "count" {
                p["schema"]["maximum"] = max.into();
            }
        }
    }
    // Example values of the path parameters, one per kind: the names of docs/configuration.md's
    // example (which the Schemathesis test's node declares), ids of each form.
    for item in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for op in item
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            let params = op.get_mut("parameters").and_then(Value::as_array_mut);
            for p in params.into_iter().flatten() {
                let examples: &[&str] = match p["name"].as_str() {
                    Some("namespace") => &NAMESPACE_EXAMPLES,
                    Some("id") => &ID_EXAMPLES,
                    _ => continue,
                };
                p["schema"]["examples"] = examples.iter().copied().collect();
            }
        }
    }
    // Authentication's answers (see the module docs).
    doc["components"]["securitySchemes"]["bearer"] = serde_json::json!({
        "type": "http",
        "scheme": "bearer",
        "description": "A token of the node's `[[auth.tokens]]` (`idmint token new`), sent as \
                        `Authorization: Bearer <token>`. Only with `[auth]` in the node's \
                        configuration; without it nothing is checked."
    });
    let refusal = |description: &str, header: Option<(&str, &str)>| {
        let mut answer = serde_json::json!({
            "description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        });
        if let Some((name, text)) = header {
            answer["headers"][name] = serde_json::json!({
                "description": text,
                "schema": {"type": "string"}
            });
        }
        answer
    };
    for (path, item) in doc["paths"].as_object_mut().into_iter().flatten() {
        if OPEN_PATHS.contains(&path.as_str()) {
            continue;
        }
        let takes_ids = path == super::IDS || path == super::BLOCKS;
        for (_, op) in item.as_object_mut().into_iter().flatten() {
            let responses = &mut op["responses"];
            responses["401"] = refusal(
                "`unauthorized`: `[auth]` is on and the request carries no bearer token, or one \
                 the node does not know",
                Some(("WWW-Authenticate", "`Bearer realm=\"idmint\"`")),
            );
            responses["403"] = refusal(
                "`forbidden`: the token lacks the scope this operation needs on the namespace",
                None,
            );
            if takes_ids {
                responses["429"] = refusal(
                    "`rate_limited`: the token's rate quota on this namespace is used up for now",
                    Some((
                        "Retry-After",
                        "Whole seconds to wait before the request can pass",
                    )),
                );
            }
        }
    }
    // Every documented header is always sent: say so, so that a checker demands it.
    for item in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for op in item
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            let answers = op["responses"].as_object_mut().into_iter().flatten();
            for (_, answer) in answers {
                let headers = answer.get_mut("headers").and_then(Value::as_object_mut);
                for header in headers.into_iter().flat_map(|h| h.values_mut()) {
                    header["required"] = true.into();
                }
            }
        }
    }
    // `method(get, head)` documents both with one operation; operation ids must be unique.
    for item in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        if let Some(id) = item["get"]["operationId"].as_str().map(str::to_owned) {
            if let Some(head) = item.get_mut("head") {
                head["operationId"] = format!("{id}_head").into();
                head["description"] = "The GET answer's status and headers, without the body: \
                                       a read, like GET."
                    .into();
            }
        }
    }
    doc
}

/// The routes that never need a token.
const OPEN_PATHS: [&str; 5] = ["/healthz", "/readyz", "/openapi.json", "/login", "/logout"];

/// `doc` for a node with `[auth]` on: every operation but `OPEN_PATHS` (and `/metrics`
/// unless `metrics_need_token`) requires the `bearer` scheme, the others none.
pub fn with_security(mut doc: Value, metrics_need_token: bool) -> Value {
    for (path, item) in doc["paths"].as_object_mut().into_iter().flatten() {
        let open =
            OPEN_PATHS.contains(&path.as_str()) || (path == "/metrics" && !metrics_need_token);
        let security = if open {
            serde_json::json!([])
        } else {
            serde_json::json!([{"bearer": []}])
        };
        for (_, op) in item.as_object_mut().into_iter().flatten() {
            op["security"] = security.clone();
        }
    }
    doc
}

/// Namespace names of every kind, from docs/configuration.md's example.
const NAMESPACE_EXAMPLES: [&str; 6] = [
    "photos",
    "legacy_users",
    "tickets_odd",
    "tweets",
    "sessions",
    "uploads",
];

/// Ids of every form: sequence, snowflake, UUIDv7, ULID.
const ID_EXAMPLES: [&str; 4] = [
    "42",
    "1858339354775154688",
    "0190b6e5-8c4a-7d1e-9f00-0123456789ab",
    "01J2XQ3M7RZC8W5K0T9V4N6B2D",
];

/// `path` as one JSON pointer token (`/` is `~1`, `~` is `~0`).
fn escape(path: &str) -> String {
    path.replace('~', "~0").replace('/', "~1")
}

/// `GET /openapi.json`.
pub(crate) async fn serve(State(node): State<Arc<Node>>) -> Response {
    let config = node.config();
    let mut doc = document(config.max_count, config.max_block_request);
    if node.auth().enabled() {
        doc = with_security(doc, node.auth().metrics_need_token());
    }
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        doc.to_string(),
    )
        .into_response()
}

// --- The operations' documentation --------------------------------------------------------

/// Ids of a sequence namespace's answer, snowflakes, UUIDv7 or ULID text: strictly increasing.
#[utoipa::path(
    get,
    path = super::IDS,
    tag = "ids",
    operation_id = "get_ids",
    summary = "Hand out ids",
    description = "`count` ids of the namespace, strictly increasing, never repeated. With \
                   `auto_create` an unknown name becomes a sequence namespace on first use. \
                   Not idempotent: every call hands out new ids. `HEAD` is 405 (it would hand \
                   out ids nobody sees).",
    params(
        ("namespace" = String, Path, description = "1-128 of `[A-Za-z0-9_.:-]`, starting with a letter or digit",
            pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", example = "photos"),
        ("count" = Option<u64>, Query, description = "How many ids (default 1); the maximum is `server.max_count`",
            minimum = 1, maximum = 10000, example = 3),
        ("shard" = Option<u64>, Query, description = "The data's shard, for a snowflake namespace with `shards = \"owned\"` \
            (0 to its `logical_shards - 1`); never with `key`. Any other namespace answers 400 `invalid_request`.",
            minimum = 0),
        ("key" = Option<u64>, Query, description = "A key whose shard (`key % logical_shards`) the ids are of, for a snowflake \
            namespace with `shards = \"owned\"`; never with `shard`. Any other namespace answers 400 `invalid_request`.",
            minimum = 0),
    ),
    responses(
        (status = 200, description = "The ids", body = IdsResponse,
            headers(("Cache-Control" = String, description = "`no-store`: a replayed answer would repeat ids"))),
        (status = 400, description = "`invalid_namespace`, `invalid_count` or `invalid_request` (among others: `shard` or `key` \
            sent to a namespace that does not take one, or both at once)", body = ErrorBody),
        (status = 404, description = "`unknown_namespace`: no such namespace and `auto_create` is off", body = ErrorBody),
        (status = 409, description = "`namespace_exhausted`, `time_exhausted`, `settings_conflict` or `too_many_namespaces`", body = ErrorBody),
        (status = 410, description = "`namespace_retired`: an operator retired the namespace (`idmint admin retire`); it hands out no id any more", body = ErrorBody),
        (status = 414, description = "`invalid_request`: the request target is longer than 8 KiB", body = ErrorBody),
        (status = 500, description = "`internal_error` or `namespace_lost`: the namespace stopped serving", body = ErrorBody),
        (status = 503, description = "`authority_unavailable`, `no_leader` (a strict namespace without a leader) or `shutting_down`", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn get_ids() {}

/// A contiguous block of a sequence namespace.
#[utoipa::path(
    post,
    path = super::BLOCKS,
    tag = "ids",
    operation_id = "post_block",
    summary = "Reserve a block of a sequence namespace",
    description = "A block `[start, end)` with `step` for a lower tier; it may hold fewer than \
                   `count` ids (it is cut from the buffered block). Sequence namespaces only. \
                   Not idempotent: every call reserves new ids. No request body.",
    params(
        ("namespace" = String, Path, description = "1-128 of `[A-Za-z0-9_.:-]`, starting with a letter or digit",
            pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", example = "photos"),
        ("count" = Option<u64>, Query, description = "How many ids at most (default 1); the maximum is `server.max_block_request`",
            minimum = 1, maximum = 1000000, example = 1000),
        ("extends" = Option<String>, Query, description = "The `lease` of the caller's newest \
            block of the namespace from this node (decimal, up to 2^64 - 1): a block that \
            follows it with nothing handed out in between joins it, and `lease_start` says so",
            pattern = "^([0-9]{1,19}|0[0-9]{19}|1[0-7][0-9]{18}|18[0-3][0-9]{17}|184[0-3][0-9]{16}|1844[0-5][0-9]{15}|18446[0-6][0-9]{14}|184467[0-3][0-9]{13}|1844674[0-3][0-9]{12}|184467440[0-6][0-9]{10}|1844674407[0-2][0-9]{9}|18446744073[0-6][0-9]{8}|1844674407370[0-8][0-9]{6}|18446744073709[0-4][0-9]{5}|184467440737095[0-4][0-9]{4}|18446744073709550[0-9]{3}|18446744073709551[0-5][0-9]{2}|1844674407370955160[0-9]|1844674407370955161[0-4]|18446744073709551615)$", example = "4242"),
    ),
    responses(
        (status = 200, description = "The block, now the caller's alone", body = BlockResponse,
            headers(("Cache-Control" = String, description = "`no-store`: a replayed answer would repeat ids"))),
        (status = 400, description = "`invalid_namespace`, `invalid_count` or `invalid_request`", body = ErrorBody),
        (status = 404, description = "`unknown_namespace`: no such namespace and `auto_create` is off", body = ErrorBody),
        (status = 409, description = "`wrong_kind` (not a sequence namespace), `namespace_exhausted`, `settings_conflict` or `too_many_namespaces`", body = ErrorBody),
        (status = 410, description = "`namespace_retired`: an operator retired the namespace (`idmint admin retire`); it hands out no id any more", body = ErrorBody),
        (status = 414, description = "`invalid_request`: the request target is longer than 8 KiB", body = ErrorBody),
        (status = 500, description = "`internal_error` or `namespace_lost`: the namespace stopped serving", body = ErrorBody),
        (status = 503, description = "`authority_unavailable` or `shutting_down`", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn post_block() {}

/// Hand a leased block's unused tail back.
#[utoipa::path(
    post,
    path = super::GIVE_BACK,
    tag = "ids",
    operation_id = "give_back",
    summary = "Give the unused tail of a leased block back",
    description = "The tail `[start, end)` with `step` of the block `POST /v1/blocks` leased \
                   with `lease`: accepted only if it is a tail of the newest lease (ending at its \
                   `end`, starting at or after its `lease_start`), once, and nothing was \
                   handed out since (then its ids are handed out next); otherwise \
                   `given_back` is false, the reason says why, and the tail stays burned. Never \
                   creates a namespace. No request body.",
    params(
        ("namespace" = String, Path, description = "1-128 of `[A-Za-z0-9_.:-]`, starting with a letter or digit",
            pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", example = "photos"),
        ("lease" = String, Query, description = "The block's `lease` (decimal, up to 2^64 - 1)",
            pattern = "^([0-9]{1,19}|0[0-9]{19}|1[0-7][0-9]{18}|18[0-3][0-9]{17}|184[0-3][0-9]{16}|1844[0-5][0-9]{15}|18446[0-6][0-9]{14}|184467[0-3][0-9]{13}|1844674[0-3][0-9]{12}|184467440[0-6][0-9]{10}|1844674407[0-2][0-9]{9}|18446744073[0-6][0-9]{8}|1844674407370[0-8][0-9]{6}|18446744073709[0-4][0-9]{5}|184467440737095[0-4][0-9]{4}|18446744073709550[0-9]{3}|18446744073709551[0-5][0-9]{2}|1844674407370955160[0-9]|1844674407370955161[0-4]|18446744073709551615)$", example = "4242"),
        ("start" = String, Query, description = "The tail's first id (decimal, up to 2^64 - 1)",
            pattern = "^([0-9]{1,19}|0[0-9]{19}|1[0-7][0-9]{18}|18[0-3][0-9]{17}|184[0-3][0-9]{16}|1844[0-5][0-9]{15}|18446[0-6][0-9]{14}|184467[0-3][0-9]{13}|1844674[0-3][0-9]{12}|184467440[0-6][0-9]{10}|1844674407[0-2][0-9]{9}|18446744073[0-6][0-9]{8}|1844674407370[0-8][0-9]{6}|18446744073709[0-4][0-9]{5}|184467440737095[0-4][0-9]{4}|18446744073709550[0-9]{3}|18446744073709551[0-5][0-9]{2}|1844674407370955160[0-9]|1844674407370955161[0-4]|18446744073709551615)$", example = "500"),
        ("end" = String, Query, description = "One step past the tail's last id (decimal, up to \
            2^64 - 1: the end of a 64-bit namespace's last block is 2^63, above a signed 64-bit \
            integer)", pattern = "^([0-9]{1,19}|0[0-9]{19}|1[0-7][0-9]{18}|18[0-3][0-9]{17}|184[0-3][0-9]{16}|1844[0-5][0-9]{15}|18446[0-6][0-9]{14}|184467[0-3][0-9]{13}|1844674[0-3][0-9]{12}|184467440[0-6][0-9]{10}|1844674407[0-2][0-9]{9}|18446744073[0-6][0-9]{8}|1844674407370[0-8][0-9]{6}|18446744073709[0-4][0-9]{5}|184467440737095[0-4][0-9]{4}|18446744073709550[0-9]{3}|18446744073709551[0-5][0-9]{2}|1844674407370955160[0-9]|1844674407370955161[0-4]|18446744073709551615)$", example = "1001"),
        ("step" = String, Query, description = "The namespace's step (decimal, at least 1)",
            pattern = "^([0-9]{1,19}|0[0-9]{19}|1[0-7][0-9]{18}|18[0-3][0-9]{17}|184[0-3][0-9]{16}|1844[0-5][0-9]{15}|18446[0-6][0-9]{14}|184467[0-3][0-9]{13}|1844674[0-3][0-9]{12}|184467440[0-6][0-9]{10}|1844674407[0-2][0-9]{9}|18446744073[0-6][0-9]{8}|1844674407370[0-8][0-9]{6}|18446744073709[0-4][0-9]{5}|184467440737095[0-4][0-9]{4}|18446744073709550[0-9]{3}|18446744073709551[0-5][0-9]{2}|1844674407370955160[0-9]|1844674407370955161[0-4]|18446744073709551615)$", example = "1"),
    ),
    responses(
        (status = 200, description = "What became of the tail", body = GiveBackResponse),
        (status = 400, description = "`invalid_namespace` or `invalid_request`", body = ErrorBody),
        (status = 404, description = "`unknown_namespace`: no such namespace", body = ErrorBody),
        (status = 409, description = "`wrong_kind`: not a sequence namespace", body = ErrorBody),
        (status = 414, description = "`invalid_request`: the request target is longer than 8 KiB", body = ErrorBody),
        (status = 503, description = "`authority_unavailable` or `shutting_down`", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn give_back() {}

/// Rebase: every id from now on is above `above`.
#[utoipa::path(
    post,
    path = super::REBASE,
    tag = "admin",
    operation_id = "rebase",
    summary = "Move a sequence namespace's watermark above an id",
    description = "Forward-only: the watermark moves to `above + 1` if it is lower, else stays \
                   (repeatable). For importing a table: start above its highest id. Recorded in \
                   the authority's audit ledger. Ids this node buffered below the new watermark \
                   are burned. Sets the namespace up first if this node would on first use. \
                   No request body.",
    params(
        ("namespace" = String, Path, description = "1-128 of `[A-Za-z0-9_.:-]`, starting with a letter or digit",
            pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", example = "photos"),
        ("above" = String, Query, description = "The highest id that must never be handed out (decimal)",
            pattern = "^([0-9]{1,19}|0[0-9]{19}|1[0-7][0-9]{18}|18[0-3][0-9]{17}|184[0-3][0-9]{16}|1844[0-5][0-9]{15}|18446[0-6][0-9]{14}|184467[0-3][0-9]{13}|1844674[0-3][0-9]{12}|184467440[0-6][0-9]{10}|1844674407[0-2][0-9]{9}|18446744073[0-6][0-9]{8}|1844674407370[0-8][0-9]{6}|18446744073709[0-4][0-9]{5}|184467440737095[0-4][0-9]{4}|18446744073709550[0-9]{3}|18446744073709551[0-5][0-9]{2}|1844674407370955160[0-9]|1844674407370955161[0-4]|18446744073709551615)$", example = "1000000"),
    ),
    responses(
        (status = 200, description = "The watermark before and after", body = AdvanceResponse),
        (status = 400, description = "`invalid_namespace` or `invalid_request` (`above` missing, not a number, or leaving no id)", body = ErrorBody),
        (status = 404, description = "`unknown_namespace`: no such namespace and `auto_create` is off", body = ErrorBody),
        (status = 409, description = "`wrong_kind` (not a sequence namespace), `settings_conflict` (the authority cannot move it: an upstream tier) or `too_many_namespaces`", body = ErrorBody),
        (status = 414, description = "`invalid_request`: the request target is longer than 8 KiB", body = ErrorBody),
        (status = 500, description = "`internal_error` or `namespace_lost`", body = ErrorBody),
        (status = 503, description = "`authority_unavailable` or `shutting_down`", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn rebase() {}

/// Retire: the namespace hands out no id any more.
#[utoipa::path(
    post,
    path = super::RETIRE,
    tag = "admin",
    operation_id = "retire",
    summary = "Retire a sequence namespace for good",
    description = "Forward-only and final: the watermark moves past the namespace's largest id, \
                   and the namespace is marked retired in the same write, so every later request \
                   for its ids is `namespace_retired` (410; not `namespace_exhausted`, which \
                   stays the answer of a namespace whose ids ran out) and its state says \
                   `retired`; its record stays, so it is never created again. Recorded in the authority's audit ledger. \
                   Repeatable. No request body, no parameters.",
    params(
        ("namespace" = String, Path, description = "1-128 of `[A-Za-z0-9_.:-]`, starting with a letter or digit",
            pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", example = "photos"),
    ),
    responses(
        (status = 200, description = "The watermark before and after", body = AdvanceResponse),
        (status = 400, description = "`invalid_namespace` or `invalid_request`", body = ErrorBody),
        (status = 404, description = "`unknown_namespace`: no such namespace and `auto_create` is off", body = ErrorBody),
        (status = 409, description = "`wrong_kind` (not a sequence namespace), `settings_conflict` (the authority cannot move it: an upstream tier) or `too_many_namespaces`", body = ErrorBody),
        (status = 414, description = "`invalid_request`: the request target is longer than 8 KiB", body = ErrorBody),
        (status = 500, description = "`internal_error` or `namespace_lost`", body = ErrorBody),
        (status = 503, description = "`authority_unavailable` or `shutting_down`", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn retire() {}

/// What an id says about itself.
#[utoipa::path(
    method(get, head),
    path = super::DECODE,
    tag = "namespaces",
    operation_id = "decode",
    summary = "Decode an id",
    description = "The parts of an id of the namespace's kind. A read: it never creates the \
                   namespace.",
    params(
        ("namespace" = String, Path, description = "1-128 of `[A-Za-z0-9_.:-]`, starting with a letter or digit",
            pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", example = "tweets"),
        ("id" = String, Path, description = "An id of the namespace's kind: decimal digits \
            (sequence, snowflake), UUIDv7 text (36 characters, or 32 hex digits; any case) or ULID \
            text (26 characters of Crockford base32; any case)",
            pattern = "^([0-9]+|[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-7[0-9A-Fa-f]{3}-[89ABab][0-9A-Fa-f]{3}-[0-9A-Fa-f]{12}|[0-9A-Fa-f]{12}7[0-9A-Fa-f]{3}[89ABab][0-9A-Fa-f]{15}|[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25})$",
            example = "1858339354775154688"),
    ),
    responses(
        (status = 200, description = "The decoded id", body = Decoded),
        (status = 400, description = "`invalid_namespace`, `invalid_id` or `invalid_request`", body = ErrorBody),
        (status = 404, description = "`unknown_namespace`: nobody created it", body = ErrorBody),
        (status = 414, description = "`invalid_request`: the request target is longer than 8 KiB", body = ErrorBody),
        (status = 500, description = "`namespace_lost`: the store lost the namespace", body = ErrorBody),
        (status = 503, description = "`authority_unavailable`: the stored state could not be read", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn decode() {}

/// The namespaces this node serves.
#[utoipa::path(
    method(get, head),
    path = super::NAMESPACES,
    tag = "namespaces",
    operation_id = "list_namespaces",
    summary = "List the namespaces this node serves",
    responses(
        (status = 200, description = "Every namespace this node serves, sorted by name", body = NamespaceList),
    )
)]
#[allow(dead_code)]
fn list_namespaces() {}

/// One namespace.
#[utoipa::path(
    method(get, head),
    path = super::NAMESPACE,
    tag = "namespaces",
    operation_id = "get_namespace",
    summary = "One namespace's settings and live state",
    description = "Also answers for a sequence namespace the authority holds and this node has \
                   not loaded (from its stored state). A read: it never creates the namespace.",
    params(
        ("namespace" = String, Path, description = "1-128 of `[A-Za-z0-9_.:-]`, starting with a letter or digit",
            pattern = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", example = "photos"),
    ),
    responses(
        (status = 200, description = "Settings and state", body = NamespaceInfo),
        (status = 400, description = "`invalid_namespace` or `invalid_request`", body = ErrorBody),
        (status = 404, description = "`unknown_namespace`: nobody created it", body = ErrorBody),
        (status = 414, description = "`invalid_request`: the request target is longer than 8 KiB", body = ErrorBody),
        (status = 500, description = "`namespace_lost`: the store lost the namespace", body = ErrorBody),
        (status = 503, description = "`authority_unavailable`: the stored state could not be read", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn get_namespace() {}

/// Liveness.
#[utoipa::path(
    method(get, head),
    path = "/healthz",
    tag = "operations",
    operation_id = "healthz",
    summary = "Liveness: 200 while the process runs",
    responses((status = 200, description = "`{\"status\": \"ok\"}`", body = Health))
)]
#[allow(dead_code)]
fn healthz() {}

/// Readiness.
#[utoipa::path(
    method(get, head),
    path = "/readyz",
    tag = "operations",
    operation_id = "readyz",
    summary = "Readiness: every declared namespace can serve now",
    description = "Each declared namespace has ids buffered, a worker lease that is not lost, \
                   needs nothing, or the authority answers within 2 s; an authority outage the \
                   buffers bridge is `degraded`, not unready. A node that declares nothing is \
                   ready while the authority answers.",
    responses(
        (status = 200, description = "`ready`, or `degraded` while the authority (or a member) does not answer; with a `multi` authority, every member's state", body = Ready),
        (status = 503, description = "`authority_unavailable` (naming each declared namespace that cannot serve, and why) or `shutting_down`", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn readyz() {}

/// Metrics.
#[utoipa::path(
    method(get, head),
    path = "/metrics",
    tag = "operations",
    operation_id = "metrics",
    summary = "Metrics in the Prometheus text format 0.0.4, or OpenMetrics 1.0.0 when asked for",
    description = "OpenMetrics when `application/openmetrics-text` is accepted at least as \
                   strongly as the Prometheus text format; otherwise the Prometheus text format. \
                   The answer carries `Vary: Accept`.",
    responses(
        (status = 200, description = "The metrics", content(
            (String = "text/plain"),
            (String = "application/openmetrics-text"),
        ), headers(("Vary" = String, description = "`Accept`"))),
    )
)]
#[allow(dead_code)]
fn metrics() {}

/// This document.
#[utoipa::path(
    method(get, head),
    path = super::OPENAPI,
    tag = "operations",
    operation_id = "openapi",
    summary = "This OpenAPI document",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of this server", content_type = "application/json",
            body = Object, headers(("Cache-Control" = String, description = "`public, max-age=300`"))),
    )
)]
#[allow(dead_code)]
fn openapi_json() {}

/// The status page.
#[utoipa::path(
    method(get, head),
    path = "/",
    tag = "operations",
    operation_id = "status_page",
    summary = "Status page: HTML for a person (refreshes itself every 5 s)",
    description = "Version, uptime, the authority and its members' health, and every namespace \
                   served with its settings and live state. A read.",
    responses(
        (status = 200, description = "The page", content_type = "text/html", body = String,
            headers(("Cache-Control" = String, description = "`no-cache`"))),
        (status = 303, description = "With `[auth]`: a browser (it accepts `text/html`) without a token that reads every namespace, sent to `/login`",
            headers(("Location" = String, description = "`/login`"))),
        (status = 401, description = "`unauthorized` (not a browser)", body = ErrorBody),
        (status = 403, description = "`forbidden` (not a browser)", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn status_page() {}

/// The status page under its other name.
#[utoipa::path(
    method(get, head),
    path = "/ui",
    tag = "operations",
    operation_id = "status_page_ui",
    summary = "The status page (same as `/`)",
    responses(
        (status = 200, description = "The page", content_type = "text/html", body = String,
            headers(("Cache-Control" = String, description = "`no-cache`"))),
    )
)]
#[allow(dead_code)]
fn status_page_ui() {}

/// The sign-in form of the status page.
#[utoipa::path(
    method(get, head),
    path = "/login",
    tag = "operations",
    operation_id = "login_form",
    summary = "Sign-in form of the status page, for a browser when `[auth]` is on",
    description = "With `?refused`, it says the token given was refused.",
    responses(
        (status = 200, description = "The form", content_type = "text/html", body = String,
            headers(("Cache-Control" = String, description = "`no-store`"))),
    )
)]
#[allow(dead_code)]
fn login_form() {}

/// The form's token was submitted.
#[utoipa::path(
    post,
    path = "/login",
    tag = "operations",
    operation_id = "login",
    summary = "Keep a token that reads every namespace in a cookie, for the status page",
    description = "The cookie (`idmint_token`: HttpOnly, SameSite=Strict, Secure over TLS, \
                   8 hours) opens `GET /` and `/ui` only; every API route still wants the \
                   `Authorization` header.",
    request_body(content = crate::http::login::LoginForm,
        content_type = "application/x-www-form-urlencoded", description = "`token=...`"),
    responses(
        (status = 303, description = "Accepted: the cookie is set and the browser goes to `/`; \
            refused (the token cannot read every namespace): no cookie, and the browser goes back \
            to `/login?refused`, which says so",
            headers(("Location" = String, description = "`/` or `/login?refused`"),
                    ("Set-Cookie" = String, description = "`idmint_token=...`, when accepted"))),
        (status = 400, description = "`invalid_request`: the body is not the form", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn login() {}

/// Forget the cookie.
#[utoipa::path(
    post,
    path = "/logout",
    tag = "operations",
    operation_id = "logout",
    summary = "Drop the status page's cookie",
    responses(
        (status = 303, description = "The cookie is cleared, the browser goes to `/login`",
            headers(("Location" = String, description = "`/login`"))),
    )
)]
#[allow(dead_code)]
fn logout() {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::BTreeSet;

    const METHODS: [&str; 8] = [
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];

    /// Every route of the router is documented with exactly the methods its `Allow` names, and
    /// nothing else is: a route added without documentation fails here.
    #[test]
    fn documents_every_route_and_only_those() {
        let doc = document(10, 20);
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                METHODS
                    .iter()
                    .filter(|m| item.get(**m).is_some())
                    .map(move |m| (path.clone(), m.to_uppercase()))
            })
            .collect();
        let routed: BTreeSet<(String, String)> = super::super::routes()
            .allowed
            .iter()
            .flat_map(|(path, allow)| {
                allow
                    .split(',')
                    .map(|m| (path.to_string(), m.trim().to_string()))
            })
            .collect();
        assert_eq!(documented, routed);
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc = document(10, 20);
        let mut ids = BTreeSet::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                let id = op["operationId"].as_str().unwrap();
                assert!(ids.insert(id.to_owned()), "{id} twice");
            }
        }
    }

    #[test]
    fn count_maxima_are_the_nodes() {
        let doc = document(10, 20);
        let max = |path: &str, method: &str| {
            doc["paths"][path][method]["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == "count")
                .unwrap()["schema"]["maximum"]
                .clone()
        };
        assert_eq!(max(super::super::IDS, "get"), 10);
        assert_eq!(max(super::super::BLOCKS, "post"), 20);
    }

    #[test]
    fn every_error_answer_is_the_error_body() {
        let doc = document(10, 20);
        let mut errors = 0;
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                for (status, answer) in op["responses"].as_object().unwrap() {
                    if status.starts_with('2') || status.starts_with('3') {
                        continue;
                    }
                    errors += 1;
                    assert_eq!(
                        answer["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/ErrorBody",
                        "{status}: {answer}"
                    );
                }
            }
        }
        assert!(errors > 20, "{errors}");
    }

    #[test]
    fn authentication_is_documented_and_required_only_when_on() {
        let doc = document(10, 20);
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
        let ids = &doc["paths"][super::super::IDS]["get"];
        for status in ["401", "403", "429"] {
            assert!(ids["responses"].get(status).is_some(), "{status}");
        }
        assert!(ids["responses"]["429"]["headers"]["Retry-After"]["required"] == true);
        assert!(doc["paths"]["/healthz"]["get"]["responses"]
            .get("401")
            .is_none());
        assert!(ids.get("security").is_none());
        let on = with_security(doc, false);
        assert_eq!(
            on["paths"][super::super::IDS]["get"]["security"],
            serde_json::json!([{"bearer": []}])
        );
        assert_eq!(
            on["paths"]["/healthz"]["get"]["security"],
            serde_json::json!([])
        );
        assert_eq!(
            on["paths"]["/metrics"]["get"]["security"],
            serde_json::json!([])
        );
    }

    /// The decimal adapter's fields are strings in the schema, as on the wire.
    #[test]
    fn decimal_fields_are_strings() {
        let doc = document(10, 20);
        let block = &doc["components"]["schemas"]["BlockResponse"]["properties"];
        assert_eq!(block["start"]["type"], "string");
        assert_eq!(block["step"]["type"], "integer");
        let state = &doc["components"]["schemas"]["SequenceState"]["properties"];
        assert_eq!(state["watermark"]["type"], "string");
    }
}
