#!/usr/bin/env python3
"""The load timeline of a `probe load --out` run: throughput (requests per second, and MB/s on
the right axis) and round-trip latency per second (p99 solid, p50 dashed, max dotted, on a log
axis), with the writes of the run (load_writes.csv, when the load ran with --writer-sizes) shaded
and labelled, and seconds that had errors marked. Reads load_timeline.csv (columns second,
requests, bytes, p50_us, p99_us, max_us, errors; one line per server when a server column names
several; other columns are ignored)."""

from __future__ import annotations

import argparse
import sys

import holprobe_data as hd
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import blended_transform_factory

WRITE_COLOUR = "#f4a259"
ERROR_COLOUR = "#d62728"
SERIES_COLOURS = plt.get_cmap("tab10").colors
TOTAL_NAMES = {"", "all", "total", "*"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = hd.chart_parser(__doc__, ("run_dir", {"help": "a probe load --out directory (holding load_timeline.csv)"}))
    return hd.parse_chart_args(parser, argv)


def main(argv: list[str] | None = None) -> int:
    return hd.run_chart(render, parse_args(argv))


def render(args: argparse.Namespace) -> None:
    out = hd.output_path(args.output)
    directory = hd.run_dir(args.run_dir, hd.LOAD_TIMELINE_CSV)
    meta = hd.read_run_json(directory)
    table = hd.Table(
        directory / hd.LOAD_TIMELINE_CSV,
        ["second", "requests", "p99_us"],
        ["bytes", "p50_us", "max_us", "errors", "server", "start_us"],
    )
    if len(table) == 0:
        raise hd.InputError(f"{directory / hd.LOAD_TIMELINE_CSV}: no rows")
    second = table.num("second")
    servers = table.text("server") if table.has("server") else np.array([""] * len(table), dtype=object)
    names = list(dict.fromkeys(servers))
    # With several servers, a row whose server is empty or 'all'/'total' is the sum of them.
    if len(names) > 1:
        names.sort(key=lambda n: (n.strip().lower() in TOTAL_NAMES, n))

    fig, (ax_rate, ax_lat) = plt.subplots(2, 1, figsize=(13, 7.5), sharex=True, gridspec_kw={"height_ratios": [1, 1.2]})
    ax_bytes = ax_rate.twinx() if table.has("bytes") else None
    handles = []
    for k, name in enumerate(names):
        rows = servers == name
        order = np.argsort(second[rows])
        x = second[rows][order] + 0.5  # each row covers [second, second + 1)
        is_total = len(names) > 1 and name.strip().lower() in TOTAL_NAMES
        colour = "black" if is_total else SERIES_COLOURS[k % len(SERIES_COLOURS)]
        label = "all servers" if is_total else (name if name else "requests")
        requests = table.num("requests")[rows][order]
        ax_rate.plot(x, requests / 1e3, color=colour, lw=1.6, marker="o", markersize=2.5)
        if ax_bytes is not None:
            ax_bytes.plot(x, table.num("bytes")[rows][order] / 1e6, color=colour, lw=1.0, ls=":", alpha=0.45)
        p99 = table.num("p99_us")[rows][order] / 1e3
        ax_lat.plot(x, p99, color=colour, lw=1.6)
        if table.has("p50_us"):
            ax_lat.plot(x, table.num("p50_us")[rows][order] / 1e3, color=colour, lw=1.0, ls="--")
        if table.has("max_us"):
            ax_lat.plot(x, table.num("max_us")[rows][order] / 1e3, color=colour, lw=0.8, ls=":")
        if table.has("errors"):
            errors = table.num("errors")[rows][order]
            bad = np.nan_to_num(errors) > 0
            if bad.any():
                ax_rate.plot(x[bad], requests[bad] / 1e3, linestyle="none", marker="x", color=ERROR_COLOUR, markersize=7, zorder=5)
                for xi, yi, e in zip(x[bad], requests[bad] / 1e3, errors[bad]):
                    ax_rate.annotate(f"{int(e)} err", (xi, yi), xytext=(3, 4), textcoords="offset points", fontsize=7, color=ERROR_COLOUR)
        handles.append(Line2D([], [], color=colour, lw=1.6, label=label))
    if len(names) == 1:
        handles = []
    handles.append(Line2D([], [], color="0.3", lw=1.6, marker="o", markersize=2.5, label="requests per second (top)"))
    if ax_bytes is not None:
        handles.append(Line2D([], [], color="0.3", lw=1.0, ls=":", alpha=0.45, label="MB per second (top, right axis)"))
    handles.append(Line2D([], [], color="0.3", lw=1.6, label="p99 latency (bottom)"))
    if table.has("p50_us"):
        handles.append(Line2D([], [], color="0.3", lw=1.0, ls="--", label="p50 latency (bottom)"))
    if table.has("max_us"):
        handles.append(Line2D([], [], color="0.3", lw=0.8, ls=":", label="max latency (bottom)"))
    if table.has("errors"):
        handles.append(Line2D([], [], color=ERROR_COLOUR, marker="x", ls="none", label="a second with errors"))

    # The writes, from load_writes.csv: their times are on the run clock, the timeline's seconds
    # count from the load's start (each row's start_us is its second's start on the run clock).
    writes_path = directory / hd.LOAD_WRITES_CSV
    load_start_us = 0.0
    if table.has("start_us"):
        offsets = table.num("start_us") - second * 1e6
        offsets = offsets[np.isfinite(offsets)]
        load_start_us = float(np.min(offsets)) if len(offsets) else 0.0
    shown = 0
    if writes_path.is_file():
        writes = hd.Table(writes_path, ["op", "size_bytes", "start_us", "reply_us"])
        starts = (writes.num("start_us") - load_start_us) / 1e6
        replies = (writes.num("reply_us") - load_start_us) / 1e6
        ops = writes.text("op")
        sizes = writes.num("size_bytes")
        label_transform = blended_transform_factory(ax_rate.transData, ax_rate.transAxes)
        for i in range(len(writes)):
            if not (np.isfinite(starts[i]) and np.isfinite(replies[i])):
                continue
            shown += 1
            for ax in (ax_rate, ax_lat):
                ax.axvspan(starts[i], replies[i], color=WRITE_COLOUR, alpha=0.5, lw=0, zorder=0)
                ax.axvline(starts[i], color=hd.OP_COLOURS.get(ops[i], "black"), lw=0.7, alpha=0.8, zorder=0.5)
            ax_rate.text(starts[i], 0.03, f"{ops[i]} {hd.size_label(sizes[i])}", transform=label_transform, rotation=90, ha="right", va="bottom", fontsize=7, color=hd.OP_COLOURS.get(ops[i], "black"))
        handles.append(Patch(color=WRITE_COLOUR, alpha=0.5, label=f"write (start \u2192 reply), {shown} in {writes_path.name}"))
        finite = starts[np.isfinite(starts)]
        first = f" (the first at {float(np.min(finite)):.1f} s)" if len(finite) else ""
        print(f"{shown} write(s) shaded, from {writes_path.name}{first}")

    ax_rate.set_ylabel("throughput (thousand requests/s)")
    ax_rate.set_ylim(bottom=0)
    if ax_bytes is not None:
        ax_bytes.set_ylabel("MB/s (10\u2076 bytes)")
        ax_bytes.set_ylim(bottom=0)
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("round-trip latency per second (ms, log scale)")
    ax_lat.set_xlabel("time since the run's start (s)")
    for ax in (ax_rate, ax_lat):
        ax.grid(True, color="0.9", lw=0.6)
        ax.set_axisbelow(True)
    server = hd.server_label(meta, "")
    title = args.title or "Load timeline: throughput and latency per second" + (f", {server}" if server else "") + f"\n{directory.name}"
    ax_rate.set_title(title, fontsize=11)
    ax_rate.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.07, 1.0), fontsize=8, frameon=False)
    hd.save(fig, out)


if __name__ == "__main__":
    sys.exit(main())
