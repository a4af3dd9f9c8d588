#!/usr/bin/env bash
# Records the shipped sweeps in data/: one run per server version, each an --out directory
# (run.json and the CSVs), with the release build, then the side-by-side table of the four
# (data/versions.md). Run it on an otherwise idle machine: every figure includes the host.
#
#   data/record.sh                      # all four: redis-7.0, redis-6.2, valkey-9.1, redis-8.2
#   data/record.sh redis-6.2            # one of them (then the table again)
#
# Plan: sizes 1M to 512M in powers of 2 (10 sizes), 5 repeats, every other option at its
# default (2 probe threads x 1000/s PING, gap 500ms, a fresh key per write, deleted after its
# gap). Override with SIZES=..., REPEAT=..., or PROBE=path/to/probe to use a given binary.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

SIZES="${SIZES:-1M,2M,4M,8M,16M,32M,64M,128M,256M,512M}"
REPEAT="${REPEAT:-5}"
release_probe
server_names "$@"

for name in "${names[@]}"; do
  bin="$(bash scripts/servers.sh "$name")"
  echo "== $name: $bin" >&2
  "$PROBE" --server-bin "$bin" --writer-sizes "$SIZES" --repeat "$REPEAT" \
    --out "data/$name" --force
done

# The four side by side, and each against Redis 7.0 (exit 1 = a regression: not an error here).
status=0
"$PROBE" compare data/redis-7.0 data/redis-6.2 data/valkey-9.1 data/redis-8.2 --format markdown \
  > data/versions.md || status=$?
if [[ $status -gt 1 ]]; then
  exit "$status"
fi
"$PROBE" compare data/redis-7.0 data/redis-6.2 data/valkey-9.1 data/redis-8.2 || true
