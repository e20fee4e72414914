//! The status page's graphics: inline SVG built with maud elements, so every text in it (a
//! `<title>`, a namespace name) is escaped like the rest of the page. No script, no style
//! outside the page's own sheet (classes only); each graphic has a `<title>` and `role="img"`,
//! and the page writes its numbers as text beside it, for a text browser and a screen reader.
//!
//! - [`bar`]: a share as a horizontal bar (id space used, a worker pool's leases), exact to
//!   the fraction: a share too small for a pixel draws nothing, and its text says how much.
//! - [`sparkline`]: a rate per minute over the last hour ([`Rates`]), one point per whole
//!   minute of the served window's history at the time it ended, the newest marked with a dot
//!   (also when it is the only one). The minute in progress is not drawn (its count so far
//!   would read as a drop); the page writes it as text. The axis spans the history, at least
//!   [`MIN_AXIS`], at most an hour.

use crate::namespace::served_window::{Delta, WINDOW};
use maud::{html, Markup};
use std::time::Duration;

/// The width of every graphic, in CSS pixels.
pub const WIDTH: f64 = 240.0;
/// The height of a bar.
pub const BAR_HEIGHT: f64 = 12.0;
/// The height of a sparkline.
pub const SPARK_HEIGHT: f64 = 28.0;
/// The space kept above and below a sparkline's line, so the dot and the stroke fit.
const SPARK_PAD: f64 = 3.0;

/// The width of a bar's used part for `fraction` of [`WIDTH`], clamped to `0..=1` (a fraction
/// that is not a number draws nothing).
pub fn bar_width(fraction: f64) -> f64 {
    if fraction.is_nan() {
        return 0.0;
    }
    fraction.clamp(0.0, 1.0) * WIDTH
}

/// A horizontal bar: `fraction` used (red with `warn`), the rest free; `title` says it in words.
/// `fraction` `None` draws the track alone (the share is unknown).
pub fn bar(fraction: Option<f64>, warn: bool, title: &str) -> Markup {
    html! {
        svg .bar width=(WIDTH) height=(BAR_HEIGHT) viewBox={ "0 0 " (WIDTH) " " (BAR_HEIGHT) }
            role="img" {
            title { (title) }
            rect .free x="0" y="0" width=(WIDTH) height=(BAR_HEIGHT) rx="2" {}
            @if let Some(f) = fraction {
                rect class=(if warn { "used warn" } else { "used" }) x="0" y="0"
                    width=(px(bar_width(f))) height=(BAR_HEIGHT) rx="2" {}
            }
        }
    }
}

/// The least time a sparkline's axis spans: a young node's few minutes are drawn across a
/// readable width, not squeezed into the right edge of an hour.
pub const MIN_AXIS: Duration = Duration::from_secs(5 * 60);

/// A rate per minute at the end of each whole minute of a served window's history, and what
/// the minute in progress counted so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// `(how long before the latest reading the interval ended, per minute)`, oldest first;
    /// whole minutes only (a gap in sampling is one point, averaged over it).
    pub points: Vec<(Duration, f64)>,
    /// What the minute in progress counted so far (not a rate: the minute is not over).
    pub so_far: Option<u64>,
    /// How long the history spans, the minute in progress included.
    pub span: Duration,
}

impl Rates {
    /// The rate of `count` in each whole minute of `history`: what it counted divided by its
    /// length in minutes (a gap in sampling averages over the gap); the minute in progress is
    /// kept apart, as a count, never extrapolated.
    pub fn of(history: &[Delta], count: impl Fn(&Delta) -> u64) -> Rates {
        let (done, now): (Vec<&Delta>, Vec<&Delta>) =
            history.iter().partition(|d| !d.in_progress());
        Rates {
            points: done
                .iter()
                .map(|d| {
                    (
                        d.ended_ago,
                        count(d) as f64 / (d.length.as_secs_f64() / 60.0),
                    )
                })
                .collect(),
            so_far: now.last().map(|d| count(d)),
            span: history
                .first()
                .map_or(Duration::ZERO, |d| d.ended_ago + d.length),
        }
    }

    /// The newest whole minute's rate.
    pub fn latest(&self) -> Option<f64> {
        self.points.last().map(|(_, r)| *r)
    }

