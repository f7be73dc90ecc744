//! Wikimedia's refined `webrequest` tables: Parquet files, one request a
//! row, with the raw data's columns (`dt` or `ts`, `ip`, `uri_host`,
//! `uri_path`, `uri_query`, `http_method`, `user_agent`, …).
//!
//! Only the columns the ruleset reads are decoded, plus the time, the
//! address, the path and the User-Agent the report counts by. What the
//! file lacks is what the input lacks: a rule reading a column the table
//! does not have is not judged on it.
//!
//! Limiters need every key's requests in time order. A file whose rows
//! are in time order (as a job that sorts by `ts` writes them) is read a
//! batch at a time; one that is not is read whole (its decoded columns)
//! and visited in time order, rows of one time in file order. Which of
//! the two is known from a first pass over the time column alone.

use crate::format::{parse_ip, Format, Kind};
use crate::record::{HeaderValue, Record};
use crate::template::Span;
use crate::time::TimeFormat;
use crate::webrequest::HEADERS;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use rctl_dataplane::partial::{Known, KnownHeaders};
use std::fmt;
use std::fs::File;
use std::path::Path;

/// Rows decoded at a time.
pub const BATCH_ROWS: usize = 8192;

/// The first bytes of a Parquet file.
pub const MAGIC: &[u8; 4] = b"PAR1";

/// Whether `head` (a file's first bytes) is Parquet's.
pub fn is_parquet(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

/// Why a Parquet input cannot be read.
#[derive(Debug)]
pub enum ParquetError {
    /// The file could not be opened.
    Io(std::io::Error),
    /// The Parquet reader refused it (not Parquet, corrupt, a codec this
    /// build lacks).
    Parquet(parquet::errors::ParquetError),
    /// A decoded batch could not be read (arrow's error).
    Arrow(arrow_schema::ArrowError),
    /// The table lacks a column no request can do without.
    MissingColumn(&'static str),
    /// A column has a type that is not read here.
    ColumnType(String, DataType),
    /// The Parquet reader failed on the file in a way it does not
    /// report as an error (it panicked; the panic is kept inside).
    Decoder(String),
}

impl fmt::Display for ParquetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParquetError::Io(e) => write!(f, "{e}"),
            ParquetError::Parquet(e) => write!(f, "not a readable Parquet file: {e}"),
            ParquetError::Arrow(e) => write!(f, "{e}"),
            ParquetError::MissingColumn(c) => {
                write!(f, "the table has no {c} column, which every request needs")
            }
            ParquetError::ColumnType(c, t) => write!(
                f,
                "column {c} is {t}, where a string (or for ts, a timestamp) is read"
            ),
            ParquetError::Decoder(m) => write!(f, "not a readable Parquet file: {m}"),
        }
    }
}

impl std::error::Error for ParquetError {}

impl From<parquet::errors::ParquetError> for ParquetError {
    fn from(e: parquet::errors::ParquetError) -> Self {
        ParquetError::Parquet(e)
    }
}

impl From<arrow_schema::ArrowError> for ParquetError {
    fn from(e: arrow_schema::ArrowError) -> Self {
        ParquetError::Arrow(e)
    }
}

/// Runs a call into the Parquet reader on untrusted bytes: a panic in it
/// is an error of this file, not the end of the run.
fn guarded<T>(f: impl FnOnce() -> Result<T, ParquetError>) -> Result<T, ParquetError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let m = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the decoder failed".into());
        Err(ParquetError::Decoder(m))
    })
}

/// A reader of `path`'s root columns `roots`, in batches.
fn reader(
    path: &Path,
    roots: &[usize],
) -> Result<parquet::arrow::arrow_reader::ParquetRecordBatchReader, ParquetError> {
    let file = File::open(path).map_err(ParquetError::Io)?;
    guarded(|| {
        let b = ParquetRecordBatchReaderBuilder::try_new(file)?;
        let mask = ProjectionMask::roots(b.parquet_schema(), roots.iter().copied());
        Ok(b.with_projection(mask)
            .with_batch_size(BATCH_ROWS)
            .build()?)
    })
}

