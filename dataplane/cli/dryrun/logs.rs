//! `rctl dry-run --log`: logs as the dry run's input (rctl-logs), the
//! flags, and what the report says about logs (lines judged, bad lines,
//! rules not judged, time resolution, sampling).

pub use crate::log_input::LogInputArgs;
use anyhow::{bail, Result};
use clap::Args;
use rctl_dataplane::dryrun::{DryRun, Report};
use rctl_logs::run::{Options, Summary};
use std::fmt::Write as _;

/// The flags of a dry run on logs: the reading flags every command with
/// `--log` takes, and the dry run's own.
#[derive(Args, Debug, Clone, Default)]
pub struct LogArgs {
    #[command(flatten)]
    pub input: LogInputArgs,
    /// The log holds one line in N: counts are scaled by N, and throttles
    /// are not run (their verdicts need every request).
    #[arg(long, value_name = "N")]
    pub sampled: Option<u64>,
    /// List the fields each log format carries, and exit.
    #[arg(long)]
    pub explain_input: bool,
    /// Follow the one --log (a file, through its rotations, or `-`) as
    /// it grows: a screen on stderr every --every, the report at SIGINT
    /// (or at the end of stdin).
    #[arg(long)]
    pub follow: bool,
    /// With --follow: seconds between screens.
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub every: u64,
}

impl LogArgs {
    /// [`LogInputArgs::tap_agent`], refused with `--follow` and
    /// `--sampled`: a tap is every request of a fixed time.
    pub fn tap_agent(&mut self) -> Result<Option<crate::tap::Spool>> {
        if self.input.agent.is_some() && self.follow {
            bail!("--agent reads every request of the next --for DURATION, --follow a log as it grows: use one (to watch the agent live, try `rctl top`)");
        }
        if self.input.agent.is_some() && self.sampled.is_some() {
            bail!(
                "--agent reads every request the agent decides, not a sample: leave --sampled out"
            );
        }
        self.input.tap_agent()
    }

    /// The reading options these flags make.
    pub fn options(&self) -> Result<Options> {
        if let Some(0) = self.sampled {
            bail!("--sampled N: N is at least 1 (one line kept in N)");
        }
        let mut o = self.input.options()?;
        o.sampled = self.sampled.filter(|&n| n > 1);
        Ok(o)
    }
}

/// `rctl dry-run --explain-input`: what each format carries.
pub fn explain_input(args: &LogArgs) -> Result<String> {
    let opts = args.options()?;
    let mut names: Vec<String> = rctl_logs::detect::NAMES[..rctl_logs::detect::NAMES.len() - 1]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(f) = &args.input.log_format {
        names = vec![f.clone()];
    }
    let mut o = String::new();
    if args
        .input
        .log_format
        .as_deref()
        .is_none_or(|f| f == "webrequest-parquet")
    {
        let _ = writeln!(
            o,
            "webrequest-parquet (read from .parquet files, and folders of them partitioned as webrequest is):\n  carries: the columns the table has of ts or dt, ip, http_method, uri_host (and header(\"host\")), uri_path, uri_query, and the headers user_agent, referer, accept_language, x_analytics, accept, range\n  reads:   only the columns the ruleset (and an --against ruleset) reads, and the time, ip, uri_path, user_agent and accept_language the report counts by\n  time:    ts at its unit, or dt at 1 ms\n  lacks:   port, dst_ip, every other header, and any of those columns the table does not have; a rule reading what it lacks is not judged on it"
        );
        if args.input.log_format.is_some() {
            return Ok(o);
        }
    }
    for n in names {
        let f = rctl_logs::detect::by_name(&n, &opts.spec).map_err(anyhow::Error::msg)?;
        let k = &f.known;
        let yes = |b: bool, s: &str| if b { Some(s.to_string()) } else { None };
        let mut has: Vec<String> = [
            Some("ip".to_string()),
            yes(k.method, "method"),
            yes(k.host, "host"),
            yes(k.path, "path"),
            yes(k.query, "query, query(…)"),
            yes(k.url, "url"),
            yes(k.dst_ip, "dst_ip"),
            yes(k.port, "port"),
        ]
        .into_iter()
        .flatten()
        .collect();
        has.extend(f.header_names.iter().map(|h| format!("header({h:?})")));
        let res = if f.resolution_ns >= 1_000_000_000 {
            "1 s (limiters run on second timestamps, lines within a second in file order)"
        } else {
            "1 ms or finer"
        };
        let _ = writeln!(
            o,
            "{}:\n  carries: {}\n  time:    {res}",
            f.name,
            has.join(", ")
        );
        let mut lacks = Vec::new();
        if !k.host {
            lacks.push("host");
        }
        if !k.port {
            lacks.push("port");
        }
        if !k.dst_ip {
            lacks.push("dst_ip");
        }
        let _ = writeln!(
            o,
            "  lacks:   {}every other header; a rule reading what it lacks is not judged on it",
            lacks.iter().map(|l| format!("{l}, ")).collect::<String>()
        );
    }
    Ok(o)
}

