#!/usr/bin/env bash
# How much CPU does `probe` take to probe, against the least a prober must do? (issue 22, item 6)
#
#   benchmarks/probe_cpu.sh [PROBE_BINARY]          # default target/release/probe
#
# In one sitting, against one redis-server started here (persistence off, a free port): at
# THREADS x each of RATES probes a second, REPEAT times, alternating, an observe run of `probe`
# (`--url … --duration SECS`, every export written) and a run of benchmarks/minprobe.c (built here
# with gcc -O2) over the same SECS: the same open-loop pipelined PINGs on one connection per
# thread, sent at the same intended times, read with kernel receive stamps, latencies kept in a
# preallocated array, nothing else. Each process's CPU time is user + sys of the whole process
# from wait4's rusage (µs resolution: every thread, start-up and exports included for `probe`).
# Printed per rate: the median CPU seconds [min-max] of each, as a share of one core over SECS,
# the ratio of the medians probe / minprobe and the range of the per-pair ratios; and the same
# against minprobe with DEFER 1 (a third run per repeat), which like the probe engine at 200/s per
# thread or more wakes once per probe and reads the replies that came then, where plain minprobe
# wakes for each reply as well: the like-with-like ratio, the one the goal (<= 1.1) is judged on;
# and each one's send lag (how late a probe left after its intended time: `sent_us -
# intended_us` of probes.csv for probe, minprobe's own count), p50 / p99 / max over all repeats.
#
# Also printed: probe's CPU at 10/s per thread over the same SECS, what it spends whatever the
# rate (start-up, the session's timers, the exports): part of every ratio above, and the reason
# the ratio is higher at low rates.
#
# Noise: CPU time is what each process itself used, so other work on the host changes it far less
# than wall time, but not to nothing: a thread woken late finds more replies waiting per wake-up
# (less CPU), a spin loop that is preempted spins longer (more). The per-pair ratio range shows
# how much; the load average at the start and the end is printed beside it. Send lag is the
# figure a loaded host does change: compare both columns of one sitting, not sittings.
#
# REALTIME=1 runs both with SCHED_FIFO probe threads (`probe --realtime`, `chrt -f 10 minprobe`;
# needs root or CAP_SYS_NICE): the send lag is then the engine's own timing rather than the
# host's load. It changes the CPU figures too (a thread woken on time for every reply and every
# send does more wake-ups than one woken late, which finds several things to do at once), so
# compare like with like.
#
# Overrides: RATES="1000 5000" THREADS=2 REPEAT=3 SECS=5 MIN_SPIN_US=20 (minprobe wakes that long
# before each send and spins the rest, as the probe engine does) SERVER_BIN=redis-server KEEP=1
# (keep the run directories) REALTIME=1. Build with `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/probe}
rates=${RATES:-1000 5000}
threads=${THREADS:-2}
repeat=${REPEAT:-3}
secs=${SECS:-5}
spin_us=${MIN_SPIN_US:-20}
server_bin=${SERVER_BIN:-redis-server}
realtime=${REALTIME:-0}

out=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; fi
  if [ "${KEEP:-0}" = 1 ]; then echo "runs kept in $out" >&2; else rm -rf "$out"; fi
}
trap cleanup EXIT

gcc -O2 -Wall -pthread -o "$out/minprobe" benchmarks/minprobe.c
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$out/server"
"$server_bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  --dir "$out/server" --logfile "$out/server/redis.log" &
server_pid=$!

python3 - "$bin" "$out" "$port" "$threads" "$secs" "$repeat" "$spin_us" "$realtime" $rates <<'PY'
import csv, os, statistics, socket, subprocess, sys, time
bin, out, port, threads, secs, repeat, spin_us, realtime = sys.argv[1:9]
rates = sys.argv[9:]
repeat = int(repeat)
realtime = realtime == "1"

for _ in range(200):  # the server may still be starting
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
        break
    except OSError:
        time.sleep(0.05)
else:
    sys.exit(f"redis-server did not listen on {port}")

def cpu_of(argv, log):
    """Runs argv to its end; its user + sys CPU seconds (every thread) and its exit code."""
    with open(log, "w") as f:
        child = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, child.returncode

def pct(values, p):
    return values[min(len(values) - 1, int(p * (len(values) - 1)))] if values else float("nan")

def spread(values):
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"

print(f"probe: {subprocess.run([bin, '--version'], capture_output=True, text=True).stdout.strip()}; "
      f"{threads} threads x rate, {secs} s, {repeat} repeats, minprobe spin {spin_us} us"
      f"{', real-time threads' if realtime else ''}", file=sys.stderr)
