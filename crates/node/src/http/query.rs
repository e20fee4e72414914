//! Query strings of the HTTP routes, read as the node's operations take them: numbers only;
//! whether one is allowed (the count rule, a shard's range, whether a namespace takes a
//! shard) is the node's decision.
//!
//! Invariants: every parameter may appear once; an unknown one is refused naming it; a value
//! that is not a whole number is refused naming its parameter (`invalid_count` for `count`,
//! `invalid_request` for any other). A query with nothing to percent-decode (no `%`, no `+`:
//! every request a client library sends) is split in place, as
//! `application/x-www-form-urlencoded` splits it (on `&`, empty parts skipped, a part without
//! `=` has an empty value), with no allocation; any other goes through axum's `Query`.

use crate::error::IdError;
use crate::namespace::route::ShardRoute;
use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::Uri;

/// The query's `(name, value)` pairs, percent-decoded (`+` is a space), in order.
pub(super) fn query_pairs(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Vec<(String, String)>, IdError> {
    query.map(|Query(pairs)| pairs).map_err(|_| {
        IdError::InvalidRequest("the query string is not a list of name=value pairs".into())
    })
}

/// Calls `each` with every `(name, value)` pair of `uri`'s query, in order, stopping at its
/// first error.
fn each_pair(
    uri: &Uri,
    mut each: impl FnMut(&str, &str) -> Result<(), IdError>,
) -> Result<(), IdError> {
    let raw = uri.query().unwrap_or_default();
    if raw.bytes().any(|b| b == b'%' || b == b'+') {
        for (k, v) in query_pairs(Query::try_from_uri(uri))? {
            each(&k, &v)?;
        }
        return Ok(());
    }
    raw.split('&')
        .filter(|part| !part.is_empty())
        .try_for_each(|part| {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            each(k, v)
        })
}

/// Puts the number `raw` of parameter `name` in `slot`, refusing a second one.
fn once(slot: &mut Option<u64>, name: &str, raw: &str) -> Result<(), IdError> {
    if slot.is_some() {
        return Err(IdError::InvalidRequest(format!(
            "query parameter {name:?} is given more than once; give it once"
        )));
    }
    *slot = Some(match name {
        "count" => count_value(raw)?,
        other => number_value(other, raw)?,
    });
    Ok(())
}

/// `count`'s value as a number.
fn count_value(raw: &str) -> Result<u64, IdError> {
    raw.parse::<u64>()
        .map_err(|_| IdError::InvalidCount(format!("count must be a whole number, got {raw:?}")))
}

/// A whole number `name` (not `count`).
fn number_value(name: &str, raw: &str) -> Result<u64, IdError> {
    raw.parse::<u64>().map_err(|_| {
        IdError::InvalidRequest(format!(
            "{name} must be a whole number from 0 to 18446744073709551615, got {raw:?}"
        ))
    })
}

/// The query of `POST /v1/blocks`: `count` and `extends` (the caller's newest lease), each at
/// most once.
pub(super) fn block_query(uri: &Uri) -> Result<(Option<u64>, Option<u64>), IdError> {
    let (mut count, mut extends) = (None, None);
    each_pair(uri, |k, v| match k {
        "count" => once(&mut count, k, v),
        "extends" => once(&mut extends, k, v),
        other => Err(IdError::InvalidRequest(format!(
            "unknown query parameter {other:?}; only count and extends are accepted"
        ))),
    })?;
    Ok((count, extends))
}

/// What `GET /v1/ids` asks for: `count` and the shard, by `shard` or `key` (never both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IdsQuery {
    /// `count`, absent: `None` (the node's count rule decides).
    pub count: Option<u64>,
    /// `shard=S` or `key=K`.
    pub route: Option<ShardRoute>,
}

/// The query of `GET /v1/ids`: `count`, `shard` and `key`, each at most once.
pub(super) fn ids_query(uri: &Uri) -> Result<IdsQuery, IdError> {
    let (mut count, mut shard, mut key) = (None, None, None);
    each_pair(uri, |k, v| {
        let slot = match k {
            "count" => &mut count,
            "shard" => &mut shard,
            "key" => &mut key,
            other => {
                return Err(IdError::InvalidRequest(format!(
                    "unknown query parameter {other:?}; only count, shard and key are accepted"
                )))
            }
        };
        once(slot, k, v)
    })?;
    Ok(IdsQuery {
        count,
        route: ShardRoute::of(shard, key)?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_api::ErrorCode;

    fn uri(query: &str) -> Uri {
        format!("/v1/ids/a?{query}").parse::<Uri>().unwrap()
    }

    fn count(query: &str) -> Result<Option<u64>, IdError> {
        block_query(&uri(query)).map(|(count, _)| count)
    }

    fn ids(query: &str) -> Result<IdsQuery, IdError> {
        ids_query(&uri(query))
    }

    #[test]
    fn count_parsing() {
        for parse in [count, |q: &str| ids(q).map(|q| q.count)] {
            assert_eq!(parse(""), Ok(None));
            assert_eq!(parse("count=7"), Ok(Some(7)));
            assert_eq!(parse("count=0"), Ok(Some(0)), "the node's rule refuses 0");
            assert_eq!(parse("count=%37"), Ok(Some(7)));
            for bad in ["count=-1", "count=abc", "count="] {
                assert_eq!(
                    parse(bad).unwrap_err().code(),
                    ErrorCode::InvalidCount,
                    "{bad}"
                );
            }
            assert_eq!(
                parse("cnt=1").unwrap_err().code(),
                ErrorCode::InvalidRequest
            );
        }
        // A block takes no shard.
        let e = count("count=1&shard=2").unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidRequest);
        assert!(e.to_string().contains("\"shard\""), "{e}");
    }

    /// `count=2&count=3` is refused, not answered with 3 ids; so is a repeated shard or key.
    #[test]
    fn a_repeated_parameter_is_refused() {
        for (query, name) in [
            ("count=2&count=3", "count"),
            ("shard=1&shard=1", "shard"),
            ("key=5&count=2&key=6", "key"),
        ] {
            let e = ids(query).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidRequest, "{query}");
            assert!(e.to_string().contains(&format!("{name:?}")), "{query}: {e}");
        }
        assert_eq!(
            count("count=2&count=3").unwrap_err().code(),
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn shard_or_key_is_the_route() {
        assert_eq!(
            ids("count=3&shard=7"),
            Ok(IdsQuery {
                count: Some(3),
                route: Some(ShardRoute::Shard(7))
            })
        );
        assert_eq!(
            ids("key=18446744073709551615"),
            Ok(IdsQuery {
                count: None,
                route: Some(ShardRoute::Key(u64::MAX))
            })
        );
        assert_eq!(
            ids("sh%61rd=0").unwrap().route,
            Some(ShardRoute::Shard(0)),
            "names are percent-decoded"
        );
        for (bad, name) in [
            ("shard=-1", "shard"),
            ("shard=x", "shard"),
            ("key=", "key"),
            ("key=18446744073709551616", "key"),
        ] {
            let e = ids(bad).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidRequest, "{bad}");
            assert!(e.to_string().starts_with(name), "{bad}: {e}");
        }
        let both = ids("shard=1&key=2").unwrap_err();
        assert_eq!(both.code(), ErrorCode::InvalidRequest);
        assert!(both.to_string().contains("shard or key"), "{both}");
    }
}
