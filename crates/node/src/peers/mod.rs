//! `[peers]`: how the nodes of one cluster reach each other, and the calls one makes to another.
//!
//! A node forwards a request it cannot serve itself to the node that can: the leader of a strict
//! namespace ([`crate::strict`]), the holder of a shard of a shard-owned namespace
//! ([`crate::shards`]). It finds that node by the url the node records with its lease
//! (`advertise`), and calls its gRPC `Forward` with `token`, over TLS when the url is `https://`.
//! One hop: the node called serves the request itself or refuses it.

pub mod batch;
pub mod config;

pub use config::PeersConfig;
pub(crate) use config::RawPeers;

use idmint_proto::nodes::{BearerToken, CallError, Nodes};
use idmint_proto::tls::ClientTls;
use idmint_proto::v1::ForwardRequest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// `host pid N at <url>`: the holder a lease records, naming where the other nodes reach its
/// holder (`peers.advertise`).
pub fn holder_base(url: &str) -> String {
    format!("{} at {url}", crate::worker::holder_name())
}

/// The url a lease's holder names (`host pid N at URL`, made unique by the lease), if any.
pub fn url_of(holder: &str) -> Option<&str> {
    let (_, rest) = holder.rsplit_once(" at ")?;
    let url = rest.split(' ').next()?;
    (url.starts_with("http://") || url.starts_with("https://")).then_some(url)
}

/// Why a forward brought no ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardError {
    /// The node did not answer, or does not serve the request (it does not lead the namespace
    /// or hold the shard, or no longer): look for the right node again.
    Retry(String),
    /// The node answered with an error of its own: its idmint code and message.
    Answer {
        /// The code (`namespace_exhausted`, `forbidden`, ...).
        code: String,
        /// The node's message.
        message: String,
    },
}

/// The gRPC channels to the nodes this one forwards to, one per url, with `[peers]`' token and
/// TLS.
#[derive(Debug)]
pub struct Peers {
    token: Option<BearerToken>,
    tls: Option<ClientTls>,
    config: PeersConfig,
    nodes: Mutex<HashMap<String, Arc<Nodes>>>,
}

impl Peers {
    /// Peers as `config` says; its TLS files are read now.
    pub fn new(config: &PeersConfig) -> Result<Peers, String> {
        let tls = if config.ca_file.is_some() || config.identity.is_some() {
            let identity = config
                .identity
                .as_ref()
                .map(|(c, k)| (c.as_path(), k.as_path()));
            Some(
                ClientTls::from_files(config.ca_file.as_deref(), identity)
                    .map_err(|e| format!("peers: {e}"))?,
            )
        } else {
            None
        };
        Ok(Peers {
            token: config.token.as_deref().map(BearerToken::new),
            tls,
            config: config.clone(),
            nodes: Mutex::new(HashMap::new()),
        })
    }

    /// The `[peers]` settings.
    pub fn config(&self) -> &PeersConfig {
        &self.config
    }

    fn node(&self, url: &str) -> Result<Arc<Nodes>, ForwardError> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get(url) {
            return Ok(n.clone());
        }
        let n = Nodes::new(
            vec![(url.to_owned(), url.to_owned())],
            self.config.forward_timeout,
            self.token.as_ref(),
            self.tls.as_ref(),
        )
        .map_err(|e| ForwardError::Retry(format!("the peer url {url:?}: {e:?}")))?;
        let n = Arc::new(n);
        nodes.insert(url.to_owned(), n.clone());
        Ok(n)
    }

    /// The ids `request` asks of the node at `url`, and the fencing token they were served
    /// under (the leader's term, the shard lease's token).
    pub async fn forward(
        &self,
        url: &str,
        request: ForwardRequest,
    ) -> Result<(Vec<u64>, u64), ForwardError> {
        let node = self.node(url)?;
        let op = |mut client: idmint_proto::nodes::NodeClient| {
            let request = request.clone();
            async move { client.forward(request).await }
        };
        match node.call_one(0, &op).await {
            Ok(answer) => Ok((answer.ids, answer.term)),
            Err(CallError::Unavailable { message, .. }) => Err(ForwardError::Retry(message)),
            Err(CallError::Status(_, status)) => {
                let code = idmint_proto::nodes::error_code(&status).unwrap_or_default();
                let message = format!("the node at {url}: {}", status.message());
                if code == "no_leader" || code == "shutting_down" || code.is_empty() {
                    Err(ForwardError::Retry(message))
                } else {
                    Err(ForwardError::Answer { code, message })
                }
            }
        }
    }
}
