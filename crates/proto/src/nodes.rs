//! Several idmint nodes behind one caller, and the one fallback policy across them (cargo
//! feature `nodes`): the upstream authority's upper tier (`idmint_store::upstream`) and the
//! client library's nodes (`idmint_client`) both call through [`Nodes`].
//!
//! A call goes to the node that answered last; on a failure another node may not have
//! (`UNAVAILABLE`, `DEADLINE_EXCEEDED`, `CANCELLED`, `ABORTED`, `INTERNAL`, `UNKNOWN`, a
//! connection error, or no answer within the timeout) the next node is tried, in order, each
//! **at most once per call**. So a `Block` whose answer was lost is never sent again to the
//! node that may have granted it (docs/design.md invariant 1: that block is burned, never
//! served); the next node grants a block of its own. Any other status is the node's answer and
//! ends the call.
//!
//! With a [`BearerToken`], every call carries `authorization: Bearer <token>` (a node with
//! `[auth]` wants one: `blocks` scope for `Block`/`GiveBack`, `read` for the namespace reads,
//! `ids` for `Next`). The token never appears in a message or a `Debug` output.
//!
//! An `https://` url is dialled over TLS with the caller's [`ClientTls`] (its CA, or the public
//! roots when none is given, and its client certificate for nodes that require one); an
//! `http://` url stays plain, so one list may mix both. A failed handshake is a connection
//! error: the next node is tried, and the message says why (an unknown issuer, a certificate
//! required).
//!
//! Channels connect lazily: building [`Nodes`] contacts nothing. Every call is bounded by the
//! timeout; nothing is held across `.await` but the call's own state. Each node's latest call
//! is remembered ([`Nodes::health`]: answered, or why not) under a `std::sync::Mutex` held for
//! one store, for an operator's view.

use crate::tls::ClientTls;
use crate::v1::idmint_client::IdmintClient;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// The client a call's operation gets: the generated client on the node's channel, with the
/// bearer token (if any) added to every request.
pub type NodeClient = IdmintClient<InterceptedService<Channel, Bearer>>;

/// A bearer token for the nodes' `[auth]`. Its `Debug` output hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl BearerToken {
    /// The token `token` (as `idmint token new` printed it; surrounding whitespace removed).
    pub fn new(token: impl Into<String>) -> BearerToken {
        BearerToken(token.into().trim().to_string())
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

/// Adds `authorization: Bearer <token>` to every request (nothing without a token).
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer(<redacted>)"
        } else {
            "Bearer(none)"
        })
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// The nodes of one caller, each with a label for messages (no secret: a redacted url, or
/// `node #i`).
#[derive(Debug)]
pub struct Nodes {
    nodes: Vec<(String, Channel)>,
    bearer: Bearer,
    /// The index of the node that answered last: calls start there.
    current: AtomicUsize,
    timeout: Duration,
    /// Per node, what its latest call found.
    last_calls: Mutex<Vec<LastCall>>,
}

/// What the latest call to one node found ([`Nodes::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LastCall {
    /// No call went to it yet.
    NotYet,
    /// It answered: with what was asked, or a status of its own (one that does not move on).
    Answered,
    /// It did not answer, or answered with a failure another node may not have: why.
    Failed(String),
}

/// One node as its caller sees it ([`Nodes::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHealth {
    /// Its label (a url without secrets).
    pub label: String,
    /// Whether calls start at it (it answered last, or no other did yet).
    pub current: bool,
    /// What its latest call found.
    pub last_call: LastCall,
}

/// The metadata key of a node's stable error code (docs/grpc.md, "Status codes"): a trailer,
/// or a header of a trailers-only answer.
pub const ERROR_CODE_KEY: &str = "idmint-error-code";

