//! The dry run's HTML report (`rctl dry-run --report FILE.html`): one
//! self-contained page that a responder reads at a glance. It leads with
//! who the ruleset would stop, names the ruleset, the inputs and the
//! time they cover, then shows each rule's labelled counts, keys, top
//! talkers and a requests-per-second chart on a UTC time axis, and with
//! `--against` the change as a picture.
//!
//! No scripts, no external resources; a light and a dark scheme; it
//! prints on A4. Every figure is a `<data>` element whose `data-f` is the
//! JSON pointer of the same figure in `rctl dry-run --format json`, and
//! whose `data-l` is the label or unit shown beside it.

mod against;
mod chart;
mod fmt;

use fmt::{duration, esc, fig, group, noun, stamp};
use rctl_dataplane::dryrun::{Affect, Counts, Report, RuleReport};
use rctl_dataplane::topk::Hitter;
use std::fmt::Write as _;

pub use chart::{bucket_for, step_for};
pub use fmt::group as thousands;

type Out = String;

/// How the report was made, beyond what it holds.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The logs held one line in N (`--sampled N`): counts are scaled by N.
    pub sampled: Option<u64>,
}

const STYLE: &str = include_str!("style.css");

/// A list of top talkers titled `title`, each counted in `unit`, with
/// figures pointing into `base` (a JSON array of hitters).
fn hitters(title: &str, unit: &str, base: &str, h: &[Hitter]) -> String {
    let mut o = format!(
        "<div class=top><h5>{} <small>in {}</small></h5>",
        esc(title),
        esc(unit)
    );
    if h.is_empty() {
        o.push_str("<p class=empty>none</p></div>");
        return o;
    }
    o.push_str("<ol>");
    for (i, x) in h.iter().enumerate() {
        let err = if x.error > 0 {
            format!(
                " <span class=err>±{}</span>",
                fig(&format!("{base}/{i}/error"), x.error, "±")
            )
        } else {
            String::new()
        };
        let _ = write!(
            o,
            "<li><span class=k title=\"{k}\">{k}</span> <span class=c>{n} {u}{err}</span></li>",
            k = esc(&x.key),
            n = fig(&format!("{base}/{i}/count"), x.count, unit_short(unit)),
            u = unit_short(unit)
        );
    }
    o + "</ol></div>"
}

fn unit_short(unit: &str) -> &str {
    match unit {
        "requests" => "req",
        "packets" => "pkt",
        u => u,
    }
}

/// A count of requests, marked, with its noun.
fn requests(ptr: &str, n: u64) -> String {
    let w = noun(n, "request", "requests");
    format!("<span class=fig>{} {w}</span>", fig(ptr, n, w))
}

/// A count of clients, marked, with its noun.
fn clients(ptr: &str, n: u64) -> String {
    let w = noun(n, "client", "clients");
    format!("<span class=fig>{} {w}</span>", fig(ptr, n, w))
}

/// One affected figure pair: requests and clients.
fn affect(ptr: &str, a: &Affect, verb: &str) -> String {
    format!(
        "{verb} {} from {}",
        requests(&format!("{ptr}/requests"), a.requests),
        clients(&format!("{ptr}/clients"), a.clients)
    )
}

