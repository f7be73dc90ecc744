//! Requests in Arrow record batches of the `webrequest` schema, decided
//! in bulk: one call a batch, no work per row outside Rust.
//!
//! [`Decider::decide`] decides a batch as the live engine would, its
//! limiters counting across calls. The rest are the stages of a dry run
//! split over many workers ([`crate`]'s plan): [`Decider::stage`] takes
//! every row as far as the stateless rules and the throttle outcomes
//! already known take it, and says which throttle rule it waits at, with
//! its key; [`Decider::hit`] runs one throttle rule's own limiter over
//! rows of whole keys in time order; [`Tally`] counts rows whose
//! throttles are all known into `rctl dry-run`'s report, the same code
//! the single-machine dry run counts with.

use arrow_array::builder::{BinaryBuilder, Int32Builder, Int64Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use rctl_compiler::ir::{Action, Ruleset};
use rctl_dataplane::dryrun::{BadLine, DryRun, LogInput};
use rctl_dataplane::limiter::Outcome;
use rctl_dataplane::partial::{Blind, Judged, Known, PartialTrace};
use rctl_dataplane::{Engine, EngineConfig, Replay, Request, Scratch, Verdict};
use rctl_logs::parquet::{fill_row, table_of_schema, Table};
use rctl_logs::record::{HeaderBuf, Record};
use std::fmt;
use std::sync::Arc;

/// The column of throttle outcomes a row carries between stages.
pub const REPLAY: &str = "_rctl_replay";
/// The row's time, ns since the epoch (null: a bad row).
pub const TIME: &str = "_rctl_t";
/// The throttle rule the row waits at (-1: none, its decision is whole).
pub const PENDING: &str = "_rctl_pending";
/// The row's limiter key for that rule.
pub const KEY: &str = "_rctl_key";
/// Why the row is not a request (null: it is one).
pub const BAD: &str = "_rctl_bad";

/// How many bad rows a report keeps as examples (as a log's does).
const BAD_EXAMPLES: usize = 10;

/// What can go wrong; every one is a Python exception, never a panic.
#[derive(Debug)]
pub enum Error {
    /// The artifact cannot be read (another format version, corrupt).
    Artifact(String),
    /// The ruleset cannot be loaded into an engine.
    Engine(String),
    /// The table's schema cannot be read as `webrequest`: a required
    /// column is missing, or a column has a type that is not text.
    Schema(String),
    /// A batch does not hold what the call needs (a stage's column).
    Batch(String),
    /// No throttle rule of that index.
    NoThrottle(usize),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Artifact(e) => write!(f, "artifact: {e}"),
            Error::Engine(e) => write!(f, "ruleset: {e}"),
            Error::Schema(e) => write!(f, "table: {e}"),
            Error::Batch(e) => write!(f, "batch: {e}"),
            Error::NoThrottle(i) => {
                write!(f, "rule {i} is not a throttle rule on the request path")
            }
        }
    }
}

impl std::error::Error for Error {}

/// One outcome in a [`REPLAY`] value: the rule (u32) and the retry
/// delay in ns (i64; -1 for allowed), little-endian.
const ENTRY: usize = 12;

/// Decodes a [`REPLAY`] value; a malformed one is an error, not a panic.
pub fn decode_replay(bytes: &[u8], out: &mut Replay) -> Result<(), Error> {
    out.clear();
    if !bytes.len().is_multiple_of(ENTRY) {
        return Err(Error::Batch(format!(
            "{REPLAY}: {} bytes, not a whole number of entries",
            bytes.len()
        )));
    }
    for e in bytes.chunks_exact(ENTRY) {
        let rule = u32::from_le_bytes([e[0], e[1], e[2], e[3]]) as usize;
        let mut d = [0u8; 8];
        d.copy_from_slice(&e[4..]);
        let d = i64::from_le_bytes(d);
        let o = match u64::try_from(d) {
            Ok(retry_after_ns) => Outcome::Limited { retry_after_ns },
            Err(_) => Outcome::Allowed,
        };
        out.outcomes.push((rule, o));
    }
    Ok(())
}

fn encode_entry(rule: usize, o: Outcome, out: &mut Vec<u8>) {
    out.extend_from_slice(&(rule as u32).to_le_bytes());
    let d = match o {
        Outcome::Allowed => -1i64,
        Outcome::Limited { retry_after_ns } => i64::try_from(retry_after_ns).unwrap_or(i64::MAX),
    };
    out.extend_from_slice(&d.to_le_bytes());
}

