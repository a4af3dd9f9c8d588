#!/usr/bin/env python3
"""Probe latency over time for one `probe --out` run: every probe is a dot (one colour per
probe thread) at its intended send time, on a log latency axis; every write is shaded, its send
phase (start to last byte sent) apart from its after-send phase (last byte to reply), and
labelled with its op and size; stall episodes are red bars along the bottom. Reads probes.csv,
writes.csv and stalls.csv (run.json for the title and the stall threshold). Use --from/--to,
or --write, to zoom in: a whole run hides the fine structure of one write. A run over several
nodes (a master with replicas, a cluster) is drawn for one node: by default the one the writes
went to, or the one --node names (only its rows of probes.csv are kept as the file is read)."""

from __future__ import annotations

import argparse
import math
import sys

import holprobe_data as hd
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import blended_transform_factory

SEND_COLOUR = "#f4a259"  # send phase: start -> last byte sent
AFTER_COLOUR = "#8e7dbe"  # after-send phase: last byte -> reply
STALL_COLOUR = "#d62728"
THREAD_COLOURS = plt.get_cmap("tab10").colors
MAX_WRITE_LABELS = 30  # more writes in view than this: label only the largest size


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = hd.chart_parser(__doc__, ("run_dir", {"help": "a probe --out directory"}))
    parser.add_argument("--from", dest="t_from", type=float, metavar="SECONDS", help="start of the window, s since the run's start")
    parser.add_argument("--to", dest="t_to", type=float, metavar="SECONDS", help="end of the window, s since the run's start")
    parser.add_argument(
        "--write",
        metavar="SEQ",
        help="zoom on one write: its seq in writes.csv, 'largest' for the first set of the largest size, or 'largest:OP' (e.g. largest:delete)",
    )
    parser.add_argument(
        "--node",
        metavar="HOST:PORT",
        help="in a run over several nodes, draw this node's probes and stalls (default: the node the writes went to)",
    )
    return hd.parse_chart_args(parser, argv)


def main(argv: list[str] | None = None) -> int:
    return hd.run_chart(render, parse_args(argv))


def window_around_write(writes: hd.Table, which: str) -> tuple[float, float, int]:
    index = hd.find_write(writes, which)
    start = writes.num("start_us")[index] / 1e6
    reply = writes.num("reply_us")[index] / 1e6
    margin = max(0.25 * (reply - start), 0.02)
    return start - margin, reply + margin, index


def node_baseline(meta: dict, node: str | None, written: str | None) -> dict:
    """The drawn node's baseline from run.json: the run's own for the written node (or a run
    without node columns), the node's entry under `nodes` for another."""
    if node is None or node == written:
        return meta.get("baseline") or {}
    for other in meta.get("nodes") or []:
        if isinstance(other, dict) and other.get("node") == node:
            return other.get("baseline") or {}
    return {}


