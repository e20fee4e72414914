//! etcd's v3 API on tonic's channel, as the authority uses it: the generated clients of
//! `idmint_proto::etcd` over one channel balanced across every endpoint, with TLS, the login
//! token and etcd's `hasleader` flag on every request, and the few calls the authority makes.
//!
//! Invariants:
//! - one channel for all endpoints (tonic's balancer, each endpoint connected lazily and
//!   reconnected after a failure): a member that does not answer leaves the calls to the others;
//! - `https://` endpoints are dialled with the [`ClientTls`] given (rustls with ring, its CA
//!   only), `http://` ones plain; an endpoint without a scheme gets `https://` when TLS is on,
//!   `http://` otherwise;
//! - every request carries the operation timeout as its gRPC deadline, and `hasleader: true`, so
//!   a member cut off from its leader refuses at once instead of waiting;
//! - with a login, every request but `Authenticate` carries the token. A request etcd refuses
//!   for its token (`UNAUTHENTICATED`: simple tokens expire, `--auth-token-ttl`) is sent again,
//!   once, after a new login: etcd checks the token before it proposes a write, so the refused
//!   request did nothing, and sending it again is not the resending of a write whose fate is
//!   unknown. Concurrent refusals log in once (the first one's new token serves the others);
//! - nothing is resent otherwise, and nothing here bounds a call's time: the caller does
//!   (`conn`).
//!
//! What it does not do: watches, client certificates, discovering members beyond the
//! endpoints given.

use idmint_proto::etcd::etcdserverpb::auth_client::AuthClient;
use idmint_proto::etcd::etcdserverpb::kv_client::KvClient;
use idmint_proto::etcd::etcdserverpb::lease_client::LeaseClient;
use idmint_proto::etcd::etcdserverpb::{
    AuthenticateRequest, LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest,
    LeaseRevokeRequest, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse, RangeRequest,
    RangeResponse, TxnRequest, TxnResponse,
};
use idmint_proto::tls::ClientTls;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use thiserror::Error;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::channel::Change;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// The metadata key etcd reads a login token from.
const TOKEN_KEY: &str = "token";
/// etcd's metadata flag: refuse at once when the member has no leader.
const REQUIRE_LEADER_KEY: &str = "hasleader";
/// HTTP/2 keep-alive interval. etcd refuses pings more often than every 5 s by default.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
const TCP_KEEP_ALIVE: Duration = Duration::from_secs(30);

/// How to reach the cluster.
pub(super) struct ClientOptions {
    /// Client URLs of the members (`http://`, `https://`, or `host:port`).
    pub(super) endpoints: Vec<String>,
    /// TLS for the `https://` endpoints; `None`: plain.
    pub(super) tls: Option<ClientTls>,
    /// User and password, when the cluster has authentication on.
    pub(super) login: Option<(String, String)>,
    /// The deadline of each request, and the bound on connecting.
    pub(super) timeout: Duration,
}

/// Why a call failed.
#[derive(Debug, Error)]
pub(super) enum EtcdError {
    /// An endpoint cannot be dialled as given (not a URL, or TLS tonic refused).
    #[error("endpoint {endpoint}: {why}")]
    Endpoint {
        /// The endpoint, without credentials.
        endpoint: String,
        /// Why.
        why: String,
    },
    /// etcd answered with this status, or the transport failed (tonic says so as a status).
    #[error("{}", describe(.0))]
    Status(Box<Status>),
    /// etcd refused the login, or gave a token that cannot be sent back.
    #[error("logging in as {user}: {why}")]
    Login {
        /// The user.
        user: String,
        /// Why.
        why: String,
    },
    /// A keep-alive stream ended without answering.
    #[error("etcd closed the lease keep-alive stream without an answer")]
    StreamEnded,
}

impl From<Status> for EtcdError {
    fn from(status: Status) -> Self {
        EtcdError::Status(Box::new(status))
    }
}

impl EtcdError {
    /// The status etcd answered with, if it answered.
    pub(super) fn status(&self) -> Option<&Status> {
        match self {
            EtcdError::Status(status) => Some(status),
            _ => None,
        }
    }
}