/// The idmint code of `status` (its [`ERROR_CODE_KEY`] metadata), if it has one.
pub fn error_code(status: &Status) -> Option<String> {
    status
        .metadata()
        .get(ERROR_CODE_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// How a call to the nodes failed.
#[derive(Debug)]
pub enum CallError {
    /// No node could serve the call.
    Unavailable {
        /// Every failure, described, in the order tried.
        message: String,
        /// The idmint code of the last node that answered with one (`authority_unavailable`,
        /// `shutting_down`); `None` when none did (connections refused, no answer in time).
        code: Option<String>,
    },
    /// Node `.0` answered with this status (not one that moves on to the next node).
    Status(usize, Status),
}

/// Why [`Nodes::new`] refused its urls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodesError {
    /// No url was given.
    Empty,
    /// The url of this label is not a valid `http://` or `https://` url.
    InvalidUrl(String),
    /// The token is empty or holds characters a header cannot carry.
    InvalidToken,
    /// tonic refused the TLS settings for the url of this label (`.0`): why (`.1`).
    Tls(String, String),
}

impl Nodes {
    /// Channels to `urls` (`(label, url)`), each call and connection bounded by `timeout`,
    /// every request carrying `token` if given, `https://` urls over TLS with `tls` (else
    /// [`ClientTls::public_roots`]), connected lazily. Must run inside a tokio runtime (each
    /// channel spawns its worker).
    pub fn new(
        urls: Vec<(String, String)>,
        timeout: Duration,
        token: Option<&BearerToken>,
        tls: Option<&ClientTls>,
    ) -> Result<Nodes, NodesError> {
        if urls.is_empty() {
            return Err(NodesError::Empty);
        }
        let bearer = match token {
            None => Bearer(None),
            Some(BearerToken(t)) if t.is_empty() => return Err(NodesError::InvalidToken),
            Some(BearerToken(t)) => Bearer(Some(
                MetadataValue::try_from(format!("Bearer {t}"))
                    .map_err(|_| NodesError::InvalidToken)?,
            )),
        };
        let mut public = None;
        let mut nodes = Vec::with_capacity(urls.len());
        for (label, url) in urls {
            let endpoint =
                Endpoint::from_shared(url).map_err(|_| NodesError::InvalidUrl(label.clone()))?;
            let endpoint = match endpoint.uri().scheme_str() {
                Some("http") => endpoint,
                Some("https") => {
                    let tls = match tls {
                        Some(tls) => tls,
                        None => public.get_or_insert_with(ClientTls::public_roots),
                    };
                    let (config, verifier) = tls.tonic_config(timeout);
                    endpoint
                        .tls_config_with_verifier(config, verifier)
                        .map_err(|e| {
                            let why = describe(e.to_string(), std::error::Error::source(&e));
                            NodesError::Tls(label.clone(), why)
                        })?
                }
                _ => return Err(NodesError::InvalidUrl(label)),
            };
            let channel = endpoint
                .connect_timeout(timeout)
                .timeout(timeout)
                .connect_lazy();
            nodes.push((label, channel));
        }
        let last_calls = Mutex::new(vec![LastCall::NotYet; nodes.len()]);
        Ok(Nodes {
            nodes,
            bearer,
            current: AtomicUsize::new(0),
            timeout,
            last_calls,
        })
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: [`Nodes::new`] refuses an empty list.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The label of node `index`.
    pub fn label(&self, index: usize) -> &str {
        self.nodes
            .get(index)
            .map_or("", |(label, _)| label.as_str())
    }

    /// Makes the next calls start at the node after `index`: its answer was unusable (e.g. a
    /// block below what another node granted already).
    pub fn move_past(&self, index: usize) {
        self.current
            .store((index + 1) % self.nodes.len(), Ordering::Relaxed);
    }

    /// The timeout of every call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Each node, in order, with what its latest call found.
    pub fn health(&self) -> Vec<NodeHealth> {
        let current = self.current.load(Ordering::Relaxed) % self.nodes.len().max(1);
        let last_calls = self.last_calls.lock().unwrap_or_else(|p| p.into_inner());
        self.nodes
            .iter()
            .zip(last_calls.iter())
            .enumerate()
            .map(|(i, ((label, _), last_call))| NodeHealth {
                label: label.clone(),
                current: i == current,
                last_call: last_call.clone(),
            })
            .collect()
    }

    fn note(&self, index: usize, last_call: LastCall) {
        let mut last_calls = self.last_calls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = last_calls.get_mut(index) {
            *slot = last_call;
        }
    }

    /// Runs `op` on the nodes from the current one on, each at most once, moving on after a
    /// failure another node may not have; the index of the node that answered, and its answer.
    pub async fn call<T, F, Fut>(&self, op: F) -> Result<(usize, T), CallError>
    where
        F: Fn(NodeClient) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let n = self.nodes.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut failures = Vec::new();
        let mut last_code = None;
        for i in 0..n {
            let index = (first + i) % n;
            match self.call_one(index, &op).await {
                Ok(answer) => {
                    self.current.store(index, Ordering::Relaxed);
                    return Ok((index, answer));
                }
                Err(CallError::Unavailable { message, code }) => {
                    failures.push(message);
                    last_code = code.or(last_code);
                }
                Err(answer) => return Err(answer),
            }
        }
        Err(CallError::Unavailable {
            message: failures.join("; "),
            code: last_code,
        })
    }

    /// Runs `op` on node `first` (a shard's holder: the caller knows it serves the call
    /// without a forward), then, if it fails in a way another node may not, on the others as
    /// [`Nodes::call`] does: from the current one on, each at most once, `first` not again.
    /// Calls start at the node that answered only when it is not `first` (an answer of the
    /// chosen node leaves the usual order as it was). The index of the node that answered,
    /// and its answer.
    pub async fn call_from<T, F, Fut>(&self, first: usize, op: F) -> Result<(usize, T), CallError>
    where
        F: Fn(NodeClient) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let n = self.nodes.len();
        let current = self.current.load(Ordering::Relaxed) % n;
        let order = std::iter::once(first)
            .chain((0..n).map(|i| (current + i) % n).filter(|&i| i != first))
            .filter(|&i| i < n);
        let mut failures = Vec::new();
        let mut last_code = None;
        for index in order {
            match self.call_one(index, &op).await {
                Ok(answer) => {
                    if index != first {
                        self.current.store(index, Ordering::Relaxed);
                    }
                    return Ok((index, answer));
                }
                Err(CallError::Unavailable { message, code }) => {
                    failures.push(message);
                    last_code = code.or(last_code);
                }
                Err(answer) => return Err(answer),
            }
        }
        Err(CallError::Unavailable {
            message: failures.join("; "),
            code: last_code,
        })
    }

    /// Runs `op` on node `index` alone, under the timeout (a give-back goes to the node that
    /// leased the block, and to no other).
    pub async fn call_one<T, F, Fut>(&self, index: usize, op: &F) -> Result<T, CallError>
    where
        F: Fn(NodeClient) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let Some((label, channel)) = self.nodes.get(index) else {
            return Err(CallError::Unavailable {
                message: format!("no node #{index}"),
                code: None,
            });
        };
        let client = IdmintClient::with_interceptor(channel.clone(), self.bearer.clone());
        let outcome = match tokio::time::timeout(self.timeout, op(client)).await {
            Ok(Ok(answer)) => Ok(answer.into_inner()),
            Ok(Err(status)) if moves_on(&status) => Err(moved_on(label, &status)),
            Ok(Err(status)) => Err(CallError::Status(index, status)),
            Err(_) => Err(CallError::Unavailable {
                message: format!("{label}: no answer within {} ms", self.timeout.as_millis()),
                code: None,
            }),
        };
        self.note(
            index,
            match &outcome {
                Err(CallError::Unavailable { message, .. }) => LastCall::Failed(message.clone()),
                Ok(_) | Err(CallError::Status(..)) => LastCall::Answered,
            },
        );
        outcome
    }
}

