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
# TRAFFIC=1 adds a third arm, to tell the tool's knob from the server's load: the lower rate,
# while another client (benchmarks/minprobe.c, built here: two connections of open-loop PINGs)
# sends the difference between the two rates, so the server answers as many commands as at the
# higher rate while the tool probes at the lower one. It needs the server's port before the run,
# so this arm runs on a server the script starts (`--save '' --appendonly no`) with --url. If
# the tool's figure at the lower rate rises with the other client's traffic as it does with its
# own rate, the figure follows what the server is asked to do, not how the tool measures it.
#
# Overrides: PROBE=..., ELEMENTS= (1M), REPEAT= (3), ROUNDS= (2), RATES="500 5000", KEEP=1,
# TRAFFIC=1. Needs an idle host: on 2 cores the probe threads at 5000/s compete with the server.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
release_probe
ELEMENTS="${ELEMENTS:-1M}"
REPEAT="${REPEAT:-3}"
ROUNDS="${ROUNDS:-2}"
RATES="${RATES:-500 5000}"
TRAFFIC="${TRAFFIC:-0}"
server_names "$@"
temp_runs_dir
read -r low high <<<"$RATES"
if [[ "$TRAFFIC" = 1 ]]; then
  if [[ -z "${high:-}" ]] || ((high <= low)); then
    echo "TRAFFIC=1 needs two rates in RATES, the lower first (RATES=\"500 5000\"), not \"$RATES\"" >&2
    exit 2
  fi
  gcc -O2 -pthread -o "$out/minprobe" benchmarks/minprobe.c
fi

# The traffic arm's run: a server started here, the tool at the lower rate with --url, and
# minprobe sending (high - low) x the tool's two probe threads of PINGs a second beside it.
traffic_run() { # BIN RUN
  local bin=$1 run=$2 port pid mp
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$out" --logfile "$run.server.log" &
  pid=$!
  for _ in $(seq 100); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null && break
    sleep 0.05
  done
  "$out/minprobe" 127.0.0.1 "$port" 2 $((high - low)) 3600 >"$run.minprobe.txt" 2>&1 &
  mp=$!
  "$PROBE" --url "redis://127.0.0.1:$port" --type hash --elements "$ELEMENTS" --ops build,delete \
    --repeat "$REPEAT" --gap 300ms --probe-rate "$low" --out "$run" >"$run.txt" 2>&1 ||
    echo "probe failed for $run: $(tail -3 "$run.txt")" >&2
  kill "$mp" "$pid" 2>/dev/null || true
  wait "$mp" "$pid" 2>/dev/null || true
}

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
    if [[ "$TRAFFIC" = 1 ]]; then
      echo "== $name, $low probes/s and another client's $((high - low)) x 2/s, round $round" >&2
      traffic_run "$bin" "$out/$name/t$low-$round"
    fi
  done
done

python3 - "$out" <<'PY'
import csv, glob, json, os, statistics, sys
from collections import defaultdict

out = sys.argv[1]
rows = defaultdict(lambda: defaultdict(lambda: dict(hol=[], slow=[], freed=set())))
for summary in sorted(glob.glob(os.path.join(out, "*", "[rt]*-*", "summary.csv"))):
    run = os.path.dirname(summary)
    meta = json.load(open(os.path.join(run, "run.json")))
    server = f"{meta['server']['flavor']} {meta['server']['version']}"
    name = os.path.basename(run)
    # An arm: (the tool's rate, whether another client added traffic); r500-1, t500-1.
    arm = (int(name[1:].split("-")[0]), name[0] == "t")
    for s in csv.DictReader(open(summary)):
        if s["op"] != "delete" or s["ok"] != "true" or not s["hol_delay_ms"]:
            continue
        r = rows[server][arm]
        r["hol"].append(float(s["hol_delay_ms"]))
        if s["server_exec_us"]:
            r["slow"].append(float(s["server_exec_us"]) / 1e3)
        r["freed"].add(s["freed_by"] or "?")

def close(a, b):
    lo, hi = min(a, b), max(a, b)
    return hi <= 1.5 * lo + 2.0

def verdict_of(t, a, b):
    """What moves others' wait: the traffic arm `t` against the lower rate alone `a` and the
    higher rate alone `b`."""
    if close(a, b):
        return "neither moves it"
    if close(t, b) and not close(t, a):
        return "the load"
    if close(t, a) and not close(t, b):
        return "the rate"
    return "cannot tell"

def ratio(a, b):
    return max(a, b) / max(min(a, b), 1e-9)

print(f"{'server':<14} {'rate/s':>14} {'DELs':>4} {'freed by':<10} {'others ms, each':<44} {'median':>8} {'SLOWLOG median':>14}")
verdicts = []
for server, by_arm in rows.items():
    medians = {}
    for arm in sorted(by_arm):
        r = by_arm[arm]
        each = " ".join(f"{x:.1f}" for x in r["hol"])
        m = statistics.median(r["hol"])
        sm = statistics.median(r["slow"]) if r["slow"] else float("nan")
        medians[arm] = (m, sm)
        label = f"{arm[0]}+traffic" if arm[1] else str(arm[0])
        # The traffic arm's --url server keeps its own slowlog-log-slower-than: no SLOWLOG row.
        slow = f"{sm:.1f}" if r["slow"] else "-"
        print(f"{server:<14} {label:>14} {len(r['hol']):>4} {','.join(sorted(r['freed'])):<10} {each:<44} {m:>8.1f} {slow:>14}")
    alone = sorted(a for a in medians if not a[1])
    if len(alone) == 2:
        (a, sa), (b, sb) = medians[alone[0]], medians[alone[1]]
        verdicts.append(f"{server}: others' wait {a:.1f} vs {b:.1f} ms (x{ratio(a, b):.2f}): "
                        f"{'within' if close(a, b) else 'NOT within'} 1.5x + 2 ms; SLOWLOG {sa:.1f} vs {sb:.1f} ms: "
                        f"{'within' if close(sa, sb) else 'NOT within'}")
        traffic = (alone[0][0], True)
        if traffic in medians:
            t = medians[traffic][0]
            verdicts.append(f"{'':<14}  at {alone[0][0]}/s beside another client's traffic: {t:.1f} ms, "
                            f"x{t / max(a, 1e-9):.2f} its {a:.1f} alone, x{t / max(b, 1e-9):.2f} the {b:.1f} "
                            f"at {alone[1][0]}/s (the tool's rate or the server's load: "
                            f"{verdict_of(t, a, b)})")
print()
print("\n".join(verdicts))
PY
