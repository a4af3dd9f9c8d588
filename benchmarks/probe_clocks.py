#!/usr/bin/env python3
"""How much of each write's `hol_delay_ms` is the client host, from `probe --out` directories.

For every run directory: per reply, how long it waited for its thread (`read_us - reply_us`; in
runs after engine 2's deferred reads, at 200 probes a second per thread or more, that gap is up
to a probe period by design: the thread reads replies when it wakes for its next probe) and
how many replies share the previous reply's kernel stamp (the receive-stamp pitfalls: one stamp
per read, coalesced segments carry the latest stamp); per op and size, the median head-of-line
delay timed by the kernel stamps (as the tool does) and by the thread's reads, how late the probe
behind it left its thread, and the same delay counted from max(intended, sent), i.e. without
the probes' own late start. Standard library only.

    python3 benchmarks/probe_clocks.py data/redis-7.0 data/redis-6.2 data/valkey-9.1
"""
import argparse
import bisect
import csv
import json
import statistics


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else 0


def analyze(run):
    probes = [p for p in csv.DictReader(open(f"{run}/probes.csv")) if p["reply_us"]]
    for p in probes:
        p["i"], p["s"], p["r"] = int(p["intended_us"]), int(p["sent_us"]), int(p["reply_us"])
        p["rd"] = int(p["read_us"]) if p.get("read_us") else p["r"]
    probes.sort(key=lambda p: p["i"])
    writes = list(csv.DictReader(open(f"{run}/writes.csv")))
    engine = json.load(open(f"{run}/run.json")).get("probe_engine", {"version": 1})
    print(f"{run}: probe engine {engine.get('version')}, reply clock {engine.get('reply_clock', 'read')}")
    waits = [p["rd"] - p["r"] for p in probes]
    by_thread = {}
    for p in probes:
        by_thread.setdefault(p["thread"], []).append(p)
    shared = pairs = 0
    for rows in by_thread.values():
        rows.sort(key=lambda p: int(p["seq"]))
        for a, b in zip(rows, rows[1:]):
            pairs += 1
            shared += a["r"] == b["r"] and b["s"] - a["s"] > 100
    print(f"  {len(probes)} replies; read - reply us: p50 {pct(waits, .5)} p99 {pct(waits, .99)} "
          f"p99.9 {pct(waits, .999)} max {max(waits)}; sharing the previous reply's stamp: "
          f"{100 * shared / max(pairs, 1):.2f}%")
    windows = [(int(w["start_us"]), int(w["reply_us"])) for w in writes]
    outside = [p for p in probes if not any(p["i"] <= e and p["r"] >= s for s, e in windows)]
    med_kernel = statistics.median(p["r"] - p["i"] for p in outside)
    med_read = statistics.median(p["rd"] - p["i"] for p in outside)
    med_sent = statistics.median(p["r"] - max(p["i"], p["s"]) for p in outside)
    keys = [p["i"] for p in probes]
    groups = {}
    for w in writes:
        s, e = int(w["start_us"]), int(w["reply_us"])
        lo = bisect.bisect_left(keys, s - 5_000_000)
        inside = [p for p in probes[lo:bisect.bisect_right(keys, e)] if p["i"] <= e and p["r"] >= s]
        if not inside:
            continue
        worst = max(inside, key=lambda p: p["r"] - p["i"])
        groups.setdefault((w["op"], int(w["size_bytes"])), []).append((
            (worst["r"] - worst["i"] - med_kernel) / 1e3,
            (max(p["rd"] - p["i"] for p in inside) - med_read) / 1e3,
            (worst["s"] - worst["i"]) / 1e3,
            (max(p["r"] - max(p["i"], p["s"]) for p in inside) - med_sent) / 1e3,
        ))
    print(f"  {'op':9} {'size':>5} {'n':>2} {'hol (stamps)':>12} {'hol (reads)':>11} "
          f"{'worst probe late':>16} {'hol from sent':>13}   (medians, ms)")
    for (op, size), rows in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        med = [statistics.median(r[k] for r in rows) for k in range(4)]
        print(f"  {op:9} {size >> 20:>4}M {len(rows):>2} {med[0]:>12.2f} {med[1]:>11.2f} "
              f"{med[2]:>16.2f} {med[3]:>13.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="probe --out directories")
    for run in parser.parse_args().runs:
        analyze(run)


if __name__ == "__main__":
    main()
