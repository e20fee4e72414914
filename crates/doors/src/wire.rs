//! The client side of a door: one request at a time over one connection, each answer read whole
//! and checked before the next request leaves.
//!
//! Invariants: HTTP and RESP are spoken over blocking sockets with fixed request bytes (the
//! client costs the server nothing it would not cost from any client); a request that is not
//! answered with success is an error, so no count is ever taken of an error path.

use crate::cluster::Target;
use crate::Door;
use idmint_node::grpc::proto::idmint_client::IdmintClient;
use idmint_node::grpc::proto::{ids, Ids, NextRequest, NextStreamRequest};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use tokio::runtime::Runtime;
use tonic::transport::Channel;

/// Ids per `NextStream` call, in chunks of [`STREAM_CHUNK`].
pub const STREAM_TOTAL: u64 = 1_000_000;
/// Ids per `NextStream` message.
pub const STREAM_CHUNK: u64 = 10_000;

/// A connected client of one door.
pub enum Client {
    /// HTTP/1.1 keep-alive: the request's bytes.
    Http(Raw, Vec<u8>),
    /// RESP: the command's bytes.
    Resp(Raw, Vec<u8>),
    /// gRPC `Next(count=1)`.
    Next(IdmintClient<Channel>),
    /// gRPC `NextStream`.
    Stream(IdmintClient<Channel>),
}

impl Client {
    /// Connects to the door of `target`, priming what the door needs (a shard's range taken by
    /// the other node).
    pub fn open(door: Door, target: &Target, rt: &Runtime) -> Result<Client, String> {
        let get = |path: &str| format!("GET {path} HTTP/1.1\r\nhost: bench\r\n\r\n").into_bytes();
        Ok(match door {
            Door::Http1 => Client::Http(Raw::open(target.http)?, get("/v1/ids/bench?count=1")),
            Door::Http100 => Client::Http(Raw::open(target.http)?, get("/v1/ids/bench?count=100")),
            Door::Refill => Client::Http(Raw::open(target.http)?, get("/v1/ids/refill?count=100")),
            Door::StrictForward => {
                Client::Http(Raw::open(target.http)?, get("/v1/ids/chat?count=1"))
            }
            Door::ShardForward => {
                // The other node takes shard 0's range first: from then on it is forwarded.
                let path = "/v1/ids/photos?shard=0";
                for other in &target.others {
                    Raw::open(*other)?.http(&get(path))?;
                }
                Client::Http(Raw::open(target.http)?, get(path))
            }
            Door::Resp => Client::Resp(
                Raw::open(target.resp)?,
                b"*2\r\n$4\r\nINCR\r\n$5\r\nbench\r\n".to_vec(),
            ),
            Door::GrpcNext | Door::GrpcStream => {
                let channel = rt
                    .block_on(
                        Channel::from_shared(target.grpc.clone())
                            .map_err(|e| e.to_string())?
                            .connect(),
                    )
                    .map_err(|e| format!("gRPC connect: {e}"))?;
                let client = IdmintClient::new(channel);
                match door {
                    Door::GrpcNext => Client::Next(client),
                    _ => Client::Stream(client),
                }
            }
        })
    }

    /// One request, its answer read whole and checked.
    pub fn call(&mut self, rt: &Runtime) -> Result<(), String> {
        match self {
            Client::Http(raw, request) => raw.http(request),
            Client::Resp(raw, request) => raw.resp(request),
            Client::Next(client) => {
                let request = NextRequest {
                    namespace: "bench".into(),
                    count: Some(1),
                    ..Default::default()
                };
                let ids = rt
                    .block_on(client.next(request))
                    .map_err(|e| format!("Next: {e}"))?;
                match count(&ids.into_inner()) {
                    1 => Ok(()),
                    n => Err(format!("Next answered {n} ids")),
                }
            }
            Client::Stream(client) => rt.block_on(async {
                let request = NextStreamRequest {
                    namespace: "bench".into(),
                    total: STREAM_TOTAL,
                    chunk: Some(STREAM_CHUNK),
                };
                let mut stream = client
                    .next_stream(request)
                    .await
                    .map_err(|e| format!("NextStream: {e}"))?
                    .into_inner();
                let mut got = 0;
                while let Some(chunk) = stream
                    .message()
                    .await
                    .map_err(|e| format!("NextStream: {e}"))?
                {
                    got += count(&chunk) as u64;
                }
                match got {
                    STREAM_TOTAL => Ok(()),
                    n => Err(format!("NextStream answered {n} ids")),
                }
            }),
        }
    }
}

/// A blocking TCP connection and the bytes read from it.
pub struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    fn open(addr: SocketAddr) -> Result<Raw, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Raw {
            stream,
            buf: Vec::with_capacity(8192),
        })
    }

    fn send(&mut self, request: &[u8]) -> Result<(), String> {
        self.buf.clear();
        self.stream
            .write_all(request)
            .map_err(|e| format!("write: {e}"))
    }

    fn more(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err("the server closed the connection".into()),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(format!("read: {e}")),
        }
    }

    /// Sends an HTTP request and reads its answer (headers, then `content-length` bytes).
    fn http(&mut self, request: &[u8]) -> Result<(), String> {
        self.send(request)?;
        let head = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                break end + 4;
            }
            self.more()?;
        };
        let text = String::from_utf8_lossy(&self.buf[..head]).to_ascii_lowercase();
        let length: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or("an answer without content-length")?;
        while self.buf.len() < head + length {
            self.more()?;
        }
        if !text.starts_with("http/1.1 200") {
            return Err(format!(
                "HTTP answered {}",
                String::from_utf8_lossy(&self.buf)
            ));
        }
        Ok(())
    }

    /// Sends a RESP command and reads its one-line integer answer.
    fn resp(&mut self, request: &[u8]) -> Result<(), String> {
        self.send(request)?;
        while !self.buf.ends_with(b"\r\n") {
            self.more()?;
        }
        match self.buf.first() {
            Some(b':') => Ok(()),
            _ => Err(format!(
                "RESP answered {}",
                String::from_utf8_lossy(&self.buf)
            )),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// How many sequence ids an answer carries.
fn count(answer: &Ids) -> usize {
    match &answer.ids {
        Some(ids::Ids::U64(ids)) => ids.ids.len(),
        _ => 0,
    }
}
