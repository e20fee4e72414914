//! The nodes a client talks to: [`idmint_proto::nodes::Nodes`], the one fallback policy across
//! several nodes that the upstream authority uses too (a call goes to the node that answered
//! last; a failure another node may not have moves on to the next, each at most once per call,
//! so a `Block` whose answer was lost is never sent again to the node that may have granted
//! it: docs/client.md, "Several nodes"), and its errors as [`ClientError`]s.

use crate::error::{from_status, ClientError};
use idmint_proto::nodes::{BearerToken, NodesError};
pub(crate) use idmint_proto::nodes::{CallError, Nodes};
use idmint_proto::tls::ClientTls;
use std::time::Duration;

/// The nodes at `urls`, labelled `node #1`, `node #2`… in messages (a url may hold a password), every call
/// carrying `token` if given, `https://` urls over TLS with `tls` (else the public roots),
/// connected lazily. Must run inside a tokio runtime.
pub(crate) fn connect(
    urls: &[String],
    timeout: Duration,
    token: Option<&BearerToken>,
    tls: Option<&ClientTls>,
) -> Result<Nodes, ClientError> {
    let labelled = urls
        .iter()
        .enumerate()
        .map(|(i, url)| (format!("node #{}", i + 1), url.clone()))
        .collect();
    Nodes::new(labelled, timeout, token, tls).map_err(|e| ClientError::InvalidConfig {
        message: match e {
            NodesError::Empty => "at least one node url is needed".into(),
            NodesError::InvalidUrl(label) => {
                format!("the url of {label} is not a valid http:// or https:// url")
            }
            NodesError::InvalidToken => "the token is empty or not printable ASCII".into(),
            NodesError::Tls(label, why) => format!("TLS for {label} refused: {why}"),
        },
    })
}

/// A failed call's error, as a client error about `namespace`.
pub(crate) trait IntoClientError {
    /// The client error.
    fn into_client_error(self, namespace: &str) -> ClientError;
}

impl IntoClientError for CallError {
    fn into_client_error(self, namespace: &str) -> ClientError {
        match self {
            CallError::Unavailable { message, code } => ClientError::Unavailable { code, message },
            CallError::Status(node, status) => from_status(namespace, node, &status),
        }
    }
}
