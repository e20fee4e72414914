//! The authority configuration: which backend holds the watermarks, and that backend's settings,
//! as the `[authority]` table of `idmint.toml` (documented key by key in
//! `docs/configuration.md`) describes them.
//!
//! [`AuthorityConfig`] is the one type the node and the binary handle; each of its variants holds
//! the very config type its backend takes ([`PostgresConfig`], [`MysqlConfig`], [`EtcdConfig`],
//! [`FileConfig`]), so a key added to a backend is parsed, documented and used in this crate
//! alone. [`crate::connect()`] turns a config into an `Arc<dyn Authority>`.
//!
//! Invariants:
//! - parsing never depends on cargo features: a config naming a backend this build lacks parses,
//!   and only connecting to it fails (with the feature to rebuild with);
//! - every key is known: a stray or misspelt key is an error naming it, never a silently ignored
//!   setting (each backend's table is `deny_unknown_fields`, and `kind`, `offset` and `members`
//!   are checked here, where serde's internally tagged enums would lose the key);
//! - every error names its key as a dotted path from the table's root, e.g.
//!   `authority.members[1].offset: ...` (array indices count from 0, as in TOML);
//! - a [`MultiConfig`] cannot be wrong: at least two members, none `memory` or `multi`, offsets
//!   distinct;
//! - a connection URL is never printed: `Debug` and `Display` leave passwords out.
//!
//! What it does not do: read files or the environment (the binary's job), connect (see
//! [`crate::connect()`]), or check namespaces against a multi authority's offsets (the node's:
//! see [`AuthorityConfig::residue_offsets`]).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Default timeout of one authority operation, connecting included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default table of the PostgreSQL authority and of the MySQL authority's block mode.
pub const DEFAULT_TABLE: &str = "idmint_namespaces";

/// The authority a configuration selects, with its settings.
///
/// Deserialized from a table whose `kind` names the variant (`file`, `memory`, `postgres`,
/// `mysql`, `etcd`, `multi`) and whose other keys are that backend's; errors name keys under
/// `authority` (use [`AuthorityConfig::deserialize_at`] for a table elsewhere). The default is
/// the file authority in the data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthorityConfig {
    /// The embedded file store (cargo feature `file`).
    File(FileConfig),
    /// In memory: nothing survives a restart, so ids repeat after one. For experiments only.
    Memory,
    /// PostgreSQL, or a database speaking its protocol (cargo feature `postgres`).
    Postgres(PostgresConfig),
    /// MySQL or MariaDB, blocks or Flickr tickets (cargo feature `mysql`).
    Mysql(MysqlConfig),
    /// etcd v3 (cargo feature `etcd`).
    Etcd(EtcdConfig),
    /// ZooKeeper (cargo feature `zookeeper`).
    Zookeeper(ZookeeperConfig),
    /// Redis 7 or Valkey (cargo feature `redis`).
    Redis(RedisConfig),
    /// Several authorities, each owning one residue class of every namespace.
    Multi(MultiConfig),
    /// Other idmint nodes, over gRPC: blocks come from the tier above (cargo feature
    /// `upstream`).
    Upstream(UpstreamConfig),
}

impl Default for AuthorityConfig {
    /// The file authority in the data directory.
    fn default() -> Self {
        AuthorityConfig::File(FileConfig::default())
    }
}

impl AuthorityConfig {
    /// The kind, as written in the config: `file`, `memory`, `postgres`, `mysql`, `etcd` or
    /// `multi`.
    pub fn kind(&self) -> &'static str {
        match self {
            AuthorityConfig::File(_) => "file",
            AuthorityConfig::Memory => "memory",
            AuthorityConfig::Postgres(_) => "postgres",
            AuthorityConfig::Mysql(_) => "mysql",
            AuthorityConfig::Etcd(_) => "etcd",
            AuthorityConfig::Zookeeper(_) => "zookeeper",
            AuthorityConfig::Redis(_) => "redis",
            AuthorityConfig::Multi(_) => "multi",
            AuthorityConfig::Upstream(_) => "upstream",
        }
    }

    /// For a multi authority, every member's offset (the residue class it owns), in member
    /// order; `None` for a single authority. The offsets are distinct. The node checks them
    /// against its sequence namespaces: each namespace's step must exceed every offset, and no
    /// namespace may set an offset of its own.
    pub fn residue_offsets(&self) -> Option<Vec<u64>> {
        match self {
            AuthorityConfig::Multi(multi) => Some(multi.members.iter().map(|m| m.offset).collect()),
            _ => None,
        }
    }

    /// Whether ids survive a restart of the process (every kind but `memory`; an upstream
    /// authority's upper tier is durable, itself checked by its own node record).
    pub fn is_durable(&self) -> bool {
        !matches!(self, AuthorityConfig::Memory)
    }

    /// Parses the table `deserializer` holds, naming keys in errors under `key` (a dotted path,
    /// e.g. `authority` or `tiers.upper.authority`).
    pub fn deserialize_at<'de, D: Deserializer<'de>>(
        key: &str,
        deserializer: D,
    ) -> Result<Self, D::Error> {
        let table = toml::Table::deserialize(deserializer)?;
        Self::from_table(key, table, Position::Top).map_err(D::Error::custom)
    }

    fn from_table(
        key: &str,
        mut table: toml::Table,
        at: Position,
    ) -> Result<Self, AuthorityConfigError> {
        let kind = match table.remove("kind") {
            None => "file".to_owned(),
            Some(toml::Value::String(kind)) => kind,
            Some(other) => {
                return Err(invalid(
                    format!("{key}.kind"),
                    format!("expected a string, found {}", other.type_str()),
                ))
            }
        };
        if at == Position::Member {
            match kind.as_str() {
                "memory" => {
                    return Err(invalid(format!("{key}.kind"), "memory cannot be a member"))
                }
                "multi" => {
                    return Err(invalid(
                        format!("{key}.kind"),
                        "a multi authority cannot be a member of another",
                    ))
                }
                _ => {}
            }
        }
        if table.contains_key("offset") && at == Position::Top {
            return Err(invalid(
                format!("{key}.offset"),
                "offset belongs to the members of a multi authority",
            ));
        }
        if table.contains_key("members") && kind != "multi" {
            return Err(invalid(
                format!("{key}.members"),
                "members belong to a multi authority",
            ));
        }
        let config = match kind.as_str() {
            "file" => AuthorityConfig::File(typed(key, table)?),
            "memory" => {
                typed::<Empty>(key, table)?;
                AuthorityConfig::Memory
            }
            "postgres" => AuthorityConfig::Postgres(typed(key, table)?),
            "mysql" => AuthorityConfig::Mysql(typed(key, table)?),
            "etcd" => {
                let config: EtcdConfig = typed(key, table)?;
                if config.endpoints.is_empty() {
                    return Err(needs(key, "etcd", "endpoints"));
                }
                AuthorityConfig::Etcd(config)
            }
            "zookeeper" => {
                let config: ZookeeperConfig = typed(key, table)?;
                config.validate(key)?;
                AuthorityConfig::Zookeeper(config)
            }
            "redis" => {
                let config: RedisConfig = typed(key, table)?;
                config.validate(key)?;
                AuthorityConfig::Redis(config)
            }
            "multi" => AuthorityConfig::Multi(MultiConfig::from_table(key, table)?),
            "upstream" => {
                let config: UpstreamConfig = typed(key, table)?;
                config.validate(key)?;
                AuthorityConfig::Upstream(config)
            }
            other => {
                return Err(invalid(
                    format!("{key}.kind"),
                    format!("unknown authority {other:?}; known: {}", KINDS.join(", ")),
                ))
            }
        };
        Ok(config)
    }
}

impl<'de> Deserialize<'de> for AuthorityConfig {
    /// The `[authority]` table: errors name keys under `authority`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        AuthorityConfig::deserialize_at("authority", deserializer)
    }
}

