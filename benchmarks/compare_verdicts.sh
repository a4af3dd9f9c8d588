#!/usr/bin/env bash
# Does `probe compare` give verdicts a CI can gate on? (issue 22, item 1)
#
#   benchmarks/compare_verdicts.sh OUT_DIR                  # record, then analyze
#   benchmarks/compare_verdicts.sh --record-only OUT_DIR    # only record the runs
#   benchmarks/compare_verdicts.sh --analyze OUT_DIR        # only analyze runs already there
#
# Records, one run after another on fresh embedded servers (release build):
#  - PAIRS A/A pairs (default 20): the same binary and plan twice, `--writer-sizes 4M,32M
#    --repeat 5 --gap 200ms` into aa-NN-a and aa-NN-b;
#  - an AOF-always candidate (`--server-arg "appendonly yes" --server-arg "appendfsync always"`)
#    and a baseline recorded just before it (aof-base, aof-always);
# and prints the load average before each run (the host may be shared: every figure includes it).
#
# Then, with the probe binary given (default target/release/probe, built from this tree):
#  1. per A/A pair, `probe compare a b` and its exit status (goal: 0 in at least 19 of 20), and
#     the cells that were not `no regression`;
#  2. `probe compare aof-base aof-always` (goal: exit 1);
#  3. power, by injection into real runs: for each A/A pair, the candidate's set_ms and
#     hol_delay_ms multiplied by a factor (x1.1 ... x3: a proportional slowdown that keeps the
#     runs' own noise, benchmarks/compare_power.py), compared again; per (size, op, metric) the
#     share of pairs in which that cell came out `regression` (goal: find the smallest factor
#     caught in at least 80%).
#
# Overrides: PAIRS=20 SIZES=4M,32M REPEAT=5 GAP=200ms SERVER_BIN=redis-server PROBE=path
#   FACTORS="1.1 1.2 1.3 1.5 2 3" RULES="--alpha 0.01" (extra flags to every compare)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

mode=both
case "${1:-}" in
  --record-only) mode=record; shift ;;
  --analyze) mode=analyze; shift ;;
esac
OUT="${1:?usage: benchmarks/compare_verdicts.sh [--record-only|--analyze] OUT_DIR}"
PAIRS="${PAIRS:-20}"
SIZES="${SIZES:-4M,32M}"
REPEAT="${REPEAT:-5}"
GAP="${GAP:-200ms}"
SERVER_BIN="${SERVER_BIN:-redis-server}"
FACTORS="${FACTORS:-1.1 1.2 1.3 1.5 2 3}"
RULES="${RULES:-}"
release_probe

record() { # NAME [extra probe flags...]
  local name=$1
  shift
  echo "== $name (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$PROBE" --server-bin "$SERVER_BIN" --writer-sizes "$SIZES" --repeat "$REPEAT" --gap "$GAP" \
    "$@" --out "$OUT/$name" --force > "$OUT/$name.txt" 2>&1
}

if [[ $mode != analyze ]]; then
  mkdir -p "$OUT"
  for i in $(seq -w 1 "$PAIRS"); do
    record "aa-$i-a"
    record "aa-$i-b"
  done
  record aof-base
  record aof-always --server-arg "appendonly yes" --server-arg "appendfsync always"
fi
if [[ $mode == record ]]; then
  exit 0
fi

echo "== A/A compares ($PROBE compare aa-NN-a aa-NN-b $RULES)"
declare -A codes=()
for a in "$OUT"/aa-*-a; do
  b="${a%-a}-b"
  status=0
  # shellcheck disable=SC2086
  "$PROBE" compare "$a" "$b" $RULES > "$b.compare.txt" || status=$?
  codes[$status]=$(( ${codes[$status]:-0} + 1 ))
  flagged=$(grep -E 'REGRESSION \(|INCONCLUSIVE \(' "$b.compare.txt" | sed 's/^ */    /' || true)
  echo "$(basename "$a") vs $(basename "$b"): exit $status"
  if [[ -n "$flagged" ]]; then
    echo "$flagged"
  fi
done
for code in "${!codes[@]}"; do
  echo "A/A exit $code: ${codes[$code]} of ${PAIRS} pairs"
done

echo "== AOF always ($PROBE compare aof-base aof-always $RULES)"
status=0
# shellcheck disable=SC2086
"$PROBE" compare "$OUT/aof-base" "$OUT/aof-always" $RULES || status=$?
echo "AOF always: exit $status (goal 1)"

echo "== power: real A/A pairs, the candidate's values multiplied by a factor"
# shellcheck disable=SC2086
python3 benchmarks/compare_power.py --probe "$PROBE" --factors "$FACTORS" --rules "$RULES" "$OUT"
