//! The id answer's JSON, written without per-id allocation: the hot path of the API.
//!
//! [`ids_json`] writes exactly what `serde_json` writes for [`idmint_api::IdsResponse`] (a test
//! checks it byte for byte): namespace names are validated to need no escaping, and ids are
//! decimal digits, hex with dashes, or Crockford base32.

use crate::namespace::Ids;
use std::fmt::Write;

/// `{"namespace":"…","ids":["…",…]}`.
pub fn ids_json(namespace: &str, ids: &Ids) -> String {
    let mut out = String::with_capacity(32 + namespace.len() + ids.len() * 40);
    out.push_str("{\"namespace\":\"");
    out.push_str(namespace);
    out.push_str("\",\"ids\":[");
    match ids {
        Ids::U64(v) => {
            let mut buf = itoa::Buffer::new();
            for (i, id) in v.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('"');
                out.push_str(buf.format(*id));
                out.push('"');
            }
        }
        Ids::Uuid7(v) => push_display(&mut out, v),
        Ids::Ulid(v) => push_display(&mut out, v),
    }
    out.push_str("]}");
    out
}

fn push_display<T: std::fmt::Display>(out: &mut String, ids: &[T]) {
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Writing to a String cannot fail.
        let _ = write!(out, "\"{id}\"");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_api::IdsResponse;
    use idmint_core::{Ulid, Uuid7};

    fn via_serde(namespace: &str, ids: Vec<String>) -> String {
        serde_json::to_string(&IdsResponse {
            namespace: namespace.into(),
            ids,
        })
        .unwrap()
    }

    #[test]
    fn writes_what_serde_writes() {
        let nums = vec![0, 1, u64::MAX];
        assert_eq!(
            ids_json("photos", &Ids::U64(nums.clone())),
            via_serde("photos", nums.iter().map(u64::to_string).collect())
        );
        let u = Uuid7::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001).unwrap();
        assert_eq!(
            ids_json("s", &Ids::Uuid7(vec![u, u])),
            via_serde("s", vec![u.to_string(), u.to_string()])
        );
        let l = Ulid::from_u128(u128::MAX);
        assert_eq!(
            ids_json("a.b-c_d", &Ids::Ulid(vec![l])),
            via_serde("a.b-c_d", vec![l.to_string()])
        );
        assert_eq!(ids_json("e", &Ids::U64(vec![])), via_serde("e", vec![]));
    }
}