impl fmt::Display for AuthorityConfig {
    /// One line for logs, without secrets: the kind and the settings that identify it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthorityConfig::File(c) => match &c.path {
                Some(path) => write!(f, "file authority in {}", path.display()),
                None => f.write_str("file authority in the data directory"),
            },
            AuthorityConfig::Memory => f.write_str(
                "memory authority: nothing survives a restart, ids WILL repeat after one",
            ),
            AuthorityConfig::Postgres(c) => {
                write!(
                    f,
                    "PostgreSQL authority at {}, table {}",
                    redact_url(&c.url),
                    c.table
                )
            }
            AuthorityConfig::Mysql(c) => match c.mode {
                MysqlMode::Blocks => write!(
                    f,
                    "MySQL/MariaDB authority at {}, blocks in table {}",
                    redact_url(&c.url),
                    c.table
                ),
                MysqlMode::Tickets => write!(
                    f,
                    "MySQL/MariaDB authority at {}, Flickr ticket mode",
                    redact_url(&c.url)
                ),
            },
            AuthorityConfig::Etcd(c) => {
                let endpoints: Vec<String> = c.endpoints.iter().map(|e| redact_url(e)).collect();
                write!(
                    f,
                    "etcd authority at {}, prefix {}",
                    endpoints.join(","),
                    c.prefix
                )
            }
            AuthorityConfig::Zookeeper(c) => {
                write!(
                    f,
                    "ZooKeeper authority at {}, root {}",
                    c.servers.join(","),
                    c.root
                )
            }
            AuthorityConfig::Redis(c) => {
                write!(
                    f,
                    "Redis authority at {}, keys {{{}}}:*",
                    redact_url(&c.url),
                    c.prefix
                )
            }
            AuthorityConfig::Upstream(c) => {
                let urls: Vec<String> = c.urls.iter().map(|u| redact_url(u)).collect();
                write!(f, "upstream authority: idmint nodes at {}", urls.join(","))
            }
            AuthorityConfig::Multi(m) => {
                write!(f, "multi authority, each member owning one residue class:")?;
                for (i, member) in m.members.iter().enumerate() {
                    write!(
                        f,
                        " [{}] offset {}: {};",
                        i + 1,
                        member.offset,
                        member.authority
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// Where a table sits: at the top, or as a member of a multi authority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    Top,
    Member,
}

/// The kinds, as the config names them.
const KINDS: [&str; 9] = [
    "file",
    "postgres",
    "mysql",
    "etcd",
    "zookeeper",
    "redis",
    "multi",
    "upstream",
    "memory",
];

/// A configuration error, naming the key at fault.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AuthorityConfigError {
    /// A key is missing, unknown, or holds an invalid value.
    #[error("{key}: {message}")]
    Invalid {
        /// Dotted key path, e.g. `authority.members[1].offset`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> AuthorityConfigError {
    AuthorityConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

fn needs(key: &str, kind: &str, field: &str) -> AuthorityConfigError {
    let example = match field {
        "endpoints" => ", e.g. [\"http://127.0.0.1:2379\"]",
        "servers" => ", e.g. [\"127.0.0.1:2181\"]",
        "urls" => ", e.g. [\"http://global-a:7879\", \"http://global-b:7879\"]",
        "url" if kind == "postgres" => ", e.g. \"postgres://user:password@host:5432/db\"",
        "url" if kind == "mysql" => ", e.g. \"mysql://user:password@host:3306/db\"",
        "url" if kind == "redis" => ", e.g. \"redis://:password@host:6379/0\"",
        _ => "",
    };
    invalid(
        format!("{key}.{field}"),
        format!("a {kind} authority needs {field}{example}"),
    )
}

/// Deserializes one backend's table into its config type, naming the key of any error. serde's
/// own messages name the field in backticks; they are rewritten to lead with the key path.
fn typed<T: serde::de::DeserializeOwned + Named>(
    key: &str,
    table: toml::Table,
) -> Result<T, AuthorityConfigError> {
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        // toml appends "in `key`" on a second line: the path already says it.
        let full = e.inner().to_string();
        let message = full.lines().next().unwrap_or_default();
        let path = e.path().to_string();
        if let Some(field) = backticked(message, "missing field `") {
            return needs(key, T::KIND, field);
        }
        let key = if path == "." {
            key.to_owned()
        } else {
            format!("{key}.{path}")
        };
        match message.strip_prefix("unknown field `") {
            Some(rest) => {
                let expected = rest
                    .split_once(", ")
                    .map_or("", |(_, e)| e)
                    .replace('`', "");
                let expected = if expected.is_empty() {
                    format!("a {} authority takes no other key", T::KIND)
                } else {
                    expected
                };
                invalid(key, format!("unknown field, {expected}"))
            }
            None => invalid(key, message),
        }
    })
}

/// The text between `prefix` and the next backtick, if `message` starts with `prefix`.
fn backticked<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    message.strip_prefix(prefix)?.split('`').next()
}

/// The kind a config type belongs to, for messages.
trait Named {
    const KIND: &'static str;
}

/// The (empty) table of the memory authority.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

impl Named for Empty {
    const KIND: &'static str = "memory";
}

/// `timeout_ms`: a positive number of milliseconds.
mod timeout_ms {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match u64::deserialize(d)? {
            0 => Err(D::Error::custom("must be above 0")),
            ms => Ok(Duration::from_millis(ms)),
        }
    }
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

fn default_table() -> String {
    DEFAULT_TABLE.to_owned()
}

/// `scheme://user:***@host/…`: a URL without its password, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<invalid URL>".into();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{scheme}://{user}:***@{host}{path}")
            } else {
                format!("{scheme}://{user}@{host}{path}")
            }
        }
        None => url.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// File

/// Configuration of the file authority (`FileAuthority`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The directory of the store; `None`: the data directory. One process per directory.
    #[serde(default)]
    pub path: Option<PathBuf>,
}

impl Named for FileConfig {
    const KIND: &'static str = "file";
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// Configuration of the PostgreSQL authority (`postgres::PostgresAuthority`).
///
/// Keys: `url` (required), `table`, `timeout_ms` (into [`PostgresConfig::op_timeout`]), `tls`
/// and `ca_file`. `pool_size` is not a key of the file: it is set in code.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// A libpq-style connection string or URL, e.g.
    /// `postgres://idmint:secret@db.example:5432/idmint`. Never printed (it may hold a password).
    pub url: String,
    /// The table of namespaces, a single identifier (quoted, so taken exactly as written; use
    /// `options=-csearch_path%3Dmyschema` in the URL to place it in another schema).
    #[serde(default = "default_table")]
    pub table: String,
    /// The bound on every operation: waiting for a connection, connecting, and the statements.
    #[serde(
        rename = "timeout_ms",
        default = "default_timeout",
        with = "timeout_ms"
    )]
    pub op_timeout: Duration,
    /// The most connections open at once.
    #[serde(skip_deserializing, default = "PostgresConfig::default_pool_size")]
    pub pool_size: usize,
    /// `tls`: `"off"` (the default: plain, or what the URL's `sslmode` asks for with no
    /// certificate check), `"require"` (encrypted, the server's certificate not checked) or
    /// `"verify-full"` (encrypted, the certificate checked against `ca_file` and the host name).
    #[serde(default)]
    pub tls: crate::tls::TlsMode,
    /// `ca_file`: the PEM file of the CA that signed the server's certificate; needed by, and
    /// only by, `tls = "verify-full"`. Read when the authority connects.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `accept_unsafe_durability`: use a server whose `fsync` or `full_page_writes` is off
    /// (a crash may then lose or tear acknowledged commits, and ids repeat); refused otherwise.
    #[serde(default)]
    pub accept_unsafe_durability: bool,
}

impl PostgresConfig {
    /// The default table name.
    pub const DEFAULT_TABLE: &'static str = DEFAULT_TABLE;
    /// The default operation timeout.
    pub const DEFAULT_OP_TIMEOUT: Duration = DEFAULT_TIMEOUT;
    /// The default pool size.
    pub const DEFAULT_POOL_SIZE: usize = 4;

    /// A configuration for `url` with the defaults: table `idmint_namespaces`, 5 s timeout,
    /// 4 connections.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            table: Self::DEFAULT_TABLE.to_owned(),
            op_timeout: Self::DEFAULT_OP_TIMEOUT,
            pool_size: Self::DEFAULT_POOL_SIZE,
            tls: crate::tls::TlsMode::Off,
            ca_file: None,
            accept_unsafe_durability: false,
        }
    }

    fn default_pool_size() -> usize {
        Self::DEFAULT_POOL_SIZE
    }
}

