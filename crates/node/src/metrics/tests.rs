//! Tests of the metrics: the families, both text formats and their negotiation.

use super::*;
use crate::supply::SupplyEvents;

#[test]
fn openmetrics_only_when_asked_for() {
    use Format::{OpenMetrics, Prometheus};
    for (accept, want) in [
        (None, Prometheus),
        (Some(""), Prometheus),
        (Some("*/*"), Prometheus),
        (Some("text/plain"), Prometheus),
        (Some("text/plain;version=0.0.4"), Prometheus),
        (Some("text/plain; version=0.0.4; charset=utf-8"), Prometheus),
        (Some("application/json"), Prometheus),
        (Some("application/openmetrics-text"), OpenMetrics),
        (
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            OpenMetrics,
        ),
        (
            Some("Application/OpenMetrics-Text;Version=\"1.0.0\""),
            OpenMetrics,
        ),
        // What Prometheus 2.x sends.
        (
            Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                 version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            ),
            OpenMetrics,
        ),
        // A version this node does not write.
        (
            Some("application/openmetrics-text;version=0.0.1"),
            Prometheus,
        ),
        (
            Some("application/openmetrics-text;version=2.0.0"),
            Prometheus,
        ),
        (Some("application/openmetrics-text;q=0"), Prometheus),
        (Some("application/openmetrics-text;q=nonsense"), Prometheus),
        (
            Some("application/openmetrics-text;q=0.5, text/plain;version=0.0.4"),
            Prometheus,
        ),
        (
            Some("text/plain;version=0.0.4;q=0.5, application/openmetrics-text"),
            OpenMetrics,
        ),
    ] {
        assert_eq!(Format::negotiate(accept), want, "Accept: {accept:?}");
    }
}

/// Every family with one series of each kind of label.
fn populated() -> Metrics {
    let metrics = Metrics::new();
    let supply = SupplyMetrics::new(&metrics, "orders");
    supply.served(3);
    supply.refilled(true, std::time::Duration::from_millis(2));
    supply.refilled(false, std::time::Duration::from_millis(7));
    supply.waited();
    metrics.refresh_members(&[idmint_store::MemberHealth {
        number: 1,
        kind: "postgres",
        offset: 1,
        up: false,
        last_error: Some("connection refused".into()),
        out_of_service: None,
    }]);
    let ns = NamespaceLabels {
        namespace: "orders".into(),
    };
    metrics
        .errors
        .get_or_create(&ErrorLabels {
            code: "unknown_namespace",
        })
        .inc();
    metrics.buffered.get_or_create(&ns).set(5);
    metrics.burned.get_or_create(&ns).set(1);
    metrics.demand.get_or_create(&ns).set(2.5);
    metrics.clock_behind.get_or_create(&ns).set(0.0);
    metrics
}

#[test]
fn counters_are_named_by_their_samples_in_the_0_0_4_format() {
    let text = populated().encode(Format::Prometheus);
    for family in [
        "idmint_ids_served_total",
        "idmint_refills_total",
        "idmint_errors_total",
        "idmint_refill_waits_total",
    ] {
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "{family}:\n{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {family} counter\n")),
            "{family}:\n{text}"
        );
    }
    assert!(
        text.contains("idmint_errors_total{code=\"unknown_namespace\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("idmint_refill_waits_total{namespace=\"orders\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "idmint_authority_member_up{member=\"1\",kind=\"postgres\",offset=\"1\"} 0\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("# TYPE idmint_refill_duration_seconds histogram\n"),
        "{text}"
    );
    assert!(
        text.contains("# HELP idmint_refill_duration_seconds Time of one block"),
        "{text}"
    );
    for openmetrics_only in ["# EOF", "# UNIT", "_created"] {
        assert!(
            !text.contains(openmetrics_only),
            "{openmetrics_only}:\n{text}"
        );
    }
}

#[test]
fn both_formats_carry_the_same_samples_and_every_family_has_help() {
    let metrics = populated();
    let openmetrics = metrics.encode(Format::OpenMetrics);
    let prometheus = metrics.encode(Format::Prometheus);
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
    assert!(
        openmetrics.contains("# UNIT idmint_refill_duration_seconds seconds\n"),
        "{openmetrics}"
    );
    // Two series are process-wide and move between the two encodings: the process's own (read
    // from /proc) and the log lines dropped (other tests of this binary log at the same time).
    // They are compared by name, every other series by value too.
    let moving = |l: &str| l.starts_with("process_") || l.starts_with("idmint_log_lines_dropped");
    let samples = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                if moving(l) {
                    l.rsplit_once(' ')
                        .map_or(l, |(series, _)| series)
                        .to_owned()
                } else {
                    l.to_owned()
                }
            })
            .collect()
    };
    assert_eq!(samples(&openmetrics), samples(&prometheus));
    for text in [&openmetrics, &prometheus] {
        let typed: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(typed.len(), 19, "{text}");
        for name in typed {
            let help = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("# HELP {name} ")))
                .unwrap_or_else(|| panic!("{name} has no help:\n{text}"));
            assert!(help.len() > 10, "{name}: {help}");
        }
    }
}

