#!/usr/bin/env bash
# Records the shipped collection runs in data/collections/: for each server version and each
# kind of collection, one run (an --out directory) that builds the value and frees or reads it
# every way the tool knows, with the release build. Run it on an otherwise idle machine: the
# freezes of big collections (tens to hundreds of ms) stand well above the host's noise, the
# small ones do not.
#
#   data/record_collections.sh                    # all four servers, hash set zset list
#   data/record_collections.sh redis-7.0          # one server
#
# Plan: 100k and 1M elements of 16 bytes (ELEMENTS=..., TYPES=..., REPEAT=... to change), ops
# build,read,delete,build,unlink,build,expire,build,overwrite,delete, 3 repeats, gap 200ms,
# every other option at its default. PROBE=path/to/probe to use a given binary.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ELEMENTS="${ELEMENTS:-100k,1M}"
TYPES="${TYPES:-hash set zset list}"
REPEAT="${REPEAT:-3}"
OPS="build,read,delete,build,unlink,build,expire,build,overwrite,delete"
release_probe
server_names "$@"

for name in "${names[@]}"; do
  bin="$(bash scripts/servers.sh "$name")"
  for type in $TYPES; do
    echo "== $name $type: $bin" >&2
    "$PROBE" --server-bin "$bin" --type "$type" --elements "$ELEMENTS" --ops "$OPS" \
      --repeat "$REPEAT" --gap 200ms --out "data/collections/$name/$type" --force
  done
done
