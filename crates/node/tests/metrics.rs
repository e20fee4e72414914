//! `/metrics` as Prometheus tooling sees it: a node (memory authority) serves every kind of
//! namespace, is scraped with the Accept headers scrapers send, and each body goes through
//! `promtool` (the Debian package `prometheus`; `scripts/test.sh` installs it). A missing
//! `promtool` fails the test: it is the point of the test.
//!
//! What is checked: the format follows `Accept` (OpenMetrics only when asked for, otherwise the
//! Prometheus text format 0.0.4) with the matching `Content-Type`; `promtool check metrics`
//! accepts the 0.0.4 body without a single remark; Prometheus' OpenMetrics parser accepts the
//! OpenMetrics body; both bodies carry every family, with the same series; a `cache = "off"`
//! namespace reports no demand and no buffer; a snowflake namespace exports its exhaustion
//! foresight (time left to its layout's end, its worker pool, its sequence peak per unit).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_node::{Authority, FileConfig};
use idmint_store::MemoryAuthority;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use support::{poll_until, TestNode};

const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// What Prometheus 2.x/3.x sends when scraping.
const PROMETHEUS_SCRAPER: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// Runs `promtool args...` with `input` on stdin; fails loudly when promtool is not installed.
fn promtool(args: &[&str], input: &str) -> Output {
    let mut child = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): install the Debian package `prometheus` \
                 (apt-get install prometheus; scripts/test.sh installs it)"
            )
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// stdout and stderr of `output`, as text.
fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// GET /metrics with `accept` (none: no header): content type and body, asserting 200.
async fn scrape(node: &TestNode, accept: Option<&str>) -> (String, String) {
    let mut request = node.client.get(format!("{}/metrics", node.base));
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let resp = request.send().await.unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "GET /metrics, Accept {accept:?}"
    );
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (content_type, resp.text().await.unwrap())
}

/// The series (sample name and labels, without the value) of an exposition, sorted: two scrapes
/// may differ in values (a refill lands between them) and in the order of series.
fn series(text: &str) -> Vec<&str> {
    let mut series: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').map_or(l, |(series, _)| series))
        .collect();
    series.sort_unstable();
    series
}

