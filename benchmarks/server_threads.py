#!/usr/bin/env python3
"""Where a server's main thread and its lazyfree thread spend each removal's window: CPU run time
and run-queue wait (runnable, waiting for a CPU), from /proc/PID/task/TID/schedstat.

    python3 benchmarks/server_threads.py sample PID OUT.csv       # every 5 ms until PID exits
    python3 benchmarks/server_threads.py windows RUN_DIR OUT.csv  # per removal of a probe --out run

Used for docs/methodology.md's check of why a libc build's background-free figure follows the
probe rate on a 2-CPU host (a busy-looping thread beside a slow run raises it as much).
"""
import bisect
import csv
import json
import os
import sys
import time


def sample(pid, path):
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        if int(tid) == pid:
            threads[tid] = "main"
        elif "lazy" in comm:
            threads[tid] = "lazyfree"
    fds = {t: os.open(f"/proc/{pid}/task/{t}/schedstat", os.O_RDONLY) for t in threads}
    with open(path, "w") as out:
        out.write("unix_us,thread,run_ns,wait_ns\n")
        try:
            while True:
                now = time.time_ns() // 1000
                for tid, fd in fds.items():
                    fields = os.pread(fd, 128, 0).split()
                    out.write(f"{now},{threads[tid]},{fields[0].decode()},{fields[1].decode()}\n")
                time.sleep(0.005)
        except (OSError, IndexError):
            pass  # the server ended


def windows(run, samples):
    t0 = json.load(open(os.path.join(run, "run.json")))["started_unix_us"]
    rows = {"main": [], "lazyfree": []}
    for r in csv.DictReader(open(samples)):
        rows[r["thread"]].append((int(r["unix_us"]), int(r["run_ns"]), int(r["wait_ns"])))

    def at(thread, t):
        xs = rows[thread]
        if not xs:
            return (t, 0, 0)
        return xs[min(bisect.bisect_left(xs, (t,)), len(xs) - 1)]

    held = {}
    for r in csv.DictReader(open(os.path.join(run, "summary.csv"))):
        held[r["seq"]] = r["hol_delay_ms"]
    for w in csv.DictReader(open(os.path.join(run, "writes.csv"))):
        if w["op"] == "build" or w["op"] == "set":
            continue
        a, b = t0 + int(w["sent_us"]), t0 + int(w["reply_us"])
        m0, m1, l0, l1 = at("main", a), at("main", b), at("lazyfree", a), at("lazyfree", b)
        print(f"{w['seq']:>3} {w['op']:<9} held {held.get(w['seq']) or '-':>8} ms  "
              f"window {(b - a) / 1e3:6.1f} ms  main run {(m1[1] - m0[1]) / 1e6:6.1f} "
              f"wait {(m1[2] - m0[2]) / 1e6:6.1f}  lazyfree run {(l1[1] - l0[1]) / 1e6:6.1f} "
              f"wait {(l1[2] - l0[2]) / 1e6:6.1f}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("sample", "windows"):
        sys.exit(__doc__)
    if sys.argv[1] == "sample":
        sample(int(sys.argv[2]), sys.argv[3])
    else:
        windows(sys.argv[2], sys.argv[3])