/// The next batch of `r`, guarded.
fn next_batch(
    r: &mut parquet::arrow::arrow_reader::ParquetRecordBatchReader,
) -> Option<Result<RecordBatch, ParquetError>> {
    match guarded(|| Ok(r.next())) {
        Ok(None) => None,
        Ok(Some(b)) => Some(b.map_err(ParquetError::from)),
        Err(e) => Some(Err(e)),
    }
}

/// What a request field is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `ts` (a timestamp) or `dt` (ISO 8601 text).
    Time,
    /// The client address.
    Ip,
    /// `http_method`.
    Method,
    /// `uri_host` (also the `host` header).
    Host,
    /// `uri_path`.
    Path,
    /// `uri_query`, with its `?`.
    Query,
    /// A request header; the index into the format's header names.
    Header(u16),
}

/// A table's columns, as the engine sees them.
#[derive(Debug, Clone)]
pub struct Table {
    /// The format: name `webrequest-parquet`, and what this file carries.
    pub format: Format,
    /// Columns decoded: their names, for the report and tests.
    pub columns: Vec<String>,
    roles: Vec<Role>,
    indices: Vec<usize>,
}

/// The candidate columns: `(column, role)`, the time and address first.
fn candidates() -> Vec<(&'static str, Role)> {
    let mut v = vec![
        ("ts", Role::Time),
        ("dt", Role::Time),
        ("ip", Role::Ip),
        ("http_method", Role::Method),
        ("uri_host", Role::Host),
        ("uri_path", Role::Path),
        ("uri_query", Role::Query),
    ];
    for (i, (c, _)) in HEADERS.iter().enumerate() {
        v.push((c, Role::Header(i as u16)));
    }
    v
}

fn known_of(roles: &[Role], names: &[String]) -> Known {
    let has = |r: Role| roles.contains(&r);
    let mut headers: Vec<String> = roles
        .iter()
        .filter_map(|r| match r {
            Role::Header(i) => names.get(*i as usize).cloned(),
            Role::Host => Some("host".into()),
            _ => None,
        })
        .collect();
    headers.sort();
    headers.dedup();
    Known {
        method: has(Role::Method),
        host: has(Role::Host),
        path: has(Role::Path),
        query: has(Role::Query),
        url: has(Role::Path) && has(Role::Query),
        headers: KnownHeaders::Only(headers),
        dst_ip: false,
        port: false,
        complete: true,
        capped: Vec::new(),
    }
}

/// Every field `known` lacks, for a reader with no ruleset to ask: as
/// `lacks` of [`table`], it makes every column the table has decoded.
pub fn every_lack(known: &Known) -> Vec<String> {
    let mut v: Vec<String> = [
        (known.method, "method"),
        (known.host, "host"),
        (known.path, "path"),
        (known.query, "query"),
    ]
    .iter()
    .filter(|(has, _)| !has)
    .map(|(_, f)| f.to_string())
    .collect();
    if let KnownHeaders::Only(h) = &known.headers {
        for (_, name) in HEADERS {
            if !h.iter().any(|x| x == name) {
                v.push(format!("header({name:?})"));
            }
        }
    }
    v
}

/// Works out which columns of the file at `path` to decode: of those it
/// has, the ones `lacks` says the ruleset reads (`lacks(known)` lists the
/// fields the ruleset reads that `known` lacks), and the time, the
/// address, the path and the User-Agent.
pub fn table(path: &Path, lacks: &dyn Fn(&Known) -> Vec<String>) -> Result<Table, ParquetError> {
    let file = File::open(path).map_err(ParquetError::Io)?;
    let schema = guarded(|| {
        Ok(ParquetRecordBatchReaderBuilder::try_new(file)?
            .schema()
            .clone())
    })?;
    table_of_schema(&schema, lacks)
}

