//! The Redis client's plumbing: the one multiplexed connection (opened on first use, dropped
//! after a failure on it, opened again by the next call), every call bounded by the operation
//! timeout, the error messages (never a password), and the checks made of a server at connect.
//!
//! Invariants: every failure of a call is [`StoreError::Unavailable`] (the caller cannot know
//! whether a write ran), except a key of another type than idmint writes
//! ([`StoreError::Corrupt`]); nothing is ever sent twice by this module.

use super::{unavailable, RedisAuthority, RedisConfig};
use crate::config::redact_url;
use crate::StoreError;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, FromRedisValue, RedisError, ScriptInvocation};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The lowest Redis version whose commands and script flags the authority uses (`#!lua`
/// flags, `SET … NX GET`, `XTRIM MINID`, `CONFIG GET` of several parameters).
const MIN_MAJOR: u64 = 7;

/// One server's connection, shared by every call.
pub(super) struct Connection {
    client: Client,
    /// The open connection and its number (so a failed call drops only the one it used).
    current: tokio::sync::Mutex<Option<(u64, MultiplexedConnection)>>,
    opened: AtomicU64,
    op_timeout: Duration,
    /// The url without its password, for messages.
    shown: String,
}

impl Connection {
    /// A client for `config`'s url and TLS settings; connects on first use.
    pub(super) fn open(config: &RedisConfig) -> Result<Connection, StoreError> {
        use crate::tls::TlsMode;
        let invalid = |message: String| StoreError::InvalidSetup {
            message: format!("redis: {message}"),
        };
        let shown = redact_url(&config.url);
        let tls_url = config.url.starts_with("rediss://");
        let client = match config.tls {
            TlsMode::Require => {
                return Err(invalid(
                    "tls = \"require\" is not supported (the client always checks the \
                     certificate): set tls = \"verify-full\" and ca_file"
                        .into(),
                ))
            }
            TlsMode::Off if tls_url => {
                return Err(invalid(format!(
                    "url {shown} is rediss://: set tls = \"verify-full\" and ca_file"
                )))
            }
            TlsMode::VerifyFull if !tls_url => {
                return Err(invalid(format!(
                    "url {shown} is redis:// but tls is on: use rediss://"
                )))
            }
            TlsMode::Off => Client::open(config.url.as_str()),
            TlsMode::VerifyFull => {
                let pem = crate::tls::ca_pem(config.tls, config.ca_file.as_deref())
                    .map_err(|e| invalid(format!("TLS: {e}")))?;
                Client::build_with_tls(
                    config.url.as_str(),
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: pem,
                    },
                )
            }
        }
        .map_err(|e| invalid(format!("url {shown}: {e}")))?;
        Ok(Connection {
            client,
            current: tokio::sync::Mutex::new(None),
            opened: AtomicU64::new(0),
            op_timeout: config.op_timeout,
            shown,
        })
    }

    /// The open connection, or a new one.
    async fn get(&self) -> Result<(u64, MultiplexedConnection), RedisError> {
        let mut current = self.current.lock().await;
        if let Some((n, conn)) = current.as_ref() {
            return Ok((*n, conn.clone()));
        }
        // The operation timeout around the whole call bounds connecting too.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let n = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        *current = Some((n, conn.clone()));
        Ok((n, conn))
    }

    /// Drops connection `n` if it is still the open one.
    async fn drop_connection(&self, n: u64) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|(open, _)| *open == n) {
            *current = None;
        }
    }

    /// Runs `call` on the connection (opened first if need be) within the operation timeout:
    /// `Ok(Err(e))` if the server answered with an error, `Err` if the connection failed or
    /// the timeout passed.
    async fn run<T, F, Fut>(&self, what: &str, call: F) -> Result<Result<T, RedisError>, StoreError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        let mut used = None;
        let attempt = async {
            let (n, conn) = self.get().await?;
            used = Some(n);
            call(conn).await
        };
        let outcome = tokio::time::timeout(self.op_timeout, attempt).await;
        let failure = match outcome {
            Ok(Ok(value)) => return Ok(Ok(value)),
            Ok(Err(e)) if is_answer(&e) => return Ok(Err(e)),
            Ok(Err(e)) if !e.is_timeout() => format!("{what}: {}: {e}", self.shown),
            Ok(Err(_)) | Err(_) => format!("{what}: no answer within {:?}", self.op_timeout),
        };
        if let Some(n) = used {
            self.drop_connection(n).await;
        }
        Err(unavailable(failure))
    }

    /// [`Self::run`] with the server's error answers turned into [`StoreError`]s.
    async fn run_flat<T, F, Fut>(&self, what: &str, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        match self.run(what, call).await? {
            Ok(value) => Ok(value),
            Err(e) if is_wrong_type(&e) => Err(StoreError::Corrupt {
                message: format!("{what}: a key of another type than idmint writes: {e}"),
            }),
            Err(e) => Err(unavailable(format!("{what}: {}: {e}", self.shown))),
        }
    }

    /// One command whose error answer the caller handles.
    pub(super) async fn query_answer<T: FromRedisValue>(
        &self,
        what: &str,
        cmd: &Cmd,
    ) -> Result<Result<T, RedisError>, StoreError> {
        self.run(
            what,
            |mut conn| async move { cmd.query_async(&mut conn).await },
        )
        .await
    }

    /// One command.
    pub(super) async fn query<T: FromRedisValue>(
        &self,
        what: &str,
        cmd: &Cmd,
    ) -> Result<T, StoreError> {
        self.run_flat(
            what,
            |mut conn| async move { cmd.query_async(&mut conn).await },
        )
        .await
    }

    /// One script (by SHA; loaded first if the server does not know it).
    pub(super) async fn script<T: FromRedisValue>(
        &self,
        what: &str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.run_flat(what, |mut conn| async move {
            invocation.invoke_async(&mut conn).await
        })
        .await
    }
}

