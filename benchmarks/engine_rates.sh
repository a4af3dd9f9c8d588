#!/usr/bin/env bash
# Does the probe rate change what the probes measure? (issue 10's benchmark table)
#
#   benchmarks/engine_rates.sh [PROBE_BINARY]          # default target/release/probe
#
# In one sitting, each run on a fresh server:
#  - large writes against the embedded server (no --url), --repeat 5, at --probe-rate 500, 1000
#    and 5000 per thread: a 64M fresh SET, a 512M fresh SET and a 256M overwrite (--overwrite;
#    its op == overwrite rows). Per size and rate: median hol_delay_ms [min-max] and whether every
#    repeat is <= 2x its median; per size: whether the medians of the rates agree (largest <=
#    1.5 x smallest + 2 ms). For the overwrite also hol_delay_ms against the server's own SLOWLOG
#    time of the same write (server_exec_us; goal: within max(2 ms, 10%)).
#  - a bursty server: observe mode (--duration) at 1000 and 5000 per thread while Lua busy loops
#    of 3 ms with 1 ms breaks keep the server busy; worst probe latency against the longest burst
#    the server measured (goal: <= longest burst + 2 ms), and the longest any probe left late:
#    a probe that left 2 ms late or more was held on this host (a host-wide freeze hits the
#    server, the tool and any other prober alike), which the row then says. This server is
#    started here rather than by the tool, because the burst generator must know its port
#    before the run starts.
#
# The burst generator is a few lines of Python on a raw socket (EVAL of the busy loop, read the
# integer reply, sleep the break), the same script as tests/common/bursts.rs: no build step, no
# redis-py (not installed here), and its own timing does not matter because the server measures
# each burst's length itself. A cargo example would need a build of the crate for one loop.
#
# Overrides for a quick smoke test (the defaults are the issue's):
#   SIZES_SMALL=64M SIZES_LARGE=512M SIZES_OVERWRITE=256M REPEAT=5 RATES="500 1000 5000"
#   BURST_RATES="1000 5000" BURST_MS=3 BREAK_MS=1 BURST_SECS=5 SERVER_BIN=redis-server KEEP=1
# e.g. SIZES_SMALL=1M SIZES_LARGE=4M SIZES_OVERWRITE=2M REPEAT=2 BURST_SECS=1 benchmarks/engine_rates.sh
# KEEP=1 keeps the run directories and prints where they are. Build with `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/probe}
small=${SIZES_SMALL:-64M}
large=${SIZES_LARGE:-512M}
overwrite=${SIZES_OVERWRITE:-256M}
repeat=${REPEAT:-5}
rates=${RATES:-500 1000 5000}
burst_rates=${BURST_RATES:-1000 5000}
burst_ms=${BURST_MS:-3}
break_ms=${BREAK_MS:-1}
burst_secs=${BURST_SECS:-5}
server_bin=${SERVER_BIN:-redis-server}

out=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then echo "runs kept in $out" >&2; else rm -rf "$out"; fi
}
trap cleanup EXIT

# One probe run; on failure the end of its output goes to stderr and the table says "no result".
run() {
  local name=$1
  shift
  if ! "$bin" "$@" --out "$out/$name" >"$out/$name.txt" 2>&1; then
    echo "run $name failed: $bin $*" >&2
    tail -n 5 "$out/$name.txt" >&2
  fi
}

echo "probe: $("$bin" --version); server: $("$server_bin" --version | cut -d' ' -f1-3)" >&2
for rate in $rates; do
  for kind in small large overwrite; do
    size=${!kind}
    flags=()
    [ "$kind" = overwrite ] && flags=(--overwrite)
    echo "writes: $kind $size at $rate/s" >&2
    run "$kind-r$rate" --writer-sizes "$size" --repeat "$repeat" --probe-rate "$rate" "${flags[@]}"
  done
done

# The bursty server and its load.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$out/server"
"$server_bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  --dir "$out/server" --logfile "$out/server/redis.log" &
server_pid=$!
cat >"$out/bursts.py" <<'PY'
"""Lua busy loops of BURST_US on 127.0.0.1:PORT with BREAK_S between them, until SIGTERM; writes
each burst's length as the server measured it (µs), one a line, to OUT; touches OUT.ready after
the first burst."""
import signal, socket, sys, time
port, burst_us, break_s, out = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
SCRIPT = ("local function now_us() local t = redis.call('TIME') "
          "return tonumber(t[1]) * 1000000 + tonumber(t[2]) end "
          "local start = now_us() local want = tonumber(ARGV[1]) local elapsed = 0 "
          "repeat elapsed = now_us() - start until elapsed >= want return elapsed")
args = [b"EVAL", SCRIPT.encode(), b"0", str(burst_us).encode()]
request = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
for attempt in range(100):  # the server may still be starting
    try:
        conn = socket.create_connection(("127.0.0.1", port), timeout=10)
        break
    except OSError:
        time.sleep(0.05)
else:
    sys.exit(f"bursts: cannot connect to 127.0.0.1:{port}")
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
reader = conn.makefile("rb")
bursts = []
try:
    while True:
        conn.sendall(request)
        line = reader.readline()
        if not line.startswith(b":"):
            sys.exit(f"bursts: unexpected reply {line!r}")
        bursts.append(int(line[1:]))
        if len(bursts) == 1:
            open(out + ".ready", "w").close()
        time.sleep(break_s)
