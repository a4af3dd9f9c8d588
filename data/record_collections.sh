#!/usr/bin/env bash
# Records the shipped collection runs in data/collections/: for each server version and each
# kind of collection, one run (an --out directory) that builds the value and frees or reads it
# every way the tool knows, with the release build. Run it on an otherwise idle machine: the
# freezes of big collections (tens to hundreds of ms) stand well above the host's noise, the
# small ones do not.
#
#   data/record_collections.sh                    # all four servers, hash set zset list stream
#   data/record_collections.sh redis-7.0          # one server
#   ELEMENTS=4M SUBDIR=4M data/record_collections.sh redis-7.0   # the 4M runs, in <type>/4M/
#   ELEMENTS=50k,300k,2M ROOT=data/heldout data/record_collections.sh   # sizes no model is fitted on
#
# Plan: 100k and 1M elements of 16 bytes (ELEMENTS=..., TYPES=..., REPEAT=... to change), ops
# build,read,delete,build,unlink,build,expire,build,overwrite,delete, 3 repeats, gap 200ms,
# every other option at its default. Each run goes to data/collections/<server>/<type>/ (ROOT=...
# for another directory than data/collections), or to its SUBDIR there when one is given. Each run is trimmed by data/trim_run.py (its probe-level
# files removed, run.json's lists of stalls and client hiccups cut to those of 10 ms or more;
# KEEP_PROBES=1 keeps the run whole).
# PROBE=path/to/probe to use a given binary.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ELEMENTS="${ELEMENTS:-100k,1M}"
TYPES="${TYPES:-hash set zset list stream}"
REPEAT="${REPEAT:-3}"
SUBDIR="${SUBDIR:-}"
ROOT="${ROOT:-data/collections}"
KEEP_PROBES="${KEEP_PROBES:-0}"
OPS="build,read,delete,build,unlink,build,expire,build,overwrite,delete"
release_probe
server_names "$@"

for name in "${names[@]}"; do
  bin="$(bash scripts/servers.sh "$name")"
  for type in $TYPES; do
    echo "== $name $type: $bin" >&2
    out="$ROOT/$name/$type${SUBDIR:+/$SUBDIR}"
    "$PROBE" --server-bin "$bin" --type "$type" --elements "$ELEMENTS" --ops "$OPS" \
      --repeat "$REPEAT" --gap 200ms --out "$out" --force
    if [[ "$KEEP_PROBES" != 1 ]]; then
      python3 data/trim_run.py "$out"
    fi
  done
done