    /// The highest rate of a whole minute.
    pub fn peak(&self) -> Option<f64> {
        self.points.iter().map(|(_, r)| *r).reduce(f64::max)
    }

    /// How long the sparkline's axis spans: the history's span, at least [`MIN_AXIS`], at most
    /// [`WINDOW`].
    pub fn axis(&self) -> Duration {
        self.span.clamp(MIN_AXIS, WINDOW)
    }

    /// Where each point lies in a sparkline: `x` by when it ended on the axis (the right edge
    /// is the latest reading), `y` by its rate against the peak (the top is the peak, the
    /// bottom zero).
    pub fn coordinates(&self) -> Vec<(f64, f64)> {
        let peak = self.peak().unwrap_or(0.0);
        let axis = self.axis().as_secs_f64();
        let bottom = SPARK_HEIGHT - SPARK_PAD;
        self.points
            .iter()
            .map(|(ago, rate)| {
                let x = WIDTH * (1.0 - (ago.as_secs_f64() / axis).min(1.0));
                let y = if peak > 0.0 {
                    bottom - (rate / peak) * (bottom - SPARK_PAD)
                } else {
                    bottom
                };
                (x, y)
            })
            .collect()
    }
}

/// A sparkline of `rates` over its axis (up to the last hour); `title` says what it counts.
pub fn sparkline(rates: &Rates, title: &str) -> Markup {
    let points = rates.coordinates();
    let line = points
        .iter()
        .map(|(x, y)| format!("{},{}", px(*x), px(*y)))
        .collect::<Vec<_>>()
        .join(" ");
    let baseline = SPARK_HEIGHT - SPARK_PAD;
    html! {
        svg .spark width=(WIDTH) height=(SPARK_HEIGHT)
            viewBox={ "0 0 " (WIDTH) " " (SPARK_HEIGHT) } role="img" {
            title { (title) }
            line .axis x1="0" y1=(baseline) x2=(WIDTH) y2=(baseline) {}
            @if !points.is_empty() {
                polyline points=(line) {}
            }
            @if let Some((x, y)) = points.last() {
                circle cx=(px(*x)) cy=(px(*y)) r="2.5" {}
            }
        }
    }
}

/// A coordinate with one decimal, no trailing `.0` noise beyond it.
fn px(v: f64) -> String {
    format!("{v:.1}")
}

