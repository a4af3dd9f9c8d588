# Shared by the scripts that record runs (data/record.sh, data/record_collections.sh,
# scripts/false_alarms.sh, benchmarks/compare_verdicts.sh, benchmarks/busy_agreement.sh,
# benchmarks/rate_delete.sh): sourced from the repository root,
# never run on its own.

# PROBE: the binary the caller gave in $PROBE, else this tree's release build, built now so a
# recording never measures a stale binary.
release_probe() {
  if [[ -z "${PROBE:-}" ]]; then
    cargo build --release --locked
    PROBE=target/release/probe
  fi
}

# names: the server versions given (scripts/servers.sh names), else all four in the order
# data/ shows them.
server_names() {
  names=("$@")
  if [[ ${#names[@]} -eq 0 ]]; then
    names=(redis-7.0 redis-6.2 valkey-9.1 redis-8.2)
  fi
}

# out: a temporary directory for a benchmark's runs, removed when the script exits, or kept
# (and said) with KEEP=1.
temp_runs_dir() {
  out=$(mktemp -d)
  trap 'if [[ "${KEEP:-0}" = 1 ]]; then echo "runs kept in $out" >&2; else rm -rf "$out"; fi' EXIT
}