/// A compiled ruleset, loaded to decide batches.
pub struct Decider {
    ruleset: Ruleset,
    site: Option<String>,
    engine: Engine,
    scratch: Scratch,
    trace: PartialTrace,
    headers: HeaderBuf,
    rec: Record,
    arena: Vec<u8>,
    /// The table worked out for the last schema seen, and that schema.
    table: Option<(Arc<Schema>, Table, Blind)>,
}

/// The rows of one batch, read as `webrequest` requests.
fn column<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a ArrayRef> {
    batch.schema().index_of(name).ok().map(|i| batch.column(i))
}

/// The batch's [`REPLAY`] column, if it has one.
fn replays_of(batch: &RecordBatch) -> Result<Option<arrow_array::BinaryArray>, Error> {
    match column(batch, REPLAY) {
        Some(a) if *a.data_type() == DataType::Binary => Ok(Some(a.as_binary::<i32>().clone())),
        Some(a) => Err(Error::Batch(format!(
            "{REPLAY} is {}, not binary",
            a.data_type()
        ))),
        None => Ok(None),
    }
}

impl Decider {
    /// Loads an artifact (`rctl compile`'s output) for `site` (`None`:
    /// every rule that names no site).
    pub fn load(artifact: &[u8], site: Option<String>) -> Result<Decider, Error> {
        let ruleset = rctl_compiler::artifact::decode(artifact)
            .map_err(|e| Error::Artifact(e.to_string()))?;
        Decider::load_ruleset(ruleset, site)
    }

    /// The rules' names, in evaluation order.
    pub fn rule_names(&self) -> Vec<String> {
        self.ruleset.rules.iter().map(|r| r.name.clone()).collect()
    }

    /// The throttle rules that take part in request decisions on this
    /// site, in evaluation order: one limiter stage each (shadow ones
    /// too: a shadow throttle counts, to report what it would do).
    pub fn throttles(&self) -> Vec<usize> {
        (0..self.ruleset.rules.len())
            .filter(|&i| {
                matches!(self.ruleset.rules[i].action, Action::Throttle(_))
                    && self.engine.on_request_path(i)
            })
            .collect()
    }

