#!/usr/bin/env python3
"""One write's effect across the nodes of a deployment (master, replicas, every shard of a
Redis Cluster), from a `probe --out` run over several nodes: one panel per node, the written
shard's master first, then its replicas, then the other shards' masters and replicas in shard
order. Each panel shows that node's probes in a window around the write (a dot per probe at its
intended send time, its latency on a log axis shared by all panels; time in ms since the
write's start), the write's send and after-send phases shaded, that node's stall episodes as
red bars along the bottom, and at the right the node, its role and shard and its hol_delay_ms
for that write ('others blocked'). Reads probes.csv (only the rows in the window are kept),
writes.csv, stalls.csv, summary.csv and run.json. A run without node columns (older runs, or
one server) is one node: it is drawn as a single panel, with a note on stderr."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import holprobe_data as hd
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator
from matplotlib.transforms import blended_transform_factory, offset_copy

SEND_COLOUR = "#f4a259"  # send phase: start -> last byte sent (as timeline.py)
AFTER_COLOUR = "#8e7dbe"  # after-send phase: last byte -> reply
STALL_COLOUR = "#d62728"
WRITTEN_COLOUR = "#1f4e9c"
SAME_SHARD_COLOUR = "#3d6fb6"
OTHER_COLOUR = "0.25"
# A node's probe threads get these colours by their rank within the node (thread ids are global:
# 0-1 the first node, 2-3 the next, ...), so every panel reads the same way.
THREAD_COLOURS = ("#2a7ab0", "#e08a1e", "#3a9a48", "#8c564b", "#9467bd", "#7f7f7f")
NODE_COLUMNS = ["node", "role", "shard"]


@dataclass
class Node:
    """One probed server, as the exports name it."""

    address: str  # host:port; '' in a run without node columns
    role: str = ""
    shard: str = ""  # '' outside a cluster
    same_shard: bool | None = None
    first_seen: int = 0  # where it first appeared, to keep the export's order among equals
    hol_delay_ms: float = math.nan
    has_summary: bool = False
    baseline_p50_us: float | None = None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = hd.chart_parser(__doc__, ("run_dir", {"help": "a probe --out directory"}))
    parser.add_argument(
        "--write",
        metavar="SEQ",
        default="largest",
        help="the write to show: its seq in writes.csv, 'largest' for the first set of the largest size (the default), or 'largest:OP' (e.g. largest:delete)",
    )
    return hd.parse_chart_args(parser, argv)


def main(argv: list[str] | None = None) -> int:
    return hd.run_chart(render, parse_args(argv))


def shard_number(shard: str) -> int:
    try:
        return int(shard)
    except ValueError:
        return -1


def collect_nodes(meta: dict, summary: hd.Table, seq: int, written: str, probe_nodes: list[str], fallback_address: str) -> list[Node]:
    """Every node of the run, in panel order, with its hol_delay_ms for write `seq`. The nodes are
    those of summary.csv (rows of that write), run.json's `node` and `nodes`, and any that has
    probes in the window; a run without node columns is one node named `fallback_address`."""
    nodes: dict[str, Node] = {}

    def add(address: str, role: str = "", shard="", same_shard: bool | None = None) -> Node:
        shard = "" if shard is None else str(shard)
        node = nodes.get(address)
        if node is None:
            node = nodes[address] = Node(address, first_seen=len(nodes))
        node.role = node.role or (role or "")
        node.shard = node.shard or shard
        if node.same_shard is None and same_shard is not None:
            node.same_shard = same_shard
        return node

    seqs = summary.num("seq")
    hol = summary.num("hol_delay_ms")
    rows = np.flatnonzero(seqs == seq)
    by_node = summary.has("node")
    for i in rows:
        address = summary.columns["node"][i] if by_node else fallback_address
        role = summary.columns["role"][i] if summary.has("role") else ""
        shard = summary.columns["shard"][i] if summary.has("shard") else ""
        same = summary.columns["same_shard"][i].strip().lower() == "true" if summary.has("same_shard") else None
        node = add(address, role, shard, same)
        node.hol_delay_ms = hol[i]
        node.has_summary = True

    if by_node or not rows.size:
        own = meta.get("node") if isinstance(meta.get("node"), dict) else {}
        if own.get("node"):
            add(own["node"], own.get("role") or "", own.get("shard"), True)
        for other in meta.get("nodes") or []:
            if isinstance(other, dict) and other.get("node"):
                add(other["node"], other.get("role") or "", other.get("shard"), other.get("same_shard"))
        for address in probe_nodes:
            add(address)
    if not nodes:
        add(fallback_address, (meta.get("server") or {}).get("role") or "", "", True)

    # Baselines (run.json): the written node's is the run's own, the others' under `nodes`.
    baselines = {}
    own = meta.get("node") if isinstance(meta.get("node"), dict) else {}
    run_baseline = (meta.get("baseline") or {}).get("p50_us")
    baselines[own.get("node") or written] = run_baseline
    for other in meta.get("nodes") or []:
        if isinstance(other, dict) and other.get("node"):
            baselines[other["node"]] = (other.get("baseline") or {}).get("p50_us")
    if len(nodes) == 1:
        only = next(iter(nodes.values()))
        baselines.setdefault(only.address, run_baseline)
    written_shard = nodes[written].shard if written in nodes else ""
    for node in nodes.values():
        node.baseline_p50_us = baselines.get(node.address)
        if node.same_shard is None:
            node.same_shard = node.address == written or node.shard == written_shard

    def order(node: Node):
        rank = 0 if node.address == written else (1 if node.role == "master" else 2)
        return (0 if node.same_shard else 1, shard_number(node.shard), rank, node.first_seen)

    return sorted(nodes.values(), key=order)


def node_label(node: Node, written: str, single: bool) -> tuple[str, str]:
    """The panel's right-hand label: `127.0.0.1:7201 master shard 0 (written)` and
    `others blocked 42.7 ms`."""
    parts = [node.address or "the server"]
    if node.role:
        parts.append(node.role)
    if node.shard:
        parts.append(f"shard {node.shard}")
    if node.address == written:
        parts.append("(written)" if not single else "(written; the only node)")
    elif node.same_shard:
        parts.append("(same shard)")
    if not node.has_summary:
        blocked = "others blocked: no summary row"
    elif math.isnan(node.hol_delay_ms):
        blocked = "others blocked: no probe overlapped"
    else:
        blocked = f"others blocked {node.hol_delay_ms:.1f} ms"
    return " ".join(parts), blocked


def render(args: argparse.Namespace) -> None:
    out = hd.output_path(args.output)
    directory = hd.run_dir(args.run_dir, hd.PROBES_CSV, hd.WRITES_CSV, hd.SUMMARY_CSV)
    meta = hd.read_run_json(directory)
    writes = hd.Table(directory / hd.WRITES_CSV, ["seq", "op", "size_bytes", "start_us", "sent_us", "reply_us", "set_ms"], ["node"])
    index = hd.find_write(writes, args.write)
    seq = int(writes.num("seq")[index])
    op = writes.text("op")[index]
    size = writes.num("size_bytes")[index]
    start_us = writes.num("start_us")[index]
    reply_us = writes.num("reply_us")[index]
    set_ms = writes.num("set_ms")[index]
    if not (np.isfinite(start_us) and np.isfinite(reply_us)):
        raise hd.InputError(f"--write '{args.write}': write #{seq} has no start_us/reply_us in writes.csv (did it fail?)")
    # The window of timeline.py --write: a quarter of the write's time either side, 20 ms at least.
    margin_us = max(0.25 * (reply_us - start_us), 20_000.0)
    lo_us, hi_us = start_us - margin_us, reply_us + margin_us

    probes = hd.Table(
        directory / hd.PROBES_CSV,
        ["thread", "intended_us", "latency_us", "ok"],
        NODE_COLUMNS,
        between=("intended_us", lo_us, hi_us),
    )
    summary = hd.Table(directory / hd.SUMMARY_CSV, ["seq", "hol_delay_ms"], NODE_COLUMNS + ["same_shard"])
    stalls_path = directory / hd.STALLS_CSV
    stalls = hd.Table(stalls_path, ["start_us", "end_us", "duration_ms"], ["node"]) if stalls_path.is_file() else None

    server = meta.get("server") or {}
    fallback_address = server.get("address") or directory.name
    by_node = probes.has("node")
    probe_node = probes.text("node") if by_node else np.full(len(probes), fallback_address, dtype=object)
    written = hd.written_node(directory, meta) or fallback_address
    seen = list(dict.fromkeys(probe_node.tolist()))
    nodes = collect_nodes(meta, summary, seq, written, seen, fallback_address)
    single = len(nodes) == 1
    if single:
        print(f"{hd.prog()}: note: {directory} has one node ({nodes[0].address or 'no node columns'}): one panel; timeline.py draws the same probes with more detail", file=sys.stderr)

    t_ms = (probes.num("intended_us") - start_us) / 1e3
    latency_ms = probes.num("latency_us") / 1e3
    thread = probes.num("thread")
    ok = probes.flag("ok")
    good = ok & np.isfinite(latency_ms)
    x_lo, x_hi = (lo_us - start_us) / 1e3, (hi_us - start_us) / 1e3
    span = x_hi - x_lo

    threshold_us = (meta.get("options") or {}).get("stall_threshold_us")
    lat_good = latency_ms[good & (latency_ms > 0)]
    y_min = max(float(np.min(lat_good)) * 0.6, 1e-3) if len(lat_good) else 1e-2
    y_max = float(np.max(lat_good)) * 2.5 if len(lat_good) else 10.0
    if threshold_us:
        y_max = max(y_max, threshold_us / 1e3 * 3)
        y_min = min(y_min, threshold_us / 1e3 / 3)

    stall_node = None
    if stalls is not None and len(stalls):
        s0 = (stalls.num("start_us") - start_us) / 1e3
        s1 = (stalls.num("end_us") - start_us) / 1e3
        s_dur = stalls.num("duration_ms")
        stall_node = stalls.text("node") if stalls.has("node") else np.full(len(stalls), fallback_address, dtype=object)
        stall_in_view = (s1 >= x_lo) & (s0 <= x_hi)

    # Writes in view (the chosen one, and any neighbour the margins reach), in ms since its start.
    w_start = (writes.num("start_us") - start_us) / 1e3
    w_sent = (writes.num("sent_us") - start_us) / 1e3
    w_reply = (writes.num("reply_us") - start_us) / 1e3
    w_ops = writes.text("op")
    w_sizes = writes.num("size_bytes")
    w_seqs = writes.num("seq")
    w_in_view = np.isfinite(w_start) & np.isfinite(w_reply) & (w_reply >= x_lo) & (w_start <= x_hi)

    kept = (meta.get("options") or {}).get("probes")
    empty_note = "no probe rows in this window" + (f" (probes.csv holds only {kept} probes: --probes {kept})" if kept in ("delayed", "none") else "")

    n = len(nodes)
    # Panels of 1.45 in (1.1 past 8 nodes); fewer than three get more, so the shared y label fits.
    panel_height = max(1.45 if n <= 8 else 1.1, 3.2 / n)
    fig, axes = plt.subplots(n, 1, figsize=(13, 1.3 + panel_height * n), sharex=True, sharey=True, squeeze=False)
    axes = axes[:, 0]
    thread_ranks_used = 0
    any_failed = False
    any_baseline = False
    stalls_total = 0
    for ax, node in zip(axes, nodes):
        ax.set_yscale("log")
        mine = probe_node == node.address
        for w in np.flatnonzero(w_in_view):
            a, r = w_start[w], w_reply[w]
            s = min(max(w_sent[w], a), r) if np.isfinite(w_sent[w]) else r
            ax.axvspan(a, s, color=SEND_COLOUR, alpha=0.45, lw=0, zorder=0)
            ax.axvspan(s, r, color=AFTER_COLOUR, alpha=0.45, lw=0, zorder=0)
            ax.axvline(a, color=hd.OP_COLOURS.get(w_ops[w], "black"), lw=0.6, alpha=0.7, zorder=0.5)

        threads = sorted({int(x) for x in thread[mine] if np.isfinite(x)})
        thread_ranks_used = max(thread_ranks_used, len(threads))
        for rank, tid in enumerate(threads):
            dots = mine & good & (thread == tid)
            ax.plot(
                t_ms[dots],
                latency_ms[dots],
                linestyle="none",
                marker=".",
                markersize=3.2,
                markeredgewidth=0,
                alpha=0.6,
                color=THREAD_COLOURS[rank % len(THREAD_COLOURS)],
                rasterized=True,
                zorder=2,
            )
        failed = mine & ~good
        if failed.any():
            any_failed = True
            ax.plot(t_ms[failed], np.full(int(failed.sum()), y_max / 1.4), linestyle="none", marker="x", markersize=4, color="black", zorder=3)
        if not mine.any():
            ax.text(0.5, 0.5, empty_note, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="0.4", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85}, zorder=5)

        if threshold_us:
            ax.axhline(threshold_us / 1e3, color="0.35", lw=0.8, ls="--", zorder=1)
        if node.baseline_p50_us:
            any_baseline = True
            ax.axhline(node.baseline_p50_us / 1e3, color="0.2", lw=0.8, ls=":", zorder=1)

        # This node's stall episodes: red bars along the bottom.
        longest = None
        count = 0
        if stall_node is not None:
            bar_transform = blended_transform_factory(ax.transData, ax.transAxes)
            here = stall_in_view & (stall_node == node.address)
            count = int(here.sum())
            for a, b in zip(s0[here], s1[here]):
                a, b = max(a, x_lo), min(b, x_hi)
                ax.add_patch(plt.Rectangle((a, 0.0), max(b - a, span / 1500), 0.06, transform=bar_transform, color=STALL_COLOUR, lw=0, zorder=4))
            if count:
                longest = float(np.nanmax(s_dur[here]))
        stalls_total += count

        name, blocked = node_label(node, written, single)
        colour = WRITTEN_COLOUR if node.address == written else (SAME_SHARD_COLOUR if node.same_shard else OTHER_COLOUR)
        ax.text(1.01, 0.62, name, transform=ax.transAxes, ha="left", va="bottom", fontsize=9, fontweight="bold", color=colour)
        ax.text(1.01, 0.58, blocked, transform=ax.transAxes, ha="left", va="top", fontsize=9, color="black")
        stall_text = f"{count} stall{'s' if count != 1 else ''} here" + (f", longest {longest:.1f} ms" if longest is not None else "")
        probe_text = f"{int(mine.sum())} probes"
        ax.text(1.01, 0.30, f"{probe_text}; {stall_text}", transform=ax.transAxes, ha="left", va="top", fontsize=7.5, color="0.35")

        ax.grid(True, which="major", axis="y", color="0.88", lw=0.6)
        ax.grid(True, which="major", axis="x", color="0.93", lw=0.6)
        ax.set_axisbelow(True)

    axes[0].set_xlim(x_lo, x_hi)
    axes[0].set_ylim(y_min, y_max)
    for ax in axes:
        ax.yaxis.set_major_locator(LogLocator(base=10, numticks=6))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.tick_params(axis="y", labelsize=8)

    # The write(s) named along the top of the first panel.
    label_transform = blended_transform_factory(axes[0].transData, axes[0].transAxes)
    for w in np.flatnonzero(w_in_view):
        label = f"{w_ops[w]} {hd.size_label(w_sizes[w])} (#{int(w_seqs[w])}, {w_reply[w] - w_start[w]:.1f} ms)"
        axes[0].text(max(w_start[w], x_lo), 1.02, label, transform=label_transform, ha="left", va="bottom", fontsize=8, color=hd.OP_COLOURS.get(w_ops[w], "black"), clip_on=False)

    axes[-1].set_xlabel(f"time since write #{seq}'s start (ms); dots at each probe's intended send time")
    fig.supylabel("probe latency (ms, log scale)\nreply \u2212 intended send", fontsize=10, x=0.035)

    handles: list = []
    for rank in range(thread_ranks_used):
        ordinal = {0: "1st", 1: "2nd", 2: "3rd"}.get(rank, f"{rank + 1}th")
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=5, color=THREAD_COLOURS[rank % len(THREAD_COLOURS)], label=f"a probe of the node's {ordinal} thread"))
    if any_failed:
        handles.append(Line2D([], [], linestyle="none", marker="x", color="black", label="probe error or no reply"))
    handles.append(Patch(color=SEND_COLOUR, alpha=0.45, label="write: send phase (start \u2192 last byte sent)"))
    handles.append(Patch(color=AFTER_COLOUR, alpha=0.45, label="write: after send (last byte \u2192 reply)"))
    handles.append(Patch(color=STALL_COLOUR, label=f"that node's stall episodes ({stalls_total} in view)"))
    if threshold_us:
        handles.append(Line2D([], [], color="0.35", lw=0.8, ls="--", label=f"stall threshold ({threshold_us / 1e3:g} ms)"))
    if any_baseline:
        handles.append(Line2D([], [], color="0.2", lw=0.8, ls=":", label="that node's baseline p50 (run.json)"))

    if args.title:
        title = args.title
    else:
        server_name = hd.server_label(meta, directory.name)
        topology = meta.get("topology") or {}
        kind = topology.get("kind") or ("single server" if single else "")
        shards = topology.get("shards") or []
        shape = f"{kind}, {len(shards)} shard{'s' if len(shards) != 1 else ''}" if kind == "cluster" else kind
        what = f"{op} {hd.size_label(size)} (write #{seq}, {set_ms:.1f} ms for the writer) to {written}"
        detail = ", ".join(x for x in (server_name, shape, f"{n} node{'s' if n != 1 else ''} probed", hd.probing_label(meta), directory.name) if x)
        title = f"{'One write seen from its only node' if single else 'One write seen from every node'}: {what}\n{detail}"
    axes[0].set_title(title, fontsize=11, pad=18)
    fig.subplots_adjust(hspace=0.12, left=0.1, right=0.74)
    # Under the x axis's label, whatever the number of panels: anchored in inches below the last.
    below = offset_copy(axes[-1].transAxes, fig=fig, y=-0.5, units="inches")
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below, ncol=min(4, len(handles)), fontsize=8, frameon=False)
    hd.save(fig, out)


if __name__ == "__main__":
    sys.exit(main())