/// The failure of node `label` answering `status`, one that moves on: described, its idmint code
/// kept.
fn moved_on(label: &str, status: &Status) -> CallError {
    CallError::Unavailable {
        message: format!(
            "{label}: {} ({})",
            describe(
                status.message().to_owned(),
                std::error::Error::source(status)
            ),
            code_name(status.code())
        ),
        code: error_code(status),
    }
}

/// `first` followed by the messages of `source` and its own sources (a transport error's say
/// why it failed: the connection refused, a certificate not trusted or required).
fn describe(first: String, source: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut text = first;
    let mut source = source;
    while let Some(e) = source {
        let next = e.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}

/// Whether a status means "this node cannot serve now": try the next one.
pub fn moves_on(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unknown
            | Code::Internal
            | Code::Aborted
    )
}

/// A gRPC code's name as the specification writes it (`UNAVAILABLE`), for messages.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_failures_another_node_may_not_have_move_on() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Internal,
            Code::Aborted,
        ] {
            assert!(moves_on(&Status::new(code, "x")), "{code:?}");
        }
        for code in [
            Code::NotFound,
            Code::InvalidArgument,
            Code::ResourceExhausted,
        ] {
            assert!(!moves_on(&Status::new(code, "x")), "{code:?}");
        }
        assert_eq!(code_name(Code::ResourceExhausted), "RESOURCE_EXHAUSTED");
    }

    #[tokio::test]
    async fn urls_are_checked_and_nothing_is_contacted() {
        assert_eq!(
            Nodes::new(Vec::new(), Duration::from_secs(1), None, None).unwrap_err(),
            NodesError::Empty
        );
        assert_eq!(
            Nodes::new(
                vec![("a".into(), "not a url".into())],
                Duration::from_secs(1),
                None,
                None
            )
            .unwrap_err(),
            NodesError::InvalidUrl("a".into())
        );
        assert_eq!(
            Nodes::new(
                vec![("a".into(), "ftp://127.0.0.1:1".into())],
                Duration::from_secs(1),
                None,
                None
            )
            .unwrap_err(),
            NodesError::InvalidUrl("a".into())
        );
        // Nothing listens there; building succeeds (lazily connected, plain and TLS mixed), a
        // call fails over both.
        let nodes = Nodes::new(
            vec![
                ("first".into(), "http://127.0.0.1:1".into()),
                ("second".into(), "https://127.0.0.1:1".into()),
            ],
            Duration::from_secs(2),
            Some(&BearerToken::new("idmint_test")),
            None,
        )
        .unwrap();
        assert_eq!(
            format!("{:?}", BearerToken::new("secret")),
            "BearerToken(<redacted>)"
        );
        let bad = BearerToken::new("line\nbreak");
        assert_eq!(
            Nodes::new(
                vec![("a".into(), "http://127.0.0.1:1".into())],
                Duration::from_secs(1),
                Some(&bad),
                None
            )
            .unwrap_err(),
            NodesError::InvalidToken
        );
        let health = nodes.health();
        assert_eq!(
            health
                .iter()
                .map(|h| (h.label.as_str(), h.current, h.last_call.clone()))
                .collect::<Vec<_>>(),
            [
                ("first", true, LastCall::NotYet),
                ("second", false, LastCall::NotYet)
            ]
        );
        let err = nodes
            .call(|mut c| async move { c.namespaces(crate::v1::NamespacesRequest {}).await })
            .await
            .unwrap_err();
        for h in nodes.health() {
            match h.last_call {
                LastCall::Failed(why) => assert!(why.starts_with(&h.label), "{why}"),
                other => panic!("{}: {other:?}", h.label),
            }
        }
        match err {
            CallError::Unavailable { message, code } => {
                assert!(
                    message.contains("first") && message.contains("second"),
                    "{message}"
                );
                assert_eq!(code, None, "no node answered with a code");
            }
            CallError::Status(..) => panic!("no node answered"),
        }
    }

    #[test]
    fn a_node_that_cannot_serve_keeps_its_idmint_code() {
        let mut status = Status::new(Code::Unavailable, "authority_unavailable: no ids");
        status
            .metadata_mut()
            .insert(ERROR_CODE_KEY, "authority_unavailable".parse().unwrap());
        match moved_on("node #1", &status) {
            CallError::Unavailable { message, code } => {
                assert_eq!(code.as_deref(), Some("authority_unavailable"));
                assert_eq!(
                    message,
                    "node #1: authority_unavailable: no ids (UNAVAILABLE)"
                );
            }
            CallError::Status(..) => panic!("UNAVAILABLE moves on"),
        }
        match moved_on("node #1", &Status::new(Code::Unavailable, "refused")) {
            CallError::Unavailable { code, .. } => assert_eq!(code, None),
            CallError::Status(..) => panic!("UNAVAILABLE moves on"),
        }
    }
}