    /// What the ruleset reads that an input carrying `known` lacks.
    fn lacks(engine: &Engine, n: usize, known: &Known) -> Vec<String> {
        let b = engine.blind(known);
        let mut v: Vec<String> = (0..n).flat_map(|i| b.missing(i).to_vec()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// The columns of a table of `schema` to read: those the ruleset
    /// reads, and the time, address, path, User-Agent and
    /// Accept-Language the report counts (as `rctl dry-run --log` decodes
    /// a Parquet table). A missing `ip` or time column, or a column of a
    /// type that is not text, is an error.
    pub fn table(&self, schema: &Schema) -> Result<Table, Error> {
        let n = self.ruleset.rules.len();
        table_of_schema(schema, &|k| Self::lacks(&self.engine, n, k))
            .map_err(|e| Error::Schema(e.to_string()))
    }

    /// The fields the ruleset reads that a table of `schema` lacks: rules
    /// reading them are not judged on it.
    pub fn missing(&self, schema: &Schema) -> Result<Vec<String>, Error> {
        let t = self.table(schema)?;
        Ok(Self::lacks(
            &self.engine,
            self.ruleset.rules.len(),
            &t.format.known,
        ))
    }

    /// The table for this batch's schema, worked out once per schema.
    fn ready(&mut self, batch: &RecordBatch) -> Result<RecordBatch, Error> {
        let schema = batch.schema();
        if self.table.as_ref().map(|(s, _, _)| s) != Some(&schema) {
            let t = self.table(&schema)?;
            let blind = self.engine.blind(&t.format.known);
            self.table = Some((schema, t, blind));
        }
        let (_, t, _) = self.table.as_ref().ok_or(Error::Batch("no table".into()))?;
        batch
            .project(t.indices())
            .map_err(|e| Error::Batch(e.to_string()))
    }

    /// Runs `f` on each row of `batch` as a request (`Err(why)` for a
    /// row that is not one), with the row's replay set first when
    /// `replays` is given.
    fn each_row(
        &mut self,
        batch: &RecordBatch,
        replay: bool,
        mut f: impl FnMut(
            usize,
            Result<
                (
                    &Request<'_>,
                    &Engine,
                    &Blind,
                    &mut Scratch,
                    &mut PartialTrace,
                ),
                &'static str,
            >,
        ),
    ) -> Result<(), Error> {
        let proj = self.ready(batch)?;
        let replays = if replay { replays_of(batch)? } else { None };
        let Decider {
            engine,
            scratch,
            trace,
            headers,
            rec,
            arena,
            table,
            ..
        } = self;
        let (_, t, blind) = table.as_ref().ok_or(Error::Batch("no table".into()))?;
        for r in 0..proj.num_rows() {
            if replay {
                let mut rp = scratch.replay.take().unwrap_or_default();
                match replays.as_ref().filter(|a| !a.is_null(r)) {
                    Some(a) => decode_replay(a.value(r), &mut rp)?,
                    None => rp.clear(),
                }
                scratch.replay = Some(rp);
            }
            match fill_row(t, &proj, r, rec, arena) {
                Err(why) => f(r, Err(why)),
                Ok(()) => {
                    headers.with_request(rec, &[], arena, &t.format.header_names, |req, _| {
                        f(r, Ok((req, engine, blind, scratch, trace)))
                    });
                }
            }
        }
        scratch.replay = None;
        Ok(())
    }

    /// Decides every row of `batch` (`webrequest` columns), in row
    /// order, with this decider's limiters (they count across calls).
    /// Returns a batch of `verdict` (`pass`, `allow`, `deny`,
    /// `throttle`, `drop`, `unknown` where the table lacks a field a
    /// deciding rule reads, `bad` for a row that is not a request),
    /// `rule` (the deciding rule, or for `unknown` the rule not judged),
    /// `status` (deny and throttle) and `reason` (for `bad`: why).
    pub fn decide(&mut self, batch: &RecordBatch) -> Result<RecordBatch, Error> {
        let n = batch.num_rows();
        let (mut verdict, mut rule) = (StringBuilder::new(), StringBuilder::new());
        let (mut status, mut reason) = (Int32Builder::with_capacity(n), StringBuilder::new());
        let names = self.rule_names();
        self.each_row(batch, false, |_, row| match row {
            Err(why) => {
                verdict.append_value("bad");
                rule.append_null();
                status.append_null();
                reason.append_value(why);
            }
            Ok((req, engine, blind, scratch, trace)) => {
                let (kind, by, st) = match engine.judge_request(req, blind, scratch, trace) {
                    Judged::Stopped(i) => ("drop", Some(i), None),
                    Judged::Unknown { rule, .. } => ("unknown", Some(rule), None),
                    Judged::Decided(d) => {
                        let st = match &d.verdict {
                            Verdict::Deny { status, .. } | Verdict::Throttle { status, .. } => {
                                Some(i32::from(*status))
                            }
                            _ => None,
                        };
                        (d.verdict.kind(), d.verdict.rule(), st)
                    }
                };
                verdict.append_value(kind);
                rule.append_option(by.and_then(|i| names.get(i)));
                status.append_option(st);
                reason.append_null();
            }
        })?;
        batch_of(vec![
            (
                "verdict",
                DataType::Utf8,
                Arc::new(verdict.finish()) as ArrayRef,
            ),
            ("rule", DataType::Utf8, Arc::new(rule.finish())),
            ("status", DataType::Int32, Arc::new(status.finish())),
            ("reason", DataType::Utf8, Arc::new(reason.finish())),
        ])
    }

    /// One stage of the distributed plan: each row decided with the
    /// throttle outcomes it carries ([`REPLAY`], absent or null: none),
    /// up to the first throttle rule whose outcome it does not carry.
    /// Returns [`TIME`], [`PENDING`] (that rule, or -1 when the decision
    /// is whole: decided, unknown, or a bad row), [`KEY`] (the row's key
    /// for that rule) and [`BAD`].
    pub fn stage(&mut self, batch: &RecordBatch) -> Result<RecordBatch, Error> {
        let n = batch.num_rows();
        let mut time = Int64Builder::with_capacity(n);
        let mut pending = Int32Builder::with_capacity(n);
        let mut key = BinaryBuilder::new();
        let mut bad = StringBuilder::new();
        self.each_row(batch, true, |_, row| match row {
            Err(why) => {
                time.append_null();
                pending.append_value(-1);
                key.append_null();
                bad.append_value(why);
            }
            Ok((req, engine, blind, scratch, trace)) => {
                engine.judge_request(req, blind, scratch, trace);
                time.append_value(i64::try_from(req.time_ns).unwrap_or(i64::MAX));
                match scratch.replay.as_mut().and_then(|r| r.pending.take()) {
                    Some((rule, k)) => {
                        pending.append_value(rule as i32);
                        key.append_value(&k);
                    }
                    None => {
                        pending.append_value(-1);
                        key.append_null();
                    }
                }
                bad.append_null();
            }
        })?;
        batch_of(vec![
            (TIME, DataType::Int64, Arc::new(time.finish()) as ArrayRef),
            (PENDING, DataType::Int32, Arc::new(pending.finish())),
            (KEY, DataType::Binary, Arc::new(key.finish())),
            (BAD, DataType::Utf8, Arc::new(bad.finish())),
        ])
    }

    /// Runs throttle rule `rule`'s limiter (this decider's own, the
    /// engine's) over the rows of `batch`, in row order: each row's
    /// [`KEY`] hit at its [`TIME`]. The rows must be every row that
    /// reaches the rule with those keys, in time order (the caller's
    /// shuffle and sort), possibly over several calls. Returns the
    /// [`REPLAY`] column with each row's outcome appended.
    pub fn hit(&mut self, rule: usize, batch: &RecordBatch) -> Result<ArrayRef, Error> {
        let limiter = self
            .throttles()
            .contains(&rule)
            .then(|| self.engine.limiter(rule))
            .flatten()
            .ok_or(Error::NoThrottle(rule))?;
        let need = |name: &str, t: DataType| match column(batch, name) {
            Some(a) if *a.data_type() == t => Ok(a.clone()),
            Some(a) => Err(Error::Batch(format!(
                "{name} is {}, not {t}",
                a.data_type()
            ))),
            None => Err(Error::Batch(format!("no column {name}"))),
        };
        let keys = need(KEY, DataType::Binary)?;
        let keys = keys.as_binary::<i32>();
        let times = need(TIME, DataType::Int64)?;
        let times = times.as_primitive::<arrow_array::types::Int64Type>();
        let replays = replays_of(batch)?;
        let mut out = BinaryBuilder::new();
        let mut v = Vec::new();
        for r in 0..batch.num_rows() {
            if keys.is_null(r) || times.is_null(r) {
                return Err(Error::Batch(format!("row {r} has no {KEY} or {TIME}")));
            }
            v.clear();
            if let Some(a) = replays.as_ref().filter(|a| !a.is_null(r)) {
                v.extend_from_slice(a.value(r));
            }
            let now = u64::try_from(times.value(r)).unwrap_or(0);
            encode_entry(rule, limiter.hit(keys.value(r), now), &mut v);
            out.append_value(&v);
        }
        Ok(Arc::new(out.finish()))
    }

    /// A report to count whole rows into, for this ruleset and site.
    pub fn tally(&self, name: &str) -> Result<Tally, Error> {
        let run = DryRun::new(self.ruleset.clone(), self.site.clone())
            .map_err(|e| Error::Engine(e.to_string()))?;
        Ok(Tally {
            run,
            name: name.to_string(),
            input: None,
            log: LogInput::default(),
            rows: 0,
            decider: Decider::load_ruleset(self.ruleset.clone(), self.site.clone())?,
        })
    }

    fn load_ruleset(ruleset: Ruleset, site: Option<String>) -> Result<Decider, Error> {
        let config = EngineConfig {
            site: site.clone(),
            ..Default::default()
        };
        let engine =
            Engine::new(ruleset.clone(), &config).map_err(|e| Error::Engine(e.to_string()))?;
        Ok(Decider {
            scratch: engine.scratch(),
            ruleset,
            site,
            engine,
            trace: PartialTrace::default(),
            headers: HeaderBuf::default(),
            rec: Record::default(),
            arena: Vec::new(),
            table: None,
        })
    }
}

fn batch_of(cols: Vec<(&str, DataType, ArrayRef)>) -> Result<RecordBatch, Error> {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, t, _)| Field::new(*n, t.clone(), true))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        cols.into_iter().map(|(_, _, a)| a).collect(),
    )
    .map_err(|e| Error::Batch(e.to_string()))
}

