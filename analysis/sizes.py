#!/usr/bin/env python3
"""The writer's own time (set_ms) and what the other clients saw (hol_delay_ms) against value
size, from the summary.csv of one or more `probe --out` runs: per size, the median over the
repeats as a dot with the min-max range as error bars, the repeats themselves as faint points,
and a least-squares line (ms = a + b x MiB, fitted over every repeat). Several runs go on one
chart, one colour per server version (labelled from run.json's server.flavor and version).
Of a run over several nodes only the rows of the node the writes went to are read (the other
nodes' are other servers, not more repeats). Prints each fit on stdout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import holprobe_data as hd
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

METRICS = {
    "set_ms": "the writer's own time, set_ms (ms)",
    "hol_delay_ms": "others' head-of-line delay, hol_delay_ms (ms)",
}
PANEL_TITLES = {
    "set_ms": "What the writer measured",
    "hol_delay_ms": "What the other clients saw",
}
SERIES_COLOURS = plt.get_cmap("tab10").colors
MARKERS = ["o", "s", "^", "D", "v", "P"]
MIB = float(1 << 20)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = hd.chart_parser(__doc__, ("run_dirs", {"nargs": "+", "metavar": "RUN_DIR", "help": "probe --out directories"}))
    parser.add_argument("--op", default="set", choices=["set", "overwrite", "delete", "command"], help="which write events to plot (default: set)")
    parser.add_argument("--linear", action="store_true", help="linear axes instead of log-log")
    return hd.parse_chart_args(parser, argv)


class Series:
    """One run's rows of the chosen op, grouped by size."""

    def __init__(self, directory: Path, op: str):
        self.directory = directory
        self.meta = hd.read_run_json(directory)
        # The written node's rows only: a cluster's other nodes are other servers, not repeats.
        table = hd.node_table(directory, hd.SUMMARY_CSV, ["op", "size_bytes", "set_ms", "hol_delay_ms", "ok"], meta=self.meta)
        keep = (table.text("op") == op) & table.flag("ok")
        self.size = table.num("size_bytes")[keep]
        self.values = {metric: table.num(metric)[keep] for metric in METRICS}
        self.server = hd.server_label(self.meta, directory.name)
        writer = (self.meta.get("options") or {}).get("writer") or {}
        commands = [" ".join(c.get("args", [])) for c in writer.get("commands") or [] if isinstance(c, dict)]
        self.commands = ", ".join(commands)

    def sizes(self) -> np.ndarray:
        return np.unique(self.size[np.isfinite(self.size)])

    def stats(self, metric: str):
        """Per size: (size, median, min, max, n) over the finite values."""
        rows = []
        for size in self.sizes():
            v = self.values[metric][self.size == size]
            v = v[np.isfinite(v)]
            if len(v):
                rows.append((size, np.median(v), v.min(), v.max(), len(v)))
        return rows

    def fit(self, metric: str):
        """Least squares ms = a + b * MiB over every repeat: (a, b, n) or None."""
        v = self.values[metric]
        x = self.size / MIB
        good = np.isfinite(v) & np.isfinite(x)
        if good.sum() < 2 or len(np.unique(x[good])) < 2:
            return None
        slope, intercept = np.polyfit(x[good], v[good], 1)
        return intercept, slope, int(good.sum())


def main(argv: list[str] | None = None) -> int:
    return hd.run_chart(render, parse_args(argv))


