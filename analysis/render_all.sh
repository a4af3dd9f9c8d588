#!/usr/bin/env bash
# Renders every picture of analysis/README.md from the runs in data/ (any directory holding a
# summary.csv, at any depth) into analysis/img/ (or the directory given as $1). Rerun it after
# adding or replacing runs in data/.
#
#   sweeps        runs without custom commands: a timeline each (whole run, zoom on the largest
#                 set and the largest delete), sizes of SET and DEL over all of them, and a
#                 compare of the first (sorted by path) against each of the others (with
#                 probe compare's verdicts: a built probe binary is needed, see compare.py);
#   command runs  runs with custom commands (examples/custom_command.rs --out): a timeline
#                 zoomed on the largest command, and sizes of the commands over all of them;
#   collections   value-type runs in data/collections/ and data/heldout/ (data/record_collections.sh): freeze.py
#                 over all of them (what each op on a hash, set, zset, list cost, per server);
#   load runs     directories holding load_timeline.csv: a load picture each;
#   node runs     runs over several nodes (run.json lists `nodes`): nodes.py on the largest set,
#                 delete and command each has. None is in data/ yet: until one is, this renders
#                 nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
img=${1:-analysis/img}
py=${PYTHON:-python3}
mkdir -p "$img"

sweeps=()
commands=()
collections=()
while IFS= read -r summary; do
  run=$(dirname "$summary")
  # The sizes of the later sittings (data/unseen/, data/unseen-2/) check the models; the picture
  # is of the runs they were fitted on.
  if [[ "$run" == data/unseen/* || "$run" == data/unseen-2/* ]]; then
    continue
  fi
  # Value-type runs (data/collections/, data/heldout/) ship without their probe-level files:
  # freeze.py's.
  if [[ "$run" == data/collections/* || "$run" == data/heldout/* ]]; then
    collections+=("$run")
  elif grep -q '^[0-9]*,command,' "$run/writes.csv"; then
    commands+=("$run")
  else
    sweeps+=("$run")
  fi
done < <(find data -name summary.csv | sort)

if [ ${#sweeps[@]} -eq 0 ] && [ ${#commands[@]} -eq 0 ]; then
  echo "render_all.sh: no runs in data/ (no summary.csv found)" >&2
  exit 1
fi

# A file name from a run's path: data/redis-7.0-get-sample/unlink -> redis-7.0-get-sample-unlink
name_of() { local n=${1#data/}; echo "${n//\//-}"; }

for run in ${sweeps[@]+"${sweeps[@]}"}; do
  name=$(name_of "$run")
  $py analysis/timeline.py "$run" -o "$img/timeline-$name.png"
  $py analysis/timeline.py "$run" --write largest -o "$img/timeline-$name-largest-set.png"
  if grep -q '^[0-9]*,delete,' "$run/writes.csv"; then
    $py analysis/timeline.py "$run" --write largest:delete -o "$img/timeline-$name-largest-delete.png"
  fi
done
if [ ${#sweeps[@]} -gt 0 ]; then
  $py analysis/sizes.py "${sweeps[@]}" -o "$img/sizes-set.png"
  $py analysis/sizes.py "${sweeps[@]}" --op delete -o "$img/sizes-delete.png"
  base=${sweeps[0]}
  for cand in "${sweeps[@]:1}"; do
    $py analysis/compare.py "$base" "$cand" -o "$img/compare-$(name_of "$base")-vs-$(name_of "$cand").png"
  done
fi

for run in ${commands[@]+"${commands[@]}"}; do
  $py analysis/timeline.py "$run" --write largest:command -o "$img/timeline-$(name_of "$run")-largest-command.png"
done
if [ ${#commands[@]} -gt 0 ]; then
  $py analysis/sizes.py "${commands[@]}" --op command -o "$img/sizes-command.png"
fi

if [ ${#collections[@]} -gt 0 ]; then
  $py analysis/freeze.py "${collections[@]}" -o "$img/freeze-collections.png"
fi

while IFS= read -r timeline; do
  run=$(dirname "$timeline")
  $py analysis/load.py "$run" -o "$img/load-$(name_of "$run").png"
done < <(find data -name load_timeline.csv | sort)

# Runs over several nodes: run.json's `nodes` (the other nodes' findings) is a non-empty list.
has_nodes() { $py -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("nodes") else 1)' "$1/run.json" 2>/dev/null; }
for run in ${sweeps[@]+"${sweeps[@]}"} ${commands[@]+"${commands[@]}"}; do
  has_nodes "$run" || continue
  name=$(name_of "$run")
  for op in set delete command; do
    if grep -q "^[0-9]*,$op," "$run/writes.csv"; then
      $py analysis/nodes.py "$run" --write "largest:$op" -o "$img/nodes-$name-largest-$op.png"
    fi
  done
done
