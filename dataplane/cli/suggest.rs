//! `rctl suggest`: heavy hitters over all of a capture's requests turned
//! into rules (`rctl_suggest`), each measured on the same traffic; this
//! module reads the inputs, writes the file and prints the summary.

use crate::common::{load_ruleset, report, Format, Limits};
use anyhow::{bail, Context, Result};
use rctl_suggest::{Effect, Finding, Obs};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `rctl suggest`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The existing ruleset's sources: suggestions come after every rule
    /// of it (its exemptions keep winning), and what it already limits is
    /// not suggested again.
    paths: Vec<PathBuf>,
    /// Capture files (pcap or pcapng): every request in them is counted.
    #[arg(long, required_unless_present_any = ["log", "agent"])]
    pcap: Vec<PathBuf>,
    #[command(flatten)]
    logs: crate::log_input::LogInputArgs,
    /// An ipblock of the existing rules whose addresses must never be
    /// limited: a suggestion that would is collateral (repeatable).
    #[arg(long, value_name = "ipblock@SCOPE/NAME")]
    trusted: Vec<String>,
    /// The most collateral a suggestion may have: the share of the
    /// legitimate-looking requests it would limit, like 1% or 0.
    #[arg(long, default_value = "1%", value_parser = parse_share)]
    budget: f64,
    /// Write the suggested rules here (a .rctl file `rctl check` and
    /// `rctl test` accept as it is); default: print them.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also write the suggestions written to the .rctl file as
    /// requestctl's objects into DIR (request-patterns/,
    /// request-actions/cache-text/, as `rctl emit requestctl` writes
    /// them); those requestctl cannot express are listed with the reason.
    /// The throttles are then written with requestctl's bucket (`bucket
    /// vsthrottle`) in both.
    #[arg(long, value_name = "DIR")]
    requestctl: Option<PathBuf>,
    /// The summary's format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    limits: Limits,
}

fn parse_share(s: &str) -> Result<f64, String> {
    let (n, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (s, 1.0),
    };
    match n.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && v / scale <= 1.0 => Ok(v / scale),
        _ => Err(format!("`{s}` is not a share: write it like 1% or 0.01")),
    }
}

/// One suggestion, measured.
struct Measured {
    name: String,
    finding: Finding,
    effect: Effect,
    over_budget: bool,
}