impl Named for PostgresConfig {
    const KIND: &'static str = "postgres";
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: leave it out.
        f.debug_struct("PostgresConfig")
            .field("url", &"<redacted>")
            .field("table", &self.table)
            .field("op_timeout", &self.op_timeout)
            .field("pool_size", &self.pool_size)
            .field("tls", &self.tls)
            .field("ca_file", &self.ca_file)
            .field("accept_unsafe_durability", &self.accept_unsafe_durability)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// MySQL

/// Which of the MySQL authority's two modes (`mode` in the config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MysqlMode {
    /// Watermarks in one table, a block per reservation (`mysql::MysqlAuthority`).
    #[default]
    Blocks,
    /// Flickr's ticket servers, one id per reservation (`mysql::MysqlTicketAuthority`).
    Tickets,
}

/// How many connections a MySQL authority keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// At most this many operations run at once (each holds one connection); more wait, within
    /// their timeout. Default 10.
    pub max_connections: usize,
    /// At most this many connections are kept open between operations. Default 10.
    pub max_idle: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_connections: 10,
            max_idle: 10,
        }
    }
}

/// Configuration of the MySQL/MariaDB authority, for both modes.
///
/// Keys: `url` (required), `table`, `mode`, `timeout_ms` (into [`MysqlConfig::op_timeout`]),
/// `accept_unsafe_durability`.
/// `pool` is not a key of the file: it is set in code.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlConfig {
    /// `mysql://user:password@host:port/database[?options]` (mysql_async's URL syntax). The
    /// database must be named. Unless the URL says `prefer_socket=true`, the connection stays
    /// on TCP (mysql_async would otherwise switch to the server's Unix socket when it is local).
    pub url: String,
    /// Block mode's table. Default [`DEFAULT_TABLE`]. Letters, digits, `_` and `$`, at most 64.
    /// Ticket mode ignores it (its tables are named by `mysql::ticket_table_name`).
    #[serde(default = "default_table")]
    pub table: String,
    /// Which mode [`crate::connect()`] starts. `MysqlAuthority::connect` and
    /// `MysqlTicketAuthority::connect` each run their own mode and ignore it.
    #[serde(default)]
    pub mode: MysqlMode,
    /// The longest any operation may take, connecting included. Default 5 s.
    #[serde(
        rename = "timeout_ms",
        default = "default_timeout",
        with = "timeout_ms"
    )]
    pub op_timeout: Duration,
    /// Serve from a server that does not make every commit durable
    /// (`innodb_flush_log_at_trx_commit` not 1, or binary logging on with `sync_binlog` not 1).
    /// Default `false`: connecting to such a server is refused, since a crash of it could forget
    /// reservations already handed out, and ids would repeat. `true` accepts it with a warning
    /// in the log (for test servers, or storage whose durability is ensured otherwise).
    #[serde(default)]
    pub accept_unsafe_durability: bool,
    /// Connection pool sizes.
    #[serde(skip_deserializing)]
    pub pool: PoolConfig,
    /// `tls`: as [`PostgresConfig::tls`] (`"off"`, `"require"`, `"verify-full"`).
    #[serde(default)]
    pub tls: crate::tls::TlsMode,
    /// `ca_file`: as [`PostgresConfig::ca_file`].
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

impl MysqlConfig {
    /// The defaults for `url`: table [`DEFAULT_TABLE`], block mode, 5 s timeout, durability
    /// checked, [`PoolConfig::default`].
    pub fn new(url: impl Into<String>) -> Self {
        MysqlConfig {
            url: url.into(),
            table: DEFAULT_TABLE.to_owned(),
            mode: MysqlMode::Blocks,
            op_timeout: DEFAULT_TIMEOUT,
            accept_unsafe_durability: false,
            pool: PoolConfig::default(),
            tls: crate::tls::TlsMode::Off,
            ca_file: None,
        }
    }
}

impl Named for MysqlConfig {
    const KIND: &'static str = "mysql";
}

impl fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlConfig")
            .field("url", &redact_url(&self.url))
            .field("table", &self.table)
            .field("mode", &self.mode)
            .field("op_timeout", &self.op_timeout)
            .field("accept_unsafe_durability", &self.accept_unsafe_durability)
            .field("pool", &self.pool)
            .field("tls", &self.tls)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// etcd

/// Configuration of the etcd authority (`etcd::EtcdAuthority`). Parsed in every build; only
/// connecting needs the cargo feature `etcd`.
///
/// Keys: `endpoints` (required, not empty), `prefix`, `timeout_ms` (into
/// [`EtcdConfig::op_timeout`]), `tls`, `ca_file`, `user`, `password`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdConfig {
    /// Client URLs of the cluster's members, `http://host:port` (or `host:port`);
    /// `https://host:port` (or `host:port`) with `tls = "verify-full"`.
    pub endpoints: Vec<String>,
    /// Prefix of every key idmint writes; namespaces live under `<prefix>ns/`. Ends with `/` by
    /// convention. Default `/idmint/`.
    #[serde(default = "EtcdConfig::default_prefix")]
    pub prefix: String,
    /// Bound on every call to etcd (and on waiting behind other operations on a namespace).
    /// Default 5 s.
    #[serde(
        rename = "timeout_ms",
        default = "default_timeout",
        with = "timeout_ms"
    )]
    pub op_timeout: Duration,
    /// `tls`: `"off"` (the default) or `"verify-full"` (the members' certificates checked
    /// against `ca_file` and the endpoints' host names). `"require"` is refused: the gRPC
    /// client always checks certificates.
    #[serde(default)]
    pub tls: crate::tls::TlsMode,
    /// `ca_file`: the PEM file of the CA of the members' certificates; needed by, and only by,
    /// `tls = "verify-full"`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `user`: etcd user name (authentication enabled on the cluster); needs `password`.
    #[serde(default)]
    pub user: Option<String>,
    /// `password`: the password of `user`. Never printed.
    #[serde(default)]
    pub password: Option<String>,
}

impl EtcdConfig {
    /// The default prefix.
    pub const DEFAULT_PREFIX: &'static str = "/idmint/";
    /// The default timeout of one call.
    pub const DEFAULT_OP_TIMEOUT: Duration = DEFAULT_TIMEOUT;

    /// A config for `endpoints` with the default prefix and timeout.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            op_timeout: Self::DEFAULT_OP_TIMEOUT,
            tls: crate::tls::TlsMode::Off,
            ca_file: None,
            user: None,
            password: None,
        }
    }

    fn default_prefix() -> String {
        Self::DEFAULT_PREFIX.to_owned()
    }
}

impl Named for EtcdConfig {
    const KIND: &'static str = "etcd";
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoints: Vec<String> = self.endpoints.iter().map(|e| redact_url(e)).collect();
        f.debug_struct("EtcdConfig")
            .field("endpoints", &endpoints)
            .field("prefix", &self.prefix)
            .field("op_timeout", &self.op_timeout)
            .field("tls", &self.tls)
            .field("ca_file", &self.ca_file)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// ZooKeeper

/// Configuration of the ZooKeeper authority (`zookeeper::ZookeeperAuthority`). Parsed in every
/// build; only connecting needs the cargo feature `zookeeper`.
///
/// Keys: `servers` (required, not empty, each `host:port`), `root`, `op_timeout_ms` (or
/// `timeout_ms`, into
/// [`ZookeeperConfig::op_timeout`]), `session_timeout_ms` (into
/// [`ZookeeperConfig::session_timeout`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZookeeperConfig {
    /// The ensemble's servers, `host:port` each; joined with `,` into the connect string.
    pub servers: Vec<String>,
    /// The znode under which everything lives (`<root>/namespaces/<name>`,
    /// `<root>/leases/<group>`): an absolute path without a trailing `/`. Default `/idmint`.
    #[serde(default = "ZookeeperConfig::default_root")]
    pub root: String,
    /// Bound on every call to ZooKeeper, connecting included (and on waiting behind other
    /// operations on a namespace). Default 5 s. `timeout_ms`, the other backends' name, is
    /// accepted too.
    #[serde(
        rename = "op_timeout_ms",
        alias = "timeout_ms",
        default = "default_timeout",
        with = "timeout_ms"
    )]
    pub op_timeout: Duration,
    /// The timeout of the authority's own ZooKeeper session (the server clamps it to its
    /// `minSessionTimeout`/`maxSessionTimeout`). Worker leases do not use it: each lease has a
    /// session of its own whose timeout is the lease's TTL. Default 10 s.
    #[serde(
        rename = "session_timeout_ms",
        default = "ZookeeperConfig::default_session_timeout",
        with = "timeout_ms"
    )]
    pub session_timeout: Duration,
}

