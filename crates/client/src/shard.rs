//! Ids of one shard of a snowflake namespace with `shards = "owned"` (docs/configuration.md),
//! whose ids' node field is the data's shard: [`ShardRoute`] names the shard, by number or by
//! a key the node maps to one, and [`next_routed`] asks a node for ids of it.
//!
//! A client of several nodes sends a shard's request to the node holding its range first
//! (`shard_map.rs`), saving the node it would reach the forward to the holder.
//!
//! Invariants: routed ids are fetched per call with `Next` and returned as the node answered
//! them (strictly increasing, all of the one shard); nothing is buffered, since a namespace's
//! buffer holds ids of whatever shard the node chose. A namespace that does not take a shard
//! answers `invalid_request`, which comes back as [`ClientError::Rejected`] with that code.

use crate::config::MAX_BATCH;
use crate::error::ClientError;
use crate::id::Id;
use crate::nodes::{CallError, IntoClientError, Nodes};
use crate::shard_map::ShardMaps;
use idmint_core::NamespaceName;
use idmint_proto::v1 as proto;
use std::sync::Arc;

/// Which shard a request for ids names. One or the other, never both: a key names its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardRoute {
    /// This shard, 0 to the namespace's `logical_shards - 1`.
    Shard(u64),
    /// The shard of this key: `key % logical_shards`.
    Key(u64),
}

impl ShardRoute {
    /// The request's `shard` and `key` fields.
    fn fields(self) -> (Option<u64>, Option<u64>) {
        match self {
            ShardRoute::Shard(shard) => (Some(shard), None),
            ShardRoute::Key(key) => (None, Some(key)),
        }
    }
}

/// The `Next` request for `count` ids of `route` in `ns`, checked here: the name's syntax and
/// the count (1 to [`MAX_BATCH`]).
pub(crate) fn request(
    ns: &str,
    count: u64,
    route: ShardRoute,
) -> Result<proto::NextRequest, ClientError> {
    let name = NamespaceName::new(ns)?;
    if count == 0 || count > MAX_BATCH {
        return Err(ClientError::InvalidCount {
            count,
            max: MAX_BATCH,
        });
    }
    let (shard, key) = route.fields();
    Ok(proto::NextRequest {
        namespace: name.to_string(),
        count: Some(count),
        shard,
        key,
    })
}

/// `count` ids of `route` in `ns` from the nodes, as one of them answered: first the node the
/// shard map names for the shard's range, if one (`shard_map.rs`), then the usual order.
pub(crate) async fn next_routed(
    nodes: &Nodes,
    maps: &Arc<ShardMaps>,
    ns: &str,
    count: u64,
    route: ShardRoute,
) -> Result<Vec<Id>, ClientError> {
    let request = request(ns, count, route)?;
    let op = |mut c: idmint_proto::nodes::NodeClient| {
        let request = request.clone();
        async move { c.next(request).await }
    };
    let answered = match maps.choose(ns, route).await {
        None => nodes.call(op).await,
        Some(choice) => {
            let answered = nodes.call_from(choice.node, op).await;
            let chosen_failed = match &answered {
                Ok((node, _)) | Err(CallError::Status(node, _)) => *node != choice.node,
                Err(CallError::Unavailable { .. }) => true,
            };
            if chosen_failed {
                maps.failed(ns, choice);
            }
            answered
        }
    };
    let (_, ids) = answered.map_err(|e| e.into_client_error(ns))?;
    let ids = match ids.ids {
        Some(proto::ids::Ids::U64(list)) => list.ids,
        _ => {
            return Err(ClientError::node(format!(
                "the node answered ids of {ns} that are not snowflake ids"
            )))
        }
    };
    if !ids.windows(2).all(|w| w[0] < w[1]) {
        return Err(ClientError::node(format!(
            "the node answered ids of {ns} that do not increase"
        )));
    }
    Ok(ids.into_iter().map(Id::Snowflake).collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_route_is_sent_as_its_one_field() {
        let r = request("photos", 3, ShardRoute::Shard(7)).unwrap();
        assert_eq!(
            (r.namespace.as_str(), r.count, r.shard, r.key),
            ("photos", Some(3), Some(7), None)
        );
        let r = request("photos", 1, ShardRoute::Key(u64::MAX)).unwrap();
        assert_eq!((r.shard, r.key), (None, Some(u64::MAX)));
    }

    #[test]
    fn a_bad_name_or_count_is_refused_before_sending() {
        assert!(matches!(
            request("-bad", 1, ShardRoute::Shard(0)),
            Err(ClientError::InvalidNamespace(_))
        ));
        for count in [0, MAX_BATCH + 1] {
            assert_eq!(
                request("photos", count, ShardRoute::Key(1)),
                Err(ClientError::InvalidCount {
                    count,
                    max: MAX_BATCH
                })
            );
        }
    }
}
