//! A rule's requests per second as an inline SVG: matched and enforced,
//! on a UTC time axis with clock-time ticks, a rate axis and a legend.

use crate::fmt::{clock, date, esc, group};
use std::fmt::Write as _;

/// Most bars drawn: longer series are summed into wider buckets.
const MAX_BARS: usize = 240;
/// Nice lengths of time, ms: bucket widths and tick steps are among them.
const NICE: &[u64] = &[
    100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000,
    900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000, 86_400_000,
];
/// Most ticks on a time axis.
const MAX_TICKS: u64 = 8;

/// Drawing area, in the SVG's own units.
const W: f64 = 760.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const PLOT_H: f64 = 110.0;
const AXIS_H: f64 = 34.0;

/// The bucket width, ms, for `entries` of `unit` ms: a whole number of
/// entries, and at most [`MAX_BARS`] bars.
pub fn bucket_for(entries: u64, unit: u64) -> u64 {
    NICE.iter()
        .copied()
        .filter(|b| *b >= unit && b % unit == 0 && b / unit <= 36_000)
        .find(|b| (entries * unit).div_ceil(*b) <= MAX_BARS as u64)
        .unwrap_or(3_600_000)
}

/// The tick step, ms, for a span of `ms` (labels with tenths are wider:
/// at most six of them).
pub fn step_for(ms: u64) -> u64 {
    NICE.iter()
        .copied()
        .find(|s| ms / s <= if *s < 1000 { MAX_TICKS - 2 } else { MAX_TICKS })
        .unwrap_or(86_400_000)
}

/// A clock time of `ms` since the epoch with the precision `step` needs:
/// `17:05:09.5`, `17:05:09`, `17:05`.
fn tick_label(ms: u64, step: u64) -> String {
    let s = ms / 1000;
    if step < 1000 {
        format!("{}.{}", clock(s, true), ms % 1000 / 100)
    } else {
        clock(s, step < 60_000)
    }
}

/// A "nice" top for a rate axis at least `max`: 1, 2 or 5 times a power
/// of ten (0.01 for a request every ten minutes, 200 for 120 a second).
fn nice_top(max: f64) -> f64 {
    if max.is_nan() || max <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|t| *t >= max * (1.0 - 1e-9))
        .unwrap_or(10.0 * p)
}

