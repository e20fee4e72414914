//! Scopes: what a token may do, per namespace pattern.
//!
//! A token's grants map namespace patterns to scopes. A pattern is `*` (every namespace), a
//! namespace name (`orders`: that namespace only) or a name followed by `.*` (`orders.*`: every
//! namespace whose name starts with `orders.`, not `orders` itself). Scopes are independent:
//! `admin` does not imply the others, so a token holds exactly what it lists.
//!
//! Each role has its scopes (docs/grpc.md "Tokens and roles"): an application `ids`,
//! `blocks`, `workers` (worker leases for its local snowflake ids) and `read`, a lower tier
//! `blocks` and `tier` (and `read`), a peer node `peer`, an operator `admin`. `tier` and
//! `peer` are the node-to-node protocol: worker leases held for a lower
//! tier, and forwards between the nodes of a cluster; an application token never needs them.

use idmint_core::NamespaceName;
use std::fmt;

/// What an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Take ids: HTTP `GET /v1/ids`, gRPC `Next`/`NextStream`, RESP `INCR`, `INCRBY`,
    /// `IDMINT.NEXT`.
    Ids,
    /// Take or give back blocks: HTTP `POST /v1/blocks`, gRPC `Block`/`GiveBack`, RESP
    /// `IDMINT.BLOCK`.
    Blocks,
    /// Read settings, state and decodings: namespace info and listing, decode, the status page
    /// and (with `[auth] metrics = "read"`) `/metrics`.
    Read,
    /// Move a sequence namespace's watermark up: HTTP `POST /v1/admin/rebase` and
    /// `/v1/admin/retire` (`idmint admin rebase`, `idmint admin retire`).
    Admin,
    /// Hold worker leases as a lower tier: gRPC `AcquireWorker`, `RenewWorker`,
    /// `ReleaseWorker`, `WorkerGroup`, on the lease group's name (a namespace's name, or its
    /// `worker_group`).
    Tier,
    /// Forward requests as a node of the same cluster: gRPC `Forward`, on the namespace.
    Peer,
    /// Lease worker ids of ordinary snowflake lease groups for ids made in the application (a
    /// client's local snowflake generator): gRPC `AcquireWorker`, `RenewWorker`,
    /// `ReleaseWorker`, `WorkerGroup`, on the group's name, as `tier` allows them; never a
    /// group of the nodes' own (`<ns>:leader`, `<ns>:shards`), and never another holder's
    /// lease (the holder's secret). No block, forward or other node-to-node call.
    Workers,
}

impl Scope {
    /// Every scope, in the order of [`Scope::name`].
    pub const ALL: [Scope; 7] = [
        Scope::Ids,
        Scope::Blocks,
        Scope::Read,
        Scope::Admin,
        Scope::Tier,
        Scope::Peer,
        Scope::Workers,
    ];

    /// The name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Ids => "ids",
            Scope::Blocks => "blocks",
            Scope::Read => "read",
            Scope::Admin => "admin",
            Scope::Tier => "tier",
            Scope::Peer => "peer",
            Scope::Workers => "workers",
        }
    }

    /// The scope named `text`, or an error listing the valid ones.
    pub fn parse(text: &str) -> Result<Scope, String> {
        Scope::ALL
            .into_iter()
            .find(|s| s.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown scope {text:?}; the scopes are ids, blocks, read, admin, tier, \
                     peer and workers"
                )
            })
    }

    fn bit(self) -> u8 {
        match self {
            Scope::Ids => 1,
            Scope::Blocks => 2,
            Scope::Read => 4,
            Scope::Admin => 8,
            Scope::Tier => 16,
            Scope::Peer => 32,
            Scope::Workers => 64,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    /// `self` with `scope`.
    pub fn with(self, scope: Scope) -> Scopes {
        Scopes(self.0 | scope.bit())
    }

    /// Whether `scope` is in the set.
    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }
}

/// Which namespaces a grant covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// `*`: every namespace.
    Any,
    /// `name`: that namespace.
    Exact(String),
    /// `name.*`: the namespaces under `name.` (the text kept is `name.`).
    Prefix(String),
}

impl Pattern {
    /// Reads a pattern, or says what is wrong.
    pub fn parse(text: &str) -> Result<Pattern, String> {
        if text == "*" {
            return Ok(Pattern::Any);
        }
        let (name, pattern) = match text.strip_suffix(".*") {
            Some(name) => (name, Pattern::Prefix(format!("{name}."))),
            None => (text, Pattern::Exact(text.to_owned())),
        };
        NamespaceName::new(name).map_err(|e| {
            format!(
                "{text:?} is not a namespace pattern (*, a name, or a name followed by .*): {e}"
            )
        })?;
        Ok(pattern)
    }

    /// Whether the pattern covers `namespace`.
    pub fn matches(&self, namespace: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Exact(name) => name == namespace,
            Pattern::Prefix(prefix) => {
                namespace.len() > prefix.len() && namespace.starts_with(prefix.as_str())
            }
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Any => f.write_str("*"),
            Pattern::Exact(name) => f.write_str(name),
            Pattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// The scopes a token holds on `namespace`: the union over every pattern that covers it.
pub fn scopes_on(grants: &[(Pattern, Scopes)], namespace: &str) -> Scopes {
    grants
        .iter()
        .filter(|(p, _)| p.matches(namespace))
        .fold(Scopes::default(), |all, (_, s)| Scopes(all.0 | s.0))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn patterns_match_what_they_say() {
        let any = Pattern::parse("*").unwrap();
        let exact = Pattern::parse("orders").unwrap();
        let prefix = Pattern::parse("orders.*").unwrap();
        assert!(any.matches("orders") && any.matches("x"));
        assert!(exact.matches("orders"));
        assert!(!exact.matches("orders.eu") && !exact.matches("orders2"));
        assert!(prefix.matches("orders.eu") && prefix.matches("orders.eu.west"));
        assert!(
            !prefix.matches("orders") && !prefix.matches("orders.") && !prefix.matches("ordersx")
        );
        assert_eq!(prefix.to_string(), "orders.*");
    }

    #[test]
    fn bad_patterns_and_scopes_are_refused() {
        for bad in ["", "**", "orders*", ".*", "a b", "-x", "orders.*.*"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Scope::parse("ids"), Ok(Scope::Ids));
        assert!(Scope::parse("write")
            .unwrap_err()
            .contains("ids, blocks, read, admin, tier, peer and workers"));
        assert_eq!(Scope::parse("tier"), Ok(Scope::Tier));
        assert_eq!(Scope::parse("peer"), Ok(Scope::Peer));
    }

    #[test]
    fn scopes_are_the_union_of_covering_grants() {
        let grants = vec![
            (
                Pattern::parse("orders.*").unwrap(),
                Scopes::default().with(Scope::Ids),
            ),
            (
                Pattern::parse("*").unwrap(),
                Scopes::default().with(Scope::Read),
            ),
        ];
        let on = scopes_on(&grants, "orders.eu");
        assert!(on.contains(Scope::Ids) && on.contains(Scope::Read));
        assert!(!on.contains(Scope::Blocks) && !on.contains(Scope::Admin));
        let on = scopes_on(&grants, "users");
        assert!(!on.contains(Scope::Ids) && on.contains(Scope::Read));
    }
}