/// `rctl dry-run`'s report over rows whose throttle outcomes are all
/// known ([`REPLAY`]): each row counted by the dry run's own code, its
/// throttle rules taking the replayed outcomes. One tally per partition;
/// the reports are summed afterwards (the `rctl.spark` module).
pub struct Tally {
    run: DryRun,
    name: String,
    input: Option<usize>,
    log: LogInput,
    rows: u64,
    /// Reads the rows (its table and buffers; its engine decides nothing).
    decider: Decider,
}

impl Tally {
    /// Counts every row of `batch`.
    pub fn add(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        let proj = self.decider.ready(batch)?;
        let Decider {
            headers,
            rec,
            arena,
            table,
            ..
        } = &mut self.decider;
        let (_, t, _) = table.as_ref().ok_or(Error::Batch("no table".into()))?;
        let input = match self.input {
            Some(i) => i,
            None => {
                let i = self
                    .run
                    .add_request_input(&self.name, &t.format.name, &t.format.known);
                self.log.format = t.format.name.clone();
                self.log.resolution_ns = t.format.resolution_ns;
                self.log.columns = t.columns.clone();
                self.input = Some(i);
                i
            }
        };
        let replays = replays_of(batch)?;
        let mut rp = Replay::default();
        for r in 0..proj.num_rows() {
            self.rows += 1;
            self.log.lines += 1;
            if let Err(why) = fill_row(t, &proj, r, rec, arena) {
                self.log.bad_lines += 1;
                if self.log.bad.len() < BAD_EXAMPLES {
                    self.log.bad.push(BadLine {
                        line: self.rows,
                        offset: 0,
                        reason: why.to_string(),
                        excerpt: format!("row {}", self.rows),
                    });
                }
                continue;
            }
            match replays.as_ref().filter(|a| !a.is_null(r)) {
                Some(a) => decode_replay(a.value(r), &mut rp)?,
                None => rp.clear(),
            }
            *self.run.replay_mut() = Some(std::mem::take(&mut rp));
            self.log.judged += 1;
            let run = &mut self.run;
            headers.with_request(rec, &[], arena, &t.format.header_names, |req, _| {
                run.log_request(input, req)
            });
            rp = self.run.replay_mut().take().unwrap_or_default();
            if let Some((rule, _)) = rp.pending.take() {
                return Err(Error::Batch(format!(
                    "row {r} reaches throttle rule {rule} without its outcome in {REPLAY}: run its limiter stage first"
                )));
            }
        }
        Ok(())
    }

