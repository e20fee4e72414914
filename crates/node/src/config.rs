//! Node configuration: the typed, validated form, and its TOML file format.
//!
//! [`FileConfig::parse`] turns the text of an `idmint.toml` into types that cannot be wrong:
//! every namespace name, sequence spec, layout and buffer policy is validated here, once, with an
//! error that names the key. Unknown keys are errors (a typo must not silently fall back to a
//! default). Reading the file and the environment is the binary's job, not this module's.
//!
//! The format is documented key by key in `docs/configuration.md`.
//!
//! Bounds on how much a node may hold (docs/design.md invariant 6): a crash
//! burns what a node buffered, about `(1 + low_water)` blocks per sequence namespace, and a
//! refill never asks for more than [`MAX_REFILL`]. So `block_size`, `min_block` and `max_block`
//! are at most [`block_cap`] of their namespace: 1/[`SPACE_FRACTION`] of the ids its spec can
//! ever hand out (a 32-bit namespace from 1: 2,097,151; never below [`MIN_BLOCK_CAP`]), and
//! never above [`MAX_REFILL`] (a
//! larger block could never be reached, and the buffer would refill on every tick). An explicit
//! value above the cap is an error naming the key; a default above it is lowered to it.
//! `server.max_count` and `server.max_block_request` are at most [`MAX_REFILL`], and an
//! explicit `max_count` at most the cap of every 32-bit sequence namespace.

use idmint_core::{
    BufferConfig, BufferPolicy, FieldOrder, Layout, LayoutSpec, NamespaceName, SequenceSpec,
    Sizing, Width,
};
use idmint_store::{AuthorityConfig, Incarnation};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

mod family;
pub mod shards;
pub use family::Family;

/// Default largest `count` of one request.
pub const DEFAULT_MAX_COUNT: u64 = 10_000;

/// Default most namespaces a node creates on first use (`server.max_namespaces`).
pub const DEFAULT_MAX_NAMESPACES: usize = 1000;

/// Default largest `count` of one `POST /v1/blocks` (`server.max_block_request`): the default
/// `max_block`, so a lower tier may ask for what a node's own buffer would hold.
pub const DEFAULT_MAX_BLOCK_REQUEST: u64 = 1_000_000;

/// Longest `server.refill_wait_ms`: a request held longer than a minute on an empty buffer has
/// been given up by any client, and it holds a connection the drain deadline then has to cut.
pub const MAX_REFILL_WAIT_MS: u64 = 60_000;

/// A namespace's block (and a 32-bit namespace's request) may hold at most
/// `1 / SPACE_FRACTION` of the ids its spec can ever hand out. A crash burns about
/// `(1 + low_water) <= 2` blocks, so at most 2/1024 (0.2%) of the space per crash: a 32-bit
/// namespace survives hundreds of crashes, and still refills only about every 2 million ids.
pub const SPACE_FRACTION: u64 = 1024;

pub use crate::supply::MAX_REFILL;

/// The floor of [`block_cap`]: the default `min_block`, so the default sizing fits every spec.
/// A namespace this small (fewer than about a million ids) is better served by small blocks
/// anyway, and one crash costs it at most two such blocks.
pub const MIN_BLOCK_CAP: u64 = 1_000;

/// The largest block a sequence namespace of `spec` may be configured to buffer (and, for a
/// 32-bit namespace, the largest explicit `server.max_count`): `1/SPACE_FRACTION` of its
/// capacity, at least [`MIN_BLOCK_CAP`], at most [`MAX_REFILL`].
pub fn block_cap(spec: &SequenceSpec) -> u64 {
    (spec.capacity() / SPACE_FRACTION).clamp(MIN_BLOCK_CAP, MAX_REFILL)
}

/// A block request (`POST /v1/blocks`, gRPC `Block`, RESP `IDMINT.BLOCK`) on a 32-bit sequence
/// namespace gets at most `1 / BLOCK_REQUEST_FRACTION_32` of the ids its spec can ever hand out
/// (21,474 of a 32-bit namespace from 1, which holds 2,147,483,647), whatever `server.max_block_request` says: without
/// it, any client could empty the namespace in about 2,150 requests. A larger request is
/// answered with a shorter block (a block answer is "up to count" ids); never below
/// [`MIN_BLOCK_CAP`].
pub const BLOCK_REQUEST_FRACTION_32: u64 = 100_000;

/// The most ids one block request may take from a namespace of `spec`: see
/// [`BLOCK_REQUEST_FRACTION_32`]; 64-bit namespaces: no bound here (`server.max_block_request`
/// bounds them).
pub fn block_request_cap(spec: &SequenceSpec) -> u64 {
    match spec.width() {
        Width::Bits32 => (spec.capacity() / BLOCK_REQUEST_FRACTION_32).max(MIN_BLOCK_CAP),
        _ => u64::MAX,
    }
}

/// `count` lowered to the [`block_request_cap`] of `ns` (a sequence namespace; other kinds
/// have no blocks and keep `count`), or for a 32-bit namespace to `max_block_32` when the
/// caller's token sets it (a trusted lower tier).
pub fn block_request(
    ns: &crate::namespace::Namespace,
    count: u64,
    max_block_32: Option<u64>,
) -> u64 {
    match ns {
        crate::namespace::Namespace::Sequence(s) => {
            let cap = match (s.spec().width(), max_block_32) {
                (Width::Bits32, Some(max)) => max,
                _ => block_request_cap(&s.spec()),
            };
            count.min(cap)
        }
        _ => count,
    }
}

/// How a sequence namespace caches blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CacheMode {
    /// Buffer blocks, refilled in the background, sized by the policy.
    Buffered(BufferPolicy),
    /// No cache: every request reserves its ids straight from the authority (Flickr's ticket
    /// server semantics: dense ids, one authority round trip per request).
    Off,
}

/// Which order a sequence namespace's ids keep (`order = …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// `order = "writer"` (the default): the ids of one node's answers increase; nodes serve
    /// their own blocks, so ids of two nodes interleave.
    #[default]
    Writer,
    /// `order = "strict"`: an id handed out after another request completed is larger, across
    /// every node (linearizable). One node at a time, the leader, serves them
    /// ([`crate::strict`]); the others forward.
    Strict,
}

/// What a namespace hands out.
#[derive(Debug, Clone, PartialEq)]
pub enum KindConfig {
    /// Integers from leased blocks.
    Sequence {
        /// Which ids.
        spec: SequenceSpec,
        /// How they are cached.
        cache: CacheMode,
        /// Which order they keep.
        order: Order,
    },
    /// Time-ordered 64-bit ids.
    Snowflake {
        /// The bit layout.
        layout: Layout,
        /// How the worker (node field) id is chosen.
        worker: WorkerConfig,
        /// The lease group (`worker_group`): namespaces of one group share one worker lease
        /// and one generator on a node, so their ids never collide with each other either.
        /// `None`: the namespace's own name.
        group: Option<NamespaceName>,
        /// `shards = "owned"`: the node field is the data's shard, chosen by each request
        /// ([`crate::shards`]); `None`: the node's worker id.
        shards: Option<shards::ShardsConfig>,
    },
    /// RFC 9562 UUIDv7.
    Uuid7,
    /// ULID.
    Ulid,
}

impl KindConfig {
    /// `sequence`, `snowflake`, `uuid7` or `ulid`.
    pub fn name(&self) -> &'static str {
        match self {
            KindConfig::Sequence { .. } => "sequence",
            KindConfig::Snowflake { .. } => "snowflake",
            KindConfig::Uuid7 => "uuid7",
            KindConfig::Ulid => "ulid",
        }
    }
}

/// How a snowflake namespace's worker id is chosen (`worker = …`). Every choice is held as a
/// worker lease when the authority stores leases, so two nodes never issue under one id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerConfig {
    /// `worker = "lease"` (the default): the lowest free worker id of the group.
    Lease,
    /// `worker = N`: exactly this id; a node finding it leased by another refuses to start.
    Fixed(u64),
    /// `worker = "ordinal"`: the trailing number of the host name (a Kubernetes StatefulSet's
    /// pod ordinal, `web-3` → 3).
    Ordinal,
}

/// Worker lease timing (`[leases]`, all in ms). Invariants (checked at parse):
/// `floor_ahead < ttl`, `safety_margin < ttl / 2`, every value at least 1 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSettings {
    /// `ttl_ms`: how long a lease lives without renewal (by the authority's clock); renewed every
    /// third of it.
    pub ttl: Duration,
    /// `floor_ahead_ms`: how far ahead of its clock a node records its time floor before
    /// issuing up to it.
    pub floor_ahead: Duration,
    /// `max_floor_wait_ms`: a node whose clock is behind a worker id's floor by at most this
    /// waits for it; further behind, it refuses to issue and says why.
    pub max_floor_wait: Duration,
    /// `safety_margin_ms`: a node stops issuing this long before its lease would expire
    /// without a successful renewal, measured on its own monotonic clock from when the last
    /// successful renewal was sent.
    pub safety_margin: Duration,
}

