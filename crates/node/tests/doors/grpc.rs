//! The gRPC door: tonic's client of `idmint.v1`, over h2c or TLS (`ClientTlsConfig` trusting
//! the test CA), on a channel of its own per call. A refusal's code is the status's
//! `idmint-error-code` metadata; a status without it is no answer (the transport failed).

use super::raw::{self, Conn};
use super::{code_of, Answer, Decoded, Door, Failure, GivenBack, Lease, Route, Target, DEADLINE};
use async_trait::async_trait;
use idmint_node::grpc::proto;
use idmint_node::grpc::proto::idmint_client::IdmintClient;
use idmint_node::server::Protocol;
use tokio::io::AsyncWriteExt;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

/// The gRPC door. See the module docs.
#[derive(Clone)]
pub struct Grpc {
    target: Target,
}

impl Grpc {
    /// A client on a new channel to the door.
    pub async fn client(&self) -> Result<IdmintClient<Channel>, Failure> {
        let port = self.target.addr.port();
        let scheme = if self.target.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://127.0.0.1:{port}"))
            .unwrap()
            .timeout(DEADLINE)
            .connect_timeout(DEADLINE);
        if let Some(ca) = &self.target.ca_pem {
            endpoint = endpoint
                .tls_config(
                    ClientTlsConfig::new()
                        .ca_certificate(Certificate::from_pem(ca))
                        .domain_name("localhost"),
                )
                .unwrap();
        }
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| Failure::NoAnswer(format!("connecting: {e:?}")))?;
        Ok(IdmintClient::new(channel))
    }

    /// `message` as a request carrying the door's token.
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(token) = &self.target.token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        request
    }
}

/// A status as a refusal (with its idmint code) or no answer (without one).
pub fn failure(status: Status) -> Failure {
    match status.metadata().get("idmint-error-code") {
        Some(code) => Failure::Refused {
            codes: vec![code_of(code.to_str().unwrap())],
            message: format!("{:?}: {}", status.code(), status.message()),
        },
        None => Failure::NoAnswer(format!("{:?}: {}", status.code(), status.message())),
    }
}

#[async_trait]
impl Door for Grpc {
    const PROTOCOL: Protocol = Protocol::Grpc;

    fn open(target: Target) -> Self {
        Grpc { target }
    }

    fn target(&self) -> &Target {
        &self.target
    }

    async fn ids_routed(&self, ns: &str, count: Option<u64>, route: Route) -> Answer<Vec<u64>> {
        let request = self.request(proto::NextRequest {
            namespace: ns.into(),
            count,
            shard: route.shard,
            key: route.key,
        });
        let ids = self
            .client()
            .await?
            .next(request)
            .await
            .map_err(failure)?
            .into_inner();
        match ids.ids {
            Some(proto::ids::Ids::U64(u)) => Ok(u.ids),
            other => panic!("not 64-bit ids: {other:?}"),
        }
    }

    async fn block(&self, ns: &str, count: u64) -> Answer<Lease> {
        let request = self.request(proto::BlockRequest {
            namespace: ns.into(),
            count: Some(count),
            min_start: None,
            extends: None,
        });
        let b = self
            .client()
            .await?
            .block(request)
            .await
            .map_err(failure)?
            .into_inner();
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
        let request = self.request(proto::GiveBackRequest {
            namespace: ns.into(),
            start,
            end,
            step,
            lease,
        });
        let g = self
            .client()
            .await?
            .give_back(request)
            .await
            .map_err(failure)?
            .into_inner();
        Ok(GivenBack {
            given_back: g.given_back,
            ids: g.ids,
        })
    }

    async fn decode(&self, ns: &str, id: &str) -> Answer<Decoded> {
        let request = self.request(proto::DecodeRequest {
            namespace: ns.into(),
            id: id.into(),
        });
        let d = self
            .client()
            .await?
            .decode(request)
            .await
            .map_err(failure)?
            .into_inner();
        match d.kind {
            Some(proto::decoded::Kind::Sequence(s)) => Ok(Decoded {
                id: s.id,
                in_namespace: s.in_namespace,
                issued: s.issued,
                residue: s.residue,
            }),
            other => panic!("not a sequence id: {other:?}"),
        }
    }

    async fn info(&self, ns: &str) -> Option<Answer<String>> {
        let request = self.request(proto::NamespaceRequest {
            namespace: ns.into(),
        });
        let answer = match self.client().await {
            Ok(mut client) => client.namespace(request).await.map_err(failure),
            Err(e) => Err(e),
        };
        Some(answer.map(|info| info.into_inner().namespace))
    }

    async fn one_request(&self, conn: &mut Conn) {
        let tls = self.target.tls.is_some();
        raw::grpc_request(conn, "/idmint.v1.Idmint/Namespaces", tls).await;
    }

    async fn bad_input(&self) {
        // A message over the 16 KiB decoding limit: refused by the node, which answers.
        let request = self.request(proto::NextRequest {
            namespace: "n".repeat(20 * 1024),
            count: None,
            shard: None,
            key: None,
        });
        let refused = self
            .client()
            .await
            .unwrap()
            .next(request)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::OutOfRange, "{refused:?}");
        assert!(
            refused.message().contains("16384"),
            "the limit is named: {refused:?}"
        );
        // Bytes that are no HTTP/2 preface: the connection is closed, nothing is served.
        let mut conn = raw::connect(&self.target).await.unwrap();
        conn.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let (got, _) = raw::read_to_close(&mut conn).await;
        assert!(
            !String::from_utf8_lossy(&got).contains("200"),
            "answered: {got:?}"
        );
    }
}