impl ZookeeperConfig {
    /// The default root znode.
    pub const DEFAULT_ROOT: &'static str = "/idmint";
    /// The default timeout of one call.
    pub const DEFAULT_OP_TIMEOUT: Duration = DEFAULT_TIMEOUT;
    /// The default timeout of the authority's session.
    pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

    /// A config for `servers` with the default root and timeouts.
    pub fn new<I, S>(servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ZookeeperConfig {
            servers: servers.into_iter().map(Into::into).collect(),
            root: Self::DEFAULT_ROOT.to_owned(),
            op_timeout: Self::DEFAULT_OP_TIMEOUT,
            session_timeout: Self::DEFAULT_SESSION_TIMEOUT,
        }
    }

    /// The connect string, `host1:port1,host2:port2`.
    pub fn connect_string(&self) -> String {
        self.servers.join(",")
    }

    fn default_root() -> String {
        Self::DEFAULT_ROOT.to_owned()
    }

    fn default_session_timeout() -> Duration {
        Self::DEFAULT_SESSION_TIMEOUT
    }

    /// At least one server, each `host:port`; a root that is an absolute znode path.
    fn validate(&self, key: &str) -> Result<(), AuthorityConfigError> {
        if self.servers.is_empty() {
            return Err(needs(key, "zookeeper", "servers"));
        }
        for (i, server) in self.servers.iter().enumerate() {
            if let Err(why) = check_server(server) {
                return Err(invalid(
                    format!("{key}.servers[{i}]"),
                    format!("{server:?}: {why}; expected host:port, e.g. \"127.0.0.1:2181\""),
                ));
            }
        }
        if let Err(why) = check_root(&self.root) {
            return Err(invalid(
                format!("{key}.root"),
                format!(
                    "{:?}: {why}; expected an absolute znode path, e.g. \"/idmint\"",
                    self.root
                ),
            ));
        }
        Ok(())
    }
}

impl Named for ZookeeperConfig {
    const KIND: &'static str = "zookeeper";
}

/// Why `server` is not `host:port` (the connect string is split on `,`; a `/` would start a
/// chroot).
pub(crate) fn check_server(server: &str) -> Result<(), &'static str> {
    let (host, port) = server.rsplit_once(':').ok_or("no port")?;
    if host.is_empty() || host.contains([',', '/', '@']) || host.chars().any(char::is_whitespace) {
        return Err("not a host name or address");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err("the port is not a number from 1 to 65535"),
    }
}

/// Why `root` is not an absolute znode path usable as a prefix (`/a/b`, not `/`, no trailing
/// `/`, no empty, `.` or `..` component).
pub(crate) fn check_root(root: &str) -> Result<(), &'static str> {
    let rest = root.strip_prefix('/').ok_or("does not start with /")?;
    if rest.is_empty() {
        return Err("is the ZooKeeper root itself");
    }
    for part in rest.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err("has an empty, . or .. component (or ends with /)");
        }
        if part == "zookeeper" && !rest.contains('/') {
            return Err("/zookeeper is ZooKeeper's own");
        }
        if part.chars().any(|c| c.is_control() || c == '\u{0}') {
            return Err("has a control character");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Redis

/// Configuration of the Redis authority (`redis::RedisAuthority`, Redis 7 or Valkey). Parsed in
/// every build; only connecting needs the cargo feature `redis`.
///
/// Keys: `url` (required), `prefix`, `timeout_ms` (into [`RedisConfig::op_timeout`]),
/// `accept_unsafe_durability`, `wait_replicas`, `wait_timeout_ms` (into
/// [`RedisConfig::wait_timeout`]), `tls`, `ca_file`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`, or `rediss://…` with `tls = "verify-full"`.
    /// One server (a primary); Sentinel and Cluster discovery are not used (docs/backends.md).
    pub url: String,
    /// Every key idmint writes is `{<prefix>}:…`: the braces make it a Redis Cluster hash tag,
    /// so one store's keys share one slot and each Lua script touches one shard. Default
    /// `idmint`. Letters, digits, `_`, `-`, `.` and `:`, at most 64.
    #[serde(default = "RedisConfig::default_prefix")]
    pub prefix: String,
    /// Bound on every call to Redis, connecting included. Default 5 s.
    #[serde(
        rename = "timeout_ms",
        default = "default_timeout",
        with = "timeout_ms"
    )]
    pub op_timeout: Duration,
    /// Serve from a server that does not fsync every write (`appendonly` not `yes`, or
    /// `appendfsync` not `always`), or whose settings cannot be read (`CONFIG` renamed or
    /// denied). Default `false`: connecting to such a server is refused, since a crash of it
    /// could forget reservations already handed out, and ids would repeat. `true` accepts it
    /// with a warning in the log.
    #[serde(default)]
    pub accept_unsafe_durability: bool,
    /// After every write, `WAIT <wait_replicas> <wait_timeout_ms>`: the write counts only once
    /// that many replicas acknowledged it; fewer is `Unavailable` (the block is burned, never
    /// handed out). Default 0: no `WAIT`.
    #[serde(default)]
    pub wait_replicas: u32,
    /// The `WAIT` timeout. Default 1 s; must be below `timeout_ms`.
    #[serde(
        rename = "wait_timeout_ms",
        default = "RedisConfig::default_wait_timeout",
        with = "timeout_ms"
    )]
    pub wait_timeout: Duration,
    /// `tls`: `"off"` (the default) or `"verify-full"` (a `rediss://` url; the server's
    /// certificate checked against `ca_file` and the host name). `"require"` is refused.
    #[serde(default)]
    pub tls: crate::tls::TlsMode,
    /// `ca_file`: the PEM file of the CA of the server's certificate; needed by, and only by,
    /// `tls = "verify-full"`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

impl RedisConfig {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "idmint";
    /// The default `WAIT` timeout.
    pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(1);

    /// A config for `url` with the default prefix and timeouts, durability checked, no `WAIT`,
    /// no TLS.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            op_timeout: DEFAULT_TIMEOUT,
            accept_unsafe_durability: false,
            wait_replicas: 0,
            wait_timeout: Self::DEFAULT_WAIT_TIMEOUT,
            tls: crate::tls::TlsMode::Off,
            ca_file: None,
        }
    }

    fn default_prefix() -> String {
        Self::DEFAULT_PREFIX.to_owned()
    }

    fn default_wait_timeout() -> Duration {
        Self::DEFAULT_WAIT_TIMEOUT
    }

    /// A `redis://` or `rediss://` url, a prefix usable inside a hash tag, a `WAIT` timeout
    /// below the operation timeout.
    pub(crate) fn validate(&self, key: &str) -> Result<(), AuthorityConfigError> {
        if !(self.url.starts_with("redis://") || self.url.starts_with("rediss://")) {
            return Err(invalid(
                format!("{key}.url"),
                format!(
                    "{}: expected redis://host:port or rediss://host:port",
                    redact_url(&self.url)
                ),
            ));
        }
        if let Err(why) = check_redis_prefix(&self.prefix) {
            return Err(invalid(
                format!("{key}.prefix"),
                format!("{:?}: {why}", self.prefix),
            ));
        }
        if self.wait_replicas > 0 && self.wait_timeout >= self.op_timeout {
            return Err(invalid(
                format!("{key}.wait_timeout_ms"),
                "must be below timeout_ms: a write waits for its replicas within its timeout",
            ));
        }
        Ok(())
    }
}

