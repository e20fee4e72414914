//! The etcd requests the authority builds, as etcd's messages: reads of a key, a prefix or a
//! range, the operations and comparisons of a `Txn`, and the reads of a `Txn`'s answers. Pure
//! functions.
//!
//! Keys are the authority's text keys as bytes; a prefix's range ends at the first key above
//! every key that starts with it (etcd's convention: the last byte below 0xff incremented, the
//! bytes after it dropped).

use idmint_proto::etcd::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use idmint_proto::etcd::etcdserverpb::request_op::Request;
use idmint_proto::etcd::etcdserverpb::response_op::Response;
use idmint_proto::etcd::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, ResponseOp,
    TxnRequest,
};

/// A linearizable read of `key` alone.
pub(super) fn get(key: impl Into<Vec<u8>>) -> RangeRequest {
    RangeRequest {
        key: key.into(),
        ..RangeRequest::default()
    }
}

/// A read of the keys from `start` (included) to `end` (excluded).
pub(super) fn range(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> RangeRequest {
    RangeRequest {
        range_end: end.into(),
        ..get(start)
    }
}

/// A read of every key that starts with `prefix`.
pub(super) fn prefix(prefix: impl Into<Vec<u8>>) -> RangeRequest {
    let key = prefix.into();
    let end = prefix_end(&key);
    range(key, end)
}

/// The first key above every key that starts with `prefix` (`\0`, all keys, when there is
/// none: `prefix` empty or all 0xff).
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&b| b < 0xff) {
        Some(last) => {
            let mut end = prefix[..=last].to_vec();
            end[last] += 1;
            end
        }
        None => vec![0],
    }
}

/// A `Txn` of `compare`, then `success` if every comparison holds, else `failure`.
pub(super) fn txn(
    compare: impl Into<Vec<Compare>>,
    success: impl Into<Vec<RequestOp>>,
    failure: impl Into<Vec<RequestOp>>,
) -> TxnRequest {
    TxnRequest {
        compare: compare.into(),
        success: success.into(),
        failure: failure.into(),
    }
}

/// Puts `value` at `key`, attached to etcd lease `lease` (0: none).
pub(super) fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.into(),
            value: value.into(),
            lease,
        })),
    }
}

/// Reads `key` within a `Txn`.
pub(super) fn get_op(key: impl Into<Vec<u8>>) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestRange(get(key))),
    }
}

/// Deletes `key` within a `Txn`.
pub(super) fn delete_op(key: impl Into<Vec<u8>>) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
            key: key.into(),
            range_end: Vec::new(),
        })),
    }
}

/// Holds if `key` was last written at revision `revision`.
pub(super) fn mod_revision_is(key: impl Into<Vec<u8>>, revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal.into(),
        target: CompareTarget::Mod.into(),
        key: key.into(),
        target_union: Some(TargetUnion::ModRevision(revision)),
    }
}

/// Holds if `key` was created at revision `revision` (0: it does not exist).
pub(super) fn create_revision_is(key: impl Into<Vec<u8>>, revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal.into(),
        target: CompareTarget::Create.into(),
        key: key.into(),
        target_union: Some(TargetUnion::CreateRevision(revision)),
    }
}

/// The read answered by a `Txn`'s operation `op`, if it was one.
pub(super) fn range_of(op: &ResponseOp) -> Option<&RangeResponse> {
    match &op.response {
        Some(Response::ResponseRange(range)) => Some(range),
        _ => None,
    }
}

/// How many keys a `Txn`'s operation `op` deleted (0 if it was no delete).
pub(super) fn deleted_by(op: &ResponseOp) -> i64 {
    match &op.response {
        Some(Response::ResponseDeleteRange(delete)) => delete.deleted,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_holds_exactly_the_keys_that_start_with_it() {
        assert_eq!(prefix_end(b"/idmint/ns/"), b"/idmint/ns0");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), [0]);
        assert_eq!(prefix_end(b""), [0]);
        let read = prefix("/idmint/ns/");
        assert!(b"/idmint/ns/zzz".as_slice() < read.range_end.as_slice());
        assert!(b"/idmint/ns0".as_slice() >= read.range_end.as_slice());
        assert_eq!(read.key, b"/idmint/ns/");
    }

    #[test]
    fn comparisons_name_their_target() {
        let c = mod_revision_is("k", 7);
        assert_eq!(c.target(), CompareTarget::Mod);
        assert_eq!(c.target_union, Some(TargetUnion::ModRevision(7)));
        let c = create_revision_is("k", 0);
        assert_eq!(c.target(), CompareTarget::Create);
        assert_eq!(c.result(), CompareResult::Equal);
        assert_eq!(c.target_union, Some(TargetUnion::CreateRevision(0)));
    }
}
