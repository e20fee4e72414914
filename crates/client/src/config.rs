//! [`ClientConfig`]: the client's settings, checked once by `Client::connect_with`.

use idmint_core::{BufferConfig, BufferPolicy, Sizing};
pub use idmint_proto::tls::{ClientTls, ClientTlsError};
use std::time::Duration;

/// Largest `count` of one [`next_batch`](crate::Client::next_batch).
pub const MAX_BATCH: u64 = 10_000_000;

/// A client's settings. [`ClientConfig::new`] gives the defaults for a list of node urls.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClientConfig {
    /// The nodes' gRPC urls (`http://host:port`, or `https://host:port` for a node serving
    /// TLS), tried in order (docs/grpc.md).
    pub urls: Vec<String>,
    /// Longest wait for one call to one node (connecting included); then the next url is tried.
    pub op_timeout: Duration,
    /// How a sequence namespace's buffer sizes its blocks and when it refills: the core's
    /// [`BufferPolicy`], the same as a node's. Its `max_block` must not exceed the nodes'
    /// `server.max_block_request` (default 1,000,000).
    pub buffer: BufferPolicy,
    /// How often the background refill checks each namespace's level and folds demand into its
    /// average.
    pub refill_tick: Duration,
    /// How long `next` waits on an empty buffer before answering
    /// [`ClientError::Unavailable`](crate::ClientError::Unavailable).
    pub refill_wait: Duration,
    /// A snowflake, UUIDv7 or ULID id fetched ahead is handed out only within this long of the
    /// request that fetched it (Hazelcast's `prefetchValidityMillis`); older ones are dropped.
    pub validity: Duration,
    /// Most time-ordered ids fetched in one `Next` call; at most the nodes' `server.max_count`
    /// (default 10,000).
    pub max_time_batch: u64,
    /// The bearer token sent with every call, for nodes with `[auth]` (`blocks` scope for
    /// sequence namespaces, `ids` for the others, `read` for their settings). Its `Debug`
    /// output hides it. Default: none.
    pub token: Option<idmint_proto::nodes::BearerToken>,
    /// How `https://` urls are trusted and which client certificate is presented (mutual TLS):
    /// a CA file or PEM, and a certificate and key ([`ClientTls`]). Default: none, so the
    /// public roots are trusted and no certificate is presented. `http://` urls ignore it.
    pub tls: Option<ClientTls>,
    /// How old a shard-owned namespace's shard map may grow before the next routed request
    /// refreshes it (in the background); a map is refetched at once after its chosen node
    /// failed. Default: 10 s.
    pub shard_map_refresh: Duration,
}

impl ClientConfig {
    /// The defaults for `urls`: 5 s per call, the core's default buffer (10 s of demand in
    /// blocks of 1,000 to 1,000,000 ids, refilled below half), a 100 ms refill tick, a 2 s
    /// refill wait, time-ordered ids valid for 1 s, fetched up to 1,000 at a time, shard maps
    /// refreshed every 10 s.
    pub fn new<I, S>(urls: I) -> ClientConfig
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientConfig {
            urls: urls.into_iter().map(Into::into).collect(),
            op_timeout: Duration::from_secs(5),
            buffer: BufferPolicy::default(),
            refill_tick: Duration::from_millis(100),
            refill_wait: Duration::from_secs(2),
            validity: Duration::from_secs(1),
            max_time_batch: 1_000,
            token: None,
            tls: None,
            shard_map_refresh: Duration::from_secs(10),
        }
    }

    /// These settings with `token` sent as the bearer token of every call.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(idmint_proto::nodes::BearerToken::new(token));
        self
    }

    /// These settings with `tls` for `https://` urls: `ClientTls::from_files(Some(ca), None)`
    /// to trust a private CA, with `Some((cert, key))` to present a client certificate.
    pub fn with_tls(mut self, tls: ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// A fixed block size instead of sizing from demand (the rest of the buffer policy kept).
    pub fn fixed_blocks(mut self, block: u64) -> Result<Self, crate::ClientError> {
        let config = BufferConfig {
            sizing: Sizing::Fixed(block),
            ..*self.buffer.config()
        };
        self.buffer = BufferPolicy::new(config).map_err(|e| crate::ClientError::InvalidConfig {
            message: e.to_string(),
        })?;
        Ok(self)
    }

    /// Checks what the types do not.
    pub(crate) fn check(&self) -> Result<(), crate::ClientError> {
        let bad = |message: &str| {
            Err(crate::ClientError::InvalidConfig {
                message: message.to_owned(),
            })
        };
        if self.op_timeout.is_zero() || self.refill_tick.is_zero() || self.refill_wait.is_zero() {
            return bad("op_timeout, refill_tick and refill_wait must be above zero");
        }
        if self.validity.is_zero() {
            return bad("validity must be above zero");
        }
        if self.max_time_batch == 0 {
            return bad("max_time_batch must be at least 1");
        }
        Ok(())
    }
}

/// The client's clock, shared by its namespaces (`Debug` for the structs holding it).
#[derive(Clone)]
pub(crate) struct SharedClock(pub(crate) std::sync::Arc<dyn idmint_core::Clock>);

impl std::fmt::Debug for SharedClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedClock")
    }
}

impl SharedClock {
    pub(crate) fn monotonic_nanos(&self) -> u64 {
        self.0.monotonic_nanos()
    }
}