/// Replays the logs (or follows one); the summary, and whether the run
/// must fail (too many bad lines, a read error, an input with no judged
/// line).
pub fn replay(run: &mut DryRun, args: &LogArgs) -> Result<(Summary, bool)> {
    let opts = args.options()?;
    let summary = if args.follow {
        super::follow::run(run, args, &opts)?
    } else {
        rctl_logs::replay(run, &args.input.log, &opts).map_err(anyhow::Error::msg)?
    };
    let failed = args.input.failed(&summary);
    Ok((summary, failed))
}

/// Scales a sampled report's counts by `n`.
pub fn scale(r: &mut Report, n: u64) {
    let t = &mut r.totals;
    for c in [
        &mut t.requests,
        &mut t.captured_requests,
        &mut t.stopped_requests,
        &mut t.unknown_requests,
    ] {
        *c *= n;
    }
    let counts = |c: &mut rctl_dataplane::dryrun::Counts| {
        for x in [
            &mut c.allow,
            &mut c.deny,
            &mut c.throttle,
            &mut c.drop,
            &mut c.log,
        ] {
            *x *= n;
        }
    };
    let hitters = |h: &mut Vec<rctl_dataplane::topk::Hitter>| {
        for x in h {
            x.count *= n;
            x.error *= n;
        }
    };
    for rule in &mut r.rules {
        rule.matches *= n;
        rule.unknown *= n;
        rule.stopped_requests *= n;
        counts(&mut rule.requests);
        counts(&mut rule.would);
        hitters(&mut rule.top_ips);
        hitters(&mut rule.top_user_agents);
        hitters(&mut rule.top_paths);
        hitters(&mut rule.stopped_top_ips);
    }
    r.unmatched.requests *= n;
    hitters(&mut r.unmatched.top_ips);
    hitters(&mut r.unmatched.top_user_agents);
    hitters(&mut r.unmatched.top_paths);
    // Distinct clients and keys cannot be scaled: a sample shows at least
    // those, so they are marked as lower bounds.
    let a = &mut r.affected;
    for x in [&mut a.deny, &mut a.throttle, &mut a.drop, &mut a.total] {
        x.requests *= n;
        x.legit_requests *= n;
    }
    a.exact = false;
    for rule in &mut r.rules {
        rule.passed *= n;
        hitters(&mut rule.top_prefixes);
        hitters(&mut rule.stopped_top_user_agents);
        if let Some(t) = &mut rule.throttle {
            t.exact = false;
            for k in &mut t.top {
                k.requests *= n;
                k.limited *= n;
                k.passed *= n;
                k.error *= n;
            }
        }
    }
    for c in r.changes.iter_mut().flatten() {
        c.requests *= n;
        c.packets *= n;
        hitters(&mut c.top_ips);
        hitters(&mut c.request_top_ips);
        hitters(&mut c.packet_top_ips);
        hitters(&mut c.top_user_agents);
        hitters(&mut c.top_paths);
    }
    let n32 = u32::try_from(n).unwrap_or(u32::MAX);
    let series = r
        .series
        .iter_mut()
        .chain(r.series_100ms.iter_mut().flatten());
    for points in series {
        for (m, e) in points {
            *m = m.saturating_mul(n32);
            *e = e.saturating_mul(n32);
        }
    }
}

/// The chance that a client sending `requests` left no line in a
/// 1-in-`n` sample.
pub fn missed(requests: f64, n: u64) -> f64 {
    (-requests / n as f64).exp()
}

