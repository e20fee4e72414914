//! The RESP door: a minimal RESP2 client of the test's own over a TCP or TLS stream (no
//! ALPN, as Redis clients), one connection per operation, which first sends `AUTH <token>`
//! when the door has a token. A refusal's code is the error line's first word mapped back to
//! the idmint codes it stands for ([`codes_of`], the table of `src/resp/error.rs` read
//! backwards).

use super::raw::{self, Conn};
use super::{Answer, Decoded, Door, Failure, GivenBack, Lease, Route, Target, DEADLINE};
use async_trait::async_trait;
use idmint_api::ErrorCode;
use idmint_node::server::Protocol;
use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::types::OwnedFrame as Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The idmint codes a RESP error word stands for. `ERR` is every invalid input, as Redis
/// answers a bad argument; `WRONGPASS` is a failed `AUTH`.
pub fn codes_of(word: &str) -> Vec<ErrorCode> {
    use ErrorCode::*;
    match word {
        "ERR" => vec![InvalidNamespace, InvalidCount, InvalidRequest, InvalidId],
        "NONAMESPACE" => vec![UnknownNamespace],
        "WRONGKIND" => vec![WrongKind],
        "EXHAUSTED" => vec![NamespaceExhausted, TimeExhausted],
        "RETIRED" => vec![NamespaceRetired],
        "UNAVAILABLE" => vec![AuthorityUnavailable],
        "CONFLICT" => vec![SettingsConflict],
        "LIMIT" => vec![TooManyNamespaces, TooManyStreams],
        "SHUTDOWN" => vec![ShuttingDown],
        "INTERNAL" => vec![InternalError],
        "LOST" => vec![NamespaceLost],
        "NOAUTH" | "WRONGPASS" => vec![Unauthorized],
        "NOPERM" => vec![Forbidden],
        "BUSY" => vec![RateLimited],
        "NOLEADER" => vec![NoLeader],
        _ => vec![ErrorCode::Unknown],
    }
}

/// A RESP request of `words`.
pub fn request(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    out
}

