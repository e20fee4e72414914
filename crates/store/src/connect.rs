//! Building the configured authority: [`connect`] turns an [`AuthorityConfig`] into an
//! `Arc<dyn Authority>`, so the binary needs no match over backends and a new backend is wired
//! up in this crate alone.
//!
//! Invariants:
//! - every kind of [`AuthorityConfig`] is handled in every build: a backend whose cargo feature
//!   is off is [`ConnectError::NotBuilt`], naming the feature to rebuild with;
//! - a multi authority's members are connected in order; one that is unavailable does not stop
//!   the start (it is kept pending and connected on use, see [`crate::multi`]) unless no member
//!   connects; every failure is reported with the member's number (counted from 1) and kind;
//! - nothing secret reaches an error: connection URLs are never part of a message (backends name
//!   host, port and database only).
//!
//! What it does not do: log (the crate has no logging; the binary logs the config's
//! [`Display`](std::fmt::Display), which holds no secret, whether it
//! [is durable](AuthorityConfig::is_durable), and the multi members that are down, from
//! [`Authority::members`] or a [`MemberEvents`] given to [`connect_observed`]), retry a failed
//! connection of a single authority, or validate
//! namespaces against a multi authority's offsets (the node's job).

#[cfg(feature = "mysql")]
use crate::config::MysqlMode;
use crate::config::{AuthorityConfig, MultiConfig};
use crate::multi::{Connector, MemberSlot};
use crate::{Authority, MemberEvents, MemoryAuthority, MultiAuthority, StoreError};
use idmint_core::SystemClock;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

/// Why [`connect`] could not build the authority.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The backend is not compiled into this build.
    #[error(
        "this idmint was built without the {kind} authority; rebuild with \
         `cargo build --release -p idmint-cli --features {feature}`"
    )]
    NotBuilt {
        /// The authority's kind, as the config names it.
        kind: &'static str,
        /// The cargo feature that brings it in.
        feature: &'static str,
    },
    /// The file authority could not be opened.
    #[error("opening the file authority in {}: {source}", path.display())]
    Open {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: StoreError,
    },
    /// A networked authority could not be reached or set up.
    #[error("connecting to the {kind} authority: {source}")]
    Connect {
        /// The authority's kind.
        kind: &'static str,
        /// Why.
        source: StoreError,
    },
    /// A member of a multi authority failed.
    #[error("authority member {number} ({kind}): {source}")]
    Member {
        /// The member's place in the config, counted from 1.
        number: usize,
        /// The member's kind.
        kind: &'static str,
        /// Why.
        source: Box<ConnectError>,
    },
    /// No member of a multi authority could be connected: each member's failure, in order.
    #[error("no authority member could be connected: {}", join(.0))]
    NoMember(Vec<ConnectError>),
    /// The connected authorities cannot be combined (e.g. a multi authority's members).
    #[error("{0}")]
    Setup(StoreError),
}

impl ConnectError {
    /// Whether the failure may pass by itself (a server down or unreachable), as opposed to a
    /// configuration or build that must be changed.
    pub fn is_unavailable(&self) -> bool {
        match self {
            ConnectError::Open { source, .. } | ConnectError::Connect { source, .. } => {
                source.is_unavailable()
            }
            ConnectError::Member { source, .. } => source.is_unavailable(),
            ConnectError::NoMember(failures) => failures.iter().all(ConnectError::is_unavailable),
            _ => false,
        }
    }
}

