//! `rctl suggest`: heavy hitters over all of a capture's requests turned
//! into rules (`rctl_suggest`), each measured on the same traffic; this
//! module reads the inputs, writes the file and prints the summary.

use crate::common::{load_ruleset, report, Format, Limits};
use anyhow::{bail, Context, Result};
use rctl_suggest::{Effect, Finding};
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
    /// What a request to an endpoint costs, against 1 for any other:
    /// `[HOST]/PATH-PREFIX=WEIGHT`, like `query.wikidata.org/sparql=50`
    /// (repeatable; the longest match wins). Suggestions are ranked by
    /// the cost they remove.
    #[arg(long, value_name = "[HOST]/PATH=WEIGHT", value_parser = parse_cost)]
    cost: Vec<Cost>,
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
    /// The most keys each count holds (endpoints, paths, prefixes,
    /// User-Agents; four times as many addresses): what bounds the
    /// memory. Past it the lightest keys are dropped, and the summary
    /// says the counts are not exact.
    #[arg(long, value_name = "N", default_value_t = 1 << 18)]
    max_keys: usize,
    #[command(flatten)]
    limits: Limits,
}

/// A `--cost`: requests whose host is `host` (any, when empty) and whose
/// path starts with `path` cost `weight`.
#[derive(Debug, Clone)]
struct Cost {
    host: String,
    path: String,
    weight: f64,
}

fn parse_cost(s: &str) -> Result<Cost, String> {
    let bad = || format!("`{s}` is not a cost: write it like query.wikidata.org/sparql=50");
    let (at, w) = s.rsplit_once('=').ok_or_else(bad)?;
    let weight: f64 = w.trim().parse().map_err(|_| bad())?;
    let slash = at.find('/').ok_or_else(bad)?;
    if !(weight.is_finite() && weight >= 0.0) {
        return Err(bad());
    }
    Ok(Cost {
        host: at[..slash].to_ascii_lowercase(),
        path: at[slash..].to_string(),
        weight,
    })
}