    /// The report, as `rctl dry-run --format json` writes it.
    pub fn finish(mut self) -> Result<String, Error> {
        if let Some(i) = self.input {
            self.run
                .finish_request_input(i, std::mem::take(&mut self.log), None);
        }
        self.run.name(&self.name, None);
        let report = self.run.finish();
        serde_json::to_string(&report).map_err(|e| Error::Batch(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::StringArray;

    // A deny after two throttles (the second a shadow one).
    const RULES: &str = r#"
rule per_ip { priority 10 when path starts_with "/x" throttle 3 requests per 10s burst 3 by ip }
rule shadow_per_path { priority 20 shadow when path starts_with "/x" throttle 2 requests per 10s by path }
rule deny_y { priority 30 when path == "/x/y" deny 403 "no" }
"#;

    fn decider() -> Decider {
        let c = rctl_compiler::compile_str("t.rctl", RULES, &Default::default());
        let rs = c.ruleset.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
        Decider::load_ruleset(rs, None).unwrap()
    }

    /// 60 requests over 6 s from three addresses on two paths, and a bad row.
    fn traffic() -> RecordBatch {
        let mut dt: Vec<Option<String>> = Vec::new();
        let (mut ip, mut path) = (Vec::new(), Vec::new());
        for i in 0..60u32 {
            dt.push(Some(format!(
                "2026-05-13T12:00:0{}.{:03}Z",
                i / 10,
                (i % 10) * 100
            )));
            ip.push(Some(format!("192.0.2.{}", i % 3)));
            path.push(Some(["/x/a", "/x/y"][(i % 2) as usize].to_string()));
        }
        dt.push(Some("not a time".into()));
        ip.push(Some("192.0.2.1".into()));
        path.push(Some("/x/a".into()));
        let col = |v: Vec<Option<String>>| Arc::new(StringArray::from(v)) as ArrayRef;
        RecordBatch::try_from_iter([("dt", col(dt)), ("ip", col(ip)), ("uri_path", col(path))])
            .unwrap()
    }

    fn core(json: &str) -> Vec<(String, u64, String, u64)> {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let rules = v["rules"].as_array().unwrap().iter().map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["matches"].as_u64().unwrap(),
                r["requests"].to_string(),
                r["would"]["throttle"].as_u64().unwrap(),
            )
        });
        let mut out: Vec<_> = rules.collect();
        out.push((
            "bad".into(),
            v["inputs"][0]["log"]["bad_lines"].as_u64().unwrap(),
            v["series"].to_string(),
            v["totals"]["requests"].as_u64().unwrap(),
        ));
        out
    }

