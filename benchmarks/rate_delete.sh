#!/usr/bin/env bash
# The same DEL at two probe rates (issue 20: "a figure that moves with the tool's own knobs is
# the tool's, not the server's").
#
#   benchmarks/rate_delete.sh [SERVER ...]      # default: redis-7.0 redis-6.2 valkey-9.1 redis-8.2
#
# For each server, in one sitting: `probe --server-bin BIN --type hash --elements 1M
# --ops build,delete --repeat REPEAT --probe-rate R` at R = 500 and 5000 (per probe thread),
# the two rates alternating run by run (ROUNDS runs of each, default 2: 6 DELs a rate with
# REPEAT=3). Printed: each DEL's hol_delay_ms beside the server's SLOWLOG time of it and the
# thread that freed the hash; then per server the medians at each rate and the goal, the two
# medians within 1.5x + 2 ms of each other, for others' wait and for SLOWLOG (when the server
# itself slowed down at the higher rate, both move). On Valkey 9.1 every lazyfree-lazy-* is yes
# by default: its DEL frees in the background and SLOWLOG reads microseconds.
#
# Overrides: PROBE=..., ELEMENTS= (1M), REPEAT= (3), ROUNDS= (2), RATES="500 5000", KEEP=1.
# Needs an idle host: on 2 cores the probe threads at 5000/s compete with the server.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
release_probe
ELEMENTS="${ELEMENTS:-1M}"
REPEAT="${REPEAT:-3}"
ROUNDS="${ROUNDS:-2}"
RATES="${RATES:-500 5000}"
server_names "$@"
temp_runs_dir

for name in "${names[@]}"; do
  bin="$(bash scripts/servers.sh "$name")"
  for round in $(seq 1 "$ROUNDS"); do
    for rate in $RATES; do
      run="$out/$name/r$rate-$round"
      mkdir -p "$out/$name"
      echo "== $name, $rate probes/s, round $round" >&2
      "$PROBE" --server-bin "$bin" --type hash --elements "$ELEMENTS" --ops build,delete \
        --repeat "$REPEAT" --gap 300ms --probe-rate "$rate" --out "$run" >"$run.txt" 2>&1 ||
        echo "probe failed for $name at $rate/s: $(tail -3 "$run.txt")" >&2
    done
  done
done

python3 - "$out" <<'PY'
import csv, glob, json, os, statistics, sys
from collections import defaultdict

out = sys.argv[1]
rows = defaultdict(lambda: defaultdict(lambda: dict(hol=[], slow=[], freed=set())))
for summary in sorted(glob.glob(os.path.join(out, "*", "r*-*", "summary.csv"))):
    run = os.path.dirname(summary)
    meta = json.load(open(os.path.join(run, "run.json")))
    server = f"{meta['server']['flavor']} {meta['server']['version']}"
    rate = int(os.path.basename(run)[1:].split("-")[0])
    for s in csv.DictReader(open(summary)):
        if s["op"] != "delete" or s["ok"] != "true" or not s["hol_delay_ms"]:
            continue
        r = rows[server][rate]
        r["hol"].append(float(s["hol_delay_ms"]))
        if s["server_exec_us"]:
            r["slow"].append(float(s["server_exec_us"]) / 1e3)
        r["freed"].add(s["freed_by"] or "?")

def close(a, b):
    lo, hi = min(a, b), max(a, b)
    return hi <= 1.5 * lo + 2.0

print(f"{'server':<14} {'rate/s':>6} {'DELs':>4} {'freed by':<10} {'others ms, each':<44} {'median':>8} {'SLOWLOG median':>14}")
verdicts = []
for server, by_rate in rows.items():
    medians = {}
    for rate in sorted(by_rate):
        r = by_rate[rate]
        each = " ".join(f"{x:.1f}" for x in r["hol"])
        m = statistics.median(r["hol"])
        sm = statistics.median(r["slow"]) if r["slow"] else float("nan")
        medians[rate] = (m, sm)
        print(f"{server:<14} {rate:>6} {len(r['hol']):>4} {','.join(sorted(r['freed'])):<10} {each:<44} {m:>8.1f} {sm:>14.1f}")
    if len(medians) == 2:
        (a, sa), (b, sb) = medians.values()
        verdicts.append(f"{server}: others' wait {a:.1f} vs {b:.1f} ms (x{max(a, b) / max(min(a, b), 1e-9):.2f}): "
                        f"{'within' if close(a, b) else 'NOT within'} 1.5x + 2 ms; SLOWLOG {sa:.1f} vs {sb:.1f} ms: "
                        f"{'within' if close(sa, sb) else 'NOT within'}")
print()
print("\n".join(verdicts))
PY
