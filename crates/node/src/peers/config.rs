//! `[peers]`: how the nodes of a cluster reach each other to forward requests (strict
//! namespaces to their leader, shard-owned namespaces to a shard's holder).
//!
//! A node records its url (`advertise`) with the leases it holds; a node forwarding to it calls
//! that url with `token`, over TLS trusting `ca_file` (presenting `cert_file`/`key_file` to a
//! node that asks for a client certificate). Checked at parse: a namespace that forwards needs
//! this section, and this section needs a url and `server.grpc`.

use crate::config::{invalid, ConfigError, MAX_TIMEOUT_MS};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// Default bound on how long a request waits for the node that serves it (a strict
/// namespace's leader, a shard's holder).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// Default bound on one forward.
pub const DEFAULT_FORWARD_TIMEOUT: Duration = Duration::from_secs(2);

/// The `[peers]` section, validated. Its `Debug` leaves the token out.
#[derive(Clone, PartialEq, Eq)]
pub struct PeersConfig {
    /// `advertise`: the gRPC url (`http://` or `https://`) the other nodes reach this one at.
    pub advertise: String,
    /// `token`: the secret the nodes of a cluster share. Each forward carries it as its bearer
    /// token (a node answers a forward only from a caller presenting it, and with `[auth]` only
    /// if it also has scope `peer` on the namespace), and each answer proves it
    /// ([`crate::peers::proof`]). Required: a node never trusts a url merely written in a lease.
    pub token: String,
    /// `ca_file`: the CA the other nodes' certificates are checked against (else the public
    /// roots).
    pub ca_file: Option<PathBuf>,
    /// `cert_file` and `key_file`: the client certificate presented to the other nodes.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// `wait_ms`: how long a request waits for the node that serves it (a failover, an
    /// authority that does not answer) before it answers `no_leader`.
    pub wait: Duration,
    /// `forward_timeout_ms`: the bound on one forward.
    pub forward_timeout: Duration,
}

impl std::fmt::Debug for PeersConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeersConfig")
            .field("advertise", &self.advertise)
            .field("token", &"<redacted>")
            .field("ca_file", &self.ca_file)
            .field("identity", &self.identity)
            .field("wait", &self.wait)
            .field("forward_timeout", &self.forward_timeout)
            .finish()
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPeers {
    advertise: Option<String>,
    token: Option<String>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    wait_ms: Option<u64>,
    forward_timeout_ms: Option<u64>,
}

impl RawPeers {
    pub(crate) fn validate(self) -> Result<PeersConfig, ConfigError> {
        let advertise = self.advertise.ok_or_else(|| {
            invalid(
                "peers.advertise",
                "missing: the gRPC url the other nodes reach this node at (e.g. \"http://10.0.0.7:7879\"), which this node records with the leases other nodes forward by",
            )
        })?;
        if !(advertise.starts_with("http://") || advertise.starts_with("https://"))
            || advertise.contains(char::is_whitespace)
        {
            return Err(invalid(
                "peers.advertise",
                format!("{advertise:?}: expected an http:// or https:// url"),
            ));
        }
        let identity = match (self.cert_file, self.key_file) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                return Err(invalid(
                    "peers.cert_file",
                    "cert_file and key_file go together (the client certificate and its key)",
                ))
            }
        };
        let token = match self.token {
            Some(t) if !t.trim().is_empty() => t.trim().to_owned(),
            Some(_) => return Err(invalid("peers.token", "empty")),
            None => {
                return Err(invalid(
                    "peers.token",
                    "missing: the secret the nodes of this cluster share (`idmint token new --role peer` makes one). Every forward carries it and every answer proves it, so a node never forwards to, nor answers, a node that is not a peer",
                ))
            }
        };
        let ms = |key: &str, value: Option<u64>, default: Duration| match value {
            None => Ok(default),
            Some(ms) if (1..=MAX_TIMEOUT_MS).contains(&ms) => Ok(Duration::from_millis(ms)),
            Some(ms) => Err(invalid(
                format!("peers.{key}"),
                format!("{ms}: must be from 1 to {MAX_TIMEOUT_MS} (an hour)"),
            )),
        };
        Ok(PeersConfig {
            advertise,
            token,
            ca_file: self.ca_file,
            identity,
            wait: ms("wait_ms", self.wait_ms, DEFAULT_WAIT)?,
            forward_timeout: ms(
                "forward_timeout_ms",
                self.forward_timeout_ms,
                DEFAULT_FORWARD_TIMEOUT,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::{FileConfig, KindConfig, Order};

    const STRICT_NS: &str = "[namespaces.chat]\nkind = \"sequence\"\norder = \"strict\"\n";
    const SECTION: &str =
        "[peers]\nadvertise = \"http://10.0.0.7:7879\"\ntoken = \"idmint_peer\"\n";
    const GRPC: &str = "[server]\ngrpc = \"127.0.0.1:7879\"\n";

    fn err(text: &str) -> String {
        FileConfig::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_strict_namespace_parses_with_its_section() {
        let c = FileConfig::parse(&format!("{GRPC}{SECTION}{STRICT_NS}")).unwrap();
        let chat = c.node.namespaces.values().next().unwrap();
        assert!(matches!(
            chat,
            KindConfig::Sequence {
                order: Order::Strict,
                ..
            }
        ));
        let strict = c.node.peers.unwrap();
        assert_eq!(strict.advertise, "http://10.0.0.7:7879");
        assert_eq!(strict.wait, super::DEFAULT_WAIT);
    }

    #[test]
    fn mistakes_name_their_key() {
        let e = err(&format!("{GRPC}{STRICT_NS}"));
        assert!(
            e.contains("namespaces.chat.order") && e.contains("[peers]"),
            "{e}"
        );
        let e = err(&format!("{SECTION}{STRICT_NS}"));
        assert!(e.contains("server.grpc"), "{e}");
        let e = err(&format!("{GRPC}{SECTION}{STRICT_NS}cache = \"off\"\n"));
        assert!(e.contains("already in strict order"), "{e}");
        let e = err(&format!(
            "{GRPC}[peers]\nadvertise = \"10.0.0.7:7879\"\ntoken = \"t\"\n{STRICT_NS}"
        ));
        assert!(e.contains("peers.advertise") && e.contains("url"), "{e}");
        let e = err(&format!("{GRPC}[peers]\nwait_ms = 10\n{STRICT_NS}"));
        assert!(
            e.contains("peers.advertise") && e.contains("missing"),
            "{e}"
        );
        let e = err(&format!(
            "{GRPC}[peers]\nadvertise = \"http://10.0.0.7:7879\"\n{STRICT_NS}"
        ));
        assert!(
            e.contains("peers.token") && e.contains("missing") && e.contains("--role peer"),
            "{e}"
        );
        let e = err(&format!(
            "{GRPC}{SECTION}cert_file = \"c.pem\"\n{STRICT_NS}"
        ));
        assert!(e.contains("key_file"), "{e}");
        let e = err(&format!(
            "{GRPC}{SECTION}{STRICT_NS}\n[authority]\nkind = \"upstream\"\nurls = [\"http://127.0.0.1:1\"]\n"
        ));
        assert!(e.contains("one authority"), "{e}");
        let e = err("[namespaces.s]\nkind = \"snowflake\"\norder = \"strict\"\n");
        assert!(e.contains("order keys belong to sequence"), "{e}");
        let e = err("[namespaces.s]\nkind = \"sequence\"\norder = \"global\"\n");
        assert!(
            e.contains("unknown order \"global\"; known: writer, strict"),
            "{e}"
        );
    }
}
