#!/usr/bin/env python3
"""Baseline against candidate, per value size, from two `probe --out` runs: for hol_delay_ms
(what the other clients saw) and set_ms (the writer's own time), the median over the repeats
with the min-max range as error bars, each repeat as a faint point, and above each pair the
ratio of the medians and the verdict of `probe compare` (regression, improvement, no change,
inconclusive with the repeats that would decide, not comparable). The verdicts are
`probe compare --format json`'s, never a rule of this script's own: from --verdicts FILE.json,
or, without it, from running `probe compare BASELINE CANDIDATE --format json` (the binary from
--probe, $PROBE, PATH, or the release or debug build under $CARGO_TARGET_DIR or this
repository's target/). Of a run over several nodes, the rows of the node the writes went to,
as probe compare reads. Prints the table on stdout."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import holprobe_data as hd
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

METRICS = {
    "hol_delay_ms": "others' head-of-line delay, hol_delay_ms (ms)",
    "set_ms": "the writer's own time, set_ms (ms)",
}
# The key of each metric in a row of `probe compare --format json`.
JSON_METRIC = {"hol_delay_ms": "hol_delay", "set_ms": "set"}
PANEL_TITLES = {"hol_delay_ms": "What the other clients saw", "set_ms": "What the writer measured"}
BASE_COLOUR = "#4c72b0"
CAND_COLOUR = "#dd8452"
VERDICT_COLOURS = {
    "regression": "#c0392b",
    "improvement": "#1e8449",
    "no change": "0.35",
    "inconclusive": "#b9770e",
    "not comparable": "0.55",
}
ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = hd.chart_parser(
        __doc__,
        ("baseline", {"help": "the baseline's probe --out directory"}),
        ("candidate", {"help": "the candidate's probe --out directory"}),
    )
    parser.add_argument("--op", default="set", choices=["set", "build", "overwrite", "read", "delete", "unlink", "expire", "evict", "command"], help="which write events to compare (default: set; a collection run's are build, read, delete, ...)")
    parser.add_argument("--verdicts", metavar="FILE.json", help="`probe compare BASELINE CANDIDATE --format json` output to draw (without it the script runs that command)")
    parser.add_argument("--probe", metavar="PATH", help="the probe binary to run for the verdicts (default: $PROBE, probe on PATH, target/release/probe, target/debug/probe)")
    return hd.parse_chart_args(parser, argv)


def main(argv: list[str] | None = None) -> int:
    return hd.run_chart(render, parse_args(argv))


def read_side(path: str, op: str):
    directory = hd.run_dir(path, hd.SUMMARY_CSV)
    meta = hd.read_run_json(directory)
    # The written node's rows only, the rows probe compare compares (a run over several nodes
    # has one per write per node).
    table = hd.node_table(directory, hd.SUMMARY_CSV, ["op", "size_bytes", "set_ms", "hol_delay_ms", "ok"], meta=meta)
    keep = (table.text("op") == op) & table.flag("ok")
    sizes = table.num("size_bytes")[keep]
    values = {m: table.num(m)[keep] for m in METRICS}
    return directory, meta, sizes, values


def find_probe(given: str | None) -> str:
    """The probe binary: --probe, $PROBE, `probe` on PATH, or this repository's build."""
    for candidate in (given, os.environ.get("PROBE")):
        if candidate:
            return candidate
    on_path = shutil.which("probe")
    if on_path:
        return on_path
    targets = [Path(os.environ["CARGO_TARGET_DIR"])] if os.environ.get("CARGO_TARGET_DIR") else []
    for target in targets + [ROOT / "target"]:
        for build in ("release", "debug"):
            path = target / build / "probe"
            if path.is_file():
                return str(path)
    raise hd.InputError("no probe binary to take the verdicts from: give --verdicts FILE.json (probe compare BASELINE CANDIDATE --format json > FILE.json), --probe PATH, or build it (cargo build --release)")