finally:
    with open(out, "w") as f:
        f.writelines(f"{b}\n" for b in bursts)
PY
for rate in $burst_rates; do
  echo "bursty server at $rate/s" >&2
  python3 "$out/bursts.py" "$port" $((burst_ms * 1000)) "$(python3 -c "print($break_ms / 1000)")" \
    "$out/bursts-r$rate.us" &
  gen=$!
  for _ in $(seq 100); do [ -e "$out/bursts-r$rate.us.ready" ] && break; sleep 0.05; done
  run "bursts-r$rate" --url "redis://127.0.0.1:$port" --duration "${burst_secs}s" --probe-rate "$rate"
  kill "$gen" && wait "$gen" || true
done

python3 - "$out" "$repeat" "$burst_ms" "$break_ms" "$burst_secs" "$small" "$large" "$overwrite" \
  $rates -- $burst_rates <<'PY'
import csv, os, statistics, sys
out, repeat, burst_ms, break_ms, burst_secs = sys.argv[1:6]
sizes = dict(small=sys.argv[6], large=sys.argv[7], overwrite=sys.argv[8])
split = sys.argv.index("--")
rates, burst_rates = sys.argv[9:split], sys.argv[split + 1:]
yes = lambda ok: "yes" if ok else "NO"

def rows(name, file):
    path = os.path.join(out, name, file)
    return list(csv.DictReader(open(path))) if os.path.exists(path) else None

print(f"\nlarge writes: --repeat {repeat}, embedded server; hol_delay_ms median [min-max]")
print(f"{'write':<14} {'rate':>5} {'n':>2} {'hol_delay_ms':>24} {'all<=2x med':>11}  hol vs slowlog (<= max(2ms,10%))")
for kind, size in sizes.items():
    op = "overwrite" if kind == "overwrite" else "set"
    medians = []
    for rate in rates:
        summary = rows(f"{kind}-r{rate}", "summary.csv")
        label = f"{size} {op}"
        if summary is None:
            print(f"{label:<14} {rate:>5}  (no result)")
            continue
        group = [r for r in summary if r["op"] == op and r["hol_delay_ms"]]
        hol = [float(r["hol_delay_ms"]) for r in group]
        if not hol:
            print(f"{label:<14} {rate:>5}  (no {op} with a hol_delay_ms)")
            continue
        med = statistics.median(hol)
        medians.append(med)
        spread = f"{med:.2f} [{min(hol):.2f}-{max(hol):.2f}]"
        line = f"{label:<14} {rate:>5} {len(hol):>2} {spread:>24} {yes(all(h <= 2 * med for h in hol)):>11}"
        if op == "overwrite":
            pairs = [(float(r["hol_delay_ms"]), int(r["server_exec_us"]) / 1000)
                     for r in group if r.get("server_exec_us")]
            within = sum(abs(h - e) <= max(2.0, 0.1 * e) for h, e in pairs)
            worst = max((h - e for h, e in pairs), key=abs, default=float("nan"))
            line += f"  {within}/{len(pairs)} within; worst hol-slowlog {worst:+.2f} ms"
        print(line)
    if len(medians) > 1:
        lo, hi = min(medians), max(medians)
        print(f"{'':<14} medians agree (max <= 1.5 x min + 2 ms): {yes(hi <= 1.5 * lo + 2)}"
              f" ({hi:.2f} vs {lo:.2f})")

print(f"\nbursty server: {burst_ms} ms Lua bursts, {break_ms} ms breaks, {burst_secs} s observe runs")
print(f"{'rate':>5} {'probes':>7} {'failed':>6} {'worst ms':>9} {'p99 ms':>7} {'bursts':>6} {'longest burst ms':>16}  worst <= burst + 2 ms")
for rate in burst_rates:
    probes = rows(f"bursts-r{rate}", "probes.csv")
    burst_file = os.path.join(out, f"bursts-r{rate}.us")
    bursts = [int(l) for l in open(burst_file)] if os.path.exists(burst_file) else []
    if probes is None or not bursts:
        print(f"{rate:>5}  (no result)")
        continue
    lat = sorted(int(p["latency_us"]) for p in probes if p["ok"] == "true")
    failed = len(probes) - len(lat)
    worst, p99, longest = lat[-1] / 1000, lat[len(lat) * 99 // 100] / 1000, max(bursts) / 1000
    # A probe that left late was held on this host (its thread did not run: a host-wide freeze
    # or the tool starved), not by the server: its worst lag says how much of a miss is the host's.
    lag = max((int(p["sent_us"]) - int(p["intended_us"]) for p in probes
               if p["sent_us"] and p["intended_us"]), default=0) / 1000
    note = f"; a probe left {lag:.1f} ms late: this host held the client too (its thread did not run)" if lag >= 2 else ""
    print(f"{rate:>5} {len(probes):>7} {failed:>6} {worst:>9.2f} {p99:>7.2f} {len(bursts):>6} {longest:>16.2f}"
          f"  {yes(worst <= longest + 2)} ({worst - longest:+.2f} ms{note})")
PY
