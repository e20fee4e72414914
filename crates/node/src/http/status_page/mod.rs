//! `GET /` and `GET /ui`: the status page, server-rendered HTML for a person, in a browser or a
//! terminal's text browser. No JavaScript: it refreshes itself with `<meta http-equiv="refresh">`.
//!
//! It shows the version and uptime; the authority: its members' health (multi), the nodes above
//! (upstream: each url and whether its latest call answered) and what this node handed to the
//! nodes below (blocks and ids answered per namespace, the lease still open); then a card per
//! namespace to scan (`cards.rs`): the id space used as a bar with the projected exhaustion date,
//! ids served and refills per minute over the last hour as sparklines, a snowflake namespace's
//! worker pool as used and free; and below them the detail table (`table.rs`), every namespace
//! with its kind, settings and live state: watermark, ids buffered, demand, block size, ids
//! served, burned and given back, the share of the id space used and the projected exhaustion date, in
//! red (and marked `(!)` for text browsers) when it is nearer than
//! `server.exhaustion_warning_days`. A snowflake namespace shows its exhaustion foresight: the
//! date its layout's timestamp bits run out and the time left (red within the same warning),
//! its worker pool (leases held of the worker ids possible; red when full, as no further node
//! of the group could start) and its sequence headroom (the peak ids per time unit against the
//! per-unit limit; red when a unit ran full).
//!
//! Invariants:
//! - A read: it takes the namespaces from [`Node::all`] and their [`crate::namespace::Namespace::info`]
//!   and the members from [`Node::members`]; it never creates a namespace, reserves an id or
//!   writes anything. It asks the authority `list` (as `/readyz` does), bounded by
//!   [`PROBE_TIMEOUT`], and reads each snowflake group's leases for its pool
//!   ([`crate::namespace::Namespace::info_live`], bounded by its own timeout). The history and
//!   what went below are in-memory reads of each sequence namespace (its served window, its
//!   supply's counters); the upper nodes' health is what their latest calls found (no call).
//! - Every value is escaped (maud escapes by default; nothing here uses `PreEscaped`), so a
//!   namespace name or an authority's error message cannot inject markup; the graphics are
//!   maud elements too (`svg.rs`).
//! - Every graphic has its numbers written as text beside it.
//! - It maps nothing to protocol errors: it always answers 200 with the page, the authority's
//!   failure shown on it.

mod cards;
mod svg;
mod table;

use crate::namespace::served_window::Delta;
use crate::namespace::Namespace;
use crate::node::Node;
use crate::supply::Below;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use idmint_api::{MemberState, NamespaceInfo, SequenceState, WorkerPool};
use idmint_store::UpperNode;
use maud::{html, Markup, DOCTYPE};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often the page reloads itself, in seconds.
pub const REFRESH_SECONDS: u32 = 5;

/// How long the page waits for the authority's answer before showing it as not answering.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the page says about the authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityHealth {
    /// Its kind (`file`, `postgres`, …, `multi`).
    pub kind: String,
    /// `None` when it answered, else why not.
    pub error: Option<String>,
    /// With a `multi` authority, each member; empty otherwise.
    pub members: Vec<MemberState>,
    /// With an `upstream` authority, each upper node; empty otherwise.
    pub upper: Vec<UpperNode>,
}

/// One namespace as the page shows it.
#[derive(Debug, Clone)]
pub struct Row {
    /// Its settings and state (what `GET /v1/namespaces/{name}` answers).
    pub info: NamespaceInfo,
    /// A sequence namespace's ids served and refills per minute over the last hour
    /// ([`crate::namespace::served_window`]); empty for other kinds.
    pub history: Vec<Delta>,
    /// What a sequence namespace handed to lower tiers; `None` for other kinds.
    pub below: Option<Below>,
}

/// Everything the page shows, gathered before rendering (so rendering is a pure function).
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The node's version.
    pub version: &'static str,
    /// How long the node has run.
    pub uptime: Duration,
    /// Wall time of the snapshot.
    pub now: SystemTime,
    /// How near an exhaustion date turns red.
    pub warning: Duration,
    /// The authority.
    pub authority: AuthorityHealth,
    /// Every namespace served, sorted by name.
    pub namespaces: Vec<Row>,
}

/// `GET /`, `GET /ui`.
pub(crate) async fn serve(State(node): State<Arc<Node>>) -> Response {
    let page = render(&snapshot(&node).await);
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        page.into_string(),
    )
        .into_response()
}

