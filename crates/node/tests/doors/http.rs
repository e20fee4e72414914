//! The HTTP/JSON door: reqwest for plain HTTP, hyper's HTTP/1.1 client over a tokio-rustls
//! stream for HTTPS (reqwest's rustls features would need a process-wide crypto provider in
//! every reqwest client of the workspace, the `idmint` binary's included). Each request on a
//! connection of its own, so no pooled connection outlives a test's timeouts. A refusal's code
//! is the JSON body's `error.code`.

use super::raw::{self, Conn};
use super::{code_of, Answer, Decoded, Door, Failure, GivenBack, Lease, Route, Target, DEADLINE};
use async_trait::async_trait;
use hyper_util::rt::TokioIo;
use idmint_api::{BlockResponse, ErrorBody, GiveBackResponse, IdsResponse};
use idmint_node::server::Protocol;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

/// The HTTP door. See the module docs.
#[derive(Clone)]
pub struct Http {
    target: Target,
    client: reqwest::Client,
}

impl Http {
    /// `method path` through the door: the status and the body.
    pub async fn call(&self, method: &str, path: &str) -> Result<(u16, Vec<u8>), Failure> {
        match self.target.tls {
            None => self.plain(method, path).await,
            Some(_) => self.tls(method, path).await,
        }
        .map_err(Failure::NoAnswer)
    }

    async fn plain(&self, method: &str, path: &str) -> Result<(u16, Vec<u8>), String> {
        let url = format!("http://{}{path}", self.target.addr);
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.client.request(method, url);
        if let Some(token) = &self.target.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let answer = request.send().await.map_err(|e| e.to_string())?;
        let status = answer.status().as_u16();
        let body = answer.bytes().await.map_err(|e| e.to_string())?;
        Ok((status, body.to_vec()))
    }

    async fn tls(&self, method: &str, path: &str) -> Result<(u16, Vec<u8>), String> {
        let conn = raw::connect(&self.target)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(conn))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let mut request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost");
        if let Some(token) = &self.target.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request.body(String::new()).unwrap();
        let answer = tokio::time::timeout(DEADLINE, sender.send_request(request))
            .await
            .map_err(|_| "no answer in time".to_owned())?
            .map_err(|e| e.to_string())?;
        let status = answer.status().as_u16();
        let body = axum::body::to_bytes(axum::body::Body::new(answer.into_body()), 64 << 20)
            .await
            .map_err(|e| e.to_string())?;
        Ok((status, body.to_vec()))
    }

    /// `method path`, its 2xx body read as `T`, any other answer as a refusal.
    async fn answer<T: DeserializeOwned>(&self, method: &str, path: &str) -> Answer<T> {
        let (status, body) = self.call(method, path).await?;
        refusal_or(status, &body)
    }
}

/// A 2xx body as `T`; otherwise the JSON error body's code (no JSON body: no answer).
pub fn refusal_or<T: DeserializeOwned>(status: u16, body: &[u8]) -> Answer<T> {
    let text = String::from_utf8_lossy(body);
    if (200..300).contains(&status) {
        return serde_json::from_slice(body)
            .map_err(|e| Failure::NoAnswer(format!("{status}, a body not read ({e}): {text}")));
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => Err(Failure::Refused {
            codes: vec![e.error.code],
            message: format!("{status}: {}", e.error.message),
        }),
        Err(_) => Err(Failure::NoAnswer(format!(
            "{status} without a JSON error body: {text:?}"
        ))),
    }
}

/// `?count=N&shard=S&key=K` with the parameters given, or nothing.
fn ids_query(count: Option<u64>, route: Route) -> String {
    let params: Vec<String> = [("count", count), ("shard", route.shard), ("key", route.key)]
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| format!("{name}={v}")))
        .collect();
    if params.is_empty() {
        String::new()
    } else {
        format!("?{}", params.join("&"))
    }
}