/// The cost of a request to `f`'s endpoint: the weight of the longest
/// `--cost` that matches it, 1 without one.
fn weight(costs: &[Cost], f: &Finding) -> f64 {
    costs
        .iter()
        .filter(|c| (c.host.is_empty() || c.host == f.host) && f.path.starts_with(&c.path))
        .max_by_key(|c| c.host.len() + c.path.len())
        .map_or(1.0, |c| c.weight)
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
    let dir = scratch_dir()?;
    let result = suggest(&a, existing.as_ref(), keep, &dir, &opts);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn suggest(
    a: &Args,
    existing: Option<&rctl_compiler::ir::Ruleset>,
    keep: Vec<String>,
    dir: &Path,
    opts: &rctl_compiler::Options,
) -> Result<ExitCode> {
    let sets = rctl_suggest::trusted_blocks(existing, &a.trusted)
        .map_err(|n| anyhow::anyhow!("--trusted {n}: the existing rules have no ipblock {n}"))?;
    let trusted = |ip| rctl_suggest::in_sets(&sets, ip);
    let mut files = Files::new(&a.pcap, &a.logs, dir)?;
    let bounds = rctl_suggest::Bounds {
        keys: a.max_keys,
        clients: 4 * a.max_keys,
        ..Default::default()
    };
    let find_opts = rctl_suggest::Options::default();
    let counts = rctl_suggest::count(&mut files, existing, &trusted, &find_opts, bounds)?;
    let inputs = files.inputs.clone();
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
    if !counts.exact() {
        crate::common::warn(&format!(
            "more keys than --max-keys {}: the lightest were dropped, so the counts are upper bounds and each offender was judged on the fewest requests it can have sent; the offenders' requests and the effects are counted exactly all the same (raise --max-keys for exact counts)",
            a.max_keys
        ));
    }
    let collateral_measured = unmeasured.is_empty();
    let findings = rctl_suggest::find::find(&counts, &find_opts);
    let first = rctl_suggest::first_priority(existing);
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
    let draft = file_text(&named, counts.requests, first, bucket, |_| None);
    let draft_path = dir.join("draft.rctl");
    std::fs::write(&draft_path, &draft)?;
    let mut paths = a.paths.clone();
    paths.push(draft_path.clone());
    let merged = rctl_compiler::compile_paths(&paths, opts);
    if report(&merged.sources, &merged.diagnostics, false) {
        bail!(
            "the suggested rules do not compile beside the existing ones (a bug in rctl suggest)"
        );
    }
    let Some(ruleset) = merged.ruleset else {
        bail!("no ruleset produced")
    };
    let (names, findings): (Vec<String>, Vec<Finding>) = named.into_iter().unzip();
    let measured = rctl_suggest::measure(
        &mut files, ruleset, findings, names, &counts, keep, &trusted,
    )?;
    let legit = counts.legit as f64;
    let measured: Vec<Measured> = measured
        .into_iter()
        .map(|m| Measured {
            over_budget: m.effect.collateral_requests as f64 > a.budget * legit,
            name: m.name,
            finding: m.finding,
            effect: m.effect,
        })
        .collect();

    // The file: the suggestions within the budget, with their figures.
    let kept: Vec<(String, Finding)> = measured
        .iter()
        .filter(|m| !m.over_budget)
        .map(|m| (m.name.clone(), m.finding.clone()))
        .collect();
    let text = file_text(&kept, counts.requests, first, bucket, |name| {
        measured.iter().find(|m| m.name == name).map(|m| &m.effect)
    });
    let final_path = match &a.output {
        Some(p) => p.clone(),
        None => dir.join("suggested.rctl"),
    };
    std::fs::write(&final_path, &text)
        .with_context(|| format!("cannot write {}", final_path.display()))?;
    let ok = self_check(&a.paths, &final_path, opts);
    if a.output.is_none() {
        print!("{text}");
    }
    let rq = a
        .requestctl
        .as_ref()
        .map(|out| write_requestctl(&final_path, out, opts))
        .transpose()?;
    summary(a, &counts, &measured, collateral_measured, rq.as_ref())?;
    Ok(if ok && !files.failed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The captures and the logs, read once a pass: the captures one after
/// the other, then the logs merged in time order. Standard input is
/// spooled to a file first, to be read again.
struct Files<'a> {
    pcaps: &'a [PathBuf],
    logs: Vec<PathBuf>,
    args: &'a crate::log_input::LogInputArgs,
    /// Passes made.
    passes: u32,
    /// Each log's name and the fields it carries (after the first pass).
    inputs: Vec<(String, rctl_dataplane::partial::Known)>,
    /// Whether reading the logs failed (as `rctl dry-run --log` fails:
    /// no line of the format, `--max-bad-lines`).
    failed: bool,
}

impl<'a> Files<'a> {
    fn new(
        pcaps: &'a [PathBuf],
        args: &'a crate::log_input::LogInputArgs,
        dir: &Path,
    ) -> Result<Files<'a>> {
        let mut logs = Vec::with_capacity(args.log.len());
        for p in &args.log {
            if p.as_os_str() == "-" {
                let spool = dir.join("stdin");
                let mut out = std::fs::File::create(&spool)
                    .with_context(|| format!("cannot write {}", spool.display()))?;
                std::io::copy(&mut std::io::stdin().lock(), &mut out)
                    .context("cannot read standard input")?;
                logs.push(spool);
            } else {
                logs.push(p.clone());
            }
        }
        Ok(Files {
            pcaps,
            logs,
            args,
            passes: 0,
            inputs: Vec::new(),
            failed: false,
        })
    }
}

impl rctl_suggest::Traffic for Files<'_> {
    fn each(
        &mut self,
        f: &mut dyn FnMut(rctl_suggest::Origin<'_>, &rctl_dataplane::Request<'_>),
    ) -> std::result::Result<(), String> {
        let first = self.passes == 0;
        self.passes += 1;
        let all = rctl_dataplane::partial::Known::all();
        for p in self.pcaps {
            let file =
                std::fs::File::open(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            let err =
                rctl_dataplane::dryrun::each_request_in(std::io::BufReader::new(file), |hr| {
                    let mut buf = Vec::new();
                    rctl_suggest::obs::with_http(hr, &mut buf, |r| {
                        let o = rctl_suggest::Origin {
                            input: rctl_suggest::CAPTURE,
                            known: &all,
                            cut: &[],
                        };
                        f(o, r)
                    });
                });
            if let (Some(e), true) = (err, first) {
                crate::common::warn(&format!(
                    "{}: {e} (the requests before it are counted)",
                    p.display()
                ));
            }
        }
        if self.logs.is_empty() {
            return Ok(());
        }
        let opts = self.args.options().map_err(|e| format!("{e:#}"))?;
        let (summary, formats) = rctl_logs::read_requests(&self.logs, &opts, |i, known, r, cut| {
            let o = rctl_suggest::Origin {
                input: i as u32,
                known,
                cut,
            };
            f(o, r)
        })
        .map_err(|e| e.to_string())?;
        if first {
            self.failed = self.args.failed(&summary);
            for ((name, l), fmt) in summary.inputs.iter().zip(formats) {
                if l.bad_lines > 0 {
                    crate::common::warn(&format!(
                        "{name}: {} of {} lines could not be read (the rest are counted)",
                        l.bad_lines, l.lines
                    ));
                }
                self.inputs.push((name.clone(), fmt.known));
            }
        }
        Ok(())
    }
}

/// A directory only this user can read (standard input's copy is a log
/// of clients' addresses), removed by the caller.
fn scratch_dir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    let dir = std::env::temp_dir().join(format!("rctl-suggest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// The suggested file: a header, then each rule and its test.
fn file_text<'a>(
    named: &[(String, Finding)],
    requests: u64,
    first: i64,
    bucket: rctl_suggest::write::Bucket,
    effect: impl Fn(&str) -> Option<&'a Effect>,
) -> String {
    let mut out = format!(
        "# Suggested by rctl suggest from {requests} requests. Each rule is in shadow:\n\
         # it logs what it would limit; remove `shadow` to enforce it.\n",
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
            if e.requests_unknown > 0 {
                let _ = write!(
                    comment,
                    "; {} requests it matched could not be judged (its key is a header the log may have cut)",
                    e.requests_unknown
                );
            }
        }
        let Some(rule) =
            rctl_suggest::write::rule(f, name, first + 10 * i as i64, &comment, bucket)
        else {
            continue;
        };
        out.push('\n');
        out.push_str(&rule);
        if let Some(t) = rctl_suggest::write::test_block(f, name) {
            out.push('\n');
            out.push_str(&t);
        }
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
    counts: &rctl_suggest::Counts,
    measured: &[Measured],
    collateral_measured: bool,
    rq: Option<&Requestctl>,
) -> Result<()> {
    let mut ranked: Vec<&Measured> = measured.iter().collect();
    // The load removed, against ten times the collateral.
    let cost = |m: &Measured| m.effect.requests_limited as f64 * weight(&a.cost, &m.finding);
    let rank = |m: &Measured| cost(m) - 10.0 * m.effect.collateral_requests as f64;
    ranked.sort_by(|x, y| rank(y).total_cmp(&rank(x)));
    let mut out = std::io::stdout().lock();
    if a.format == Format::Json {
        let mut v = serde_json::json!({
            "requests": counts.requests,
            "exact": counts.exact(),
            "budget": a.budget,
            "collateral_measured": collateral_measured,
            "suggestions": ranked.iter().map(|m| serde_json::json!({
                "rule": m.name,
                "what": m.finding.what,
                "key": key_name(&m.finding.key),
                "limit": m.finding.limit,
                "period_s": m.finding.period_s,
                "basis": m.finding.basis,
                "offender_requests": m.finding.requests,
                "effect": m.effect,
                "cost_removed": cost(m),
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
        counts.requests,
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
        if e.requests_unknown > 0 {
            writeln!(
                err,
                "    {} requests it matched could not be judged: its key is a header the log may have cut, so what it does to them is not known here",
                e.requests_unknown
            )?;
        }
        if !a.cost.is_empty() {
            writeln!(err, "    removes a cost of {}", cost(m))?;
        }
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
