//! The etcd authority's calls: the TLS settings checked against the endpoints, every call
//! bounded by the operation timeout (`call`: never resent; `call_idempotent`: a read or a
//! create-if-absent, sent again once after a fast failure), and the error messages, which
//! never show an endpoint's credentials (`redact`).
//!
//! Invariant: every failure of a call is [`StoreError::Unavailable`]: the caller cannot know
//! whether a write reached etcd.

use super::client::{EtcdClient, EtcdError};
use super::{EtcdAuthority, EtcdConfig, KIND};
use crate::StoreError;
use idmint_proto::tls::ClientTls;
use std::future::Future;

/// The TLS of `config` (`None`: plain), after checking it against the endpoints: the CA of
/// `ca_file` and only it, as every idmint client trusts a server ([`ClientTls`]).
pub(super) fn tls_options(config: &EtcdConfig) -> Result<Option<ClientTls>, String> {
    use crate::tls::TlsMode;
    if config.tls == TlsMode::Require {
        return Err(
            "etcd: tls = \"require\" is not supported (the gRPC client always checks the certificate): set tls = \"verify-full\" and ca_file"
                .into(),
        );
    }
    let pem = crate::tls::ca_pem(config.tls, config.ca_file.as_deref())
        .map_err(|e| format!("etcd TLS: {e}"))?;
    for endpoint in &config.endpoints {
        let (https, http) = (
            endpoint.starts_with("https://"),
            endpoint.starts_with("http://"),
        );
        if pem.is_some() && http {
            return Err(format!(
                "etcd: endpoint {} is http:// but tls is on: use https://",
                redact(endpoint)
            ));
        }
        if pem.is_none() && https {
            return Err(format!(
                "etcd: endpoint {} is https://: set tls = \"verify-full\" and ca_file",
                redact(endpoint)
            ));
        }
    }
    match pem {
        // Read again by ClientTls, whose errors name the file.
        Some(_) => ClientTls::from_files(config.ca_file.as_deref(), None)
            .map(Some)
            .map_err(|e| format!("etcd TLS: ca_file {e}")),
        None => Ok(None),
    }
}

impl EtcdAuthority {
    /// Runs one etcd call under the timeout; every failure is `Unavailable`. Never resends.
    pub(super) async fn call<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, EtcdError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.config.op_timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(unavailable(format!("{what}: {e}"))),
            Err(_) => Err(unavailable(format!(
                "{what}: no answer within {:?}",
                self.config.op_timeout
            ))),
        }
    }

    /// Like [`Self::call`] for a request that may be sent twice without harm (a read, or the
    /// create-if-absent of `ensure_namespace`): a failure that came back before the timeout,
    /// typically a request sent on a connection the server had just closed, is retried once,
    /// within what is left of the timeout, on the reconnected channel.
    pub(super) async fn call_idempotent<'a, T, F, Fut>(
        &'a self,
        what: &str,
        make: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(&'a EtcdClient) -> Fut,
        Fut: Future<Output = Result<T, EtcdError>>,
    {
        let deadline = tokio::time::Instant::now() + self.config.op_timeout;
        let timed_out = || {
            unavailable(format!(
                "{what}: no answer within {:?}",
                self.config.op_timeout
            ))
        };
        match tokio::time::timeout_at(deadline, make(&self.client)).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(_)) => {}
            Err(_) => return Err(timed_out()),
        }
        match tokio::time::timeout_at(deadline, make(&self.client)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(unavailable(format!("{what}: {e}"))),
            Err(_) => Err(timed_out()),
        }
    }
}

pub(super) fn unavailable(message: String) -> StoreError {
    StoreError::Unavailable {
        backend: KIND,
        message,
    }
}

/// `url` without any `user:password@` part.
pub(super) fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = match rest.split_once('@') {
        Some((_, host)) => host,
        None => rest,
    };
    if scheme.is_empty() {
        rest.to_owned()
    } else {
        format!("{scheme}://{rest}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redact("http://user:secret@10.0.0.1:2379"),
            "http://10.0.0.1:2379"
        );
        assert_eq!(redact("10.0.0.1:2379"), "10.0.0.1:2379");
        assert_eq!(redact("u:p@host:1"), "host:1");
    }
}