/// Why `prefix` cannot be a Redis authority's key prefix (it goes inside `{…}`).
pub(crate) fn check_redis_prefix(prefix: &str) -> Result<(), &'static str> {
    if prefix.is_empty() || prefix.len() > 64 {
        return Err("must be 1 to 64 characters");
    }
    if !prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
    {
        return Err("only letters, digits, _, -, . and : are allowed");
    }
    Ok(())
}

impl Named for RedisConfig {
    const KIND: &'static str = "redis";
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.url))
            .field("prefix", &self.prefix)
            .field("op_timeout", &self.op_timeout)
            .field("accept_unsafe_durability", &self.accept_unsafe_durability)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("tls", &self.tls)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream

/// Configuration of the upstream authority (`upstream::UpstreamAuthority`): other idmint nodes'
/// gRPC addresses. Parsed in every build; only connecting needs the cargo feature `upstream`.
///
/// Keys: `urls` (required, not empty, each `http://host:port` or `https://host:port`; one list
/// may mix them), `timeout_ms` (into [`UpstreamConfig::op_timeout`]), `token` (a bearer token
/// of the upper tier's `[auth]`, with `blocks` and `read` on the namespaces; never printed),
/// and for the `https://` urls `ca_file` (the only CA trusted; else the public roots) and
/// `client_cert`/`client_key` (both or neither: the certificate presented to an upper tier that
/// requires one). The TLS keys need at least one `https://` url, so they are never silently
/// ignored. The files are read when the authority connects.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The upper nodes' gRPC addresses (`idmint serve --grpc`), tried in order: calls stay on
    /// the last one that answered and move to the next when it does not.
    pub urls: Vec<String>,
    /// The bound on every call to an upper node, connecting included. Default 5 s.
    #[serde(
        rename = "timeout_ms",
        default = "default_timeout",
        with = "timeout_ms"
    )]
    pub op_timeout: Duration,
    /// The bearer token sent to the upper nodes, for an upper tier with `[auth]`.
    #[serde(default)]
    pub token: Option<String>,
    /// `ca_file`: the PEM file of the CA that signed the upper nodes' certificates; the only
    /// CA trusted for `https://` urls (without it, the public roots).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `client_cert`: the certificate chain (PEM, leaf first) presented to upper nodes that
    /// require client certificates (`[server] client_ca_file`).
    #[serde(default)]
    pub client_cert: Option<PathBuf>,
    /// `client_key`: the private key (PEM) of `client_cert`.
    #[serde(default)]
    pub client_key: Option<PathBuf>,
}

impl UpstreamConfig {
    /// The default timeout of one call.
    pub const DEFAULT_OP_TIMEOUT: Duration = DEFAULT_TIMEOUT;

    /// A config for `urls` with the default timeout, no token and no TLS files (not validated:
    /// [`crate::connect()`] and `UpstreamAuthority::connect` refuse an empty list or a url that
    /// is not `http://` or `https://`).
    pub fn new<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        UpstreamConfig {
            urls: urls.into_iter().map(Into::into).collect(),
            op_timeout: Self::DEFAULT_OP_TIMEOUT,
            token: None,
            ca_file: None,
            client_cert: None,
            client_key: None,
        }
    }

    /// The client certificate and key files, when both are set.
    pub fn client_identity(&self) -> Option<(&Path, &Path)> {
        self.client_cert.as_deref().zip(self.client_key.as_deref())
    }

    /// Whether any TLS file is set (`ca_file`, `client_cert`).
    pub fn has_tls_files(&self) -> bool {
        self.ca_file.is_some() || self.client_cert.is_some()
    }

    /// At least one url, each `http://host[:port]` or `https://host[:port]`; `client_cert` and
    /// `client_key` both or neither; TLS files only with an `https://` url.
    fn validate(&self, key: &str) -> Result<(), AuthorityConfigError> {
        if self.urls.is_empty() {
            return Err(needs(key, "upstream", "urls"));
        }
        for (i, url) in self.urls.iter().enumerate() {
            let host = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"))
                .unwrap_or("");
            let host = host.strip_suffix('/').unwrap_or(host);
            let valid = !host.is_empty()
                && !host.contains(['/', '?', '#', '@'])
                && !host.chars().any(char::is_whitespace);
            if !valid {
                return Err(invalid(
                    format!("{key}.urls[{i}]"),
                    format!(
                        "{}: expected an idmint node's gRPC address, http://host:port or \
                         https://host:port (e.g. \"https://global-a:7879\")",
                        redact_url(url)
                    ),
                ));
            }
        }
        match (&self.client_cert, &self.client_key) {
            (Some(_), None) => {
                return Err(invalid(
                    format!("{key}.client_key"),
                    "missing: client_cert is set, and a client certificate needs its key",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    format!("{key}.client_cert"),
                    "missing: client_key is set, and a client certificate needs its key",
                ))
            }
            _ => {}
        }
        let any_https = self.urls.iter().any(|u| u.starts_with("https://"));
        if !any_https {
            let set = [
                ("ca_file", self.ca_file.is_some()),
                ("client_cert", self.client_cert.is_some()),
            ];
            if let Some((name, _)) = set.iter().find(|(_, set)| *set) {
                return Err(invalid(
                    format!("{key}.{name}"),
                    "set, but no url is https://: TLS files are used only for https:// urls",
                ));
            }
        }
        Ok(())
    }
}

impl Named for UpstreamConfig {
    const KIND: &'static str = "upstream";
}

impl fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact_url(u)).collect();
        f.debug_struct("UpstreamConfig")
            .field("urls", &urls)
            .field("op_timeout", &self.op_timeout)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// Multi

/// The members of a multi authority, validated: at least two, none `memory` or `multi`, each
/// owning a distinct residue class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiConfig {
    members: Vec<MemberConfig>,
}

/// One member of a multi authority: an authority and the residue class it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberConfig {
    /// The residue class: the member issues only ids `≡ offset (mod step)`.
    pub offset: u64,
    /// The member's own authority.
    pub authority: AuthorityConfig,
}

impl MultiConfig {
    /// Validates `members` (see the type's docs); errors name keys under `authority.members`.
    pub fn new(members: Vec<MemberConfig>) -> Result<Self, AuthorityConfigError> {
        Self::validated("authority", members)
    }

    /// The members, in order.
    pub fn members(&self) -> &[MemberConfig] {
        &self.members
    }

    fn validated(key: &str, members: Vec<MemberConfig>) -> Result<Self, AuthorityConfigError> {
        if members.len() < 2 {
            return Err(invalid(
                format!("{key}.members"),
                "a multi authority needs at least 2 members",
            ));
        }
        for (i, member) in members.iter().enumerate() {
            let mkey = format!("{key}.members[{i}]");
            match member.authority {
                AuthorityConfig::Memory => {
                    return Err(invalid(format!("{mkey}.kind"), "memory cannot be a member"))
                }
                AuthorityConfig::Multi(_) => {
                    return Err(invalid(
                        format!("{mkey}.kind"),
                        "a multi authority cannot be a member of another",
                    ))
                }
                _ => {}
            }
            if let Some(j) = members[..i].iter().position(|m| m.offset == member.offset) {
                return Err(invalid(
                    format!("{mkey}.offset"),
                    format!(
                        "{} is the same offset as members[{j}]'s; their ids would collide",
                        member.offset
                    ),
                ));
            }
        }
        Ok(MultiConfig { members })
    }

