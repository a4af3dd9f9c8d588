#!/usr/bin/env python3
"""Power of `probe compare` by injection into real runs (benchmarks/compare_verdicts.sh step 3).

For each A/A pair (aa-NN-a, aa-NN-b) in OUT_DIR and each factor, a copy of the candidate
aa-NN-b gets its summary.csv `set_ms` and `hol_delay_ms` multiplied by the factor (a
proportional slowdown that keeps the real runs' noise: repeats, outliers, writes no probe
overlapped stay as they were), and `probe compare --format json` judges it against aa-NN-a.
Prints per (size, op, metric) the share of pairs whose cell came out `regression`, and the
smallest factor caught in at least 80% of the pairs.

Why injection rather than a parametric model: the runs' spread on a shared 2-core host is
neither normal nor lognormal (one repeat in five is often a host hiccup), and resampling five
values per cell would only reuse the same values; scaling the real candidate keeps every
oddity of the real data.

    python3 benchmarks/compare_power.py --probe target/release/probe OUT_DIR
"""

import argparse
import csv
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict


def scaled_copy(src: pathlib.Path, dst: pathlib.Path, factor: float) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("run.json", "writes.csv"):
        shutil.copy(src / name, dst / name)
    with open(src / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
        fields = list(rows[0].keys()) if rows else []
    for row in rows:
        for column in ("set_ms", "hol_delay_ms"):
            if row.get(column):
                row[column] = f"{float(row[column]) * factor:.6f}"
    with open(dst / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def size_label(size: int) -> str:
    return f"{size >> 20}M" if size >= 1 << 20 else f"{size}B"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", default="target/release/probe")
    parser.add_argument("--factors", default="1.1 1.2 1.3 1.5 2 3")
    parser.add_argument("--rules", default="", help="extra flags for every compare")
    parser.add_argument("out", type=pathlib.Path)
    args = parser.parse_args()
    factors = [float(f) for f in args.factors.split()]
    pairs = sorted((a, a.with_name(a.name[:-2] + "-b")) for a in args.out.glob("aa-*-a"))
    pairs = [(a, b) for a, b in pairs if b.is_dir()]
    if not pairs:
        print(f"no aa-NN-a / aa-NN-b pairs in {args.out}", file=sys.stderr)
        return 2
    caught = defaultdict(lambda: defaultdict(int))  # (size, op, metric) -> factor -> count
    with tempfile.TemporaryDirectory() as tmp:
        for factor in factors:
            for a, b in pairs:
                cand = pathlib.Path(tmp) / f"{b.name}-x{factor}"
                scaled_copy(b, cand, factor)
                done = subprocess.run(
                    [args.probe, "compare", str(a), str(cand), "--format", "json"]
                    + args.rules.split(),
                    capture_output=True,
                    text=True,
                )
                if done.returncode not in (0, 1, 3):
                    print(done.stderr, file=sys.stderr)
                    return done.returncode
                report = json.loads(done.stdout)
                for row in report["comparisons"][0]["rows"]:
                    for key in ("hol_delay", "set"):
                        m = row[key]
                        cell = (row["size_bytes"], row["op"], m["metric"])
                        caught[cell][factor] += m["verdict"] == "regression"
    n = len(pairs)
    print(f"{n} A/A pairs; share of pairs whose cell was called a regression")
    header = "| size, op: metric | " + " | ".join(f"x{f:g}" for f in factors) + " | smallest >= 80% |"
    print(header)
    print("|---|" + "---:|" * (len(factors) + 1))
    for cell in sorted(caught, key=lambda c: (c[2], c[0], c[1])):
        shares = [caught[cell][f] / n for f in factors]
        smallest = next((f"x{f:g}" for f, s in zip(factors, shares) if s >= 0.8), "-")
        size, op, metric = cell
        cells = " | ".join(f"{s:.0%}" for s in shares)
        print(f"| {size_label(size)} {op}: {metric} | {cells} | {smallest} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