/// Exit 0 with the suggestions written (none on quiet traffic), 1 when
/// the existing rules have errors or the suggested file fails its own
/// check or tests.
pub fn run(mut a: Args) -> Result<ExitCode> {
    let opts = a.limits.options();
    if rctl_compiler::input::is_artifact(&a.paths) {
        bail!("rctl suggest needs the existing rules' sources, not an artifact: the suggestions are written to sit beside them");
    }
    let existing = if a.paths.is_empty() {
        None
    } else {
        match load_ruleset(&a.paths, &opts)? {
            Some(l) => Some(l.ruleset),
            None => return Ok(ExitCode::from(1)),
        }
    };
    // The agent's tap, a log file while it is kept.
    let _spool = a.logs.tap_agent()?;
    let keep = rctl_suggest::headers_read(existing.as_ref());
    let (traffic, inputs, log_failed) = read_traffic(&a.pcap, &a.logs, &keep)?;
    let unmeasured: Vec<&str> = inputs
        .iter()
        .filter(|(_, k)| !rctl_suggest::collateral_measurable(k))
        .map(|(n, _)| n.as_str())
        .collect();
    if !unmeasured.is_empty() {
        crate::common::warn(&format!(
            "{}: no User-Agent or no Accept-Language logged, so no request of it can be told to look legitimate: the limits fall back to all clients' median and the collateral on it is not measured (log both headers to measure it)",
            unmeasured.join(", ")
        ));
    }
    let collateral_measured = unmeasured.is_empty();
    let inputs: Vec<rctl_dataplane::partial::Known> = inputs.into_iter().map(|(_, k)| k).collect();
    let sets = rctl_suggest::trusted_blocks(existing.as_ref(), &a.trusted)
        .map_err(|n| anyhow::anyhow!("--trusted {n}: the existing rules have no ipblock {n}"))?;
    let trusted = |ip| rctl_suggest::in_sets(&sets, ip);
    let seen = rctl_suggest::existing(existing.clone(), &traffic, &inputs)?;
    let findings = rctl_suggest::find(&traffic, &seen, &trusted, &rctl_suggest::Options::default());
    let first = rctl_suggest::first_priority(existing.as_ref());
    let named: Vec<(String, Finding)> = findings
        .into_iter()
        .enumerate()
        .map(|(i, f)| (format!("suggested_{}", i + 1), f))
        .collect();

    // Measured on the merged ruleset: the existing rules and the drafts.
    let bucket = if a.requestctl.is_some() {
        rctl_suggest::write::Bucket::Vsthrottle
    } else {
        rctl_suggest::write::Bucket::Default
    };
    let draft = file_text(&named, &traffic, first, bucket, |_| None);
    let dir = scratch_dir()?;
    let draft_path = dir.join("suggested.rctl");
    std::fs::write(&draft_path, &draft)?;
    let mut paths = a.paths.clone();
    paths.push(draft_path.clone());
    let merged = rctl_compiler::compile_paths(&paths, &opts);
    if report(&merged.sources, &merged.diagnostics, false) {
        let _ = std::fs::remove_dir_all(&dir);
        bail!(
            "the suggested rules do not compile beside the existing ones (a bug in rctl suggest)"
        );
    }
    let Some(ruleset) = merged.ruleset else {
        bail!("no ruleset produced")
    };
    let names: Vec<String> = named.iter().map(|(n, _)| n.clone()).collect();
    let effects = rctl_suggest::measure(ruleset, &traffic, &inputs, &names, &trusted)?;
    let legit = traffic.iter().filter(|r| r.looks_legitimate()).count() as f64;
    let measured: Vec<Measured> = named
        .into_iter()
        .map(|(name, finding)| {
            let effect = effects.get(&name).cloned().unwrap_or_default();
            let over_budget = effect.collateral_requests as f64 > a.budget * legit;
            Measured {
                name,
                finding,
                effect,
                over_budget,
            }
        })
        .collect();

    // The file: the suggestions within the budget, with their figures.
    let kept: Vec<(String, Finding)> = measured
        .iter()
        .filter(|m| !m.over_budget)
        .map(|m| (m.name.clone(), m.finding.clone()))
        .collect();
    let text = file_text(&kept, &traffic, first, bucket, |name| {
        measured.iter().find(|m| m.name == name).map(|m| &m.effect)
    });
    let final_path = match &a.output {
        Some(p) => p.clone(),
        None => dir.join("suggested.rctl"),
    };
    std::fs::write(&final_path, &text)
        .with_context(|| format!("cannot write {}", final_path.display()))?;
    let ok = self_check(&a.paths, &final_path, &opts);
    if a.output.is_none() {
        print!("{text}");
    }
    let rq = a
        .requestctl
        .as_ref()
        .map(|out| write_requestctl(&final_path, out, &opts));
    let _ = std::fs::remove_dir_all(&dir);
    let rq = rq.transpose()?;
    summary(&a, &traffic, &measured, collateral_measured, rq.as_ref())?;
    Ok(if ok && !log_failed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Every request of the captures and the logs (with the headers in
/// `keep`), in time order, with the
/// fields each log carries (by name; a request's `input` indexes them,
/// captures' past the end), and whether reading the logs failed (as
/// `rctl dry-run --log` fails: a read error, no line of the format,
/// `--max-bad-lines`). A capture that cannot be read to its end is
/// reported with where it stopped, and what was read of it is kept.
#[expect(
    clippy::type_complexity,
    reason = "the traffic, its inputs, and a flag"
)]
fn read_traffic(
    pcaps: &[PathBuf],
    logs: &crate::log_input::LogInputArgs,
    keep: &[String],
) -> Result<(
    Vec<Obs>,
    Vec<(String, rctl_dataplane::partial::Known)>,
    bool,
)> {
    let mut traffic = Vec::new();
    for p in pcaps {
        let file =
            std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
        let (reqs, err) = rctl_dataplane::dryrun::requests_in(std::io::BufReader::new(file));
        if let Some(e) = err {
            crate::common::warn(&format!(
                "{}: {e} (the requests before it are counted)",
                p.display()
            ));
        }
        traffic.extend(reqs.iter().map(|r| Obs::from_http_keeping(r, Some(keep))));
    }
    let mut inputs = Vec::new();
    let mut failed = false;
    if !logs.log.is_empty() {
        let opts = logs.options()?;
        let (summary, formats) = rctl_logs::read_requests(&logs.log, &opts, |i, req| {
            traffic.push(Obs::from_request(i as u32, req, Some(keep)));
        })
        .map_err(anyhow::Error::msg)?;
        failed = logs.failed(&summary);
        for ((name, l), f) in summary.inputs.iter().zip(formats) {
            if l.bad_lines > 0 {
                crate::common::warn(&format!(
                    "{name}: {} of {} lines could not be read (the rest are counted)",
                    l.bad_lines, l.lines
                ));
            }
            inputs.push((name.clone(), f.known));
        }
    }
    traffic.sort_by_key(|r| r.time_ns);
    Ok((traffic, inputs, failed))
}

fn scratch_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("rctl-suggest-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The suggested file: a header, then each rule and its test.
fn file_text<'a>(
    named: &[(String, Finding)],
    traffic: &[Obs],
    first: i64,
    bucket: rctl_suggest::write::Bucket,
    effect: impl Fn(&str) -> Option<&'a Effect>,
) -> String {
    let mut out = format!(
        "# Suggested by rctl suggest from {} requests. Each rule is in shadow:\n\
         # it logs what it would limit; remove `shadow` to enforce it.\n",
        traffic.len()
    );
    if named.is_empty() {
        out.push_str("# Nothing to suggest: no client stands out from the normal ones.\n");
    }
    for (i, (name, f)) in named.iter().enumerate() {
        let mut comment = format!(
            "{}; limit {} per {}s ({})",
            f.what, f.limit, f.period_s, f.basis
        );
        if let Some(e) = effect(name) {
            let _ = write!(
                comment,
                "; on this traffic: {} requests from {} clients limited, collateral {} requests from {} clients",
                e.requests_limited, e.clients_limited, e.collateral_requests, e.collateral_clients
            );
        }
        let Some(rule) =
            rctl_suggest::write::rule(f, name, first + 10 * i as i64, &comment, bucket)
        else {
            continue;
        };
        out.push('\n');
        out.push_str(&rule);
        out.push('\n');
        out.push_str(&rctl_suggest::write::test_block(f, name, traffic));
    }
    out
}

/// `rctl check` and `rctl test` of the written file, alone and beside the
/// existing rules; their diagnostics and failures are printed.
fn self_check(existing: &[PathBuf], file: &Path, opts: &rctl_compiler::Options) -> bool {
    let mut ok = true;
    let mut sets = vec![vec![file.to_path_buf()]];
    if !existing.is_empty() {
        let mut all = existing.to_vec();
        all.push(file.to_path_buf());
        sets.push(all);
    }
    for paths in sets {
        let c = rctl_compiler::compile_paths(&paths, opts);
        if report(&c.sources, &c.diagnostics, false) {
            ok = false;
            continue;
        }
        for r in rctl_dataplane::testing::run_tests(&c, Some("suggested_")) {
            match r {
                Ok(r) if r.passed() => {}
                Ok(r) => {
                    ok = false;
                    for f in r.failures {
                        crate::common::warn(&format!(
                            "test {:?} line {}: {}",
                            r.name, f.line, f.message
                        ));
                    }
                }
                Err(e) => {
                    ok = false;
                    crate::common::warn(&format!("{e}"));
                }
            }
        }
    }
    ok
}

/// What `--requestctl` wrote: the rules written as actions, and those
/// left out with the reason.
struct Requestctl {
    written: Vec<String>,
    skipped: Vec<(String, String)>,
}

/// The suggested file's rules as requestctl's objects in `out`, through
/// `rctl emit requestctl`'s writer; each rule it cannot express is named
/// with the reason on stderr.
fn write_requestctl(file: &Path, out: &Path, opts: &rctl_compiler::Options) -> Result<Requestctl> {
    let c = rctl_compiler::compile_paths(&[file.to_path_buf()], opts);
    let Some(rs) = c.ruleset else {
        bail!("--requestctl: the suggested file does not compile, so nothing is written for requestctl");
    };
    let o = rctl_emit::requestctl::Options {
        skip_unsupported: true,
        ..Default::default()
    };
    let t =
        rctl_emit::requestctl::emit(&rs, &o).map_err(|e| anyhow::anyhow!("--requestctl: {e}"))?;
    for n in &t.notes {
        crate::common::warn(&format!("requestctl: {n}"));
    }
    for (rule, why) in &t.skipped {
        crate::common::warn(&format!("requestctl: {rule} not written: {why}"));
    }
    let mut written = Vec::new();
    for (name, text) in &t.files {
        let path = out.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        crate::output::write(&path, text.as_bytes(), &[file.to_path_buf()])?;
        if let Some(action) = name.strip_prefix("request-actions/") {
            let rule = action.rsplit('/').next().unwrap_or(action);
            written.push(rule.trim_end_matches(".yaml").to_string());
        }
    }
    Ok(Requestctl {
        written,
        skipped: t.skipped,
    })
}

fn key_name(k: &rctl_suggest::Key) -> &'static str {
    match k {
        rctl_suggest::Key::Ip => "ip",
        rctl_suggest::Key::Prefix => "prefix",
        rctl_suggest::Key::UserAgent => "user-agent",
        rctl_suggest::Key::HostPath => "host, path",
    }
}