    fn from_table(key: &str, mut table: toml::Table) -> Result<Self, AuthorityConfigError> {
        let raw = table.remove("members");
        if let Some(stray) = table.keys().next() {
            return Err(invalid(
                format!("{key}.{stray}"),
                "unknown field, a multi authority takes members only (each with its own keys)",
            ));
        }
        let raw = match raw {
            None => return Err(needs(key, "multi", "members")),
            Some(toml::Value::Array(raw)) => raw,
            Some(other) => {
                return Err(invalid(
                    format!("{key}.members"),
                    format!("expected an array of tables, found {}", other.type_str()),
                ))
            }
        };
        let mut members = Vec::with_capacity(raw.len());
        for (i, value) in raw.into_iter().enumerate() {
            let mkey = format!("{key}.members[{i}]");
            let mut table = match value {
                toml::Value::Table(t) => t,
                other => {
                    return Err(invalid(
                        mkey,
                        format!("expected a table, found {}", other.type_str()),
                    ))
                }
            };
            let offset = match table.remove("offset") {
                None => {
                    return Err(invalid(
                        format!("{mkey}.offset"),
                        "each member owns a residue class: set its offset",
                    ))
                }
                Some(toml::Value::Integer(n)) => u64::try_from(n).map_err(|_| {
                    invalid(
                        format!("{mkey}.offset"),
                        format!("{n}: must not be negative"),
                    )
                })?,
                Some(other) => {
                    return Err(invalid(
                        format!("{mkey}.offset"),
                        format!("expected an integer, found {}", other.type_str()),
                    ))
                }
            };
            let authority = AuthorityConfig::from_table(&mkey, table, Position::Member)?;
            members.push(MemberConfig { offset, authority });
        }
        Self::validated(key, members)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A document with an `[authority]` table, as the node parses it.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        authority: AuthorityConfig,
    }

    fn parse(text: &str) -> Result<AuthorityConfig, String> {
        toml::from_str::<Doc>(text)
            .map(|d| d.authority)
            .map_err(|e| e.to_string())
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err()
    }

    /// Asserts that the error of `text` names `key` at the start of a line (after toml's own
    /// position report), followed by `words`.
    fn assert_names(text: &str, key: &str, words: &str) {
        let e = err(text);
        assert!(
            e.lines()
                .any(|l| l.starts_with(&format!("{key}: ")) && l.contains(words)),
            "error of\n{text}\nshould name {key} and say {words:?}, got\n{e}"
        );
    }

    #[test]
    fn the_documented_examples_parse() {
        // docs/configuration.md's complete example.
        assert_eq!(
            parse("[authority]\nkind = \"file\"                # \"file\" (default)\n# path = \"/var/lib/idmint\"\n").unwrap(),
            AuthorityConfig::File(FileConfig { path: None })
        );
        assert_eq!(
            parse("[authority]\nkind = \"file\"\npath = \"/var/lib/idmint\"\n").unwrap(),
            AuthorityConfig::File(FileConfig {
                path: Some("/var/lib/idmint".into())
            })
        );
        assert_eq!(
            parse("[authority]\nkind = \"memory\"\n").unwrap(),
            AuthorityConfig::Memory
        );
        // docs/backends.md's examples, which configuration.md links to.
        let pg = parse(
            "[authority]\nkind = \"postgres\"\nurl = \"postgres://idmint:secret@db.internal:5432/idmint\"\n# table = \"idmint_namespaces\"\n",
        )
        .unwrap();
        assert_eq!(
            pg,
            AuthorityConfig::Postgres(PostgresConfig::new(
                "postgres://idmint:secret@db.internal:5432/idmint"
            ))
        );
        let my = parse(
            "[authority]\nkind = \"mysql\"\nurl = \"mysql://idmint:secret@db.internal:3306/idmint\"\n# mode = \"blocks\"   (default) or \"tickets\"\n",
        )
        .unwrap();
        assert_eq!(
            my,
            AuthorityConfig::Mysql(MysqlConfig::new(
                "mysql://idmint:secret@db.internal:3306/idmint"
            ))
        );
        let etcd = parse(
            "[authority]\nkind = \"etcd\"\nendpoints = [\"http://10.0.0.1:2379\", \"http://10.0.0.2:2379\", \"http://10.0.0.3:2379\"]\n# prefix = \"/idmint/\"\n",
        )
        .unwrap();
        assert!(
            matches!(&etcd, AuthorityConfig::Etcd(c) if c.endpoints.len() == 3 && c.prefix == "/idmint/")
        );
        let multi = parse(MULTI).unwrap();
        let AuthorityConfig::Multi(m) = &multi else {
            panic!("{multi:?}")
        };
        assert_eq!(m.members().len(), 2);
        assert!(
            matches!(&m.members()[0].authority, AuthorityConfig::Mysql(c) if c.mode == MysqlMode::Tickets)
        );
        assert_eq!(multi.residue_offsets(), Some(vec![1, 0]));
        assert_eq!(pg.residue_offsets(), None);
    }

    /// Every key of the `[authority]` table of docs/configuration.md, with its type.
    #[test]
    fn postgres_tls_keys_parse_and_name_bad_values() {
        let pg = parse(
            "[authority]\nkind = \"postgres\"\nurl = \"host=h\"\ntls = \"verify-full\"\nca_file = \"/etc/idmint/ca.pem\"\n",
        )
        .unwrap();
        assert_eq!(
            pg,
            AuthorityConfig::Postgres(PostgresConfig {
                tls: crate::tls::TlsMode::VerifyFull,
                ca_file: Some(PathBuf::from("/etc/idmint/ca.pem")),
                ..PostgresConfig::new("host=h")
            })
        );
        let pg = parse("[authority]\nkind = \"postgres\"\nurl = \"host=h\"\ntls = \"require\"\n")
            .unwrap();
        assert!(
            matches!(pg, AuthorityConfig::Postgres(c) if c.tls == crate::tls::TlsMode::Require)
        );
        let e = err("[authority]\nkind = \"postgres\"\nurl = \"host=h\"\ntls = \"maybe\"\n");
        assert!(e.contains("authority.tls"), "{e}");
        let my = parse("[authority]\nkind = \"mysql\"\nurl = \"mysql://u@h/db\"\ntls = \"verify-full\"\nca_file = \"/ca.pem\"\n")
            .unwrap();
        assert!(
            matches!(&my, AuthorityConfig::Mysql(c) if c.tls == crate::tls::TlsMode::VerifyFull && c.ca_file.as_deref() == Some(std::path::Path::new("/ca.pem")))
        );
        let etcd = parse("[authority]\nkind = \"etcd\"\nendpoints = [\"https://e:2379\"]\ntls = \"verify-full\"\nca_file = \"/ca.pem\"\nuser = \"idmint\"\npassword = \"pw\"\n")
            .unwrap();
        let AuthorityConfig::Etcd(c) = &etcd else {
            panic!("{etcd:?}")
        };
        assert_eq!(c.tls, crate::tls::TlsMode::VerifyFull);
        assert_eq!(
            (c.user.as_deref(), c.password.as_deref()),
            (Some("idmint"), Some("pw"))
        );
        // The password is never printed.
        assert!(!format!("{etcd:?}").contains("pw\""), "{etcd:?}");
    }

    #[test]
    fn every_documented_key_parses() {
        let pg = parse(
            "[authority]\nkind = \"postgres\"\nurl = \"postgres://u@h/db\"\ntable = \"ns\"\ntimeout_ms = 800\n",
        )
        .unwrap();
        assert_eq!(
            pg,
            AuthorityConfig::Postgres(PostgresConfig {
                table: "ns".into(),
                op_timeout: Duration::from_millis(800),
                ..PostgresConfig::new("postgres://u@h/db")
            })
        );
        let my = parse(
            "[authority]\nkind = \"mysql\"\nurl = \"mysql://u@h/db\"\ntable = \"t\"\nmode = \"blocks\"\ntimeout_ms = 10\n",
        )
        .unwrap();
        assert!(
            matches!(my, AuthorityConfig::Mysql(c) if c.mode == MysqlMode::Blocks && c.table == "t" && c.op_timeout == Duration::from_millis(10) && !c.accept_unsafe_durability)
        );
        let unsafe_my = parse(
            "[authority]\nkind = \"mysql\"\nurl = \"mysql://u@h/db\"\naccept_unsafe_durability = true\n",
        )
        .unwrap();
        assert!(matches!(unsafe_my, AuthorityConfig::Mysql(c) if c.accept_unsafe_durability));
        let etcd = parse(
            "[authority]\nkind = \"etcd\"\nendpoints = [\"http://h:2379\"]\nprefix = \"/x/\"\ntimeout_ms = 300\n",
        )
        .unwrap();
        assert_eq!(
            etcd,
            AuthorityConfig::Etcd(EtcdConfig {
                prefix: "/x/".into(),
                op_timeout: Duration::from_millis(300),
                ..EtcdConfig::new(["http://h:2379"])
            })
        );
        // No kind: the file authority, the default.
        assert_eq!(parse("[authority]\n").unwrap(), AuthorityConfig::default());
    }