/// The head: who would be stopped, which of them look legitimate, and
/// what ran on what.
fn head(o: &mut Out, r: &Report, opts: &Options) {
    let a = &r.affected;
    let t = &r.totals;
    let _ = write!(
        o,
        "<header><h1>What <code>{}</code> would do</h1><p class=lead id=verdict>",
        esc(if r.ruleset.name.is_empty() {
            "the ruleset"
        } else {
            &r.ruleset.name
        })
    );
    let _ = write!(
        o,
        "Of {} in the inputs, it would ",
        requests("/totals/captured_requests", t.captured_requests)
    );
    let mut parts = Vec::new();
    for (k, verb, x) in [
        ("deny", "deny", &a.deny),
        ("throttle", "throttle", &a.throttle),
        ("drop", "drop", &a.drop),
    ] {
        parts.push(affect(&format!("/affected/{k}"), x, verb));
    }
    let _ = write!(o, "{}.", parts.join(", "));
    let at_least = if a.exact { "" } else { " at least" };
    let unmeasured = !a.legit_unmeasured.is_empty();
    let _ = write!(
        o,
        " In all it stops {} from{at_least} {}; \
         <strong class=legit>{}{} from {} of those look legitimate</strong> \
         (a browser-like User-Agent with Accept-Language, or an address in an <code>allow</code> rule's blocks).",
        requests("/affected/total/requests", a.total.requests),
        clients("/affected/total/clients", a.total.clients),
        if unmeasured { "at least " } else { "" },
        requests("/affected/total/legit_requests", a.total.legit_requests),
        clients("/affected/total/legit_clients", a.total.legit_clients),
    );
    if unmeasured {
        let names: Vec<String> = a
            .legit_unmeasured
            .iter()
            .map(|n| format!("<code>{}</code>", esc(n)))
            .collect();
        let _ = write!(
            o,
            " <span id=legit-unmeasured>{} {} no User-Agent or no Accept-Language: there only the <code>allow</code> blocks tell, so these are lower bounds.</span>",
            names.join(", "),
            if names.len() == 1 { "logs" } else { "log" }
        );
    }
    o.push_str("</p>");
    // What ran on what, and when.
    let hash = &r.ruleset.hash;
    let _ = write!(
        o,
        "<dl class=meta><dt>Ruleset</dt><dd><code>{}</code>, {} rules, hash <code title=\"{}\">{}</code></dd>",
        esc(&r.ruleset.name),
        group(r.ruleset.rules as u64),
        esc(hash),
        esc(&hash[..hash.len().min(16)])
    );
    if let Some(old) = &r.against {
        let _ = write!(
            o,
            "<dt>Compared with</dt><dd><code>{}</code>, {} rules, hash <code title=\"{}\">{}</code></dd>",
            esc(&old.name),
            group(old.rules as u64),
            esc(&old.hash),
            esc(&old.hash[..old.hash.len().min(16)])
        );
    }
    let kinds: Vec<String> = {
        let caps = r.inputs.iter().filter(|i| i.log.is_none()).count();
        let mut k = Vec::new();
        if caps > 0 {
            k.push(format!("packet capture ({} files)", group(caps as u64)));
        }
        let mut formats: Vec<&str> = r
            .inputs
            .iter()
            .filter_map(|i| i.log.as_ref().map(|l| l.format.as_str()))
            .collect();
        formats.dedup();
        if !formats.is_empty() {
            k.push(format!("access log ({})", formats.join(", ")));
        }
        match opts.sampled {
            Some(n) => k.push(format!(
                "sampled: one line in {}, counts scaled by {0}; throttles not simulated (a sample's gaps between a key's requests are not the traffic's: judge them on the full log)",
                group(n)
            )),
            None => k.push("every request counted, nothing sampled".into()),
        }
        k
    };
    let _ = write!(o, "<dt>Input type</dt><dd>{}</dd>", esc(&kinds.join("; ")));
    o.push_str("<dt>Inputs</dt><dd><ul class=inputs>");
    for (i, input) in r.inputs.iter().enumerate() {
        let what = match &input.log {
            Some(l) => log_input(i, l),
            None => format!(
                "capture, <span class=fig>{} packets</span>",
                fig(&format!("/inputs/{i}/packets"), input.packets, "packets")
            ),
        };
        let err = input.error.as_ref().map_or(String::new(), |e| {
            format!(" <span class=error>stopped early: {}</span>", esc(e))
        });
        let _ = write!(o, "<li><code>{}</code>: {what}{err}</li>", esc(&input.path));
    }
    o.push_str("</ul></dd>");
    if let (Some(f), Some(l)) = (t.first_ns, t.last_ns) {
        let _ = write!(
            o,
            "<dt>Time</dt><dd id=timerange>{} to {} ({})</dd>",
            stamp(f),
            stamp(l),
            duration(l.saturating_sub(f) as f64 / 1e9)
        );
    }
    // Packets and flows are a capture's: a run over logs alone has none.
    if r.logs_only() {
        let _ = write!(
            o,
            "<dt>Traffic</dt><dd><span class=fig>{} requests</span> reached the HTTP rules; \
             the packet rules would have stopped the other <span class=fig>{} requests</span> \
             before them</dd></dl></header>",
            fig("/totals/requests", t.requests, "requests"),
            fig("/totals/stopped_requests", t.stopped_requests, "requests"),
        );
    } else {
        let _ = write!(
            o,
            "<dt>Traffic</dt><dd><span class=fig>{} packets</span>, <span class=fig>{} TCP flows</span>, \
             <span class=fig>{} requests</span> reached the HTTP rules, <span class=fig>{} requests</span> \
             were in packets the packet rules stopped</dd></dl></header>",
            fig("/totals/packets", t.packets, "packets"),
            fig("/totals/flows", t.flows, "TCP flows"),
            fig("/totals/requests", t.requests, "requests"),
            fig("/totals/stopped_requests", t.stopped_requests, "requests"),
        );
    }
}