/// Reads what the page shows from `node`.
pub async fn snapshot(node: &Node) -> Snapshot {
    let authority = node.authority().clone();
    let error = match tokio::time::timeout(PROBE_TIMEOUT, authority.list()).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!(
            "did not answer within {}",
            humantime::format_duration(PROBE_TIMEOUT)
        )),
    };
    let now = node.now();
    let mut namespaces = Vec::new();
    for ns in node.all() {
        let info = node.describe(ns.info_live(now, &*authority).await);
        let (history, below) = match &*ns {
            Namespace::Sequence(s) => (s.history(), Some(s.supply().below())),
            _ => (Vec::new(), None),
        };
        namespaces.push(Row {
            info,
            history,
            below,
        });
    }
    Snapshot {
        version: env!("CARGO_PKG_VERSION"),
        uptime: node.uptime(),
        now,
        warning: node.config().exhaustion_warning,
        authority: AuthorityHealth {
            kind: authority.kind().to_owned(),
            error,
            members: node.members(),
            upper: authority.upper_nodes(),
        },
        namespaces,
    }
}

/// The page of `s`.
pub fn render(s: &Snapshot) -> Markup {
    let warning_days = s.warning.as_secs() / 86_400;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(REFRESH_SECONDS);
                meta name="viewport" content="width=device-width, initial-scale=1";
                // No icon: the browser asks for none (a /favicon.ico would be a 404).
                link rel="icon" href="data:,";
                title { "idmint status" }
                style { (STYLE) }
            }
            body {
                h1 { "idmint status" }
                p #summary {
                    "version " (s.version)
                    " · up " (uptime(s.uptime))
                    " · " (rfc3339(s.now).unwrap_or_default())
                    " · refreshes every " (REFRESH_SECONDS) " s"
                }
                h2 { "Authority" }
                (authority(&s.authority))
                (cards::below(&s.namespaces))
                h2 { "Namespaces (" (s.namespaces.len()) ")" }
                @if s.namespaces.is_empty() {
                    p { "No namespace is served yet: declared ones appear at start, others on first use." }
                } @else {
                    (cards::cards(s))
                    h3 { "Detail" }
                    (table::namespaces(s))
                }
                p .legend {
                    "Red, marked (!): runs out within " (warning_days) " days at the current demand, "
                    "or a snowflake layout's time does (server.exhaustion_warning_days); a worker "
                    "pool is full; a time unit's sequence ran full; a node above did not answer. "
                    "Sparklines: per whole minute over the last hour (at least five minutes wide), "
                    "the dot the newest; the minute in progress is written beside them. JSON: "
                    a href="/v1/namespaces" { "/v1/namespaces" } ", "
                    a href="/readyz" { "/readyz" } ", "
                    a href="/metrics" { "/metrics" } ", "
                    a href="/openapi.json" { "/openapi.json" } "."
                }
            }
        }
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;font-size:.9em;margin:.4em 0}\
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}\
td.n{text-align:right;font-variant-numeric:tabular-nums}td.t{white-space:nowrap}\
th{background:#f0f0f0}.warn{color:#b00;font-weight:bold}.ok{color:#070}\
.legend{color:#555;font-size:.85em}\
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(21em,1fr));gap:.8em;margin:.6em 0 1.2em}\
.card{border:1px solid #ccc;border-radius:6px;padding:.5em .8em;background:#fcfcfc}\
.card h3{margin:0 0 .3em;font-size:1.05em}.card h3 .kind{color:#666;font-weight:normal;font-size:.85em}\
.metric{margin:.35em 0}.metric .label{display:block;color:#555;font-size:.8em}\
.metric .value{display:block;font-size:.85em;font-variant-numeric:tabular-nums}\
svg{display:block;margin:.15em 0}\
svg .free{fill:#e4e4e4}svg .used{fill:#2a6fb0}svg .used.warn{fill:#c0302b}\
svg .axis{stroke:#ccc;stroke-width:1}\
svg polyline{fill:none;stroke:#2a6fb0;stroke-width:1.5;stroke-linejoin:round}\
svg circle{fill:#2a6fb0}.refills polyline{stroke:#8a5a00}.refills circle{fill:#8a5a00}\
svg.dot{display:inline;vertical-align:middle;margin:0 .3em 0 0}svg.dot .up{fill:#2a9a3a}\
svg.dot .down{fill:#c0302b}svg.dot .unknown{fill:#aaa}";

fn authority(a: &AuthorityHealth) -> Markup {
    html! {
        p #authority {
            "kind " b { (a.kind) } ": "
            @match &a.error {
                None => span .ok { "answering" },
                Some(e) => span .warn { "(!) not answering: " (e) },
            }
        }
        @if !a.members.is_empty() {
            table #members {
                tr { th { "member" } th { "kind" } th { "offset" } th { "health" } }
                @for m in &a.members {
                    tr {
                        td .n { (m.number) }
                        td { (m.kind) }
                        td .n { (m.offset) }
                        @if let Some(why) = &m.out_of_service {
                            td .warn { "(!) out of service: " (why) }
                        } @else if m.up {
                            td .ok { "up" }
                        } @else {
                            td .warn { "(!) down: " (m.last_error.as_deref().unwrap_or("no answer")) }
                        }
                    }
                }
            }
        }
        @if !a.upper.is_empty() {
            (cards::upper(&a.upper))
        }
    }
}

/// A snowflake namespace's worker pool: leases held of worker ids possible.
fn pool(pool: Option<&WorkerPool>) -> Markup {
    html! {
        @match pool {
            None => "no leases (fixed worker id)",
            Some(p) => @match p.held {
                Some(held) if held >= p.possible => span .warn {
                    "(!) workers " (held) " of " (p.possible) " leased: full"
                },
                Some(held) => {
                    "workers " (held) " of " (p.possible) " leased ("
                    (percent(p.used_fraction.unwrap_or_default())) ")"
                },
                None => span .warn {
                    "(!) workers ? of " (p.possible) ": "
                    (p.error.as_deref().unwrap_or("leases not read"))
                },
            },
        }
    }
}

/// Whole seconds as years and days (or less, when less).
fn time_left(seconds: u64) -> String {
    const YEAR: u64 = 365 * 86_400;
    let (years, rest) = (seconds / YEAR, seconds % YEAR);
    if years > 0 {
        format!("{years} years {} days", rest / 86_400)
    } else if seconds >= 86_400 {
        format!("{} days", seconds / 86_400)
    } else {
        humantime::format_duration(Duration::from_secs(seconds)).to_string()
    }
}

/// Whether a sequence namespace runs out within `warning` at its current demand.
fn runs_out_soon(st: &SequenceState, warning: Duration) -> bool {
    let left = st.capacity.saturating_sub(st.ids_used);
    !st.retired
        && st.demand_per_second > 1e-3
        && (left as f64 / st.demand_per_second) < warning.as_secs_f64()
}

/// What a retired sequence namespace shows where a live one shows when it runs out.
const RETIRED: &str = "retired: hands out no id any more";

/// A share as a percentage: enough digits to see a namespace move off 0 %.
fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    if p > 0.0 && p < 0.0001 {
        "<0.0001 %".into()
    } else {
        format!("{p:.4} %")
    }
}

/// Whether the RFC 3339 date `date` (as the API writes it) lies before `now + warning`.
fn within(date: &str, now: SystemTime, warning: Duration) -> bool {
    let horizon = now + warning;
    rfc3339(horizon).is_some_and(|h| date.len() == h.len() && date < h.as_str())
}

fn rfc3339(t: SystemTime) -> Option<String> {
    let ms = u64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    idmint_core::layout::rfc3339_millis(ms)
}

fn uptime(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use idmint_api::{CacheSettings, SequenceHeadroom, SequenceSettings};

    fn sequence(name: &str, demand: f64, used: u64, exhaustion: Option<&str>) -> NamespaceInfo {
        NamespaceInfo::Sequence {
            namespace: name.into(),
            auto_created: false,
            family: None,
            settings: SequenceSettings {
                width: 32,
                start: 1,
                step: 1,
                offset: 0,
                residues: Vec::new(),
                cache: CacheSettings::Off,
            },
            state: SequenceState {
                watermark: used + 1,
                retired: false,
                ids_buffered: 0,
                demand_per_second: demand,
                block_size: 0,
                ids_served: used,
                ids_burned: 0,
                ids_reserved: used,
                ids_given_back: 0,
                refills: 0,
                ids_used: used,
                capacity: 1000,
                used_fraction: used as f64 / 1000.0,
                projected_exhaustion: exhaustion.map(Into::into),
                projection_window_seconds: 3600,
                last_error: None,
                members: Vec::new(),
                leader: None,
            },
        }
    }

    fn snapshot(namespaces: Vec<NamespaceInfo>) -> Snapshot {
        let namespaces = namespaces
            .into_iter()
            .map(|info| Row {
                info,
                history: Vec::new(),
                below: None,
            })
            .collect();
        Snapshot {
            version: "9.9.9",
            uptime: Duration::from_secs(3723),
            now: UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            warning: Duration::from_secs(365 * 86_400),
            authority: AuthorityHealth {
                kind: "file".into(),
                error: None,
                members: Vec::new(),
                upper: Vec::new(),
            },
            namespaces,
        }
    }

    #[test]
    fn shows_version_uptime_and_each_namespace() {
        let page = render(&snapshot(vec![
            sequence("photos", 0.0, 10, None),
            NamespaceInfo::Ulid {
                namespace: "uploads".into(),
            },
        ]))
        .into_string();
        for want in [
            "version 9.9.9",
            "up 1h 2m 3s",
            "http-equiv=\"refresh\"",
            "id=\"ns-photos\"",
            "id=\"ns-uploads\"",
            "1.0000 % of 1000",
            "not at this demand",
        ] {
            assert!(page.contains(want), "{want} missing from {page}");
        }
        assert!(!page.contains("class=\"warn\""), "{page}");
    }

    #[test]
    fn a_near_exhaustion_is_red_and_marked() {
        // 990 ids left at 1 id/s: 16.5 minutes.
        let page = render(&snapshot(vec![sequence(
            "tickets",
            1.0,
            10,
            Some("2027-01-15T08:16:30.000Z"),
        )]))
        .into_string();
        assert!(
            page.contains("<span class=\"warn\">(!) 2027-01-15T08:16:30.000Z</span>"),
            "{page}"
        );
    }

    fn snowflake(time_runs_out: &str, seconds: u64, held: Option<u64>, peak: u64) -> NamespaceInfo {
        NamespaceInfo::Snowflake {
            namespace: "events".into(),
            settings: idmint_api::SnowflakeSettings {
                worker: 1,
                layout: idmint_api::LayoutSettings {
                    timestamp_bits: 41,
                    node_bits: 10,
                    sequence_bits: 12,
                    time_unit: "1ms".into(),
                    time_unit_ns: 1_000_000,
                    max_bits: 63,
                    epoch: "2010-11-04T01:42:54.657Z".into(),
                    epoch_unix_ms: 1_288_834_974_657,
                    order: idmint_api::FieldOrder::NodeThenSequence,
                    node_field: idmint_api::NodeField::Worker,
                },
            },
            state: idmint_api::SnowflakeState {
                ids_served: 5000,
                last_timestamp: Some(1),
                time_runs_out: time_runs_out.into(),
                seconds_to_exhaustion: seconds,
                worker_pool: Some(WorkerPool::new(
                    "events".into(),
                    1024,
                    held,
                    held.is_none().then(|| "connection refused".into()),
                )),
                sequence_headroom: Some(SequenceHeadroom::new(
                    4096,
                    1_000_000,
                    peak,
                    u64::from(peak == 4096),
                    60,
                )),
                worker_lease: None,
                shards: None,
            },
        }
    }

    #[test]
    fn a_snowflake_shows_its_pool_headroom_and_time_left() {
        // 2079 is 52 years after the snapshot's 2027: not within the one-year warning.
        let page = render(&snapshot(vec![snowflake(
            "2079-09-07T15:47:35.551Z",
            1_662_000_000,
            Some(2),
            1024,
        )]))
        .into_string();
        for want in [
            "workers 2 of 1024 leased (0.1953 %)",
            "peak 1024 of 4096 per 1ms (25 %)",
            "2079-09-07T15:47:35.551Z<br>in 52 years 256 days",
        ] {
            assert!(page.contains(want), "{want} missing from {page}");
        }
        assert!(!page.contains("class=\"warn\""), "{page}");
    }

    #[test]
    fn a_snowflake_near_its_end_a_full_unit_and_an_unread_pool_are_red() {
        let page = render(&snapshot(vec![snowflake(
            "2027-03-01T00:00:00.000Z",
            3_888_000,
            None,
            4096,
        )]))
        .into_string();
        for want in [
            "<span class=\"warn\">(!) 2027-03-01T00:00:00.000Z</span><br>in 45 days",
            "<span class=\"warn\">(!) peak 4096 of 4096 per 1ms (100 %)</span><br>1 waits",
            "<span class=\"warn\">(!) workers ? of 1024: connection refused</span>",
        ] {
            assert!(page.contains(want), "{want} missing from {page}");
        }
        let full = render(&snapshot(vec![snowflake(
            "2079-09-07T15:47:35.551Z",
            1_662_000_000,
            Some(1024),
            1,
        )]))
        .into_string();
        assert!(
            full.contains("<span class=\"warn\">(!) workers 1024 of 1024 leased: full</span>"),
            "{full}"
        );
    }

    #[test]
    fn members_show_their_health() {
        let mut s = snapshot(vec![]);
        s.authority.kind = "multi".into();
        s.authority.members = vec![
            MemberState {
                number: 1,
                kind: "postgres".into(),
                offset: 1,
                up: false,
                last_error: Some("connection refused".into()),
                out_of_service: None,
            },
            MemberState {
                number: 2,
                kind: "postgres".into(),
                offset: 0,
                up: true,
                last_error: None,
                out_of_service: None,
            },
        ];
        let page = render(&s).into_string();
        assert!(
            page.contains("<td class=\"warn\">(!) down: connection refused</td>"),
            "{page}"
        );
        assert!(page.contains("<td class=\"ok\">up</td>"), "{page}");
    }

    #[test]
    fn a_family_member_names_its_family() {
        let mut member = sequence("invoices.42", 0.0, 10, None);
        if let NamespaceInfo::Sequence { family, .. } = &mut member {
            *family = Some("invoices.*".into());
        }
        let page = render(&snapshot(vec![member, sequence("photos", 0.0, 10, None)])).into_string();
        assert_eq!(page.matches(", family invoices.*").count(), 1, "{page}");
    }

    #[test]
    fn names_and_errors_are_escaped() {
        let mut s = snapshot(vec![]);
        s.authority.error = Some("<script>alert(1)</script>".into());
        let page = render(&s).into_string();
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;"), "{page}");
    }

    #[test]
    fn dates_within_the_warning_are_found() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000); // 2027-01-15T08:00:00Z
        let year = Duration::from_secs(365 * 86_400);
        assert!(within("2027-06-01T00:00:00.000Z", now, year));
        assert!(!within("2029-01-01T00:00:00.000Z", now, year));
        assert!(!within("not a date", now, year));
    }

    fn minute(ended_ago: u64, length: u64, served: u64, refills: u64) -> Delta {
        Delta {
            ended_ago: Duration::from_secs(ended_ago),
            length: Duration::from_secs(length),
            served,
            refills,
        }
    }

    /// A sequence card: its bar as wide as its share, the sparklines of its history with
    /// their numbers as text, what went below.
    #[test]
    fn a_sequence_card_shows_its_bar_sparklines_and_numbers() {
        let mut s = snapshot(vec![sequence("photos", 0.0, 250, None)]);
        s.namespaces[0].history = vec![
            minute(150, 60, 0, 0),
            minute(90, 60, 600, 2),
            minute(30, 60, 1200, 3),
            minute(0, 30, 300, 1),
        ];
        s.namespaces[0].below = Some(Below {
            blocks: 3,
            ids: 300,
            requests_peak: 2,
            open_lease: idmint_core::Block::new(201, 301, 1),
        });
        let page = render(&s).into_string();
        for want in [
            r#"<div class="card" id="card-photos">"#,
            // 250 of 1000: a quarter of 240 px.
            r#"<rect class="used" x="0" y="0" width="60.0" height="12""#,
            "25.0000 % of 1000 used; runs out: not at this demand",
            "<title>photos: ids served per minute: latest 1200, peak 1200 (over 3m 30s); this minute so far 300</title>",
            // 3m 30s of history on a five-minute axis: 240 * (1 - 150/300) = 120, ...
            r#"<polyline points="120.0,25.0 168.0,14.0 216.0,3.0">"#,
            "latest 3.0, peak 3.0 (over 3m 30s); this minute so far 1",
            "3 blocks, 300 ids answered; lease open: 201–300",
            "<td>201–300 (100 ids)</td>",
        ] {
            assert!(page.contains(want), "{want} missing from {page}");
        }
        assert!(!page.contains("class=\"warn\""), "{page}");
    }

    #[test]
    fn a_card_near_exhaustion_is_red_and_one_without_history_says_so() {
        let page = render(&snapshot(vec![sequence(
            "tickets",
            1.0,
            10,
            Some("2027-01-15T08:16:30.000Z"),
        )]))
        .into_string();
        for want in [
            r#"class="used warn""#,
            r#"runs out: <span class="warn">(!) 2027-01-15T08:16:30.000Z</span>"#,
            "no history yet (sampled once a second)",
            "no block or lease was asked of this node since it started",
        ] {
            assert!(page.contains(want), "{want} missing from {page}");
        }
    }

    /// A retired namespace says so in its card and its row, never as red or as running out.
    #[test]
    fn a_retired_namespace_says_so_not_that_it_runs_out() {
        let mut info = sequence("legacy", 5.0, 1000, None);
        if let NamespaceInfo::Sequence { state, .. } = &mut info {
            state.retired = true;
        }
        let page = render(&snapshot(vec![info])).into_string();
        assert_eq!(page.matches(RETIRED).count(), 2, "card and row: {page}");
        assert!(!page.contains("runs out:"), "{page}");
        assert!(!page.contains("class=\"warn\""), "{page}");
    }

    /// A strict namespace's card says who leads, as this node sees it; no leader is red.
    #[test]
    fn a_strict_card_says_who_leads() {
        let with = |role: &str, url: Option<&str>, term: Option<u64>, reason: Option<&str>| {
            let mut info = sequence("chat", 1.0, 10, None);
            if let NamespaceInfo::Sequence { state, .. } = &mut info {
                state.leader = Some(idmint_api::LeaderState {
                    role: role.into(),
                    url: url.map(str::to_owned),
                    holder: None,
                    term,
                    reason: reason.map(str::to_owned),
                });
            }
            render(&snapshot(vec![info])).into_string()
        };
        let page = with("leader", Some("http://a:7879"), Some(7), None);
        assert!(page.contains("this node leads (term 7)"), "{page}");
        let page = with("follower", Some("http://b:7879"), None, None);
        assert!(
            page.contains("forwarded to the leader at http://b:7879"),
            "{page}"
        );
        let page = with("seeking", None, None, Some("the authority does not answer"));
        assert!(
            page.contains(
                r#"<span class="value warn">(!) no leader: the authority does not answer</span>"#
            ),
            "{page}"
        );
    }

    #[test]
    fn a_snowflake_card_shows_its_pool_as_used_and_free() {
        let page = render(&snapshot(vec![snowflake(
            "2079-09-07T15:47:35.551Z",
            1_662_000_000,
            Some(256),
            1024,
        )]))
        .into_string();
        // 256 of 1024 leased: a quarter.
        assert!(
            page.contains(r#"<rect class="used" x="0" y="0" width="60.0" height="12""#),
            "{page}"
        );
        assert!(
            page.contains("workers 256 of 1024 leased (25.0000 %)"),
            "{page}"
        );
    }

    #[test]
    fn upper_nodes_show_whether_their_latest_call_answered() {
        let mut s = snapshot(vec![]);
        s.authority.kind = "upstream".into();
        s.authority.upper = vec![
            UpperNode {
                url: "http://a:7070".into(),
                current: false,
                answered: Some(false),
                last_error: Some("connection refused".into()),
            },
            UpperNode {
                url: "http://b:7070".into(),
                current: true,
                answered: Some(true),
                last_error: None,
            },
            UpperNode {
                url: "http://c:7070".into(),
                current: false,
                answered: None,
                last_error: None,
            },
        ];
        let page = render(&s).into_string();
        for want in [
            "(!) did not answer: connection refused</td>",
            "http://b:7070 (calls go here first)</td>",
            "answered</td>",
            "not called yet</td>",
        ] {
            assert!(page.contains(want), "{want} missing from {page}");
        }
    }

    /// A hostile name (the info of a namespace is text) stays text in the cards, the SVG
    /// titles and the ids.
    #[test]
    fn a_hostile_namespace_name_is_escaped_everywhere() {
        let mut s = snapshot(vec![
            sequence("\"><script>alert(1)</script>", 0.0, 10, None),
            snowflake("2079-09-07T15:47:35.551Z", 1_662_000_000, Some(2), 1),
        ]);
        if let NamespaceInfo::Snowflake { namespace, .. } = &mut s.namespaces[1].info {
            *namespace = "<svg onload=alert(1)>".into();
        }
        s.namespaces[0].history = vec![minute(0, 60, 5, 1)];
        let page = render(&s).into_string();
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("<svg onload"), "{page}");
        assert!(
            page.contains(r#"id="card-&quot;&gt;&lt;script&gt;"#),
            "{page}"
        );
        assert!(
            page.contains("<title>&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;: ids served"),
            "{page}"
        );
    }
}
