#!/usr/bin/env bash
# Records the shipped eviction runs: for each server version, each kind of collection and a
# string, one run (an --out directory) that makes the value and has the server evict it under a
# lowered maxmemory (`--ops build,evict`, on a server the tool starts), with the release build.
# Run it on an otherwise idle machine, as data/record_collections.sh.
#
#   data/record_evictions.sh                              # all four servers
#   data/record_evictions.sh redis-7.0                    # one server
#   ELEMENTS=50k,300k,2M ROOT=data/heldout data/record_evictions.sh   # sizes no model is fitted on
#
# Plan: collections of 100k, 1M and 4M elements of 16 bytes (ELEMENTS=..., TYPES=...,
# REPEAT=... to change), strings of 64M, 128M, 256M and 512M (SIZES=..., none when SIZES is
# empty), 3 repeats, gap 200ms, every other option at its default (the server's own
# lazyfree-lazy-eviction: no on Redis, yes on Valkey 9.1). Each run goes to
# <ROOT>/<server>/<type>/evict/ (ROOT=data/collections by default) and is trimmed by
# data/trim_run.py (KEEP_PROBES=1 keeps the run whole). PROBE=path/to/probe to use a given binary.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ELEMENTS="${ELEMENTS:-100k,1M,4M}"
SIZES="${SIZES-64M,128M,256M,512M}"
TYPES="${TYPES:-hash set zset list stream}"
REPEAT="${REPEAT:-3}"
ROOT="${ROOT:-data/collections}"
KEEP_PROBES="${KEEP_PROBES:-0}"
release_probe
server_names "$@"

trim() {
  if [[ "$KEEP_PROBES" != 1 ]]; then
    python3 data/trim_run.py "$1"
  fi
}

for name in "${names[@]}"; do
  bin="$(bash scripts/servers.sh "$name")"
  for type in $TYPES; do
    echo "== $name $type evict: $bin" >&2
    out="$ROOT/$name/$type/evict"
    "$PROBE" --server-bin "$bin" --type "$type" --elements "$ELEMENTS" --ops build,evict \
      --repeat "$REPEAT" --gap 200ms --out "$out" --force
    trim "$out"
  done
  if [[ -n "$SIZES" ]]; then
    echo "== $name string evict: $bin" >&2
    out="$ROOT/$name/string/evict"
    "$PROBE" --server-bin "$bin" --writer-sizes "$SIZES" --ops set,evict \
      --repeat "$REPEAT" --gap 200ms --out "$out" --force
    trim "$out"
  fi
done
