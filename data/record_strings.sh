#!/usr/bin/env bash
# Records the shipped string runs beside the collections (data/collections/<server>/string/):
# for each server version, one run that sets strings of 64M to 512M and overwrites, reads,
# deletes, unlinks and expires them, with the release build; then, on Redis 7.0, the same 256M
# DEL and UNLINK with `lazyfree-lazy-user-del yes` (string/lazyfree-user-del/), which shows that
# a string is freed on the main thread whichever way it is removed (its free effort is 1).
#
#   data/record_strings.sh                  # all four servers, then the lazyfree run
#   data/record_strings.sh redis-7.0        # one server (the lazyfree run only with redis-7.0)
#   SIZES=32M,96M,192M ROOT=data/unseen data/record_strings.sh   # sizes no model is fitted on
#
# Plan: SIZES (default 64M,128M,256M,512M), ops set,overwrite,read,delete,set,unlink,set,expire
# (every op once on each size: a removed key is set again before the next removal), REPEAT
# (default 3) repeats, gap 200ms, every other option at its default. Each run is trimmed as
# data/record_collections.sh's are (data/trim_run.py; KEEP_PROBES=1 keeps it whole). Each run
# goes to data/collections/<server>/string/, or under ROOT=... instead of data/collections (the
# lazyfree run is then left out).
# PROBE=path/to/probe to use a given binary.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES="${SIZES:-64M,128M,256M,512M}"
REPEAT="${REPEAT:-3}"
KEEP_PROBES="${KEEP_PROBES:-0}"
ROOT="${ROOT:-data/collections}"
OPS="set,overwrite,read,delete,set,unlink,set,expire"
if [[ -z "${PROBE:-}" ]]; then
  cargo build --release --locked
  PROBE=target/release/probe
fi
names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  names=(redis-7.0 redis-6.2 valkey-9.1 redis-8.2)
fi

trim() {
  if [[ "$KEEP_PROBES" != 1 ]]; then
    python3 data/trim_run.py "$1"
  fi
}

for name in "${names[@]}"; do
  bin="$(bash scripts/servers.sh "$name")"
  out="$ROOT/$name/string"
  echo "== $name string: $bin" >&2
  "$PROBE" --server-bin "$bin" --writer-sizes "$SIZES" --ops "$OPS" \
    --repeat "$REPEAT" --gap 200ms --out "$out" --force
  trim "$out"
  if [[ "$name" == redis-7.0 && "$ROOT" == data/collections ]]; then
    out="data/collections/$name/string/lazyfree-user-del"
    echo "== $name string, lazyfree-lazy-user-del yes: $bin" >&2
    "$PROBE" --server-bin "$bin" --server-arg "lazyfree-lazy-user-del yes" --writer-sizes 256M \
      --ops set,delete,set,unlink --repeat "$REPEAT" --gap 200ms --out "$out" --force
    trim "$out"
  fi
done