def run_probe_compare(probe: str, baseline: str, candidate: str) -> dict:
    """`probe compare --format json`: exit 0 (no regression), 1 (regression) and 3
    (inconclusive) all carry a report; anything else is the tool's one-line error."""
    try:
        result = subprocess.run([probe, "compare", baseline, candidate, "--format", "json"], capture_output=True, text=True, timeout=120)
    except OSError as err:
        raise hd.InputError(f"--probe '{probe}': cannot run it ({err})") from err
    if result.returncode not in (0, 1, 3):
        message = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit status {result.returncode}"
        raise hd.InputError(f"probe compare failed: {message}")
    try:
        return json.loads(result.stdout)
    except ValueError as err:
        raise hd.InputError(f"probe compare printed no JSON ({err})") from err


def read_verdicts(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as err:
        raise hd.InputError(f"--verdicts '{path}': cannot read it as JSON ({err})") from err


def comparison_rows(report: dict, base_meta: dict, cand_meta: dict, source: str) -> tuple[dict, dict]:
    """(the comparison of these two runs, its rows by (size, op)) from `probe compare
    --format json`; an error when the document is not one or holds another pair of runs."""
    comparisons = report.get("comparisons") if isinstance(report, dict) else None
    if not isinstance(comparisons, list) or not comparisons:
        raise hd.InputError(f"{source}: not the output of probe compare --format json (no comparisons)")
    want = (base_meta.get("run_id"), cand_meta.get("run_id"))
    for comparison in comparisons:
        got = ((comparison.get("baseline") or {}).get("run_id"), (comparison.get("candidate") or {}).get("run_id"))
        if got == want or None in want:
            rows = {}
            for row in comparison.get("rows") or []:
                rows[(int(row["size_bytes"]), row["op"])] = row
            return comparison, rows
    raise hd.InputError(f"{source}: its comparisons are of other runs, not baseline run {want[0]} against candidate run {want[1]}")


def verdict_label(metric_result: dict) -> str:
    """`probe compare`'s word for one metric: regression, improvement, no change,
    inconclusive or not comparable."""
    return str(metric_result.get("verdict") or "").replace("_", " ")


def render(args: argparse.Namespace) -> None:
    out = hd.output_path(args.output)
    base_dir, base_meta, base_sizes, base_values = read_side(args.baseline, args.op)
    cand_dir, cand_meta, cand_sizes, cand_values = read_side(args.candidate, args.op)
    if args.verdicts:
        report, source = read_verdicts(args.verdicts), f"--verdicts '{args.verdicts}'"
    else:
        report, source = run_probe_compare(find_probe(args.probe), args.baseline, args.candidate), "probe compare"
    comparison, rows = comparison_rows(report, base_meta, cand_meta, source)
    shared = sorted(size for size, op in rows if op == args.op)
    # probe compare's name of each value: `hash 100k` for a collection, where its size in bytes
    # (3125K) says nothing; a string's size as before.
    label = {size: str(rows[(size, args.op)].get("value") or hd.size_label(size)) for size in shared}
    if not shared:
        raise hd.InputError(f"{source}: no '{args.op}' rows for {args.baseline} and {args.candidate}")

    base_name = f"{hd.server_label(base_meta, base_dir.name)} ({base_dir.name})"
    cand_name = f"{hd.server_label(cand_meta, cand_dir.name)} ({cand_dir.name})"
    # Wide enough that each size's verdict word fits above it.
    fig, axes = plt.subplots(1, 2, figsize=(max(13.0, 1.7 * len(shared)), 5.8))
    positions = np.arange(len(shared))
    print(f"baseline {base_name} vs candidate {cand_name}, op {args.op}, medians over repeats (min-max); verdicts of probe compare: {verdict_label(comparison)}")
    print(f"{'metric':<13} {'size':>5} {'baseline ms':>24} {'candidate ms':>24} {'ratio':>7}  verdict")
    for ax, metric in zip(axes, METRICS):
        for i, size in enumerate(shared):
            b = base_values[metric][base_sizes == size]
            c = cand_values[metric][cand_sizes == size]
            b, c = b[np.isfinite(b)], c[np.isfinite(c)]
            for values, dx, colour in ((b, -0.17, BASE_COLOUR), (c, 0.17, CAND_COLOUR)):
                if len(values) == 0:
                    continue
                med = np.median(values)
                ax.errorbar(i + dx, med, yerr=[[med - values.min()], [values.max() - med]], fmt="o", color=colour, markersize=7, capsize=4, elinewidth=1.5, zorder=3)
                jitter = np.linspace(-0.05, 0.05, len(values)) if len(values) > 1 else np.zeros(1)
                ax.plot(i + dx + jitter, values, linestyle="none", marker="o", markersize=3.5, alpha=0.35, color=colour, markeredgewidth=0, zorder=2)
            result = rows[(int(size), args.op)].get(JSON_METRIC[metric]) or {}
            word = verdict_label(result)
            ratio = result.get("ratio")
            ratio = float(ratio) if isinstance(ratio, (int, float)) else float("nan")
            needed = result.get("repeats_needed")
            shown = f"{word}, {needed} repeats" if word == "inconclusive" and needed else word
            # One line per part, or the words of neighbouring sizes run into each other.
            shown_word = shown.replace(", ", "\n").replace("no change", "no\nchange").replace("not comparable", "not\ncomparable")
            text = f"\u00d7{ratio:.2f}\n{shown_word}" if np.isfinite(ratio) else shown_word
            ax.annotate(text, xy=(i, 1.0), xycoords=("data", "axes fraction"), xytext=(0, -4), textcoords="offset points", ha="center", va="top", fontsize=7.5, color=VERDICT_COLOURS.get(word, "black"))
            fmt = lambda v: f"{np.median(v):8.2f} ({v.min():.2f}-{v.max():.2f})" if len(v) else f"{'n/a':>8}"
            print(f"{metric:<13} {label[size]:>5} {fmt(b):>24} {fmt(c):>24} {ratio:7.2f}  {shown}")
        ax.set_yscale("log")
        ax.set_xticks(positions)
        ax.set_xticklabels([label[s] for s in shared])
        ax.set_xlim(-0.6, len(shared) - 0.4)
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * 6)  # head room for the verdicts
        ax.set_xlabel("value size (binary units)")
        ax.set_ylabel(METRICS[metric])
        ax.grid(True, axis="y", which="major", color="0.88", lw=0.6)
        ax.set_title(PANEL_TITLES[metric], fontsize=10)
        ax.set_axisbelow(True)
    rules = comparison.get("rules") or {}
    handles = [
        Line2D([], [], color=BASE_COLOUR, marker="o", ls="none", label=f"baseline: {base_name}"),
        Line2D([], [], color=CAND_COLOUR, marker="o", ls="none", label=f"candidate: {cand_name}"),
        Line2D([], [], color="0.3", marker="o", ls="none", label="dot: median over repeats; bars: min\u2013max; faint: each repeat"),
        Line2D([], [], color="0.3", ls="none", marker="$\u00d7$", label=f"\u00d7 ratio of medians; verdict: probe compare's (threshold \u00d7{rules.get('threshold', '?')}, alpha {rules.get('alpha', '?')})"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    # The pair's verdict, and what decided it outside this op's panels: the (size, op)s the
    # candidate only failed or never reached (a regression the panels alone did not show).
    overall = verdict_label(comparison) or "?"
    lines = [args.title or f"Baseline vs candidate, large {args.op} writes, per size", f"probe compare: {overall.upper()}"]
    for key, said in (("candidate_failed", "the candidate only failed"), ("candidate_unmeasured", "the candidate never reached")):
        items = [str(item).splitlines()[0] for item in comparison.get(key) or []]
        if items:
            shown = "; ".join(items[:3]) + (f" (+{len(items) - 3} more)" if len(items) > 3 else "")
            lines.append(f"{said}: {shown}"[:160])
            print(f"{said}: {'; '.join(items)}")
    fig.suptitle("\n".join(lines), fontsize=12 if len(lines) < 3 else 10, color=VERDICT_COLOURS.get(overall, "black") if overall == "regression" else "black")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    hd.save(fig, out)


if __name__ == "__main__":
    sys.exit(main())