/// Reads one reply from `conn`, keeping what follows it in `buf`.
pub async fn reply(conn: &mut Conn, buf: &mut Vec<u8>) -> Result<Frame, Failure> {
    let mut chunk = [0u8; 16 * 1024];
    tokio::time::timeout(DEADLINE, async {
        loop {
            if let Some((frame, used)) = decode(buf).unwrap() {
                buf.drain(..used);
                return Ok(frame);
            }
            match conn.read(&mut chunk).await {
                Ok(0) => return Err(Failure::NoAnswer("closed before a reply".into())),
                Err(e) => return Err(Failure::NoAnswer(e.to_string())),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .unwrap_or_else(|_| Err(Failure::NoAnswer("no reply in time".into())))
}

/// An error reply as a refusal; any other reply as itself.
fn refusal(frame: Frame) -> Answer<Frame> {
    match frame {
        Frame::Error(line) => {
            let word = line.split(' ').next().unwrap_or_default().to_owned();
            Err(Failure::Refused {
                codes: codes_of(&word),
                message: line,
            })
        }
        other => Ok(other),
    }
}

/// An integer reply (or a decimal bulk string, as ids above 2^63 are written).
fn number(frame: &Frame) -> u64 {
    match frame {
        Frame::Integer(n) => u64::try_from(*n).unwrap(),
        Frame::BulkString(b) => std::str::from_utf8(b).unwrap().parse().unwrap(),
        other => panic!("not a number: {other:?}"),
    }
}

/// A map reply (RESP2: a flat array of keys and values): the value of `key`.
fn field<'a>(frame: &'a Frame, key: &str) -> &'a Frame {
    let Frame::Array(items) = frame else {
        panic!("not a map: {frame:?}")
    };
    items
        .chunks(2)
        .find(|kv| matches!(&kv[0], Frame::BulkString(k) if k == key.as_bytes()))
        .map(|kv| &kv[1])
        .unwrap_or_else(|| panic!("no {key} in {frame:?}"))
}

impl Resp {
    /// Sends `words` on a new connection (after `AUTH` when the door has a token) and reads
    /// the reply.
    pub async fn command(&self, words: &[&str]) -> Answer<Frame> {
        let mut conn = raw::connect(&self.target)
            .await
            .map_err(|e| Failure::NoAnswer(e.to_string()))?;
        let mut out = Vec::new();
        if let Some(token) = &self.target.token {
            out.extend(request(&["AUTH", token]));
        }
        out.extend(request(words));
        conn.write_all(&out)
            .await
            .map_err(|e| Failure::NoAnswer(e.to_string()))?;
        let mut buf = Vec::new();
        if self.target.token.is_some() {
            refusal(reply(&mut conn, &mut buf).await?)?;
        }
        refusal(reply(&mut conn, &mut buf).await?)
    }
}

/// The RESP door. See the module docs.
#[derive(Clone)]
pub struct Resp {
    target: Target,
}

#[async_trait]
impl Door for Resp {
    const PROTOCOL: Protocol = Protocol::Resp;

    fn open(target: Target) -> Self {
        Resp { target }
    }

    fn target(&self) -> &Target {
        &self.target
    }

    async fn ids_routed(&self, ns: &str, count: Option<u64>, route: Route) -> Answer<Vec<u64>> {
        let [count, shard, key] = [count, route.shard, route.key].map(|n| n.map(|n| n.to_string()));
        let mut words = vec!["IDMINT.NEXT", ns];
        words.extend(count.as_deref());
        for (keyword, value) in [("SHARD", &shard), ("KEY", &key)] {
            if let Some(value) = value {
                words.extend([keyword, value.as_str()]);
            }
        }
        match self.command(&words).await? {
            Frame::Array(ids) => Ok(ids.iter().map(number).collect()),
            other => panic!("not an array of ids: {other:?}"),
        }
    }

    async fn block(&self, ns: &str, count: u64) -> Answer<Lease> {
        let b = self
            .command(&["IDMINT.BLOCK", ns, &count.to_string()])
            .await?;
        Ok(Lease {
            start: number(field(&b, "start")),
            end: number(field(&b, "end")),
            step: number(field(&b, "step")),
            lease: number(field(&b, "lease")),
        })
    }

    async fn give_back(
        &self,
        ns: &str,
        lease: u64,
        start: u64,
        end: u64,
        step: u64,
    ) -> Answer<GivenBack> {
        let numbers = [lease, start, end, step].map(|n| n.to_string());
        let mut words = vec!["IDMINT.GIVEBACK", ns];
        words.extend(numbers.iter().map(String::as_str));
        let g = self.command(&words).await?;
        Ok(GivenBack {
            given_back: number(field(&g, "given_back")) == 1,
            ids: number(field(&g, "ids")),
        })
    }

    async fn decode(&self, ns: &str, id: &str) -> Answer<Decoded> {
        let d = self.command(&["IDMINT.DECODE", ns, id]).await?;
        assert_eq!(field(&d, "kind"), &Frame::BulkString(b"sequence".to_vec()));
        Ok(Decoded {
            id: number(field(&d, "id")),
            in_namespace: number(field(&d, "in_namespace")) == 1,
            issued: number(field(&d, "issued")) == 1,
            residue: number(field(&d, "residue")),
        })
    }

    async fn info(&self, _ns: &str) -> Option<Answer<String>> {
        None
    }

    async fn one_request(&self, conn: &mut Conn) {
        conn.write_all(&request(&["PING"])).await.unwrap();
        let got = raw::read_answer(conn, |got| got.ends_with(b"\r\n")).await;
        assert_eq!(got, b"+PONG\r\n");
    }

    async fn bad_input(&self) {
        // A request over 64 KiB (16 bulk strings of 5,000 bytes): a protocol error once its
        // headers pass the limit, and the connection is closed.
        let mut big = b"*16\r\n".to_vec();
        for _ in 0..16 {
            big.extend(format!("$5000\r\n{}\r\n", "x".repeat(5000)).as_bytes());
        }
        // Nested arrays, 8,000 deep: refused at the second header, no recursion.
        let nested = b"*1\r\n".repeat(8000);
        for (input, why) in [
            (big, "larger than 65536 bytes"),
            (nested, "nested arrays are not supported"),
        ] {
            let mut conn = raw::connect(&self.target).await.unwrap();
            raw::write_lossy(&mut conn, &input).await;
            let (got, _) = raw::read_to_close(&mut conn).await;
            let line = String::from_utf8_lossy(&got);
            assert!(
                line.starts_with("-ERR Protocol error: ") && line.contains(why),
                "{why}: {line:?}"
            );
        }
    }
}
