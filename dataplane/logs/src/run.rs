//! A dry run over logs: every line of every input through the engine,
//! inputs merged in time order, bad lines counted with their positions.

use crate::detect::{self, Spec};
use crate::format::Format;
use crate::input;
use crate::lines::{LineReader, Next, MAX_LINE};
use crate::record::{HeaderBuf, Record};
use crate::reorder::{Reorder, MAX_HELD_BYTES};
use crate::template::Mismatch;
use rctl_dataplane::dryrun::{BadLine, DryRun, LogInput};
use rctl_dataplane::partial::Known;
use std::fmt;
use std::io::{self, Read};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Bad lines kept per input, for the report.
pub const BAD_EXAMPLES: usize = 10;

/// How logs are read.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--log-format`; detected from the first lines if `None`.
    pub format: Option<String>,
    /// What formats need besides their name.
    pub spec: Spec,
    /// `--client-ip-field`: a header, and trusted proxies to skip.
    pub client_ip_field: Option<(String, Vec<(IpAddr, u8)>)>,
    /// The longest line read.
    pub max_line: usize,
    /// `--sampled N`: one line in N was kept (throttles are not run).
    pub sampled: Option<u64>,
    /// Inputs whose format is given whole, by path, instead of named or
    /// detected: a tap of the agent (`rctl dry-run --agent`) is
    /// webrequest, but carries only the headers the agent received, so
    /// its format's [`Format::known`] is narrowed to them. Neither
    /// `format` nor `client_ip_field` applies to them (a tap's `ip` is
    /// the client as the agent judged it).
    pub formats: Vec<(PathBuf, Format)>,
    /// `--reorder-window`: a text log's lines are held this long (of
    /// their time) and judged in time order within it (see
    /// [`crate::reorder`]); `None`, in file order.
    pub reorder_window_ns: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            format: None,
            spec: Spec::default(),
            client_ip_field: None,
            max_line: MAX_LINE,
            sampled: None,
            formats: Vec::new(),
            reorder_window_ns: None,
        }
    }
}

/// What stops a run before it starts: an input that cannot be opened,
/// or a format that cannot be had.
#[derive(Debug)]
pub enum LogError {
    /// The input could not be opened.
    Open(PathBuf, io::Error),
    /// The format is unknown, cannot be detected or does not fit a flag.
    Format(String, String),
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Open(p, e) => write!(f, "cannot open {}: {e}", p.display()),
            LogError::Format(p, e) => write!(f, "{p}: {e}"),
        }
    }
}

impl std::error::Error for LogError {}

/// What was read, per input.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Per input: its name and what was read from it.
    pub inputs: Vec<(String, LogInput)>,
    /// Read errors that stopped an input (everything before counts).
    pub errors: Vec<String>,
}

impl Summary {
    /// Bad lines over all inputs.
    pub fn bad_lines(&self) -> u64 {
        self.inputs.iter().map(|(_, l)| l.bad_lines).sum()
    }

    /// The coarsest time resolution of the inputs, ns.
    pub fn resolution_ns(&self) -> u64 {
        self.inputs
            .iter()
            .map(|(_, l)| l.resolution_ns)
            .max()
            .unwrap_or(0)
    }
}