load_start = os.getloadavg()[0]
results = {}
for rate in rates:
    probe_cpu, min_cpu, defer_cpu, probe_lag, min_lag, notes = [], [], [], [], [], []
    for r in range(repeat):
        name = f"probe-r{rate}-{r}"
        cpu, rc = cpu_of([bin, "--url", f"redis://127.0.0.1:{port}", "--duration", f"{secs}s",
                          "--probe-threads", threads, "--probe-rate", rate,
                          "--out", os.path.join(out, name)] + (["--realtime"] if realtime else []),
                         os.path.join(out, name + ".txt"))
        probes = os.path.join(out, name, "probes.csv")
        if rc != 0 or not os.path.exists(probes):
            notes.append(f"probe run {r} exit {rc}: " + open(os.path.join(out, name + ".txt")).read()[-300:])
        else:
            probe_cpu.append(cpu)
            rows = list(csv.DictReader(open(probes)))
            probe_lag += [int(p["sent_us"]) - int(p["intended_us"]) for p in rows]
        for defer, cpus in (("0", min_cpu), ("1", defer_cpu)):
            name = f"min-r{rate}-{r}-d{defer}"
            cpu, rc = cpu_of((["chrt", "-f", "10"] if realtime else []) +
                             [os.path.join(out, "minprobe"), "127.0.0.1", port, threads, rate, secs,
                              spin_us, defer], os.path.join(out, name + ".txt"))
            line = open(os.path.join(out, name + ".txt")).read().strip()
            if rc != 0:
                notes.append(f"minprobe (defer {defer}) run {r} exit {rc}: {line[-300:]}")
            else:
                cpus.append(cpu)
                if defer == "0":
                    fields = dict(kv.split("=") for kv in line.split())
                    min_lag.append(fields)
        last = lambda v: v[-1] if v else float('nan')
        print(f"  {rate}/s run {r}: probe {last(probe_cpu):.3f} s, minprobe {last(min_cpu):.3f} s, "
              f"minprobe defer {last(defer_cpu):.3f} s", file=sys.stderr)
    results[rate] = (probe_cpu, min_cpu, defer_cpu, sorted(probe_lag), min_lag, notes)
fixed = []
for r in range(repeat):
    name = f"probe-r10-{r}"
    cpu, rc = cpu_of([bin, "--url", f"redis://127.0.0.1:{port}", "--duration", f"{secs}s",
                      "--probe-threads", threads, "--probe-rate", "10",
                      "--out", os.path.join(out, name)] + (["--realtime"] if realtime else []),
                     os.path.join(out, name + ".txt"))
    if rc == 0:
        fixed.append(cpu)
load_end = os.getloadavg()[0]

print(f"\nCPU time (user+sys, s) of one {secs} s run at {threads} threads x rate; median [min-max] of "
      f"{repeat}{'; real-time threads' if realtime else ''}; load average {load_start:.1f} at the start, "
      f"{load_end:.1f} at the end")
print(f"{'rate':>11} {'probe s':>21} {'core':>5} {'minprobe s':>21} {'core':>5} {'ratio':>6} {'pair ratios':>12}")
for rate, (pc, mc, dc, _, _, notes) in results.items():
    label = f"{threads}x{rate}/s"
    if not pc or not mc:
        print(f"{label:>11}  (no result)")
    else:
        pairs = [p / m for p, m in zip(pc, mc)]
        ratio = statistics.median(pc) / statistics.median(mc)
        print(f"{label:>11} {spread(pc):>21} {100 * statistics.median(pc) / float(secs):>4.0f}% "
              f"{spread(mc):>21} {100 * statistics.median(mc) / float(secs):>4.0f}% {ratio:>6.2f} "
              f"{min(pairs):>5.2f}-{max(pairs):<5.2f}  (against plain minprobe, which wakes for each reply too: no goal)")
    if pc and dc:
        pairs = [p / m for p, m in zip(pc, dc)]
        ratio = statistics.median(pc) / statistics.median(dc)
        print(f"{'':>11} {'':>21} {'':>5} {spread(dc):>21} {100 * statistics.median(dc) / float(secs):>4.0f}% {ratio:>6.2f} "
              f"{min(pairs):>5.2f}-{max(pairs):<5.2f}  (against minprobe DEFER 1, like with like: one wake-up a probe, as probe at 200/s a thread or more; "
              f"{'goal <= 1.1: met' if ratio <= 1.1 else 'goal <= 1.1: NOT met'})")
    for note in notes:
        print(f"{'':>11}  {note}")
if fixed:
    print(f"{threads + 'x10/s':>11} {spread(fixed):>21} {100 * statistics.median(fixed) / float(secs):>4.0f}%"
          f"  (probe at 10/s per thread: what it spends whatever the rate)")

print(f"\nsend lag (sent - intended, us): probe over every probe of the {repeat} runs; minprobe p50 / p99 / max of each run")
print(f"{'rate':>11} {'probe p50':>9} {'p99':>7} {'max':>9}   minprobe p50 / p99 / max per run")
for rate, (_, _, _, pl, ml, _) in results.items():
    label = f"{threads}x{rate}/s"
    probe = (f"{pct(pl, 0.5):>9} {pct(pl, 0.99):>7} {pl[-1]:>9}" if pl else f"{'-':>9} {'-':>7} {'-':>9}")
    mins = ", ".join(f"{m['lag_p50_us']} / {m['lag_p99_us']} / {m['lag_max_us']}" for m in ml)
    print(f"{label:>11} {probe}   {mins}")
PY