/// [`table`] for a table known by its Arrow schema alone (record batches
/// from elsewhere: a Spark job's); the same choice of columns, the same
/// errors. [`Table::indices`] are indices into `schema`.
pub fn table_of_schema(
    schema: &arrow_schema::Schema,
    lacks: &dyn Fn(&Known) -> Vec<String>,
) -> Result<Table, ParquetError> {
    let mut names: Vec<String> = HEADERS.iter().map(|(_, h)| h.to_string()).collect();
    names.push("host".into());
    let mut present: Vec<(String, Role, usize)> = Vec::new();
    for (c, role) in candidates() {
        if let Ok(i) = schema.index_of(c) {
            // A `ts` that is not a timestamp has no unit to read it by.
            if c == "ts" && !matches!(schema.field(i).data_type(), DataType::Timestamp(..)) {
                continue;
            }
            // `ts` wins over `dt` where both are there.
            if role == Role::Time && present.iter().any(|(_, r, _)| *r == Role::Time) {
                continue;
            }
            present.push((c.to_string(), role, i));
        }
    }
    if !present.iter().any(|(_, r, _)| *r == Role::Time) {
        return Err(ParquetError::MissingColumn("ts (a timestamp) or dt"));
    }
    if !present.iter().any(|(_, r, _)| *r == Role::Ip) {
        return Err(ParquetError::MissingColumn("ip"));
    }
    let roles: Vec<Role> = present.iter().map(|(_, r, _)| *r).collect();
    let known = known_of(&roles, &names);
    let base = lacks(&known).len();
    // The report tells browsers by these two, whatever the rules read.
    let always: Vec<Role> = ["user-agent", "accept-language"]
        .iter()
        .filter_map(|n| names.iter().position(|h| h == n))
        .map(|i| Role::Header(i as u16))
        .collect();
    let keep: Vec<bool> = present
        .iter()
        .map(|(_, role, _)| {
            matches!(role, Role::Time | Role::Ip | Role::Path) || always.contains(role) || {
                let without: Vec<Role> = roles.iter().copied().filter(|r| r != role).collect();
                lacks(&known_of(&without, &names)).len() > base
            }
        })
        .collect();
    for ((c, _, i), k) in present.iter().zip(&keep) {
        if *k {
            check_type(c, schema.field(*i).data_type())?;
        }
    }
    // What is decoded is what the input carries: a reader the
    // projection did not ask (an old ruleset's rule on a column left out)
    // sees the field as lacking, never as empty.
    let decoded: Vec<Role> = roles
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(r, _)| *r)
        .collect();
    let known = known_of(&decoded, &names);
    let mut format = Format {
        name: "webrequest-parquet".into(),
        kind: Kind::WebrequestParquet,
        header_names: names,
        known,
        ..crate::webrequest::format()
    };
    if let Some((_, Role::Time, i)) = present.iter().find(|(_, r, _)| *r == Role::Time) {
        if let DataType::Timestamp(u, _) = schema.field(*i).data_type() {
            format.resolution_ns = unit_ns(*u);
        }
    }
    // In the table's order: a projected batch has its columns so.
    let mut kept: Vec<&(String, Role, usize)> = present
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(p, _)| p)
        .collect();
    kept.sort_by_key(|(_, _, i)| *i);
    Ok(Table {
        format,
        columns: kept.iter().map(|(c, _, _)| c.clone()).collect(),
        roles: kept.iter().map(|(_, r, _)| *r).collect(),
        indices: kept.iter().map(|(_, _, i)| *i).collect(),
    })
}

fn unit_ns(u: TimeUnit) -> u64 {
    match u {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    }
}

fn is_text(t: &DataType) -> bool {
    match t {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => true,
        DataType::Dictionary(_, v) => is_text(v),
        _ => false,
    }
}

