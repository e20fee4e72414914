//! Namespace families: `[namespaces."NAME.*"]` declares every namespace under `NAME.` at once,
//! each one created on first use with the family's settings (one sequence per member: the
//! per-shard counter of a composite key `(shard, local id)` is member `NAME.<shard>`).
//!
//! Rules (docs/configuration.md, `[namespaces.NAME]`):
//! - the key is a namespace name followed by `.*`, read by the `[auth]` pattern matcher
//!   ([`Pattern`]), so a grant on `invoices.*` covers exactly the members of `invoices.*`;
//! - a member is any valid namespace name that starts with `NAME.` and is longer (its suffix
//!   any namespace-name characters: a shard number, a region, a tenant);
//! - a declared namespace of the exact name is not a member: its own table wins;
//! - two families never overlap (neither prefix starts with the other);
//! - a family is a sequence in writer order (snowflake, uuid7 and ulid ids are unique without
//!   one namespace per shard; strict order would run one leader election per member);
//! - at most `max_members` members per node; they do not count toward `server.max_namespaces`,
//!   and are created whatever `server.auto_create` says (a family is a declaration).

use super::{invalid, namespace_kind, CacheMode, ConfigError, KindConfig, Order, RawKind};
use super::{RawNamespace, RawSequence, DEFAULT_MAX_NAMESPACES};
use crate::auth::Pattern;
use idmint_core::{NamespaceName, SequenceSpec};
use std::collections::BTreeMap;

/// A family of sequence namespaces, created on first use.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// `NAME.*`: which names are members.
    pub pattern: Pattern,
    /// Which ids every member hands out.
    pub spec: SequenceSpec,
    /// How every member caches them.
    pub cache: CacheMode,
    /// `max_members`: most members a node creates (at least 1; default
    /// [`DEFAULT_MAX_NAMESPACES`]).
    pub max_members: usize,
}

impl Family {
    /// The configuration key of the family's table (`namespaces."invoices.*"`).
    pub fn key(&self) -> String {
        key(&self.pattern.to_string())
    }

    /// A member's settings: a sequence in writer order.
    pub fn kind(&self) -> KindConfig {
        KindConfig::Sequence {
            spec: self.spec,
            cache: self.cache,
            order: Order::Writer,
        }
    }
}

/// The configuration key of the table named `name` when `name` is a family's.
fn key(name: &str) -> String {
    format!("namespaces.\"{name}\"")
}

/// Whether the `[namespaces]` table named `name` declares a family rather than a namespace.
pub(super) fn is_family(name: &str) -> bool {
    name.contains('*')
}

/// The family of the `[namespaces."NAME.*"]` table `ns`.
pub(super) fn family(
    name: &str,
    ns: &RawNamespace,
    defaults: &RawSequence,
) -> Result<Family, ConfigError> {
    let key = key(name);
    let pattern = match Pattern::parse(name) {
        Ok(p @ Pattern::Prefix(_)) => p,
        Ok(_) => {
            return Err(invalid(
                &key,
                "a family is a namespace name followed by .* (invoices.*); to create any namespace on first use, see server.auto_create",
            ))
        }
        Err(e) => return Err(invalid(&key, e)),
    };
    if ns.kind != RawKind::Sequence {
        return Err(invalid(
            format!("{key}.kind"),
            "a family gives each member its own sequence; snowflake, uuid7 and ulid ids are unique without one namespace per shard: declare one namespace for every shard",
        ));
    }
    if ns.order.map(|o| o.0) == Some(Order::Strict) {
        return Err(invalid(
            format!("{key}.order"),
            "a family's members are in writer order: strict order runs a leader election for each namespace; declare strict namespaces one by one",
        ));
    }
    let max_members = match ns.max_members {
        None => DEFAULT_MAX_NAMESPACES,
        Some(0) => return Err(invalid(format!("{key}.max_members"), "must be at least 1")),
        Some(n) => n,
    };
    match namespace_kind(&key, ns, defaults)? {
        KindConfig::Sequence {
            spec,
            cache,
            order: Order::Writer,
        } => Ok(Family {
            pattern,
            spec,
            cache,
            max_members,
        }),
        other => Err(invalid(
            key,
            format!(
                "a family is a sequence in writer order, not {}",
                other.name()
            ),
        )),
    }
}

