//! `shards = "owned"`: a snowflake namespace whose node field is the data's shard, chosen by
//! each request ([`crate::shards`]), rather than the node's worker id.
//!
//! Checked at parse: the shard count fits the layout's node field; a range is at least one
//! shard; the namespace has its own lease group (`worker` and `worker_group` choose a worker
//! id, which such a namespace does not use); the node has `[peers]` (a request for a shard
//! another node holds is forwarded there).

use super::{invalid, ConfigError};
use idmint_core::Layout;

/// Shards per range lease unless `shard_range` says otherwise.
pub const DEFAULT_SHARD_RANGE: u64 = 64;

/// The shards of a shard-owned snowflake namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardsConfig {
    /// `logical_shards`: shards `0..logical`; a `key` maps to `key % logical`. Default: every
    /// value of the layout's node field.
    pub logical: u64,
    /// `shard_range`: shards per lease; range `r` holds shards `r*range .. (r+1)*range`.
    pub range: u64,
}

impl ShardsConfig {
    /// How many range leases cover the shards.
    pub fn ranges(&self) -> u64 {
        self.logical.div_ceil(self.range)
    }

    /// The range holding `shard`.
    pub fn range_of(&self, shard: u64) -> u64 {
        shard / self.range
    }

    /// The shards of range `r`.
    pub fn shards_of(&self, r: u64) -> std::ops::Range<u64> {
        let start = r.saturating_mul(self.range).min(self.logical);
        start..start.saturating_add(self.range).min(self.logical)
    }
}

/// The raw keys of a snowflake namespace that concern shards.
#[derive(Debug, Default)]
pub(super) struct RawShards<'a> {
    pub shards: Option<&'a str>,
    pub logical_shards: Option<u64>,
    pub shard_range: Option<u64>,
    pub worker_set: bool,
    pub group_set: bool,
}

impl RawShards<'_> {
    /// `Some` for a shard-owned namespace of `layout`, named `key` in messages.
    pub(super) fn validate(
        self,
        key: &str,
        layout: &Layout,
    ) -> Result<Option<ShardsConfig>, ConfigError> {
        match self.shards {
            None | Some("worker") => {
                if self.logical_shards.is_some() || self.shard_range.is_some() {
                    return Err(invalid(
                        key,
                        "logical_shards and shard_range belong to a namespace with shards = \"owned\"",
                    ));
                }
                return Ok(None);
            }
            Some("owned") => {}
            Some(other) => {
                return Err(invalid(
                    format!("{key}.shards"),
                    format!("{other:?}: expected \"owned\" (the request chooses the node field) or \"worker\" (the node's worker id, the default)"),
                ))
            }
        }
        if self.worker_set || self.group_set {
            return Err(invalid(
                key,
                "worker and worker_group choose this node's worker id; a namespace with shards = \"owned\" takes its node field from each request, and leases its shards in its own group",
            ));
        }
        let possible = layout.max_node().saturating_add(1);
        let logical = self.logical_shards.unwrap_or(possible);
        if logical == 0 || logical > possible {
            return Err(invalid(
                format!("{key}.logical_shards"),
                format!(
                    "{logical}: must be from 1 to {possible} (the layout's {} node bits)",
                    layout.node_bits()
                ),
            ));
        }
        let range = self.shard_range.unwrap_or(DEFAULT_SHARD_RANGE).min(logical);
        if range == 0 {
            return Err(invalid(
                format!("{key}.shard_range"),
                "0: a lease holds at least one shard",
            ));
        }
        Ok(Some(ShardsConfig { logical, range }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_every_shard_once() {
        let c = ShardsConfig {
            logical: 10,
            range: 4,
        };
        assert_eq!(c.ranges(), 3);
        assert_eq!(c.shards_of(0), 0..4);
        assert_eq!(c.shards_of(2), 8..10);
        assert_eq!(c.range_of(9), 2);
        let all: Vec<u64> = (0..c.ranges()).flat_map(|r| c.shards_of(r)).collect();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }
}

#[cfg(test)]
mod parse_tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::{FileConfig, KindConfig};

    const PEERS: &str =
        "[server]\ngrpc = \"127.0.0.1:7879\"\n[peers]\nadvertise = \"http://10.0.0.7:7879\"\ntoken = \"idmint_peer\"\n";

    fn err(text: &str) -> String {
        FileConfig::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn an_owned_namespace_parses_with_its_defaults() {
        let c = FileConfig::parse(&format!(
            "{PEERS}[namespaces.photos]\nkind = \"snowflake\"\nlayout = \"instagram\"\nshards = \"owned\"\n"
        ))
        .unwrap();
        let Some(KindConfig::Snowflake {
            shards: Some(s), ..
        }) = c.node.namespaces.values().next()
        else {
            panic!("not an owned namespace");
        };
        assert_eq!((s.logical, s.range), (8192, super::DEFAULT_SHARD_RANGE));
    }

    #[test]
    fn mistakes_name_their_key() {
        let ns = "[namespaces.photos]\nkind = \"snowflake\"\nlayout = \"instagram\"\n";
        let e = err(&format!("{ns}shards = \"owned\"\n"));
        assert!(e.contains("[peers]"), "{e}");
        let e = err(&format!(
            "{PEERS}{ns}shards = \"owned\"\nlogical_shards = 8193\n"
        ));
        assert!(
            e.contains("photos.logical_shards") && e.contains("8192"),
            "{e}"
        );
        let e = err(&format!("{PEERS}{ns}shards = \"owned\"\nshard_range = 0\n"));
        assert!(e.contains("shard_range"), "{e}");
        let e = err(&format!("{PEERS}{ns}shards = \"owned\"\nworker = 3\n"));
        assert!(e.contains("worker and worker_group"), "{e}");
        let e = err(&format!("{PEERS}{ns}shards = \"data\"\n"));
        assert!(
            e.contains("photos.shards") && e.contains("\"owned\""),
            "{e}"
        );
        let e = err(&format!("{PEERS}{ns}logical_shards = 16\n"));
        assert!(e.contains("shards = \"owned\""), "{e}");
        let e = err("[namespaces.orders]\nkind = \"sequence\"\nshards = \"owned\"\n");
        assert!(e.contains("belong to snowflake namespaces"), "{e}");
    }
}