/// The value of the sample `series` (name and labels exactly as written).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series}:\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_pass_promtool_and_carry_every_family() {
    let config = FileConfig::parse(
        r#"
        [namespaces.orders]
        kind = "sequence"

        [namespaces.tickets]
        kind = "sequence"
        cache = "off"

        [namespaces.tweets]
        kind = "snowflake"
        layout = "twitter"
        worker = 7

        [namespaces.sessions]
        kind = "uuid7"

        [namespaces.codes]
        kind = "ulid"
        "#,
    )
    .unwrap()
    .node;
    let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
    let node = TestNode::start(config, authority).await;
    for (ns, count) in [
        ("orders", 5),
        ("tickets", 3),
        ("tweets", 2),
        ("sessions", 2),
        ("codes", 2),
    ] {
        let (status, body) = node.get(&format!("/v1/ids/{ns}?count={count}")).await;
        assert_eq!(status, 200, "{ns}: {body}");
    }
    let (status, body) = node.get("/v1/ids/orders?count=0").await;
    assert_eq!(status, 400, "{body}");
    // The snowflake clock gauge is set by a once-a-second watch.
    let n = &node;
    poll_until(
        "the snowflake clock gauge is reported",
        move || async move {
            scrape(n, None)
                .await
                .1
                .contains("idmint_clock_behind_seconds{namespace=\"tweets\"}")
        },
    )
    .await;

    // Content negotiation.
    let (content_type, prometheus) = scrape(&node, Some("text/plain;version=0.0.4")).await;
    assert_eq!(content_type, PROMETHEUS_TEXT);
    for accept in [
        None,
        Some("*/*"),
        Some("text/plain"),
        Some("application/json"),
    ] {
        assert_eq!(scrape(&node, accept).await.0, PROMETHEUS_TEXT, "{accept:?}");
    }
    let (content_type, openmetrics) =
        scrape(&node, Some("application/openmetrics-text; version=1.0.0")).await;
    assert_eq!(content_type, OPENMETRICS_TEXT);
    assert_eq!(
        scrape(&node, Some(PROMETHEUS_SCRAPER)).await.0,
        OPENMETRICS_TEXT
    );

    // promtool's linter reads the 0.0.4 format: not one remark.
    let checked = promtool(&["check", "metrics"], &prometheus);
    assert!(
        checked.status.success() && said(&checked).trim().is_empty(),
        "promtool check metrics on the 0.0.4 body: {}\n{prometheus}",
        said(&checked)
    );
    // It reads an OpenMetrics body as 0.0.4 too, where a counter family `x` (HELP/TYPE `x`,
    // samples `x_total`) looks like samples without help: that, and only that, is expected.
    let checked = promtool(&["check", "metrics"], &openmetrics);
    for remark in said(&checked).lines() {
        let family = remark
            .strip_suffix("_total no help text")
            .unwrap_or_else(|| panic!("promtool on the OpenMetrics body: {remark}"));
        assert!(
            openmetrics.contains(&format!("# TYPE {family} counter\n"))
                && openmetrics.contains(&format!("# HELP {family} ")),
            "promtool on the OpenMetrics body: {remark}\n{openmetrics}"
        );
    }
    // Prometheus' own OpenMetrics parser (the one scrapes use), via the backfill importer,
    // which wants a timestamp on every sample.
    let dir = tempfile::tempdir().unwrap();
    let stamped: String = openmetrics
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("{l}\n")
            } else {
                format!("{l} 1700000000\n")
            }
        })
        .collect();
    let file = dir.path().join("metrics.om");
    std::fs::write(&file, stamped).unwrap();
    let imported = promtool(
        &[
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            file.to_str().unwrap(),
            dir.path().join("blocks").to_str().unwrap(),
        ],
        "",
    );
    assert!(
        imported.status.success(),
        "Prometheus' OpenMetrics parser refused the body: {}\n{openmetrics}",
        said(&imported)
    );
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");

    // Every family, in both formats, with the same series.
    assert_eq!(series(&openmetrics), series(&prometheus));
    for body in [&prometheus, &openmetrics] {
        for series in [
            "idmint_ids_served_total{namespace=\"orders\"}",
            "idmint_ids_served_total{namespace=\"tickets\"}",
            "idmint_ids_served_total{namespace=\"tweets\"}",
            "idmint_refills_total{namespace=\"orders\",outcome=\"ok\"}",
            "idmint_refill_duration_seconds_count{namespace=\"orders\"}",
            "idmint_errors_total{code=\"invalid_count\"}",
            "idmint_buffer_ids{namespace=\"orders\"}",
            "idmint_ids_burned{namespace=\"orders\"}",
            "idmint_demand_ids_per_second{namespace=\"orders\"}",
            "idmint_clock_behind_seconds{namespace=\"tweets\"}",
            "idmint_refill_waits_total{namespace=\"orders\"}",
            "idmint_snowflake_time_to_exhaustion_seconds{namespace=\"tweets\"}",
            "idmint_snowflake_workers_held{namespace=\"tweets\"}",
            "idmint_snowflake_workers_possible{namespace=\"tweets\"}",
            "idmint_snowflake_worker_pool_used_ratio{namespace=\"tweets\"}",
            "idmint_snowflake_sequence_limit_per_unit{namespace=\"tweets\"}",
            "idmint_snowflake_sequence_peak_per_unit{namespace=\"tweets\"}",
            "idmint_snowflake_sequence_peak_ratio{namespace=\"tweets\"}",
            "idmint_snowflake_sequence_exhausted_total{namespace=\"tweets\"}",
        ] {
            value(body, series);
        }
    }
    for (family, kind) in [
        ("idmint_ids_served_total", "counter"),
        ("idmint_refills_total", "counter"),
        ("idmint_errors_total", "counter"),
        ("idmint_refill_waits_total", "counter"),
        ("idmint_refill_duration_seconds", "histogram"),
        ("idmint_buffer_ids", "gauge"),
        ("idmint_ids_burned", "gauge"),
        ("idmint_demand_ids_per_second", "gauge"),
        ("idmint_clock_behind_seconds", "gauge"),
        ("idmint_snowflake_time_to_exhaustion_seconds", "gauge"),
        ("idmint_snowflake_workers_held", "gauge"),
        ("idmint_snowflake_workers_possible", "gauge"),
        ("idmint_snowflake_worker_pool_used_ratio", "gauge"),
        ("idmint_snowflake_sequence_limit_per_unit", "gauge"),
        ("idmint_snowflake_sequence_peak_per_unit", "gauge"),
        ("idmint_snowflake_sequence_peak_ratio", "gauge"),
        ("idmint_snowflake_sequence_exhausted_total", "counter"),
    ] {
        assert!(
            prometheus.contains(&format!("# TYPE {family} {kind}\n"))
                && prometheus.contains(&format!("# HELP {family} ")),
            "{family} {kind}:\n{prometheus}"
        );
    }
    assert!(
        openmetrics.contains("# UNIT idmint_refill_duration_seconds seconds\n"),
        "{openmetrics}"
    );
    assert!(
        openmetrics.contains("# UNIT idmint_snowflake_time_to_exhaustion_seconds seconds\n"),
        "{openmetrics}"
    );
    // The snowflake's foresight: twitter's 41 bits of ms from 2010 end in 2080 (more than 50
    // years from any clock this runs on, less than 70); worker 7 is the one lease of its
    // group's 1024; its 2 ids came from one unit of 4096, and no request waited.
    let tweets = |family: &str| value(&prometheus, &format!("{family}{{namespace=\"tweets\"}}"));
    let left = tweets("idmint_snowflake_time_to_exhaustion_seconds");
    let year = 365.25 * 86_400.0;
    assert!(left > 50.0 * year && left < 70.0 * year, "{left}");
    assert_eq!(left.fract(), 0.0, "whole seconds: {left}");
    assert_eq!(tweets("idmint_snowflake_workers_held"), 1.0);
    assert_eq!(tweets("idmint_snowflake_workers_possible"), 1024.0);
    assert_eq!(
        tweets("idmint_snowflake_worker_pool_used_ratio"),
        1.0 / 1024.0
    );
    assert_eq!(tweets("idmint_snowflake_sequence_limit_per_unit"), 4096.0);
    assert_eq!(tweets("idmint_snowflake_sequence_peak_per_unit"), 2.0);
    assert_eq!(tweets("idmint_snowflake_sequence_peak_ratio"), 2.0 / 4096.0);
    assert_eq!(tweets("idmint_snowflake_sequence_exhausted_total"), 0.0);
    let served = |ns: &str| {
        value(
            &prometheus,
            &format!("idmint_ids_served_total{{namespace=\"{ns}\"}}"),
        )
    };
    assert_eq!(served("orders"), 5.0);
    assert_eq!(served("tickets"), 3.0);
    assert_eq!(served("tweets"), 2.0);
    assert_eq!(served("sessions"), 2.0);
    assert_eq!(served("codes"), 2.0);
    // Cache off: every request is a round trip to the authority, counted as one.
    assert!(
        value(
            &prometheus,
            "idmint_refills_total{namespace=\"tickets\",outcome=\"ok\"}"
        ) >= 1.0,
        "{prometheus}"
    );
    assert_eq!(
        value(&prometheus, "idmint_errors_total{code=\"invalid_count\"}"),
        1.0
    );

    // cache = "off": every request reserves exactly what it hands out, so there is no buffer
    // and no demand to size one for; the gauges say 0, not a default.
    assert_eq!(
        value(
            &prometheus,
            "idmint_demand_ids_per_second{namespace=\"tickets\"}"
        ),
        0.0
    );
    assert_eq!(
        value(&prometheus, "idmint_buffer_ids{namespace=\"tickets\"}"),
        0.0
    );
    // A buffered namespace does hold a buffer.
    assert!(
        value(&prometheus, "idmint_buffer_ids{namespace=\"orders\"}") > 0.0,
        "{prometheus}"
    );

    node.stop().await;
}