/// What the text report says about logs: inputs, rules not judged,
/// time resolution, sampling, lines out of time order (`reorder`: the
/// `--reorder-window` in seconds). `r` is the (scaled) report.
pub fn text(r: &Report, s: &Summary, sampled: Option<u64>, reorder: Option<u64>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "logs:");
    for (name, l) in &s.inputs {
        let _ = writeln!(
            o,
            "  {name} ({}): {} of {} lines judged, {} bad",
            l.format, l.judged, l.lines, l.bad_lines
        );
        for b in &l.bad {
            let _ = writeln!(
                o,
                "      {name}:{} (byte {}): {}: {}",
                b.line, b.offset, b.reason, b.excerpt
            );
        }
        if !l.missing_fields.is_empty() {
            let _ = writeln!(
                o,
                "      lacks what the rules read: {}",
                l.missing_fields.join(", ")
            );
        }
        if l.cut_lines > 0 {
            let _ = writeln!(
                o,
                "      {} lines have a captured header as long as its capture's len: it may have been cut, and rules reading it were judged only as far as its start tells",
                l.cut_lines
            );
        }
        if l.late_lines > 0 {
            let _ = writeln!(
                o,
                "      {} lines came after a later one (by up to {:.1} s): the server writes a request's line when it ends, with the time it began, and throttles judged them in file order{}",
                l.late_lines,
                l.max_late_ns as f64 / 1e9,
                match reorder {
                    Some(_) => " (these were later than --reorder-window, or went out early at its memory bound)".to_string(),
                    None => format!(
                        "; --reorder-window {}s judges them in time order",
                        l.max_late_ns.div_ceil(1_000_000_000).max(1)
                    ),
                }
            );
        }
        if l.unnamed_captures > 0 {
            let note = crate::log_input::unnamed_captures(l.unnamed_captures);
            let _ = writeln!(o, "      {note}");
        }
    }
    if s.resolution_ns() >= 1_000_000_000 {
        let _ = writeln!(
            o,
            "  time: limiters ran on 1 s timestamps (lines within a second in file order); throttle verdicts can differ from live (see the logs manual)"
        );
    }
    let not_judged: Vec<_> = r
        .rules
        .iter()
        .filter(|x| !x.missing_fields.is_empty() || x.unknown > 0)
        .collect();
    if !not_judged.is_empty() || r.totals.unknown_requests > 0 {
        let _ = writeln!(
            o,
            "  not judged on this input: {} requests have an unknown verdict (not counted as passing)",
            r.totals.unknown_requests
        );
        for x in not_judged {
            let why = if x.missing_fields.is_empty() {
                "reads a captured header that may have been cut".to_string()
            } else {
                format!("reads {}", x.missing_fields.join(", "))
            };
            let _ = writeln!(
                o,
                "    {}: {why}; {} requests left unknown",
                x.name, x.unknown
            );
        }
    }
    if let Some(n) = sampled {
        let _ = writeln!(
            o,
            "  sampled 1 in {n}: counts are scaled by {n}; throttle verdicts are not simulated (a limiter needs every request of a key, and a sample has one in {n}): judge the throttles on the full log"
        );
        let _ = writeln!(
            o,
            "    a client sending k requests left no line with chance e^(-k/{n}): {:.0}% at k = {n}, 1% at k = {}",
            100.0 * missed(n as f64, n),
            (4.605 * n as f64).round()
        );
        for x in &r.rules {
            if let Some(h) = x.top_ips.first() {
                let _ = writeln!(
                    o,
                    "    {}: top address {} with ~{} requests: chance such a client left no line {:.2e}",
                    x.name,
                    h.key,
                    h.count,
                    missed(h.count as f64, n)
                );
            }
        }
    }
    o
}

/// The JSON report with the logs' part: `logs` (inputs) and, sampled,
/// `sampling` (the factor and, per rule, the chance its top addresses
/// left no line).
pub fn json(r: &Report, sampled: Option<u64>) -> Result<String> {
    let mut v = serde_json::to_value(r)?;
    if let (Some(n), Some(obj)) = (sampled, v.as_object_mut()) {
        let rules: Vec<serde_json::Value> = r
            .rules
            .iter()
            .map(|x| {
                serde_json::json!({
                    "name": x.name,
                    "top_ips_missed_chance": x.top_ips.iter().map(|h| serde_json::json!({
                        "key": h.key, "requests": h.count, "missed": missed(h.count as f64, n)
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        obj.insert(
            "sampling".into(),
            serde_json::json!({
                "every": n,
                "throttles_simulated": false,
                "why": "a limiter needs every request of a key; a sample holds one in N",
                "rules": rules,
            }),
        );
    }
    Ok(serde_json::to_string_pretty(&v)? + "\n")
}