/// Two families whose patterns share a member (one prefix starts with the other) are an
/// error naming both keys: a member must have one family's settings.
pub(super) fn check_overlaps(families: &BTreeMap<String, Family>) -> Result<(), ConfigError> {
    for (i, (name, family)) in families.iter().enumerate() {
        for (other, theirs) in families.iter().skip(i + 1) {
            let (Pattern::Prefix(a), Pattern::Prefix(b)) = (&family.pattern, &theirs.pattern)
            else {
                continue;
            };
            if a.starts_with(b.as_str()) || b.starts_with(a.as_str()) {
                return Err(invalid(
                    key(other),
                    format!(
                        "overlaps family {} (a name can be a member of both); a member must have one family's settings",
                        key(name)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The family `name` is a member of, if any: none when `declared` names it exactly (its own
/// table wins). Families never overlap, so there is at most one.
pub(crate) fn family_of<'a>(
    families: &'a BTreeMap<String, Family>,
    declared: &BTreeMap<NamespaceName, KindConfig>,
    name: &NamespaceName,
) -> Option<&'a Family> {
    if declared.contains_key(name) {
        return None;
    }
    families.values().find(|f| f.pattern.matches(name.as_str()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::{CacheMode, ConfigError, FileConfig, KindConfig, Order};

    fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        FileConfig::parse(text)
    }

    fn invalid_key(text: &str) -> (String, String) {
        match parse(text) {
            Err(ConfigError::Invalid { key, message }) => (key, message),
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    #[test]
    fn a_family_parses_with_its_settings_and_bound() {
        let cfg = parse(
            r#"
            [namespaces."invoices.*"]
            kind = "sequence"
            width = 32
            cache = "fixed"
            block_size = 500
            max_members = 7
            "#,
        )
        .unwrap();
        let node = &cfg.node;
        assert!(node.namespaces.is_empty());
        let family = &node.families["invoices.*"];
        assert_eq!(family.max_members, 7);
        assert_eq!(family.key(), "namespaces.\"invoices.*\"");
        assert_eq!(family.spec.width().bits(), 32);
        assert!(matches!(family.cache, CacheMode::Buffered(_)));
        assert!(matches!(
            family.kind(),
            KindConfig::Sequence {
                order: Order::Writer,
                ..
            }
        ));
        let member = |n: &str| node.family_of(&n.parse().unwrap()).map(|f| f.key());
        assert_eq!(
            member("invoices.42").as_deref(),
            Some("namespaces.\"invoices.*\"")
        );
        assert_eq!(
            member("invoices.eu-1").as_deref(),
            Some("namespaces.\"invoices.*\"")
        );
        assert_eq!(member("invoices"), None);
        assert_eq!(member("invoicesx.1"), None);
        assert_eq!(member("orders.1"), None);
    }

    #[test]
    fn the_bound_defaults_and_a_declared_name_wins() {
        let cfg = parse(
            r#"
            [namespaces."invoices.*"]
            kind = "sequence"

            [namespaces."invoices.0"]
            kind = "sequence"
            width = 32
            "#,
        )
        .unwrap();
        assert_eq!(
            cfg.node.families["invoices.*"].max_members,
            crate::config::DEFAULT_MAX_NAMESPACES
        );
        assert!(cfg.node.family_of(&"invoices.0".parse().unwrap()).is_none());
        assert!(cfg.node.family_of(&"invoices.1".parse().unwrap()).is_some());
    }

    #[test]
    fn overlapping_families_are_refused_naming_both() {
        let (key, message) = invalid_key(
            r#"
            [namespaces."invoices.*"]
            kind = "sequence"
            [namespaces."invoices.eu.*"]
            kind = "sequence"
            "#,
        );
        assert_eq!(key, "namespaces.\"invoices.eu.*\"");
        assert!(message.contains("namespaces.\"invoices.*\""), "{message}");
        // Siblings share no member.
        parse(
            r#"
            [namespaces."invoices.eu.*"]
            kind = "sequence"
            [namespaces."invoices.us.*"]
            kind = "sequence"
            [namespaces."invoicesx.*"]
            kind = "sequence"
            "#,
        )
        .unwrap();
    }

    #[test]
    fn bad_families_name_their_key() {
        let cases = [
            (
                "[namespaces.\"*\"]\nkind = \"sequence\"",
                "namespaces.\"*\"",
                "server.auto_create",
            ),
            (
                "[namespaces.\"invoices*\"]\nkind = \"sequence\"",
                "namespaces.\"invoices*\"",
                "not a namespace pattern",
            ),
            (
                "[namespaces.\"a.*.*\"]\nkind = \"sequence\"",
                "namespaces.\"a.*.*\"",
                "not a namespace pattern",
            ),
            (
                "[namespaces.\"t.*\"]\nkind = \"snowflake\"",
                "namespaces.\"t.*\".kind",
                "one namespace per shard",
            ),
            (
                "[namespaces.\"t.*\"]\nkind = \"uuid7\"",
                "namespaces.\"t.*\".kind",
                "one namespace per shard",
            ),
            (
                "[namespaces.\"t.*\"]\nkind = \"sequence\"\norder = \"strict\"",
                "namespaces.\"t.*\".order",
                "writer order",
            ),
            (
                "[namespaces.\"t.*\"]\nkind = \"sequence\"\nmax_members = 0",
                "namespaces.\"t.*\".max_members",
                "at least 1",
            ),
            (
                "[namespaces.\"t.*\"]\nkind = \"sequence\"\nwidth = 16",
                "namespaces.\"t.*\".width",
                "",
            ),
            (
                "[namespaces.t]\nkind = \"sequence\"\nmax_members = 3",
                "namespaces.t.max_members",
                "family",
            ),
        ];
        for (text, want_key, want_message) in cases {
            let (key, message) = invalid_key(text);
            assert_eq!(key, want_key, "{text}");
            assert!(message.contains(want_message), "{text}: {message}");
        }
    }

    #[test]
    fn family_specs_are_checked_like_declared_ones() {
        let (key, _) = invalid_key(
            r#"
            [server]
            max_count = 3000000
            [namespaces."small.*"]
            kind = "sequence"
            width = 32
            "#,
        );
        assert_eq!(key, "server.max_count");
        let (key, message) = invalid_key(
            r#"
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
            [defaults]
            step = 2
            [namespaces."t.*"]
            kind = "sequence"
            step = 1
            "#,
        );
        assert_eq!(key, "namespaces.\"t.*\"", "{message}");
    }
}
