//! Replies: a protocol-version-neutral [`Reply`], built from the domain's answers ([`ids`],
//! [`one_id`], [`block`], [`decoded`]), and its encoding as RESP2 or RESP3 with
//! `redis-protocol`'s encoders ([`encode`]).
//!
//! Invariants:
//! - A 64-bit id is a RESP integer (every id idmint hands out fits a signed 64-bit integer:
//!   sequence ids end at 2^63 - 1 and snowflake layouts at 63 bits; a larger one would be
//!   written as a bulk string of its decimal digits rather than wrapped). UUIDv7s and ULIDs are
//!   bulk strings of their canonical text.
//! - A [`Reply::Map`] is a RESP3 map, and in RESP2 the flat `[key, value, key, value, ...]`
//!   array Redis itself answers for maps (`HGETALL`, `HELLO`). A boolean is an integer 1/0 in
//!   RESP2. Nothing else differs between the versions.
//! - An error line never contains CR or LF (they would end the frame early): [`Reply::error`]
//!   replaces them.

use crate::namespace::Ids;
use bytes::{Bytes, BytesMut};
use idmint_core::Block;
use redis_protocol::bytes_utils::Str;
use redis_protocol::resp2::types::BytesFrame as Frame2;
use redis_protocol::resp3::types::{BytesFrame as Frame3, FrameMap};

/// The protocol a connection speaks: RESP2 until `HELLO 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2, the default.
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

impl Protocol {
    /// 2 or 3.
    pub fn number(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// One answer, in terms both protocol versions can write.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A simple string (`+OK`).
    Simple(&'static str),
    /// An error line: a code word (`ERR`, `EXHAUSTED`, ...), a space, the message.
    Error(String),
    /// An integer.
    Int(i64),
    /// A bulk (blob) string.
    Bulk(Bytes),
    /// Null.
    Null,
    /// A boolean (RESP2: 1 or 0).
    Bool(bool),
    /// An array.
    Array(Vec<Reply>),
    /// A map, in order.
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    /// `+OK`.
    pub const OK: Reply = Reply::Simple("OK");

    /// An error line `CODE message`, with CR and LF replaced by spaces.
    pub fn error(code: &str, message: &str) -> Reply {
        let mut line = String::with_capacity(code.len() + 1 + message.len());
        line.push_str(code);
        line.push(' ');
        line.extend(
            message
                .chars()
                .map(|c| if c == '\r' || c == '\n' { ' ' } else { c }),
        );
        Reply::Error(line)
    }

    /// A map with names as keys.
    pub fn map(pairs: impl IntoIterator<Item = (&'static str, Reply)>) -> Reply {
        Reply::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (Reply::Bulk(Bytes::from_static(k.as_bytes())), v))
                .collect(),
        )
    }

    /// A bulk string of `text`.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Bulk(Bytes::from(text.into()))
    }
}

/// A 64-bit id: an integer (a bulk string of its digits above `i64::MAX`, which idmint's ids
/// never reach).
pub fn u64_id(id: u64) -> Reply {
    match i64::try_from(id) {
        Ok(n) => Reply::Int(n),
        Err(_) => Reply::text(id.to_string()),
    }
}

/// Every id of `ids`, as an array, in order.
pub fn ids(ids: &Ids) -> Reply {
    Reply::Array(match ids {
        Ids::U64(v) => v.iter().map(|&id| u64_id(id)).collect(),
        Ids::Uuid7(v) => v.iter().map(|id| Reply::text(id.to_string())).collect(),
        Ids::Ulid(v) => v.iter().map(|id| Reply::text(id.to_string())).collect(),
    })
}

/// The single id of an answer of one (`INCR`); `None` if the answer is empty.
pub fn one_id(ids: &Ids) -> Option<Reply> {
    match ids {
        Ids::U64(v) => v.first().map(|&id| u64_id(id)),
        Ids::Uuid7(v) => v.first().map(|id| Reply::text(id.to_string())),
        Ids::Ulid(v) => v.first().map(|id| Reply::text(id.to_string())),
    }
}