fn check_type(column: &str, t: &DataType) -> Result<(), ParquetError> {
    let ok = is_text(t) || (column == "ts" && matches!(t, DataType::Timestamp(..)));
    if ok {
        Ok(())
    } else {
        Err(ParquetError::ColumnType(column.to_string(), t.clone()))
    }
}

/// The bytes of row `row` of a text column (`None`: null).
fn text(a: &ArrayRef, row: usize) -> Option<&[u8]> {
    if a.is_null(row) {
        return None;
    }
    Some(match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value(row).as_bytes(),
        DataType::LargeUtf8 => a.as_string::<i64>().value(row).as_bytes(),
        DataType::Utf8View => a.as_string_view().value(row).as_bytes(),
        DataType::Binary => a.as_binary::<i32>().value(row),
        DataType::LargeBinary => a.as_binary::<i64>().value(row),
        DataType::BinaryView => a.as_binary_view().value(row),
        DataType::Dictionary(k, _) => {
            let key = dictionary_key(a, k, row)?;
            let values = a.as_any_dictionary().values();
            return (key < values.len()).then(|| text(values, key)).flatten();
        }
        _ => return None,
    })
}

/// The key of row `row` of a dictionary column whose keys are `k`s
/// (read in place: no per-row copy of the batch's keys).
fn dictionary_key(a: &ArrayRef, k: &DataType, row: usize) -> Option<usize> {
    use arrow_array::types::{
        Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
    };
    let v: i128 = match k {
        DataType::Int8 => a.as_dictionary::<Int8Type>().keys().value(row).into(),
        DataType::Int16 => a.as_dictionary::<Int16Type>().keys().value(row).into(),
        DataType::Int32 => a.as_dictionary::<Int32Type>().keys().value(row).into(),
        DataType::Int64 => a.as_dictionary::<Int64Type>().keys().value(row).into(),
        DataType::UInt8 => a.as_dictionary::<UInt8Type>().keys().value(row).into(),
        DataType::UInt16 => a.as_dictionary::<UInt16Type>().keys().value(row).into(),
        DataType::UInt32 => a.as_dictionary::<UInt32Type>().keys().value(row).into(),
        DataType::UInt64 => a.as_dictionary::<UInt64Type>().keys().value(row).into(),
        _ => return None,
    };
    usize::try_from(v).ok()
}

/// The time of row `row`, ns since the epoch (`None`: null or unreadable).
fn time(a: &ArrayRef, row: usize) -> Option<u64> {
    if a.is_null(row) {
        return None;
    }
    let (v, scale) = match a.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => (
            a.as_primitive::<TimestampSecondType>().value(row),
            1_000_000_000,
        ),
        DataType::Timestamp(TimeUnit::Millisecond, _) => (
            a.as_primitive::<TimestampMillisecondType>().value(row),
            1_000_000,
        ),
        DataType::Timestamp(TimeUnit::Microsecond, _) => (
            a.as_primitive::<TimestampMicrosecondType>().value(row),
            1_000,
        ),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            (a.as_primitive::<TimestampNanosecondType>().value(row), 1)
        }
        _ => return TimeFormat::Iso8601.parse(text(a, row)?).map(|(ns, _)| ns),
    };
    u64::try_from(v).ok()?.checked_mul(scale)
}

/// Rows of one file, in time order, as records. Nothing but the first
/// pass is read until [`Rows::load`]: a day of files is opened one by
/// one as their rows come due.
pub struct Rows {
    table: Table,
    path: std::path::PathBuf,
    /// Whether [`Rows::load`] has run.
    loaded: bool,
    /// A file in order: its batches, streamed.
    reader: Option<parquet::arrow::arrow_reader::ParquetRecordBatchReader>,
    batch: Option<RecordBatch>,
    next: usize,
    /// Rows of the file before the current batch.
    base: u64,
    /// A file out of order: all of its batches, where each starts in the
    /// file, and the rows by time.
    whole: Vec<RecordBatch>,
    starts: Vec<u64>,
    order: Vec<(u64, u32, u32)>,
    at: usize,
    /// The current row's 1-based position in the file.
    pub row: u64,
    /// Whether the file's rows were in time order.
    pub sorted: bool,
    /// The earliest time in the file (from the first pass).
    pub first_ns: u64,
}