def render(args: argparse.Namespace) -> None:
    out = hd.output_path(args.output)
    directory = hd.run_dir(args.run_dir, hd.PROBES_CSV, hd.WRITES_CSV)
    meta = hd.read_run_json(directory)
    # One node's probes and stalls (a run without node columns: all of them, one server's).
    node = hd.pick_node(directory, meta, args.node)
    written = None
    if node is not None:
        try:
            written = hd.written_node(directory, meta)
        except hd.InputError:
            pass  # --node named one: the picture does not need to know which was written
    probes = hd.node_table(directory, hd.PROBES_CSV, ["thread", "intended_us", "latency_us", "ok"], node=node, meta=meta)
    kept = (meta.get("options") or {}).get("probes")
    if len(probes) == 0 and kept in ("delayed", "none"):
        raise hd.InputError(f"{directory / hd.PROBES_CSV}: no probe rows (the run kept {kept} probes: --probes {kept}); nothing to draw")
    if node is not None and len(probes) == 0:
        which = f"--node {node}" if args.node else f"the written node {node}"
        raise hd.InputError(f"{which}: no probes of that node in {directory / hd.PROBES_CSV}")
    writes = hd.Table(directory / hd.WRITES_CSV, ["seq", "op", "size_bytes", "start_us", "sent_us", "reply_us"])
    stalls_path = directory / hd.STALLS_CSV
    stalls = hd.node_table(directory, hd.STALLS_CSV, ["start_us", "end_us", "duration_ms"], node=node, meta=meta) if stalls_path.is_file() else None

    if args.write is not None and (args.t_from is not None or args.t_to is not None):
        raise hd.InputError("--write: give either --write or --from/--to, not both")
    t_from, t_to = args.t_from, args.t_to
    zoomed_write = None
    if args.write is not None:
        t_from, t_to, zoomed_write = window_around_write(writes, args.write)
    if t_from is not None and t_to is not None and t_from >= t_to:
        raise hd.InputError(f"--from {t_from:g} / --to {t_to:g}: the window must end after it starts")

    t = probes.num("intended_us") / 1e6
    latency_ms = probes.num("latency_us") / 1e3
    thread = probes.num("thread")
    ok = probes.flag("ok")
    lo = t_from if t_from is not None else (np.nanmin(t) if len(t) else 0.0)
    hi = t_to if t_to is not None else (np.nanmax(t) if len(t) else 1.0)
    visible = (t >= lo) & (t <= hi)
    if not visible.any():
        raise hd.InputError(f"--from/--to: no probe between {lo:g} s and {hi:g} s (the run's probes span {np.nanmin(t):g} to {np.nanmax(t):g} s)")

    fig, ax = plt.subplots(figsize=(13, 6.2))
    ax.set_yscale("log")

    good = visible & ok & np.isfinite(latency_ms)
    lat_visible = latency_ms[good]
    y_min = max(np.nanmin(lat_visible) * 0.6, 1e-3) if len(lat_visible) else 1e-2
    y_max = np.nanmax(lat_visible) * 2.5 if len(lat_visible) else 10.0
    threshold_us = (meta.get("options") or {}).get("stall_threshold_us")
    if threshold_us:
        y_max = max(y_max, threshold_us / 1e3 * 3)
    ax.set_ylim(y_min, y_max)
    ax.set_xlim(lo, hi)

    # Writes: shaded phases under the dots, labels along the top.
    label_transform = blended_transform_factory(ax.transData, ax.transAxes)
    starts = writes.num("start_us") / 1e6
    sents = writes.num("sent_us") / 1e6
    replies = writes.num("reply_us") / 1e6
    ops = writes.text("op")
    sizes = writes.num("size_bytes")
    seqs = writes.num("seq")
    span = hi - lo
    in_view = np.isfinite(starts) & np.isfinite(replies) & (replies >= lo) & (starts <= hi)
    # Too many writes for their labels to be read (a whole sweep has about 100): label only the
    # largest size in view; every write keeps its shading and its thin start line.
    only_size = None
    if int(in_view.sum()) > MAX_WRITE_LABELS and np.isfinite(sizes[in_view]).any():
        only_size = np.nanmax(sizes[in_view])
    shown_writes = 0
    for i in range(len(writes)):
        start, sent, reply = starts[i], sents[i], replies[i]
        if not in_view[i]:
            continue
        shown_writes += 1
        sent = min(max(sent, start), reply) if np.isfinite(sent) else reply
        ax.axvspan(start, sent, color=SEND_COLOUR, alpha=0.45, lw=0, zorder=0)
        ax.axvspan(sent, reply, color=AFTER_COLOUR, alpha=0.45, lw=0, zorder=0)
        # A thin edge keeps writes too short to shade at this zoom visible.
        ax.axvline(start, color=hd.OP_COLOURS.get(ops[i], "black"), lw=0.6, alpha=0.7, zorder=0.5)
        if only_size is not None and sizes[i] != only_size:
            continue
        label = f"{ops[i]} {hd.size_label(sizes[i])}"
        if zoomed_write is not None or span < 5:
            label += f" (#{int(seqs[i])}, {1e3 * (reply - start):.1f} ms)"
        ax.text(
            max(start, lo),
            0.985,
            label,
            transform=label_transform,
            rotation=90,
            ha="right",
            va="top",
            fontsize=7,
            color=hd.OP_COLOURS.get(ops[i], "black"),
            clip_on=True,
        )

    # Probes: one colour per thread, small rasterized dots (hundreds of thousands stay light).
    thread_ids = sorted({int(x) for x in thread[visible] if np.isfinite(x)})
    handles: list = []
    for k, tid in enumerate(thread_ids):
        mine = good & (thread == tid)
        colour = THREAD_COLOURS[k % len(THREAD_COLOURS)]
        ax.plot(
            t[mine],
            latency_ms[mine],
            linestyle="none",
            marker=".",
            markersize=2.2 if span > 5 else (3.5 if span > 0.5 else 5),
            markeredgewidth=0,
            alpha=0.55,
            color=colour,
            rasterized=True,
            zorder=2,
        )
        only = " delayed" if kept == "delayed" else ""
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=5, color=colour, label=f"probe thread {tid} ({int(mine.sum())}{only} probes)"))
    failed = visible & ~(ok & np.isfinite(latency_ms))
    if failed.any():
        ax.plot(t[failed], np.full(int(failed.sum()), y_max / 1.4), linestyle="none", marker="x", markersize=4, color="black", zorder=3)
        handles.append(Line2D([], [], linestyle="none", marker="x", color="black", label=f"probe error or no reply ({int(failed.sum())})"))

    # Reference lines from run.json.
    if threshold_us:
        ax.axhline(threshold_us / 1e3, color="0.35", lw=0.8, ls="--", zorder=1)
        handles.append(Line2D([], [], color="0.35", lw=0.8, ls="--", label=f"stall threshold ({threshold_us / 1e3:g} ms)"))
    baseline = node_baseline(meta, node, written)
    if baseline.get("p50_us"):
        ax.axhline(baseline["p50_us"] / 1e3, color="0.2", lw=0.8, ls=":", zorder=1)
        handles.append(Line2D([], [], color="0.2", lw=0.8, ls=":", label=f"baseline p50 ({baseline['p50_us']} \u00b5s)"))

    # Stall episodes: red bars along the bottom, the longest ones labelled.
    stall_count = 0
    if stalls is not None and len(stalls):
        s0 = stalls.num("start_us") / 1e6
        s1 = stalls.num("end_us") / 1e6
        dur = stalls.num("duration_ms")
        inside = (s1 >= lo) & (s0 <= hi)
        stall_count = int(inside.sum())
        bar_transform = blended_transform_factory(ax.transData, ax.transAxes)
        min_width = span / 1500  # at least about one pixel
        for a, b in zip(s0[inside], s1[inside]):
            ax.add_patch(plt.Rectangle((a, 0.0), max(b - a, min_width), 0.035, transform=bar_transform, color=STALL_COLOUR, lw=0, zorder=4))
        # Label the longest stalls, skipping any label that would run into one already placed.
        order = np.argsort(-np.nan_to_num(dur[inside]))
        placed: list[float] = []
        for j in order:
            if len(placed) == 8:
                break
            x = s0[inside][j]
            if any(abs(x - p) < span / 15 for p in placed):
                continue
            placed.append(x)
            ax.text(x, 0.045, f"{dur[inside][j]:.1f} ms", transform=bar_transform, fontsize=6.5, color=STALL_COLOUR, ha="left", va="bottom", zorder=4)
    handles.append(Patch(color=STALL_COLOUR, label=f"stall episode ({stall_count} here; longest labelled)"))
    handles.append(Patch(color=SEND_COLOUR, alpha=0.45, label="write: send phase (start \u2192 last byte sent)"))
    handles.append(Patch(color=AFTER_COLOUR, alpha=0.45, label="write: after send (last byte \u2192 reply)"))
    if only_size is not None:
        handles.append(Line2D([], [], color="0.3", lw=0.6, label=f"thin line: a write's start; only the {hd.size_label(only_size)}\nwrites labelled ({shown_writes} here: zoom for the rest)"))

    ax.set_xlabel("time since the run's start (s)")
    ax.set_ylabel("probe latency (ms, log scale)\nreply \u2212 intended send")
    ax.grid(True, which="major", axis="y", color="0.88", lw=0.6)
    ax.grid(True, which="major", axis="x", color="0.93", lw=0.6)
    ax.set_axisbelow(True)
    if args.title:
        title = args.title
    else:
        server = hd.server_label(meta, directory.name)
        title = f"Probe latency during large writes: {server}"
        probing = hd.probing_label(meta)
        detail = ", ".join(x for x in (probing, f"{shown_writes} write event{'s' if shown_writes != 1 else ''}", directory.name) if x)
        title += f"\n{detail}"
        if node is not None:
            title += f"\nnode {hd.node_detail(meta, node)}" + (" (written)" if node == written else (f" (the writes went to {written})" if written else ""))
        if zoomed_write is not None:
            title += f" \u2014 zoom on write #{int(seqs[zoomed_write])}"
    ax.set_title(title, fontsize=11)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    hd.save(fig, out)


if __name__ == "__main__":
    sys.exit(main())