/// A leased block as `{start, end, step, lease}` (RESP2: `[start, <v>, end, <v>, ...]`);
/// `end` is exclusive, as in the HTTP API; `lease` is what `IDMINT.GIVEBACK` asks for.
pub fn block(b: &Block, lease: u64) -> Reply {
    Reply::map([
        ("start", u64_id(b.start())),
        ("end", u64_id(b.end())),
        ("step", u64_id(b.step())),
        ("lease", u64_id(lease)),
    ])
}

/// What `IDMINT.GIVEBACK` answers: `{given_back, ids, reason}`.
pub fn given_back(g: &crate::node::requests::GivenBack) -> Reply {
    Reply::map([
        ("given_back", Reply::Bool(g.given_back)),
        ("ids", u64_id(g.ids)),
        ("reason", Reply::text(g.reason.clone())),
    ])
}

/// What `IDMINT.REBASE` and `IDMINT.RETIRE` answer: the HTTP answer's fields as a map
/// (watermarks as integers, like ids).
pub fn advanced(a: &idmint_api::AdvanceResponse) -> Reply {
    Reply::map([
        ("namespace", Reply::text(a.namespace.clone())),
        ("action", Reply::text(a.action.clone())),
        ("previous_watermark", u64_id(a.previous_watermark)),
        ("watermark", u64_id(a.watermark)),
        ("burned", u64_id(a.burned)),
        ("retired", Reply::Int(i64::from(a.retired))),
    ])
}

/// What `IDMINT.DECODE` answers: the fields of [`idmint_api::Decoded`] as the HTTP API writes
/// them (its JSON object), as a map. Numbers are integers, strings bulk strings, JSON null is
/// null, booleans are booleans.
pub fn decoded(d: &idmint_api::Decoded) -> Reply {
    match serde_json::to_value(d) {
        Ok(value @ serde_json::Value::Object(_)) => json_value(value),
        // `Decoded` is an internally tagged enum: it always serialises to an object.
        _ => Reply::error("INTERNAL", "the decoded id could not be written"),
    }
}

fn json_value(v: serde_json::Value) -> Reply {
    use serde_json::Value;
    match v {
        Value::Null => Reply::Null,
        Value::Bool(b) => Reply::Bool(b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Reply::Int(i),
            (None, Some(u)) => u64_id(u),
            _ => Reply::text(n.to_string()),
        },
        Value::String(s) => Reply::text(s),
        Value::Array(a) => Reply::Array(a.into_iter().map(json_value).collect()),
        Value::Object(o) => Reply::Map(
            o.into_iter()
                .map(|(k, v)| (Reply::text(k), json_value(v)))
                .collect(),
        ),
    }
}

/// Appends `reply` to `out` as `protocol` writes it.
pub fn encode(reply: Reply, protocol: Protocol, out: &mut BytesMut) {
    // The answer to INCR, the hot path: `:<n>\r\n`, the same in both versions, written
    // directly (a test checks it is byte for byte what the encoder writes).
    if let Reply::Int(n) = reply {
        out.extend_from_slice(b":");
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        out.extend_from_slice(b"\r\n");
        return;
    }
    // Encoding into a growable buffer fails only on frames we never build (attributes,
    // streamed frames); such a failure writes nothing rather than a partial frame.
    let written = match protocol {
        Protocol::Resp2 => {
            redis_protocol::resp2::encode::extend_encode(out, &resp2(reply), false).map(|_| ())
        }
        Protocol::Resp3 => {
            redis_protocol::resp3::encode::complete::extend_encode(out, &resp3(reply), false)
                .map(|_| ())
        }
    };
    if let Err(e) = written {
        tracing::error!(error = %e, "a RESP reply could not be encoded");
    }
}

fn resp2(reply: Reply) -> Frame2 {
    match reply {
        Reply::Simple(s) => Frame2::SimpleString(Bytes::from_static(s.as_bytes())),
        Reply::Error(e) => Frame2::Error(Str::from(e)),
        Reply::Int(n) => Frame2::Integer(n),
        Reply::Bulk(b) => Frame2::BulkString(b),
        Reply::Null => Frame2::Null,
        Reply::Bool(b) => Frame2::Integer(i64::from(b)),
        Reply::Array(items) => Frame2::Array(items.into_iter().map(resp2).collect()),
        Reply::Map(pairs) => Frame2::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [resp2(k), resp2(v)])
                .collect(),
        ),
    }
}

