"""``rctl dry-run --log`` on Spark: a ``webrequest`` table (Parquet or JSON
lines) through a compiled ruleset, with exact throttles, into the same
JSON report (the same stable core: totals, per-rule matches and verdicts,
the per-second series) that ``rctl dry-run --log --format json`` writes
on one machine.

The plan (the manual, ``dataplane/python/README.md``, has its costs):

* **Stage 0**, no shuffle: only the columns the ruleset reads (and the
  report counts) are selected; every row is decided as far as it goes
  without a limiter: which rules match, and the first throttle rule it
  reaches (``_rctl_pending``) with its key for that rule (``_rctl_key``).
* **One stage per throttle rule, in evaluation order** (shadow
  throttles too: they count): the rows waiting at it are shuffled by its
  key, sorted within each key by time, ties by the row's other columns,
  and run through that rule's own limiter (the engine's, as the single
  machine runs it); its outcome joins the row's ``_rctl_replay``, and the
  row is decided again with it: decided, or waiting at a later throttle.
  The other rows are not shuffled.
* **The tally**: each partition counts its rows into the dry run's own
  report (the throttles replayed), and the driver sums the partitions'
  reports; top talkers are merged with their error bounds.

``python -m rctl.spark --help`` runs it.
"""

import argparse
import json
import sys

import pyarrow as pa

import rctl
from rctl import RctlError

REPLAY = "_rctl_replay"
TIME = "_rctl_t"
PENDING = "_rctl_pending"
KEY = "_rctl_key"
BAD = "_rctl_bad"
TS_US = "_rctl_ts_us"
# The fields of the webrequest JSON format (rctl-logs' webrequest.rs).
JSON_FIELDS = ["dt", "ip", "uri_host", "uri_path", "uri_query", "http_method", "user_agent",
               "referer", "accept_language", "x_analytics", "accept", "range"]


class InputError(RctlError):
    """The input cannot be read as a webrequest table."""


class BadRowsError(RctlError):
    """More rows than allowed are not requests (no readable time or address)."""


def _arrow_schema(spark_schema):
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema)


def _engine_batch(batch):
    """The batch as the engine reads it: ``ts``, carried as microseconds
    (so that no session time zone touches it), back as a timestamp."""
    names = batch.schema.names
    if TS_US not in names:
        return batch
    cols, fields = [], []
    for f, c in zip(batch.schema, batch.columns):
        if f.name == TS_US:
            cols.append(c.cast(pa.int64()).cast(pa.timestamp("us")))
            fields.append(pa.field("ts", pa.timestamp("us")))
        else:
            cols.append(c)
            fields.append(f)
    return pa.RecordBatch.from_arrays(cols, schema=pa.schema(fields))


def _with(batch, extra):
    """``batch`` with the columns of ``extra`` set (replaced or appended)."""
    for name, col in extra.items():
        i = batch.schema.get_field_index(name)
        if i >= 0:
            batch = pa.RecordBatch.from_arrays(
                [col if j == i else c for j, c in enumerate(batch.columns)],
                schema=batch.schema.set(i, pa.field(name, col.type)),
            )
        else:
            batch = pa.RecordBatch.from_arrays(
                list(batch.columns) + [col],
                schema=batch.schema.append(pa.field(name, col.type)),
            )
    return batch


def _ordered(batch, names):
    """``batch``'s columns in the order ``names`` gives (Spark reads a
    map's output by position)."""
    idx = [batch.schema.get_field_index(n) for n in names]
    return pa.RecordBatch.from_arrays(
        [batch.column(i) for i in idx], schema=pa.schema([batch.schema.field(i) for i in idx])
    )


def _staged(rs, batch):
    """``batch`` with the stage columns of its next decision."""
    out = rs.stage(_engine_batch(batch))
    return _with(batch, {n: out.column(n) for n in (TIME, PENDING, KEY, BAD)})


def _mapper(df, schema_out, arrow_fn, use_arrow):
    """Runs ``arrow_fn`` (an iterator of pyarrow batches in, one out) per
    partition: with ``mapInArrow`` where Spark has it (3.3+), else with
    ``mapInPandas`` (3.0+), the batches converted at either end."""
    names = schema_out.fieldNames()

    def ordered_fn(batches):
        for b in arrow_fn(batches):
            yield _ordered(b, names)

    if use_arrow:
        return df.mapInArrow(ordered_fn, schema_out)
    in_schema = _arrow_schema(df.schema)
    out_schema = _arrow_schema(schema_out)

    def pandas_fn(frames):
        batches = (
            pa.RecordBatch.from_pandas(f, schema=in_schema, preserve_index=False)
            for f in frames
        )
        for b in ordered_fn(batches):
            yield pa.Table.from_batches([b]).cast(out_schema).to_pandas()

    return df.mapInPandas(pandas_fn, schema_out)


