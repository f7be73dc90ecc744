"""The wheel alone: batches (Arrow and pandas) decided as `rctl eval`
decides the same requests; the columns it asks for; its errors."""

import json
import unittest

import pyarrow as pa

import rctl
import support

# (method, host, path, query, user agent, ip, referer): one of each kind
# of decision, every one with a limiter key of its own.
REQUESTS = [
    ("GET", "www.wikidata.org", "/sparql", "?query=1", support.BROWSER, "198.51.100.1", None),
    ("POST", "www.wikidata.org", "/sparql", "", "updater/1.0", "10.64.1.5", None),
    ("GET", "www.wikidata.org", "/sparql", "", "updater/1.0", "10.65.1.5", None),
    ("GET", "en.wikipedia.org", "/wiki/Special:Search", "", "sqlmap/1.7", "185.220.101.2", None),
    ("GET", "en.wikipedia.org", "/wiki/A", "", support.BROWSER, "192.0.2.7", None),
    ("GET", "en.wikipedia.org", "/api/rest_v1/page/html/X", "", "curl/8.0", "203.0.113.4", None),
    ("GET", "en.wikipedia.org", "/api/x", "", "python-requests/2.31", "203.0.113.5", None),
    ("GET", "en.wikipedia.org", "/static/a.png", "", support.BROWSER, "192.0.2.8", "http://spam.example/"),
    ("GET", "en.wikipedia.org", "/static/a.png", "", support.BROWSER, "192.0.2.9", "http://ok.example/"),
    ("GET", "en.wikipedia.org", "/w/index.php", "?title=X", support.BROWSER, "192.0.2.10", None),
]


def eval_json(method, host, path, query, ua, ip, referer, count=1, site=None):
    args = ["eval", support.artifact(), "--url", "https://%s%s%s" % (host, path, query),
            "-X", method, "--ip", ip, "-H", "User-Agent: " + ua, "--format", "json",
            "--count", str(count)]
    if referer:
        args += ["-H", "Referer: " + referer]
    if site:
        args += ["--site", site]
    return json.loads(support.rctl(*args))


def batch(reqs, dt="2026-05-13T12:00:00.000Z"):
    cols = {
        "dt": [dt] * len(reqs),
        "http_method": [r[0] for r in reqs],
        "uri_host": [r[1] for r in reqs],
        "uri_path": [r[2] for r in reqs],
        "uri_query": [r[3] for r in reqs],
        "user_agent": [r[4] for r in reqs],
        "ip": [r[5] for r in reqs],
        "referer": [r[6] for r in reqs],
    }
    return pa.RecordBatch.from_pydict({k: pa.array(v, pa.string()) for k, v in cols.items()})


class Wheel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = support.artifact()

    def test_a_batch_is_decided_as_rctl_eval_decides_each_request(self):
        for site in (None, "eqiad"):
            rs = rctl.Ruleset.load(self.path, site)
            got = rs.decide(batch(REQUESTS)).to_pylist()
            kinds = set()
            for req, row in zip(REQUESTS, got):
                e = eval_json(*req, site=site)["verdict"]
                self.assertEqual((row["verdict"], row["rule"]), (e["kind"], e["rule"]), (site, req))
                kinds.add(row["verdict"])
            self.assertTrue({"pass", "allow", "deny"} <= kinds, kinds)
            if site == "eqiad":
                self.assertIn(("deny", "eqiad_only"), [(r["verdict"], r["rule"]) for r in got])

    def test_identical_requests_are_throttled_as_rctl_eval_count_throttles_them(self):
        for req in (REQUESTS[0], REQUESTS[4]):
            n = 40
            got = rctl.Ruleset.load(self.path).decide(batch([req] * n)).to_pylist()
            e = eval_json(*req, count=n)
            want = {}
            for text, k in e["tally"].items():
                kind = text.split(" ")[0]
                want[kind] = want.get(kind, 0) + k
            have = {}
            for r in got:
                have[r["verdict"]] = have.get(r["verdict"], 0) + 1
            self.assertEqual(have, want, req)
            self.assertGreater(have.get("throttle", 0), 0)
            self.assertEqual(got[-1]["verdict"], e["verdict"]["kind"])
            self.assertEqual(got[-1]["status"], 429)

    def test_a_pandas_frame_and_a_table_are_decided_alike(self):
        b = batch(REQUESTS)
        want = rctl.Ruleset.load(self.path).decide(b).to_pylist()
        frame = rctl.Ruleset.load(self.path).decide(b.to_pandas())
        self.assertEqual(list(frame["verdict"]), [w["verdict"] for w in want])
        table = rctl.Ruleset.load(self.path).decide(pa.Table.from_batches([b, b]))
        self.assertEqual(table.num_rows, 2 * len(REQUESTS))

    def test_columns_read_are_those_the_rules_and_the_report_need(self):
        rs = rctl.Ruleset.load(self.path)
        wide = pa.schema([(c, pa.string()) for c in (
            "dt", "ip", "uri_host", "uri_path", "uri_query", "http_method", "user_agent",
            "referer", "accept_language", "x_analytics", "accept", "range", "hostname", "sequence")])
        cols = rs.columns(wide)
        self.assertEqual(sorted(cols), sorted(
            ["dt", "ip", "uri_host", "uri_path", "user_agent", "referer", "accept_language"]))
        narrow = pa.schema([(c, pa.string()) for c in ("dt", "ip", "uri_path", "user_agent")])
        self.assertEqual(rs.missing(narrow), ['header("referer")', "host"])

    def test_a_field_the_table_lacks_is_not_judged(self):
        b = batch(REQUESTS[7:8]).drop_columns(["referer"])
        row = rctl.Ruleset.load(self.path).decide(b).to_pylist()[0]
        self.assertEqual((row["verdict"], row["rule"]), ("unknown", "spam_referer"))

    def test_a_bad_row_is_decided_as_bad_with_why(self):
        b = batch(REQUESTS[:2], dt="yesterday")
        rows = rctl.Ruleset.load(self.path).decide(b).to_pylist()
        self.assertEqual([r["verdict"] for r in rows], ["bad", "bad"])
        self.assertEqual(rows[0]["reason"], "no time")

    def test_errors(self):
        with open(self.path, "rb") as f:
            art = bytearray(f.read())
        art[8:10] = (7).to_bytes(2, "little")
        with self.assertRaises(rctl.ArtifactError) as e:
            rctl.Ruleset(bytes(art))
        self.assertIn("artifact format version 7 is not supported", str(e.exception))
        rs = rctl.Ruleset.load(self.path)
        with self.assertRaises(rctl.SchemaError) as e:
            rs.decide(batch(REQUESTS).drop_columns(["ip"]))
        self.assertIn("the table has no ip column", str(e.exception))
        with self.assertRaises(TypeError):
            rs.decide([1, 2])
        with self.assertRaises(rctl.RctlError) as e:
            rs.hit(rs.rule_names.index("scanners"), batch(REQUESTS))
        self.assertIn("not a throttle rule", str(e.exception))
        with self.assertRaises(rctl.RctlError) as e:
            rs.hit(rs.rule_names.index("title_loop"), batch(REQUESTS))
        self.assertIn("no column _rctl_key", str(e.exception))


if __name__ == "__main__":
    unittest.main()