fn resp3(reply: Reply) -> Frame3 {
    match reply {
        Reply::Simple(s) => Frame3::SimpleString {
            data: Bytes::from_static(s.as_bytes()),
            attributes: None,
        },
        Reply::Error(e) => Frame3::SimpleError {
            data: Str::from(e),
            attributes: None,
        },
        Reply::Int(n) => Frame3::Number {
            data: n,
            attributes: None,
        },
        Reply::Bulk(b) => Frame3::BlobString {
            data: b,
            attributes: None,
        },
        Reply::Null => Frame3::Null,
        Reply::Bool(b) => Frame3::Boolean {
            data: b,
            attributes: None,
        },
        Reply::Array(items) => Frame3::Array {
            data: items.into_iter().map(resp3).collect(),
            attributes: None,
        },
        Reply::Map(pairs) => {
            let mut map = FrameMap::with_capacity(pairs.len());
            for (k, v) in pairs {
                map.insert(resp3(k), resp3(v));
            }
            Frame3::Map {
                data: map,
                attributes: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn bytes(reply: Reply, protocol: Protocol) -> String {
        let mut out = BytesMut::new();
        encode(reply, protocol, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn ids_are_integers_or_text() {
        assert_eq!(bytes(u64_id(42), Protocol::Resp2), ":42\r\n");
        assert_eq!(bytes(u64_id(42), Protocol::Resp3), ":42\r\n");
        assert_eq!(
            bytes(u64_id(u64::MAX), Protocol::Resp2),
            "$20\r\n18446744073709551615\r\n"
        );
        let many = ids(&Ids::U64(vec![1, 2]));
        assert_eq!(bytes(many, Protocol::Resp2), "*2\r\n:1\r\n:2\r\n");
    }

    #[test]
    fn integers_are_what_the_encoder_writes() {
        for n in [0, 1, -1, 42, i64::MAX, i64::MIN] {
            let mut expected = BytesMut::new();
            redis_protocol::resp2::encode::extend_encode(&mut expected, &Frame2::Integer(n), false)
                .unwrap();
            assert_eq!(
                bytes(Reply::Int(n), Protocol::Resp2).as_bytes(),
                &expected[..]
            );
            let mut expected = BytesMut::new();
            let frame = Frame3::Number {
                data: n,
                attributes: None,
            };
            redis_protocol::resp3::encode::complete::extend_encode(&mut expected, &frame, false)
                .unwrap();
            assert_eq!(
                bytes(Reply::Int(n), Protocol::Resp3).as_bytes(),
                &expected[..]
            );
        }
    }

    #[test]
    fn maps_are_flat_arrays_in_resp2() {
        let b = Block::new(10, 20, 2).unwrap();
        assert_eq!(
            bytes(block(&b, 7), Protocol::Resp2),
            "*8\r\n$5\r\nstart\r\n:10\r\n$3\r\nend\r\n:20\r\n$4\r\nstep\r\n:2\r\n$5\r\nlease\r\n:7\r\n"
        );
        assert!(bytes(block(&b, 7), Protocol::Resp3).starts_with("%4\r\n$5\r\nstart\r\n:10\r\n"));
        assert_eq!(bytes(Reply::Bool(true), Protocol::Resp2), ":1\r\n");
        assert_eq!(bytes(Reply::Bool(true), Protocol::Resp3), "#t\r\n");
        assert_eq!(bytes(Reply::Null, Protocol::Resp2), "$-1\r\n");
        assert_eq!(bytes(Reply::Null, Protocol::Resp3), "_\r\n");
    }

    #[test]
    fn error_lines_stay_on_one_line() {
        assert_eq!(
            bytes(Reply::error("ERR", "a\r\nb"), Protocol::Resp2),
            "-ERR a  b\r\n"
        );
    }
}
