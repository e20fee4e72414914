//! Building the configured authority: the glue between the config file's `[authority]` and the
//! backends of idmint-store. Connection URLs may hold passwords: they are never logged.

use anyhow::{Context, Result};
use idmint_node::AuthorityConfig;
#[cfg(feature = "etcd")]
use idmint_store::etcd::{EtcdAuthority, EtcdConfig};
use idmint_store::mysql::{MysqlAuthority, MysqlConfig, MysqlTicketAuthority};
use idmint_store::postgres::{PostgresAuthority, PostgresConfig};
use idmint_store::{Authority, FileAuthority, MemoryAuthority, MultiAuthority};
use std::path::Path;
use std::sync::Arc;

/// Connects the authority `config` describes; `data_dir` is the file authority's default home.
pub async fn build(config: &AuthorityConfig, data_dir: &Path) -> Result<Arc<dyn Authority>> {
    Ok(match config {
        AuthorityConfig::File { path } => {
            let dir = path.clone().unwrap_or_else(|| data_dir.to_path_buf());
            let opened = tokio::task::spawn_blocking({
                let dir = dir.clone();
                move || FileAuthority::open(&dir)
            })
            .await
            .context("opening the file authority")?;
            let a = opened
                .with_context(|| format!("opening the file authority in {}", dir.display()))?;
            tracing::info!(path = %a.path().display(), "file authority");
            Arc::new(a)
        }
        AuthorityConfig::Memory => {
            tracing::warn!(
                "memory authority: nothing survives a restart, ids WILL repeat after one"
            );
            Arc::new(MemoryAuthority::new())
        }
        AuthorityConfig::Postgres {
            url,
            table,
            timeout,
        } => {
            let mut c = PostgresConfig::new(url.clone());
            if let Some(t) = table {
                c.table = t.clone();
            }
            c.op_timeout = *timeout;
            let a = PostgresAuthority::connect(c)
                .await
                .context("connecting to the PostgreSQL authority")?;
            tracing::info!("PostgreSQL authority");
            Arc::new(a)
        }
        AuthorityConfig::Mysql {
            url,
            table,
            tickets,
            timeout,
        } => {
            let mut c = MysqlConfig::new(url.clone());
            if let Some(t) = table {
                c.table = t.clone();
            }
            c.op_timeout = *timeout;
            if *tickets {
                let a = MysqlTicketAuthority::connect(c)
                    .await
                    .context("connecting to the MySQL ticket server")?;
                tracing::info!("MySQL/MariaDB authority, Flickr ticket mode");
                Arc::new(a)
            } else {
                let a = MysqlAuthority::connect(c)
                    .await
                    .context("connecting to the MySQL authority")?;
                tracing::info!("MySQL/MariaDB authority, blocks");
                Arc::new(a)
            }
        }
        #[cfg(not(feature = "etcd"))]
        AuthorityConfig::Etcd { .. } => anyhow::bail!(
            "this idmint was built without the etcd authority; rebuild with \
             `cargo build --release -p idmint-cli --features etcd` (needs protoc)"
        ),
        #[cfg(feature = "etcd")]
        AuthorityConfig::Etcd {
            endpoints,
            prefix,
            timeout,
        } => {
            let mut c = EtcdConfig::new(endpoints.clone());
            if let Some(p) = prefix {
                c.prefix = p.clone();
            }
            c.op_timeout = *timeout;
            let a = EtcdAuthority::connect(c)
                .await
                .context("connecting to the etcd authority")?;
            tracing::info!(endpoints = endpoints.len(), "etcd authority");
            Arc::new(a)
        }
        AuthorityConfig::Multi(members) => {
            let mut built = Vec::with_capacity(members.len());
            for (i, (member, offset)) in members.iter().enumerate() {
                let a = Box::pin(build(member, data_dir))
                    .await
                    .with_context(|| format!("authority member {i}"))?;
                built.push((a, *offset));
            }
            tracing::info!(
                members = built.len(),
                "multi authority: each member owns one residue class"
            );
            Arc::new(MultiAuthority::new(built)?)
        }
        other => anyhow::bail!(
            "this build does not support the authority kind {}",
            kind_name(other)
        ),
    })
}

fn kind_name(config: &AuthorityConfig) -> &'static str {
    match config {
        AuthorityConfig::File { .. } => "file",
        AuthorityConfig::Memory => "memory",
        AuthorityConfig::Postgres { .. } => "postgres",
        AuthorityConfig::Mysql { .. } => "mysql",
        AuthorityConfig::Etcd { .. } => "etcd",
        AuthorityConfig::Multi(_) => "multi",
        _ => "unknown",
    }
}
