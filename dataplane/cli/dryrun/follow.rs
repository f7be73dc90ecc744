//! `rctl dry-run --log FILE --follow`: one log judged as it grows,
//! through its rotations (`rctl_logs::follow`), with a compact screen on
//! stderr every `--every` seconds (each rule's matches and verdicts over
//! the interval, the top talkers), until SIGINT or SIGTERM (or the end of
//! stdin); then the report, as without `--follow`.

use super::logs::LogArgs;
use anyhow::{bail, Context, Result};
use rctl_dataplane::dryrun::{DryRun, RuleSoFar};
use rctl_dataplane::topk::TopK;
use rctl_dataplane::topkey::{show_ip, show_prefix};
use rctl_logs::follow::{follow, Follow, FollowOptions, Pipe, Talkers};
use rctl_logs::run::{Options, Source, Summary};
use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Follows the one `--log`; returns what was read.
pub fn run(run: &mut DryRun, args: &LogArgs, opts: &Options) -> Result<Summary> {
    let [path] = args.input.log.as_slice() else {
        bail!("--follow follows one --log (a file or -)");
    };
    let mut ended = None;
    // Set at the first signal from here on, waiting for a first line too.
    let stop = Arc::new(AtomicBool::new(false));
    on_signal(stop.clone());
    let poll = Duration::from_millis(50);
    let (name, reader): (String, Box<dyn Read + Send>) = if path == Path::new("-") {
        // Read on a thread of its own: a quiet pipe neither holds the
        // screen back nor keeps a signal from being seen.
        let pipe = Pipe::spawn(std::io::stdin()).stop_waiting_on(stop.clone());
        ended = Some(pipe.closed());
        ("-".into(), Box::new(pipe))
    } else {
        if path.is_dir() {
            bail!(
                "--follow follows one log file (or -); {} is a directory",
                path.display()
            );
        }
        let mut head = [0u8; 4];
        let n = std::fs::File::open(path)
            .and_then(|mut f| f.read(&mut head))
            .with_context(|| format!("cannot open {}", path.display()))?;
        let compressed = match rctl_logs::input::sniff(&head[..n]) {
            rctl_logs::input::Compression::Gzip => Some("gzip"),
            rctl_logs::input::Compression::Zstd => Some("zstd"),
            rctl_logs::input::Compression::None => {
                head[..n].starts_with(b"PAR1").then_some("Parquet")
            }
        };
        if let Some(c) = compressed {
            bail!(
                "{} is a {c} file: --follow reads a plain log as it grows; read this one without --follow",
                path.display()
            );
        }
        let mut f =
            Follow::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        if opts.format.is_none() {
            // Its format is found in its first lines: an empty file (one
            // just rotated) is waited on until it has some.
            if std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
                crate::common::warn(&format!(
                    "{} is empty: waiting for its first lines, to detect its format (--log-format names it)",
                    path.display()
                ));
            }
            f = f.wait_for_first_byte(stop.clone(), poll);
        }
        (path.display().to_string(), Box::new(f))
    };
    let src = Source::from_reader(run, &name, reader, opts).map_err(anyhow::Error::msg)?;
    let fo = FollowOptions {
        every: Duration::from_secs(args.every),
        poll,
        stop: &stop,
        ended: ended.as_deref(),
    };
    let mut last: Vec<RuleSoFar> = Vec::new();
    let mut total = 0u64;
    let summary = follow(run, src, &fo, |run, talkers| {
        let now = run.so_far();
        total += talkers.requests;
        let s = screen(&now, &last, talkers, total, args.every);
        last = now;
        use std::io::Write as _;
        let _ = std::io::stderr().lock().write_all(s.as_bytes());
    });
    Ok(summary)
}

/// Sets `stop` at the first SIGINT or SIGTERM (from now on).
fn on_signal(stop: Arc<AtomicBool>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            let _ = tx.send(());
            return;
        };
        rt.block_on(async {
            let fired = rctl_agent::serve::signalled();
            let _ = tx.send(());
            fired.await;
        });
        stop.store(true, Ordering::Relaxed);
    });
    // The handlers are in place before the first line is read.
    let _ = rx.recv();
}

/// One screen: the interval's verdicts per rule, then its top talkers.
fn screen(now: &[RuleSoFar], last: &[RuleSoFar], t: &Talkers, total: u64, every: u64) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "--- last {every} s: {} requests ({total} so far)",
        t.requests
    );
    let _ = writeln!(
        o,
        "{:<32} {:>8} {:>7} {:>7} {:>8} {:>7} {:>7} {:>8}",
        "rule", "matches", "allow", "deny", "throttle", "drop", "log", "unknown"
    );
    let zero = RuleSoFar::default();
    let mut shown = 0;
    for (i, r) in now.iter().enumerate() {
        let p = last.get(i).unwrap_or(&zero);
        let (q, pq) = (&r.requests, &p.requests);
        if r.matches == p.matches && r.unknown == p.unknown {
            continue;
        }
        let _ = writeln!(
            o,
            "{:<32} {:>8} {:>7} {:>7} {:>8} {:>7} {:>7} {:>8}",
            r.name,
            r.matches - p.matches,
            q.allow - pq.allow,
            q.deny - pq.deny,
            q.throttle - pq.throttle,
            q.drop - pq.drop,
            q.log - pq.log,
            r.unknown - p.unknown
        );
        shown += 1;
    }
    if shown == 0 {
        let _ = writeln!(o, "(no rule matched in the interval)");
    }
    // A count that may overestimate says by how much (`880±12`).
    let text = |b: &[u8]| crate::term::text(&String::from_utf8_lossy(b)).into_owned();
    let line =
        |o: &mut String, what: &str, top: &TopK, n: usize, show: &dyn Fn(&[u8]) -> String| {
            let items: Vec<String> = top
                .top_with(n, show)
                .iter()
                .map(|h| match h.error {
                    0 => format!("{} {}", h.key, h.count),
                    e => format!("{} {}±{e}", h.key, h.count),
                })
                .collect();
            let _ = writeln!(o, "{what:<14} {}", items.join(", "));
        };
    line(&mut o, "addresses", &t.ips, 5, &show_ip);
    line(&mut o, "/24 and /48", &t.prefixes, 5, &show_prefix);
    line(&mut o, "user agents", &t.user_agents, 3, &text);
    line(&mut o, "paths", &t.paths, 3, &text);
    o
}
