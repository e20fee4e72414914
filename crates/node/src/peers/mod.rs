//! `[peers]`: how the nodes of one cluster reach each other, and the calls one makes to another.
//!
//! A node forwards a request it cannot serve itself to the node that can: the leader of a strict
//! namespace ([`crate::strict`]), the holder of a shard of a shard-owned namespace
//! ([`crate::shards`]). It finds that node by the url the node records with its lease
//! (`advertise`), and calls its gRPC `Forward` with `token`, over TLS when the url is `https://`.
//! One hop: the node called serves the request itself or refuses it.
//!
//! A url in a lease is not trusted by itself, nor is a caller of `Forward`: the nodes of a
//! cluster share a peer token (`[peers] token`, required). A follower sends it as the bearer
//! token of each forward with a random challenge, and takes the ids only if the answer carries
//! the HMAC-SHA-256, keyed by the same token, of the challenge, the term and the ids
//! ([`proof`]); the node called answers only a caller that presents the token
//! ([`Peers::admits`]). So a node named in a lease by anyone else (a store written by hand, a
//! stolen tier token) gets no forward, and a caller that is not a peer gets no forwarded ids.

pub mod batch;
pub mod config;

pub use config::PeersConfig;
pub(crate) use config::RawPeers;

use crate::auth::TokenHash;
use hmac::{Hmac, Mac};
use idmint_proto::nodes::{BearerToken, CallError, Nodes};
use idmint_proto::tls::ClientTls;
use idmint_proto::v1::ForwardRequest;
use rand::RngCore;
use sha2::Sha256;
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

/// What [`proof`] authenticates, before the challenge: the protocol and its version.
const PROOF_CONTEXT: &[u8] = b"idmint-forward-v1";

/// The HMAC-SHA-256 state keyed by the peer token `token`, over everything an answer's proof
/// covers: [`PROOF_CONTEXT`], the challenge, the term and the ids (8 bytes little-endian each).
fn proof_mac(token: &str, challenge: &[u8], term: u64, ids: &[u64]) -> Hmac<Sha256> {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(token.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(PROOF_CONTEXT);
    mac.update(challenge);
    mac.update(&term.to_le_bytes());
    for id in ids {
        mac.update(&id.to_le_bytes());
    }
    mac
}

/// The proof a node holding the peer token `token` gives with a forward's answer of `ids`
/// under `term` to `challenge`.
pub fn proof(token: &str, challenge: &[u8], term: u64, ids: &[u64]) -> Vec<u8> {
    proof_mac(token, challenge, term, ids)
        .finalize()
        .into_bytes()
        .to_vec()
}

/// Whether `proof` is [`proof`]'s for these, compared in constant time.
fn proves(token: &str, challenge: &[u8], term: u64, ids: &[u64], proof: &[u8]) -> bool {
    proof_mac(token, challenge, term, ids)
        .verify_slice(proof)
        .is_ok()
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
    token: BearerToken,
    /// The hash of `token`, which a forward's caller must present ([`Peers::admits`]).
    hash: TokenHash,
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
            token: BearerToken::new(&config.token),
            hash: TokenHash::of(config.token.as_bytes()),
            tls,
            config: config.clone(),
            nodes: Mutex::new(HashMap::new()),
        })
    }

    /// The `[peers]` settings.
    pub fn config(&self) -> &PeersConfig {
        &self.config
    }

    /// The proof this node gives with a forward's answer ([`proof`]).
    pub fn prove(&self, challenge: &[u8], term: u64, ids: &[u64]) -> Vec<u8> {
        proof(&self.config.token, challenge, term, ids)
    }

    /// Whether a forward's caller is a peer: its `authorization` names this cluster's peer
    /// token (`Bearer <token>`), compared by digest in constant time.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        authorization
            .and_then(crate::auth::bearer)
            .is_some_and(|presented| TokenHash::of(presented.as_bytes()).matches(&self.hash))
    }

    fn node(&self, url: &str) -> Result<Arc<Nodes>, ForwardError> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get(url) {
            return Ok(n.clone());
        }
        let n = Nodes::new(
            vec![(url.to_owned(), url.to_owned())],
            self.config.forward_timeout,
            Some(&self.token),
            self.tls.as_ref(),
        )
        .map_err(|e| ForwardError::Retry(format!("the peer url {url:?}: {e:?}")))?;
        let n = Arc::new(n);
        nodes.insert(url.to_owned(), n.clone());
        Ok(n)
    }

    /// The ids `request` asks of the node at `url`, and the fencing token they were served
    /// under (the leader's term, the shard lease's token).
    ///
    /// The answer counts only if it proves the node called holds the peer token too
    /// ([`proof`]); otherwise it is [`ForwardError::Retry`], and none of its ids is used.
    pub async fn forward(
        &self,
        url: &str,
        mut request: ForwardRequest,
    ) -> Result<(Vec<u64>, u64), ForwardError> {
        let node = self.node(url)?;
        let mut challenge = vec![0u8; 16];
        rand::rng().fill_bytes(&mut challenge);
        request.challenge = challenge.clone();
        let token = self.config.token.as_str();
        let op = |mut client: idmint_proto::nodes::NodeClient| {
            let request = request.clone();
            async move { client.forward(request).await }
        };
        match node.call_one(0, &op).await {
            Ok(answer) if proves(token, &challenge, answer.term, &answer.ids, &answer.proof) => {
                Ok((answer.ids, answer.term))
            }
            Ok(_) => {
                tracing::error!(url, "a node named as leader or shard holder did not prove it holds the peer token; its answer is not used");
                Err(ForwardError::Retry(format!(
                    "the node at {url} did not prove it holds this cluster's peer token: it is \
                     not a peer (a lease naming it was not written by one)"
                )))
            }
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
