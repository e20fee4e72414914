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

/// The alerting rules operators load (deploy/prometheus): `promtool check rules` accepts them,
/// `promtool test rules` fires each alert where it should and nowhere else, and every family
/// the rules name is one a live node exports (a rule on a misspelt or removed metric would
/// never fire). The node runs a multi authority (member series) and a leased snowflake
/// namespace (lease series), so every family has a series to show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alert_rules_pass_promtool_and_name_only_exported_families() {
    let rules_dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus");
    let rules = rules_dir.join("idmint.rules.yml");
    let checked = promtool(&["check", "rules", rules.to_str().unwrap()], "");
    assert!(
        checked.status.success(),
        "promtool check rules: {}",
        said(&checked)
    );
    let tested = Command::new("promtool")
        .args(["test", "rules", "idmint.rules.test.yml"])
        .current_dir(&rules_dir)
        .output()
        .unwrap();
    assert!(
        tested.status.success(),
        "promtool test rules: {}",
        said(&tested)
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
    let node = TestNode::start(config, Arc::new(multi)).await;
    for ns in ["orders", "tweets"] {
        let (status, body) = node.get(&format!("/v1/ids/{ns}?count=3")).await;
        assert_eq!(status, 200, "{ns}: {body}");
    }
    let (status, body) = node.get("/v1/ids/orders?count=0").await;
    assert_eq!(status, 400, "{body}");
    let n = &node;
    poll_until("the clock gauge is reported", move || async move {
        scrape(n, None)
            .await
            .1
            .contains("idmint_clock_behind_seconds{")
    })
    .await;
    let (_, text) = scrape(&node, None).await;
    // The families of the 0.0.4 text (a counter's TYPE line names its `_total` samples there).
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let mut named: Vec<&str> = rules_text
        .match_indices("idmint_")
        .map(|(at, _)| {
            let rest = &rules_text[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|name| !name.ends_with('_'))
        .collect();
    named.sort_unstable();
    named.dedup();
    assert!(named.len() >= 12, "{named:?}");
    for name in named {
        assert!(
            families.contains(&name),
            "the alert rules name {name}, which the node does not export:\n{text}"
        );
    }
    node.stop().await;
}
