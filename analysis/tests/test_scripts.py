"""Runs every analysis script on the real runs in data/ (and load.py on its synthetic fixture,
while no real load run exists) and checks each picture: produced, a real PNG (or SVG) of a
sensible size, and not blank. Also checks bad input (one line on stderr, exit 2), that the
numbers the scripts print agree with the data, and that render_all.sh renders every picture
analysis/README.md shows.

Run from the repository root: python3 -m unittest discover -s analysis/tests -v
"""

from __future__ import annotations

import csv
import json
import re
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
ANALYSIS = ROOT / "analysis"
FIXTURES = ANALYSIS / "tests" / "fixtures"
LOAD_FIXTURE = FIXTURES / "load-synthetic"
CLUSTER_FIXTURE = FIXTURES / "cluster-cut"


COLLECTIONS = ROOT / "data" / "collections"
# The value-type runs of sizes no model is fitted on (data/record_collections.sh ROOT=data/heldout).
HELDOUT = ROOT / "data" / "heldout"
# Sizes no model is fitted on nor was ever chosen by (ROOT=data/unseen, recorded after the fit),
# and the same sizes in a second later sitting (ROOT=data/unseen-2).
UNSEEN = ROOT / "data" / "unseen"
UNSEEN_2 = ROOT / "data" / "unseen-2"
VALUE_TYPE_ROOTS = (COLLECTIONS, HELDOUT, UNSEEN, UNSEEN_2)


def data_runs() -> list[Path]:
    """Every run directory in data/ (a directory holding summary.csv) with its probe-level files:
    the value-type runs of data/collections/, data/heldout/, data/unseen/ and data/unseen-2/ ship
    without them (see collection_runs)."""
    return sorted(
        p.parent
        for p in (ROOT / "data").rglob("summary.csv")
        if not any(root in p.parents for root in VALUE_TYPE_ROOTS)
    )


def collection_runs() -> list[Path]:
    """The value-type runs (data/record_collections.sh): summary.csv, writes.csv, timeline.csv and
    run.json only."""
    return sorted(p.parent for root in VALUE_TYPE_ROOTS for p in root.rglob("summary.csv"))


def sweep_runs() -> list[Path]:
    """Runs without custom commands."""
    return [r for r in data_runs() if not re.search(r"^\d+,command,", (r / "writes.csv").read_text(), re.M)]