/// A status with its code and its causes (tonic's own messages are terse: the transport's
/// error, a refused certificate, is in the sources).
fn describe(status: &Status) -> String {
    let mut message = format!("{:?}: {}", status.code(), status.message());
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Adds the login token, `hasleader` and the deadline to every request it sees.
#[derive(Clone)]
pub(super) struct Session {
    token: Arc<RwLock<Option<AsciiMetadataValue>>>,
    timeout: Duration,
}

impl Session {
    fn token(&self) -> Option<AsciiMetadataValue> {
        self.token
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_token(&self, token: AsciiMetadataValue) {
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = Some(token);
    }
}

impl Interceptor for Session {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(token) = self.token() {
            request.metadata_mut().insert(TOKEN_KEY, token);
        }
        request
            .metadata_mut()
            .insert(REQUIRE_LEADER_KEY, AsciiMetadataValue::from_static("true"));
        request.set_timeout(self.timeout);
        Ok(request)
    }
}

type Kv = KvClient<InterceptedService<Channel, Session>>;
type Lease = LeaseClient<InterceptedService<Channel, Session>>;

/// A client of one etcd cluster. Cheap calls: each clones the channel handle.
pub(super) struct EtcdClient {
    channel: Channel,
    session: Session,
    login: Option<(String, String)>,
    /// Serializes new logins after a refused token.
    relogin: tokio::sync::Mutex<()>,
}

impl fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdClient")
            .field("user", &self.login.as_ref().map(|(user, _)| user))
            .finish_non_exhaustive()
    }
}

impl EtcdClient {
    /// The channel to `options.endpoints`, and a first login if a user is given. Contacts
    /// etcd only to log in (the channel connects on its first call). Must run inside a tokio
    /// runtime (the balancer spawns its worker).
    pub(super) async fn connect(options: ClientOptions) -> Result<EtcdClient, EtcdError> {
        let mut endpoints = Vec::with_capacity(options.endpoints.len());
        for url in &options.endpoints {
            endpoints.push(endpoint(url, options.tls.as_ref(), options.timeout)?);
        }
        let (channel, changes) = Channel::balance_channel(endpoints.len().max(1));
        for endpoint in endpoints {
            let label = super::conn::redact(&endpoint.uri().to_string());
            changes
                .try_send(Change::Insert(endpoint.uri().clone(), endpoint))
                .map_err(|_| EtcdError::Endpoint {
                    endpoint: label,
                    why: "the channel did not take it".to_owned(),
                })?;
        }
        let client = EtcdClient {
            channel,
            session: Session {
                token: Arc::new(RwLock::new(None)),
                timeout: options.timeout,
            },
            login: options.login,
            relogin: tokio::sync::Mutex::new(()),
        };
        client.log_in().await?;
        Ok(client)
    }

    fn kv(&self) -> Kv {
        KvClient::with_interceptor(self.channel.clone(), self.session.clone())
    }

    fn lease(&self) -> Lease {
        LeaseClient::with_interceptor(self.channel.clone(), self.session.clone())
    }

    /// Asks etcd for a token (nothing without a login). `Authenticate` goes without the old
    /// token: etcd refuses any request that carries an expired one.
    async fn log_in(&self) -> Result<(), EtcdError> {
        let Some((user, password)) = &self.login else {
            return Ok(());
        };
        let mut request = tonic::Request::new(AuthenticateRequest {
            name: user.clone(),
            password: password.clone(),
        });
        request.set_timeout(self.session.timeout);
        let refused = |why: String| EtcdError::Login {
            user: user.clone(),
            why,
        };
        let answer = AuthClient::new(self.channel.clone())
            .authenticate(request)
            .await
            .map_err(|status| refused(describe(&status)))?;
        let token = AsciiMetadataValue::try_from(answer.into_inner().token)
            .map_err(|_| refused("etcd gave a token that is not ASCII".to_owned()))?;
        self.session.set_token(token);
        Ok(())
    }