impl Default for LeaseSettings {
    /// TTL 10 s, floor 5 s ahead, wait up to 2 s for a floor, stop 2 s before expiry.
    fn default() -> Self {
        LeaseSettings {
            ttl: Duration::from_secs(10),
            floor_ahead: Duration::from_secs(5),
            max_floor_wait: Duration::from_secs(2),
            safety_margin: Duration::from_secs(2),
        }
    }
}

/// A layout whose timestamp runs out sooner than this is refused unless the namespace sets
/// `allow_short_layout = true`.
pub const MIN_LAYOUT_LIFETIME: Duration = Duration::from_secs(10 * 365 * DAY_SECS);

/// How the node's listeners treat connections (`[server]` keys); every duration at least 1 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenConfig {
    /// `header_read_timeout_ms`: how long a connection may take, from its accept, to send its
    /// first request (a TLS handshake included: HTTP headers, the HTTP/2 preface and first
    /// stream, the first RESP command), and an HTTP request its headers or a RESP command all
    /// its bytes once begun. Past it the connection is closed.
    pub header_read_timeout: Duration,
    /// `idle_timeout_ms`: how long a connection may go without a byte read or written while no
    /// request of it is being handled (a client that stopped mid-request or stopped reading
    /// its answer). Past it the connection is closed. A request being handled (waiting for a
    /// refill, say) is never idle.
    pub idle_timeout: Duration,
    /// `max_connections`: most connections served at once; the next one waits in the
    /// operating system's listen backlog until one closes (and, once that is full, the system
    /// refuses connections).
    pub max_connections: usize,
    /// `drain_timeout_ms`: on shutdown, how long requests in flight may take to finish; past it
    /// they are cut, and the node hands back its buffers all the same.
    pub drain_timeout: Duration,
    /// `max_streams`: most gRPC `NextStream` calls open at once on the node, every connection
    /// together; the next one is refused (`RESOURCE_EXHAUSTED`, `too_many_streams`). Each holds
    /// at most one chunk and its connection's send buffer for a client that does not read.
    pub max_streams: usize,
}

impl Default for ListenConfig {
    /// Headers within 10 s, idle 60 s, 1024 connections, 10 s to drain, 256 streams.
    fn default() -> Self {
        ListenConfig {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            drain_timeout: Duration::from_secs(10),
            max_streams: 256,
        }
    }
}

/// Most `server.max_connections`: far above what one process serves, far below the
/// semaphore's own limit.
pub const MAX_CONNECTIONS: usize = 1_000_000;

/// Longest of the `[server]` timeouts (`*_timeout_ms`): an hour.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// Longest `server.exhaustion_warning_days`: a century.
pub const MAX_EXHAUSTION_WARNING_DAYS: u64 = 36_500;

const DAY_SECS: u64 = 24 * 60 * 60;

/// The validated settings of the node library.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// Create a 64-bit sequence namespace with `default_sequence` on first use of an unknown name.
    pub auto_create: bool,
    /// Settings of auto-created namespaces.
    pub default_sequence: (SequenceSpec, CacheMode),
    /// Most namespaces this node sets up on first use (auto-create), at least 1. Each one holds a
    /// buffer and a refill task, and a new one durably reserves a block: without a bound any
    /// client could grow the node and the authority without end. Declared namespaces do not
    /// count and are always served.
    pub max_namespaces: usize,
    /// Largest `count` one request of ids may ask for; at most [`MAX_REFILL`].
    pub max_count: u64,
    /// Largest `count` of one `POST /v1/blocks` (`server.max_block_request`); at most
    /// [`MAX_REFILL`].
    pub max_block_request: u64,
    /// How often refill tasks fold demand into their averages and check the low-water mark.
    pub refill_tick: Duration,
    /// How long a request on an empty buffer waits for a refill before answering 503; 1 ms to
    /// [`MAX_REFILL_WAIT_MS`].
    pub refill_wait: Duration,
    /// Declared namespaces.
    pub namespaces: BTreeMap<NamespaceName, KindConfig>,
    /// Declared families (`[namespaces."NAME.*"]`), by their pattern's text: sequence
    /// namespaces created on first use with the family's settings, up to its `max_members`
    /// ([`Family`]). They never overlap.
    pub families: BTreeMap<String, Family>,
    /// The status page (`GET /`) shows in red a namespace projected to run out of ids (or a
    /// snowflake layout out of time) sooner than this (`server.exhaustion_warning_days`, 1 to
    /// [`MAX_EXHAUSTION_WARNING_DAYS`]; default 365 days).
    pub exhaustion_warning: Duration,
    /// How listeners treat connections and how long shutdown waits for them.
    pub listen: ListenConfig,
    /// Worker lease timing of snowflake namespaces.
    pub leases: LeaseSettings,
    /// `[auth]`: bearer tokens, scopes and quotas ([`crate::auth`]); `None`: off.
    pub auth: Option<crate::auth::AuthConfig>,
    /// `server.audit_retention_days`: the node folds audit-ledger entries older than this, by
    /// the store's clock, into checkpoints once an hour (1 to [`MAX_EXHAUSTION_WARNING_DAYS`]
    /// days); `None` (the default): the ledger keeps everything.
    pub audit_retention: Option<Duration>,
    /// Where unused blocks that do not go back at a clean stop are kept, to be served first
    /// after the restart ([`idmint_store::kept`]); `None`: they are burned. The binary sets it
    /// to the data directory for every durable authority.
    pub keep_blocks: Option<KeepBlocks>,
    /// `server.kept_blocks`: what becomes of unused blocks at a clean stop and how they are
    /// served after the restart ([`KeptBlocks`]).
    pub kept_blocks: KeptBlocks,
    /// `[peers]`: how the nodes reach each other to forward requests (needed by strict and
    /// shard-owned namespaces).
    pub peers: Option<crate::peers::PeersConfig>,
}

/// `server.kept_blocks`: the unused blocks a node holds at a clean stop that do not go back to
/// its authority (older blocks, a tail refused because ids were granted after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeptBlocks {
    /// `"claimed"` (the default): parked in the authority at the stop
    /// ([`idmint_store::Authority::park`]) and served after the restart only once the
    /// authority confirms them with a claim ([`idmint_store::Authority::claim`]): a copied data
    /// directory, an edited file, a rebase or retirement while stopped, or a store that lost
    /// data serves none of them. Blocks that cannot be parked (the authority did not answer, or
    /// keeps no parks) are burned.
    #[default]
    Claimed,
    /// `"unconfirmed"`: as `claimed`, and blocks that cannot be parked are kept in the data
    /// directory all the same, and every kept block is served at the restart before the
    /// authority answers. For a lower tier that prefers serving through an outage of the tier
    /// above: a copied or restored data directory then repeats ids.
    Unconfirmed,
    /// `"off"`: burned at the stop.
    Off,
}

/// The data directory and the authority of [`NodeConfig::keep_blocks`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeepBlocks {
    /// The data directory (`kept-blocks.json` lives there).
    pub dir: PathBuf,
    /// The configured authority's text: kept blocks are served only on the same authority.
    pub authority: String,
}

impl NodeConfig {
    /// The family `name` is a member of, if any: none when a namespace of that exact name is
    /// declared (its own table wins).
    pub fn family_of(&self, name: &NamespaceName) -> Option<&Family> {
        family::family_of(&self.families, &self.namespaces, name)
    }

    /// Every sequence spec this node may serve by configuration, with its key: `defaults`, each
    /// declared sequence namespace's, each family's.
    fn sequence_specs(&self) -> Vec<(String, &SequenceSpec)> {
        let declared = self
            .namespaces
            .iter()
            .map(|(n, k)| (format!("namespaces.{n}"), k));
        let mut specs = vec![("defaults".to_owned(), &self.default_sequence.0)];
        specs.extend(declared.filter_map(|(key, kind)| match kind {
            KindConfig::Sequence { spec, .. } => Some((key, spec)),
            _ => None,
        }));
        specs.extend(self.families.values().map(|f| (f.key(), &f.spec)));
        specs
    }
}

impl Default for NodeConfig {
    /// Auto-create 64-bit sequences with the adaptive default buffer; at most 10,000 ids per
    /// request.
    fn default() -> Self {
        NodeConfig {
            auto_create: true,
            default_sequence: (
                SequenceSpec::default_64(),
                CacheMode::Buffered(BufferPolicy::default()),
            ),
            max_namespaces: DEFAULT_MAX_NAMESPACES,
            max_count: DEFAULT_MAX_COUNT,
            max_block_request: DEFAULT_MAX_BLOCK_REQUEST,
            refill_tick: Duration::from_millis(100),
            refill_wait: Duration::from_secs(2),
            namespaces: BTreeMap::new(),
            families: BTreeMap::new(),
            exhaustion_warning: Duration::from_secs(365 * DAY_SECS),
            listen: ListenConfig::default(),
            leases: LeaseSettings::default(),
            auth: None,
            audit_retention: None,
            keep_blocks: None,
            kept_blocks: KeptBlocks::default(),
            peers: None,
        }
    }
}