    #[test]
    fn staged_throttles_then_a_tally_make_the_single_runs_report() {
        let batch = traffic();
        // One run: every row through a dry run that counts in its own
        // limiters, as `rctl dry-run --log` does.
        let mut whole = decider().tally("t").unwrap();
        let d = decider();
        let t = d.table(&batch.schema()).unwrap();
        let proj = batch.project(t.indices()).unwrap();
        let input = whole
            .run
            .add_request_input("t", &t.format.name, &t.format.known);
        let (mut rec, mut arena, mut headers) =
            (Record::default(), Vec::new(), HeaderBuf::default());
        let mut bad = 0;
        for r in 0..proj.num_rows() {
            if fill_row(&t, &proj, r, &mut rec, &mut arena).is_err() {
                bad += 1;
                continue;
            }
            headers.with_request(&rec, &[], &arena, &t.format.header_names, |req, _| {
                whole.run.log_request(input, req)
            });
        }
        whole.log = LogInput {
            lines: proj.num_rows() as u64,
            judged: proj.num_rows() as u64 - bad,
            bad_lines: bad,
            ..LogInput::default()
        };
        whole.input = Some(input);
        let want = core(&whole.finish().unwrap());

        // Staged: every row to its first throttle, then each throttle
        // rule's limiter over the rows waiting at it (rows here are in
        // time order already), the rows decided again, then the tally.
        let mut d = decider();
        let mut rows = batch.clone();
        let staged = d.stage(&rows).unwrap();
        let mut replay: Vec<Option<Vec<u8>>> = vec![None; rows.num_rows()];
        let mut pending = staged
            .column(1)
            .as_primitive::<arrow_array::types::Int32Type>()
            .clone();
        let mut keys = staged.column(2).as_binary::<i32>().clone();
        let times = staged.column(0).clone();
        for rule in d.throttles() {
            let mut limits = decider();
            for (r, rp) in replay.iter_mut().enumerate() {
                if pending.value(r) != rule as i32 {
                    continue;
                }
                let one = RecordBatch::try_from_iter([
                    (
                        KEY,
                        Arc::new(arrow_array::BinaryArray::from(vec![keys.value(r)])) as ArrayRef,
                    ),
                    (TIME, times.slice(r, 1)),
                    (
                        REPLAY,
                        Arc::new(arrow_array::BinaryArray::from(vec![rp.as_deref()])) as ArrayRef,
                    ),
                ])
                .unwrap();
                let out = limits.hit(rule, &one).unwrap();
                *rp = Some(out.as_binary::<i32>().value(0).to_vec());
            }
            let col: ArrayRef = Arc::new(arrow_array::BinaryArray::from(
                replay.iter().map(|x| x.as_deref()).collect::<Vec<_>>(),
            ));
            let schema = batch.schema();
            let mut cols: Vec<(&str, ArrayRef)> = schema
                .fields()
                .iter()
                .zip(batch.columns())
                .map(|(f, c)| (f.name().as_str(), c.clone()))
                .collect();
            cols.push((REPLAY, col));
            rows = RecordBatch::try_from_iter(cols).unwrap();
            let staged = d.stage(&rows).unwrap();
            pending = staged
                .column(1)
                .as_primitive::<arrow_array::types::Int32Type>()
                .clone();
            keys = staged.column(2).as_binary::<i32>().clone();
        }
        assert!((0..rows.num_rows()).all(|r| pending.value(r) == -1));
        let mut tally = decider().tally("t").unwrap();
        tally.add(&rows).unwrap();
        let got = core(&tally.finish().unwrap());
        assert_eq!(got, want);
        assert!(want[0].2.contains("\"throttle\":") && !want[0].2.contains("\"throttle\":0"));
        assert!(want[1].3 > 0, "the shadow throttle would throttle");
        assert_eq!(want[3].1, 1, "one bad row");
    }

    #[test]
    fn a_malformed_replay_is_an_error() {
        let mut r = Replay::default();
        assert!(matches!(
            decode_replay(&[1, 2, 3], &mut r),
            Err(Error::Batch(_))
        ));
        let mut v = Vec::new();
        encode_entry(4, Outcome::Limited { retry_after_ns: 9 }, &mut v);
        encode_entry(7, Outcome::Allowed, &mut v);
        decode_replay(&v, &mut r).unwrap();
        assert_eq!(
            r.outcomes,
            vec![
                (4, Outcome::Limited { retry_after_ns: 9 }),
                (7, Outcome::Allowed)
            ]
        );
    }
}