/// The metric names (`idmint_*`, `process_*`) a PromQL text refers to.
fn named_metrics(text: &str) -> Vec<&str> {
    let mut named: Vec<&str> = ["idmint_", "process_"]
        .iter()
        .flat_map(|prefix| text.match_indices(prefix))
        .filter(|(at, _)| {
            // A name starts a word (not `foo_idmint_`).
            text[..*at]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
        })
        .map(|(at, _)| {
            let rest = &text[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|name| !name.ends_with('_'))
        .collect();
    named.sort_unstable();
    named.dedup();
    named
}

/// What operators load beside the node: the alerting rules (deploy/prometheus) and the Grafana
/// dashboard (deploy/grafana). `promtool check rules` accepts the rules and `promtool test
/// rules` fires each alert where it should and nowhere else; every dashboard query is valid
/// PromQL (checked by promtool as a recording rule, `$instance` standing for every node); and
/// every metric either names is one a live node exports (a rule or panel on a misspelt or
/// removed metric would stay silent or empty). The node runs a multi authority (member series)
/// and a leased snowflake namespace (lease series), so every family has a series to show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_rules_and_dashboard_pass_promtool_and_name_only_exported_metrics() {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let rules = deploy.join("prometheus/idmint.rules.yml");
    let checked = promtool(&["check", "rules", rules.to_str().unwrap()], "");
    assert!(
        checked.status.success(),
        "promtool check rules: {}",
        said(&checked)
    );
    let tested = Command::new("promtool")
        .args(["test", "rules", "idmint.rules.test.yml"])
        .current_dir(deploy.join("prometheus"))
        .output()
        .unwrap();
    assert!(
        tested.status.success(),
        "promtool test rules: {}",
        said(&tested)
    );

    let dashboard_text =
        std::fs::read_to_string(deploy.join("grafana/idmint-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard_text).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().replace("$instance", ".*"))
        .collect();
    assert!(exprs.len() >= 20, "{exprs:?}");
    let dir = tempfile::tempdir().unwrap();
    let recorded = dir.path().join("dashboard.rules.yml");
    let mut yaml = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in exprs.iter().enumerate() {
        yaml.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {}\n",
            serde_json::to_string(expr).unwrap()
        ));
    }
    std::fs::write(&recorded, yaml).unwrap();
    let checked = promtool(&["check", "rules", recorded.to_str().unwrap()], "");
    assert!(
        checked.status.success(),
        "a dashboard query is not valid PromQL: {}",
        said(&checked)
    );

    let config = FileConfig::parse(
        r#"
        [defaults]
        step = 2
        [namespaces.orders]
        kind = "sequence"
        [namespaces.tweets]
        kind = "snowflake"
        "#,
    )
    .unwrap()
    .node;
    let multi = idmint_store::MultiAuthority::new(vec![
        (Arc::new(MemoryAuthority::new()) as Arc<dyn Authority>, 0),
        (Arc::new(MemoryAuthority::new()) as Arc<dyn Authority>, 1),
    ])
    .unwrap();
    let (node, grpc) = TestNode::start_with_grpc(config, Arc::new(multi)).await;
    for ns in ["orders", "tweets"] {
        let (status, body) = node.get(&format!("/v1/ids/{ns}?count=3")).await;
        assert_eq!(status, 200, "{ns}: {body}");
    }
    let (status, body) = node.get("/v1/ids/orders?count=0").await;
    assert_eq!(status, 400, "{body}");
    // One call on the gRPC door, whose families have no series before one.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let next = idmint_node::grpc::proto::NextRequest {
        namespace: "orders".into(),
        count: Some(2),
        shard: None,
        key: None,
    };
    idmint_node::grpc::proto::idmint_client::IdmintClient::new(channel)
        .next(next)
        .await
        .unwrap();
    let n = &node;
    poll_until("the clock gauge is reported", move || async move {
        scrape(n, None)
            .await
            .1
            .contains("idmint_clock_behind_seconds{")
    })
    .await;
    let (_, mut text) = scrape(&node, None).await;
    // The families of a strict and of a shard-owned namespace, from a node that serves them
    // (a multi authority cannot).
    let strict = FileConfig::parse(
        r#"
        [server]
        grpc = "127.0.0.1:1"
        [peers]
        advertise = "http://127.0.0.1:1"
        token = "idmint_metrics_peer"
        [namespaces.chat]
        kind = "sequence"
        order = "strict"
        [namespaces.photos]
        kind = "snowflake"
        layout = "instagram"
        shards = "owned"
        "#,
    )
    .unwrap()
    .node;
    let (strict_node, _) =
        TestNode::start_with_grpc(strict, Arc::new(MemoryAuthority::new())).await;
    let (status, body) = strict_node.get("/v1/ids/chat").await;
    assert_eq!(status, 200, "{body}");
    text.push_str(&scrape(&strict_node, None).await.1);
    strict_node.stop().await;
    // The families of the 0.0.4 text (a counter's TYPE line names its `_total` samples there;
    // a histogram's names the family of its `_bucket`, `_sum` and `_count` samples).
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let exported = |name: &str| {
        families.contains(&name)
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.strip_suffix(s).is_some_and(|f| families.contains(&f)))
    };
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let in_rules = named_metrics(&rules_text);
    let in_dashboard = named_metrics(&dashboard_text);
    assert!(in_rules.len() >= 12, "{in_rules:?}");
    assert!(in_dashboard.len() >= 25, "{in_dashboard:?}");
    for (what, names) in [
        ("the alert rules", in_rules),
        ("the dashboard", in_dashboard),
    ] {
        for name in names {
            assert!(
                exported(name),
                "{what} name {name}, which the node does not export:\n{text}"
            );
        }
    }
    node.stop().await;
}
