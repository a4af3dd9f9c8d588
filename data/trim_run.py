#!/usr/bin/env python3
"""Trims a shipped value-type run (data/collections/) to what fits in the repository: removes its
probe-level files (probes.csv, stalls.csv, probes.hlog: about 6 MB a run) and keeps in run.json's
`stalls` and `client_hiccups` lists only those of MIN_MS (default 10) ms or more. A 4M-element
build on a busy host gives tens of thousands of 1-10 ms stalls, 7 MB of run.json, that stalls.csv
held too; the counts (`stalls_found`, `client_hiccups_found`, `stall_ms_total`) and every other
field stay as recorded. summary.csv, writes.csv and timeline.csv are not touched. The run that
`--force` moved aside (`replaced/`) is removed: the repository's history holds it, and a copy
beside the new run would be read as part of it by everything that walks the directory.

    data/trim_run.py RUN_DIR... [--min-ms 10]"""

import argparse
import json
import shutil
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--min-ms", type=float, default=10.0)
    args = parser.parse_args()
    for run in map(Path, args.runs):
        meta_path = run / "run.json"
        if not meta_path.is_file():
            print(f"trim_run.py: error: {run}: no run.json there", file=sys.stderr)
            return 2
        for name in ("probes.csv", "stalls.csv", "probes.hlog"):
            (run / name).unlink(missing_ok=True)
        shutil.rmtree(run / "replaced", ignore_errors=True)
        meta = json.loads(meta_path.read_text())
        for key in ("stalls", "client_hiccups"):
            if isinstance(meta.get(key), list):
                meta[key] = [s for s in meta[key] if (s.get("duration_ms") or 0) >= args.min_ms]
        tmp = meta_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta, indent=2, ensure_ascii=False))
        tmp.replace(meta_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
