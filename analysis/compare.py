#!/usr/bin/env python3
"""Baseline against candidate, per value size, from two `probe --out` runs' summary.csv: for
hol_delay_ms (what the other clients saw) and set_ms (the writer's own time), the median over
the repeats with the min-max range as error bars, each repeat as a faint point, and above each
pair the ratio candidate/baseline of the medians with a verdict. The verdict is this script's
own simple rule, not `probe compare`'s test: 'slower' when the ratio passes --threshold and the
two min-max ranges do not overlap, 'faster' likewise the other way, otherwise 'no clear change'
(and 'too few repeats' with fewer than 2 on a side). With --verdicts FILE.json (for instance
`probe compare --format json` output) the verdicts found there are shown as well. Prints the
table on stdout."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

import holprobe_data as hd
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

METRICS = {
    "hol_delay_ms": "others' head-of-line delay, hol_delay_ms (ms)",
    "set_ms": "the writer's own time, set_ms (ms)",
}
PANEL_TITLES = {"hol_delay_ms": "What the other clients saw", "set_ms": "What the writer measured"}
BASE_COLOUR = "#4c72b0"
CAND_COLOUR = "#dd8452"
VERDICT_COLOURS = {"slower": "#c0392b", "faster": "#1e8449", "no clear change": "0.35", "too few repeats": "0.55"}
SIZE_KEYS = ("size_bytes", "size", "value_size_bytes")
VERDICT_KEYS = ("verdict", "status", "result", "outcome")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("baseline", help="the baseline's probe --out directory")
    parser.add_argument("candidate", help="the candidate's probe --out directory")
    parser.add_argument("-o", "--output", required=True, help="picture to write: .png or .svg")
    parser.add_argument("--op", default="set", choices=["set", "overwrite", "delete", "command"], help="which write events to compare (default: set)")
    parser.add_argument("--threshold", type=float, default=1.2, help="ratio of medians past which a size can be called slower (or faster, past 1/threshold); default 1.2")
    parser.add_argument("--verdicts", metavar="FILE.json", help="verdicts to show from another tool, e.g. probe compare --format json")
    parser.add_argument("--title", help="replace the generated title")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prog = Path(sys.argv[0]).name
    try:
        render(args)
    except hd.InputError as err:
        hd.fail(prog, str(err))
    return 0


def read_side(path: str, op: str):
    directory = hd.run_dir(path, hd.SUMMARY_CSV)
    table = hd.Table(directory / hd.SUMMARY_CSV, ["op", "size_bytes", "set_ms", "hol_delay_ms", "ok"])
    keep = (table.text("op") == op) & table.flag("ok")
    sizes = table.num("size_bytes")[keep]
    values = {m: table.num(m)[keep] for m in METRICS}
    meta = hd.read_run_json(directory)
    return directory, meta, sizes, values


def verdict(base: np.ndarray, cand: np.ndarray, threshold: float) -> tuple[float, str]:
    """(ratio of medians, verdict) by this script's rule (see the module docstring)."""
    if len(base) == 0 or len(cand) == 0:
        return float("nan"), "too few repeats"
    b, c = float(np.median(base)), float(np.median(cand))
    ratio = c / b if b > 0 else float("inf") if c > 0 else 1.0
    if len(base) < 2 or len(cand) < 2:
        return ratio, "too few repeats"
    if ratio >= threshold and cand.min() > base.max():
        return ratio, "slower"
    if ratio <= 1 / threshold and cand.max() < base.min():
        return ratio, "faster"
    return ratio, "no clear change"


def find_external_verdicts(data) -> dict[tuple[int, str | None], str]:
    """Verdicts from a JSON document of unknown shape: any object that names a size (size_bytes,
    size) and a verdict (verdict, status, result, outcome), optionally a metric; or an object that
    names a size and holds, per metric name, an object with a verdict. Keys: (size, metric or
    None)."""
    found: dict[tuple[int, str | None], str] = {}

    def size_of(obj: dict):
        for key in SIZE_KEYS:
            value = obj.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return int(value)
            if isinstance(value, str) and value.isdigit():
                return int(value)
        return None

    def verdict_of(obj: dict):
        for key in VERDICT_KEYS:
            value = obj.get(key)
            if isinstance(value, str) and value:
                return value
        return None

    def walk(node, inherited_metric=None):
        if isinstance(node, dict):
            size = size_of(node)
            if size is not None:
                metric = node.get("metric") if isinstance(node.get("metric"), str) else inherited_metric
                text = verdict_of(node)
                if text is not None:
                    found[(size, metric)] = text
                for metric_name in METRICS:
                    child = node.get(metric_name)
                    if isinstance(child, dict) and verdict_of(child):
                        found[(size, metric_name)] = verdict_of(child)
            for key, value in node.items():
                walk(value, key if key in METRICS else inherited_metric)
        elif isinstance(node, list):
            for item in node:
                walk(item, inherited_metric)

    walk(data)
    return found