/// Everything an `idmint.toml` holds.
#[derive(Debug, Clone, PartialEq)]
pub struct FileConfig {
    /// HTTP listen address, if set.
    pub http: Option<SocketAddr>,
    /// gRPC listen address (`[server] grpc`); gRPC is served only when set here or by
    /// `--grpc`.
    pub grpc: Option<SocketAddr>,
    /// RESP (Redis protocol) listen address (`[server] resp`); served only when set here or by
    /// `--resp`.
    pub resp: Option<SocketAddr>,
    /// Data directory, if set.
    pub data_dir: Option<PathBuf>,
    /// TLS on every listener (`[server] tls_cert` and `tls_key`, both or neither; and
    /// `client_ca_file` for mutual TLS).
    pub tls: Option<TlsFiles>,
    /// The authority.
    pub authority: AuthorityConfig,
    /// `[authority] incarnation`: the store incarnation the node must find
    /// ([`idmint_store::incarnation`]); any other store, or an empty one, is refused.
    pub incarnation: Option<Incarnation>,
    /// The node settings.
    pub node: NodeConfig,
}

/// The PEM files of the listeners' TLS certificate (chain, leaf first), private key and, for
/// mutual TLS, client CA; read at start, and again on reload, by
/// [`crate::tls::ServerTls::from_files`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `server.tls_cert` / `--tls-cert`.
    pub cert: PathBuf,
    /// `server.tls_key` / `--tls-key`.
    pub key: PathBuf,
    /// `server.client_ca_file` / `--tls-client-ca`: when set, every listener requires a client
    /// certificate signed by a CA of this file.
    pub client_ca: Option<PathBuf>,
}

/// `server.tls_cert` and `server.tls_key`: both or neither; `server.client_ca_file` only with
/// them.
fn tls_files(raw: &RawServer) -> Result<Option<TlsFiles>, ConfigError> {
    match (&raw.tls_cert, &raw.tls_key) {
        (None, None) if raw.client_ca_file.is_some() => Err(invalid(
            "server.client_ca_file",
            "set, but TLS is off: client certificates need tls_cert and tls_key in [server]",
        )),
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: raw.client_ca_file.clone(),
        })),
        (Some(_), None) => Err(invalid(
            "server.tls_key",
            "missing: tls_cert is set, and TLS needs both the certificate and its key",
        )),
        (None, Some(_)) => Err(invalid(
            "server.tls_cert",
            "missing: tls_key is set, and TLS needs both the certificate and its key",
        )),
    }
}

/// The `[authority]` table: the authority's own keys, and `incarnation`, the store incarnation
/// every node of the deployment must find ([`idmint_store::incarnation`]).
#[derive(Debug)]
struct AuthoritySection {
    config: AuthorityConfig,
    incarnation: Option<Incarnation>,
}

impl<'de> Deserialize<'de> for AuthoritySection {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut table = toml::Table::deserialize(deserializer)?;
        let incarnation = match table.remove("incarnation") {
            None => None,
            Some(toml::Value::String(text)) => Some(
                Incarnation::parse(&text)
                    .map_err(|e| D::Error::custom(format!("authority.incarnation: {e}")))?,
            ),
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "authority.incarnation: expected a string, found {}",
                    other.type_str()
                )))
            }
        };
        let config = AuthorityConfig::deserialize_at("authority", toml::Value::Table(table))
            .map_err(|e| D::Error::custom(e.message()))?;
        Ok(AuthoritySection {
            config,
            incarnation,
        })
    }
}

/// A configuration error, naming the key at fault.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The TOML does not parse or does not match the schema.
    #[error("{0}")]
    Syntax(String),
    /// A key holds an invalid value.
    #[error("{key}: {message}")]
    Invalid {
        /// Dotted key path, e.g. `namespaces.photos.step`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

pub(crate) fn invalid(key: impl Into<String>, message: impl ToString) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.to_string(),
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    authority: Option<AuthoritySection>,
    #[serde(default)]
    defaults: RawSequence,
    #[serde(default)]
    namespaces: BTreeMap<String, RawNamespace>,
    #[serde(default)]
    leases: RawLeases,
    auth: Option<crate::auth::RawAuth>,
    peers: Option<crate::peers::RawPeers>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLeases {
    ttl_ms: Option<u64>,
    floor_ahead_ms: Option<u64>,
    max_floor_wait_ms: Option<u64>,
    safety_margin_ms: Option<u64>,
}

/// `worker = N | "lease" | "ordinal"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawWorker {
    Fixed(u64),
    Named(String),
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    http: Option<String>,
    grpc: Option<String>,
    resp: Option<String>,
    data_dir: Option<PathBuf>,
    auto_create: Option<bool>,
    max_count: Option<u64>,
    max_block_request: Option<u64>,
    max_namespaces: Option<usize>,
    refill_wait_ms: Option<u64>,
    exhaustion_warning_days: Option<u64>,
    audit_retention_days: Option<u64>,
    kept_blocks: Option<String>,
    header_read_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
    max_streams: Option<usize>,
    drain_timeout_ms: Option<u64>,
    // TLS on the listeners (crate::tls).
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    client_ca_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct RawSequence {
    width: Option<u32>,
    start: Option<u64>,
    step: Option<u64>,
    offset: Option<u64>,
    cache: Option<RawCache>,
    block_size: Option<u64>,
    buffer_seconds: Option<f64>,
    min_block: Option<u64>,
    max_block: Option<u64>,
    low_water: Option<f64>,
}

/// One of `choices` by its name, or an error listing them all (serde's own message for an
/// unknown variant says "variant", which a config file's reader has no reason to know).
fn choose<T: Copy>(what: &str, text: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let known: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            format!("unknown {what} {text:?}; known: {}", known.join(", "))
        })
}

/// `cache = "adaptive" | "fixed" | "off"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
enum RawCache {
    Adaptive,
    Fixed,
    Off,
}

impl TryFrom<String> for RawCache {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        use RawCache::*;
        choose(
            "cache mode",
            &s,
            &[("adaptive", Adaptive), ("fixed", Fixed), ("off", Off)],
        )
    }
}

/// `kind = "sequence" | "snowflake" | "uuid7" | "ulid"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
enum RawKind {
    Sequence,
    Snowflake,
    Uuid7,
    Ulid,
}

impl TryFrom<String> for RawKind {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        use RawKind::*;
        choose(
            "kind",
            &s,
            &[
                ("sequence", Sequence),
                ("snowflake", Snowflake),
                ("uuid7", Uuid7),
                ("ulid", Ulid),
            ],
        )
    }
}

/// A `[namespaces.NAME]` table. The sequence keys are listed here rather than flattened from
/// [`RawSequence`], because serde's `flatten` disables `deny_unknown_fields`: this way a typo
/// names the key and lists the valid ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNamespace {
    kind: RawKind,
    width: Option<u32>,
    start: Option<u64>,
    step: Option<u64>,
    offset: Option<u64>,
    cache: Option<RawCache>,
    block_size: Option<u64>,
    buffer_seconds: Option<f64>,
    min_block: Option<u64>,
    max_block: Option<u64>,
    low_water: Option<f64>,
    /// A preset's name, or a table read as [`RawCustomLayout`] (so a mistake in it names the
    /// key, which an untagged enum's "did not match any variant" would not).
    layout: Option<toml::Value>,
    worker: Option<RawWorker>,
    worker_group: Option<String>,
    allow_short_layout: Option<bool>,
    order: Option<RawOrder>,
    /// A family's bound ([`Family::max_members`]); families only.
    max_members: Option<usize>,
    shards: Option<String>,
    logical_shards: Option<u64>,
    shard_range: Option<u64>,
}

/// `order = "writer" | "strict"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
struct RawOrder(Order);

impl TryFrom<String> for RawOrder {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        choose(
            "order",
            &s,
            &[("writer", Order::Writer), ("strict", Order::Strict)],
        )
        .map(RawOrder)
    }
}

