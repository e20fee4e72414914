//! Which shard a request for ids names: an explicit `shard`, or a `key` the namespace maps to
//! one. Every door parses the same two parameters into a [`ShardRoute`] and hands it to the one
//! node operation; the namespace decides whether it takes one ([`Namespace::ids_routed`]).
//!
//! Invariants: a route is refused, `invalid_request` naming the namespace, by every namespace
//! whose ids' node field is not the data's shard; [`refused_before_setup`] answers that refusal
//! from the configuration alone for names whose configuration rules a route out, so such a
//! request creates, leases and reserves nothing.

use super::{Ids, Namespace};
use crate::config::KindConfig;
use crate::error::IdError;
use std::fmt;

/// The shard a request for ids asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardRoute {
    /// This shard.
    Shard(u64),
    /// The shard of this key (`key % logical_shards`).
    Key(u64),
}

impl fmt::Display for ShardRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardRoute::Shard(shard) => write!(f, "shard {shard}"),
            ShardRoute::Key(key) => write!(f, "key {key}"),
        }
    }
}

impl ShardRoute {
    /// The route of a request's optional `shard` and `key`: neither is none, both is
    /// `invalid_request` (`shard` and `key` are the parameters' names in every door).
    pub fn of(shard: Option<u64>, key: Option<u64>) -> Result<Option<ShardRoute>, IdError> {
        match (shard, key) {
            (None, None) => Ok(None),
            (Some(shard), None) => Ok(Some(ShardRoute::Shard(shard))),
            (None, Some(key)) => Ok(Some(ShardRoute::Key(key))),
            (Some(_), Some(_)) => Err(IdError::InvalidRequest(
                "give shard or key, not both: a key names its shard".into(),
            )),
        }
    }
}

/// The refusal of `route` by namespace `name`, whose ids' node field is not the data's shard.
pub fn not_routed(name: &str, route: ShardRoute) -> IdError {
    IdError::InvalidRequest(format!(
        "namespace {name:?} does not take a shard or key ({route} was given): its ids' node \
         field is not the data's shard (only a snowflake namespace with shards = \"owned\" takes \
         one)"
    ))
}

/// Whether a namespace configured as `kind` may take a route: `None` is a name set up with
/// the defaults (auto-created, or a member of a family), a sequence namespace. `false` means
/// [`Namespace::ids_routed`] would refuse any route, so the request is refused before the
/// namespace is set up.
pub fn refused_before_setup(kind: Option<&KindConfig>) -> bool {
    !matches!(
        kind,
        Some(KindConfig::Snowflake {
            shards: Some(_),
            ..
        })
    )
}

impl Namespace {
    /// [`Namespace::ids`] for a request that may name a shard: `None` is a plain request;
    /// a route is `invalid_request` unless the namespace's node field is the data's shard.
    pub async fn ids_routed(&self, count: u64, route: Option<ShardRoute>) -> Result<Ids, IdError> {
        match (self, route) {
            (_, None) => self.ids(count).await,
            (Namespace::Snowflake(s), Some(route)) if s.owned_shards().is_some() => {
                let shard = match route {
                    ShardRoute::Shard(shard) => shard,
                    ShardRoute::Key(key) => s
                        .owned_shards()
                        .map_or(key, |shards| shards.shard_for_key(key)),
                };
                s.ids_of_shard(shard, count).await.map(Ids::U64)
            }
            (_, Some(route)) => Err(not_routed(self.name().as_str(), route)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_reads_as_its_parameter() {
        assert_eq!(ShardRoute::Shard(7).to_string(), "shard 7");
        assert_eq!(ShardRoute::Key(42).to_string(), "key 42");
    }

    #[test]
    fn shard_and_key_exclude_each_other() {
        assert_eq!(ShardRoute::of(None, None), Ok(None));
        assert_eq!(
            ShardRoute::of(Some(3), None),
            Ok(Some(ShardRoute::Shard(3)))
        );
        assert_eq!(ShardRoute::of(None, Some(9)), Ok(Some(ShardRoute::Key(9))));
        let both = ShardRoute::of(Some(3), Some(9)).unwrap_err();
        assert!(matches!(both, IdError::InvalidRequest(_)), "{both:?}");
        assert!(both.to_string().contains("shard or key"), "{both}");
    }

    #[test]
    fn the_refusal_names_the_namespace_and_the_route() {
        let e = not_routed("orders", ShardRoute::Key(42));
        assert!(matches!(e, IdError::InvalidRequest(_)), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("\"orders\"") && text.contains("key 42"),
            "{text}"
        );
    }

    #[test]
    fn only_a_shard_owned_namespace_is_set_up_for_a_route() {
        assert!(refused_before_setup(None));
        assert!(refused_before_setup(Some(&KindConfig::Uuid7)));
        assert!(refused_before_setup(Some(&KindConfig::Ulid)));
        let snowflake = |shards| KindConfig::Snowflake {
            layout: idmint_core::Layout::instagram(),
            worker: crate::config::WorkerConfig::Lease,
            group: None,
            shards,
        };
        assert!(refused_before_setup(Some(&snowflake(None))));
        let owned = crate::config::shards::ShardsConfig {
            logical: 16,
            range: 4,
        };
        assert!(!refused_before_setup(Some(&snowflake(Some(owned)))));
    }
}