def script(name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, str(ANALYSIS / name), *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{name} {' '.join(map(str, args))} exited {result.returncode}:\n{result.stderr}")
    return result


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR", f"{path}: no IHDR chunk"
    return struct.unpack(">II", data[16:24])


class PictureChecks(unittest.TestCase):
    def assert_picture(self, path: Path, min_width: int = 800, min_height: int = 400) -> None:
        """A PNG of a sensible size whose pixels are not all background."""
        self.assertTrue(path.is_file(), f"{path} was not written")
        self.assertGreater(path.stat().st_size, 20_000, f"{path} is suspiciously small")
        width, height = png_size(path)
        self.assertGreaterEqual(width, min_width, path)
        self.assertGreaterEqual(height, min_height, path)
        pixels = mpimg.imread(path)[..., :3]
        self.assertEqual(pixels.shape[:2], (height, width))
        flat = (pixels.reshape(-1, 3) * 255).round().astype(np.int32)
        codes = flat[:, 0] * 65536 + flat[:, 1] * 256 + flat[:, 2]
        values, counts = np.unique(codes, return_counts=True)
        background_share = counts.max() / len(codes)
        # Axes, dots, labels: a real chart has many colours and a good share of non-background.
        self.assertGreater(len(values), 50, f"{path}: only {len(values)} colours")
        self.assertLess(background_share, 0.97, f"{path}: {background_share:.1%} of it is one colour")


class DataIsThere(unittest.TestCase):
    def test_data_holds_real_runs_with_their_metadata(self):
        runs = data_runs()
        self.assertTrue(runs, "no runs in data/")
        for run in runs:
            meta = json.loads((run / "run.json").read_text())
            self.assertEqual(meta["status"], "complete", run)
            self.assertTrue(meta["server"]["version"], run)
            for name in ("probes.csv", "writes.csv", "stalls.csv"):
                self.assertTrue((run / name).is_file(), f"{run}/{name}")


class Timeline(PictureChecks):
    def test_every_run_renders_whole_and_zoomed(self):
        with tempfile.TemporaryDirectory() as tmp:
            for run in data_runs():
                out = Path(tmp) / f"{run.name}.png"
                script("timeline.py", run, "-o", out)
                self.assert_picture(out)
                zoom = Path(tmp) / f"{run.name}-zoom.png"
                script("timeline.py", run, "--write", "largest", "-o", zoom)
                self.assert_picture(zoom)

    def test_svg_and_a_time_window(self):
        run = data_runs()[0]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "t.svg"
            script("timeline.py", run, "--from", "1", "--to", "3", "-o", out)
            text = out.read_text()
            self.assertIn("<svg", text[:2000])
            # The probes are rasterized (an embedded image), the rest stays vector.
            self.assertIn("<image", text)
            self.assertGreater(out.stat().st_size, 20_000)

    def test_a_crowded_window_labels_only_its_largest_writes(self):
        """A whole sweep (100 writes) labels only the largest size; a window of 20 labels all."""
        run = sweep_runs()[0]
        with (run / "writes.csv").open() as f:
            writes = list(csv.DictReader(f))
        self.assertGreater(len(writes), 30, "the first sweep should be a whole 1M..512M run")
        largest = max(int(w["size_bytes"]) for w in writes)
        label = lambda w: f"{w['op']} {int(w['size_bytes']) >> 20}M"
        # matplotlib's SVG keeps each text as a comment beside its glyph paths.
        labels = lambda svg: re.findall(r"<!-- ((?:set|delete) \d+M)(?: \(#\d+, [\d.]+ ms\))? -->", svg)
        with tempfile.TemporaryDirectory() as tmp:
            whole = Path(tmp) / "whole.svg"
            script("timeline.py", run, "-o", whole)
            expected = sorted(label(w) for w in writes if int(w["size_bytes"]) == largest)
            self.assertEqual(sorted(labels(whole.read_text())), expected)
            first = [w for w in writes if int(w["seq"]) <= 20]
            window = Path(tmp) / "window.svg"
            end = max(int(w["reply_us"]) for w in first) / 1e6 + 0.01
            script("timeline.py", run, "--from", "0", "--to", f"{end:.3f}", "-o", window)
            self.assertEqual(sorted(labels(window.read_text())), sorted(label(w) for w in first))

    def test_bad_input_is_one_line_and_exit_2(self):
        run = data_runs()[0]
        with tempfile.TemporaryDirectory() as tmp:
            cases = [
                ((Path(tmp) / "missing", "-o", Path(tmp) / "x.png"), "missing"),
                ((run, "-o", Path(tmp) / "x.jpg"), "x.jpg"),
                ((run, "--from", "5", "--to", "2", "-o", Path(tmp) / "x.png"), "--from"),
                ((run, "--from", "9000", "-o", Path(tmp) / "x.png"), "--from"),
                ((run, "--write", "9999", "-o", Path(tmp) / "x.png"), "--write"),
                ((run, "--write", "biggest", "-o", Path(tmp) / "x.png"), "--write"),
                ((run, "--write", "1", "--from", "1", "-o", Path(tmp) / "x.png"), "--write"),
            ]
            for args, needle in cases:
                result = script("timeline.py", *args, check=False)
                self.assertEqual(result.returncode, 2, f"{args}: {result.stderr}")
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertIn(needle, result.stderr)
                self.assertFalse((Path(tmp) / "x.png").exists())


class Sizes(PictureChecks):
    def test_all_runs_on_one_chart_and_the_fits_agree_with_the_data(self):
        runs = sweep_runs()
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "sizes.png"
            result = script("sizes.py", *runs, "-o", out)
            self.assert_picture(out)
            fits = re.findall(r"^(.+): op set, set_ms = (\S+) ms \+ (\S+) ms/MiB", result.stdout, re.M)
            self.assertEqual(len(fits), len(runs), result.stdout)
            for run in runs:
                # Check the printed slope against a fit made here from the raw CSV.
                with open(run / "summary.csv", newline="") as handle:
                    rows = [r for r in csv.DictReader(handle) if r["op"] == "set" and r["ok"] == "true"]
                x = np.array([float(r["size_bytes"]) / 2**20 for r in rows])
                y = np.array([float(r["set_ms"]) for r in rows])
                slope = np.polyfit(x, y, 1)[0]
                printed = [float(s) for label, _, s in fits if json.loads((run / "run.json").read_text())["server"]["version"] in label]
                self.assertTrue(any(abs(p - slope) < 1e-3 * max(1, abs(slope)) for p in printed), (run, slope, fits))
                # A larger value takes the writer longer: true of every real run.
                self.assertGreater(slope, 0, run)

    def test_delete_and_linear_and_svg(self):
        runs = sweep_runs()
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "d.png"
            script("sizes.py", *runs, "--op", "delete", "--linear", "-o", out)
            self.assert_picture(out)
            svg = Path(tmp) / "d.svg"
            script("sizes.py", runs[0], "-o", svg)
            self.assertIn("<svg", svg.read_text()[:2000])

    def test_no_rows_of_that_op_is_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            result = script("sizes.py", sweep_runs()[0], "--op", "overwrite", "-o", Path(tmp) / "x.png", check=False)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn("--op overwrite", result.stderr)


class Compare(PictureChecks):
    def runs(self) -> tuple[Path, Path]:
        runs = sweep_runs()
        return runs[0], runs[-1]

    def probe_json(self, base: Path, cand: Path) -> dict:
        """`probe compare --format json` of the pair, as compare.py takes it."""
        sys.path.insert(0, str(ANALYSIS))
        try:
            import compare  # the script's own way to find the binary
            probe = compare.find_probe(None)
        finally:
            sys.path.pop(0)
        result = subprocess.run([probe, "compare", str(base), str(cand), "--format", "json"], capture_output=True, text=True, timeout=120)
        self.assertIn(result.returncode, (0, 1, 3), result.stderr)
        return json.loads(result.stdout)

    @staticmethod
    def table_rows(stdout: str) -> list[tuple[str, str, str]]:
        """(metric, size, verdict) of each line of the printed table."""
        rows = []
        for line in stdout.splitlines():
            match = re.match(r"^(hol_delay_ms|set_ms)\s+(\S+)\s.*\s\S+  (\S.*)$", line)
            if match:
                rows.append(match.groups())
        return rows

    def test_draws_the_verdicts_of_probe_compare(self):
        base, cand = self.runs()
        report = self.probe_json(base, cand)
        expected = {}
        for row in report["comparisons"][0]["rows"]:
            if row["op"] != "set":
                continue
            for metric, key in (("hol_delay_ms", "hol_delay"), ("set_ms", "set")):
                word = row[key]["verdict"].replace("_", " ")
                if word == "inconclusive" and row[key]["repeats_needed"]:
                    word += f", {row[key]['repeats_needed']} repeats"
                expected[(metric, hd_size(row["size_bytes"]))] = word
        with tempfile.TemporaryDirectory() as tmp:
            # Run by the script itself, and from a file: the same verdicts, probe compare's.
            ran = script("compare.py", base, cand, "-o", Path(tmp) / "c.png")
            self.assert_picture(Path(tmp) / "c.png")
            path = Path(tmp) / "verdicts.json"
            path.write_text(json.dumps(report))
            given = script("compare.py", base, cand, "--verdicts", path, "-o", Path(tmp) / "f.png")
            for result in (ran, given):
                rows = self.table_rows(result.stdout)
                self.assertEqual(len(rows), len(expected), result.stdout)
                for metric, size, verdict in rows:
                    self.assertEqual(verdict, expected[(metric, size)], result.stdout)
            # The file's word is drawn as it is: no rule of the script's own overrides it.
            first = next(r for r in report["comparisons"][0]["rows"] if r["op"] == "set")
            first["set"]["verdict"] = "regression"
            path.write_text(json.dumps(report))
            edited = script("compare.py", base, cand, "--verdicts", path, "-o", Path(tmp) / "e.png")
            line = next(l for l in edited.stdout.splitlines() if l.startswith("set_ms") and f" {hd_size(first['size_bytes'])} " in l)
            self.assertTrue(line.endswith("  regression"), line)

    def test_what_the_candidate_failed_is_in_the_picture_s_title(self):
        # A regression decided by a size the candidate only failed (no row in any panel).
        base, cand = self.runs()
        report = self.probe_json(base, cand)
        report["comparisons"][0]["verdict"] = "regression"
        report["comparisons"][0]["candidate_failed"] = ["set 32M: OOM command not allowed when used memory > 'maxmemory'."]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "verdicts.json"
            path.write_text(json.dumps(report))
            result = script("compare.py", base, cand, "--verdicts", path, "-o", Path(tmp) / "f.png")
            self.assertIn("verdicts of probe compare: regression", result.stdout)
            self.assertIn("the candidate only failed: set 32M: OOM", result.stdout)
            self.assert_picture(Path(tmp) / "f.png")

    def test_verdicts_of_other_runs_or_not_probe_compare_are_refused(self):
        base, cand = self.runs()
        report = self.probe_json(base, cand)
        with tempfile.TemporaryDirectory() as tmp:
            swapped = Path(tmp) / "swapped.json"
            report["comparisons"][0]["baseline"]["run_id"], report["comparisons"][0]["candidate"]["run_id"] = (
                report["comparisons"][0]["candidate"]["run_id"],
                report["comparisons"][0]["baseline"]["run_id"],
            )
            swapped.write_text(json.dumps(report))
            for content, needle in ((None, "other runs"), ("[1, 2, 3]", "not the output of probe compare"), ("{not json", "--verdicts")):
                path = swapped if content is None else Path(tmp) / "v.json"
                if content is not None:
                    path.write_text(content)
                result = script("compare.py", base, cand, "--verdicts", path, "-o", Path(tmp) / "x.png", check=False)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(needle, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)

    def test_a_run_against_itself(self):
        # probe compare refuses a run compared with itself (it can only say no change: in CI,
        # the candidate's path pointing at the baseline's), and the script says its error.
        base, _ = self.runs()
        with tempfile.TemporaryDirectory() as tmp:
            same = script("compare.py", base, base, "-o", Path(tmp) / "aa.png", check=False)
            self.assertEqual(same.returncode, 2, same.stderr)
            self.assertIn("hold the same run", same.stderr)
            self.assertFalse((Path(tmp) / "aa.png").exists())

    def test_bad_directory(self):
        base, cand = self.runs()
        with tempfile.TemporaryDirectory() as tmp:
            result = script("compare.py", base, Path(tmp), "-o", Path(tmp) / "x.png", check=False)
            self.assertEqual(result.returncode, 2)
            self.assertIn("summary.csv", result.stderr)


def hd_size(size: int) -> str:
    for unit, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{suffix}"
    return f"{size}B"


class Load(PictureChecks):
    """No real load run exists yet (probe load is being built): the SYNTHETIC fixture only checks
    that the documented load_timeline.csv columns are read and drawn."""

    def test_fixture_renders_and_real_load_runs_too(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "load.png"
            script("load.py", LOAD_FIXTURE, "-o", out)
            self.assert_picture(out)
            for timeline in (ROOT / "data").rglob("load_timeline.csv"):
                real = Path(tmp) / f"{timeline.parent.name}.png"
                script("load.py", timeline.parent, "-o", real)
                self.assert_picture(real)

    def test_a_load_run_s_writes_are_shaded_at_their_seconds(self):
        # As probe load writes them: load_writes.csv on the run clock, the timeline's seconds from
        # the load's start (5 s into the run here, each row's start_us its second's start).
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "load"
            run.mkdir()
            with open(run / "load_timeline.csv", "w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(["second", "requests", "bytes", "p50_us", "p99_us", "max_us", "errors", "server", "start_us"])
                for second in range(6):
                    writer.writerow([second, 1000, 2_000_000, 300, 900, 1500, 0, "all", 5_000_000 + second * 1_000_000])
                writer.writerow([6, 0, 0, "", "", "", 3, "all", 11_000_000])
            with open(run / "load_writes.csv", "w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(["seq", "op", "size_bytes", "set_ms", "start_us", "reply_us", "ok"])
                writer.writerow([1, "set", 8 << 20, 12.0, 8_200_000, 8_212_000, "true"])
            result = script("load.py", run, "-o", Path(tmp) / "load.png")
            self.assertIn("1 write(s) shaded, from load_writes.csv (the first at 3.2 s)", result.stdout)
            self.assert_picture(Path(tmp) / "load.png")

    def test_several_servers_and_extra_columns(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "two"
            run.mkdir()
            with open(LOAD_FIXTURE / "load_timeline.csv", newline="") as handle:
                rows = list(csv.DictReader(handle))
            with open(run / "load_timeline.csv", "w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(["second", "server", "requests", "bytes", "p50_us", "p99_us", "max_us", "errors", "write_seq"])
                for r in rows:
                    for server, share in (("127.0.0.1:7001", 0.5), ("127.0.0.1:7002", 0.5), ("all", 1.0)):
                        writer.writerow([r["second"], server, int(int(r["requests"]) * share), int(int(r["bytes"]) * share), r["p50_us"], r["p99_us"], r["max_us"], r["errors"], ""])
            out = Path(tmp) / "two.png"
            script("load.py", run, "-o", out)
            self.assert_picture(out)

    def test_missing_column_is_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "bad"
            run.mkdir()
            (run / "load_timeline.csv").write_text("second,requests\n0,10\n")
            result = script("load.py", run, "-o", Path(tmp) / "x.png", check=False)
            self.assertEqual(result.returncode, 2)
            self.assertIn("p99_us", result.stderr)


class Nodes(PictureChecks):
    """nodes.py on a fixture cut from a real 3-shard cluster run (3 of its nodes, rows reordered so
    the script must sort the panels itself), and on the single-server runs of data/."""

    @staticmethod
    def svg_texts(svg: str, pattern: str) -> list[str]:
        # matplotlib's SVG keeps each text as a comment beside its glyph paths.
        return re.findall(r"<!-- (" + pattern + r") -->", svg)

    def test_fixture_png_and_svg_one_panel_per_node_in_order(self):
        with open(CLUSTER_FIXTURE / "summary.csv", newline="") as handle:
            rows = [r for r in csv.DictReader(handle) if r["seq"] == "3"]
        hol = {r["node"]: float(r["hol_delay_ms"]) for r in rows}
        with open(CLUSTER_FIXTURE / "writes.csv", newline="") as handle:
            write = next(r for r in csv.DictReader(handle) if r["seq"] == "3")
        start, reply = int(write["start_us"]), int(write["reply_us"])
        margin = max(0.25 * (reply - start), 20_000)
        with open(CLUSTER_FIXTURE / "probes.csv", newline="") as handle:
            in_window = [r["node"] for r in csv.DictReader(handle) if start - margin <= int(r["intended_us"]) <= reply + margin]
        with tempfile.TemporaryDirectory() as tmp:
            png = Path(tmp) / "n.png"
            script("nodes.py", CLUSTER_FIXTURE, "--write", "1", "-o", png)
            self.assert_picture(png, min_height=600)
            svg = Path(tmp) / "n.svg"
            script("nodes.py", CLUSTER_FIXTURE, "--write", "3", "-o", svg)
            text = svg.read_text()
            self.assertIn("<svg", text[:2000])
            # The written shard's master, its replica, then the other shard, whatever the CSV order.
            names = self.svg_texts(text, r"127\.0\.0\.1:\d+ [^<]*?")
            self.assertEqual(
                names,
                ["127.0.0.1:7201 master shard 0 (written)", "127.0.0.1:7205 replica shard 0 (same shard)", "127.0.0.1:7202 master shard 1"],
            )
            # Each panel's hol_delay_ms is that node's summary.csv row for the write.
            blocked = self.svg_texts(text, r"others blocked [\d.]+ ms")
            self.assertEqual(blocked, [f"others blocked {hol[n]:.1f} ms" for n in ("127.0.0.1:7201", "127.0.0.1:7205", "127.0.0.1:7202")])
            # Each panel has that node's probes of the window, no more: one rasterized image each.
            counts = [int(c) for c in re.findall(r"<!-- (\d+) probes;", text)]
            self.assertEqual(counts, [in_window.count(n) for n in ("127.0.0.1:7201", "127.0.0.1:7205", "127.0.0.1:7202")])
            self.assertTrue(all(counts), counts)
            self.assertEqual(text.count("<image"), 3)

    def test_a_run_without_node_columns_is_one_panel_with_a_note(self):
        run = data_runs()[0]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "one.png"
            result = script("nodes.py", run, "--write", "largest:delete", "-o", out)
            self.assertIn("one node", result.stderr)
            self.assert_picture(out)
            svg = Path(tmp) / "one.svg"
            script("nodes.py", run, "-o", svg)
            self.assertEqual(len(self.svg_texts(svg.read_text(), r"others blocked [\d.]+ ms")), 1)

    def test_bad_input_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            no_summary = Path(tmp) / "no-summary"
            no_column = Path(tmp) / "no-column"
            not_a_number = Path(tmp) / "not-a-number"
            for copy in (no_summary, no_column, not_a_number):
                copy.mkdir()
                for name in ("probes.csv", "writes.csv", "stalls.csv", "summary.csv", "run.json"):
                    (copy / name).write_bytes((CLUSTER_FIXTURE / name).read_bytes())
            (no_summary / "summary.csv").unlink()
            probes = (CLUSTER_FIXTURE / "probes.csv").read_text().splitlines()
            (no_column / "probes.csv").write_text("\n".join([probes[0].replace("latency_us", "latency")] + probes[1:]) + "\n")
            fields = probes[5].split(",")
            fields[3] = "soon"  # intended_us
            (not_a_number / "probes.csv").write_text("\n".join(probes[:5] + [",".join(fields)] + probes[6:]) + "\n")
            x = Path(tmp) / "x.png"
            cases = [
                ((Path(tmp) / "missing", "-o", x), "missing"),
                ((CLUSTER_FIXTURE, "-o", Path(tmp) / "x.jpg"), "x.jpg"),
                ((CLUSTER_FIXTURE, "--write", "9999", "-o", x), "--write"),
                ((CLUSTER_FIXTURE, "--write", "biggest", "-o", x), "--write"),
                ((CLUSTER_FIXTURE, "--write", "largest:command", "-o", x), "command"),
                ((no_summary, "-o", x), "summary.csv"),
                ((no_column, "-o", x), "latency_us"),
                ((not_a_number, "-o", x), "soon"),
            ]
            for args, needle in cases:
                result = script("nodes.py", *args, check=False)
                self.assertEqual(result.returncode, 2, f"{args}: {result.stderr}")
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertIn(needle, result.stderr)
                self.assertFalse(x.exists())


class ByNode(PictureChecks):
    """A run over several nodes (the cluster fixture: 3 of a real run's nodes, 6 writes to
    127.0.0.1:7201) is drawn for one node, by default the written one: its probes, stalls and
    summary rows only, never every node's as one server's."""

    WRITTEN = "127.0.0.1:7201"
    REPLICA = "127.0.0.1:7205"

    @staticmethod
    def rows(name: str) -> list[dict]:
        with open(CLUSTER_FIXTURE / name, newline="") as handle:
            return list(csv.DictReader(handle))

    def expected(self, node: str) -> tuple[dict[int, int], int]:
        """(answered probes per thread, stall episodes) of `node` in the raw CSVs, as timeline.py
        counts them over a whole run (the span of the node's probes)."""
        probes = [r for r in self.rows("probes.csv") if r["node"] == node]
        per_thread: dict[int, int] = {}
        for r in probes:
            if r["ok"] == "true" and r["latency_us"] != "":
                per_thread[int(r["thread"])] = per_thread.get(int(r["thread"]), 0) + 1
        lo = min(int(r["intended_us"]) for r in probes)
        hi = max(int(r["intended_us"]) for r in probes)
        stalls = [r for r in self.rows("stalls.csv") if r["node"] == node and int(r["end_us"]) >= lo and int(r["start_us"]) <= hi]
        return per_thread, len(stalls)

    @staticmethod
    def drawn(svg: str) -> tuple[dict[int, int], int]:
        """(probes per thread, stall episodes) from the legend of timeline.py's SVG."""
        threads = {int(t): int(n) for t, n in re.findall(r"<!-- probe thread (\d+) \((\d+) probes\) -->", svg)}
        stalls = re.findall(r"<!-- stall episode \((\d+) here", svg)
        return threads, int(stalls[0])

    def test_timeline_draws_the_written_node_by_default_and_another_with_node(self):
        with tempfile.TemporaryDirectory() as tmp:
            default = Path(tmp) / "written.svg"
            script("timeline.py", CLUSTER_FIXTURE, "-o", default)
            text = default.read_text()
            threads, stalls = self.drawn(text)
            self.assertEqual((threads, stalls), self.expected(self.WRITTEN))
            self.assertIn(f"<!-- node {self.WRITTEN} master shard 0 (written) -->", text)
            # Not all three nodes' probes: a third of probes.csv.
            self.assertEqual(3 * sum(threads.values()), sum(1 for r in self.rows("probes.csv") if r["ok"] == "true" and r["latency_us"] != ""))
            replica = Path(tmp) / "replica.svg"
            script("timeline.py", CLUSTER_FIXTURE, "--node", self.REPLICA, "--write", "1", "-o", Path(tmp) / "zoom.png")
            self.assert_picture(Path(tmp) / "zoom.png")
            script("timeline.py", CLUSTER_FIXTURE, "--node", self.REPLICA, "-o", replica)
            text = replica.read_text()
            self.assertEqual(self.drawn(text), self.expected(self.REPLICA))
            self.assertNotEqual(set(self.drawn(text)[0]), set(threads))
            self.assertIn(f"<!-- node {self.REPLICA} replica shard 0 (the writes went to {self.WRITTEN}) -->", text)

    def test_timeline_node_not_in_the_run_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            x = Path(tmp) / "x.png"
            result = script("timeline.py", CLUSTER_FIXTURE, "--node", "127.0.0.1:9999", "-o", x, check=False)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
            self.assertIn("--node 127.0.0.1:9999", result.stderr)
            for node in (self.WRITTEN, self.REPLICA, "127.0.0.1:7202"):
                self.assertIn(node, result.stderr)
            # A run without node columns is one server: --node has nothing to pick.
            old = script("timeline.py", data_runs()[0], "--node", self.WRITTEN, "-o", x, check=False)
            self.assertEqual(old.returncode, 2, old.stderr)
            self.assertEqual(len(old.stderr.strip().splitlines()), 1, old.stderr)
            self.assertIn("no node columns", old.stderr)
            self.assertFalse(x.exists())

    def test_sizes_counts_one_row_per_write(self):
        summary = [r for r in self.rows("summary.csv") if r["node"] == self.WRITTEN]
        with tempfile.TemporaryDirectory() as tmp:
            for op in ("set", "delete"):
                result = script("sizes.py", CLUSTER_FIXTURE, "--op", op, "-o", Path(tmp) / f"{op}.png")
                self.assert_picture(Path(tmp) / f"{op}.png")
                fits = dict(re.findall(r"^.+: op \w+, (\w+) = \S+ ms \+ (\S+) ms/MiB x size \(least squares over 2 repeats\)$", result.stdout, re.M))
                self.assertEqual(set(fits), {"set_ms", "hol_delay_ms"}, result.stdout)
                mine = [r for r in summary if r["op"] == op]
                self.assertEqual(len(mine), 2)
                for metric, printed in fits.items():
                    x = [float(r["size_bytes"]) / 2**20 for r in mine]
                    slope = np.polyfit(x, [float(r[metric]) for r in mine], 1)[0]
                    self.assertAlmostEqual(float(printed), slope, delta=1e-3 * max(1, abs(slope)))

    def test_the_written_node_and_its_rows(self):
        sys.path.insert(0, str(ANALYSIS))
        try:
            import compare
            import holprobe_data as hd
        finally:
            sys.path.pop(0)
        self.assertEqual(hd.written_node(CLUSTER_FIXTURE), self.WRITTEN)
        self.assertIsNone(hd.written_node(data_runs()[0]))
        self.assertEqual(hd.run_nodes(CLUSTER_FIXTURE), [self.WRITTEN, "127.0.0.1:7202", self.REPLICA])
        summary = hd.node_table(CLUSTER_FIXTURE, hd.SUMMARY_CSV, ["seq", "node"])
        self.assertEqual(summary.num("seq").tolist(), [1, 2, 3, 4, 5, 6])
        self.assertEqual(set(summary.text("node")), {self.WRITTEN})
        # compare.py reads the same rows as probe compare: one per write.
        _, _, sizes, _ = compare.read_side(str(CLUSTER_FIXTURE), "set")
        self.assertEqual(sorted(sizes.tolist()), [16 << 20, 64 << 20])
        with tempfile.TemporaryDirectory() as tmp:
            # Without run.json's `node`: the written shard's master in summary.csv.
            copy = Path(tmp) / "run"
            copy.mkdir()
            for name in ("probes.csv", "writes.csv", "stalls.csv", "summary.csv"):
                (copy / name).write_bytes((CLUSTER_FIXTURE / name).read_bytes())
            meta = json.loads((CLUSTER_FIXTURE / "run.json").read_text())
            del meta["node"]
            (copy / "run.json").write_text(json.dumps(meta))
            self.assertEqual(hd.written_node(copy), self.WRITTEN)


class RenderAll(PictureChecks):
    def test_render_all_makes_every_picture_the_readme_shows(self):
        readme = (ANALYSIS / "README.md").read_text()
        shown = sorted(set(re.findall(r"\(img/([^)]+\.png)\)", readme)))
        self.assertTrue(shown, "analysis/README.md shows no picture")
        with tempfile.TemporaryDirectory() as tmp:
            result = subprocess.run(["bash", str(ANALYSIS / "render_all.sh"), tmp], cwd=ROOT, capture_output=True, text=True, timeout=900)
            self.assertEqual(result.returncode, 0, result.stderr)
            for name in shown:
                self.assert_picture(Path(tmp) / name)
                self.assertTrue((ANALYSIS / "img" / name).is_file(), f"analysis/img/{name} is not committed")



class Freeze(PictureChecks):
    """freeze.py over the shipped value-type runs: a picture, and medians that are the data's."""

    def test_every_shipped_collection_run_is_drawn_with_its_medians(self):
        runs = collection_runs()
        self.assertGreaterEqual(len(runs), 4, runs)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "freeze.png"
            result = script("freeze.py", *runs, "-o", out)
            self.assert_picture(out)
        # Each printed median is the median of that server's rows of that type and op.
        printed = {}
        for line in result.stdout.splitlines():
            head, _, points = line.partition(": ")
            op, rest = head.split(" ", 1)
            server, kind = rest.rsplit(" ", 1)
            for point in points.split(", "):
                x, ms = point.split(" -> ")
                printed[(op, server, kind, float(x))] = float(ms.removesuffix(" ms"))
        self.assertTrue(printed)
        rows = {}
        for run in runs:
            meta = json.loads((run / "run.json").read_text())
            server = f"{meta['server']['flavor']} {meta['server']['version']}"
            # Mixed lazyfree settings (set for the run): a series of its own.
            lazyfree = meta["server"].get("lazyfree") or {}
            on = sorted(k.removeprefix("lazyfree-lazy-") for k, v in lazyfree.items() if v == "yes")
            if on and len(on) < len(lazyfree):
                server += " lazyfree " + ",".join(on)
            with open(run / "summary.csv", newline="") as handle:
                for row in csv.DictReader(handle):
                    if row["ok"] != "true" or row["op"] in ("build", "set"):
                        continue
                    # No probe overlapped: under one probe interval.
                    interval_ms = 1e3 / (meta["options"]["probe_rate"] * meta["options"]["probe_threads"])
                    value = float(row["hol_delay_ms"]) if row["hol_delay_ms"] else interval_ms
                    kind = row["value_type"] or "string"
                    # A string is drawn against its MiB.
                    x = float(row["size_bytes"]) / (1 << 20) if kind == "string" else float(row["elements"])
                    key = (row["op"], server, kind, x)
                    rows.setdefault(key, []).append(value)
        for key, values in rows.items():
            self.assertIn(key, printed)
            self.assertAlmostEqual(printed[key], float(np.median(values)), delta=0.0051, msg=key)

    def test_bad_input_is_one_line(self):
        result = script("freeze.py", *collection_runs()[:1], "--ops", "drop", "-o", "/tmp/x.png", check=False)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertIn("--ops", result.stderr)

if __name__ == "__main__":
    unittest.main()