impl RawNamespace {
    /// The sequence keys of the table.
    fn sequence(&self) -> RawSequence {
        RawSequence {
            width: self.width,
            start: self.start,
            step: self.step,
            offset: self.offset,
            cache: self.cache,
            block_size: self.block_size,
            buffer_seconds: self.buffer_seconds,
            min_block: self.min_block,
            max_block: self.max_block,
            low_water: self.low_water,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCustomLayout {
    timestamp_bits: u8,
    node_bits: u8,
    sequence_bits: u8,
    time_unit: String,
    epoch: String,
    #[serde(default)]
    sequence_before_node: bool,
    #[serde(default)]
    max_bits: Option<u8>,
}

impl FileConfig {
    /// Parses and validates the text of a config file.
    pub fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let mut node = NodeConfig::default();
        let http = raw
            .server
            .http
            .as_deref()
            .map(|s| {
                s.parse::<SocketAddr>()
                    .map_err(|e| invalid("server.http", format!("{s:?}: {e}")))
            })
            .transpose()?;
        let address = |key: &str, value: Option<&str>| {
            value
                .map(|s| {
                    s.parse::<SocketAddr>()
                        .map_err(|e| invalid(key, format!("{s:?}: {e}")))
                })
                .transpose()
        };
        let grpc = address("server.grpc", raw.server.grpc.as_deref())?;
        let resp = address("server.resp", raw.server.resp.as_deref())?;
        if let Some(auto) = raw.server.auto_create {
            node.auto_create = auto;
        }
        if let Some(max) = raw.server.max_count {
            if max == 0 {
                return Err(invalid("server.max_count", "must be at least 1"));
            }
            if max > MAX_REFILL {
                return Err(invalid(
                    "server.max_count",
                    format!("{max} is more than one refill brings ({MAX_REFILL}); a request that large would wait through several refills"),
                ));
            }
            node.max_count = max;
        }
        if let Some(max) = raw.server.max_block_request {
            if max == 0 {
                return Err(invalid("server.max_block_request", "must be at least 1"));
            }
            if max > MAX_REFILL {
                return Err(invalid(
                    "server.max_block_request",
                    format!("{max} is more than one refill brings ({MAX_REFILL})"),
                ));
            }
            node.max_block_request = max;
        }
        if let Some(max) = raw.server.max_namespaces {
            if max == 0 {
                return Err(invalid(
                    "server.max_namespaces",
                    "must be at least 1 (to serve declared namespaces only, set auto_create = false)",
                ));
            }
            node.max_namespaces = max;
        }
        if let Some(ms) = raw.server.refill_wait_ms {
            if ms == 0 {
                return Err(invalid(
                    "server.refill_wait_ms",
                    "must be at least 1: it is how long a request on an empty buffer waits for a refill before answering 503, and 0 would fail every such request at once",
                ));
            }
            if ms > MAX_REFILL_WAIT_MS {
                return Err(invalid(
                    "server.refill_wait_ms",
                    format!("{ms} is more than {MAX_REFILL_WAIT_MS} (a minute): no client waits that long for an answer, and the held connection would only delay shutdown"),
                ));
            }
            node.refill_wait = Duration::from_millis(ms);
        }
        if let Some(days) = raw.server.exhaustion_warning_days {
            if !(1..=MAX_EXHAUSTION_WARNING_DAYS).contains(&days) {
                return Err(invalid(
                    "server.exhaustion_warning_days",
                    format!("{days} is not from 1 to {MAX_EXHAUSTION_WARNING_DAYS} (days before a projected exhaustion that the status page shows it in red)"),
                ));
            }
            node.exhaustion_warning = Duration::from_secs(days * DAY_SECS);
        }
        if let Some(days) = raw.server.audit_retention_days {
            if !(1..=MAX_EXHAUSTION_WARNING_DAYS).contains(&days) {
                return Err(invalid(
                    "server.audit_retention_days",
                    format!("{days} is not from 1 to {MAX_EXHAUSTION_WARNING_DAYS} (days the audit ledger keeps an entry; leave it out to keep every entry)"),
                ));
            }
            node.audit_retention = Some(Duration::from_secs(days * DAY_SECS));
        }
        if let Some(text) = &raw.server.kept_blocks {
            node.kept_blocks = choose(
                "server.kept_blocks",
                text,
                &[
                    ("claimed", KeptBlocks::Claimed),
                    ("unconfirmed", KeptBlocks::Unconfirmed),
                    ("off", KeptBlocks::Off),
                ],
            )
            .map_err(|e| invalid("server.kept_blocks", e))?;
        }
        node.listen = listen_settings(&raw.server)?;
        node.leases = lease_settings(&raw.leases)?;
        node.default_sequence =
            sequence_settings("defaults", &raw.defaults, &RawSequence::default())?;
        for (name, ns) in &raw.namespaces {
            if family::is_family(name) {
                let family = family::family(name, ns, &raw.defaults)?;
                node.families.insert(name.clone(), family);
                continue;
            }
            let key = format!("namespaces.{name}");
            if ns.max_members.is_some() {
                return Err(invalid(
                    format!("{key}.max_members"),
                    "belongs to a family (a table named NAME.*, quoted: [namespaces.\"NAME.*\"])",
                ));
            }
            let parsed = NamespaceName::new(name).map_err(|e| invalid(&key, e))?;
            let kind = namespace_kind(&key, ns, &raw.defaults)?;
            node.namespaces.insert(parsed, kind);
        }
        family::check_overlaps(&node.families)?;
        check_worker_groups(&node)?;
        if raw.server.max_count.is_some() {
            check_max_count(&node)?;
        }
        if let Some(auth) = raw.auth {
            node.auth = Some(auth.validate(node.max_count.max(node.max_block_request))?);
        }
        let (authority, incarnation) = match raw.authority {
            Some(section) => (section.config, section.incarnation),
            None => (AuthorityConfig::default(), None),
        };
        if let Some(offsets) = authority.residue_offsets() {
            check_multi(&node, &offsets)?;
        }
        node.peers = raw.peers.map(|s| s.validate()).transpose()?;
        check_strict(&node, &authority)?;
        check_owned_shards(&node)?;
        if node.peers.is_some() && grpc.is_none() {
            return Err(invalid(
                "peers.advertise",
                "the other nodes forward to this node over gRPC: set server.grpc (the address peers.advertise reaches)",
            ));
        }
        let tls = tls_files(&raw.server)?;
        Ok(FileConfig {
            http,
            grpc,
            resp,
            data_dir: raw.server.data_dir,
            tls,
            authority,
            incarnation,
            node,
        })
    }
}

/// The `[server]` connection settings: each timeout 1 ms to an hour, 1 to [`MAX_CONNECTIONS`]
/// connections.
fn listen_settings(raw: &RawServer) -> Result<ListenConfig, ConfigError> {
    let d = ListenConfig::default();
    let timeout = |key: &str, value: Option<u64>, default: Duration| match value {
        None => Ok(default),
        Some(ms) if (1..=MAX_TIMEOUT_MS).contains(&ms) => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(invalid(
            format!("server.{key}"),
            format!("{ms}: must be from 1 to {MAX_TIMEOUT_MS} (an hour)"),
        )),
    };
    let max_connections = match raw.max_connections {
        None => d.max_connections,
        Some(n) if (1..=MAX_CONNECTIONS).contains(&n) => n,
        Some(n) => {
            return Err(invalid(
                "server.max_connections",
                format!("{n}: must be from 1 to {MAX_CONNECTIONS}"),
            ))
        }
    };
    let max_streams = match raw.max_streams {
        None => d.max_streams,
        Some(n) if (1..=MAX_CONNECTIONS).contains(&n) => n,
        Some(n) => {
            return Err(invalid(
                "server.max_streams",
                format!("{n}: must be from 1 to {MAX_CONNECTIONS}"),
            ))
        }
    };
    Ok(ListenConfig {
        max_streams,
        header_read_timeout: timeout(
            "header_read_timeout_ms",
            raw.header_read_timeout_ms,
            d.header_read_timeout,
        )?,
        idle_timeout: timeout("idle_timeout_ms", raw.idle_timeout_ms, d.idle_timeout)?,
        max_connections,
        drain_timeout: timeout("drain_timeout_ms", raw.drain_timeout_ms, d.drain_timeout)?,
    })
}

/// An explicit `server.max_count` fits every 32-bit sequence namespace's [`block_cap`]: one
/// request's shortfall is reserved in one refill, on top of the block.
fn check_max_count(node: &NodeConfig) -> Result<(), ConfigError> {
    for (key, spec) in node.sequence_specs() {
        let cap = block_cap(spec);
        if spec.width() == Width::Bits32 && node.max_count > cap {
            return Err(invalid(
                "server.max_count",
                format!(
                    "{} is more than {key} may take in one request: at most {cap} (1/{SPACE_FRACTION} of its 32-bit space, at least {MIN_BLOCK_CAP})",
                    node.max_count
                ),
            ));
        }
    }
    Ok(())
}

/// With several authorities, every sequence namespace's step must leave each member its own
/// residue class, and namespaces must not set an offset of their own.
/// (Distinct member offsets are the store's check, when it reads `[authority]`.)
fn check_multi(node: &NodeConfig, offsets: &[u64]) -> Result<(), ConfigError> {
    let check = |key: String, spec: &SequenceSpec| {
        if spec.offset() != 0 {
            return Err(invalid(
                key,
                "with a multi authority the members' offsets apply; do not set offset",
            ));
        }
        if let Some(bad) = offsets.iter().find(|o| **o >= spec.step()) {
            return Err(invalid(
                key,
                format!("step {} leaves no residue class for member offset {bad}; set step to at least {}", spec.step(), offsets.len()),
            ));
        }
        Ok(())
    };
    for (key, spec) in node.sequence_specs() {
        check(key, spec)?;
    }
    Ok(())
}

/// Shard-owned namespaces need `[peers]`: a request for a shard another node holds is
/// forwarded to it.
fn check_owned_shards(node: &NodeConfig) -> Result<(), ConfigError> {
    if node.peers.is_some() {
        return Ok(());
    }
    for (name, kind) in &node.namespaces {
        if let KindConfig::Snowflake {
            shards: Some(_), ..
        } = kind
        {
            return Err(invalid(
                format!("namespaces.{name}.shards"),
                "a namespace with shards = \"owned\" needs a [peers] section with advertise = the gRPC url the other nodes reach this node at (a request for a shard another node holds is forwarded there)",
            ));
        }
    }
    Ok(())
}

/// Strict namespaces need `[peers]` and one authority whose watermark every block comes
/// from: blocks of several members, or of several upper nodes' buffers, do not increase in the
/// order they are granted, and a new leader must start above every block an earlier one served.
fn check_strict(node: &NodeConfig, authority: &AuthorityConfig) -> Result<(), ConfigError> {
    let Some(name) = node.namespaces.iter().find_map(|(name, kind)| {
        matches!(
            kind,
            KindConfig::Sequence {
                order: Order::Strict,
                ..
            }
        )
        .then_some(name)
    }) else {
        return Ok(());
    };
    let key = format!("namespaces.{name}.order");
    if node.peers.is_none() {
        return Err(invalid(
            key,
            "a strict namespace needs a [peers] section with advertise = the gRPC url the other nodes reach this node at",
        ));
    }
    match authority {
        AuthorityConfig::Multi(_) | AuthorityConfig::Upstream(_) => Err(invalid(
            key,
            format!(
                "order = \"strict\" needs one authority that grants every block from one watermark; the {} authority grants blocks of several members or upper nodes, which do not increase in the order they are granted",
                authority.kind()
            ),
        )),
        _ => Ok(()),
    }
}

fn namespace_kind(
    key: &str,
    ns: &RawNamespace,
    defaults: &RawSequence,
) -> Result<KindConfig, ConfigError> {
    let sequence = ns.sequence();
    let seq_keys_set = sequence.width.is_some()
        || sequence.start.is_some()
        || sequence.step.is_some()
        || sequence.offset.is_some()
        || sequence.cache.is_some()
        || sequence.block_size.is_some()
        || sequence.buffer_seconds.is_some()
        || sequence.min_block.is_some()
        || sequence.max_block.is_some()
        || sequence.low_water.is_some()
        || ns.order.is_some();
    let shard_keys_set =
        ns.shards.is_some() || ns.logical_shards.is_some() || ns.shard_range.is_some();
    if shard_keys_set && ns.kind != RawKind::Snowflake {
        return Err(invalid(
            key,
            "shards, logical_shards and shard_range belong to snowflake namespaces",
        ));
    }
    match ns.kind {
        RawKind::Sequence => {
            if ns.layout.is_some()
                || ns.worker.is_some()
                || ns.worker_group.is_some()
                || ns.allow_short_layout.is_some()
            {
                return Err(invalid(
                    key,
                    "layout, worker, worker_group and allow_short_layout belong to snowflake namespaces",
                ));
            }
            let (spec, cache) = sequence_settings(key, &sequence, defaults)?;
            let order = ns.order.map_or(Order::Writer, |o| o.0);
            if order == Order::Strict && cache == CacheMode::Off {
                return Err(invalid(
                    format!("{key}.order"),
                    "cache = \"off\" is already in strict order (every request reserves its ids from the authority); order = \"strict\" needs a cache, which its leader serves from",
                ));
            }
            Ok(KindConfig::Sequence { spec, cache, order })
        }
        RawKind::Snowflake => {
            if seq_keys_set {
                return Err(invalid(
                    key,
                    "width/start/step/offset/cache/order keys belong to sequence namespaces",
                ));
            }
            let layout = match &ns.layout {
                None => Layout::twitter(),
                Some(toml::Value::String(p)) => {
                    Layout::preset(p).map_err(|e| invalid(format!("{key}.layout"), e))?
                }
                Some(table @ toml::Value::Table(_)) => {
                    let custom: RawCustomLayout = table
                        .clone()
                        .try_into()
                        .map_err(|e| invalid(format!("{key}.layout"), layout_table_error(&e)))?;
                    custom_layout(&format!("{key}.layout"), &custom)?
                }
                Some(other) => {
                    return Err(invalid(
                        format!("{key}.layout"),
                        format!(
                            "{other}: expected a preset's name (\"twitter\", \"instagram\", \"sonyflake\", \"discord\", \"js53\") or a table with timestamp_bits, node_bits, sequence_bits, time_unit and epoch"
                        ),
                    ))
                }
            };
            let worker = match &ns.worker {
                None => WorkerConfig::Lease,
                Some(RawWorker::Named(w)) if w == "lease" => WorkerConfig::Lease,
                Some(RawWorker::Named(w)) if w == "ordinal" => WorkerConfig::Ordinal,
                Some(RawWorker::Named(w)) => {
                    return Err(invalid(
                        format!("{key}.worker"),
                        format!("{w:?}: expected \"lease\", \"ordinal\" or a number from 0 to the layout's maximum ({})", layout.max_node()),
                    ))
                }
                Some(RawWorker::Fixed(worker)) => {
                    if *worker > layout.max_node() {
                        return Err(invalid(
                            format!("{key}.worker"),
                            format!(
                                "{worker} does not fit in {} node bits (maximum {})",
                                layout.node_bits(),
                                layout.max_node()
                            ),
                        ));
                    }
                    WorkerConfig::Fixed(*worker)
                }
            };
            let group = ns
                .worker_group
                .as_deref()
                .map(|g| {
                    NamespaceName::new(g).map_err(|e| invalid(format!("{key}.worker_group"), e))
                })
                .transpose()?;
            if ns.allow_short_layout != Some(true) {
                check_layout_lifetime(&format!("{key}.layout"), &layout)?;
            }
            let shards = shards::RawShards {
                shards: ns.shards.as_deref(),
                logical_shards: ns.logical_shards,
                shard_range: ns.shard_range,
                worker_set: ns.worker.is_some(),
                group_set: ns.worker_group.is_some(),
            }
            .validate(key, &layout)?;
            Ok(KindConfig::Snowflake {
                layout,
                worker,
                group,
                shards,
            })
        }
        RawKind::Uuid7 | RawKind::Ulid => {
            let (kind, name) = if ns.kind == RawKind::Uuid7 {
                (KindConfig::Uuid7, "uuid7")
            } else {
                (KindConfig::Ulid, "ulid")
            };
            if seq_keys_set
                || ns.layout.is_some()
                || ns.worker.is_some()
                || ns.worker_group.is_some()
                || ns.allow_short_layout.is_some()
            {
                return Err(invalid(
                    key,
                    format!("a {name} namespace takes no settings besides kind"),
                ));
            }
            Ok(kind)
        }
    }
}

/// Refuses a layout whose timestamp field runs out within [`MIN_LAYOUT_LIFETIME`] of now (Baidu
/// uid-generator's 28-bit seconds ran out in 2024 and took its users down).
fn check_layout_lifetime(key: &str, layout: &Layout) -> Result<(), ConfigError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let horizon =
        now.saturating_add(u64::try_from(MIN_LAYOUT_LIFETIME.as_nanos()).unwrap_or(u64::MAX));
    let end = layout.end_of_time_nanos();
    if end < horizon {
        let years_left = end.saturating_sub(now) as f64 / (365.0 * DAY_SECS as f64 * 1e9);
        return Err(invalid(
            key,
            format!(
                "its timestamp runs out in {years_left:.1} years (at {} ms since 1970), less than 10: \
                 give it more timestamp bits, a coarser time unit or a later epoch, or set \
                 allow_short_layout = true if that is intended",
                end / 1_000_000
            ),
        ));
    }
    Ok(())
}

/// Namespaces of one lease group share one worker lease and one generator on a node, so they
/// must agree on the layout and on how the worker id is chosen.
fn check_worker_groups(node: &NodeConfig) -> Result<(), ConfigError> {
    let mut seen: BTreeMap<NamespaceName, (&NamespaceName, Layout, WorkerConfig)> = BTreeMap::new();
    for (name, kind) in &node.namespaces {
        if let KindConfig::Snowflake {
            layout,
            worker,
            group,
            shards: None,
        } = kind
        {
            let group = group.clone().unwrap_or_else(|| name.clone());
            match seen.get(&group) {
                Some((first, l, w)) if l != layout || w != worker => {
                    return Err(invalid(
                        format!("namespaces.{name}"),
                        format!("it shares worker group {group} with namespace {first}, so its layout and worker must be the same as {first}'s"),
                    ))
                }
                Some(_) => {}
                None => {
                    seen.insert(group, (name, *layout, *worker));
                }
            }
        }
    }
    Ok(())
}

/// The `[leases]` table, checked (see [`LeaseSettings`]).
fn lease_settings(raw: &RawLeases) -> Result<LeaseSettings, ConfigError> {
    let d = LeaseSettings::default();
    let ms = |key: &str, value: Option<u64>, default: Duration| match value {
        None => Ok(default),
        Some(ms) if (1..=MAX_TIMEOUT_MS).contains(&ms) => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(invalid(
            format!("leases.{key}"),
            format!("{ms}: must be from 1 to {MAX_TIMEOUT_MS} (an hour)"),
        )),
    };
    let settings = LeaseSettings {
        ttl: ms("ttl_ms", raw.ttl_ms, d.ttl)?,
        floor_ahead: ms("floor_ahead_ms", raw.floor_ahead_ms, d.floor_ahead)?,
        max_floor_wait: ms("max_floor_wait_ms", raw.max_floor_wait_ms, d.max_floor_wait)?,
        safety_margin: ms("safety_margin_ms", raw.safety_margin_ms, d.safety_margin)?,
    };
    if settings.floor_ahead >= settings.ttl {
        return Err(invalid(
            "leases.floor_ahead_ms",
            "must be below ttl_ms: a node restarted after a crash waits out its floor, which must pass before its old lease expires",
        ));
    }
    if settings.safety_margin >= settings.ttl / 2 {
        return Err(invalid(
            "leases.safety_margin_ms",
            "must be below half of ttl_ms, or a node would stop issuing between two renewals",
        ));
    }
    Ok(settings)
}

/// A custom layout table's mistake in one line (toml's message, without the position it would
/// give inside the table's own text), with the keys a table needs.
fn layout_table_error(e: &toml::de::Error) -> String {
    format!(
        "{} (a custom layout needs timestamp_bits, node_bits, sequence_bits, time_unit and epoch; \
         sequence_before_node and max_bits are optional)",
        e.message().trim()
    )
}

fn custom_layout(key: &str, c: &RawCustomLayout) -> Result<Layout, ConfigError> {
    let time_unit = humantime::parse_duration(&c.time_unit).map_err(|e| {
        invalid(
            format!("{key}.time_unit"),
            format!(
                "{:?}: {e} (write e.g. \"1ms\", \"10ms\", \"1s\")",
                c.time_unit
            ),
        )
    })?;
    let epoch = humantime::parse_rfc3339_weak(&c.epoch).map_err(|e| {
        invalid(
            format!("{key}.epoch"),
            format!("{:?}: {e} (write e.g. \"2020-01-01T00:00:00Z\")", c.epoch),
        )
    })?;
    let epoch_unix_ms = epoch
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| invalid(format!("{key}.epoch"), "must not be before 1970"))?
        .as_millis();
    let epoch_unix_ms =
        u64::try_from(epoch_unix_ms).map_err(|_| invalid(format!("{key}.epoch"), "too late"))?;
    Layout::new(LayoutSpec {
        timestamp_bits: c.timestamp_bits,
        node_bits: c.node_bits,
        sequence_bits: c.sequence_bits,
        time_unit,
        epoch_unix_ms,
        order: if c.sequence_before_node {
            FieldOrder::SequenceThenNode
        } else {
            FieldOrder::NodeThenSequence
        },
        max_bits: c.max_bits.unwrap_or(63),
    })
    .map_err(|e| invalid(key, e))
}

