//! What `rctl test` reads for a test's `replay` lines: access logs through
//! `rctl_logs` (their format named or detected, folders walked, gzip and
//! zstd read), merged in time order, or one packet capture. A file that
//! cannot be read whole fails the run: a bad line is not judged, and a
//! test on part of a file is not the test written.

use rctl_dataplane::partial::Known;
use rctl_dataplane::testing::Replayer;
use rctl_dataplane::Request;
use rctl_logs::detect::{by_name, Spec};
use rctl_logs::run::Options;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Reads logs and captures from the file system.
pub struct Files;

/// Whether the file starts as a pcap or pcapng capture does.
fn is_capture(p: &Path) -> bool {
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(p).and_then(|mut f| f.read_exact(&mut magic));
    read.is_ok()
        && matches!(
            magic,
            [0xd4, 0xc3, 0xb2, 0xa1]
                | [0xa1, 0xb2, 0xc3, 0xd4]
                | [0x4d, 0x3c, 0xb2, 0xa1]
                | [0xa1, 0xb2, 0x3c, 0x4d]
                | [0x0a, 0x0d, 0x0d, 0x0a]
        )
}

impl Replayer for Files {
    fn replay(
        &mut self,
        files: &[(&Path, Option<&str>)],
        each: &mut dyn FnMut(usize, &Known, &Request<'_>),
    ) -> Result<(), String> {
        for (p, _) in files {
            if p.as_os_str() == "-" {
                return Err("a test replays files, not standard input".into());
            }
            std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        if let Some((p, _)) = files.iter().find(|(p, f)| f.is_none() && is_capture(p)) {
            if files.len() > 1 {
                return Err(format!(
                    "{}: a test replays one capture, or logs; this one names {} files",
                    p.display(),
                    files.len()
                ));
            }
            return capture(p, each);
        }
        logs(files, each)
    }
}

fn capture(p: &Path, each: &mut dyn FnMut(usize, &Known, &Request<'_>)) -> Result<(), String> {
    let f = std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let known = Known::all();
    let err = rctl_dataplane::dryrun::each_request_in(std::io::BufReader::new(f), |r| {
        r.with_request(|req| each(0, &known, req))
    });
    match err {
        Some(e) => Err(format!("{}: {e}", p.display())),
        None => Ok(()),
    }
}

fn logs(
    files: &[(&Path, Option<&str>)],
    each: &mut dyn FnMut(usize, &Known, &Request<'_>),
) -> Result<(), String> {
    // A folder is its files: each read file is owned by the replay file
    // it came from.
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut owner = Vec::new();
    let mut opts = Options::default();
    for (i, (p, format)) in files.iter().enumerate() {
        let found = rctl_logs::input::expand(&[p.to_path_buf()])
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if found.is_empty() {
            return Err(format!("{}: no file in this folder", p.display()));
        }
        for f in found {
            if let Some(name) = format {
                let fmt = by_name(name, &Spec::default())
                    .map_err(|e| format!("{}: format {name:?}: {e}", p.display()))?;
                opts.formats.push((f.clone(), fmt));
            }
            owner.push(i);
            paths.push(f);
        }
    }
    let (summary, _) = rctl_logs::read_requests(&paths, &opts, |i, k, r| each(owner[i], k, r))
        .map_err(|e| e.to_string())?;
    if let Some(e) = summary.errors.first() {
        return Err(e.clone());
    }
    for (name, l) in &summary.inputs {
        if l.bad_lines > 0 {
            let first = l.bad.first().map_or(String::new(), |b| {
                format!(
                    ", the first at line {} (byte {}): {}: {}",
                    b.line, b.offset, b.reason, b.excerpt
                )
            });
            return Err(format!(
                "{name}: {} bad lines, which are not judged{first}",
                l.bad_lines
            ));
        }
    }
    Ok(())
}