/// A log input's line in the list: its lines, judged and bad, the first
/// bad lines, and whether limiters ran on second timestamps.
fn log_input(i: usize, l: &rctl_dataplane::dryrun::LogInput) -> String {
    let mut s = format!(
        "{} log, <span class=fig>{} lines</span>, <span class=fig>{} judged</span>",
        esc(&l.format),
        fig(&format!("/inputs/{i}/log/lines"), l.lines, "lines"),
        fig(&format!("/inputs/{i}/log/judged"), l.judged, "judged")
    );
    if l.bad_lines > 0 {
        let _ = write!(
            s,
            ", <span class=fig>{} bad</span>",
            fig(
                &format!("/inputs/{i}/log/bad_lines"),
                l.bad_lines,
                "bad lines"
            )
        );
    }
    if l.cut_lines > 0 {
        let _ = write!(
            s,
            ", <span class=fig>{} with a captured header as long as its capture's len</span> (it may have been cut: rules reading it were judged only as far as its start tells)",
            fig(
                &format!("/inputs/{i}/log/cut_lines"),
                l.cut_lines,
                "lines with a value that may be cut"
            )
        );
    }
    if l.late_lines > 0 {
        let _ = write!(
            s,
            ", <span class=fig>{} judged after a later one</span> (by up to {:.1} s: the server writes a request's line when it ends; <code>--reorder-window</code> judges them in time order)",
            fig(
                &format!("/inputs/{i}/log/late_lines"),
                l.late_lines,
                "lines judged after a later one"
            ),
            l.max_late_ns as f64 / 1e9
        );
    }
    if l.unnamed_captures > 0 {
        let _ = write!(
            s,
            ", <span class=fig>{} with captured request headers whose names were not given</span> (not read: name them with <code>--haproxy-config</code> or <code>--capture-request-header</code>)",
            fig(
                &format!("/inputs/{i}/log/unnamed_captures"),
                l.unnamed_captures,
                "lines with unnamed captured headers"
            )
        );
    }
    if l.resolution_ns >= 1_000_000_000 {
        s.push_str("; times to the second: limiters ran on 1 s timestamps, lines within a second in file order");
    }
    if !l.bad.is_empty() {
        s.push_str("<ul class=bad>");
        for b in l.bad.iter().take(3) {
            let _ = write!(
                s,
                "<li>line {} (byte {}): {}: <code>{}</code></li>",
                b.line,
                b.offset,
                esc(&b.reason),
                esc(&b.excerpt)
            );
        }
        s.push_str("</ul>");
    }
    s
}

/// Labelled verdict counts with bars on the page's one scale (`scale`:
/// the most any rule matched).
fn verdicts(i: usize, rule: &RuleReport, scale: u64) -> String {
    let p = |k: &str| format!("/rules/{i}/{k}");
    let c = &rule.requests;
    let rows = [
        ("matched", p("matches"), rule.matches),
        ("passed", p("passed"), rule.passed),
        ("allowed", p("requests/allow"), c.allow),
        ("denied", p("requests/deny"), c.deny),
        ("throttled", p("requests/throttle"), c.throttle),
        ("dropped", p("requests/drop"), c.drop),
        ("logged", p("requests/log"), c.log),
    ];
    let mut o = String::from("<table class=verdicts><caption>Requests</caption>");
    for (label, ptr, n) in rows {
        let w = n as f64 / scale.max(1) as f64 * 100.0;
        let _ = write!(
            o,
            "<tr class=\"v {label}\"><th scope=row>{label}</th><td class=n>{}</td>\
             <td class=barcell><i class=bar style=\"width:{w:.2}%\"></i></td></tr>",
            fig(&ptr, n, label)
        );
    }
    o.push_str("</table>");
    o
}

fn counts_line(ptr: &str, c: &Counts, unit: &str) -> String {
    let parts: Vec<String> = [
        ("allowed", "allow", c.allow),
        ("denied", "deny", c.deny),
        ("throttled", "throttle", c.throttle),
        ("dropped", "drop", c.drop),
        ("logged", "log", c.log),
    ]
    .iter()
    .filter(|x| x.2 > 0)
    .map(|(label, k, n)| {
        format!(
            "<span class=fig>{label} {} {unit}</span>",
            fig(&format!("{ptr}/{k}"), *n, label)
        )
    })
    .collect();
    parts.join(", ")
}