/// `cache` with its block sizes lowered to `spec`'s [`block_cap`]: for an auto-created namespace
/// whose stored spec is not the `[defaults]` one the sizes were checked against (a 32-bit
/// namespace created by an earlier configuration, say).
pub fn fit_cache(cache: CacheMode, spec: &SequenceSpec) -> CacheMode {
    let CacheMode::Buffered(policy) = cache else {
        return cache;
    };
    let cap = block_cap(spec);
    let mut config = *policy.config();
    config.sizing = match config.sizing {
        Sizing::Fixed(n) => Sizing::Fixed(n.min(cap)),
        Sizing::Adaptive {
            buffer_seconds,
            min_block,
            max_block,
        } => Sizing::Adaptive {
            buffer_seconds,
            min_block: min_block.min(cap),
            max_block: max_block.min(cap),
        },
    };
    // Lowering both bounds to one cap keeps min <= max and sizes >= 1: still valid.
    BufferPolicy::new(config).map_or(cache, CacheMode::Buffered)
}

/// Why a block of `n` ids is too large for a namespace of `spec` whose cap is `cap`.
fn block_too_large(n: u64, cap: u64, spec: &SequenceSpec) -> String {
    if cap == MAX_REFILL {
        format!(
            "{n} is more than one refill may reserve ({MAX_REFILL}); a larger block is never reached, so the node would refill on every tick"
        )
    } else {
        format!(
            "{n} is more than a {}-bit namespace of {} ids may buffer: at most {cap} (1/{SPACE_FRACTION} of its space, at least {MIN_BLOCK_CAP}), since a crash burns about two blocks",
            spec.width().bits(),
            spec.capacity()
        )
    }
}

