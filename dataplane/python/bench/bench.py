#!/usr/bin/env python3
"""The wheel's batch decision against `rctl dry-run --log`, on the same
rows in the same run.

One generated webrequest table (RCTL_BENCH_ROWS rows, default 1,000,000:
a million random client addresses, SPARQL, titles, API calls and
browsers) is written as Parquet; then, in the same run, `rctl dry-run
--log TABLE --format json` (RCTL_BIN, default target/release/rctl) over
it, and `Ruleset.decide` over the same rows (the columns it reads, read
into Arrow first and not timed), both on the shipped rules. Prints
rows/s of each and their ratio.

    python dataplane/python/bench/bench.py
"""

import os
import random
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

import rctl

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def rows(n, seed=3):
    rnd = random.Random(seed)
    t0 = 1_778_673_600_000  # 2026-05-13T12:00:00Z, ms
    uas = ["Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
           "python-requests/2.31", "curl/8.0", "wmf-streaming-updater-consumer/0.3.140"]
    paths = ["/sparql", "/wiki/Main_Page", "/api/rest_v1/page/html/X", "/w/index.php", "/static/a.png"]
    dt, ip, path, ua, host = [], [], [], [], []
    for i in range(n):
        ms = t0 + i // 10  # 10,000 requests a second
        s, frac = divmod(ms, 1000)
        dt.append(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + ".%03dZ" % frac)
        ip.append("%d.%d.%d.%d" % (rnd.randrange(1, 223), rnd.randrange(256), rnd.randrange(256), rnd.randrange(1, 255)))
        path.append(rnd.choice(paths))
        ua.append(rnd.choice(uas))
        host.append("www.wikidata.org" if rnd.random() < 0.3 else "en.wikipedia.org")
    return pa.table({"dt": dt, "ip": ip, "uri_host": host, "uri_path": path, "user_agent": ua,
                     "http_method": ["GET"] * n, "uri_query": [""] * n,
                     "accept_language": ["en"] * n})


def main():
    n = int(os.environ.get("RCTL_BENCH_ROWS", "1000000"))
    rctl_bin = os.environ.get("RCTL_BIN") or os.path.join(ROOT, "target", "release", "rctl")
    d = tempfile.mkdtemp(prefix="rctl-bench-")
    art = os.path.join(d, "rules.rctlc")
    subprocess.run([rctl_bin, "compile", os.path.join(ROOT, "rules"), "-o", art], check=True,
                   capture_output=True)
    table = rows(n)
    path = os.path.join(d, "webrequest.parquet")
    pq.write_table(table, path, row_group_size=1 << 20)

    t = time.perf_counter()
    subprocess.run([rctl_bin, "dry-run", art, "--log", path, "--format", "json"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dry = time.perf_counter() - t

    rs = rctl.Ruleset.load(art)
    cols = rs.columns(table.schema)
    batches = pq.read_table(path, columns=cols).to_batches(max_chunksize=65536)
    t = time.perf_counter()
    decided = sum(rs.decide(b).num_rows for b in batches)
    wheel = time.perf_counter() - t
    assert decided == n

    print("rows: %d; columns read: %s" % (n, ", ".join(cols)))
    print("rctl dry-run --log (whole run, process included): %.2f s, %.0f rows/s" % (dry, n / dry))
    print("Ruleset.decide, batches of 65,536: %.2f s, %.0f rows/s" % (wheel, n / wheel))
    print("ratio (wheel / dry-run rows/s): %.2f" % (dry / wheel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
