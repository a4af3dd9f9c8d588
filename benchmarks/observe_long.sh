#!/usr/bin/env bash
# Observe mode for a long time, at two probe rates at once: the probe process's resident memory
# (now and peak) and CPU after 1, 10 and 60 minutes, and the probe records it dropped. Goals:
# flat memory and CPU per second, at most 50 MB resident at the defaults, 0 probes dropped.
#
# Usage: benchmarks/observe_long.sh [OUT_DIR]   (MINUTES=60 CHECKPOINTS="1 10 60" RATES="1000 10000")
# Each rate gets its own embedded redis-server; both runs go at once on this machine's cores,
# so each shares the host with the other (say so when quoting the CPU figures).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/observe_long}
minutes=${MINUTES:-60}
checkpoints=${CHECKPOINTS:-"1 10 60"}
rates=${RATES:-"1000 10000"}
cargo build --release --locked -q
bin=${BIN:-target/release/probe}
mkdir -p "$out"
ticks=$(getconf CLK_TCK)
declare -A pids
for rate in $rates; do
  "$bin" --duration "${minutes}m" --probe-rate "$rate" --out "$out/r$rate" --force \
    --report-every 60s > "$out/r$rate.log" 2>&1 &
  pids[$rate]=$!
done
start=$(date +%s)
printf '%-8s %8s %10s %10s %12s %10s\n' rate minutes rss_mb peak_mb cpu_s cpu_pct > "$out/table.txt"
declare -A last_cpu last_t
for rate in $rates; do last_cpu[$rate]=0; last_t[$rate]=$start; done
for m in $checkpoints; do
  # A checkpoint at the run's end is read 15 s before it, while the process still runs.
  at=$(awk -v m="$m" -v total="$minutes" 'BEGIN { s = m * 60; e = total * 60 - 15; printf "%d", (s < e ? s : e) }')
  while (( $(date +%s) < start + at )); do sleep 1; done
  for rate in $rates; do
    pid=${pids[$rate]}
    if ! rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null); then
      echo "rate $rate: process gone at $m min" >> "$out/table.txt"; continue
    fi
    hwm=$(awk '/^VmHWM/ {print $2}' /proc/$pid/status)
    read -r ut st < <(awk '{print $14, $15}' /proc/$pid/stat)
    cpu=$(( ut + st ))
    now=$(date +%s)
    pct=$(awk -v c=$cpu -v l=${last_cpu[$rate]} -v t=$ticks -v n=$now -v p=${last_t[$rate]} \
      'BEGIN { printf "%.1f", (c - l) / t / (n - p) * 100 }')
    printf '%-8s %8s %10.1f %10.1f %12.1f %10s\n' "$rate" "$m" "$(echo "$rss/1024" | bc -l)" \
      "$(echo "$hwm/1024" | bc -l)" "$(echo "$cpu/$ticks" | bc -l)" "$pct" >> "$out/table.txt"
    last_cpu[$rate]=$cpu; last_t[$rate]=$now
  done
  cat "$out/table.txt"
done
for rate in $rates; do wait "${pids[$rate]}" || true; done
for rate in $rates; do
  python3 - "$out/r$rate/run.json" "$rate" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
print(f"rate {sys.argv[2]}/s per thread: status {run['status']}, probes recorded {run['probes_recorded']}, "
      f"dropped {run['probes_dropped']}, stalls {run['stalls_found']} ({run['stall_ms_total']:.1f} ms)")
PY
done | tee -a "$out/table.txt"