def render(args: argparse.Namespace) -> None:
    out = hd.output_path(args.output)
    if not args.threshold > 1:
        raise hd.InputError(f"--threshold {args.threshold:g}: must be more than 1")
    base_dir, base_meta, base_sizes, base_values = read_side(args.baseline, args.op)
    cand_dir, cand_meta, cand_sizes, cand_values = read_side(args.candidate, args.op)
    shared = sorted(set(base_sizes[np.isfinite(base_sizes)]) & set(cand_sizes[np.isfinite(cand_sizes)]))
    if not shared:
        raise hd.InputError(f"{args.baseline} and {args.candidate}: no value size with successful '{args.op}' rows in both")
    only = sorted(set(base_sizes) ^ set(cand_sizes))
    if only:
        print(f"note: sizes in only one run are left out: {', '.join(hd.size_label(s) for s in only)}", file=sys.stderr)

    external: dict = {}
    if args.verdicts:
        try:
            with open(args.verdicts, encoding="utf-8") as handle:
                external = find_external_verdicts(json.load(handle))
        except (OSError, ValueError) as err:
            raise hd.InputError(f"--verdicts '{args.verdicts}': cannot read it as JSON ({err})") from err
        if not external:
            print(f"note: --verdicts {args.verdicts}: no per-size verdicts recognised; showing this script's own only", file=sys.stderr)

    base_name = f"{hd.server_label(base_meta, base_dir.name)} ({base_dir.name})"
    cand_name = f"{hd.server_label(cand_meta, cand_dir.name)} ({cand_dir.name})"
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.8))
    positions = np.arange(len(shared))
    print(f"baseline {base_name} vs candidate {cand_name}, op {args.op}, medians over repeats (min-max), threshold {args.threshold:g}")
    header = f"{'metric':<13} {'size':>5} {'baseline ms':>24} {'candidate ms':>24} {'ratio':>7}  verdict"
    print(header + ("  external verdict" if external else ""))
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
            ratio, word = verdict(b, c, args.threshold)
            ext = external.get((int(size), metric)) or external.get((int(size), None))
            # Many sizes side by side: two-word verdicts on two lines, or they run into each other.
            shown_word = textwrap.fill(word, width=9) if len(shared) > 6 else word
            text = f"\u00d7{ratio:.2f}\n{shown_word}" if np.isfinite(ratio) else shown_word
            if ext:
                text += f"\n(given: {ext})"
            ax.annotate(text, xy=(i, 1.0), xycoords=("data", "axes fraction"), xytext=(0, -4), textcoords="offset points", ha="center", va="top", fontsize=7.5, color=VERDICT_COLOURS.get(word, "black"))
            fmt = lambda v: f"{np.median(v):8.2f} ({v.min():.2f}-{v.max():.2f})" if len(v) else f"{'n/a':>8}"
            line = f"{metric:<13} {hd.size_label(size):>5} {fmt(b):>24} {fmt(c):>24} {ratio:7.2f}  {word}"
            print(line + (f"  {ext}" if ext else ("  -" if external else "")))
        ax.set_yscale("log")
        ax.set_xticks(positions)
        ax.set_xticklabels([hd.size_label(s) for s in shared])
        ax.set_xlim(-0.6, len(shared) - 0.4)
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * 3)  # head room for the verdicts
        ax.set_xlabel("value size (binary units)")
        ax.set_ylabel(METRICS[metric])
        ax.grid(True, axis="y", which="major", color="0.88", lw=0.6)
        ax.set_title(PANEL_TITLES[metric], fontsize=10)
        ax.set_axisbelow(True)
    handles = [
        Line2D([], [], color=BASE_COLOUR, marker="o", ls="none", label=f"baseline: {base_name}"),
        Line2D([], [], color=CAND_COLOUR, marker="o", ls="none", label=f"candidate: {cand_name}"),
        Line2D([], [], color="0.3", marker="o", ls="none", label="dot: median over repeats; bars: min\u2013max; faint: each repeat"),
        Line2D([], [], color="0.3", ls="none", marker="$\u00d7$", label=f"\u00d7 ratio of medians; verdict: past \u00d7{args.threshold:g} (or 1/{args.threshold:g}) with min\u2013max ranges apart"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(args.title or f"Baseline vs candidate, large {args.op} writes, per size", fontsize=12)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    hd.save(fig, out)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
