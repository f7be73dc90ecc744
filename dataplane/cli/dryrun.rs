//! `rctl dry-run`: captured traffic replayed through the rules
//! (`rctl_dataplane::dryrun`); this module expands the inputs and renders
//! the report as text or JSON, and as HTML through `rctl_report`.

mod follow;
mod logs;

use crate::common::{exit, load_ruleset, parse_size, print, warn_site, Format, Limits};
use anyhow::{Context, Result};
use rctl_dataplane::dryrun::{Counts, DryRun, Report};
use rctl_dataplane::topk::Hitter;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `rctl dry-run`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// Sources, or one compiled .rctlc artifact.
    #[arg(required_unless_present = "explain_input")]
    paths: Vec<PathBuf>,
    /// Capture files (pcap or pcapng), directories of them, or `-`.
    #[arg(long, required_unless_present_any = ["log", "agent", "explain_input"])]
    pcap: Vec<PathBuf>,
    #[command(flatten)]
    logs: logs::LogArgs,
    /// Compare with an older ruleset (artifact or sources): which
    /// decisions change, for how many requests, and for whom.
    #[arg(long)]
    against: Option<PathBuf>,
    /// Also write a self-contained HTML report here (a new path or a
    /// regular file, not one of the inputs).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Evaluate this site's rules.
    #[arg(long)]
    site: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Most stream bytes held by all flows together (partial heads,
    /// out-of-order data), like 256MiB or 1GiB; past it, the flows
    /// holding the most are dropped first, and counted in the report.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    max_buffered: usize,
    #[command(flatten)]
    limits: Limits,
}

