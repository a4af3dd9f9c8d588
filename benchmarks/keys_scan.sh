#!/usr/bin/env bash
# The scan of a big keyspace (issue 21, "Fast and light"): one redis-server holding KEYS keys
# (default 1,000,000: small strings and small hashes, and 20 big collections and strings among
# them), then, in one run and REPEAT times each, `redis-cli --bigkeys`, `redis-cli --memkeys`
# and `probe keys` on it. Each tool's wall time, and what it did to other clients: a separate
# `probe` in observe mode (open-loop PING/GET probes, its own connections) runs alongside each
# tool, and its timeline.csv rows that overlap the tool's run give the worst probe latency and
# the worst per-second p99 others saw. An idle window of the same observer gives the floor.
#
# Usage: benchmarks/keys_scan.sh [OUT_DIR]
#   KEYS=1000000 REPEAT=3 SERVER_BIN=/usr/bin/redis-server CLI=redis-cli BIN=target/release/probe
#   PROBE_KEYS_ARGS="..." (extra flags for probe keys, e.g. --stall-threshold 1ms)
# Prints one row per tool per repetition, the medians, and the ratios to --bigkeys.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/keys_scan}
keys=${KEYS:-1000000}
repeat=${REPEAT:-3}
server_bin=${SERVER_BIN:-/usr/bin/redis-server}
cli=${CLI:-redis-cli}
probe_keys_args=${PROBE_KEYS_ARGS:-}
if [[ -z "${BIN:-}" ]]; then
  nice -n 19 cargo build --release --locked -q --bin probe
  bin=target/release/probe
else
  bin=$BIN
fi
mkdir -p "$out"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="redis://127.0.0.1:$port"
data=$(mktemp -d "$out/server.XXXXXX")
"$server_bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$data" \
  --daemonize no --logfile "$data/server.log" &