    /// Sends `request` with `send`; if etcd refused the token, logs in again (unless another
    /// call did since `request` was sent) and sends it once more.
    async fn with_login<Req, T, F, Fut>(&self, request: Req, send: F) -> Result<T, EtcdError>
    where
        Req: Clone,
        F: Fn(Req) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let sent_with = self.session.token();
        match send(request.clone()).await {
            Ok(answer) => Ok(answer.into_inner()),
            Err(status) if status.code() == Code::Unauthenticated && self.login.is_some() => {
                {
                    let _one_login = self.relogin.lock().await;
                    if self.session.token() == sent_with {
                        self.log_in().await?;
                    }
                }
                Ok(send(request).await?.into_inner())
            }
            Err(status) => Err(status.into()),
        }
    }

    /// `Range`: the keys `request` selects.
    pub(super) async fn range(&self, request: RangeRequest) -> Result<RangeResponse, EtcdError> {
        self.with_login(request, |request| {
            let mut kv = self.kv();
            async move { kv.range(request).await }
        })
        .await
    }

    /// `Txn`: compares, then one branch of operations, atomically.
    pub(super) async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, EtcdError> {
        self.with_login(request, |request| {
            let mut kv = self.kv();
            async move { kv.txn(request).await }
        })
        .await
    }

    /// `LeaseGrant` of `ttl_secs` seconds (etcd picks the id).
    pub(super) async fn lease_grant(&self, ttl_secs: i64) -> Result<LeaseGrantResponse, EtcdError> {
        let request = LeaseGrantRequest {
            ttl: ttl_secs,
            id: 0,
        };
        self.with_login(request, |request| {
            let mut lease = self.lease();
            async move { lease.lease_grant(request).await }
        })
        .await
    }

    /// `LeaseRevoke` of lease `id` (its keys are deleted with it).
    pub(super) async fn lease_revoke(&self, id: i64) -> Result<(), EtcdError> {
        self.with_login(LeaseRevokeRequest { id }, |request| {
            let mut lease = self.lease();
            async move { lease.lease_revoke(request).await }
        })
        .await
        .map(drop)
    }

    /// One `LeaseKeepAlive` for lease `id` on a stream of its own, closed after etcd's answer:
    /// `false` if etcd no longer has the lease.
    pub(super) async fn lease_keep_alive_once(&self, id: i64) -> Result<bool, EtcdError> {
        let answer = self
            .with_login(id, |id| {
                let mut lease = self.lease();
                async move {
                    let once = tokio_stream::once(LeaseKeepAliveRequest { id });
                    let mut answers = lease.lease_keep_alive(once).await?.into_inner();
                    Ok(tonic::Response::new(answers.message().await?))
                }
            })
            .await?;
        match answer {
            // etcd answers a TTL of 0 for a lease it does not have.
            Some(answer) => Ok(answer.ttl > 0),
            None => Err(EtcdError::StreamEnded),
        }
    }

    /// `LeaseTimeToLive` of lease `id` (TTL -1: etcd no longer has it).
    pub(super) async fn lease_time_to_live(
        &self,
        id: i64,
    ) -> Result<LeaseTimeToLiveResponse, EtcdError> {
        let request = LeaseTimeToLiveRequest { id, keys: false };
        self.with_login(request, |request| {
            let mut lease = self.lease();
            async move { lease.lease_time_to_live(request).await }
        })
        .await
    }
}

/// The endpoint of `url` for the balanced channel: TLS for `https://`, bounded connects,
/// HTTP/2 and TCP keep-alives (a silently dead connection is dropped).
fn endpoint(url: &str, tls: Option<&ClientTls>, timeout: Duration) -> Result<Endpoint, EtcdError> {
    let url = if url.contains("://") {
        url.to_owned()
    } else if tls.is_some() {
        format!("https://{url}")
    } else {
        format!("http://{url}")
    };
    let invalid = |why: String| EtcdError::Endpoint {
        endpoint: super::conn::redact(&url),
        why,
    };
    let endpoint = Endpoint::from_shared(url.clone()).map_err(|e| invalid(e.to_string()))?;
    let endpoint = match (endpoint.uri().scheme_str(), tls) {
        (Some("http"), _) => endpoint,
        (Some("https"), Some(tls)) => {
            let (config, verifier) = tls.tonic_config(timeout);
            endpoint
                .tls_config_with_verifier(config, verifier)
                .map_err(|e| invalid(e.to_string()))?
        }
        (Some("https"), None) => return Err(invalid("https:// needs TLS settings".to_owned())),
        _ => return Err(invalid("not an http:// or https:// URL".to_owned())),
    };
    Ok(endpoint
        .connect_timeout(timeout)
        .timeout(timeout)
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(timeout)
        .tcp_keepalive(Some(TCP_KEEP_ALIVE)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn endpoints_get_their_scheme_and_bad_ones_are_refused() {
        let timeout = Duration::from_secs(1);
        let plain = endpoint("127.0.0.1:2379", None, timeout).unwrap();
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let tls = ClientTls::public_roots();
        let secure = endpoint("127.0.0.1:2379", Some(&tls), timeout).unwrap();
        assert_eq!(secure.uri().scheme_str(), Some("https"));
        for bad in ["ftp://127.0.0.1:1", "http://bad host:1"] {
            assert!(
                matches!(
                    endpoint(bad, None, timeout),
                    Err(EtcdError::Endpoint { .. })
                ),
                "{bad}"
            );
        }
        match endpoint("https://u:secret@127.0.0.1:1", None, timeout) {
            Err(e) => assert!(!e.to_string().contains("secret"), "{e}"),
            Ok(_) => panic!("https:// without TLS settings was accepted"),
        }
    }

    #[test]
    fn the_session_adds_token_leader_flag_and_deadline() {
        let mut session = Session {
            token: Arc::new(RwLock::new(None)),
            timeout: Duration::from_millis(1500),
        };
        let request = session.call(tonic::Request::new(())).unwrap();
        assert!(request.metadata().get(TOKEN_KEY).is_none());
        assert_eq!(request.metadata().get(REQUIRE_LEADER_KEY).unwrap(), "true");
        assert_eq!(request.metadata().get("grpc-timeout").unwrap(), "1500000u");
        session.set_token(AsciiMetadataValue::from_static("t1"));
        let request = session.call(tonic::Request::new(())).unwrap();
        assert_eq!(request.metadata().get(TOKEN_KEY).unwrap(), "t1");
    }
}
