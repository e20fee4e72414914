//! Namespace families (`[namespaces."invoices.*"]`, docs/configuration.md) through the HTTP
//! request path of a node served in process over a memory authority: a member is created on
//! first use with the family's settings, even with `auto_create` off, and listed with its
//! family; the family's `max_members` bounds how many (409 `too_many_namespaces`, naming the
//! family and its key); a declared namespace of the exact name is not a member; a member whose
//! stored spec differs is refused (`settings_conflict`); reads create nothing; an `[auth]`
//! grant on `invoices.*` covers the members; gRPC names the family; blocks kept at a clean stop
//! are adopted by members within the bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_core::{NamespaceName, SequenceSpec, Width};
use idmint_node::grpc::proto;
use idmint_node::{Authority, FileConfig, NodeConfig};
use idmint_store::MemoryAuthority;
use serde_json::Value;
use std::sync::Arc;
use support::TestNode;

/// `invoices.*`: 32-bit members from 1, fixed blocks of 500, at most 2 of them; `invoices.0`
/// declared on its own (64-bit); `auto_create` off. `extra` is appended.
fn config(extra: &str) -> NodeConfig {
    let text = format!(
        r#"
        [server]
        auto_create = false

        [namespaces."invoices.*"]
        kind = "sequence"
        width = 32
        cache = "fixed"
        block_size = 500
        max_members = 2

        [namespaces."invoices.0"]
        kind = "sequence"

        [namespaces.orders]
        kind = "sequence"
        {extra}
        "#
    );
    FileConfig::parse(&text).unwrap().node
}

fn name(text: &str) -> NamespaceName {
    NamespaceName::new(text).unwrap()
}