fn snowflake_state(held: Option<u64>) -> idmint_api::SnowflakeState {
    idmint_api::SnowflakeState {
        ids_served: 0,
        last_timestamp: None,
        time_runs_out: "2079-09-07T15:47:35.551Z".into(),
        seconds_to_exhaustion: 1_234_567_890,
        worker_pool: Some(idmint_api::WorkerPool::new(
            "tweets".into(),
            1024,
            held,
            held.is_none().then(|| "down".into()),
        )),
        sequence_headroom: Some(idmint_api::SequenceHeadroom::new(
            4096, 1_000_000, 1024, 0, 60,
        )),
        worker_lease: None,
        shards: None,
    }
}

#[test]
fn snowflake_foresight_is_exported_and_an_unknown_pool_has_no_series() {
    let metrics = Metrics::new();
    metrics.refresh_snowflake("tweets", &snowflake_state(Some(2)));
    let text = metrics.encode(Format::Prometheus);
    for sample in [
        "idmint_snowflake_time_to_exhaustion_seconds{namespace=\"tweets\"} 1234567890.0\n",
        "idmint_snowflake_workers_held{namespace=\"tweets\"} 2\n",
        "idmint_snowflake_workers_possible{namespace=\"tweets\"} 1024\n",
        "idmint_snowflake_worker_pool_used_ratio{namespace=\"tweets\"} 0.001953125\n",
        "idmint_snowflake_sequence_limit_per_unit{namespace=\"tweets\"} 4096\n",
        "idmint_snowflake_sequence_peak_per_unit{namespace=\"tweets\"} 1024\n",
        "idmint_snowflake_sequence_peak_ratio{namespace=\"tweets\"} 0.25\n",
    ] {
        assert!(text.contains(sample), "{sample}:\n{text}");
    }
    metrics.refresh_snowflake("tweets", &snowflake_state(None));
    let text = metrics.encode(Format::Prometheus);
    assert!(!text.contains("idmint_snowflake_workers_held{"), "{text}");
    assert!(
        !text.contains("idmint_snowflake_worker_pool_used_ratio{"),
        "{text}"
    );
    assert!(
        text.contains("idmint_snowflake_time_to_exhaustion_seconds{namespace=\"tweets\"}"),
        "{text}"
    );
}

#[test]
fn created_samples_units_and_exemplars_are_dropped() {
    let openmetrics = "# HELP a_seconds A.\n# TYPE a_seconds gauge\n# UNIT a_seconds seconds\n\
                       a_seconds 1.5\n# HELP c C.\n# TYPE c counter\nc_total{x=\"y\"} 2 # {t=\"1\"} 1.0\n\
                       c_created{x=\"y\"} 1700000000.0\n# HELP i I.\n# TYPE i info\ni_info 1\n# EOF\n";
    assert_eq!(
        openmetrics_to_prometheus(openmetrics),
        "# HELP a_seconds A.\n# TYPE a_seconds gauge\na_seconds 1.5\n# HELP c_total C.\n\
         # TYPE c_total counter\nc_total{x=\"y\"} 2\n# HELP i_info I.\n# TYPE i_info gauge\ni_info 1\n"
    );
}
