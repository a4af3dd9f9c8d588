#!/usr/bin/env bash
# Calibration error per injected stall length at several probe rates (issue 3's benchmark).
#
#   benchmarks/calibrate_rates.sh [PROBE_BINARY] [-- extra calibrate flags]
#
# Runs `probe calibrate` (default stalls 5,20,50,100,250 ms, --times 5) against the embedded
# server at 100, 1000 and 10000 probes/s per thread x 2 threads, then prints per rate and length
# the median stall error and median worst-delay error (measured - injected, ms), the worst
# |error|, and the claimed tolerance. Build with `cargo build --release` first.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/probe}
shift || true
[ "${1:-}" = "--" ] && shift
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for rate in 100 1000 10000; do
  "$bin" calibrate --probe-rate "$rate" --probe-threads 2 --times "${TIMES:-5}" --out "$out/r$rate" "$@" \
    >"$out/r$rate.txt" 2>&1 || true
done
python3 - "$out" <<'PY'
import csv, json, statistics, sys, os
out = sys.argv[1]
print(f"{'rate/thread':>11} {'stall':>7} {'n':>3} {'stall err med':>13} {'delay err med':>13} {'worst |err|':>11} {'tolerance':>9} {'within':>6}")
for rate in (100, 1000, 10000):
    path = os.path.join(out, f"r{rate}", "calibration.csv")
    if not os.path.exists(path):
        print(f"{rate:>11} (no result; see the run's output)")
        continue
    rows = list(csv.DictReader(open(path)))
    for length in sorted({float(r["requested_ms"]) for r in rows}):
        group = [r for r in rows if float(r["requested_ms"]) == length]
        se = [float(r["stall_error_ms"]) for r in group if r["stall_error_ms"]]
        de = [float(r["delay_error_ms"]) for r in group if r["delay_error_ms"]]
        worst = max([abs(x) for x in se + de], default=float("nan"))
        med = lambda xs: f"{statistics.median(xs):+.3f}" if xs else "n/a"
        within = sum(r["within"] == "true" for r in group)
        print(f"{rate:>11} {length:>5.0f}ms {len(group):>3} {med(se):>13} {med(de):>13} {worst:>11.3f} {float(group[0]['tolerance_ms']):>9.3f} {within:>3}/{len(group)}")
    # No backlog after a stall: the p99 latency of the probes intended in the 100 ms after each
    # 250 ms injection's reply, against the run's idle p99 (outside every write window).
    run_dir = os.path.join(out, f"r{rate}")
    writes = list(csv.DictReader(open(os.path.join(run_dir, "writes.csv"))))
    cal = {r["seq"]: float(r["requested_ms"]) for r in rows}
    ends = [int(w["reply_us"]) for w in writes if cal.get(w["seq"]) == 250.0]
    after = []
    for p in csv.DictReader(open(os.path.join(run_dir, "probes.csv"))):
        if not p["latency_us"]:
            continue
        t = int(p["intended_us"])
        if any(e < t <= e + 100_000 for e in ends):
            after.append(int(p["latency_us"]))
    after.sort()
    idle_p99 = json.load(open(os.path.join(run_dir, "run.json")))["baseline"]["p99_us"]
    if after:
        p99 = after[min(len(after) - 1, int(len(after) * 0.99))]
        print(f"            after each 250 ms stall (100 ms, {len(after)} probes): p99 {p99} us, idle p99 {idle_p99} us, difference {(p99 - idle_p99) / 1000:+.3f} ms (goal <= +0.2)")
    for line in open(os.path.join(out, f"r{rate}.txt")):
        if line.startswith(("baseline:", "client hiccups", "claimed accuracy")):
            print("            ", line.rstrip())
PY