/// The status and body of a whole HTTP/1.1 answer read raw (headers, then `Content-Length`
/// bytes).
pub fn parse_answer(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(Some(0), |v| v.trim().parse().ok())?;
    let body = raw.get(split + 4..split + 4 + length)?;
    Some((status, body.to_vec()))
}

#[async_trait]
impl Door for Http {
    const PROTOCOL: Protocol = Protocol::Http;

    fn open(target: Target) -> Self {
        let client = reqwest::Client::builder()
            .timeout(DEADLINE)
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        Http { target, client }
    }

    fn target(&self) -> &Target {
        &self.target
    }

    async fn ids_routed(&self, ns: &str, count: Option<u64>, route: Route) -> Answer<Vec<u64>> {
        let path = format!("/v1/ids/{ns}{}", ids_query(count, route));
        let answer: IdsResponse = self.answer("GET", &path).await?;
        Ok(answer.ids.iter().map(|id| id.parse().unwrap()).collect())
    }

    async fn block(&self, ns: &str, count: u64) -> Answer<Lease> {
        let path = format!("/v1/blocks/{ns}?count={count}");
        let b: BlockResponse = self.answer("POST", &path).await?;
        Ok(Lease {
            start: b.start,
            end: b.end,
            step: b.step,
            lease: b.lease,
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
        let path =
            format!("/v1/blocks/{ns}/give-back?lease={lease}&start={start}&end={end}&step={step}");
        let g: GiveBackResponse = self.answer("POST", &path).await?;
        Ok(GivenBack {
            given_back: g.given_back,
            ids: g.ids,
        })
    }

    async fn decode(&self, ns: &str, id: &str) -> Answer<Decoded> {
        let d: Value = self.answer("GET", &format!("/v1/decode/{ns}/{id}")).await?;
        assert_eq!(d["kind"], "sequence", "{d}");
        Ok(Decoded {
            id: d["id"].as_str().unwrap().parse().unwrap(),
            in_namespace: d["in_namespace"].as_bool().unwrap(),
            issued: d["issued"].as_bool().unwrap(),
            residue: d["residue"].as_u64().unwrap(),
        })
    }

    async fn info(&self, ns: &str) -> Option<Answer<String>> {
        let answer: Answer<Value> = self.answer("GET", &format!("/v1/namespaces/{ns}")).await;
        Some(answer.map(|info| info["namespace"].as_str().unwrap().to_owned()))
    }

    async fn one_request(&self, conn: &mut Conn) {
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        conn.flush().await.unwrap();
        let got = raw::read_answer(conn, |got| parse_answer(got).is_some()).await;
        let (status, body) = parse_answer(&got).unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }

    async fn bad_input(&self) {
        // A request target over the router's 8 KiB: a JSON 414, then the connection is
        // closed (the request asked for it).
        let mut conn = raw::connect(&self.target).await.unwrap();
        let long = format!(
            "GET /v1/ids/orders?pad={} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            "a".repeat(9000)
        );
        conn.write_all(long.as_bytes()).await.unwrap();
        let (got, _) = raw::read_to_close(&mut conn).await;
        let (status, body) = parse_answer(&got)
            .unwrap_or_else(|| panic!("no whole answer: {:?}", String::from_utf8_lossy(&got)));
        assert_eq!(status, 414, "{}", String::from_utf8_lossy(&body));
        let e: ErrorBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(e.error.code, code_of("invalid_request"), "{e:?}");
        // Bytes that are no HTTP request: answered with an error status, never served, and
        // the connection is closed.
        let mut conn = raw::connect(&self.target).await.unwrap();
        raw::write_lossy(&mut conn, b"\x16\x03\x01garbage that is no request\r\n\r\n").await;
        let (got, _) = raw::read_to_close(&mut conn).await;
        if let Some((status, _)) = parse_answer(&got) {
            assert!((400..500).contains(&status), "{status}");
        }
    }
}
