//! What an operator scans for at a glance: a card per namespace, the nodes above, what went
//! below. Each graphic ([`super::svg`]) has its numbers as text beside it; the red and `(!)`
//! marks follow the same rules as the detail table (the functions of [`super`]).

use super::svg::{self, Rates};
use super::{percent, pool, runs_out_soon, time_left, within, Row, Snapshot, RETIRED};
use idmint_api::{NamespaceInfo, SequenceState, SnowflakeState, WorkerPool};
use idmint_store::UpperNode;
use maud::{html, Markup};
use std::time::Duration;

/// A card per namespace, in the snapshot's order.
pub(super) fn cards(s: &Snapshot) -> Markup {
    html! {
        div .cards {
            @for row in &s.namespaces {
                @let name = row.info.name();
                div .card id={ "card-" (name) } {
                    h3 { (name) " " span .kind { (row.info.kind()) } }
                    @match &row.info {
                        NamespaceInfo::Sequence { state, .. } => (sequence(name, state, row, s.warning)),
                        NamespaceInfo::Snowflake { state, .. } => (snowflake(name, state, s)),
                        _ => p .metric { "Random bits and the time: nothing to run out of." },
                    }
                }
            }
        }
    }
}

fn sequence(name: &str, st: &SequenceState, row: &Row, warning: Duration) -> Markup {
    let soon = runs_out_soon(st, warning);
    let served = Rates::of(&row.history, |d| d.served);
    let refills = Rates::of(&row.history, |d| d.refills);
    html! {
        div .metric .space {
            span .label { "id space used" }
            (svg::bar(
                Some(st.used_fraction),
                soon,
                &format!("{name}: {} of the id space used", percent(st.used_fraction)),
            ))
            span .value {
                (percent(st.used_fraction)) " of " (st.capacity) " used; "
                @if st.retired {
                    (RETIRED)
                } @else {
                    "runs out: "
                    @match (soon, st.projected_exhaustion.as_deref()) {
                        (true, date) => span .warn { "(!) " (date.unwrap_or("now")) },
                        (false, Some(date)) => (date),
                        (false, None) => "not at this demand",
                    }
                }
            }
            @if let Some(e) = &st.last_error {
                span .value .warn { "(!) last refill failed: " (e) }
            }
        }
        @if let Some(l) = &st.leader {
            div .metric .leader {
                span .label { "strict order" }
                @match l.role.as_str() {
                    "leader" => span .value { "this node leads (term " (l.term.unwrap_or_default()) ")" },
                    "follower" => span .value { "forwarded to the leader at " (l.url.as_deref().unwrap_or("?")) },
                    _ => span .value .warn { "(!) no leader: " (l.reason.as_deref().unwrap_or("")) },
                }
            }
        }
        (spark("served", "ids served per minute", name, &served))
        (spark("refills", "refills per minute", name, &refills))
        @if let Some(b) = row.below.filter(|b| b.blocks > 0) {
            div .metric .below {
                span .label { "to lower tiers" }
                span .value {
                    (b.blocks) (if b.blocks == 1 { " block, " } else { " blocks, " })
                    (b.ids) " ids answered"
                    @if let Some(lease) = b.open_lease {
                        "; lease open: " (lease.start()) "–" (lease.last())
                    }
                }
            }
        }
    }
}

/// A sparkline with its numbers: the newest whole minute's rate and the peak, over how long,
/// and what the minute in progress counted so far.
fn spark(class: &str, what: &str, name: &str, rates: &Rates) -> Markup {
    let span = humantime::format_duration(Duration::from_secs(rates.span.as_secs()));
    let whole = match (rates.latest(), rates.peak()) {
        (Some(latest), Some(peak)) => format!(
            "latest {}, peak {} (over {span})",
            svg::rate(latest),
            svg::rate(peak)
        ),
        _ => "no whole minute yet".into(),
    };
    let numbers = match rates.so_far {
        Some(n) => format!("{whole}; this minute so far {n}"),
        None if rates.points.is_empty() => "no history yet (sampled once a second)".into(),
        None => whole,
    };
    html! {
        div class={ "metric " (class) } {
            span .label { (what) }
            (svg::sparkline(rates, &format!("{name}: {what}: {numbers}")))
            span .value { (numbers) }
        }
    }
}

fn snowflake(name: &str, st: &SnowflakeState, s: &Snapshot) -> Markup {
    let pool_fraction = st.worker_pool.as_ref().and_then(pool_used);
    let full = st
        .worker_pool
        .as_ref()
        .is_some_and(|p| p.held.is_none_or(|held| held >= p.possible));
    html! {
        div .metric .pool {
            span .label { "worker pool (leased / free)" }
            @if st.worker_pool.is_some() {
                (svg::bar(pool_fraction, full, &format!("{name}: worker ids leased")))
            }
            span .value { (pool(st.worker_pool.as_ref())) }
        }
        div .metric {
            span .label { "timestamp bits run out" }
            span .value {
                @if within(&st.time_runs_out, s.now, s.warning) {
                    span .warn { "(!) " (st.time_runs_out) }
                } @else {
                    (st.time_runs_out)
                }
                ", in " (time_left(st.seconds_to_exhaustion)) "; " (st.ids_served) " ids served"
            }
        }
    }
}

/// The share of a pool's worker ids leased, when the leases were read.
fn pool_used(p: &WorkerPool) -> Option<f64> {
    p.held.map(|held| held as f64 / p.possible.max(1) as f64)
}

/// The nodes above an upstream authority.
pub(super) fn upper(nodes: &[UpperNode]) -> Markup {
    html! {
        table #upper {
            tr { th { "node above" } th { "latest call" } }
            @for n in nodes {
                tr {
                    td {
                        (n.url)
                        @if n.current { " (calls go here first)" }
                    }
                    @match (n.answered, &n.last_error) {
                        (None, _) => td { (dot("unknown", "not called yet")) "not called yet" },
                        (Some(true), _) => td .ok { (dot("up", "answered")) "answered" },
                        (Some(false), why) => td .warn {
                            (dot("down", "did not answer"))
                            "(!) did not answer: " (why.as_deref().unwrap_or("no answer"))
                        },
                    }
                }
            }
        }
    }
}

/// A small status dot; `title` says it in words (so does the text beside it).
fn dot(class: &str, title: &str) -> Markup {
    html! {
        svg .dot width="10" height="10" viewBox="0 0 10 10" role="img" {
            title { (title) }
            circle class=(class) cx="5" cy="5" r="4.5" {}
        }
    }
}

/// What this node handed to the nodes below, per sequence namespace that answered a block.
pub(super) fn below(rows: &[Row]) -> Markup {
    let answered: Vec<_> = rows
        .iter()
        .filter_map(|r| r.below.filter(|b| b.blocks > 0).map(|b| (r.info.name(), b)))
        .collect();
    html! {
        @if answered.is_empty() {
            p #below { "Nodes below: no block or lease was asked of this node since it started." }
        } @else {
            table #below {
                tr {
                    th { "to nodes below" } th { "blocks answered" } th { "ids in them" }
                    th { "most at once" } th { "lease open (its tail may come back)" }
                }
                @for (name, b) in answered {
                    tr {
                        td { b { (name) } }
                        td .n { (b.blocks) }
                        td .n { (b.ids) }
                        td .n { (b.requests_peak) }
                        td {
                            @match b.open_lease {
                                Some(l) => { (l.start()) "–" (l.last()) " (" (l.len()) " ids)" },
                                None => "none",
                            }
                        }
                    }
                }
            }
        }
    }
}