/// Whether the server answered `e` (the connection is fine), rather than the connection failing.
fn is_answer(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}

fn is_wrong_type(e: &RedisError) -> bool {
    e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE")
}

impl RedisAuthority {
    /// The checks of [`RedisAuthority::connect`]: the version, then durability and eviction.
    pub(super) async fn check_server(&self) -> Result<(), StoreError> {
        let info: String = self
            .conn
            .query(
                "reading the server's version",
                redis::cmd("INFO").arg("server"),
            )
            .await?;
        let version = info_field(&info, "redis_version").unwrap_or_default();
        let major = version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u64>().ok())
            .unwrap_or(0);
        if major < MIN_MAJOR {
            return Err(StoreError::InvalidSetup {
                message: format!(
                    "redis: the server is version {version:?}; the authority needs Redis \
                     {MIN_MAJOR} or later (or Valkey)"
                ),
            });
        }
        let mut get = redis::cmd("CONFIG");
        get.arg("GET")
            .arg("appendonly")
            .arg("appendfsync")
            .arg("no-appendfsync-on-rewrite")
            .arg("maxmemory-policy");
        let settings: Result<Vec<(String, String)>, RedisError> = self
            .conn
            .query_answer("reading the server's settings", &get)
            .await?;
        let problems = match settings {
            Ok(pairs) => unsafe_settings(&pairs),
            Err(e) => vec![format!(
                "its settings cannot be read ({e}), so its durability is unknown"
            )],
        };
        if problems.is_empty() {
            return Ok(());
        }
        let text = problems.join("; ");
        if self.config.accept_unsafe_durability {
            tracing::warn!(
                "redis authority: the server is not safe for ids ({text}); serving anyway \
                 because accept_unsafe_durability = true: a crash of it can make ids repeat"
            );
            return Ok(());
        }
        Err(StoreError::InvalidSetup {
            message: format!(
                "redis: refusing the server at {}: {text}. A crash could then forget \
                 reservations already handed out, and ids would repeat. Set `appendonly yes`, \
                 `appendfsync always`, `no-appendfsync-on-rewrite no` and \
                 `maxmemory-policy noeviction` in its redis.conf (or \
                 CONFIG SET them and CONFIG REWRITE), or set accept_unsafe_durability = true \
                 for a server whose data may be lost",
                self.conn.shown
            ),
        })
    }
}

/// What is unsafe in a server's `appendonly`, `appendfsync`, `no-appendfsync-on-rewrite` and
/// `maxmemory-policy`.
fn unsafe_settings(pairs: &[(String, String)]) -> Vec<String> {
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut problems = Vec::new();
    match get("appendonly") {
        Some("yes") => {}
        other => problems.push(format!(
            "appendonly is {} (not yes: writes are not logged)",
            other.unwrap_or("unknown")
        )),
    }
    match get("appendfsync") {
        Some("always") => {}
        other => problems.push(format!(
            "appendfsync is {} (not always: acknowledged writes may be lost in a crash)",
            other.unwrap_or("unknown")
        )),
    }
    match get("no-appendfsync-on-rewrite") {
        Some("no") => {}
        other => problems.push(format!(
            "no-appendfsync-on-rewrite is {} (not no: writes are not fsynced while the log is \
             rewritten, so a crash then loses acknowledged writes)",
            other.unwrap_or("unknown")
        )),
    }
    match get("maxmemory-policy") {
        Some("noeviction") => {}
        other => problems.push(format!(
            "maxmemory-policy is {} (not noeviction: a watermark or a live lease may be evicted)",
            other.unwrap_or("unknown")
        )),
    }
    problems
}

/// The value of `field` in `INFO` text (`field:value` lines).
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn only_fsynced_non_evicting_servers_are_safe() {
        let safe = pairs(&[
            ("appendonly", "yes"),
            ("appendfsync", "always"),
            ("no-appendfsync-on-rewrite", "no"),
            ("maxmemory-policy", "noeviction"),
        ]);
        assert!(unsafe_settings(&safe).is_empty());
        let everysec = pairs(&[
            ("appendonly", "yes"),
            ("appendfsync", "everysec"),
            ("no-appendfsync-on-rewrite", "yes"),
            ("maxmemory-policy", "allkeys-lru"),
        ]);
        let problems = unsafe_settings(&everysec);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("everysec"));
        assert!(problems[1].contains("no-appendfsync-on-rewrite"));
        assert!(problems[2].contains("allkeys-lru"));
        assert_eq!(unsafe_settings(&[]).len(), 4);
    }

    #[test]
    fn info_fields_are_found() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(info_field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(info, "redis"), None);
    }
}
