#!/usr/bin/env bash
# Large writes to one shard of a throwaway cluster of 3 masters with a replica each, against
# the same server alone: what the written shard's master, its replica and the other shards'
# nodes saw (hol_delay_ms, median over the repeats), and what replication does to the
# master's figure. Redis 7.0 and Valkey 9.1 (paths from scripts/servers.sh).
#
#   benchmarks/cluster_writes.sh [OUT_DIR]     (SIZES=64M,256M,512M REPEAT=5 SERVERS="redis-7.0 valkey-9.1")
#
# Each configuration is one `probe` run with --overwrite (set, overwrite, delete per size);
# the table is printed by benchmarks/cluster_table.py and written to OUT_DIR/table.md. Run it on
# an otherwise idle machine: every figure includes the host.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/cluster_writes}
sizes=${SIZES:-64M,256M,512M}
repeat=${REPEAT:-5}
servers=${SERVERS:-"redis-7.0 valkey-9.1"}
cargo build --release --locked -q
bin=${BIN:-target/release/probe}
mkdir -p "$out"
for name in $servers; do
  server=$(bash scripts/servers.sh "$name")
  echo "== $name cluster (3 masters x 1 replica)" >&2
  "$bin" --server-bin "$server" --cluster 3 --replicas 1 --writer-sizes "$sizes" \
    --overwrite --repeat "$repeat" --out "$out/$name-cluster" --force > "$out/$name-cluster.log" 2>&1
  echo "== $name alone" >&2
  "$bin" --server-bin "$server" --writer-sizes "$sizes" \
    --overwrite --repeat "$repeat" --out "$out/$name-alone" --force > "$out/$name-alone.log" 2>&1
done
python3 benchmarks/cluster_table.py "$out" $servers | tee "$out/table.md"
