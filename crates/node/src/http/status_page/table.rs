//! The detail table below the cards: every namespace with its kind, settings and live state,
//! one row each (`id="ns-NAME"`), with the same red and `(!)` rules as the cards (the shared
//! functions of [`super`]).

use super::{percent, pool, runs_out_soon, time_left, within, Snapshot};
use idmint_api::{CacheSettings, NamespaceInfo, SequenceHeadroom, SequenceState};
use maud::{html, Markup};
use std::time::Duration;

pub(super) fn namespaces(s: &Snapshot) -> Markup {
    html! {
        table #namespaces {
            tr {
                th { "namespace" } th { "kind" } th { "settings" } th { "watermark" }
                th { "buffered" } th { "demand/s" } th { "block size" } th { "served" }
                th { "burned" } th { "given back" } th { "id space used" } th { "runs out" }
            }
            @for ns in s.namespaces.iter().map(|r| &r.info) {
                tr id={ "ns-" (ns.name()) } {
                    td { b { (ns.name()) } }
                    td { (ns.kind()) }
                    @match ns {
                        NamespaceInfo::Sequence { settings, state, auto_created, family, .. } => {
                            td {
                                "width " (settings.width) ", start " (settings.start)
                                ", step " (settings.step) ", offset " (settings.offset)
                                ", cache " (cache(&settings.cache))
                                @if *auto_created { ", auto-created" }
                                @if let Some(family) = family { ", family " (family) }
                            }
                            (sequence_state(state, s.warning))
                        }
                        NamespaceInfo::Snowflake { settings, state, .. } => {
                            @let l = &settings.layout;
                            td {
                                (l.node_field.as_str()) " " (settings.worker) ", " (l.timestamp_bits) "/"
                                (l.node_bits) "/" (l.sequence_bits) " bits, unit " (l.time_unit)
                                ", epoch " (l.epoch)
                                @if let Some(lease) = &state.worker_lease {
                                    br;
                                    @let held = lease.status == idmint_api::LeaseStatus::Held;
                                    @if held {
                                        "lease: group " (lease.group) ", token " (lease.token)
                                        ", floor " (lease.floor)
                                    } @else {
                                        span .warn {
                                            "(!) lease " (format!("{:?}", lease.status).to_lowercase())
                                            ": group " (lease.group) ", token " (lease.token)
                                            @if let Some(e) = &lease.last_error { ", " (e) }
                                        }
                                    }
                                } @else {
                                    br; "no lease (fixed worker id)"
                                }
                            }
                            td {} td {}
                            td .sequence { (headroom(state.sequence_headroom.as_ref(), &l.time_unit)) }
                            td {}
                            td .n { (state.ids_served) }
                            td {} td {}
                            td .pool { (pool(state.worker_pool.as_ref())) }
                            td .t {
                                @if within(&state.time_runs_out, s.now, s.warning) {
                                    span .warn { "(!) " (state.time_runs_out) }
                                } @else {
                                    (state.time_runs_out)
                                }
                                br;
                                "in " (time_left(state.seconds_to_exhaustion))
                            }
                        }
                        _ => {
                            td { "-" }
                            td {} td {} td {} td {} td {} td {} td {} td {} td { "never" }
                        }
                    }
                }
            }
        }
    }
}

/// A snowflake namespace's sequence headroom: the peak ids per unit against the limit.
fn headroom(h: Option<&SequenceHeadroom>, unit: &str) -> Markup {
    html! {
        @if let Some(h) = h {
            @let text = format!(
                "peak {} of {} per {} ({:.0} %)",
                h.peak_per_unit,
                h.limit_per_unit,
                unit,
                h.peak_fraction * 100.0
            );
            @if h.headroom_per_unit == 0 {
                span .warn { "(!) " (text) }
            } @else {
                (text)
            }
            @if h.units_exhausted > 0 {
                br; (h.units_exhausted) " waits for the next unit"
            }
        }
    }
}

fn sequence_state(st: &SequenceState, warning: Duration) -> Markup {
    let soon = runs_out_soon(st, warning);
    html! {
        td .n { (st.watermark) }
        td .n { (st.ids_buffered) }
        td .n { (format!("{:.1}", st.demand_per_second)) }
        td .n { (st.block_size) }
        td .n { (st.ids_served) }
        td .n { (st.ids_burned) }
        td .n { (st.ids_given_back) }
        td .n { (percent(st.used_fraction)) " of " (st.capacity) }
        @let date = st.projected_exhaustion.as_deref();
        td .t {
            @if st.retired {
                (super::RETIRED)
            } @else if soon {
                span .warn { "(!) " (date.unwrap_or("now")) }
            } @else {
                (date.unwrap_or("not at this demand"))
            }
            @if let Some(e) = &st.last_error {
                br;
                span .warn { "(!) last refill failed: " (e) }
            }
        }
    }
}

fn cache(c: &CacheSettings) -> String {
    match c {
        CacheSettings::Off => "off".into(),
        CacheSettings::Fixed {
            block_size,
            low_water,
        } => format!("fixed {block_size} (low water {low_water})"),
        CacheSettings::Adaptive {
            buffer_seconds,
            min_block,
            max_block,
            low_water,
        } => format!(
            "adaptive {buffer_seconds} s, blocks {min_block}..{max_block} (low water {low_water})"
        ),
        // A mode added to the wire types shows by its debug name until it is written here.
        #[allow(unreachable_patterns)]
        other => format!("{other:?}"),
    }
}
