//! What `rctl test` reads for a test's `replay` lines: access logs through
//! `rctl_logs` (their format named or detected, folders walked, gzip and
//! zstd read), merged in time order, or one packet capture. Each file is
//! read once, however many replay lines name it (directly or through a
//! folder). A file that cannot be read whole fails the run: a bad line is
//! not judged, and a test on part of a file is not the test written.

use rctl_dataplane::partial::Known;
use rctl_dataplane::testing::replay::Each;
use rctl_dataplane::testing::{ReplayFile, Replayer};
use rctl_logs::detect::{by_name, Spec};
use rctl_logs::run::Options;
use rctl_logs::template::Capture;
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

/// One file to read: where, in which format (with the headers an HAProxy
/// log captured), for which replayed files.
struct Input {
    path: PathBuf,
    format: Option<String>,
    captured: Vec<(String, Option<usize>)>,
    of: Vec<usize>,
}

/// The files behind `files`, each once (by its canonical path), with the
/// replayed files it belongs to. Only regular files are read: a FIFO or a
/// device named by a rule file is refused before it is opened.
fn inputs(files: &[ReplayFile<'_>]) -> Result<Vec<Input>, String> {
    let mut out: Vec<Input> = Vec::new();
    for (i, r) in files.iter().enumerate() {
        let (p, format) = (r.path, r.format);
        if p.as_os_str() == "-" {
            return Err("a test replays files, not standard input".into());
        }
        let found = rctl_logs::input::expand(&[p.to_path_buf()])
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if found.is_empty() {
            return Err(format!("{}: no file in this folder", p.display()));
        }
        for f in found {
            let meta = std::fs::metadata(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            if !meta.is_file() {
                return Err(format!("{}: not a regular file", f.display()));
            }
            let path = std::fs::canonicalize(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            let format = format.map(str::to_string);
            match out.iter_mut().find(|x| x.path == path) {
                Some(x) => {
                    if x.format.is_some() && format.is_some() && x.format != format {
                        return Err(format!(
                            "{}: replayed as {:?} and as {:?}: a file has one format",
                            path.display(),
                            x.format.as_deref().unwrap_or_default(),
                            format.as_deref().unwrap_or_default()
                        ));
                    }
                    // One list (or none) per file: a line without
                    // `captured` does not read the captured headers, and
                    // would be judged otherwise if another line's list
                    // applied to it.
                    if x.captured != r.captured {
                        return Err(format!(
                            "{}: replayed with different lists of captured headers (or with and without one): a file has one",
                            path.display()
                        ));
                    }
                    x.format = x.format.take().or(format);
                    if !x.of.contains(&i) {
                        x.of.push(i);
                    }
                }
                None => out.push(Input {
                    path,
                    format,
                    captured: r.captured.to_vec(),
                    of: vec![i],
                }),
            }
        }
    }
    Ok(out)
}

impl Replayer for Files {
    fn replay(&mut self, files: &[ReplayFile<'_>], each: &mut Each<'_>) -> Result<(), String> {
        let inputs = inputs(files)?;
        if let Some(c) = inputs
            .iter()
            .find(|x| x.format.is_none() && is_capture(&x.path))
        {
            if inputs.len() > 1 {
                return Err(format!(
                    "{}: a test replays one capture, or logs; this one reads {} files",
                    c.path.display(),
                    inputs.len()
                ));
            }
            return capture(c, each);
        }
        logs(&inputs, each)
    }
}

fn capture(c: &Input, each: &mut Each<'_>) -> Result<(), String> {
    let f = std::fs::File::open(&c.path).map_err(|e| format!("{}: {e}", c.path.display()))?;
    let known = Known::all();
    let err = rctl_dataplane::dryrun::each_request_in(std::io::BufReader::new(f), |r| {
        r.with_request(|req| each(&c.of, 0, &known, req, &[]))
    });
    match err {
        Some(e) => Err(format!("{}: {e}", c.path.display())),
        None => Ok(()),
    }
}

fn logs(inputs: &[Input], each: &mut Each<'_>) -> Result<(), String> {
    let mut opts = Options::default();
    for x in inputs {
        let spec = Spec {
            captures: x
                .captured
                .iter()
                .map(|(name, len)| Capture {
                    name: name.clone(),
                    len: *len,
                })
                .collect(),
        };
        let captured = !spec.captures.is_empty();
        let parquet = rctl_logs::input::starts_with(&x.path, b"PAR1");
        let fmt = match &x.format {
            Some(name) => by_name(name, &spec)
                .map_err(|e| format!("{}: format {name:?}: {e}", x.path.display()))?,
            // Detected, with these captures (a Parquet file is rows,
            // detected by its reader).
            None if captured && !parquet => detected(&x.path, spec)?,
            None if captured => return Err(no_slots(&x.path, "webrequest Parquet")),
            None => continue,
        };
        // Only HAProxy's formats have capture slots.
        if captured && !fmt.name.starts_with("haproxy") {
            return Err(no_slots(&x.path, &fmt.name));
        }
        opts.formats.push((x.path.clone(), fmt));
    }
    let paths: Vec<PathBuf> = inputs.iter().map(|x| x.path.clone()).collect();
    let (summary, _) = rctl_logs::read_requests(&paths, &opts, |i, k, r, cut| {
        each(&inputs[i].of, i, k, r, cut)
    })
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

/// The format of the log at `path`, detected from its first lines with
/// the capture slots `spec` names.
fn detected(path: &Path, spec: Spec) -> Result<rctl_logs::format::Format, String> {
    let (r, _) = rctl_logs::input::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut head = Vec::with_capacity(64 * 1024);
    r.take(64 * 1024)
        .read_to_end(&mut head)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let opts = Options {
        spec,
        ..Options::default()
    };
    let name = path.display().to_string();
    rctl_logs::run::format_for(&opts, &head, &name).map_err(|e| e.to_string())
}

/// The error for `captured` on a log whose format has no capture slots.
fn no_slots(path: &Path, format: &str) -> String {
    format!(
        "{}: `captured` names HAProxy's capture slots, and this log is {format}, which has none",
        path.display()
    )
}
