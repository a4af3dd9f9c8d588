#!/usr/bin/env bash
# The compare's false-alarm rate and power on this machine: records N+1 A/A runs of the same
# server and plan (default: 11 runs of the data/ plan against redis-server from PATH, i.e. 10
# A/A compares), then prints, at the compare's default rules, the rows each A/A compare flags
# (goal: none) and how often synthetic slowdowns of x1.1 ... x3 are caught
# (examples/compare_power.rs).
#
#   scripts/false_alarms.sh /tmp/aa                 # 11 runs, 1M..512M x 5 (about 30 min)
#   RUNS=11 SIZES=1M,4M,16M,64M scripts/false_alarms.sh /tmp/aa-small
#   scripts/false_alarms.sh --analyze /tmp/aa       # only the analysis of runs already there
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

analyze_only=0
if [[ "${1:-}" == "--analyze" ]]; then
  analyze_only=1
  shift
fi
OUT="${1:?usage: scripts/false_alarms.sh [--analyze] OUT_DIR}"
RUNS="${RUNS:-11}"
SIZES="${SIZES:-1M,2M,4M,8M,16M,32M,64M,128M,256M,512M}"
REPEAT="${REPEAT:-5}"
SERVER_BIN="${SERVER_BIN:-redis-server}"
release_probe
cargo build --release --locked --example compare_power

if [[ $analyze_only == 0 ]]; then
  mkdir -p "$OUT"
  for i in $(seq -w 1 "$RUNS"); do
    echo "== A/A run $i of $RUNS" >&2
    "$PROBE" --server-bin "$SERVER_BIN" --writer-sizes "$SIZES" --repeat "$REPEAT" \
      --out "$OUT/run-$i" --force > "$OUT/run-$i.txt"
  done
fi
target/release/examples/compare_power "$OUT"/run-*/
