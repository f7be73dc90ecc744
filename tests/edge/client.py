#!/usr/bin/env python3
"""Real HTTP clients for the end-to-end tests (tests/edge/).

  client.py load PLAN.json   groups of python-requests clients, each from
                             its own source addresses, at a rate, for a
                             duration; prints what each group got (JSON:
                             sent, count per status, Retry-After values,
                             the first body per status, X-Rctl-Status
                             values, the slowest answer in ms, errors)
  client.py replay REQS.json raw requests, one connection each, started in
                             order 2 ms apart, from their own source
                             addresses; prints each status (JSON; 0: no
                             answer within 3 s or the connection closed)

A load plan: {"target": "http://ADDR:PORT", "duration": SECONDS,
"groups": [{"name", "sources": [IP...], "method", "path" (or "paths":
[...], taken in turn), "headers": {...}, "body", "rate" (requests/s for
the whole group), "threads"}]}. Each thread has one requests.Session
(keep-alive) bound to one source address.
"""

import json
import socket
import sys
import threading
import time

import requests
from requests.adapters import HTTPAdapter


class SourceAdapter(HTTPAdapter):
    """An adapter whose connections leave from one source address."""

    def __init__(self, source, **kw):
        self.source = source
        super().__init__(**kw)

    def init_poolmanager(self, *args, **kw):
        kw["source_address"] = (self.source, 0)
        super().init_poolmanager(*args, **kw)


def run_group(plan, g, out, lock):
    threads = max(1, int(g.get("threads", 1)))
    period = threads / float(g["rate"])
    paths = g.get("paths") or [g["path"]]
    deadline_start = time.monotonic()
    duration = float(g.get("duration", plan["duration"]))

    def worker(i):
        src = g["sources"][i % len(g["sources"])]
        s = requests.Session()
        s.mount("http://", SourceAdapter(src))
        n = i
        next_at = deadline_start + period * i / threads
        while True:
            now = time.monotonic()
            if now - deadline_start >= duration:
                break
            if now < next_at:
                time.sleep(next_at - now)
            next_at += period
            path = paths[n % len(paths)]
            n += threads
            t0 = time.monotonic()
            try:
                r = s.request(
                    g.get("method", "GET"),
                    plan["target"] + path,
                    headers=g.get("headers", {}),
                    data=g.get("body"),
                    timeout=10,
                )
                status, retry = r.status_code, r.headers.get("Retry-After")
                body, rstatus = r.text[:200], r.headers.get("X-Rctl-Status")
            except requests.RequestException as e:
                status, retry, body, rstatus = 0, None, None, None
                s = requests.Session()
                s.mount("http://", SourceAdapter(src))
                with lock:
                    out["error_kinds"][type(e).__name__] = (
                        out["error_kinds"].get(type(e).__name__, 0) + 1
                    )
            ms = (time.monotonic() - t0) * 1000.0
            with lock:
                out["sent"] += 1
                k = str(status)
                out["status"][k] = out["status"].get(k, 0) + 1
                if retry is not None and retry not in out["retry_after"]:
                    out["retry_after"].append(retry)
                if body is not None and k not in out["body"]:
                    out["body"][k] = body
                if rstatus is not None and rstatus not in out["x_rctl_status"]:
                    out["x_rctl_status"].append(rstatus)
                out["max_ms"] = max(out["max_ms"], ms)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def load(plan):
    results, lock, ts = {}, threading.Lock(), []
    for g in plan["groups"]:
        out = {
            "sent": 0,
            "status": {},
            "retry_after": [],
            "body": {},
            "x_rctl_status": [],
            "max_ms": 0.0,
            "error_kinds": {},
        }
        results[g["name"]] = out
        ts.append(threading.Thread(target=run_group, args=(plan, g, out, lock)))
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def replay(spec):
    """Each request on its own connection, started 2 ms after the one
    before (in order, without waiting for answers: a dropped request is
    never answered, and waits out its 3 s timeout beside the others)."""
    host, port = spec["target"]
    reqs = spec["requests"]
    statuses = [0] * len(reqs)
    start = time.monotonic()

    def one(i, r):
        time.sleep(max(0.0, start + 0.002 * i - time.monotonic()))
        data = b""
        try:
            s = socket.create_connection((host, port), timeout=3, source_address=(r["src"], 0))
            try:
                s.sendall(bytes.fromhex(r["head_hex"]) + bytes.fromhex(r.get("body_hex", "")))
                while b"\r\n" not in data:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            finally:
                s.close()
        except OSError:
            pass
        statuses[i] = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0

    ts = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(reqs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return statuses


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        spec = json.load(f)
    if cmd == "load":
        print(json.dumps(load(spec)))
    elif cmd == "replay":
        print(json.dumps(replay(spec)))
    else:
        sys.exit("usage: client.py load|replay FILE.json")


if __name__ == "__main__":
    main()
