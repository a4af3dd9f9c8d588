#!/usr/bin/env bash
# Load on a 3-master, 1-replica-each Redis Cluster on loopback: `probe load` against
# `redis-benchmark --cluster -t get`, with the same clients, value size and key space, in one
# run. Prints rps and p50/p99 of each and their ratio (probe / redis-benchmark).
#
# Usage: benchmarks/load_cluster.sh [CLIENTS] [KEYS] [VALUE_BYTES] [SECONDS]
# Env: PROBE (default target/release/probe, else target/debug/probe), SERVER_BIN
# (default redis-server), REDIS_CLI, REDIS_BENCHMARK.
#
# Key spaces: probe populate fills holprobe:load:0..KEYS-1; redis-benchmark -r KEYS GETs
# key:{tag}:__rand_int__ (its cluster mode puts a hash tag of each client's node in the key),
# so the keys it reads are filled with a SET pass of its own first (-t set, same -r and -d).
set -euo pipefail
CLIENTS=${1:-50}
KEYS=${2:-100000}
VALUE=${3:-1024}
SECONDS_=${4:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROBE=${PROBE:-$ROOT/target/release/probe}
[ -x "$PROBE" ] || PROBE=$ROOT/target/debug/probe
SERVER_BIN=${SERVER_BIN:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-redis-benchmark}
DIR=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

# A free port whose cluster bus port (port + 10000) is free too and below 65536.
free_port() {
  python3 - <<'PY'
import random, socket
def free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
while True:
    port = random.randint(20000, 50000)
    if free(port) and free(port + 10000):
        print(port)
        break
PY
}
PORTS=()
for i in 0 1 2 3 4 5; do
  port=$(free_port)
  mkdir -p "$DIR/$port"
  "$SERVER_BIN" --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file "$DIR/$port/nodes.conf" --dir "$DIR/$port" --save "" \
    --appendonly no --daemonize no --logfile "$DIR/$port/log" --repl-ping-replica-period 1 &
  PIDS+=($!)
  PORTS+=("$port")
done
for port in "${PORTS[@]}"; do
  until "$REDIS_CLI" -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
done
ADDRS=()
for port in "${PORTS[@]}"; do ADDRS+=("127.0.0.1:$port"); done
"$REDIS_CLI" --cluster create "${ADDRS[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
until "$REDIS_CLI" -p "${PORTS[0]}" cluster info | grep -q 'cluster_state:ok'; do sleep 0.2; done
# Replicas attach: until every node of CLUSTER SHARDS is online (Redis 7.0 shows a replica
# "loading" until its master's next ping, hence the 1 s ping period above).
for _ in $(seq 1 100); do
  shards=$("$REDIS_CLI" -p "${PORTS[0]}" cluster shards)
  replicas=$("$REDIS_CLI" -p "${PORTS[0]}" cluster nodes | grep -c slave || true)
  if [ "$replicas" -ge 3 ] && ! grep -q -x 'loading\|fail' <<<"$shards"; then
    break
  fi
  sleep 0.3
done
URL=redis://127.0.0.1:${PORTS[0]}
echo "cluster: 3 masters + 3 replicas on ${PORTS[*]} ($("$SERVER_BIN" --version | cut -d' ' -f3))"
echo "clients $CLIENTS, keys $KEYS, value $VALUE bytes, ${SECONDS_}s each, GET only, pipeline 1"

"$PROBE" populate --url "$URL" --keys "$KEYS" --value-size "$VALUE" >/dev/null
"$PROBE" load --url "$URL" --clients "$CLIENTS" --duration "${SECONDS_}s" --out "$DIR/probe" >"$DIR/probe.txt"
read -r P_RPS P_P50 P_P99 < <(python3 - "$DIR/probe/run.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["blocks"][-1]
print(b["avg_rps"], b["p50_us"] / 1000, b["p99_us"] / 1000)
PY
)

REQS=$((KEYS * 2))
"$REDIS_BENCHMARK" --cluster -h 127.0.0.1 -p "${PORTS[0]}" -c "$CLIENTS" -n "$REQS" -r "$KEYS" \
  -d "$VALUE" -t set -q >/dev/null
# -n sized to last about as long as the probe run at its rate.
N=$(python3 -c "print(max(int(float('$P_RPS') * $SECONDS_), $CLIENTS * 100))")
"$REDIS_BENCHMARK" --cluster -h 127.0.0.1 -p "${PORTS[0]}" -c "$CLIENTS" -n "$N" -r "$KEYS" \
  -d "$VALUE" -t get --csv >"$DIR/rb.csv" 2>/dev/null
read -r R_RPS R_P50 R_P99 < <(python3 - "$DIR/rb.csv" <<'PY'
import csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = list(csv.DictReader(lines))
row = rows[-1]
print(row["rps"], row["p50_latency_ms"], row["p99_latency_ms"])
PY
)
python3 - "$P_RPS" "$P_P50" "$P_P99" "$R_RPS" "$R_P50" "$R_P99" <<'PY'
import sys
p = [float(x) for x in sys.argv[1:4]]
r = [float(x) for x in sys.argv[4:7]]
print(f"{'':18}{'rps':>12}{'p50 ms':>10}{'p99 ms':>10}")
print(f"{'probe load':18}{p[0]:12.0f}{p[1]:10.3f}{p[2]:10.3f}")
print(f"{'redis-benchmark':18}{r[0]:12.0f}{r[1]:10.3f}{r[2]:10.3f}")
print(f"{'ratio probe/rb':18}{p[0]/r[0]:12.2f}{p[1]/r[1]:10.2f}{p[2]/r[2]:10.2f}")
PY
echo "probe's per-node blocks:"
grep -E '^(Server:|Requests per second:)' "$DIR/probe.txt" | paste - - | sed 's/^/  /'
"$PROBE" clean --url "$URL" >/dev/null
