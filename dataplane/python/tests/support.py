"""What the wheel's and the Spark job's tests share: the rctl binary, the
test ruleset compiled by it, a generated webrequest traffic, and one
Spark session for every test (Spark takes seconds to start)."""

import atexit
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
RULES = os.path.join(HERE, "rules", "spark.rctl")
CI = os.environ.get("CI") == "true"


def rctl_bin():
    """The rctl binary built from this tree (RCTL_BIN, else target/debug)."""
    b = os.environ.get("RCTL_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "rctl"
    )
    if not os.access(b, os.X_OK):
        raise RuntimeError("no rctl binary at %s: cargo build first, or set RCTL_BIN" % b)
    return b


def rctl(*args, check=True):
    """Runs rctl; its stdout."""
    p = subprocess.run([rctl_bin(), *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError("rctl %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr))
    return p.stdout


_tmp = tempfile.mkdtemp(prefix="rctl-python-tests-")
atexit.register(shutil.rmtree, _tmp, True)


def tmpdir():
    """One scratch folder for the run."""
    return _tmp


def artifact():
    """The test ruleset, compiled by rctl; its path."""
    out = os.path.join(_tmp, "spark.rctlc")
    if not os.path.exists(out):
        rctl("compile", RULES, "-o", out)
    return out


T0 = datetime(2026, 5, 13, 12, 0, 0, tzinfo=timezone.utc)
COLUMNS = ["dt", "ip", "http_method", "uri_host", "uri_path", "uri_query", "user_agent", "accept_language"]
BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


def dt(ms):
    t = T0 + timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (t.microsecond // 1000)


def traffic(seed=7, seconds=120):
    """Rows of webrequest traffic (dicts of COLUMNS): SPARQL scrapers, a
    re-render loop on three titles from many addresses, the updater,
    scanners, cloud clients on the API, browsers; exact duplicate rows
    (ties of one key at one millisecond), and bad rows (a dt that is not
    a time, an ip that is not an address). Every other row has a time of
    its own."""
    rnd = random.Random(seed)
    span = seconds * 1000
    used = set()
    rows = []

    def at(start=0, end=span):
        while True:
            ms = rnd.randrange(start, end)
            if ms not in used:
                used.add(ms)
                return ms

    def add(ip, path, ua, host="www.wikidata.org", query="", method="GET", lang=None, within=None):
        ms = at(*within) if within else at()
        rows.append(
            {
                "dt": dt(ms),
                "ip": ip,
                "http_method": method,
                "uri_host": host,
                "uri_path": path,
                "uri_query": query,
                "user_agent": ua,
                "accept_language": lang,
            }
        )
        return rows[-1]

    for i in range(6):  # SPARQL scrapers: throttled per address
        ip = "198.51.100.%d" % (10 + i)
        ua = "python-requests/2.31" if i % 2 else BROWSER
        for _ in range(rnd.randrange(60, 160)):
            add(ip, "/sparql", ua, query="?query=SELECT%20" + str(rnd.randrange(50)))
    for title in ("A", "B", "C"):  # a re-render loop: throttled per host and path
        for _ in range(150):
            add("192.0.2.%d" % rnd.randrange(1, 250), "/wiki/" + title, BROWSER,
                host="en.wikipedia.org", lang="en")
    for _ in range(200):  # the updater: allowed before any throttle
        add("10.64.1.5", "/sparql", "updater/1.0", method="POST")
    for _ in range(25):  # scanners: denied
        add("185.220.101.%d" % rnd.randrange(1, 5), "/wiki/Special:Search", "sqlmap/1.7")
    for _ in range(500):  # cloud clients on the API, 20 s of them: shadow throttle, log, generic throttle
        ua = "python-requests/2.28" if rnd.random() < 0.7 else "curl/8.0"
        add("203.0.113.%d" % rnd.randrange(1, 5), "/api/rest_v1/page/html/X%d" % rnd.randrange(5),
            ua, host="en.wikipedia.org", within=(40_000, 60_000))
    for _ in range(900):  # browsers
        p = rnd.choice(["/w/index.php", "/static/logo.png", "/wiki/Main_Page_%d" % rnd.randrange(300)])
        add("%d.%d.%d.%d" % (rnd.randrange(1, 223), rnd.randrange(256), rnd.randrange(256), rnd.randrange(1, 255)),
            p, BROWSER, host="en.wikipedia.org", query="?title=X" if p == "/w/index.php" else "",
            lang="de")
    for _ in range(15):  # exact duplicates: ties of one key at one time
        r = dict(rnd.choice(rows))
        rows.append(r)
    for _ in range(4):
        r = add("198.51.100.99", "/sparql", BROWSER)
        r["dt"] = "not-a-time"
    for _ in range(3):
        add("999.1.1.1", "/wiki/Bad", BROWSER)
    return rows


def table(rows):
    """The rows as an Arrow table of COLUMNS (strings)."""
    return pa.table({c: pa.array([r[c] for r in rows], pa.string()) for c in COLUMNS})


def table_ts(rows):
    """The rows as a refined table has them: ``ts``, a millisecond
    timestamp (null where ``dt`` is not a time), in place of ``dt``."""
    def ts(d):
        try:
            return datetime.strptime(d, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
        except ValueError:
            return None
    t = table(rows).drop(["dt"])
    return t.append_column("ts", pa.array([ts(r["dt"]) for r in rows], pa.timestamp("ms", tz="UTC")))


def write_parquet_parts(rows, folder, parts=8, seed=1, as_table=table):
    """The rows in random order, spread over `parts` Parquet files."""
    os.makedirs(folder, exist_ok=True)
    rnd = random.Random(seed)
    rows = list(rows)
    rnd.shuffle(rows)
    buckets = [[] for _ in range(parts)]
    for r in rows:
        buckets[rnd.randrange(parts)].append(r)
    for i, b in enumerate(buckets):
        pq.write_table(as_table(b), os.path.join(folder, "part-%05d.parquet" % i))
    return folder


def write_jsonl(rows, path):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n")
    return path


def write_jsonl_parts(rows, folder, parts=4, seed=2):
    os.makedirs(folder, exist_ok=True)
    rnd = random.Random(seed)
    buckets = [[] for _ in range(parts)]
    for r in rows:
        buckets[rnd.randrange(parts)].append(r)
    for i, b in enumerate(buckets):
        write_jsonl(b, os.path.join(folder, "part-%05d.json" % i))
    return folder


def stable_core(report):
    """What must be equal between two runs over the same rows: the
    report's documented stable core, the series, the requests not judged
    and the bad rows."""
    bad = sum((i.get("log") or {}).get("bad_lines", 0) for i in report["inputs"])
    return {
        "schema": report["schema"],
        "requests": report["totals"]["requests"],
        "packets": report["totals"]["packets"],
        "unknown_requests": report["totals"]["unknown_requests"],
        "bad_rows": bad,
        "rules": [
            {
                "name": r["name"],
                "matches": r["matches"],
                "requests": r["requests"],
                "unknown": r.get("unknown", 0),
            }
            for r in report["rules"]
        ],
        "series": report["series"],
    }


_spark = None


def spark():
    """The one Spark session of the run (local[2])."""
    global _spark
    if _spark is None:
        from pyspark.sql import SparkSession

        # The workers run this interpreter (the virtualenv's), not python3.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        _spark = (
            SparkSession.builder.master("local[2]")
            .appName("rctl-tests")
            .config("spark.sql.shuffle.partitions", "6")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
            .getOrCreate()
        )
        _spark.sparkContext.setLogLevel("ERROR")
    return _spark