/// A rate per minute as text: whole above ten, one decimal below.
pub fn rate(per_minute: f64) -> String {
    if per_minute >= 10.0 || per_minute == 0.0 {
        format!("{per_minute:.0}")
    } else {
        format!("{per_minute:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(ended_ago: u64, length: u64, served: u64, refills: u64) -> Delta {
        Delta {
            ended_ago: Duration::from_secs(ended_ago),
            length: Duration::from_secs(length),
            served,
            refills,
        }
    }

    #[test]
    fn a_bar_is_as_wide_as_its_fraction() {
        assert_eq!(bar_width(0.25), 60.0);
        assert_eq!(bar_width(0.0), 0.0);
        assert_eq!(bar_width(1.5), WIDTH);
        assert_eq!(bar_width(-1.0), 0.0);
        assert_eq!(bar_width(f64::NAN), 0.0);
        let svg = bar(Some(0.25), false, "a quarter").into_string();
        assert!(
            svg.contains(r#"<rect class="used" x="0" y="0" width="60.0" height="12""#),
            "{svg}"
        );
        assert!(svg.contains("<title>a quarter</title>"), "{svg}");
        let red = bar(Some(0.999), true, "nearly all").into_string();
        assert!(red.contains(r#"class="used warn""#), "{red}");
        let unknown = bar(None, true, "unknown").into_string();
        assert!(!unknown.contains("used"), "{unknown}");
    }

    /// Rates are per whole minute: a gap averages; the minute in progress is a count apart.
    #[test]
    fn rates_per_minute_of_known_deltas() {
        let history = [
            delta(600, 60, 120, 2),
            delta(300, 300, 1500, 5),
            delta(240, 60, 0, 0),
            delta(0, 15, 30, 1),
        ];
        let served = Rates::of(&history, |d| d.served);
        assert_eq!(
            served.points,
            vec![
                (Duration::from_secs(600), 120.0),
                (Duration::from_secs(300), 300.0),
                (Duration::from_secs(240), 0.0),
            ]
        );
        assert_eq!(served.so_far, Some(30));
        assert_eq!(served.latest(), Some(0.0));
        assert_eq!(served.peak(), Some(300.0));
        assert_eq!(served.span, Duration::from_secs(660));
        assert_eq!(served.axis(), Duration::from_secs(660));
        let refills = Rates::of(&history, |d| d.refills);
        assert_eq!((refills.peak(), refills.so_far), (Some(2.0), Some(1)));
        // A node younger than a minute: its minute in progress only.
        let young = Rates::of(&[delta(0, 12, 25, 1)], |d| d.served);
        assert_eq!((young.latest(), young.so_far), (None, Some(25)));
        assert_eq!(young.axis(), MIN_AXIS);
        let none = Rates::of(&[], |d| d.served);
        assert_eq!(
            (none.latest(), none.so_far, none.span),
            (None, None, Duration::ZERO)
        );
    }

    #[test]
    fn a_sparklines_points_for_known_deltas() {
        // An hour of history: ten minutes ago, 100/min (the peak); five minutes ago, 50/min;
        // the newest whole minute, 0; the minute in progress is not drawn.
        let history = [
            delta(3000, 600, 0, 0),
            delta(600, 60, 100, 0),
            delta(300, 60, 50, 0),
            delta(0, 60, 0, 0),
        ];
        let rates = Rates::of(&history, |d| d.served);
        assert_eq!(rates.axis(), WINDOW);
        // x: 240 * (1 - 3000/3600) = 40, 240 * (1 - 600/3600) = 200, 220, 240.
        // y: zero at the bottom (25), the peak at the top (3), half way (14).
        let rounded: Vec<_> = rates
            .coordinates()
            .iter()
            .map(|(x, y)| (x.round(), y.round()))
            .collect();
        assert_eq!(
            rounded,
            vec![(40.0, 25.0), (200.0, 3.0), (220.0, 14.0), (240.0, 25.0)]
        );
        let svg = sparkline(&rates, "served").into_string();
        assert!(
            svg.contains(r#"<polyline points="40.0,25.0 200.0,3.0 220.0,14.0 240.0,25.0">"#),
            "{svg}"
        );
        assert!(svg.contains(r#"<circle cx="240.0" cy="25.0""#), "{svg}");
    }

    /// Counters that never moved draw a flat line on the bottom; no whole minute draws the
    /// axis alone; a short history spans [`MIN_AXIS`]; a point older than the hour sits on the
    /// left edge.
    #[test]
    fn flat_empty_short_and_old_sparklines() {
        let flat = Rates::of(&[delta(60, 60, 0, 0), delta(0, 60, 0, 0)], |d| d.served);
        // Two minutes on a five-minute axis: 240 * (1 - 60/300) = 192.
        assert_eq!(flat.coordinates(), vec![(192.0, 25.0), (240.0, 25.0)]);
        let young = sparkline(&Rates::of(&[delta(0, 12, 25, 1)], |d| d.served), "young");
        let young = young.into_string();
        assert!(
            !young.contains("polyline") && !young.contains("circle"),
            "{young}"
        );
        let old = Rates::of(&[delta(3700, 600, 10, 0), delta(0, 60, 1, 0)], |d| d.served);
        assert_eq!(old.coordinates()[0].0, 0.0);
    }

    #[test]
    fn titles_are_escaped() {
        let svg = sparkline(&Rates::of(&[], |d| d.served), "<script>x</script>").into_string();
        assert!(
            svg.contains("<title>&lt;script&gt;x&lt;/script&gt;</title>"),
            "{svg}"
        );
        let svg = bar(Some(0.5), false, "\"><svg onload=x>").into_string();
        assert!(!svg.contains("<svg onload"), "{svg}");
    }

    #[test]
    fn rates_as_text() {
        assert_eq!(rate(0.0), "0");
        assert_eq!(rate(2.5), "2.5");
        assert_eq!(rate(1234.4), "1234");
    }
}