/// The summary, ranked by requests removed against collateral.
fn summary(
    a: &Args,
    traffic: &[Obs],
    measured: &[Measured],
    collateral_measured: bool,
    rq: Option<&Requestctl>,
) -> Result<()> {
    let mut ranked: Vec<&Measured> = measured.iter().collect();
    ranked.sort_by_key(|m| {
        std::cmp::Reverse(
            m.effect.requests_limited as i64 - 10 * m.effect.collateral_requests as i64,
        )
    });
    let mut out = std::io::stdout().lock();
    if a.format == Format::Json {
        let mut v = serde_json::json!({
            "requests": traffic.len(),
            "budget": a.budget,
            "collateral_measured": collateral_measured,
            "suggestions": ranked.iter().map(|m| serde_json::json!({
                "rule": m.name,
                "what": m.finding.what,
                "key": key_name(&m.finding.key),
                "limit": m.finding.limit,
                "period_s": m.finding.period_s,
                "basis": m.finding.basis,
                "offender_requests": m.finding.requests.len(),
                "effect": m.effect,
                "over_budget": m.over_budget,
                "written": !m.over_budget,
            })).collect::<Vec<_>>(),
        });
        if let Some(rq) = rq {
            v["requestctl"] = serde_json::json!({
                "written": rq.written,
                "skipped": rq.skipped.iter().map(|(rule, reason)| serde_json::json!({
                    "rule": rule,
                    "reason": reason,
                })).collect::<Vec<_>>(),
            });
        }
        writeln!(
            out,
            "{}",
            crate::term::json(&serde_json::to_string_pretty(&v)?)
        )?;
        return Ok(());
    }
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "{} requests read; {}",
        traffic.len(),
        crate::common::count(measured.len(), "suggestion")
    )?;
    for m in ranked {
        let e = &m.effect;
        writeln!(
            err,
            "  {}{}: {}\n    limits {} requests from {} clients; collateral {} requests from {} clients",
            m.name,
            if m.over_budget { " (over the budget, not written)" } else { "" },
            crate::term::text(&m.finding.what),
            e.requests_limited,
            e.clients_limited,
            e.collateral_requests,
            e.collateral_clients
        )?;
    }
    if let Some(rq) = rq {
        writeln!(
            err,
            "requestctl: {} written, {} not written (the reasons are above)",
            crate::common::count(rq.written.len(), "action"),
            rq.skipped.len()
        )?;
    }
    Ok(())
}