fn join(errors: &[ConnectError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Connects the authority `config` describes; `data_dir` is the file authority's directory
/// when the config sets no `path`. Opening the file store runs on tokio's blocking pool.
///
/// Each backend's `connect`/`open` documents what it checks before it answers (the PostgreSQL
/// and MySQL block tables are created if absent; etcd is probed with one read). A multi
/// authority starts on the members that connect: a member that is unavailable is kept pending
/// and connected on use once it answers ([`MultiAuthority`]; [`Authority::members`] shows it down
/// with its error, [`connect_observed`] reports it); it fails if a member fails otherwise, or if
/// no member connects ([`ConnectError::NoMember`], naming each member's failure).
pub async fn connect(
    config: &AuthorityConfig,
    data_dir: &Path,
) -> Result<Arc<dyn Authority>, ConnectError> {
    match config {
        AuthorityConfig::Multi(multi) => connect_multi(multi, data_dir, None).await,
        single => connect_single(single, data_dir).await,
    }
}

/// Connects an authority that is not `multi` (a multi authority's member).
async fn connect_single(
    config: &AuthorityConfig,
    data_dir: &Path,
) -> Result<Arc<dyn Authority>, ConnectError> {
    match config {
        AuthorityConfig::File(c) => {
            let dir = c.path.clone().unwrap_or_else(|| data_dir.to_path_buf());
            open_file(dir).await
        }
        AuthorityConfig::Memory => Ok(Arc::new(MemoryAuthority::new())),
        AuthorityConfig::Postgres(c) => connect_postgres(c).await,
        AuthorityConfig::Mysql(c) => connect_mysql(c).await,
        AuthorityConfig::Etcd(c) => connect_etcd(c).await,
        AuthorityConfig::Zookeeper(c) => connect_zookeeper(c).await,
        AuthorityConfig::Redis(c) => connect_redis(c).await,
        AuthorityConfig::Upstream(c) => connect_upstream(c).await,
        AuthorityConfig::Multi(_) => Err(ConnectError::Setup(StoreError::InvalidSetup {
            message: "a multi authority cannot be a member of another".into(),
        })),
    }
}

/// [`connect`], reporting a multi authority's member transitions (members pending at start-up
/// at once, as down) to `events`, for the binary to log. Other kinds have no members: `events`
/// is not used.
pub async fn connect_observed(
    config: &AuthorityConfig,
    data_dir: &Path,
    events: Arc<dyn MemberEvents>,
) -> Result<Arc<dyn Authority>, ConnectError> {
    match config {
        AuthorityConfig::Multi(multi) => connect_multi(multi, data_dir, Some(events)).await,
        other => connect(other, data_dir).await,
    }
}

/// Connects every member; one that is unavailable becomes a pending slot retried on use (see
/// [`crate::multi`]). An error if a member fails otherwise (a build or configuration that must
/// change) or if no member connects (then naming every member's failure).
async fn connect_multi(
    multi: &MultiConfig,
    data_dir: &Path,
    events: Option<Arc<dyn MemberEvents>>,
) -> Result<Arc<dyn Authority>, ConnectError> {
    let mut slots = Vec::with_capacity(multi.members().len());
    let mut failures = Vec::new();
    for (i, member) in multi.members().iter().enumerate() {
        let kind = member.authority.kind();
        match connect_single(&member.authority, data_dir).await {
            Ok(authority) => slots.push(MemberSlot::connected(authority, member.offset)),
            Err(e) if e.is_unavailable() => {
                let config = member.authority.clone();
                let dir = data_dir.to_path_buf();
                let connector: Connector = Arc::new(move || {
                    let config = config.clone();
                    let dir = dir.clone();
                    Box::pin(async move {
                        connect_single(&config, &dir)
                            .await
                            .map_err(|e| e.to_string())
                    })
                });
                slots.push(MemberSlot::pending(
                    kind,
                    member.offset,
                    e.to_string(),
                    connector,
                ));
                failures.push(ConnectError::Member {
                    number: i + 1,
                    kind,
                    source: Box::new(e),
                });
            }
            Err(e) => {
                return Err(ConnectError::Member {
                    number: i + 1,
                    kind,
                    source: Box::new(e),
                })
            }
        }
    }
    if failures.len() == slots.len() {
        return Err(ConnectError::NoMember(failures));
    }
    let mut authority = MultiAuthority::with_slots(slots, Arc::new(SystemClock::new()))
        .map_err(ConnectError::Setup)?;
    if let Some(events) = events {
        authority = authority.with_events(events);
    }
    Ok(Arc::new(authority))
}

#[cfg(feature = "file")]
async fn open_file(dir: PathBuf) -> Result<Arc<dyn Authority>, ConnectError> {
    let opened = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || crate::FileAuthority::open(&dir)
    })
    .await
    .unwrap_or_else(|e| {
        Err(StoreError::Unavailable {
            backend: "file",
            message: format!("the task opening the store failed: {e}"),
        })
    });
    match opened {
        Ok(authority) => Ok(Arc::new(authority)),
        Err(source) => Err(ConnectError::Open { path: dir, source }),
    }
}

