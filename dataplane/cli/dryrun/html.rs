//! `rctl dry-run --report out.html`: one self-contained page (no scripts,
//! no external resources) with a time series per rule and the tables.

use rctl_dataplane::dryrun::{Counts, Report};
use rctl_dataplane::topk::Hitter;
use std::fmt::Write as _;

/// HTML-escaped, with controls and bidi overrides shown as `\u{…}` escapes
/// (a bidi override in a User-Agent would reorder the page's text).
fn esc(s: &str) -> String {
    rctl_compiler::diag::escape(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn counts(c: &Counts) -> String {
    format!(
        "{} / {} / {} / {} / {}",
        c.allow, c.deny, c.throttle, c.drop, c.log
    )
}

fn hitters(h: &[Hitter]) -> String {
    if h.is_empty() {
        return "–".into();
    }
    h.iter()
        .map(|x| format!("{} <span class=n>{}</span>", esc(&x.key), x.count))
        .collect::<Vec<_>>()
        .join("<br>")
}

/// An SVG bar chart of requests per second, matched (blue) and enforced
/// (orange), averaged into at most 600 bars.
fn chart(series: &[(u32, u32)]) -> String {
    if series.iter().all(|p| p.0 == 0) {
        return "<p class=empty>no matches</p>".into();
    }
    let (w, h) = (600.0f64, 80.0f64);
    let per = series.len().div_ceil(600).max(1);
    let bars: Vec<(f64, f64)> = series
        .chunks(per)
        .map(|c| {
            let (m, e) = c.iter().fold((0u64, 0u64), |(m, e), p| {
                (m + u64::from(p.0), e + u64::from(p.1))
            });
            (m as f64 / per as f64, e as f64 / per as f64)
        })
        .collect();
    let max = bars.iter().map(|b| b.0).fold(1.0f64, f64::max);
    let bw = w / bars.len() as f64;
    let mut svg = format!("<svg class=chart viewBox=\"0 0 {w} {}\" width=\"{w}\" height=\"{}\" role=img aria-label=\"requests per second\">", h + 14.0, h + 14.0);
    for (i, (m, e)) in bars.iter().enumerate() {
        let x = i as f64 * bw;
        let (hm, he) = (m / max * h, e / max * h);
        let _ = write!(
            svg,
            "<rect class=matched x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{hm:.1}\"/>",
            h - hm,
            bw.max(1.0)
        );
        if he > 0.0 {
            let _ = write!(svg, "<rect class=enforced x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{he:.1}\"/>", h - he, bw.max(1.0));
        }
    }
    let secs = if per > 1 {
        format!(", {per} s a bar")
    } else {
        String::new()
    };
    let _ = write!(
        svg,
        "<text x=\"{w}\" y=\"{}\" text-anchor=end>peak {max:.0} req/s over {} s{secs}</text></svg>",
        h + 12.0,
        series.len()
    );
    svg
}

/// Renders the report.
pub fn render(r: &Report) -> String {
    let t = &r.totals;
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>rctl dry-run report</title><style>\
body{{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;margin:1em 0}}\
td,th{{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}}th{{background:#f3f3f3}}\
.n{{color:#666}}.chart rect.matched{{fill:#1f5fbf}}.chart rect.enforced{{fill:#e8a33d}}\
.chart text{{font-size:10px;fill:#666}}.empty{{color:#888}}.legend span{{display:inline-block;width:1em;height:.6em;margin:0 .3em}}\
</style></head><body><h1>rctl dry-run report</h1>"
    );
    let _ = write!(
        o,
        "<table id=totals><tr><th>inputs</th><td>{}</td></tr><tr><th>packets</th><td>{}</td></tr><tr><th>bytes</th><td>{}</td></tr>\
<tr><th>TCP flows</th><td>{} ({} TLS, not inspected)</td></tr><tr><th>HTTP requests</th><td>{}</td></tr>\
<tr><th>not decoded</th><td>{} fragments, {} truncated, {} not IP, {} unsupported link, {} malformed</td></tr>\
<tr><th>unparsable stream bytes</th><td>{}</td></tr>\
<tr><th>stream data held</th><td>at most {} at once (bound {}); dropped {} times to stay within it ({} bytes); {} idle flows evicted</td></tr></table>",
        r.inputs.len(),
        t.packets,
        t.bytes,
        t.flows,
        t.tls_flows,
        t.requests,
        t.fragments,
        t.truncated,
        t.not_ip,
        t.unsupported_link,
        t.malformed,
        t.unparsable_bytes,
        super::mib(t.buffered_peak_bytes),
        super::mib(t.max_buffered_bytes),
        t.shed_flows,
        t.shed_bytes,
        t.evicted_flows
    );
    for i in r.inputs.iter().filter(|i| i.error.is_some()) {
        let _ = write!(
            o,
            "<p class=error>{}: stopped after {} packets: {}</p>",
            esc(&i.path),
            i.packets,
            esc(i.error.as_deref().unwrap_or(""))
        );
    }
    let _ = write!(o, "<h2>Rules</h2><p class=legend>Requests per second: <span style=\"background:#1f5fbf\"></span>matched <span style=\"background:#e8a33d\"></span>enforced. Counts are allow / deny / throttle / drop / log.</p>");
    let _ = write!(o, "<table id=rules><tr><th>rule</th><th>matches</th><th>requests</th><th>packets</th><th>over time</th><th>top addresses</th><th>top user agents</th><th>top paths</th></tr>");
    for (i, rule) in r.rules.iter().enumerate() {
        let series = r.series.get(i).map(Vec::as_slice).unwrap_or(&[]);
        let _ = write!(
            o,
            "<tr class=rule><td><b>{}</b><br>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&rule.name),
            esc(&rule.action),
            if rule.shadow { " (shadow)" } else { "" },
            rule.matches,
            counts(&rule.requests),
            counts(&rule.packets),
            chart(series),
            hitters(&rule.top_ips),
            hitters(&rule.top_user_agents),
            hitters(&rule.top_paths)
        );
    }
    let _ = write!(o, "</table>");
    let u = &r.unmatched;
    let _ = write!(
        o,
        "<h2>No rule matched {} requests</h2><table id=unmatched><tr><th>top addresses</th><th>top user agents</th><th>top paths</th></tr><tr><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        u.requests,
        hitters(&u.top_ips),
        hitters(&u.top_user_agents),
        hitters(&u.top_paths)
    );
    if let Some(changes) = &r.changes {
        let _ = write!(o, "<h2>Changes against the old ruleset</h2><table id=changes><tr><th>from</th><th>to</th><th>requests</th><th>packets</th><th>top addresses</th><th>top user agents</th><th>top paths</th></tr>");
        for c in changes {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.from),
                esc(&c.to),
                c.requests,
                c.packets,
                hitters(&c.top_ips),
                hitters(&c.top_user_agents),
                hitters(&c.top_paths)
            );
        }
        let _ = write!(o, "</table>");
    }
    o.push_str("</body></html>\n");
    o
}