/// A line's first bytes, escaped, for a report.
pub fn excerpt(line: &[u8]) -> String {
    let mut s = String::new();
    for &b in line.iter().take(80) {
        match b {
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    if line.len() > 80 {
        s.push('…');
    }
    s
}

fn reason(m: Mismatch) -> String {
    match m {
        Mismatch::Literal(p) => format!("does not fit the format at byte {p}"),
        Mismatch::Unterminated(p) => format!("a field from byte {p} has no end"),
        Mismatch::Value(p, what) => format!("not a valid {what} at byte {p}"),
        Mismatch::Missing(what) => format!("no {what}"),
    }
}

/// One input being read.
pub struct Source {
    /// Its name.
    pub name: String,
    reader: LineReader<Box<dyn Read + Send>>,
    /// Its format.
    pub format: Format,
    rec: Record,
    arena: Vec<u8>,
    /// Its index in the dry run.
    pub id: usize,
    /// What was read.
    pub stats: LogInput,
    /// A parsed line waits in `rec`.
    ready: bool,
    /// Requests whose time was written to the second, and the coarsest
    /// resolution among the others (what the lines write, which the
    /// format alone does not say: `$msec`, `%Ts`, ISO 8601 fractions).
    whole_seconds: u64,
    finer_ns: u64,
    /// The file it reads, to open again from its start (not stdin).
    path: Option<PathBuf>,
    /// Closed, its first request's time in `rec`, until that is due.
    waiting: bool,
    /// Whether [`Source::first_then_close`] found a request, once run.
    primed: Option<bool>,
    max_line: usize,
    /// The read error that stopped it.
    pub error: Option<String>,
    /// Lines held to be judged in time order (`--reorder-window`), the
    /// line handed out (what `rec` points into), and whether the reader
    /// has ended.
    reorder: Option<Reorder>,
    released: Vec<u8>,
    read_all: bool,
    /// The latest time judged so far.
    latest_ns: u64,
    /// A Parquet table's rows, read instead of lines.
    #[cfg(feature = "parquet")]
    rows: Option<crate::parquet::Rows>,
    /// An out-of-order table waits unread, its earliest time in `rec`.
    #[cfg(feature = "parquet")]
    deferred: bool,
}

/// The format of an input: named, or detected from its first lines.
pub fn format_for(opts: &Options, head: &[u8], name: &str) -> Result<Format, LogError> {
    let given = opts
        .formats
        .iter()
        .find(|(p, _)| p.display().to_string() == name);
    if let Some((_, f)) = given {
        let mut f = f.clone();
        if opts.sampled.is_some() {
            f.known.complete = false;
        }
        return Ok(f);
    }
    let mut f = match &opts.format {
        Some(n) => detect::by_name(n, &opts.spec),
        // Nothing to judge (a log just rotated): no format to find.
        None if head.is_empty() => return Ok(detect::empty()),
        None => {
            let lines: Vec<&[u8]> = head.split(|&b| b == b'\n').take(20).collect();
            // The last piece may be cut short.
            let n = if head.ends_with(b"\n") || lines.len() < 2 {
                lines.len()
            } else {
                lines.len() - 1
            };
            detect::detect(&lines[..n], &opts.spec)
        }
    }
    .map_err(|e| LogError::Format(name.to_string(), e))?;
    if let Some((h, trusted)) = &opts.client_ip_field {
        f.set_client_ip_field(h, trusted.clone())
            .map_err(|e| LogError::Format(name.to_string(), e))?;
    }
    if opts.sampled.is_some() {
        f.known.complete = false;
    }
    Ok(f)
}

impl Source {
    /// Opens `path` and finds its format; registers it with the run.
    pub fn open(run: &mut DryRun, path: &Path, opts: &Options) -> Result<Source, LogError> {
        #[cfg(feature = "parquet")]
        if path != Path::new("-") && input::starts_with(path, crate::parquet::MAGIC) {
            let lacks = |k: &rctl_dataplane::partial::Known| run.missing_for(k);
            let mut s = Source::open_parquet(path, opts, &lacks)?;
            s.id = run.add_request_input(&s.name, &s.format.name, &s.format.known);
            return Ok(s);
        }
        let (r, _) = input::open(path).map_err(|e| LogError::Open(path.to_path_buf(), e))?;
        let mut s = Source::from_reader(run, &path.display().to_string(), r, opts)?;
        s.reopenable(path, opts);
        Ok(s)
    }

    /// Lets a source of `path` be closed while it waits its turn.
    fn reopenable(&mut self, path: &Path, opts: &Options) {
        if path != Path::new("-") {
            self.path = Some(path.to_path_buf());
            self.max_line = opts.max_line;
        }
    }

    /// Among many inputs: reads to the first request, keeps its time,
    /// then closes the file until that time is due (a week of rotated
    /// logs holds one file of each host open, not all of them). What was
    /// read is read again then; false if the input has no request.
    fn first_then_close(&mut self) -> bool {
        if let Some(had) = self.primed.take() {
            return had;
        }
        if !self.fill() {
            self.reader = LineReader::new(Box::new(io::empty()), 0);
            return false;
        }
        if self.path.is_none() {
            return true;
        }
        let t = self.rec.time_ns;
        self.stats = LogInput {
            format: self.format.name.clone(),
            resolution_ns: self.format.resolution_ns,
            ..LogInput::default()
        };
        (self.whole_seconds, self.finer_ns) = (0, 0);
        (self.read_all, self.latest_ns) = (false, 0);
        if let Some(r) = &mut self.reorder {
            r.clear();
        }
        self.reader = LineReader::new(Box::new(io::empty()), 0);
        self.rec.clear();
        self.rec.time_ns = t;
        self.waiting = true;
        true
    }

    /// A Parquet table (refined webrequest): the columns decoded are those
    /// `lacks` says the reader needs (see [`crate::parquet::table`]).
    #[cfg(feature = "parquet")]
    fn open_parquet(
        path: &Path,
        opts: &Options,
        lacks: &dyn Fn(&rctl_dataplane::partial::Known) -> Vec<String>,
    ) -> Result<Source, LogError> {
        let name = path.display().to_string();
        let refuse = |why: String| LogError::Format(name.clone(), why);
        if let Some(f) = opts
            .format
            .as_deref()
            .filter(|f| *f != "webrequest-parquet")
        {
            return Err(refuse(format!(
                "a Parquet file, which is read as webrequest-parquet, not {f}: leave --log-format out or name webrequest-parquet"
            )));
        }
        if opts.client_ip_field.is_some() {
            return Err(refuse(
                "--client-ip-field is not read from Parquet tables: their ip column is the client's".into(),
            ));
        }
        let table = crate::parquet::table(path, lacks).map_err(|e| refuse(e.to_string()))?;
        let rows = crate::parquet::Rows::open(path, table).map_err(|e| refuse(e.to_string()))?;
        let mut format = rows.format().clone();
        if opts.sampled.is_some() {
            format.known.complete = false;
        }
        let empty: Box<dyn Read + Send> = Box::new(io::empty());
        let mut src = Source::with_format(&name, LineReader::new(empty, opts.max_line), format);
        src.stats.columns = rows.columns().to_vec();
        src.rows = Some(rows);
        Ok(src)
    }

    /// A source reading `r`.
    pub fn from_reader(
        run: &mut DryRun,
        name: &str,
        r: Box<dyn Read + Send>,
        opts: &Options,
    ) -> Result<Source, LogError> {
        let mut s = Source::detached(name, r, opts)?;
        s.id = run.add_request_input(name, &s.format.name, &s.format.known);
        Ok(s)
    }

    /// Opens `path` and finds its format, for a reader of its requests
    /// that is not a dry run ([`read_requests`]).
    pub fn open_detached(path: &Path, opts: &Options) -> Result<Source, LogError> {
        #[cfg(feature = "parquet")]
        if path != Path::new("-") && input::starts_with(path, crate::parquet::MAGIC) {
            // No ruleset to ask: every column the table has is decoded.
            return Source::open_parquet(path, opts, &crate::parquet::every_lack);
        }
        let (r, _) = input::open(path).map_err(|e| LogError::Open(path.to_path_buf(), e))?;
        let mut s = Source::detached(&path.display().to_string(), r, opts)?;
        s.reopenable(path, opts);
        Ok(s)
    }

    /// A source reading `r`, registered with no run (its `id` is 0 until
    /// a run registers it).
    pub fn detached(
        name: &str,
        r: Box<dyn Read + Send>,
        opts: &Options,
    ) -> Result<Source, LogError> {
        let (head, r) = input::peek(r).map_err(|e| LogError::Open(name.into(), e))?;
        if head.starts_with(b"PAR1") {
            return Err(LogError::Format(
                name.to_string(),
                "a Parquet table is read as a file, not followed or read from a pipe: give its path to --log, without --follow".into(),
            ));
        }
        let format = format_for(opts, &head, name)?;
        let mut s = Source::with_format(name, LineReader::new(r, opts.max_line), format);
        s.reorder = opts
            .reorder_window_ns
            .map(|w| Reorder::new(w, MAX_HELD_BYTES));
        Ok(s)
    }

    /// A source of `format` reading `reader`, registered with no run.
    fn with_format(name: &str, reader: LineReader<Box<dyn Read + Send>>, format: Format) -> Source {
        Source {
            name: name.to_string(),
            reader,
            stats: LogInput {
                format: format.name.clone(),
                resolution_ns: format.resolution_ns,
                ..LogInput::default()
            },
            format,
            rec: Record::default(),
            arena: Vec::new(),
            id: 0,
            ready: false,
            whole_seconds: 0,
            finer_ns: 0,
            path: None,
            waiting: false,
            primed: None,
            max_line: crate::lines::MAX_LINE,
            error: None,
            reorder: None,
            released: Vec::new(),
            read_all: false,
            latest_ns: 0,
            #[cfg(feature = "parquet")]
            rows: None,
            #[cfg(feature = "parquet")]
            deferred: false,
        }
    }

    /// Followed live (or no longer, `false`): lines held for
    /// `--reorder-window` also go out once a window of wall time has
    /// passed since they were read, and the end of what has come is not
    /// the end of the input (see [`crate::reorder`]). At the end of
    /// following, what is held is judged at the end of what has come.
    pub fn set_live(&mut self, live: bool) {
        if let Some(r) = &mut self.reorder {
            r.set_live(live);
        }
    }

    /// The reader, for a follower.
    pub fn reader_mut(&mut self) -> &mut LineReader<Box<dyn Read + Send>> {
        &mut self.reader
    }

    fn bad(&mut self, why: String, excerpt: String) {
        self.stats.bad_lines += 1;
        #[cfg(feature = "parquet")]
        let (line, offset) = match &self.rows {
            Some(r) => (r.row, 0),
            None => (self.reader.line_no(), self.reader.offset()),
        };
        #[cfg(not(feature = "parquet"))]
        let (line, offset) = (self.reader.line_no(), self.reader.offset());
        if self.stats.bad.len() < BAD_EXAMPLES {
            self.stats.bad.push(BadLine {
                line,
                offset,
                reason: why,
                excerpt,
            });
        }
    }

    /// Reads on to the next line that parses; false at the end (or at a
    /// read error, kept in `error`; followed live, at the end of what
    /// has come, with no held line due yet).
    pub fn fill(&mut self) -> bool {
        self.ready = false;
        #[cfg(feature = "parquet")]
        if self.rows.is_some() {
            return self.fill_row();
        }
        loop {
            if let Some(r) = &mut self.reorder {
                if let Some(line) = r.pop_due(self.read_all) {
                    r.recycle(std::mem::replace(&mut self.released, line));
                    // It parsed when it was read.
                    if self
                        .format
                        .parse(&self.released, &mut self.rec, &mut self.arena)
                        .is_ok()
                    {
                        self.ready = true;
                        return true;
                    }
                    continue;
                }
                if self.read_all {
                    // Done: its memory is let go now, not at the end.
                    r.clear();
                    return false;
                }
            }
            match self.reader.advance() {
                Ok(Next::Line) => {
                    self.stats.lines += 1;
                    let line = self.reader.line();
                    if line.is_empty() {
                        self.stats.lines -= 1;
                        continue;
                    }
                    match self.format.parse(line, &mut self.rec, &mut self.arena) {
                        Ok(()) => {
                            if let Some(r) = &mut self.reorder {
                                r.push(self.rec.time_ns, line);
                                continue;
                            }
                            self.ready = true;
                            return true;
                        }
                        Err(m) => {
                            let ex = excerpt(line);
                            self.bad(reason(m), ex);
                        }
                    }
                }
                Ok(Next::TooLong { len }) => {
                    self.stats.lines += 1;
                    self.bad(
                        format!("{len} bytes long, over the bound on a line"),
                        String::new(),
                    );
                }
                Ok(Next::End) => match &mut self.reorder {
                    // Followed live: the end of what has come so far.
                    Some(r) if r.is_live() => {
                        r.wait(std::time::Instant::now());
                        if !r.is_due(false) {
                            return false;
                        }
                    }
                    Some(_) => self.read_all = true,
                    None => return false,
                },
                Err(e) => {
                    self.error = Some(format!("{}: {e}", self.name));
                    if self.reorder.is_none() {
                        return false;
                    }
                    // What was held before the error is judged.
                    self.read_all = true;
                }
            }
        }
    }

    /// The next row of a Parquet table that is a request.
    #[cfg(feature = "parquet")]
    fn fill_row(&mut self) -> bool {
        loop {
            let Some(rows) = self.rows.as_mut() else {
                return false;
            };
            if rows.needs_load() && !self.deferred {
                // Read whole only when its first row is due.
                self.rec.clear();
                self.rec.time_ns = rows.first_ns;
                self.deferred = true;
                self.ready = true;
                return true;
            }
            self.deferred = false;
            match rows.next_row(&mut self.rec, &mut self.arena) {
                None => {
                    // Done: its batches are let go now, not at the end.
                    self.rows = None;
                    return false;
                }
                Some(Ok(Ok(()))) => {
                    self.stats.lines += 1;
                    self.ready = true;
                    return true;
                }
                Some(Ok(Err(why))) => {
                    self.stats.lines += 1;
                    let row = format!("row {}", rows.row);
                    self.bad(why.to_string(), row);
                }
                Some(Err(e)) => {
                    self.error = Some(format!("{}: {e}", self.name));
                    self.rows = None;
                    return false;
                }
            }
        }
    }

    /// Whether it waits unopened at its earliest time (a Parquet table,
    /// or a file closed until its first request is due).
    fn deferred(&self) -> bool {
        #[cfg(feature = "parquet")]
        return self.waiting || self.deferred;
        #[cfg(not(feature = "parquet"))]
        self.waiting
    }

    /// Opens a table or file waiting at its earliest time and reads its
    /// first request; false if it has none.
    fn undefer(&mut self) -> bool {
        if self.waiting {
            self.waiting = false;
            let Some(path) = &self.path else {
                return false;
            };
            match input::open(path) {
                Ok((r, _)) => self.reader = LineReader::new(r, self.max_line),
                Err(e) => {
                    self.error = Some(format!("{}: opened again: {e}", self.name));
                    return false;
                }
            }
            return self.fill();
        }
        #[cfg(feature = "parquet")]
        return self.fill_row();
        #[cfg(not(feature = "parquet"))]
        false
    }

    /// The parsed line's time.
    pub fn time_ns(&self) -> u64 {
        self.rec.time_ns
    }

    /// Judges the parsed line.
    pub fn judge(&mut self, run: &mut DryRun, headers: &mut HeaderBuf) {
        self.judge_with(run, headers, |_| {});
    }

    /// Judges the parsed line, and shows the request to `seen`.
    pub fn judge_with(
        &mut self,
        run: &mut DryRun,
        headers: &mut HeaderBuf,
        mut seen: impl FnMut(&rctl_dataplane::Request<'_>),
    ) {
        let id = self.id;
        self.with_request(headers, |req, cut| {
            run.log_request_cut(id, req, cut);
            seen(req);
        });
    }

    /// Shows the parsed line's request to `f` (counted as judged), with
    /// the names of its headers whose values may have been cut.
    pub fn with_request(
        &mut self,
        headers: &mut HeaderBuf,
        f: impl FnOnce(&rctl_dataplane::Request<'_>, &[&[u8]]),
    ) {
        #[cfg(feature = "parquet")]
        if self.deferred && !self.fill_row() {
            return;
        }
        if !self.ready {
            return;
        }
        self.ready = false;
        self.stats.judged += 1;
        if !self.rec.cut.is_empty() {
            self.stats.cut_lines += 1;
        }
        if self.rec.unnamed_captures {
            self.stats.unnamed_captures += 1;
        }
        // Judged after a later request: the log is not in time order.
        let t = self.rec.time_ns;
        if t < self.latest_ns {
            self.stats.late_lines += 1;
            self.stats.max_late_ns = self.stats.max_late_ns.max(self.latest_ns - t);
        }
        self.latest_ns = self.latest_ns.max(t);
        if self.rec.resolution_ns >= 1_000_000_000 {
            self.whole_seconds += 1;
        } else {
            self.finer_ns = self.finer_ns.max(self.rec.resolution_ns);
        }
        let line = if self.reorder.is_some() {
            &self.released[..]
        } else {
            self.reader.line()
        };
        headers.with_request(&self.rec, line, &self.arena, &self.format.header_names, f);
    }

    /// The resolution the requests' times were written with: 1 s if most
    /// were written to the second (a serializer that leaves out a zero
    /// fraction writes a few), else the coarsest of the finer ones; the
    /// format's own before any request.
    fn settle_resolution(&mut self) {
        if self.whole_seconds * 2 > self.stats.judged {
            self.stats.resolution_ns = 1_000_000_000;
        } else if self.finer_ns > 0 {
            self.stats.resolution_ns = self.finer_ns;
        }
    }

    /// What was read, and the error that stopped it.
    pub fn done(mut self) -> (String, LogInput, Option<String>) {
        self.settle_resolution();
        (self.name, self.stats, self.error)
    }

    /// Hands what was read to the run's report.
    pub fn finish(mut self, run: &mut DryRun) -> (String, LogInput, Option<String>) {
        self.settle_resolution();
        run.finish_request_input(self.id, self.stats.clone(), self.error.clone());
        (self.name, self.stats, self.error)
    }
}

/// Replays every log in `paths` (files, directories, `-`) through `run`,
/// merged in time order (ties in the order given; within one input, file
/// order).
pub fn replay(run: &mut DryRun, paths: &[PathBuf], opts: &Options) -> Result<Summary, LogError> {
    let files = input::expand(paths).map_err(|e| LogError::Open(paths[0].clone(), e))?;
    let mut sources = Vec::with_capacity(files.len());
    for f in &files {
        let mut s = Source::open(run, f, opts)?;
        if files.len() > 1 {
            // Closed again at once: see `merge`.
            s.primed = Some(s.first_then_close());
        }
        sources.push(s);
    }
    Ok(replay_sources(run, sources))
}

/// Replays opened sources, merged in time order.
pub fn replay_sources(run: &mut DryRun, mut sources: Vec<Source>) -> Summary {
    merge(&mut sources, |s, headers| s.judge(run, headers));
    let mut summary = Summary::default();
    for s in sources {
        let (name, stats, err) = s.finish(run);
        summary.inputs.push((name, stats));
        summary.errors.extend(err);
    }
    summary
}

/// Hands each parsed line of `sources`, merged in time order (ties in
/// their order; within one input, file order), to `each` with its source.
fn merge(sources: &mut [Source], mut each: impl FnMut(&mut Source, &mut HeaderBuf)) {
    let mut headers = HeaderBuf::default();
    if let [s] = sources {
        while s.fill() {
            each(s, &mut headers);
        }
        return;
    }
    // The earliest waiting line first; ties in the inputs' order.
    use std::cmp::Reverse;
    let mut live = std::collections::BinaryHeap::new();
    for (i, s) in sources.iter_mut().enumerate() {
        if s.first_then_close() {
            live.push(Reverse((s.time_ns(), i)));
        }
    }
    while let Some(Reverse((_, i))) = live.pop() {
        let s = &mut sources[i];
        if s.deferred() {
            // Due: opened now, and its first request (which may be later
            // than its earliest time, if the earliest rows are bad) taken
            // in its turn.
            if s.undefer() {
                live.push(Reverse((s.time_ns(), i)));
            } else {
                s.reader = LineReader::new(Box::new(io::empty()), 0);
            }
            continue;
        }
        each(s, &mut headers);
        if s.fill() {
            live.push(Reverse((s.time_ns(), i)));
        } else {
            // Read to its end: its file and buffer are let go now.
            s.reader = LineReader::new(Box::new(io::empty()), 0);
        }
    }
}

/// Every request of the logs in `paths` (files, directories, `-`),
/// merged in time order as [`replay`] merges them, handed to `each` with
/// the index of its input (into `formats`, the second value returned:
/// each input's format), the fields that input carries and the captured
/// headers of the request that may have been cut, without a dry run.
/// Reading can be done again for a second pass over the same files
/// (standard input cannot be read twice).
pub fn read_requests(
    paths: &[PathBuf],
    opts: &Options,
    mut each: impl FnMut(usize, &Known, &rctl_dataplane::Request<'_>, &[&[u8]]),
) -> Result<(Summary, Vec<Format>), LogError> {
    let files = input::expand(paths).map_err(|e| LogError::Open(paths[0].clone(), e))?;
    let mut sources = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let mut s = Source::open_detached(f, opts)?;
        s.id = i;
        if files.len() > 1 {
            s.primed = Some(s.first_then_close());
        }
        sources.push(s);
    }
    let known: Vec<Known> = sources.iter().map(|s| s.format.known.clone()).collect();
    merge(&mut sources, |s, headers| {
        let id = s.id;
        s.with_request(headers, |req, cut| each(id, &known[id], req, cut));
    });
    let mut summary = Summary::default();
    let mut formats = Vec::with_capacity(sources.len());
    for s in sources {
        formats.push(s.format.clone());
        let (name, stats, err) = s.done();
        summary.inputs.push((name, stats));
        summary.errors.extend(err);
    }
    Ok((summary, formats))
}
