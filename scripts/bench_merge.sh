#!/usr/bin/env bash
# How `loadshape merge` time grows with shards and records (README, "Measurements"; docs/scale.md).
# Makes the records of a simulated run (`loadshape simulate --records`), splits them into N shards' files with
# agent/examples/make_shards.rs (records by slot, the sidecars `replay` writes), and times
# `loadshape merge DIR --json` (exact + histogram) and `--fast` (histograms only), RUNS times each, median wall.
# Env: RECORDS_SCENARIOS (scenario files; default examples/engine-10k.json = 150,000 requests), SHARDS ("1 4 16 64"),
# RUNS (5), PROFILE (release), WORK (a scratch folder, removed after).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
# PROFILE=debug measures the debug build (no release build needed; far slower per record).
profile="${PROFILE:-release}"
if [ "$profile" = release ]; then flag=--release; else flag=; fi
cargo build $flag -q -p loadshape --bin loadshape --example make_shards
bin="$CARGO_TARGET_DIR/$profile/loadshape"; split="$CARGO_TARGET_DIR/$profile/examples/make_shards"
work="${WORK:-$(mktemp -d)}"; mkdir -p "$work"; trap 'rm -rf "$work"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_it() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }
printf '| records | shards | merge --json (exact + histogram), s | merge --fast (histograms), s |\n|---|---|---|---|\n'
for scen in ${RECORDS_SCENARIOS:-examples/engine-10k.json}; do
  "$bin" simulate "$scen" --records "$work/all.jsonl" >/dev/null
  n=$(wc -l <"$work/all.jsonl")
  for shards in ${SHARDS:-1 4 16 64}; do
    rm -rf "$work/shards"; "$split" "$work/all.jsonl" "$shards" "$work/shards"
    "$bin" merge "$work/shards" --json >/dev/null || true   # warm the page cache
    full=$(for _ in $(seq "${RUNS:-5}"); do time_it "$bin" merge "$work/shards" --json; done | median)
    fast=$(for _ in $(seq "${RUNS:-5}"); do time_it "$bin" merge "$work/shards" --fast --json; done | median)
    printf '| %s | %s | %.3f | %.4f |\n' "$n" "$shards" "$full" "$fast"
  done
done