impl Rows {
    /// Readies `path` to read `table`'s columns: the first pass over its
    /// time column only.
    pub fn open(path: &Path, table: Table) -> Result<Rows, ParquetError> {
        let (sorted, first_ns) = Self::in_order(path, &table)?;
        Ok(Rows {
            table,
            path: path.to_path_buf(),
            loaded: false,
            reader: None,
            batch: None,
            next: 0,
            base: 0,
            whole: Vec::new(),
            starts: Vec::new(),
            order: Vec::new(),
            at: 0,
            row: 0,
            sorted,
            first_ns,
        })
    }

    /// Whether the file is still to be opened ([`Rows::load`]).
    pub fn needs_load(&self) -> bool {
        !self.loaded
    }

    /// Opens the file: a file in time order to be streamed, one out of
    /// order read whole and its rows ordered by time.
    pub fn load(&mut self) -> Result<(), ParquetError> {
        if self.loaded {
            return Ok(());
        }
        self.loaded = true;
        let mut reader = reader(&self.path, &self.table.indices)?;
        if self.sorted {
            self.reader = Some(reader);
            return Ok(());
        }
        let t = self.time_column();
        let mut pos = 0u64;
        while let Some(batch) = next_batch(&mut reader) {
            let batch = batch?;
            let b = self.whole.len() as u32;
            let a = batch.column(t).clone();
            for r in 0..batch.num_rows() {
                self.order.push((time(&a, r).unwrap_or(0), b, r as u32));
            }
            self.starts.push(pos);
            pos += batch.num_rows() as u64;
            self.whole.push(batch);
        }
        // Stable: rows of one time keep their file order.
        self.order.sort_by_key(|&(ns, _, _)| ns);
        Ok(())
    }

    /// The format this file is read as.
    pub fn format(&self) -> &Format {
        &self.table.format
    }

    /// The columns decoded.
    pub fn columns(&self) -> &[String] {
        &self.table.columns
    }

    fn time_column(&self) -> usize {
        self.table
            .roles
            .iter()
            .position(|r| *r == Role::Time)
            .unwrap_or(0)
    }

    /// A first pass over the time column alone: are the rows in order,
    /// and the earliest time.
    fn in_order(path: &Path, table: &Table) -> Result<(bool, u64), ParquetError> {
        let t = table
            .roles
            .iter()
            .position(|r| *r == Role::Time)
            .map(|i| table.indices[i])
            .ok_or(ParquetError::MissingColumn("ts (a timestamp) or dt"))?;
        let mut r = reader(path, &[t])?;
        let (mut last, mut first, mut sorted) = (0u64, u64::MAX, true);
        while let Some(batch) = next_batch(&mut r) {
            let batch = batch?;
            let a = batch.column(0);
            for r in 0..batch.num_rows() {
                // A row without a time is a bad row wherever it is.
                if let Some(ns) = time(a, r) {
                    sorted &= ns >= last;
                    last = last.max(ns);
                    first = first.min(ns);
                }
            }
        }
        Ok((sorted, if first == u64::MAX { 0 } else { first }))
    }