    const MULTI: &str = r#"
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

    /// The authority cases of the node's former `authorities_parse` test.
    #[test]
    fn errors_name_their_key() {
        assert_names(
            &MULTI.replace("offset = 0", "offset = 1"),
            "authority.members[1].offset",
            "same offset",
        );
        assert_names(
            "[authority]\nkind = \"etcd\"\n",
            "authority.endpoints",
            "needs endpoints",
        );
        assert_names(
            "[authority]\nkind = \"etcd\"\nendpoints = []\n",
            "authority.endpoints",
            "needs endpoints",
        );
        assert_names(
            "[authority]\nkind = \"mysql\"\nurl = \"x\"\nmode = \"fast\"\n",
            "authority.mode",
            "unknown variant",
        );
        assert_names(
            "[authority]\nkind = \"cassandra\"\n",
            "authority.kind",
            "unknown authority",
        );
        assert_names(
            "[authority]\nkind = 3\n",
            "authority.kind",
            "expected a string",
        );
        assert_names(
            "[authority]\nkind = \"postgres\"\n",
            "authority.url",
            "needs url",
        );
        assert_names(
            "[authority]\nkind = \"mysql\"\n",
            "authority.url",
            "needs url",
        );
        assert_names(
            "[authority]\nkind = \"postgres\"\nurl = \"x\"\ntimeout_ms = 0\n",
            "authority.timeout_ms",
            "must be above 0",
        );
        assert_names(
            "[authority]\nkind = \"postgres\"\nurl = \"x\"\ntimeout_ms = \"fast\"\n",
            "authority.timeout_ms",
            "invalid type",
        );
        assert_names(
            "[authority]\nkind = \"file\"\noffset = 1\n",
            "authority.offset",
            "members of a multi",
        );
        assert_names(
            "[authority]\nkind = \"file\"\n[[authority.members]]\nkind = \"file\"\n",
            "authority.members",
            "belong to a multi",
        );
    }

    #[test]
    fn stray_keys_are_errors_naming_the_key() {
        assert_names(
            "[authority]\nkind = \"postgres\"\nurl = \"x\"\ntabel = \"t\"\n",
            "authority.tabel",
            "unknown field, expected one of url, table, timeout_ms",
        );
        assert_names(
            "[authority]\nkind = \"postgres\"\nurl = \"x\"\nmode = \"tickets\"\n",
            "authority.mode",
            "unknown field",
        );
        assert_names(
            "[authority]\nkind = \"postgres\"\nurl = \"x\"\npool_size = 3\n",
            "authority.pool_size",
            "unknown field",
        );
        assert_names(
            "[authority]\nkind = \"mysql\"\nurl = \"x\"\nendpoints = [\"y\"]\n",
            "authority.endpoints",
            "expected one of url, table, mode, timeout_ms",
        );
        assert_names(
            "[authority]\nkind = \"etcd\"\nendpoints = [\"y\"]\nurl = \"x\"\n",
            "authority.url",
            "expected one of endpoints, prefix, timeout_ms",
        );
        assert_names(
            "[authority]\nkind = \"file\"\nurl = \"x\"\n",
            "authority.url",
            "expected path",
        );
        assert_names(
            "[authority]\nkind = \"memory\"\npath = \"/x\"\n",
            "authority.path",
            "unknown field",
        );
        assert_names(
            "[authority]\nkind = \"multi\"\ntimeout_ms = 5\n",
            "authority.timeout_ms",
            "unknown field",
        );
    }

    #[test]
    fn member_errors_name_the_member() {
        assert_names(
            &MULTI.replace("offset = 0", "offset = 0\nofset = 2"),
            "authority.members[1].ofset",
            "unknown field",
        );
        assert_names(
            &MULTI.replace("offset = 0\n", ""),
            "authority.members[1].offset",
            "set its offset",
        );
        assert_names(
            &MULTI.replace("offset = 0", "offset = -1"),
            "authority.members[1].offset",
            "negative",
        );
        assert_names(
            &MULTI.replace("offset = 0", "offset = \"0\""),
            "authority.members[1].offset",
            "integer",
        );
        assert_names(
            &MULTI.replace(
                "mode = \"tickets\"\n        url = \"mysql://root@127.0.0.1:3308/x\"",
                "mode = \"ticket\"\n        url = \"x\"",
            ),
            "authority.members[1].mode",
            "unknown variant",
        );
        assert_names(
            &MULTI.replacen("kind = \"mysql\"", "kind = \"memory\"", 1),
            "authority.members[0].kind",
            "memory cannot be a member",
        );
        assert_names(
            &MULTI.replacen("kind = \"mysql\"", "kind = \"multi\"", 1),
            "authority.members[0].kind",
            "cannot be a member of another",
        );
        assert_names(
            "[authority]\nkind = \"multi\"\n[[authority.members]]\nkind = \"file\"\noffset = 0\n",
            "authority.members",
            "at least 2 members",
        );
        assert_names(
            "[authority]\nkind = \"multi\"\n",
            "authority.members",
            "needs members",
        );
        assert_names(
            "[authority]\nkind = \"multi\"\nmembers = 3\n",
            "authority.members",
            "array",
        );
    }

