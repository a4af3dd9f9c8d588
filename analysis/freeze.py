#!/usr/bin/env python3
"""How long each way of removing or reading a large value froze the server for other clients
(hol_delay_ms), against the value's element count, from the summary.csv of one or more
`probe --type ... --ops ... --out` runs: one panel per op (delete, unlink, expire, evict,
overwrite, read), one line per server version and value type (the median over the repeats at each element
count, the repeats as faint points), log-log axes. A string counts as one element and is drawn
against its size in MiB on the same axis, marked as such. Rows whose value was freed in the
background (freed_by = background) are drawn hollow: what they show is the unlink of the key,
not the free. An op no probe overlapped (a few µs: no hol_delay_ms) counts as one probe interval
(run.json's options: 1 / (probe_rate x probe_threads)), the most it can have been, rather than
being left out (leaving it out would let one slow neighbour stand for the median). A run whose
server had some `lazyfree-lazy-*` settings yes and others no (e.g. Redis with `--server-arg
"lazyfree-lazy-user-del yes"`) is a series of its own, named by those set to yes: its figures are
not the server's defaults. Prints each series' medians on stdout."""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

import holprobe_data as hd
import matplotlib.pyplot as plt
import numpy as np

OPS = ["delete", "unlink", "expire", "evict", "overwrite", "read"]
TYPE_MARKERS = {"string": "*", "hash": "o", "set": "s", "zset": "^", "list": "D", "stream": "v"}
COLOURS = plt.get_cmap("tab10").colors
REQUIRED = ["op", "hol_delay_ms", "ok", "value_type", "elements", "size_bytes"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = hd.chart_parser(__doc__, ("run_dirs", {"nargs": "+", "metavar": "RUN_DIR", "help": "probe --out directories"}))
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated ops to draw, one panel each (default: {','.join(OPS)})")
    return hd.parse_chart_args(parser, argv)


def series_label(meta: dict, fallback: str) -> str:
    """The server's label, with ` lazyfree user-del` (the settings that are yes) where its
    `lazyfree-lazy-*` settings are mixed: every server's defaults are all no (Redis) or all yes
    (Valkey 8.0 and later), so a mix was set for the run."""
    label = hd.server_label(meta, fallback)
    lazyfree = (meta.get("server") or {}).get("lazyfree") or {}
    on = sorted(name.removeprefix("lazyfree-lazy-") for name, value in lazyfree.items() if str(value).lower() == "yes")
    if on and len(on) < len(lazyfree):
        label += " lazyfree " + ",".join(on)
    return label


def read_rows(directory: Path, ops: list[str]):
    """(server label, type, op) -> {x: [hol_delay_ms]} and the set of (series, x) freed in the
    background."""
    meta = hd.read_run_json(directory)
    options = meta.get("options") or {}
    try:
        interval_ms = 1e3 / (float(options["probe_rate"]) * float(options["probe_threads"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        interval_ms = math.nan
    table = hd.node_table(directory, hd.SUMMARY_CSV, REQUIRED, ["freed_by"], meta=meta)
    server = series_label(meta, directory.name)
    series: dict[tuple[str, str, str], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    background: set[tuple[tuple[str, str, str], float]] = set()
    ok = table.flag("ok")
    op = table.text("op")
    kind = table.text("value_type")
    elements = table.num("elements")
    size = table.num("size_bytes")
    hol = table.num("hol_delay_ms")
    freed = table.text("freed_by") if table.has("freed_by") else np.array([""] * len(table), dtype=object)
    for i in range(len(table)):
        if not ok[i] or op[i] not in ops:
            continue
        # No probe inside the op's window: under one probe interval.
        value = interval_ms if np.isnan(hol[i]) else hol[i]
        if np.isnan(value):
            continue
        # A string's one element says nothing of its size: its MiB stand in for the count.
        x = size[i] / (1 << 20) if kind[i] == "string" else elements[i]
        if not x > 0:
            continue
        key = (server, kind[i] or "string", op[i])
        series[key][x].append(value)
        if freed[i] == "background":
            background.add((key, x))
    return series, background


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prog = "freeze.py"
    try:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()]
        unknown = [o for o in ops if o not in OPS]
        if unknown or not ops:
            raise hd.InputError(f"--ops: unknown op(s) {', '.join(unknown) or '(none)'}: expected some of {', '.join(OPS)}")
        out = hd.output_path(args.output)
        series: dict = defaultdict(lambda: defaultdict(list))
        background: set = set()
        for path in args.run_dirs:
            directory = hd.run_dir(path, hd.SUMMARY_CSV)
            rows, bg = read_rows(directory, ops)
            for key, points in rows.items():
                for x, values in points.items():
                    series[key][x].extend(values)
            background |= bg
    except hd.InputError as err:
        hd.fail(prog, str(err))
        return 2
    drawn_ops = [o for o in ops if any(k[2] == o for k in series)]
    if not drawn_ops:
        hd.fail(prog, f"no successful rows of op {', '.join(ops)} with a hol_delay_ms in these runs (were they run with --ops?)")
        return 2
    servers = sorted({k[0] for k in series})
    colour = {s: COLOURS[i % len(COLOURS)] for i, s in enumerate(servers)}
    # At most three panels a row, so that six ops stay readable.
    ncols = min(3, len(drawn_ops))
    nrows = math.ceil(len(drawn_ops) / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 4.2 * nrows + 1.2), squeeze=False, sharey=True)
    panels = [ax for row in grid for ax in row]
    for ax in panels[len(drawn_ops):]:
        ax.set_visible(False)
    for ax, op in zip(panels, drawn_ops):
        for key in sorted(k for k in series if k[2] == op):
            server, kind, _ = key
            points = series[key]
            xs = sorted(points)
            medians = [float(np.median(points[x])) for x in xs]
            for x in xs:
                ax.scatter([x] * len(points[x]), points[x], s=8, alpha=0.25, color=colour[server], marker=TYPE_MARKERS.get(kind, "o"))
            hollow = [(x, m) for x, m in zip(xs, medians) if (key, x) in background]
            ax.plot(xs, medians, marker=TYPE_MARKERS.get(kind, "o"), color=colour[server], label=f"{server} {kind}", linewidth=1.2)
            if hollow:
                ax.scatter([h[0] for h in hollow], [h[1] for h in hollow], s=60, facecolors="white", edgecolors=colour[server], zorder=3)
            print(f"{op} {server} {kind}: " + ", ".join(f"{x:g} -> {m:.2f} ms" for x, m in zip(xs, medians)))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("elements (a string: MiB)")
        ax.grid(True, which="both", alpha=0.3)
    for row in grid:
        row[0].set_ylabel("others blocked, hol_delay_ms (ms)")
    handles, labels = panels[0].get_legend_handles_labels()
    for ax in panels[1 : len(drawn_ops)]:
        h, lab = ax.get_legend_handles_labels()
        for hh, ll in zip(h, lab):
            if ll not in labels:
                handles.append(hh)
                labels.append(ll)
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    fig.suptitle(args.title or "What freeing or reading one large value cost the other clients (hollow: freed in the background)")
    legend_rows = math.ceil(len(labels) / 4)
    fig.tight_layout(rect=(0, min(0.45, 0.01 + 0.022 * legend_rows * 2 / nrows), 1, 0.96))
    hd.save(fig, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
