//! Talking to a running node over HTTP/JSON: the `--server` address and requests whose
//! answers are read as `idmint_api` types (or the API's error body, as an error).
//!
//! A node with `[auth]` wants a bearer token: every request carries `$IDMINT_TOKEN` when it is
//! set (an environment variable, not a flag, so the token never shows in `ps` or a shell's
//! history).
//!
//! A server may be given with or without a scheme: `127.0.0.1:7878` and `localhost:7878` mean
//! `http://…`. Only `http` and `https` are accepted; a bad address is a usage error found while
//! parsing the arguments, before any request.
//!
//! An `https://` server is trusted as [`idmint_proto::tls::ClientTls`] says, the same rule as
//! the upstream authority's and idmint-client's: only the CA of `--ca-file` (`IDMINT_CA_FILE`)
//! when given, else the public roots; `--cert`/`--key` (`IDMINT_CERT`/`IDMINT_KEY`) present a
//! client certificate to a node that requires one. The files are read when the command starts
//! and an error names the file; an `http://` server ignores them.

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idmint_api::ErrorBody;
use idmint_proto::tls::ClientTls;
use serde::de::DeserializeOwned;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use url::Url;

/// A validated node address: an `http` or `https` URL with a host.
#[derive(Debug, Clone)]
pub struct ServerUrl(Url);

impl FromStr for ServerUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        // Without "://", `localhost:7878` would parse as a URL of scheme "localhost".
        let url = if text.contains("://") {
            Url::parse(text)
        } else {
            Url::parse(&format!("http://{text}"))
        }
        .map_err(|e| {
            format!("{text:?} is not a server address ({e}); e.g. http://127.0.0.1:7878")
        })?;
        match url.scheme() {
            "http" | "https" => {}
            other => {
                return Err(format!(
                    "the scheme {other}:// is not supported; use http:// or https://"
                ))
            }
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!(
                "{text:?} names no host; e.g. http://127.0.0.1:7878"
            ));
        }
        Ok(ServerUrl(url))
    }
}

impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str().trim_end_matches('/'))
    }
}

impl ServerUrl {
    /// The URL of the API path `segments` (each percent-encoded as needed) with `query`.
    fn endpoint(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.0.clone();
        // A URL with a host can always be a base, so `path_segments_mut` succeeds.
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (key, value) in query {
                pairs.append_pair(key, value);
            }
        }
        url
    }

    fn is_https(&self) -> bool {
        self.0.scheme() == "https"
    }
}

/// How the commands that talk to a node trust an `https://` one and which client certificate
/// they present (mutual TLS). Ignored for an `http://` server.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// For an https:// server: trust only the CA certificates of this PEM file
    /// [default: the public roots].
    #[arg(long, value_name = "FILE", env = "IDMINT_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// For an https:// server that requires client certificates: this certificate chain
    /// (PEM, leaf first); needs --key.
    #[arg(long, value_name = "FILE", env = "IDMINT_CERT")]
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", env = "IDMINT_KEY")]
    pub key: Option<PathBuf>,
}

impl TlsArgs {
    /// The TLS settings these name, files read and checked.
    fn client_tls(&self) -> Result<ClientTls> {
        let identity = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            (Some(_), None) => bail!("--cert (IDMINT_CERT) needs --key (IDMINT_KEY)"),
            (None, Some(_)) => bail!("--key (IDMINT_KEY) needs --cert (IDMINT_CERT)"),
            (None, None) => None,
        };
        ClientTls::from_files(self.ca_file.as_deref(), identity).context(
            "reading the TLS files (--ca-file, --cert, --key; IDMINT_CA_FILE, IDMINT_CERT, \
             IDMINT_KEY)",
        )
    }
}

/// A client of one node: one runtime and one connection pool for every request of a command.
pub struct Client {
    runtime: tokio::runtime::Runtime,
    http: hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    server: ServerUrl,
    token: Option<String>,
}

/// The environment variable holding the bearer token the CLI sends.
pub const TOKEN_VAR: &str = "IDMINT_TOKEN";

impl Client {
    /// A client of `server`, over TLS as `tls` says when it is `https://`; connects on the
    /// first request.
    pub fn new(server: ServerUrl, tls: &TlsArgs) -> Result<Client> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let tls = if server.is_https() {
            tls.client_tls()?
        } else {
            ClientTls::public_roots()
        };
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            // hyper-rustls announces the ALPN of the protocols it enables (http/1.1).
            .with_tls_config(tls.rustls_config(&[]))
            .https_or_http()
            .enable_http1()
            .build();
        let http =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
        let token = std::env::var(TOKEN_VAR)
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        Ok(Client {
            runtime,
            http,
            server,
            token,
        })
    }

    /// POSTs (no body) to the API path `segments` with `query` and reads the answer as `T`, or
    /// the API's error body as an error.
    pub fn post<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<T> {
        self.send(hyper::Method::POST, segments, query)
    }

    /// GETs the API path `segments` with `query` and reads the answer as `T`, or the API's
    /// error body as an error.
    pub fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<T> {
        self.send(hyper::Method::GET, segments, query)
    }

    fn send<T: DeserializeOwned>(
        &self,
        method: hyper::Method,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<T> {
        let url = self.server.endpoint(segments, query);
        let mut request = hyper::Request::builder().method(method).uri(url.as_str());
        if let Some(token) = &self.token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Empty::new())
            .with_context(|| format!("building the request to {url}"))?;
        self.runtime.block_on(async {
            let resp = self.http.request(request).await.with_context(|| {
                format!(
                    "cannot reach {}; is `idmint serve` running there?",
                    self.server
                )
            })?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .with_context(|| format!("reading the answer of {url}"))?
                .to_bytes();
            let text = String::from_utf8_lossy(&body);
            if !status.is_success() {
                match serde_json::from_str::<ErrorBody>(&text) {
                    Ok(body) => bail!("{status} {}: {}", body.error.code, body.error.message),
                    Err(_) => bail!("{url} answered {status}: {text}"),
                }
            }
            serde_json::from_str(&text)
                .with_context(|| format!("{url} answered {status} with an unexpected body: {text}"))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_server_without_a_scheme_is_http() {
        for (given, meant) in [
            ("127.0.0.1:7979", "http://127.0.0.1:7979"),
            ("localhost:7878", "http://localhost:7878"),
            ("http://10.0.0.5:7878/", "http://10.0.0.5:7878"),
            ("https://ids.example.com", "https://ids.example.com"),
            ("[::1]:7878", "http://[::1]:7878"),
        ] {
            assert_eq!(given.parse::<ServerUrl>().unwrap().to_string(), meant);
        }
    }

    #[test]
    fn other_schemes_and_hostless_servers_are_refused() {
        let e = "ftp://x:1".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("ftp://"), "{e}");
        assert!("http://".parse::<ServerUrl>().is_err());
        assert!("".parse::<ServerUrl>().is_err());
    }

    #[test]
    fn endpoints_encode_their_segments() {
        let s: ServerUrl = "http://h:1/prefix/".parse().unwrap();
        let url = s.endpoint(&["v1", "decode", "a b", "1/2"], &[("count", "3".into())]);
        assert_eq!(
            url.as_str(),
            "http://h:1/prefix/v1/decode/a%20b/1%2F2?count=3"
        );
    }
}