    #[test]
    fn upstream_parses_and_names_bad_keys() {
        let c = parse(
            "[authority]\nkind = \"upstream\"\nurls = [\"http://global-a:7879\", \"http://global-b:7879\"]\ntimeout_ms = 800\n",
        )
        .unwrap();
        assert_eq!(
            c,
            AuthorityConfig::Upstream(UpstreamConfig {
                op_timeout: Duration::from_millis(800),
                ..UpstreamConfig::new(["http://global-a:7879", "http://global-b:7879"])
            })
        );
        assert!(c.is_durable());
        assert_eq!(c.residue_offsets(), None);
        assert_eq!(
            c.to_string(),
            "upstream authority: idmint nodes at http://global-a:7879,http://global-b:7879"
        );
        assert_names(
            "[authority]\nkind = \"upstream\"\n",
            "authority.urls",
            "needs urls",
        );
        let with_token = parse(
            "[authority]\nkind = \"upstream\"\nurls = [\"http://g:7879\"]\ntoken = \"idmint_s3cret\"\n",
        )
        .unwrap();
        let AuthorityConfig::Upstream(u) = &with_token else {
            panic!("{with_token:?}")
        };
        assert_eq!(u.token.as_deref(), Some("idmint_s3cret"));
        assert!(!with_token.to_string().contains("s3cret"));
        assert!(!format!("{with_token:?}").contains("s3cret"));
        assert_names(
            "[authority]\nkind = \"upstream\"\nurls = []\n",
            "authority.urls",
            "needs urls",
        );
        for bad in [
            "global-a:7879",
            "grpc://a:7879",
            "https://",
            "http://",
            "http://a:1/x",
            "http://u:p@a:1",
        ] {
            assert_names(
                &format!("[authority]\nkind = \"upstream\"\nurls = [\"http://a:1\", \"{bad}\"]\n"),
                "authority.urls[1]",
                "expected an idmint node's gRPC address",
            );
        }
        assert_names(
            "[authority]\nkind = \"upstream\"\nurls = [\"http://a:1\"]\nurl = \"x\"\n",
            "authority.url",
            "expected one of urls, timeout_ms, token, ca_file, client_cert, client_key",
        );
        let err = err("[authority]\nkind = \"upstream\"\nurls = [\"http://u:hunter2@a:1\"]\n");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn upstream_tls_keys_parse_and_are_checked() {
        let c = parse(
            "[authority]\nkind = \"upstream\"\nurls = [\"https://g:7879\", \"http://h:7879\"]\nca_file = \"/ca.pem\"\nclient_cert = \"/c.pem\"\nclient_key = \"/c.key\"\n",
        )
        .unwrap();
        let AuthorityConfig::Upstream(u) = &c else {
            panic!("{c:?}")
        };
        assert_eq!(u.ca_file.as_deref(), Some(Path::new("/ca.pem")));
        assert_eq!(
            u.client_identity(),
            Some((Path::new("/c.pem"), Path::new("/c.key")))
        );
        assert!(u.has_tls_files());
        assert_names(
            "[authority]\nkind = \"upstream\"\nurls = [\"https://g:1\"]\nclient_cert = \"/c.pem\"\n",
            "authority.client_key",
            "missing: client_cert is set",
        );
        assert_names(
            "[authority]\nkind = \"upstream\"\nurls = [\"https://g:1\"]\nclient_key = \"/c.key\"\n",
            "authority.client_cert",
            "missing: client_key is set",
        );
        assert_names(
            "[authority]\nkind = \"upstream\"\nurls = [\"http://g:1\"]\nca_file = \"/ca.pem\"\n",
            "authority.ca_file",
            "no url is https://",
        );
        assert_names(
            "[authority]\nkind = \"upstream\"\nurls = [\"https://g:1\"]\nca_file = 3\n",
            "authority.ca_file",
            "invalid type",
        );
    }

    #[test]
    fn zookeeper_parses_with_clear_errors() {
        let c = parse(
            "[authority]\nkind = \"zookeeper\"\nservers = [\"10.0.0.1:2181\", \"zk2:2181\"]\n",
        )
        .unwrap();
        assert_eq!(c.kind(), "zookeeper");
        assert_eq!(
            c,
            AuthorityConfig::Zookeeper(ZookeeperConfig::new(["10.0.0.1:2181", "zk2:2181"]))
        );
        assert_eq!(
            c.to_string(),
            "ZooKeeper authority at 10.0.0.1:2181,zk2:2181, root /idmint"
        );
        let c = parse(
            "[authority]\nkind = \"zookeeper\"\nservers = [\"h:1\"]\nroot = \"/a/b\"\n\
             op_timeout_ms = 300\nsession_timeout_ms = 4000\n",
        )
        .unwrap();
        assert_eq!(
            c,
            AuthorityConfig::Zookeeper(ZookeeperConfig {
                root: "/a/b".into(),
                op_timeout: Duration::from_millis(300),
                session_timeout: Duration::from_secs(4),
                ..ZookeeperConfig::new(["h:1"])
            })
        );
        let alias =
            parse("[authority]\nkind = \"zookeeper\"\nservers = [\"h:1\"]\ntimeout_ms = 300\n")
                .unwrap();
        assert!(
            matches!(&alias, AuthorityConfig::Zookeeper(c) if c.op_timeout == Duration::from_millis(300))
        );
        let bad = [
            ("", "authority.servers: a zookeeper authority needs servers"),
            (
                "servers = []\n",
                "authority.servers: a zookeeper authority needs servers",
            ),
            ("servers = [\"h\"]\n", "authority.servers[0]"),
            ("servers = [\"h:0\"]\n", "authority.servers[0]"),
            ("servers = [\"h:1\", \"a,b:2\"]\n", "authority.servers[1]"),
            ("servers = [\"h:1\"]\nroot = \"idmint\"\n", "authority.root"),
            ("servers = [\"h:1\"]\nroot = \"/\"\n", "authority.root"),
            ("servers = [\"h:1\"]\nroot = \"/a/\"\n", "authority.root"),
            (
                "servers = [\"h:1\"]\nroot = \"/zookeeper\"\n",
                "authority.root",
            ),
            (
                "servers = [\"h:1\"]\nop_timeout_ms = 0\n",
                "authority.op_timeout_ms",
            ),
            (
                "servers = [\"h:1\"]\nsession_timeout_ms = 0\n",
                "authority.session_timeout_ms",
            ),
            ("servers = [\"h:1\"]\ntimeout = 5\n", "timeout"),
        ];
        for (keys, expected) in bad {
            let text = format!("[authority]\nkind = \"zookeeper\"\n{keys}");
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(expected), "{keys:?}: {err}");
        }
    }

    #[test]
    fn redis_parses_with_clear_errors() {
        let c = parse("[authority]\nkind = \"redis\"\nurl = \"redis://:pw@10.0.0.1:6379/2\"\n")
            .unwrap();
        assert_eq!(c.kind(), "redis");
        assert_eq!(
            c,
            AuthorityConfig::Redis(RedisConfig::new("redis://:pw@10.0.0.1:6379/2"))
        );
        assert_eq!(
            c.to_string(),
            "Redis authority at redis://:***@10.0.0.1:6379/2, keys {idmint}:*"
        );
        assert!(!format!("{c:?}").contains("pw"), "{c:?}");
        let c = parse(
            "[authority]\nkind = \"redis\"\nurl = \"rediss://h:6380\"\nprefix = \"ids.eu\"\n\
             timeout_ms = 3000\naccept_unsafe_durability = true\nwait_replicas = 1\n\
             wait_timeout_ms = 500\ntls = \"verify-full\"\nca_file = \"/ca.pem\"\n",
        )
        .unwrap();
        assert_eq!(
            c,
            AuthorityConfig::Redis(RedisConfig {
                prefix: "ids.eu".into(),
                op_timeout: Duration::from_secs(3),
                accept_unsafe_durability: true,
                wait_replicas: 1,
                wait_timeout: Duration::from_millis(500),
                tls: crate::tls::TlsMode::VerifyFull,
                ca_file: Some(PathBuf::from("/ca.pem")),
                ..RedisConfig::new("rediss://h:6380")
            })
        );
        let bad = [
            ("", "authority.url: a redis authority needs url"),
            ("url = \"http://h:6379\"\n", "authority.url"),
            ("url = \"redis://h\"\nprefix = \"\"\n", "authority.prefix"),
            (
                "url = \"redis://h\"\nprefix = \"a{b}\"\n",
                "authority.prefix",
            ),
            (
                "url = \"redis://h\"\nwait_replicas = 1\nwait_timeout_ms = 5000\n",
                "authority.wait_timeout_ms",
            ),
            (
                "url = \"redis://h\"\ntimeout_ms = 0\n",
                "authority.timeout_ms",
            ),
            (
                "url = \"redis://h\"\nappendfsync = \"always\"\n",
                "appendfsync",
            ),
        ];
        for (keys, expected) in bad {
            let text = format!("[authority]\nkind = \"redis\"\n{keys}");
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(expected), "{keys:?}: {err}");
        }
    }

    #[test]
    fn etcd_parses_in_every_build() {
        // The variant and its config exist whatever the cargo features; `connect` says how to
        // rebuild when the backend is missing.
        let c = parse("[authority]\nkind = \"etcd\"\nendpoints = [\"http://h:2379\"]\n").unwrap();
        assert_eq!(c.kind(), "etcd");
    }

    #[test]
    fn passwords_are_never_printed() {
        let pg = parse("[authority]\nkind = \"postgres\"\nurl = \"postgres://u:hunter2@h/db\"\n")
            .unwrap();
        let my =
            parse("[authority]\nkind = \"mysql\"\nurl = \"mysql://u:hunter2@h/db\"\n").unwrap();
        let etcd =
            parse("[authority]\nkind = \"etcd\"\nendpoints = [\"http://u:hunter2@h:2379\"]\n")
                .unwrap();
        for c in [pg, my, etcd] {
            let text = format!("{c} {c:?}");
            assert!(!text.contains("hunter2"), "{text}");
        }
        assert_eq!(
            redact_url("mysql://root:s3cret@db:3306/idmint?x=1"),
            "mysql://root:***@db:3306/idmint?x=1"
        );
        assert_eq!(
            redact_url("mysql://root@db/idmint"),
            "mysql://root@db/idmint"
        );
        assert_eq!(redact_url("mysql://db/idmint"), "mysql://db/idmint");
    }

    #[test]
    fn multi_configs_built_in_code_are_validated_too() {
        let member = |offset| MemberConfig {
            offset,
            authority: AuthorityConfig::default(),
        };
        assert!(MultiConfig::new(vec![member(0), member(1)]).is_ok());
        assert!(MultiConfig::new(vec![member(0)]).is_err());
        assert!(MultiConfig::new(vec![member(0), member(0)]).is_err());
    }
}