#[track_caller]
fn assert_error(got: &(u16, Value), status: u16, code: &str) {
    let (got_status, body) = got;
    assert_eq!(*got_status, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
}

/// The listing's entry of `ns`, if listed.
async fn listed(node: &TestNode, ns: &str) -> Option<Value> {
    let (status, list) = node.get("/v1/namespaces").await;
    assert_eq!(status, 200, "{list}");
    list["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["namespace"] == ns)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_created_on_first_use_with_the_family_settings_up_to_the_bound() {
    let authority = Arc::new(MemoryAuthority::new());
    let (node, grpc) = TestNode::start_with_grpc(config(""), authority.clone()).await;

    let (status, body) = node.get("/v1/ids/invoices.42?count=3").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ids"], serde_json::json!(["1", "2", "3"]), "{body}");
    let stored = authority
        .state(&name("invoices.42"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.spec.width(), Width::Bits32);

    let (status, info) = node.get("/v1/namespaces/invoices.42").await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["family"], "invoices.*", "{info}");
    assert_eq!(info["auto_created"], false, "{info}");
    assert_eq!(info["settings"]["width"], 32, "{info}");
    assert_eq!(info["settings"]["cache"]["mode"], "fixed", "{info}");
    assert_eq!(info["settings"]["cache"]["block_size"], 500, "{info}");

    // The declared namespace of the exact name wins and does not count toward the bound.
    let (status, body) = node.get("/v1/ids/invoices.0").await;
    assert_eq!(status, 200, "{body}");
    let (_, info) = node.get("/v1/namespaces/invoices.0").await;
    assert_eq!(info["settings"]["width"], 64, "{info}");
    assert!(info.get("family").is_none(), "{info}");

    // Any namespace-name suffix is a member; the second fills the bound.
    assert_eq!(node.get("/v1/ids/invoices.eu-1").await.0, 200);
    let refused = node.get("/v1/ids/invoices.43").await;
    assert_error(&refused, 409, "too_many_namespaces");
    let message = refused.1["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("invoices.*") && message.contains("max_members"),
        "{message}"
    );
    assert!(authority
        .state(&name("invoices.43"))
        .await
        .unwrap()
        .is_none());
    // Members served keep serving; a name outside every family is unknown (auto_create off).
    assert_eq!(node.get("/v1/ids/invoices.42").await.0, 200);
    assert_error(
        &node.get("/v1/ids/invoice.1").await,
        404,
        "unknown_namespace",
    );

    let member = listed(&node, "invoices.42").await.unwrap();
    assert_eq!(member["family"], "invoices.*", "{member}");
    assert_eq!(
        listed(&node, "invoices.eu-1").await.unwrap()["family"],
        "invoices.*"
    );
    assert!(listed(&node, "invoices.0")
        .await
        .unwrap()
        .get("family")
        .is_none());
    assert!(listed(&node, "invoices.43").await.is_none());

    // gRPC names the family too (SequenceInfo.family; empty for other namespaces).
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = proto::idmint_client::IdmintClient::new(channel);
    let family_of = |info: proto::NamespaceInfo| match info.kind {
        Some(proto::namespace_info::Kind::Sequence(s)) => s.family,
        other => panic!("{other:?}"),
    };
    for (ns, family) in [("invoices.42", "invoices.*"), ("invoices.0", "")] {
        let info = client
            .namespace(proto::NamespaceRequest {
                namespace: ns.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(family_of(info), family, "{ns}");
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_create_no_member_and_a_conflicting_stored_spec_is_refused() {
    let authority = Arc::new(MemoryAuthority::new());
    // invoices.5 stored earlier as a 64-bit sequence: not the family's settings.
    authority
        .ensure_namespace(&name("invoices.5"), SequenceSpec::default_64())
        .await
        .unwrap();
    let node = TestNode::start(config(""), authority.clone()).await;

    assert_error(
        &node.get("/v1/namespaces/invoices.7").await,
        404,
        "unknown_namespace",
    );
    assert_error(
        &node.get("/v1/decode/invoices.7/12").await,
        404,
        "unknown_namespace",
    );
    assert!(authority
        .state(&name("invoices.7"))
        .await
        .unwrap()
        .is_none());
    assert!(listed(&node, "invoices.7").await.is_none());

    // A stored member is read without being served: its stored spec, the family named.
    let (status, info) = node.get("/v1/namespaces/invoices.5").await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["settings"]["width"], 64, "{info}");
    assert_eq!(info["family"], "invoices.*", "{info}");

    let refused = node.get("/v1/ids/invoices.5").await;
    assert_error(&refused, 409, "settings_conflict");
    assert!(listed(&node, "invoices.5").await.is_none());
    // Neither the reads nor the refusal took a place under the bound of 2.
    assert_eq!(node.get("/v1/ids/invoices.7").await.0, 200);
    assert_eq!(node.get("/v1/ids/invoices.8").await.0, 200);
    assert_error(
        &node.get("/v1/ids/invoices.9").await,
        409,
        "too_many_namespaces",
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_on_the_family_pattern_covers_its_members_only() {
    const TOKEN: &str = "idmint_invoices_secret";
    let hash = idmint_node::auth::TokenHash::of(TOKEN.as_bytes());
    let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let extra = format!(
        r#"
        [[auth.tokens]]
        name = "invoices"
        hash = "{hash}"
        scopes = {{ "invoices.*" = ["ids", "read"] }}
        "#
    );
    let node = TestNode::start(config(&extra), authority.clone()).await;
    let take = |ns: &str| {
        node.client
            .get(format!("{}/v1/ids/{ns}", node.base))
            .bearer_auth(TOKEN)
            .send()
    };
    let member = take("invoices.42").await.unwrap();
    assert_eq!(member.status(), 200);
    let other = take("orders").await.unwrap();
    assert_eq!(other.status(), 403);
    let body = support::json(&other.text().await.unwrap());
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    // No token at all: refused before any member is created.
    assert_eq!(node.get("/v1/ids/invoices.1").await.0, 401);
    assert!(authority
        .state(&name("invoices.1"))
        .await
        .unwrap()
        .is_none());
    node.stop().await;
}

/// Blocks kept at a clean stop (parked in the store) are claimed and served first by a member
/// with the family's settings when it is set up, within the bound: a member past it, or one
/// stored with other settings, serves none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_blocks_of_members_are_adopted_within_the_bound() {
    use idmint_core::Block;
    use idmint_store::kept::{self, KeptNamespace};
    let dir = tempfile::tempdir().unwrap();
    let mut config = config("");
    let family = &config.families["invoices.*"];
    let spec = family.spec;
    let other = SequenceSpec::default_64();
    let block = Block::new(1001, 1101, 1).unwrap();
    let key = idmint_store::ClaimKey::random();
    let kept = |ns: &str, spec: SequenceSpec| KeptNamespace {
        name: name(ns),
        spec,
        blocks: vec![block],
        claim: Some(key.clone()),
    };
    kept::write(
        dir.path(),
        "memory (test)",
        &[
            kept("invoices.1", other),
            kept("invoices.2", spec),
            kept("invoices.3", spec),
            kept("invoices.4", spec),
        ],
    )
    .unwrap();
    config.keep_blocks = Some(idmint_node::config::KeepBlocks {
        dir: dir.path().to_owned(),
        authority: "memory (test)".into(),
    });
    // The store granted the kept blocks and holds them parked, as after a clean stop that
    // kept them: each member's watermark is past them (a refill then starts above them).
    let store = Arc::new(MemoryAuthority::new());
    for ns in ["invoices.2", "invoices.3", "invoices.4"] {
        store.ensure_namespace(&name(ns), spec).await.unwrap();
        let granted = store.reserve(&name(ns), 1100).await.unwrap();
        assert_eq!(granted.block.end(), 1101, "{ns}");
        store.park(&name(ns), &key, &[block]).await.unwrap();
    }
    let node = TestNode::start(config, store).await;
    for ns in ["invoices.2", "invoices.3"] {
        let (status, body) = node.get(&format!("/v1/ids/{ns}?count=2")).await;
        assert_eq!(status, 200, "{body}");
        // From the kept block, not from the fresh authority (which would start at 1).
        assert_eq!(
            body["ids"],
            serde_json::json!(["1001", "1002"]),
            "{ns}: {body}"
        );
        assert_eq!(listed(&node, ns).await.unwrap()["family"], "invoices.*");
    }
    assert!(listed(&node, "invoices.1").await.is_none());
    assert_error(
        &node.get("/v1/ids/invoices.4").await,
        409,
        "too_many_namespaces",
    );
    node.stop().await;
}