#[cfg(not(feature = "file"))]
async fn open_file(_dir: PathBuf) -> Result<Arc<dyn Authority>, ConnectError> {
    Err(not_built("file", "file"))
}

#[cfg(feature = "postgres")]
async fn connect_postgres(
    c: &crate::config::PostgresConfig,
) -> Result<Arc<dyn Authority>, ConnectError> {
    match crate::postgres::PostgresAuthority::connect(c.clone()).await {
        Ok(a) => Ok(Arc::new(a)),
        Err(source) => Err(ConnectError::Connect {
            kind: "postgres",
            source,
        }),
    }
}

#[cfg(not(feature = "postgres"))]
async fn connect_postgres(
    _: &crate::config::PostgresConfig,
) -> Result<Arc<dyn Authority>, ConnectError> {
    Err(not_built("postgres", "postgres"))
}

#[cfg(feature = "mysql")]
async fn connect_mysql(c: &crate::config::MysqlConfig) -> Result<Arc<dyn Authority>, ConnectError> {
    use crate::mysql::{MysqlAuthority, MysqlTicketAuthority};
    let connected: Result<Arc<dyn Authority>, StoreError> = match c.mode {
        MysqlMode::Blocks => MysqlAuthority::connect(c.clone())
            .await
            .map(|a| Arc::new(a) as Arc<dyn Authority>),
        MysqlMode::Tickets => MysqlTicketAuthority::connect(c.clone())
            .await
            .map(|a| Arc::new(a) as Arc<dyn Authority>),
    };
    connected.map_err(|source| ConnectError::Connect {
        kind: "mysql",
        source,
    })
}

#[cfg(not(feature = "mysql"))]
async fn connect_mysql(_: &crate::config::MysqlConfig) -> Result<Arc<dyn Authority>, ConnectError> {
    Err(not_built("mysql", "mysql"))
}

#[cfg(feature = "etcd")]
async fn connect_etcd(c: &crate::config::EtcdConfig) -> Result<Arc<dyn Authority>, ConnectError> {
    match crate::etcd::EtcdAuthority::connect(c.clone()).await {
        Ok(a) => Ok(Arc::new(a)),
        Err(source) => Err(ConnectError::Connect {
            kind: "etcd",
            source,
        }),
    }
}

#[cfg(not(feature = "etcd"))]
async fn connect_etcd(_: &crate::config::EtcdConfig) -> Result<Arc<dyn Authority>, ConnectError> {
    Err(not_built("etcd", "etcd"))
}

#[cfg(feature = "zookeeper")]
async fn connect_zookeeper(
    c: &crate::config::ZookeeperConfig,
) -> Result<Arc<dyn Authority>, ConnectError> {
    match crate::zookeeper::ZookeeperAuthority::connect(c.clone()).await {
        Ok(a) => Ok(Arc::new(a)),
        Err(source) => Err(ConnectError::Connect {
            kind: "zookeeper",
            source,
        }),
    }
}

#[cfg(not(feature = "zookeeper"))]
async fn connect_zookeeper(
    _: &crate::config::ZookeeperConfig,
) -> Result<Arc<dyn Authority>, ConnectError> {
    Err(not_built("zookeeper", "zookeeper"))
}

#[cfg(feature = "redis")]
async fn connect_redis(c: &crate::config::RedisConfig) -> Result<Arc<dyn Authority>, ConnectError> {
    match crate::redis::RedisAuthority::connect(c.clone()).await {
        Ok(a) => Ok(Arc::new(a)),
        Err(source) => Err(ConnectError::Connect {
            kind: "redis",
            source,
        }),
    }
}

#[cfg(not(feature = "redis"))]
async fn connect_redis(_: &crate::config::RedisConfig) -> Result<Arc<dyn Authority>, ConnectError> {
    Err(not_built("redis", "redis"))
}