fn sequence_settings(
    key: &str,
    s: &RawSequence,
    d: &RawSequence,
) -> Result<(SequenceSpec, CacheMode), ConfigError> {
    let width_bits = s.width.or(d.width).unwrap_or(64);
    let width = Width::from_bits(width_bits).ok_or_else(|| {
        invalid(
            format!("{key}.width"),
            format!("{width_bits}: must be 32 or 64"),
        )
    })?;
    let spec = SequenceSpec::new(
        width,
        s.start.or(d.start).unwrap_or(1),
        s.step.or(d.step).unwrap_or(1),
        s.offset.or(d.offset).unwrap_or(0),
    )
    .map_err(|e| invalid(key, e))?;
    let defaults = BufferConfig::default();
    let (d_secs, d_min, d_max) = match defaults.sizing {
        Sizing::Adaptive {
            buffer_seconds,
            min_block,
            max_block,
        } => (buffer_seconds, min_block, max_block),
        Sizing::Fixed(n) => (10.0, n, n),
    };
    let low_water = s.low_water.or(d.low_water).unwrap_or(defaults.low_water);
    let cap = block_cap(&spec);
    // A size set on the namespace above the cap is an error naming the key; one inherited from
    // `[defaults]` (a tier's large blocks, say) or built in is lowered to it, with a log line
    // for an inherited one.
    let bounded =
        |name: &str, own: Option<u64>, inherited: Option<u64>, builtin: u64| match (own, inherited)
        {
            (Some(n), _) if n > cap => Err(invalid(
                format!("{key}.{name}"),
                block_too_large(n, cap, &spec),
            )),
            (Some(n), _) => Ok(n),
            (None, Some(n)) if n > cap => {
                tracing::info!(
                    "{key}.{name}: [defaults] {name} = {n} is more than this {}-bit namespace \
                     allows; {cap} here",
                    spec.width().bits()
                );
                Ok(cap)
            }
            (None, Some(n)) => Ok(n),
            (None, None) => Ok(builtin.min(cap)),
        };
    let sizing = match s.cache.or(d.cache).unwrap_or(RawCache::Adaptive) {
        RawCache::Off => return Ok((spec, CacheMode::Off)),
        RawCache::Adaptive => Sizing::Adaptive {
            buffer_seconds: s.buffer_seconds.or(d.buffer_seconds).unwrap_or(d_secs),
            min_block: bounded("min_block", s.min_block, d.min_block, d_min)?,
            max_block: bounded("max_block", s.max_block, d.max_block, d_max)?,
        },
        RawCache::Fixed => {
            let Some(n) = s.block_size.or(d.block_size) else {
                return Err(invalid(
                    format!("{key}.block_size"),
                    "cache = \"fixed\" needs block_size",
                ));
            };
            Sizing::Fixed(bounded("block_size", s.block_size, d.block_size, n)?)
        }
    };
    let policy = BufferPolicy::new(BufferConfig {
        sizing,
        low_water,
        ..defaults
    })
    .map_err(|e| invalid(key, e))?;
    Ok((spec, CacheMode::Buffered(policy)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn full_example_parses() {
        let cfg = FileConfig::parse(
            r#"
            [server]
            http = "127.0.0.1:9000"
            grpc = "127.0.0.1:9001"
            auto_create = false
            max_count = 500
            max_namespaces = 20
            refill_wait_ms = 1

            [authority]
            kind = "file"
            path = "/var/lib/idmint"

            [namespaces.photos]
            kind = "sequence"
            width = 32
            step = 2
            offset = 1
            cache = "off"

            [namespaces.orders]
            kind = "sequence"
            cache = "fixed"
            block_size = 5000

            [namespaces.tweets]
            kind = "snowflake"
            layout = "twitter"
            worker = 7

            [namespaces.events]
            kind = "snowflake"
            worker = 1
            layout = { timestamp_bits = 40, node_bits = 3, sequence_bits = 20, time_unit = "1ms", epoch = "2024-01-01T00:00:00Z" }

            [namespaces.sessions]
            kind = "uuid7"
            "#,
        )
        .unwrap();
        assert_eq!(cfg.http, Some("127.0.0.1:9000".parse().unwrap()));
        assert_eq!(cfg.grpc, Some("127.0.0.1:9001".parse().unwrap()));
        assert!(!cfg.node.auto_create);
        assert_eq!(cfg.node.max_count, 500);
        assert_eq!(cfg.node.max_namespaces, 20);
        assert_eq!(cfg.node.refill_wait, Duration::from_millis(1));
        let photos = &cfg.node.namespaces[&NamespaceName::new("photos").unwrap()];
        assert!(
            matches!(photos, KindConfig::Sequence { cache: CacheMode::Off, spec, .. } if spec.step() == 2 && spec.width() == Width::Bits32)
        );
        let events = &cfg.node.namespaces[&NamespaceName::new("events").unwrap()];
        assert!(
            matches!(events, KindConfig::Snowflake { layout, worker: WorkerConfig::Fixed(1), group: None, shards: None } if layout.sequence_bits() == 20)
        );
    }

    /// Every mistake in a custom layout table names the key and what is missing or wrong,
    /// never serde's "did not match any variant".
    #[test]
    fn a_custom_layout_mistake_names_the_key() {
        let error = |layout: &str| {
            let text = format!("[namespaces.events]\nkind = \"snowflake\"\nlayout = {layout}\n");
            FileConfig::parse(&text).unwrap_err().to_string()
        };
        let missing = error(
            r#"{ timestamp_bits = 40, node_bits = 3, sequence_bits = 20, time_unit = "1ms" }"#,
        );
        assert!(
            missing.contains("namespaces.events.layout")
                && missing.contains("missing field `epoch`"),
            "{missing}"
        );
        let unknown = error(
            r#"{ timestamp_bits = 40, node_bits = 3, sequence_bits = 20, time_unit = "1ms", epoch = "2024-01-01T00:00:00Z", bits = 1 }"#,
        );
        assert!(
            unknown.contains("namespaces.events.layout") && unknown.contains("bits"),
            "{unknown}"
        );
        let number = error("7");
        assert!(
            number.contains("namespaces.events.layout") && number.contains("preset"),
            "{number}"
        );
        for message in [missing, unknown, number] {
            assert!(!message.contains("variant"), "{message}");
        }
    }

    /// The worker id is a lease by default, fixed, or the host's ordinal; groups must
    /// agree; `[leases]` is bounded; a layout that runs out within 10 years is refused unless
    /// allowed.
    #[test]
    fn worker_settings_parse_and_are_checked() {
        let cfg = FileConfig::parse(
            r#"
            [leases]
            ttl_ms = 6000
            floor_ahead_ms = 3000

            [namespaces.a]
            kind = "snowflake"

            [namespaces.b]
            kind = "snowflake"
            worker = "ordinal"
            worker_group = "shared"

            [namespaces.c]
            kind = "snowflake"
            worker = "ordinal"
            worker_group = "shared"
            "#,
        )
        .unwrap();
        let kind = |n: &str| cfg.node.namespaces[&NamespaceName::new(n).unwrap()].clone();
        assert!(matches!(
            kind("a"),
            KindConfig::Snowflake {
                worker: WorkerConfig::Lease,
                group: None,
                ..
            }
        ));
        assert!(matches!(
            kind("c"),
            KindConfig::Snowflake { worker: WorkerConfig::Ordinal, group: Some(g), .. } if g.as_str() == "shared"
        ));
        assert_eq!(cfg.node.leases.ttl, Duration::from_secs(6));
        assert_eq!(cfg.node.leases.floor_ahead, Duration::from_secs(3));
        assert_eq!(cfg.node.leases.max_floor_wait, Duration::from_secs(2));

        let err = |t: &str| FileConfig::parse(t).unwrap_err().to_string();
        let mixed = "[namespaces.a]\nkind = \"snowflake\"\nworker_group = \"g\"\n\
                     [namespaces.b]\nkind = \"snowflake\"\nworker_group = \"g\"\nlayout = \"sonyflake\"\n";
        assert!(
            err(mixed).contains("shares worker group g"),
            "{}",
            err(mixed)
        );
        assert!(err("[leases]\nttl_ms = 4000\n").starts_with("leases.floor_ahead_ms:"));
        assert!(err("[leases]\nsafety_margin_ms = 5000\n").starts_with("leases.safety_margin_ms:"));
        assert!(err("[leases]\nttl = 5\n").contains("unknown field"));
        let short = "[namespaces.x]\nkind = \"snowflake\"\nlayout = { timestamp_bits = 28, node_bits = 10, sequence_bits = 12, time_unit = \"1s\", epoch = \"2020-05-20T00:00:00Z\" }\n";
        assert!(err(short).contains("less than 10"), "{}", err(short));
        let allowed = format!("{short}allow_short_layout = true\n");
        assert!(FileConfig::parse(&allowed).is_ok());
        assert!(
            err("[namespaces.x]\nkind = \"sequence\"\nworker_group = \"g\"\n")
                .contains("belong to snowflake namespaces")
        );
    }

    #[test]
    fn errors_name_the_key() {
        let err = |t: &str| FileConfig::parse(t).unwrap_err().to_string();
        assert!(
            err("[namespaces.x]\nkind = \"snowflake\"\nworker = \"any\"\n")
                .contains("namespaces.x.worker")
        );
        assert!(
            err("[namespaces.x]\nkind = \"snowflake\"\nworker = 1024\n").contains("maximum 1023")
        );
        assert!(
            err("[namespaces.x]\nkind = \"sequence\"\nstep = 2\noffset = 2\n")
                .starts_with("namespaces.x:")
        );
        assert!(
            err("[namespaces.x]\nkind = \"sequence\"\nwidth = 16\n").contains("namespaces.x.width")
        );
        assert!(err("[namespaces.x]\nkind = \"snowflake\"\nworker = 1\nlayout = { timestamp_bits = 41, node_bits = 12, sequence_bits = 12, time_unit = \"1ms\", epoch = \"2020-01-01T00:00:00Z\" }\n").contains("65 bits"));
        assert!(err("[namespaces.x]\nkind = \"blob\"\n").contains("unknown kind"));
        assert!(err("[server]\nhttp = \"nowhere\"\n").contains("server.http"));
        assert!(err("[server]\ngrpc = \"nowhere\"\n").contains("server.grpc"));
        assert!(err("[server]\nhttpp = \"x\"\n").contains("unknown field"));
        assert!(err("[server]\nrefill_wait_ms = 0\n").starts_with("server.refill_wait_ms:"));
        assert!(err("[server]\nmax_namespaces = 0\n").starts_with("server.max_namespaces:"));
        assert!(
            err("[namespaces.\"bad/name\"]\nkind = \"uuid7\"\n").contains("namespaces.bad/name")
        );
    }

    /// A typo inside a namespace table names the key and lists the valid ones (not swallowed
    /// by `#[serde(flatten)]`, which disables `deny_unknown_fields`), and kind and cache are
    /// checked as the enums they are.
    #[test]
    fn namespace_typos_name_the_key_and_the_valid_ones() {
        let err = |t: &str| FileConfig::parse(t).unwrap_err().to_string();
        let e = err("[namespaces.x]\nkind = \"sequence\"\nblocksize = 5\n");
        assert!(e.contains("blocksize"), "{e}");
        assert!(e.contains("block_size") && e.contains("low_water"), "{e}");
        let e = err("[namespaces.x]\nkind = \"sequence\"\ncache = \"lru\"\n");
        assert!(
            e.contains("unknown cache mode \"lru\"; known: adaptive, fixed, off"),
            "{e}"
        );
        let e = err("[defaults]\ncache = \"lru\"\n");
        assert!(e.contains("unknown cache mode"), "{e}");
    }

    /// Guards a 32-bit namespace's space: `block_size = 4000000000` accepted would let the
    /// node reserve 14% of the space in 3 s (the buffer never reached its low-water mark, so it
    /// refilled on every tick) and a crash would burn all of it. Sizes are bounded by the
    /// namespace's space and by one refill, with errors naming the key.
    #[test]
    fn block_sizes_are_bounded_by_the_space_and_the_refill() {
        let err = |t: &str| FileConfig::parse(t).unwrap_err().to_string();
        let e = err("[namespaces.orders]\nkind = \"sequence\"\nwidth = 32\ncache = \"fixed\"\nblock_size = 4000000000\n");
        assert!(
            e.starts_with(
                "namespaces.orders.block_size: 4000000000 is more than a 32-bit namespace"
            ),
            "{e}"
        );
        assert!(e.contains("at most 2097151"), "{e}");
        // The cap itself is allowed; one more is not.
        let fixed = |n: u64| {
            format!("[namespaces.o]\nkind = \"sequence\"\nwidth = 32\ncache = \"fixed\"\nblock_size = {n}\n")
        };
        FileConfig::parse(&fixed(2_097_151)).unwrap();
        assert!(err(&fixed(2_097_152)).starts_with("namespaces.o.block_size:"));
        // The space is the spec's: step 4 leaves a quarter.
        let e =
            err("[namespaces.o]\nkind = \"sequence\"\nwidth = 32\nstep = 4\nmax_block = 600000\n");
        assert!(
            e.starts_with("namespaces.o.max_block:") && e.contains("at most 524287"),
            "{e}"
        );
        let e = err("[defaults]\nwidth = 32\nmin_block = 3000000\nmax_block = 3000000\n");
        assert!(e.starts_with("defaults.min_block:"), "{e}");
        // 64-bit: one refill is the bound.
        let e =
            err("[namespaces.o]\nkind = \"sequence\"\ncache = \"fixed\"\nblock_size = 10000001\n");
        assert!(
            e.starts_with("namespaces.o.block_size:") && e.contains("one refill"),
            "{e}"
        );
        assert!(err("[defaults]\nmax_block = 20000000\n").starts_with("defaults.max_block:"));
        // Defaults above a small namespace's cap are lowered to it, not an error.
        let cfg =
            FileConfig::parse("[namespaces.o]\nkind = \"sequence\"\nwidth = 32\nstep = 1000000\n")
                .unwrap();
        let o = &cfg.node.namespaces[&NamespaceName::new("o").unwrap()];
        let KindConfig::Sequence {
            cache: CacheMode::Buffered(p),
            ..
        } = o
        else {
            panic!("{o:?}")
        };
        assert_eq!(
            p.config().sizing,
            Sizing::Adaptive {
                buffer_seconds: 10.0,
                min_block: 1000,
                max_block: 1000
            }
        );
        // A tier's [defaults] (large blocks) with a 32-bit namespace declared: the inherited
        // sizes are lowered to its cap; set on the namespace itself they stay an error.
        let cfg = FileConfig::parse(
            "[defaults]\nmin_block = 5000000\nmax_block = 10000000\n[namespaces.small]\nkind = \"sequence\"\nwidth = 32\n[namespaces.wide]\nkind = \"sequence\"\n",
        )
        .unwrap();
        let sizing = |name: &str| match &cfg.node.namespaces[&NamespaceName::new(name).unwrap()] {
            KindConfig::Sequence {
                cache: CacheMode::Buffered(p),
                ..
            } => p.config().sizing,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            sizing("small"),
            Sizing::Adaptive {
                buffer_seconds: 10.0,
                min_block: 2_097_151,
                max_block: 2_097_151
            }
        );
        assert_eq!(
            sizing("wide"),
            Sizing::Adaptive {
                buffer_seconds: 10.0,
                min_block: 5_000_000,
                max_block: 10_000_000
            }
        );
        let e = err("[defaults]\nmax_block = 10000000\n[namespaces.small]\nkind = \"sequence\"\nwidth = 32\nmax_block = 10000000\n");
        assert!(e.starts_with("namespaces.small.max_block:"), "{e}");
        // A small namespace still takes blocks of MIN_BLOCK_CAP.
        let small = |n: u64| {
            format!("[namespaces.o]\nkind = \"sequence\"\nwidth = 32\nstart = 2147483000\ncache = \"fixed\"\nblock_size = {n}\n")
        };
        FileConfig::parse(&small(1000)).unwrap();
        assert!(err(&small(1001)).contains("at most 1000"));
    }

    /// The connection settings: parsed, bounded, errors naming the key.
    #[test]
    fn connection_settings_parse_and_are_bounded() {
        let cfg = FileConfig::parse("[server]\nheader_read_timeout_ms = 500\nidle_timeout_ms = 700\nmax_connections = 3\ndrain_timeout_ms = 200\n").unwrap();
        assert_eq!(
            cfg.node.listen,
            ListenConfig {
                header_read_timeout: Duration::from_millis(500),
                idle_timeout: Duration::from_millis(700),
                max_connections: 3,
                drain_timeout: Duration::from_millis(200),
                max_streams: 256,
            }
        );
        let err = |t: &str| FileConfig::parse(t).unwrap_err().to_string();
        for key in [
            "header_read_timeout_ms",
            "idle_timeout_ms",
            "drain_timeout_ms",
        ] {
            assert!(err(&format!("[server]\n{key} = 0\n")).starts_with(&format!("server.{key}:")));
            assert!(
                err(&format!("[server]\n{key} = 3600001\n")).starts_with(&format!("server.{key}:"))
            );
        }
        assert!(err("[server]\nmax_connections = 0\n").starts_with("server.max_connections:"));
        assert!(err("[server]\nmax_connections = 1000001\n").starts_with("server.max_connections:"));
    }

    /// `max_count`, `max_block_request` and `refill_wait_ms` have upper bounds too.
    #[test]
    fn request_sizes_and_waits_are_bounded() {
        let err = |t: &str| FileConfig::parse(t).unwrap_err().to_string();
        assert!(err("[server]\nmax_count = 10000001\n").starts_with("server.max_count:"));
        let e = err(
            "[server]\nmax_count = 3000000\n[namespaces.small]\nkind = \"sequence\"\nwidth = 32\n",
        );
        assert!(
            e.starts_with("server.max_count:") && e.contains("namespaces.small"),
            "{e}"
        );
        FileConfig::parse("[server]\nmax_count = 3000000\n").unwrap();
        assert!(err("[server]\nmax_block_request = 0\n").starts_with("server.max_block_request:"));
        assert!(err("[server]\nmax_block_request = 10000001\n")
            .starts_with("server.max_block_request:"));
        let cfg = FileConfig::parse("[server]\nmax_block_request = 5000\n").unwrap();
        assert_eq!(cfg.node.max_block_request, 5000);
        assert!(err("[server]\nrefill_wait_ms = 60001\n").starts_with("server.refill_wait_ms:"));
        for bad in ["0", "36501"] {
            assert!(err(&format!("[server]\nexhaustion_warning_days = {bad}\n"))
                .starts_with("server.exhaustion_warning_days:"));
        }
        for bad in [0, MAX_EXHAUSTION_WARNING_DAYS + 1] {
            assert!(err(&format!("[server]\naudit_retention_days = {bad}\n"))
                .starts_with("server.audit_retention_days:"));
        }
        let cfg = FileConfig::parse("[server]\naudit_retention_days = 90\n").unwrap();
        assert_eq!(
            cfg.node.audit_retention,
            Some(Duration::from_secs(90 * DAY_SECS))
        );
        assert_eq!(FileConfig::parse("").unwrap().node.audit_retention, None);
        let cfg = FileConfig::parse("[server]\nexhaustion_warning_days = 30\n").unwrap();
        assert_eq!(
            cfg.node.exhaustion_warning,
            Duration::from_secs(30 * 86_400)
        );
        FileConfig::parse("[server]\nrefill_wait_ms = 60000\n").unwrap();
    }

    #[test]
    fn authorities_parse() {
        let cfg = FileConfig::parse(
            "[authority]\nkind = \"postgres\"\nurl = \"postgres://u@h/db\"\ntimeout_ms = 800\n",
        )
        .unwrap();
        assert!(matches!(
            &cfg.authority,
            AuthorityConfig::Postgres(pg) if pg.url == "postgres://u@h/db"
                && pg.table == idmint_store::config::PostgresConfig::DEFAULT_TABLE
                && pg.op_timeout == Duration::from_millis(800)
        ));
        let multi = r#"
            [defaults]
            step = 2
            [authority]
            kind = "multi"
            [[authority.members]]
            kind = "mysql"
            mode = "tickets"
            url = "mysql://root@127.0.0.1:3307/x"
            offset = 1
            [[authority.members]]
            kind = "mysql"
            mode = "tickets"
            url = "mysql://root@127.0.0.1:3308/x"
            offset = 0
        "#;
        let cfg = FileConfig::parse(multi).unwrap();
        assert!(
            matches!(&cfg.authority, AuthorityConfig::Multi(m) if m.members().len() == 2 && m.members()[0].offset == 1)
        );
        let err = |t: &str| FileConfig::parse(t).unwrap_err().to_string();
        assert!(err(&multi.replace("step = 2", "step = 1")).contains("set step to at least 2"));
        assert!(err(&multi.replace("offset = 0", "offset = 1")).contains("same offset"));
        assert!(err("[authority]\nkind = \"etcd\"\n").contains("authority.endpoints"));
        assert!(
            err("[authority]\nkind = \"mysql\"\nurl = \"x\"\nmode = \"fast\"\n")
                .contains("authority.mode")
        );
        assert!(err("[authority]\nkind = \"cassandra\"\n").contains("unknown authority"));
    }

    #[test]
    fn tls_files_are_both_or_neither() {
        let cfg =
            FileConfig::parse("[server]\ntls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n").unwrap();
        assert_eq!(
            cfg.tls,
            Some(TlsFiles {
                cert: PathBuf::from("/c.pem"),
                key: PathBuf::from("/k.pem"),
                client_ca: None,
            })
        );
        assert_eq!(FileConfig::parse("").unwrap().tls, None);
        let err = |t: &str| FileConfig::parse(t).unwrap_err().to_string();
        assert!(err("[server]\ntls_cert = \"/c.pem\"\n").starts_with("server.tls_key: missing"));
        assert!(err("[server]\ntls_key = \"/k.pem\"\n").starts_with("server.tls_cert: missing"));
        let mutual = FileConfig::parse(
            "[server]\ntls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\nclient_ca_file = \"/ca.pem\"\n",
        )
        .unwrap();
        assert_eq!(
            mutual.tls.and_then(|t| t.client_ca),
            Some(PathBuf::from("/ca.pem"))
        );
        assert!(err("[server]\nclient_ca_file = \"/ca.pem\"\n")
            .starts_with("server.client_ca_file: set, but TLS is off"));
    }

    #[test]
    fn empty_file_is_the_default() {
        let cfg = FileConfig::parse("").unwrap();
        assert_eq!(cfg.node, NodeConfig::default());
        assert_eq!(
            cfg.authority,
            AuthorityConfig::File(idmint_store::config::FileConfig { path: None })
        );
    }
}