server_pid=$!
observer_pid=
cleanup() {
  if [[ -n "$observer_pid" ]]; then kill -TERM "$observer_pid" 2>/dev/null || true; fi
  "$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT
for _ in $(seq 100); do
  "$cli" -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done

# The keyspace: big ones built server-side by Lua in chunks of 10k elements, then small strings
# (10..200 bytes) and small hashes (4 fields) up to KEYS keys, all through redis-cli --pipe.
echo "populating $keys keys on $url ($("$server_bin" --version | awk '{print $3}'))" >&2
python3 - "$keys" > "$data/populate.resp" <<'PY'
import random, sys
keys = int(sys.argv[1])
out = sys.stdout.buffer
def cmd(*args):
    parts = [str(a).encode() if not isinstance(a, bytes) else a for a in args]
    out.write(b"*%d\r\n" % len(parts))
    for p in parts:
        out.write(b"$%d\r\n%s\r\n" % (len(p), p))
build = """
local kind = ARGV[3]
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  local m = string.format('%016x', i)
  if kind == 'hash' then redis.call('HSET', KEYS[1], m, string.format('%016d', i))
  elseif kind == 'set' then redis.call('SADD', KEYS[1], m)
  elseif kind == 'zset' then redis.call('ZADD', KEYS[1], i, m)
  elseif kind == 'list' then redis.call('RPUSH', KEYS[1], m)
  end
end
return 1"""
big = []
for kind, sizes in [("hash", [500_000, 200_000, 100_000, 50_000]),
                    ("set", [500_000, 200_000, 100_000, 50_000]),
                    ("zset", [200_000, 100_000, 50_000, 20_000]),
                    ("list", [500_000, 200_000, 100_000, 50_000])]:
    for n in sizes:
        key = "bench:big:%s:%d" % (kind, n)
        big.append(key)
        for first in range(0, n, 10_000):
            cmd("EVAL", build, 1, key, first, min(first + 10_000, n) - 1, kind)
for mib in [64, 32, 8, 1]:
    key = "bench:big:string:%dM" % mib
    big.append(key)
    cmd("EVAL", "redis.call('SET', KEYS[1], string.rep('v', tonumber(ARGV[1]))) return 1",
        1, key, mib << 20)
rng = random.Random(21)
small = keys - len(big)
strings = small * 4 // 5
for i in range(strings):
    cmd("SET", "bench:s:%d" % i, b"x" * rng.randint(10, 200))
for i in range(small - strings):
    cmd("HSET", "bench:h:%d" % i, "name", "n%d" % i, "age", rng.randint(1, 99),
        "city", "c%d" % rng.randint(1, 500), "score", rng.randint(0, 10**6))
PY
"$cli" -p "$port" --pipe < "$data/populate.resp" >&2
rm -f "$data/populate.resp"
dbsize=$("$cli" -p "$port" dbsize)
used=$("$cli" -p "$port" info memory | awk -F: '/^used_memory_human/ {print $2}' | tr -d '\r')
echo "dbsize $dbsize, used_memory $used" >&2

# observe NAME COMMAND...: runs COMMAND (its output to $out/NAME.out) with an observer probing
# the server alongside; appends "NAME wall_s worst_ms worst_p99_ms" to $out/rows.txt.
observe() {
  local name=$1
  shift
  local obs="$out/observer-$name"
  "$bin" --url "$url" --out "$obs" --force --report-every 1h >"$obs.log" 2>&1 &
  observer_pid=$!
  sleep 1.5
  local t0 t1
  t0=$(date +%s%N)
  "$@" >"$out/$name.out" 2>"$out/$name.err"
  t1=$(date +%s%N)
  sleep 0.5
  kill -TERM "$observer_pid"
  wait "$observer_pid" || true
  observer_pid=
  python3 - "$obs/timeline.csv" "$t0" "$t1" "$name" >>"$out/rows.txt" <<'PY'
import csv, sys
path, t0, t1, name = sys.argv[1], int(sys.argv[2]) // 1000, int(sys.argv[3]) // 1000, sys.argv[4]
worst = p99 = probes = 0
for row in csv.DictReader(open(path)):
    start = int(row["unix_us"])
    if start < t1 and start + int(row["length_us"]) > t0 and int(row["probes"]) > 0:
        worst = max(worst, int(row["max_us"]))
        p99 = max(p99, int(row["p99_us"]))
        probes += int(row["probes"])
print(f"{name} {(t1 - t0) / 1e6:.2f} {worst / 1e3:.2f} {p99 / 1e3:.2f} {probes}")
PY
  tail -n1 "$out/rows.txt" >&2
}

: >"$out/rows.txt"
for rep in $(seq "$repeat"); do
  observe "idle-$rep" sleep 10
  observe "bigkeys-$rep" "$cli" -p "$port" --bigkeys
  observe "memkeys-$rep" "$cli" -p "$port" --memkeys
  # shellcheck disable=SC2086
  observe "probe_keys-$rep" "$bin" keys --url "$url" --format json --out "$out/keys-$rep" \
    --force $probe_keys_args
done

python3 - "$out" "$dbsize" <<'PY'
import json, statistics, sys
out, dbsize = sys.argv[1], sys.argv[2]
rows = {}
for line in open(f"{out}/rows.txt"):
    name, wall, worst, p99, probes = line.split()
    tool = name.rsplit("-", 1)[0]
    rows.setdefault(tool, []).append((float(wall), float(worst), float(p99), int(probes)))
print(f"keyspace: {dbsize} keys; observer: probe observe mode alongside each tool")
print(f"{'tool':<12} {'run':>3} {'wall_s':>8} {'worst_ms':>9} {'p99_ms':>7} {'probes':>7}")
for tool, runs in rows.items():
    for i, (wall, worst, p99, probes) in enumerate(runs, 1):
        print(f"{tool:<12} {i:>3} {wall:>8.2f} {worst:>9.2f} {p99:>7.2f} {probes:>7}")
med = {t: tuple(statistics.median(r[k] for r in runs) for k in range(3)) for t, runs in rows.items()}
print()
print(f"{'median':<12} {'wall_s':>8} {'worst_ms':>9} {'p99_ms':>7} {'wall/bigkeys':>13} {'worst/bigkeys':>14}")
base = med.get("bigkeys")
def ratio(a, b):
    return f"{a / b:.2f}" if b else "-"
for tool, (wall, worst, p99) in med.items():
    # The idle window's wall time is the observer's own length, no tool's.
    wall_ratio = ratio(wall, base[0]) if base and tool != "idle" else "-"
    print(f"{tool:<12} {wall:>8.2f} {worst:>9.2f} {p99:>7.2f} "
          f"{wall_ratio:>13} {ratio(worst, base[1]) if base else '-':>14}")
print()
print("probe keys' own account (run.json scan_cost): wall_s, batches, backoffs, smallest COUNT, "
      "worst probe ms during / before, keys scanned")
rep = 1
while True:
    try:
        doc = json.load(open(f"{out}/keys-{rep}/run.json"))
    except FileNotFoundError:
        break
    c = doc["scan_cost"]
    print(f"  run {rep}: {c['wall_s']:.2f} s, {c['batches']} batches, {c['backoffs']} backoffs, "
          f"COUNT down to {c['smallest_count']}, worst {c['worst_probe_ms_during']} / "
          f"{c['worst_probe_ms_before']} ms, {doc['keys_scanned']} keys, status {doc['status']}")
    rep += 1
PY