/// A rate as the axis shows it: whole numbers grouped from 10 up, two
/// significant digits below 1 (`0.0083`).
fn rate(x: f64) -> String {
    if x >= 10.0 {
        return group(x.round() as u64);
    }
    if x <= 0.0 || x.is_nan() {
        return "0".into();
    }
    let decimals = if x >= 1.0 {
        1
    } else {
        (-x.log10()).ceil() as usize + 1
    };
    let s = format!("{x:.decimals$}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The chart of rule `rule`'s series, whose entries are `unit` ms long,
/// entry 0 starting at `start` (ms since the epoch, UTC).
pub fn chart(rule: usize, start: u64, unit: u64, series: &[(u32, u32)]) -> String {
    let matched: u64 = series.iter().map(|p| u64::from(p.0)).sum();
    let enforced: u64 = series.iter().map(|p| u64::from(p.1)).sum();
    if matched == 0 {
        return "<p class=empty>No request matched it: nothing to draw.</p>".into();
    }
    let unit = unit.max(1);
    let bucket = bucket_for(series.len() as u64, unit);
    let bars: Vec<(u64, u64)> = series
        .chunks((bucket / unit) as usize)
        .map(|c| {
            c.iter()
                .fold((0, 0), |(m, e), p| (m + u64::from(p.0), e + u64::from(p.1)))
        })
        .collect();
    let per_s = |n: u64| n as f64 * 1000.0 / bucket as f64;
    let (peak_at, peak) = bars
        .iter()
        .enumerate()
        .max_by_key(|(i, b)| (b.0, std::cmp::Reverse(*i)))
        .map_or((0, 0), |(i, b)| (i, b.0));
    let top = nice_top(per_s(peak));
    let span = bars.len() as u64 * bucket;
    let plot_w = W - LEFT - RIGHT;
    let x_of = |s: f64| LEFT + s / span as f64 * plot_w;
    let y_of = |r: f64| TOP + PLOT_H - r / top * PLOT_H;
    let h = TOP + PLOT_H + AXIS_H;
    let what = match bucket {
        1000 => "each bar one second".to_string(),
        b if b < 1000 => format!("each bar {b} ms, as a rate per second"),
        b => format!(
            "each bar {} averaged",
            crate::fmt::duration(b as f64 / 1000.0)
        ),
    };
    let mut o = format!(
        "<figure class=chart><svg class=chart viewBox=\"0 0 {W} {h}\" role=img \
         data-series=\"{rule}\" data-start-ms=\"{start}\" data-unit-ms=\"{unit}\" data-bucket-ms=\"{bucket}\" \
         data-matched=\"{matched}\" data-enforced=\"{enforced}\" \
         aria-label=\"requests per second matched and enforced, {what}\">"
    );
    // Rate axis: 0, half and the top, with grid lines.
    for f in [0.0, 0.5, 1.0] {
        let y = y_of(top * f);
        let _ = write!(
            o,
            "<line class=grid x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=ytick x=\"{:.1}\" y=\"{:.1}\" text-anchor=end>{}</text>",
            W - RIGHT,
            LEFT - 4.0,
            y + 3.5,
            rate(top * f)
        );
    }
    let _ = write!(
        o,
        "<text class=unit x=\"0\" y=\"0\" text-anchor=middle transform=\"translate(12 {:.1}) rotate(-90)\">req/s</text>",
        TOP + PLOT_H / 2.0
    );
    // Bars: matched wide and light, enforced narrower and dark in front.
    let bw = plot_w / bars.len() as f64;
    for (i, (m, e)) in bars.iter().enumerate() {
        let x = LEFT + i as f64 * bw;
        let t = start + i as u64 * bucket;
        let title = format!(
            "{} UTC: {} matched, {} enforced",
            tick_label(t, bucket),
            group(*m),
            group(*e)
        );
        if *m > 0 {
            let y = y_of(per_s(*m));
            let _ = write!(
                o,
                "<rect class=matched x=\"{x:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{:.2}\"><title>{title}</title></rect>",
                (bw - 0.4).max(0.6),
                TOP + PLOT_H - y
            );
        }
        if *e > 0 {
            let y = y_of(per_s(*e));
            let _ = write!(
                o,
                "<rect class=enforced x=\"{:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{:.2}\"/>",
                x + bw * 0.2,
                (bw * 0.6 - 0.2).max(0.5),
                TOP + PLOT_H - y
            );
        }
    }
    // Time axis: ticks on whole multiples of the step, in UTC.
    let step = step_for(span);
    let base = TOP + PLOT_H;
    let _ = write!(
        o,
        "<line class=axis x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{base}\" y2=\"{base}\"/>",
        W - RIGHT
    );
    let end = start + span;
    let mut t = start.div_ceil(step) * step;
    while t <= end {
        let x = x_of((t - start) as f64);
        // Labels at the ends stay inside the drawing.
        let anchor = if x > W - RIGHT - 24.0 {
            "end"
        } else if x < LEFT + 24.0 {
            "start"
        } else {
            "middle"
        };
        let _ = write!(
            o,
            "<line class=axis x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{base}\" y2=\"{:.1}\"/>\
             <text class=tick x=\"{x:.1}\" y=\"{:.1}\" text-anchor={anchor}>{}</text>",
            base + 4.0,
            base + 15.0,
            tick_label(t, step)
        );
        t += step;
    }
    let (first_day, last_day) = (date(start / 1000), date(end.saturating_sub(1) / 1000));
    let last_day = if first_day == last_day {
        String::new()
    } else {
        format!(" to {last_day}")
    };
    let _ = write!(
        o,
        "<text class=unit x=\"{LEFT}\" y=\"{:.1}\">UTC, {}{last_day}</text></svg>",
        base + 30.0,
        first_day
    );
    let _ = write!(
        o,
        "<figcaption><span class=key><i class=\"sw matched\"></i>matched</span> \
         <span class=key><i class=\"sw enforced\"></i>enforced (denied, throttled, dropped)</span> \
         <span class=note>{}: peak {} req/s at {} UTC</span></figcaption></figure>",
        esc(&what),
        rate(per_s(peak)),
        tick_label(start + peak_at as u64 * bucket, bucket)
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_ticks_from_tenths_to_a_day() {
        assert_eq!(bucket_for(2, 1000), 1000);
        assert_eq!(bucket_for(240, 1000), 1000);
        assert_eq!(bucket_for(241, 1000), 2000);
        assert_eq!(bucket_for(3_600, 1000), 15_000);
        assert_eq!(bucket_for(86_400, 1000), 600_000);
        assert_eq!(bucket_for(7, 100), 100);
        assert_eq!(bucket_for(1_200, 100), 500);
        assert_eq!(step_for(700), 200);
        assert_eq!(step_for(600), 100);
        assert_eq!(step_for(2_000), 500);
        assert_eq!(step_for(60_000), 10_000);
        assert_eq!(step_for(3_600_000), 600_000);
        assert_eq!(step_for(86_400_000), 10_800_000);
        assert_eq!(nice_top(0.4), 0.5);
        assert!((nice_top(5.0 / 600.0) - 0.01).abs() < 1e-12);
        assert_eq!(rate(5.0 / 600.0), "0.0083");
        assert_eq!(rate(0.005), "0.005");
        assert_eq!(rate(2.5), "2.5");
        assert_eq!(rate(5.0), "5");
        assert_eq!(rate(1234.4), "1,234");
        assert_eq!(nice_top(3.0), 5.0);
        assert_eq!(nice_top(120.0), 200.0);
        assert_eq!(tick_label(1_796_144_709_500, 500), "17:05:09.5");
        assert_eq!(tick_label(1_796_144_709_500, 1000), "17:05:09");
        assert_eq!(tick_label(1_796_144_709_500, 60_000), "17:05");
    }

    #[test]
    fn a_two_second_series_has_clock_ticks_and_both_kinds_of_bar() {
        let start = 1_796_144_709_000;
        let svg = chart(0, start, 1000, &[(30, 0), (60, 20)]);
        for t in ["17:05:09.0", "17:05:09.5", "17:05:10.0", "17:05:11.0"] {
            assert!(svg.contains(&format!(">{t}</text>")), "{t}: {svg}");
        }
        assert_eq!(svg.matches("<rect class=matched").count(), 2);
        assert_eq!(svg.matches("<rect class=enforced").count(), 1);
        assert!(svg.contains("data-matched=\"90\" data-enforced=\"20\""));
        assert!(svg.contains("peak 60 req/s at 17:05:10 UTC"), "{svg}");
        // Tenths: 7 entries of 100 ms, 4 requests in the second one.
        let svg = chart(
            0,
            start,
            100,
            &[(1, 0), (4, 4), (0, 0), (0, 0), (0, 0), (0, 0), (2, 0)],
        );
        assert_eq!(svg.matches("<rect class=matched").count(), 3);
        assert!(svg.contains("peak 40 req/s at 17:05:09.1 UTC"), "{svg}");
        assert!(svg.contains(">17:05:09.6</text>"), "{svg}");
    }

    #[test]
    fn a_day_is_bucketed_and_ticked_in_hours() {
        let start = 1_796_083_200_000; // 2026-12-01 00:00:00
        let day: Vec<(u32, u32)> = (0..86_400u32).map(|i| (i % 7, i % 2)).collect();
        let svg = chart(3, start, 1000, &day);
        assert!(svg.contains("data-bucket-ms=\"600000\""));
        assert_eq!(svg.matches("<rect class=matched").count(), 144);
        assert!(svg.contains(">03:00</text>") && svg.contains(">21:00</text>"));
        assert!(!svg.contains(">03:00:00</text>"));
        assert!(svg.contains("UTC, 2026-12-01<"), "one day");
        // A request every two minutes still draws bars of a readable
        // height, on an axis up to 0.01 req/s.
        let sparse: Vec<(u32, u32)> = (0..86_400u32)
            .map(|i| (u32::from(i % 120 == 0), 0))
            .collect();
        let svg = chart(0, start, 1000, &sparse);
        assert!(
            svg.contains(">0.01</text>") && svg.contains(">0.005</text>"),
            "{svg:.3000}"
        );
        assert!(svg.contains("each bar 10 min averaged: peak 0.0083 req/s at 00:00 UTC"));
        assert_eq!(svg.matches("<rect class=matched").count(), 144);
    }
}
