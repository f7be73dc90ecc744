"""The Spark job (rctl.spark) against `rctl dry-run --log` on the same rows
on one machine: Parquet parts and JSON lines, mapInArrow and mapInPandas,
shuffled input; and the errors raised on the driver."""

import json
import os
import random
import unittest

import pyarrow as pa
import pyarrow.parquet as pq

import rctl
import rctl.spark
import support


def dry_run(path, *extra):
    out = support.rctl("dry-run", support.artifact(), "--log", path, "--format", "json", *extra, check=False)
    return json.loads(out)


def one_file(table, name):
    """A folder holding `table` as one Parquet file."""
    folder = os.path.join(support.tmpdir(), name)
    os.makedirs(folder, exist_ok=True)
    pq.write_table(table, os.path.join(folder, "part-0.parquet"))
    return folder


class SparkJob(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.spark = support.spark()
        cls.rows = support.traffic()
        d = support.tmpdir()
        cls.parts = support.write_parquet_parts(cls.rows, os.path.join(d, "parts"), parts=8)
        cls.whole = os.path.join(d, "whole.parquet")
        pq.write_table(support.table(cls.rows), cls.whole)
        cls.expected = dry_run(cls.whole)
        with open(support.artifact(), "rb") as f:
            cls.artifact = f.read()

    def run_job(self, path, fmt="parquet", use_arrow=None, **kw):
        run, info = rctl.spark.plan(self.spark, path, self.artifact, fmt, use_arrow=use_arrow, **kw)
        return run(), info

    def check_equal(self, got, expected):
        g, e = support.stable_core(got), support.stable_core(expected)
        for a, b in zip(g["rules"], e["rules"]):
            self.assertEqual(a, b, "rule %s" % b["name"])
        self.assertEqual(g, e)

    def test_parquet_parts_equal_dry_run(self):
        got, info = self.run_job(self.parts)
        self.assertEqual(len(os.listdir(self.parts)), 8)
        # The dataset exercises what it must: every throttle limits, the
        # allow and the deny decide, the rule on an absent column is not
        # judged, and bad rows are counted.
        by = {r["name"]: r for r in self.expected["rules"]}
        for name in ("sparql_per_ip", "title_loop", "generic_clients"):
            self.assertGreater(by[name]["requests"]["throttle"], 0, name)
        self.assertGreater(by["cloud_shadow"]["would"]["throttle"], 0)
        self.assertGreater(by["updater_exempt"]["requests"]["allow"], 0)
        self.assertGreater(by["scanners"]["requests"]["deny"], 0)
        self.assertGreater(by["spam_referer"]["unknown"], 0)
        self.assertEqual(support.stable_core(self.expected)["bad_rows"], 7)
        self.assertEqual(
            info["throttle_stages"], ["sparql_per_ip", "title_loop", "cloud_shadow", "generic_clients"]
        )
        self.assertNotIn("referer", info["columns"])
        self.assertIn('header("referer")', info["missing_fields"])
        self.check_equal(got, self.expected)
        self.assertEqual(got["distributed"]["bad_rows"], 7)
        # Throttle keys' requests really were split over several files.
        per_file = {}
        for f in sorted(os.listdir(self.parts)):
            t = pq.read_table(os.path.join(self.parts, f))
            for ip in t.column("ip").to_pylist():
                per_file.setdefault(ip, set()).add(f)
        self.assertGreaterEqual(len(per_file["198.51.100.10"]), 6)

    def test_map_in_pandas_equals_dry_run(self):
        got, info = self.run_job(self.parts, use_arrow=False)
        self.assertEqual(info["map"], "mapInPandas")
        self.check_equal(got, self.expected)

    def test_shuffled_input_gives_the_same_report(self):
        rows = list(self.rows)
        random.Random(99).shuffle(rows)
        folder = support.write_parquet_parts(rows, os.path.join(support.tmpdir(), "shuffled"), parts=9, seed=5)
        got, _ = self.run_job(folder)
        self.check_equal(got, self.expected)

    def test_a_timestamp_ts_column_equals_dry_run(self):
        d = support.tmpdir()
        folder = support.write_parquet_parts(self.rows, os.path.join(d, "ts"), parts=8, as_table=support.table_ts)
        whole = os.path.join(d, "whole-ts.parquet")
        pq.write_table(support.table_ts(self.rows), whole)
        expected = dry_run(whole)
        self.assertEqual(expected["inputs"][0]["log"]["columns"][-1], "ts")
        got, info = self.run_job(folder)
        self.assertIn("ts", info["columns"])
        self.check_equal(got, expected)
        # The same times as dt's: the same figures.
        self.assertEqual(support.stable_core(expected), support.stable_core(self.expected))

    def test_json_lines_equal_dry_run(self):
        d = support.tmpdir()
        folder = support.write_jsonl_parts(self.rows, os.path.join(d, "jsonl"))
        # One machine's log is written in time order, as a server writes
        # it (a text log is judged in file order); the parts are not.
        in_order = sorted(self.rows, key=lambda r: r["dt"])
        whole = support.write_jsonl(in_order, os.path.join(d, "whole.jsonl"))
        expected = dry_run(whole, "--log-format", "webrequest")
        got, _ = self.run_job(folder, fmt="json")
        self.check_equal(got, expected)
        # The same rows as the Parquet table: the same figures, but for
        # the rule on referer, which the JSON format carries (absent on
        # every line here) and the table lacks.
        j, p = support.stable_core(expected), support.stable_core(self.expected)
        self.assertEqual(j["rules"][:7], p["rules"][:7])
        by = {r["name"]: r for r in j["rules"]}
        self.assertEqual(by["spam_referer"]["unknown"], 0)
        self.assertEqual(j["unknown_requests"], 0)
        self.assertGreater(p["unknown_requests"], 0)

    def test_top_talkers_merge_with_error_bounds(self):
        got, _ = self.run_job(self.parts)
        by = {r["name"]: r for r in got["rules"]}
        exp = {r["name"]: r for r in self.expected["rules"]}
        top = by["sparql_per_ip"]["top_ips"]
        want = {h["key"]: h["count"] for h in exp["sparql_per_ip"]["top_ips"]}
        self.assertTrue(top)
        for h in top:
            # A merged count is within its stated error of the exact one.
            if h["key"] in want:
                self.assertLessEqual(abs(h["count"] - want[h["key"]]), h["error"], h)

    def test_missing_column_is_an_error_on_the_driver(self):
        folder = one_file(support.table(self.rows[:50]).drop(["ip"]), "no-ip")
        with self.assertRaises(rctl.SchemaError) as e:
            rctl.spark.plan(self.spark, folder, self.artifact)
        self.assertIn("no ip column", str(e.exception))

    def test_non_string_ip_is_an_error_on_the_driver(self):
        t = support.table(self.rows[:50])
        t = t.set_column(t.schema.get_field_index("ip"), "ip", pa.array(range(50), pa.int64()))
        folder = one_file(t, "int-ip")
        with self.assertRaises(rctl.SchemaError) as e:
            rctl.spark.plan(self.spark, folder, self.artifact)
        self.assertIn("ip", str(e.exception))
        self.assertIn("Int64", str(e.exception))

    def test_artifact_of_another_version_is_an_error_on_the_driver(self):
        bad = bytearray(self.artifact)
        bad[8:10] = (999).to_bytes(2, "little")
        with self.assertRaises(rctl.ArtifactError) as e:
            rctl.spark.plan(self.spark, self.parts, bytes(bad))
        self.assertIn("artifact format version 999 is not supported", str(e.exception))

    def test_bad_rows_past_the_bound_stop_the_run(self):
        run, _ = rctl.spark.plan(self.spark, self.parts, self.artifact, max_bad_rows=3)
        with self.assertRaises(rctl.spark.BadRowsError) as e:
            run()
        self.assertIn("7 bad rows, over --max-bad-rows 3", str(e.exception))
        self.assertIn("no time", str(e.exception))


if __name__ == "__main__":
    unittest.main()
