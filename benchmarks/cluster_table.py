#!/usr/bin/env python3
"""The table of benchmarks/cluster_writes.sh: per server, op and size, the median over the
repeats of hol_delay_ms (how long another client waited at worst) on the written shard's
master, on its replica, on the other shards' nodes (the median of their per-write worst), and
on the same server alone; with the written master's figure over the lone server's."""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str]) -> int:
    out = Path(argv[1])
    servers = argv[2:]
    print("| server | op | size | n | written master | its replica | other shards (worst node) | alone | master / alone |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for server in servers:
        cluster = defaultdict(lambda: defaultdict(list))
        for row in csv.DictReader(open(out / f"{server}-cluster" / "summary.csv")):
            if not row["hol_delay_ms"] or row["ok"] != "true":
                continue
            key = (row["op"], int(row["size_bytes"]))
            if row["same_shard"] == "true":
                part = "master" if row["role"] == "master" else "replica"
                cluster[key][part].append(float(row["hol_delay_ms"]))
            else:
                cluster[key][("other", row["seq"])].append(float(row["hol_delay_ms"]))
        alone = defaultdict(list)
        for row in csv.DictReader(open(out / f"{server}-alone" / "summary.csv")):
            if row["hol_delay_ms"] and row["ok"] == "true":
                alone[(row["op"], int(row["size_bytes"]))].append(float(row["hol_delay_ms"]))
        order = {"set": 0, "overwrite": 1, "delete": 2}
        for key in sorted(cluster, key=lambda k: (k[1], order.get(k[0], 9))):
            parts = cluster[key]
            others = [max(v) for k, v in parts.items() if isinstance(k, tuple)]
            master = median(parts["master"])
            lone = median(alone.get(key, []))
            ratio = f"{master / lone:.2f}x" if master is not None and lone else "-"
            print(
                f"| {server} | {key[0]} | {key[1] >> 20}M | {len(parts['master'])} | {cell(master)} | "
                f"{cell(median(parts['replica']))} | {cell(median(others))} | {cell(lone)} | {ratio} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