/// One rule's section.
fn rule_section(o: &mut Out, r: &Report, i: usize, scale: u64) {
    let rule = &r.rules[i];
    let shadow = if rule.shadow {
        " <span class=badge>shadow</span>"
    } else {
        ""
    };
    let by = rule
        .throttle
        .as_ref()
        .map_or(String::new(), |t| format!(" by {}", esc(&t.by)));
    let _ = write!(
        o,
        "<section class=rule id=\"rule-{i}\"><h3>{} <span class=\"badge {}\">{}{by}</span>{shadow}</h3><div class=rulegrid><div>",
        esc(&rule.name),
        esc(&rule.action),
        esc(&rule.action),
    );
    o.push_str(&verdicts(i, rule, scale));
    if rule.shadow && rule.would != Counts::default() {
        let _ = write!(
            o,
            "<p>In shadow mode; enforced, it would have: {}.</p>",
            counts_line(&format!("/rules/{i}/would"), &rule.would, "requests")
        );
    }
    if rule.packets != Counts::default() {
        let _ = write!(
            o,
            "<p>Packet plane: {}.</p>",
            counts_line(&format!("/rules/{i}/packets"), &rule.packets, "packets")
        );
    }
    if rule.stopped_packets > 0 {
        let _ = write!(
            o,
            "<p>It stops <span class=fig>{} packets</span> carrying <span class=fig>{} requests</span>, which never reach the HTTP rules.</p>",
            fig(&format!("/rules/{i}/stopped_packets"), rule.stopped_packets, "packets"),
            fig(&format!("/rules/{i}/stopped_requests"), rule.stopped_requests, "requests"),
        );
    }
    if rule.unknown > 0 {
        let why = if rule.missing_fields.is_empty() {
            "a captured header that may have been cut".to_string()
        } else {
            format!(
                "{}, which the input lacks",
                esc(&rule.missing_fields.join(", "))
            )
        };
        let _ =
            write!(
            o,
            "<p class=warn>Left <span class=fig>{} requests unknown</span>: it reads {why}.</p>",
            fig(&format!("/rules/{i}/unknown"), rule.unknown, "requests unknown"),
        );
    }
    if let (Some(f), Some(l)) = (rule.first_seen_ns, rule.last_seen_ns) {
        let _ = write!(o, "<p class=note>Seen {} to {}.</p>", stamp(f), stamp(l));
    }
    o.push_str("</div><div>");
    // Tenths of a second for a short capture, seconds otherwise.
    let first = r.totals.first_ns.unwrap_or(0);
    let (unit, series) = match &r.series_100ms {
        Some(f) => (100, f.get(i)),
        None => (1000, r.series.get(i)),
    };
    let start = first / 1_000_000 / unit * unit;
    let series = series.map(Vec::as_slice).unwrap_or(&[]);
    o.push_str(&chart::chart(i, start, unit, series));
    o.push_str("</div></div>");
    if let Some(t) = &rule.throttle {
        let at_least = if t.exact { "" } else { "at least " };
        let _ = write!(
            o,
            "<h4>Keys (by {})</h4><p>It counted {at_least}<span class=fig>{} keys</span> and limited {at_least}<span class=fig>{} keys</span>.</p>",
            esc(&t.by),
            fig(&format!("/rules/{i}/throttle/keys"), t.keys, "keys"),
            fig(&format!("/rules/{i}/throttle/limited_keys"), t.limited_keys, "keys"),
        );
        if !t.top.is_empty() {
            o.push_str("<div class=scroll><table class=keys><thead><tr><th>key</th><th>requests</th><th>limited</th><th>passed</th></tr></thead><tbody>");
            for (k, x) in t.top.iter().enumerate() {
                let p = |f: &str| format!("/rules/{i}/throttle/top/{k}/{f}");
                let err = if x.error > 0 {
                    format!(
                        " <span class=err>±{}</span>",
                        fig(&p("error"), x.error, "±")
                    )
                } else {
                    String::new()
                };
                let _ = write!(
                    o,
                    "<tr><td class=k>{}</td><td><span class=fig>{} req{err}</span></td>\
                     <td><span class=fig>{} limited</span></td><td><span class=fig>{} passed</span></td></tr>",
                    esc(&x.key),
                    fig(&p("requests"), x.requests, "req"),
                    fig(&p("limited"), x.limited, "limited"),
                    fig(&p("passed"), x.passed, "passed"),
                );
            }
            o.push_str("</tbody></table></div>");
        }
    }
    if rule.matches > 0 || rule.stopped_requests > 0 {
        o.push_str("<div class=tops>");
        let base = |k: &str| format!("/rules/{i}/{k}");
        if rule.matches > 0 {
            o.push_str(&hitters(
                "addresses",
                "requests",
                &base("top_ips"),
                &rule.top_ips,
            ));
            o.push_str(&hitters(
                "networks (/24, /48)",
                "requests",
                &base("top_prefixes"),
                &rule.top_prefixes,
            ));
            o.push_str(&hitters(
                "User-Agents",
                "requests",
                &base("top_user_agents"),
                &rule.top_user_agents,
            ));
            o.push_str(&hitters(
                "paths",
                "requests",
                &base("top_paths"),
                &rule.top_paths,
            ));
        }
        if rule.stopped_requests > 0 {
            o.push_str(&hitters(
                "addresses in stopped packets",
                "requests",
                &base("stopped_top_ips"),
                &rule.stopped_top_ips,
            ));
            o.push_str(&hitters(
                "User-Agents in stopped packets",
                "requests",
                &base("stopped_top_user_agents"),
                &rule.stopped_top_user_agents,
            ));
        }
        o.push_str("</div>");
    }
    o.push_str("</section>");
}