def _read(spark, path, fmt):
    if fmt == "json":
        # Every value as text: a number or a nested object is read as
        # the line holds it, for the row's reader to judge.
        return spark.read.option("primitivesAsString", "true").json(path)
    if fmt == "parquet":
        return spark.read.parquet(path)
    raise InputError("unknown input format %r: parquet or json" % fmt)


def plan(spark, path, artifact, fmt="parquet", site=None, use_arrow=None, name=None, max_bad_rows=None):
    """Checks the input on the driver and builds the job.

    Returns ``(run, info)``: ``run()`` runs the job and returns the
    report (a dict); ``info`` holds the columns read, what the table
    lacks, and the throttle stages. Raises ``ArtifactError`` (an artifact
    of another format version, or corrupt), ``SchemaError`` (no ``ip`` or
    time column, or one of a type that is not text), ``InputError``.

    A row whose time or address cannot be read (an unparseable ``dt``, a
    null or unparseable ``ip``) is a bad row, as a bad line is to
    ``rctl dry-run --log``: counted (``inputs[0].log.bad_lines``, the
    first ones in ``bad``), never judged; past ``max_bad_rows`` the run
    stops after stage 0 with ``BadRowsError``, naming the first ones."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    rs = rctl.Ruleset(artifact, site)
    df = _read(spark, path, fmt)
    if fmt == "json":
        # As `--log-format webrequest` reads a line: every field of the
        # format is carried, a key a line lacks is an absent header (a
        # Parquet table's missing column, by contrast, is lacking).
        for c in JSON_FIELDS:
            if c not in df.columns:
                df = df.withColumn(c, F.lit(None).cast("string"))
    arrow_schema = _arrow_schema(df.schema)
    columns = rs.columns(arrow_schema)
    missing = rs.missing(arrow_schema)
    if use_arrow is None:
        use_arrow = hasattr(df, "mapInArrow")
    sel = []
    for c in columns:
        if c == "ts":
            # Microseconds since the epoch, whatever the session's zone.
            sel.append(
                (F.col("ts").cast("double") * 1e6).cast("long").alias(TS_US)
                if not hasattr(F, "unix_micros")
                else F.unix_micros(F.col("ts")).alias(TS_US)
            )
        else:
            sel.append(F.col(c))
    df = df.select(*sel)
    throttles = rs.throttles
    names = rs.rule_names
    bc = spark.sparkContext.broadcast((rs.artifact, site))
    extra = [
        T.StructField(TIME, T.LongType()),
        T.StructField(PENDING, T.IntegerType()),
        T.StructField(KEY, T.BinaryType()),
        T.StructField(BAD, T.StringType()),
        T.StructField(REPLAY, T.BinaryType()),
    ]
    staged_schema = T.StructType(list(df.schema.fields) + extra)
    tiebreak = sorted(f.name for f in df.schema.fields)

    def stage0(batches):
        art, st = bc.value
        r = rctl.Ruleset(art, st)
        for b in batches:
            b = _with(b, {REPLAY: pa.nulls(b.num_rows, pa.binary())})
            yield _staged(r, b)

    def limiter(rule):
        def run(batches):
            art, st = bc.value
            r = rctl.Ruleset(art, st)
            for b in batches:
                replay = r.hit(rule, b)
                yield _staged(r, _with(b, {REPLAY: replay}))

        return run

    report_schema = T.StructType([T.StructField("report", T.StringType())])
    table_name = name or path

    def tally(batches):
        art, st = bc.value
        t = rctl.Ruleset(art, st).tally(table_name)
        for b in batches:
            t.add(_engine_batch(b))
        yield pa.RecordBatch.from_arrays([pa.array([t.finish()])], names=["report"])

    info = {
        "columns": columns,
        "missing_fields": missing,
        "map": "mapInArrow" if use_arrow else "mapInPandas",
        "throttle_stages": [names[i] for i in throttles],
    }

    def run():
        cur = _mapper(df, staged_schema, stage0, use_arrow).localCheckpoint()
        bad_rows = cur.filter(F.col(BAD).isNotNull())
        bad = bad_rows.count()
        if max_bad_rows is not None and bad > max_bad_rows:
            shown = bad_rows.limit(3).collect()
            raise BadRowsError(
                "%d bad rows, over --max-bad-rows %d; the first: %s"
                % (bad, max_bad_rows, "; ".join(
                    "%s (ip %r, time %r)" % (r[BAD], r["ip"], r[TS_US] if TS_US in r else r["dt"])
                    for r in shown))
            )
        stages = []
        for rule in throttles:
            waiting = cur.filter(F.col(PENDING) == rule)
            n = waiting.count()
            stages.append({"rule": names[rule], "rows_shuffled": n})
            if n == 0:
                continue
            rest = cur.filter(F.col(PENDING) != rule)
            done = _mapper(
                waiting.repartition(KEY).sortWithinPartitions(KEY, TIME, *tiebreak),
                staged_schema,
                limiter(rule),
                use_arrow,
            )
            cur = rest.unionByName(done).localCheckpoint()
        left = cur.filter(F.col(PENDING) >= 0).count()
        if left:
            raise RctlError("%d rows still wait at a throttle after every stage" % left)
        parts = [
            json.loads(r["report"])
            for r in _mapper(cur, report_schema, tally, use_arrow).collect()
        ]
        report = merge_reports(parts, table_name)
        report["distributed"] = dict(
            info,
            partitions=len(parts),
            bad_rows=bad,
            stages=stages,
        )
        return report

    return run, info


def _merge_top(lists, count_fields, cut=10):
    """Space-Saving top lists of several partitions as one: counts of one
    key summed; ``error`` bounds the undercount too (for a partition
    whose list was full and did not hold the key: its smallest listed
    count, which the key's count there cannot exceed)."""
    merged = {}
    floors = []
    for lst in lists:
        full = len(lst) >= cut
        floors.append((min((x[count_fields[0]] for x in lst), default=0) if full else 0, lst))
        for x in lst:
            m = merged.setdefault(x["key"], dict({f: 0 for f in count_fields}, key=x["key"], error=0))
            for f in count_fields:
                m[f] += x[f]
            m["error"] += x.get("error", 0)
    for floor, lst in floors:
        keys = {x["key"] for x in lst}
        for k, m in merged.items():
            if k not in keys:
                m["error"] += floor
    out = sorted(merged.values(), key=lambda m: (-m[count_fields[0]], m["key"]))
    return out[:cut]


def _sum_dict(ds):
    out = {}
    for d in ds:
        for k, v in d.items():
            if isinstance(v, bool):
                out[k] = out.get(k, True) and v
            elif isinstance(v, int):
                out[k] = out.get(k, 0) + v
            elif k not in out:
                out[k] = v
    return out


def _merge_series(parts, first_ns):
    """Per-second series of several partitions on one axis: entry 0 the
    second of the first request of all."""
    if first_ns is None:
        return []
    base = first_ns // 1_000_000_000
    n = len(parts[0]["series"]) if parts else 0
    rules = [[] for _ in range(n)]
    for p in parts:
        f = p["totals"].get("first_ns")
        if f is None:
            continue
        off = f // 1_000_000_000 - base
        for i, s in enumerate(p["series"]):
            r = rules[i]
            for j, e in enumerate(s):
                k = off + j
                while len(r) <= k:
                    r.append([0, 0])
                r[k][0] += e[0]
                r[k][1] += e[1]
    # As the dry run ends them: every rule's series as long as the longest.
    longest = max((len(r) for r in rules), default=0)
    for r in rules:
        while len(r) < longest:
            r.append([0, 0])
    return rules


def merge_reports(parts, name):
    """The partitions' reports as the report of the whole table."""
    if not parts:
        raise RctlError("no partition reported")
    first = parts[0]
    totals = _sum_dict([p["totals"] for p in parts])
    firsts = [p["totals"]["first_ns"] for p in parts if p["totals"].get("first_ns") is not None]
    lasts = [p["totals"]["last_ns"] for p in parts if p["totals"].get("last_ns") is not None]
    totals["first_ns"] = min(firsts) if firsts else None
    totals["last_ns"] = max(lasts) if lasts else None
    for k in ("max_buffered_bytes", "buffered_peak_bytes"):
        if k in totals:
            totals[k] = max(p["totals"].get(k, 0) for p in parts)
    rules = []
    for i, r0 in enumerate(first["rules"]):
        rs = [p["rules"][i] for p in parts]
        r = {}
        for k, v in r0.items():
            vals = [x[k] for x in rs]
            if k == "first_seen_ns":
                vs = [x for x in vals if x is not None]
                r[k] = min(vs) if vs else None
            elif k == "last_seen_ns":
                vs = [x for x in vals if x is not None]
                r[k] = max(vs) if vs else None
            elif isinstance(v, bool) or isinstance(v, str):
                r[k] = v
            elif isinstance(v, int):
                r[k] = sum(vals)
            elif isinstance(v, dict) and k != "throttle":
                r[k] = _sum_dict(vals)
            elif k == "throttle" and v is not None:
                t = dict(v)
                t["keys"] = sum(x["keys"] for x in vals)
                t["limited_keys"] = sum(x["limited_keys"] for x in vals)
                # Keys of one throttle never span partitions of its own
                # stage, but the tally's partitions are not its stage's.
                t["exact"] = False
                t["top"] = _merge_top([x["top"] for x in vals], ["requests", "limited", "passed"])
                r[k] = t
            elif isinstance(v, list) and k.startswith(("top_", "stopped_top_")):
                r[k] = _merge_top(vals, ["count"])
            else:
                r[k] = v
        rules.append(r)
    unmatched = {"requests": sum(p["unmatched"]["requests"] for p in parts)}
    for k in first["unmatched"]:
        if k.startswith("top_"):
            unmatched[k] = _merge_top([p["unmatched"][k] for p in parts], ["count"])
    logs = [i["log"] for p in parts for i in p["inputs"] if i.get("log")]
    log = dict(logs[0]) if logs else {}
    for k in ("lines", "judged", "bad_lines"):
        log[k] = sum(x.get(k, 0) for x in logs)
    log["bad"] = [b for x in logs for b in x.get("bad", [])][:10]
    report = dict(first)
    report.update(
        totals=totals,
        rules=rules,
        unmatched=unmatched,
        series=_merge_series(parts, totals["first_ns"]),
        series_100ms=None,
        inputs=[{"path": name, "packets": 0, "error": None, "log": log}],
        changes=None,
    )
    # Distinct clients cannot be summed across partitions: requests are
    # exact, client counts are lower bounds (the largest partition's).
    aff = first.get("affected")
    if isinstance(aff, dict):
        merged = {}
        for k, v in aff.items():
            if isinstance(v, dict):
                vals = [p["affected"][k] for p in parts]
                m = {}
                for f in v:
                    if isinstance(v[f], bool):
                        m[f] = False
                    elif isinstance(v[f], int) and "client" in f:
                        m[f] = max(x[f] for x in vals)
                    elif isinstance(v[f], int):
                        m[f] = sum(x[f] for x in vals)
                    else:
                        m[f] = v[f]
                merged[k] = m
            else:
                merged[k] = v
        report["affected"] = merged
    return report


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m rctl.spark",
        description="rctl dry-run --log on Spark: a webrequest table through a compiled ruleset, "
        "into rctl dry-run's JSON report.",
    )
    p.add_argument("artifact", help="the compiled ruleset (rctl compile -o FILE)")
    p.add_argument("table", help="the table: a Parquet folder or file, or JSON lines (--input-format json)")
    p.add_argument("--input-format", choices=["parquet", "json"], default="parquet")
    p.add_argument("--site", help="the site whose rules apply")
    p.add_argument("-o", "--output", help="write the report here (default: stdout)")
    p.add_argument(
        "--map",
        choices=["auto", "arrow", "pandas"],
        default="auto",
        help="mapInArrow (Spark 3.3+), mapInPandas (3.0+), or auto: mapInArrow where Spark has it",
    )
    p.add_argument("--max-bad-rows", type=int, help="fail past this many bad rows (as --max-bad-lines)")
    p.add_argument("--master", help="Spark master (default: spark-submit's)")
    a = p.parse_args(argv)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName("rctl dry-run")
    if a.master:
        b = b.master(a.master)
    spark = b.getOrCreate()
    with open(a.artifact, "rb") as f:
        artifact = f.read()
    use_arrow = {"auto": None, "arrow": True, "pandas": False}[a.map]
    try:
        run, info = plan(spark, a.table, artifact, a.input_format, a.site, use_arrow,
                         name=a.table, max_bad_rows=a.max_bad_rows)
    except RctlError as e:
        print("rctl.spark: %s" % e, file=sys.stderr)
        return 2
    print("rctl.spark: reading %s; throttle stages: %s" % (
        ", ".join(info["columns"]), ", ".join(info["throttle_stages"]) or "none"), file=sys.stderr)
    try:
        report = run()
    except RctlError as e:
        print("rctl.spark: %s" % e, file=sys.stderr)
        return 1
    text = json.dumps(report, indent=2) + "\n"
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
