//! Building the configured authority: [`connect`] turns an [`AuthorityConfig`] into an
//! `Arc<dyn Authority>`, so the binary needs no match over backends and a new backend is wired
//! up in this crate alone.
//!
//! Invariants:
//! - every kind of [`AuthorityConfig`] is handled in every build: a backend whose cargo feature
//!   is off is [`ConnectError::NotBuilt`], naming the feature to rebuild with;
//! - a multi authority's members are connected in order, and the first failure is reported
//!   with the member's number (counted from 1) and kind;
//! - nothing secret reaches an error: connection URLs are never part of a message (backends name
//!   host, port and database only).
//!
//! What it does not do: log (the crate has no logging; the binary logs the config's
//! [`Display`](std::fmt::Display), which holds no secret, and whether it
//! [is durable](AuthorityConfig::is_durable)), retry a failed connection, or validate
//! namespaces against a multi authority's offsets (the node's job).

use crate::config::AuthorityConfig;
#[cfg(feature = "mysql")]
use crate::config::MysqlMode;
use crate::{Authority, MemoryAuthority, MultiAuthority, StoreError};
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
         `cargo build --release -p idmint-cli --features {feature}`{needs}"
    )]
    NotBuilt {
        /// The authority's kind, as the config names it.
        kind: &'static str,
        /// The cargo feature that brings it in.
        feature: &'static str,
        /// What else the build needs, e.g. " (needs protoc)".
        needs: &'static str,
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
            _ => false,
        }
    }
}

/// Connects the authority `config` describes; `data_dir` is the file authority's directory
/// when the config sets no `path`. Opening the file store runs on tokio's blocking pool.
///
/// Each backend's `connect`/`open` documents what it checks before it answers (the PostgreSQL
/// and MySQL block tables are created if absent; etcd is probed with one read); a multi
/// authority connects every member, and fails if any member fails.
pub async fn connect(
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
        AuthorityConfig::Multi(multi) => {
            let mut built = Vec::with_capacity(multi.members().len());
            for (i, member) in multi.members().iter().enumerate() {
                let authority = Box::pin(connect(&member.authority, data_dir))
                    .await
                    .map_err(|e| ConnectError::Member {
                        number: i + 1,
                        kind: member.authority.kind(),
                        source: Box::new(e),
                    })?;
                built.push((authority, member.offset));
            }
            let multi = MultiAuthority::new(built).map_err(ConnectError::Setup)?;
            Ok(Arc::new(multi))
        }
    }
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
    Err(not_built("file", "file", ""))
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
    Err(not_built("postgres", "postgres", ""))
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
    Err(not_built("mysql", "mysql", ""))
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
    // The etcd client compiles etcd's .proto files at build time.
    Err(not_built("etcd", "etcd", " (needs protoc)"))
}

#[cfg(any(
    not(feature = "file"),
    not(feature = "postgres"),
    not(feature = "mysql"),
    not(feature = "etcd")
))]
fn not_built(kind: &'static str, feature: &'static str, needs: &'static str) -> ConnectError {
    ConnectError::NotBuilt {
        kind,
        feature,
        needs,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
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

    /// A failing member is named by its number from 1 and its kind; its password is not shown.
    #[tokio::test]
    async fn a_failing_member_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut pg = PostgresConfig::new(format!("postgres://u:hunter2@127.0.0.1:{port}/x"));
        pg.op_timeout = std::time::Duration::from_secs(2);
        let multi = MultiConfig::new(vec![
            MemberConfig {
                offset: 0,
                authority: AuthorityConfig::default(),
            },
            MemberConfig {
                offset: 1,
                authority: AuthorityConfig::Postgres(pg),
            },
        ])
        .unwrap();
        let err = connect(&AuthorityConfig::Multi(multi), dir.path())
            .await
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(
            text.starts_with("authority member 2 (postgres): "),
            "{text}"
        );
        assert!(!format!("{text} {err:?}").contains("hunter2"), "{text}");
    }
}