def render(args: argparse.Namespace) -> None:
    out = hd.output_path(args.output)
    series = [Series(hd.run_dir(d, hd.SUMMARY_CSV), args.op) for d in args.run_dirs]
    series = [s for s in series if len(s.size)]
    if not series:
        raise hd.InputError(f"--op {args.op}: no successful '{args.op}' rows in {', '.join(args.run_dirs)}")

    # One colour per server version; runs of the same version differ by marker and name. When
    # every run is of one version (runs of different commands, say), one colour per run.
    versions = list(dict.fromkeys(s.server for s in series))
    per_version: dict[str, int] = {}
    names = [s.server + (f": {s.commands}" if s.commands else "") for s in series]
    shared = {n: names.count(n) > 1 for n in names}
    colour_keys = names if len(versions) == 1 else [s.server for s in series]
    colour_order = list(dict.fromkeys(colour_keys))

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6))
    all_sizes = np.unique(np.concatenate([s.sizes() for s in series]))
    handles = []
    for index, s in enumerate(series):
        # Side by side on the log axis, so error bars of several runs do not hide each other.
        dodge = 1.0 if args.linear else 2 ** (0.07 * (index - (len(series) - 1) / 2))
        colour = SERIES_COLOURS[colour_order.index(colour_keys[index]) % len(SERIES_COLOURS)]
        k = per_version.get(s.server, 0)
        per_version[s.server] = k + 1
        marker = MARKERS[k % len(MARKERS)]
        name = names[index] + (f" ({s.directory.name})" if shared[names[index]] else "")
        fits = []
        for ax, metric in zip(axes, METRICS):
            rows = s.stats(metric)
            if not rows:
                continue
            size, med, lo, hi, n = (np.array(c) for c in zip(*rows))
            x = size / MIB * dodge
            # Faint points: every repeat.
            raw = np.isfinite(s.values[metric])
            ax.plot(s.size[raw] / MIB * dodge, s.values[metric][raw], linestyle="none", marker=marker, markersize=3.5, alpha=0.35, color=colour, markeredgewidth=0)
            ax.errorbar(x, med, yerr=[med - lo, hi - med], fmt=marker, markersize=6, color=colour, ecolor=colour, elinewidth=1.3, capsize=3, zorder=3)
            fit = s.fit(metric)
            if fit is not None:
                a, b, n_fit = fit
                xs = np.geomspace(all_sizes.min() / MIB, all_sizes.max() / MIB, 200)
                ys = a + b * xs
                shown = ys > 0 if not args.linear else np.ones_like(ys, dtype=bool)
                ax.plot(xs[shown], ys[shown], color=colour, lw=1.2, ls="--", alpha=0.85, zorder=2)
                sign = "+" if a >= 0 else "\u2212"
                fits.append(f"{metric} \u2248 {b:.3g} ms/MiB \u00d7 size {sign} {abs(a):.2g} ms")
                print(f"{name}: op {args.op}, {metric} = {a:.4g} ms + {b:.4g} ms/MiB x size (least squares over {n_fit} repeats)")
        label = name
        if fits:
            label += "\nfit: " + "; ".join(fits)
        handles.append(Line2D([], [], color=colour, marker=marker, ls="--", lw=1.2, label=label))

    for ax, metric in zip(axes, METRICS):
        if not args.linear:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            # Limits from the data, so a fitted line with a negative intercept cannot drag the
            # axis down by decades where it crosses zero.
            values = np.concatenate([s.values[metric] for s in series])
            values = values[np.isfinite(values) & (values > 0)]
            if len(values):
                ax.set_ylim(values.min() / 2, values.max() * 2)
        ticks = all_sizes / MIB
        ax.set_xticks(ticks)
        ax.set_xticklabels([hd.size_label(v) for v in all_sizes])
        ax.minorticks_off() if not args.linear else None
        ax.set_xlabel("value size (MiB, binary units as --writer-sizes)")
        ax.set_ylabel(METRICS[metric])
        panel = PANEL_TITLES[metric]
        if metric == "set_ms":
            panel += {"set": " (the 2017 benchmark's figure)", "command": " (the command's own time)"}.get(args.op, "")
        ax.set_title(panel, fontsize=10)
        ax.grid(True, which="both", color="0.9", lw=0.6)
        ax.set_axisbelow(True)

    handles.append(Line2D([], [], color="0.3", marker="o", ls="none", label="dot: median over repeats; bars: min\u2013max"))
    handles.append(Line2D([], [], color="0.3", marker="o", ls="none", alpha=0.3, markersize=3, label="faint: each repeat"))
    handles.append(Line2D([], [], color="0.3", ls="--", label="dashed: least-squares fit over repeats"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3), fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.02))
    if args.op == "command":
        what = "Custom commands on large values (" + "; ".join(dict.fromkeys(s.commands for s in series if s.commands)) + ")"
    else:
        what = f"Large {args.op.upper() if args.op != 'delete' else 'DEL'} writes"
    title = args.title or f"{what}: the writer's time vs the other clients' wait"
    fig.suptitle(title, fontsize=12)
    rows_in_legend = (len(handles) + 2) // 3
    fig.tight_layout(rect=(0, 0.05 + 0.045 * rows_in_legend, 1, 1))
    hd.save(fig, out)


if __name__ == "__main__":
    sys.exit(main())