/// Renders the page.
pub fn render(r: &Report, opts: &Options) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width, initial-scale=1\">\
         <meta name=color-scheme content=\"light dark\">\
         <title>rctl dry run: {}</title><style>{STYLE}</style></head><body><main>",
        esc(&r.ruleset.name)
    );
    head(&mut o, r, opts);
    let scale = r.rules.iter().map(|x| x.matches).max().unwrap_or(0);
    let _ = write!(
        o,
        "<h2>Rules, in evaluation order</h2><p class=note>Counts are requests; bars share one scale \
         (the most any rule matched, {}). Top talkers are counted over all the traffic, \
         in requests; ± is a count's error bound.</p>",
        group(scale)
    );
    for i in 0..r.rules.len() {
        rule_section(&mut o, r, i, scale);
    }
    against::section(&mut o, r);
    let u = &r.unmatched;
    let _ = write!(
        o,
        "<section id=unmatched><h2>No rule matched <span class=fig>{} requests</span></h2><div class=tops>{}{}{}</div></section>",
        fig("/unmatched/requests", u.requests, "requests"),
        hitters("addresses", "requests", "/unmatched/top_ips", &u.top_ips),
        hitters("User-Agents", "requests", "/unmatched/top_user_agents", &u.top_user_agents),
        hitters("paths", "requests", "/unmatched/top_paths", &u.top_paths),
    );
    totals(&mut o, r);
    o.push_str("</main></body></html>\n");
    o
}

/// The input's details: what was decoded, and the memory bound.
fn totals(o: &mut Out, r: &Report) {
    let t = &r.totals;
    let row = |label: &str, ptr: &str, n: u64| {
        format!(
            "<tr><th scope=row>{label}</th><td>{}</td></tr>",
            fig(&format!("/totals/{ptr}"), n, label)
        )
    };
    let _ = write!(
        o,
        "<section id=details><h2>Input details</h2><div class=scroll><table id=totals>{}{}{}{}{}{}{}{}{}{}\
         <tr><th scope=row>stream data held</th><td>at most <span class=fig>{} bytes</span> at once \
         (bound <span class=fig>{} bytes</span>); dropped <span class=fig>{} times</span> to stay within it \
         (<span class=fig>{} bytes</span>)</td></tr>{}{}</table></div></section>",
        row("bytes on the wire", "bytes", t.bytes),
        row("TLS flows (not inspected)", "tls_flows", t.tls_flows),
        row("IP fragments", "fragments", t.fragments),
        row("truncated frames", "truncated", t.truncated),
        row("frames not IP", "not_ip", t.not_ip),
        row("frames of an unsupported link", "unsupported_link", t.unsupported_link),
        row("malformed frames", "malformed", t.malformed),
        row("unparsable stream bytes", "unparsable_bytes", t.unparsable_bytes),
        row("parser resyncs", "resyncs", t.resyncs),
        row("retransmitted bytes", "retransmitted_bytes", t.retransmitted_bytes),
        fig("/totals/buffered_peak_bytes", t.buffered_peak_bytes, "bytes"),
        fig("/totals/max_buffered_bytes", t.max_buffered_bytes, "bytes"),
        fig("/totals/shed_flows", t.shed_flows, "times"),
        fig("/totals/shed_bytes", t.shed_bytes, "bytes"),
        row("idle flows evicted", "evicted_flows", t.evicted_flows),
        row("requests with an unknown verdict", "unknown_requests", t.unknown_requests),
    );
}