/// Exit 1 when the sources have errors or an input could not be read to
/// its end.
pub fn run(mut a: Args) -> Result<ExitCode> {
    if a.logs.explain_input {
        print(&logs::explain_input(&a.logs)?, Format::Text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let opts = a.limits.options();
    let Some(new) = load_ruleset(&a.paths, &opts)? else {
        return Ok(ExitCode::from(1));
    };
    let mut inputs = new.inputs;
    warn_site(&new.ruleset, a.site.as_deref());
    // Kept while the logs are read.
    let _spool = a.logs.tap_agent()?;
    let files = expand(&a.pcap)?;
    let mut run = DryRun::new(new.ruleset, a.site.clone())?;
    run.set_max_buffered(a.max_buffered);
    let name = |p: &[PathBuf]| {
        p.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    if let Some(old) = &a.against {
        let Some(loaded) = load_ruleset(std::slice::from_ref(old), &opts)? else {
            return Ok(ExitCode::from(1));
        };
        inputs.extend(loaded.inputs);
        run.against(loaded.ruleset, a.site)?;
    }
    run.name(
        &name(&a.paths),
        a.against
            .as_ref()
            .map(|p| name(std::slice::from_ref(p)))
            .as_deref(),
    );
    inputs.extend(files.iter().cloned());
    inputs.extend(a.logs.input.log.iter().cloned());
    // Refused before the replay, which can take long, and again when
    // written.
    if let Some(p) = &a.report {
        crate::output::check_target(p, &inputs)?;
    }
    let mut complete = replay_all(&mut run, &files);
    let from_logs = if a.logs.input.log.is_empty() {
        None
    } else {
        let (summary, failed) = logs::replay(&mut run, &a.logs)?;
        complete &= !failed;
        Some(summary)
    };
    let sampled = a.logs.sampled.filter(|&n| n > 1);
    let mut report = run.finish();
    if let Some(n) = sampled {
        logs::scale(&mut report, n);
    }
    if let Some(p) = a.report {
        let page = rctl_report::render(&report, &rctl_report::Options { sampled });
        crate::output::write(&p, page.as_bytes(), &inputs)?;
    }
    let out = match (a.format, &from_logs) {
        (Format::Text, None) => text(&report),
        (Format::Text, Some(s)) => {
            text(&report) + "\n" + &logs::text(&report, s, sampled, a.logs.input.reorder_window)
        }
        (Format::Json, _) => logs::json(&report, sampled)?,
    };
    print(&out, a.format)?;
    Ok(exit(!complete))
}

/// Expands `--pcap` arguments: files, directories (their `.pcap`,
/// `.pcapng` and `.cap` files, sorted) and `-` for stdin.
fn expand(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for a in args {
        if a.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(a)
                .with_context(|| format!("cannot read {}", a.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension()
                        .is_some_and(|e| e == "pcap" || e == "pcapng" || e == "cap")
                })
                .collect();
            v.sort();
            out.extend(v);
        } else {
            out.push(a.clone());
        }
    }
    Ok(out)
}

/// Replays every input; returns whether all were read to the end.
fn replay_all(run: &mut DryRun, files: &[PathBuf]) -> bool {
    let mut ok = true;
    for f in files {
        let result = if f == Path::new("-") {
            run.replay("-", std::io::stdin().lock())
        } else {
            match std::fs::File::open(f) {
                Ok(file) => run.replay(
                    &f.display().to_string(),
                    std::io::BufReader::with_capacity(1 << 20, file),
                ),
                Err(e) => {
                    stderr(format_args!(
                        "rctl: error: cannot open {}: {e}",
                        f.display()
                    ));
                    ok = false;
                    continue;
                }
            }
        };
        if let Err(e) = result {
            stderr(format_args!(
                "rctl: error: {}: {e}; the report covers everything before it",
                f.display()
            ));
            ok = false;
        }
    }
    ok
}

/// A line on stderr; a closed stderr is ignored.
fn stderr(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn counts(c: &Counts) -> String {
    let parts: Vec<String> = [
        ("allow", c.allow),
        ("deny", c.deny),
        ("throttle", c.throttle),
        ("drop", c.drop),
        ("log", c.log),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| format!("{k} {n}"))
    .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn hitters(h: &[Hitter]) -> String {
    h.iter()
        .map(|x| {
            if x.error > 0 {
                format!("{} ({}±{})", x.key, x.count, x.error)
            } else {
                format!("{} ({})", x.key, x.count)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A time as `12:00:00.289 UTC`, after its date when `dated` (a span
/// over several days).
fn clock_on(ns: Option<u64>, dated: bool) -> String {
    let Some(ns) = ns else { return "-".into() };
    let s = ns / 1_000_000_000;
    let date = if dated {
        // `2026-05-13T…`: its date.
        let mut d = rctl_os::clock::rfc3339(s);
        d.truncate(10);
        d + " "
    } else {
        String::new()
    };
    format!(
        "{date}{:02}:{:02}:{:02}.{:03} UTC",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60,
        (ns / 1_000_000) % 1000
    )
}

/// Bytes in MiB, with two decimals.
fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / f64::from(1 << 20))
}

/// The head line: who the ruleset would stop, and how many of them look
/// legitimate.
fn affected(r: &Report) -> String {
    let a = &r.affected;
    let at_least = if a.exact { "" } else { "at least " };
    let n = |n: u64, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    let part = |verb: &str, x: &rctl_dataplane::dryrun::Affect| {
        format!(
            "{verb} {} from {at_least}{}",
            n(x.requests, "request"),
            n(x.clients, "client")
        )
    };
    let (lower, unmeasured) = if a.legit_unmeasured.is_empty() {
        ("", String::new())
    } else {
        (
            "at least ",
            format!(
                "; {} {} no User-Agent or no Accept-Language: there only the allow blocks tell, so these are lower bounds",
                a.legit_unmeasured.join(", "),
                if a.legit_unmeasured.len() == 1 { "logs" } else { "log" }
            ),
        )
    };
    format!(
        "would {}, {}, {}; of all {} stopped ({at_least}{}), {lower}{} from {at_least}{} look legitimate (browser-like User-Agent with Accept-Language, or in an allow rule's blocks{unmeasured})\n",
        part("deny", &a.deny),
        part("throttle", &a.throttle),
        part("drop", &a.drop),
        n(a.total.requests, "request"),
        n(a.total.clients, "client"),
        n(a.total.legit_requests, "request"),
        n(a.total.legit_clients, "client")
    )
}

/// The report as text.
fn text(r: &Report) -> String {
    let t = &r.totals;
    let mut o = String::new();
    // Times of day say enough within one day; over several, each has
    // its date.
    const DAY_NS: u64 = 86_400_000_000_000;
    let dated = matches!((t.first_ns, t.last_ns), (Some(a), Some(b)) if a / DAY_NS != b / DAY_NS);
    let span = match (t.first_ns, t.last_ns) {
        (Some(a), Some(b)) => format!(
            ", {} to {} ({:.1} s)",
            clock_on(Some(a), dated),
            clock_on(Some(b), dated),
            b.saturating_sub(a) as f64 / 1e9
        ),
        _ => String::new(),
    };
    let _ = writeln!(
        o,
        "ruleset {} ({} rules), hash {}",
        r.ruleset.name, r.ruleset.rules, r.ruleset.hash
    );
    if let Some(old) = &r.against {
        let _ = writeln!(
            o,
            "against {} ({} rules), hash {}",
            old.name, old.rules, old.hash
        );
    }
    o.push_str(&affected(r));
    // Packets, flows and the stream memory are a capture's: a run over
    // logs alone has none of them to tell.
    let captures = !r.logs_only();
    if captures {
        let _ = writeln!(o, "dry run: {} input(s), {} packets ({} bytes), {} TCP flows ({} TLS, not inspected), {} HTTP requests{span}", r.inputs.len(), t.packets, t.bytes, t.flows, t.tls_flows, t.captured_requests);
    } else {
        let _ = writeln!(
            o,
            "dry run: {} log input(s), {} HTTP requests{span}",
            r.inputs.len(),
            t.captured_requests
        );
    }
    let stopped = if captures {
        format!("{} were in packets XDP rules stopped", t.stopped_requests)
    } else {
        format!(
            "XDP rules would have stopped the other {} before it",
            t.stopped_requests
        )
    };
    let _ = writeln!(
        o,
        "HTTP plane: {} of the {} requests reached it; {stopped}",
        t.requests, t.captured_requests
    );
    if captures {
        let _ = writeln!(
            o,
            "not decoded: {} fragments, {} truncated, {} not IP, {} unsupported link type, {} malformed; {} unparsable stream bytes, {} resyncs, {} retransmitted bytes",
            t.fragments, t.truncated, t.not_ip, t.unsupported_link, t.malformed, t.unparsable_bytes, t.resyncs, t.retransmitted_bytes
        );
        let _ = writeln!(
            o,
            "memory: at most {} of stream data held at once (bound {}); dropped {} times to stay within it ({} stream bytes, the flows holding the most first); {} idle flows evicted (flow-table bound)",
            mib(t.buffered_peak_bytes),
            mib(t.max_buffered_bytes),
            t.shed_flows,
            t.shed_bytes,
            t.evicted_flows
        );
    }
    for i in &r.inputs {
        if let Some(e) = &i.error {
            let read = match &i.log {
                Some(l) => format!("{} lines", l.lines),
                None => format!("{} packets", i.packets),
            };
            let _ = writeln!(o, "input {}: stopped after {read}: {e}", i.path);
        }
    }
    let _ = writeln!(o, "\nrules, in evaluation order:");
    for rule in &r.rules {
        let shadow = if rule.shadow { " [shadow]" } else { "" };
        let _ = writeln!(
            o,
            "  {} ({}{shadow}): {} matching requests, {} passed; requests: {}; packets: {}",
            rule.name,
            rule.action,
            rule.matches,
            rule.passed,
            counts(&rule.requests),
            counts(&rule.packets)
        );
        if rule.stopped_packets > 0 || rule.stopped_requests > 0 {
            if rule.stopped_packets > 0 {
                let _ = writeln!(
                    o,
                    "      would have stopped {} packets carrying {} HTTP requests",
                    rule.stopped_packets, rule.stopped_requests
                );
            } else {
                // A log has requests, not packets: the packet plane's
                // rules stop them before the HTTP plane sees them.
                let _ = writeln!(
                    o,
                    "      would have stopped {} requests in the packet plane, before HTTP",
                    rule.stopped_requests
                );
            }
            if rule.stopped_requests > 0 {
                let _ = writeln!(
                    o,
                    "      their top addresses:   {}",
                    hitters(&rule.stopped_top_ips)
                );
                let _ = writeln!(
                    o,
                    "      their top user agents: {}",
                    hitters(&rule.stopped_top_user_agents)
                );
            }
        }
        if rule.shadow && rule.would != Counts::default() {
            let _ = writeln!(o, "      would have: {}", counts(&rule.would));
        }
        if rule.matches > 0 {
            let _ = writeln!(
                o,
                "      seen {} to {}",
                clock_on(rule.first_seen_ns, dated),
                clock_on(rule.last_seen_ns, dated)
            );
            let _ = writeln!(o, "      top addresses:   {}", hitters(&rule.top_ips));
            let _ = writeln!(
                o,
                "      top user agents: {}",
                hitters(&rule.top_user_agents)
            );
            let _ = writeln!(o, "      top paths:       {}", hitters(&rule.top_paths));
            let _ = writeln!(o, "      top networks:    {}", hitters(&rule.top_prefixes));
        }
        if let Some(t) = rule.throttle.as_ref().filter(|t| t.keys > 0) {
            let at_least = if t.exact { "" } else { "at least " };
            let _ = writeln!(
                o,
                "      keys (by {}): {at_least}{} counted, {at_least}{} limited; top: {}",
                t.by,
                t.keys,
                t.limited_keys,
                t.top
                    .iter()
                    .map(|k| format!("{} ({} limited, {} passed)", k.key, k.limited, k.passed))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if let Some(changes) = &r.changes {
        let _ = writeln!(
            o,
            "\nchanges against the old ruleset ({} kinds):",
            changes.len()
        );
        if changes.is_empty() {
            let _ = writeln!(o, "  no decision changes");
        }
        for c in changes {
            let _ = writeln!(
                o,
                "  {} -> {}: {} requests, {} packets",
                c.from, c.to, c.requests, c.packets
            );
            if c.requests > 0 {
                let _ = writeln!(
                    o,
                    "      top addresses:   {} (in requests)",
                    hitters(&c.request_top_ips)
                );
                let _ = writeln!(o, "      top user agents: {}", hitters(&c.top_user_agents));
                let _ = writeln!(o, "      top paths:       {}", hitters(&c.top_paths));
            }
            if c.packets > 0 {
                let _ = writeln!(
                    o,
                    "      top addresses:   {} (in packets)",
                    hitters(&c.packet_top_ips)
                );
            }
        }
    }
    let u = &r.unmatched;
    let _ = writeln!(
        o,
        "\n{} requests matched no rule; their top talkers:",
        u.requests
    );
    let _ = writeln!(o, "  addresses:   {}", hitters(&u.top_ips));
    let _ = writeln!(o, "  user agents: {}", hitters(&u.top_user_agents));
    let _ = writeln!(o, "  paths:       {}", hitters(&u.top_paths));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_over_days_dates_its_times() {
        let t = 20_586 * 86_400_000_000_000 + 43_200_289_000_000;
        assert_eq!(clock_on(Some(t), true), "2026-05-13 12:00:00.289 UTC");
        assert_eq!(clock_on(Some(t), false), "12:00:00.289 UTC");
        assert_eq!(clock_on(None, true), "-");
    }
}