#[cfg(feature = "upstream")]
async fn connect_upstream(
    c: &crate::config::UpstreamConfig,
) -> Result<Arc<dyn Authority>, ConnectError> {
    // Channels connect lazily: an upper tier that is down does not stop the start.
    match crate::upstream::UpstreamAuthority::connect(c) {
        Ok(a) => Ok(Arc::new(a)),
        Err(source) => Err(ConnectError::Connect {
            kind: "upstream",
            source,
        }),
    }
}

#[cfg(not(feature = "upstream"))]
async fn connect_upstream(
    _: &crate::config::UpstreamConfig,
) -> Result<Arc<dyn Authority>, ConnectError> {
    Err(not_built("upstream", "upstream"))
}

#[cfg(any(
    not(feature = "file"),
    not(feature = "postgres"),
    not(feature = "mysql"),
    not(feature = "etcd"),
    not(feature = "zookeeper"),
    not(feature = "redis"),
    not(feature = "upstream")
))]
fn not_built(kind: &'static str, feature: &'static str) -> ConnectError {
    ConnectError::NotBuilt { kind, feature }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    #[cfg(feature = "postgres")]
    use crate::config::{MemberConfig, MultiConfig, PostgresConfig};

    #[tokio::test]
    async fn memory_connects() {
        let a = connect(&AuthorityConfig::Memory, Path::new("/nonexistent"))
            .await
            .unwrap();
        assert_eq!(a.kind(), "memory");
    }

    #[cfg(feature = "file")]
    #[tokio::test]
    async fn file_defaults_to_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let a = connect(&AuthorityConfig::default(), dir.path())
            .await
            .unwrap();
        assert_eq!(a.kind(), "file");
        assert!(dir.path().join(crate::FILE_NAME).exists());
    }

    #[cfg(feature = "postgres")]
    fn dead_postgres() -> AuthorityConfig {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut pg = PostgresConfig::new(format!("postgres://u:hunter2@127.0.0.1:{port}/x"));
        pg.op_timeout = std::time::Duration::from_secs(2);
        AuthorityConfig::Postgres(pg)
    }

    /// Guards against a member down at start-up failing the start ("authority member 2 …
    /// Connection refused"): it is kept pending, shown down with its error (number from 1,
    /// kind, no password), and reported to the observer once.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn a_member_down_at_start_is_kept_pending() {
        #[derive(Debug, Default)]
        struct Seen(std::sync::Mutex<Vec<crate::MemberHealth>>);
        impl MemberEvents for Seen {
            fn changed(&self, member: &crate::MemberHealth) {
                self.0.lock().unwrap().push(member.clone());
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let multi = MultiConfig::new(vec![
            MemberConfig {
                offset: 0,
                authority: AuthorityConfig::default(),
            },
            MemberConfig {
                offset: 1,
                authority: dead_postgres(),
            },
        ])
        .unwrap();
        let seen = Arc::new(Seen::default());
        let a = connect_observed(&AuthorityConfig::Multi(multi), dir.path(), seen.clone())
            .await
            .unwrap();
        let members = a.members().expect("a multi authority").health();
        assert_eq!(members.len(), 2, "{members:?}");
        assert!(members[0].up && members[0].kind == "file", "{members:?}");
        let down = &members[1];
        assert_eq!(
            (down.number, down.kind, down.offset, down.up),
            (2, "postgres", 1, false)
        );
        let error = down.last_error.clone().unwrap();
        assert!(error.contains("postgres"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
        assert_eq!(*seen.0.lock().unwrap(), vec![down.clone()]);
    }

    /// With no member answering, the error names every member by number and kind.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn no_member_answering_names_each_failure() {
        let dir = tempfile::tempdir().unwrap();
        let multi = MultiConfig::new(vec![
            MemberConfig {
                offset: 0,
                authority: dead_postgres(),
            },
            MemberConfig {
                offset: 1,
                authority: dead_postgres(),
            },
        ])
        .unwrap();
        let err = connect(&AuthorityConfig::Multi(multi), dir.path())
            .await
            .err()
            .unwrap();
        assert!(err.is_unavailable(), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with(
                "no authority member could be connected: authority member 1 (postgres): "
            ),
            "{text}"
        );
        assert!(text.contains("; authority member 2 (postgres): "), "{text}");
        assert!(!format!("{text} {err:?}").contains("hunter2"), "{text}");
    }
}