    /// The next row into `rec` (its text in `arena`): `Some(Ok)` a
    /// request, `Some(Err(why))` a row that is not one, `None` the end.
    /// After an error there are no more rows.
    pub fn next_row(
        &mut self,
        rec: &mut Record,
        arena: &mut Vec<u8>,
    ) -> Option<Result<Result<(), &'static str>, ParquetError>> {
        if let Err(e) = self.load() {
            self.finish();
            return Some(Err(e));
        }
        let (batch, r) = if self.sorted {
            loop {
                if let Some(b) = &self.batch {
                    if self.next < b.num_rows() {
                        break;
                    }
                    self.base += b.num_rows() as u64;
                    self.batch = None;
                }
                match next_batch(self.reader.as_mut()?)? {
                    Ok(b) => {
                        self.batch = Some(b);
                        self.next = 0;
                    }
                    Err(e) => {
                        self.finish();
                        return Some(Err(e));
                    }
                }
            }
            self.next += 1;
            self.row = self.base + self.next as u64;
            (self.batch.as_ref()?, self.next - 1)
        } else {
            let &(_, b, r) = self.order.get(self.at)?;
            self.at += 1;
            self.row = self.starts.get(b as usize).copied().unwrap_or(0) + u64::from(r) + 1;
            (self.whole.get(b as usize)?, r as usize)
        };
        Some(Ok(fill_row(&self.table, batch, r, rec, arena)))
    }

    /// Lets go of everything: no row comes after.
    fn finish(&mut self) {
        self.reader = None;
        self.batch = None;
        self.whole = Vec::new();
        self.order = Vec::new();
        self.at = 0;
    }
}

impl Table {
    /// Where each decoded column ([`Table::columns`]) is in the schema
    /// the table was worked out from.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

/// Row `r` of `batch` into `rec` (its text in `arena`), as a file's rows
/// are read: `batch` holds the table's columns, in [`Table::columns`]'
/// order (a batch of the schema projected on [`Table::indices`]).
/// `Err(why)`: the row is not a request (no time, no usable address),
/// a bad row.
pub fn fill_row(
    table: &Table,
    batch: &RecordBatch,
    r: usize,
    rec: &mut Record,
    arena: &mut Vec<u8>,
) -> Result<(), &'static str> {
    rec.clear();
    arena.clear();
    rec.resolution_ns = table.format.resolution_ns;
    let (mut path, mut query) = (Span::default(), Span::default());
    for (c, role) in table.roles.iter().enumerate() {
        let a = batch.column(c);
        if *role == Role::Time {
            rec.time_ns = time(a, r).ok_or("no time")?;
            continue;
        }
        let Some(v) = text(a, r) else { continue };
        let s = arena.len();
        arena.extend_from_slice(v);
        let span = Span::arena(s, arena.len());
        match role {
            Role::Ip => rec.ip = Some(parse_ip(v).ok_or("no client address")?),
            Role::Method => rec.method = span,
            Role::Host => {
                rec.host = span;
                header(table, rec, "host", span, v);
            }
            Role::Path => path = span,
            Role::Query => query = span,
            Role::Header(i) => {
                if !v.is_empty() && v != b"-" {
                    rec.headers.push(HeaderValue {
                        name: *i,
                        value: span,
                    });
                }
            }
            Role::Time => {}
        }
    }
    if rec.ip.is_none() {
        return Err("no client address");
    }
    rec.path = Some(path);
    rec.query = Some(query);
    // The target: the path, then the query (which holds its `?`).
    rec.target = if query.is_empty() {
        path
    } else {
        let s = arena.len();
        arena.extend_from_within(path.arena_range().unwrap_or(0..0));
        let q = query.get(&[], arena).to_vec();
        if q.first() != Some(&b'?') {
            arena.push(b'?');
        }
        arena.extend_from_slice(&q);
        Span::arena(s, arena.len())
    };
    Ok(())
}

fn header(table: &Table, rec: &mut Record, name: &str, span: Span, v: &[u8]) {
    if v.is_empty() || v == b"-" {
        return;
    }
    if let Some(i) = table.format.header_names.iter().position(|h| h == name) {
        rec.headers.push(HeaderValue {
            name: i as u16,
            value: span,
        });
    }
}
