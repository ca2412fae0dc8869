#!/usr/bin/env bash
# Trunk's post_build hook (Trunk.toml): splits the page's wasm at its `#[lazy]` functions and optimizes it.
#
# Trunk 0.21 runs cargo, then wasm-bindgen, with no step between them, and a split must happen there: wasm-split reads
# the linker's relocations (app/build.rs links the page with --emit-relocs) and the bindgen'd module must be the split
# main module. So Trunk builds as usual, wasm-opt off (index.html), and this hook redoes the last steps on cargo's
# output, writing over Trunk's two staged files under the same names:
#   1. wasm-split-cli (crate wasm_split_cli_support, scripts/setup.sh): the main module, one module per split point
#      (`split_*`) and per piece of code that only split points share (`chunk_*`), and the link file that fetches
#      them;
#   2. wasm-bindgen on the main module, keeping the function table's export (the split modules import it);
#   3. wasm-opt on every module, with the flags measured in docs/page.md, "Budget", as many at once as there are
#      cores (binaryen from npm is one thread per process; the main module alone is about half the work).
# The split modules and the link file get content-hashed names (the main module's own name is Trunk's hash), so a
# browser cache can never pair a new main module with an old split module.
set -euo pipefail
# Cargo's target dir as Trunk's cargo saw it: env.sh would give CARGO_TARGET_DIR a default, and a plain
# `trunk build` (no env.sh) builds in ./target.
caller_target_dir="${CARGO_TARGET_DIR-}"
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [ -n "$caller_target_dir" ]; then export CARGO_TARGET_DIR="$caller_target_dir"; else unset CARGO_TARGET_DIR; fi
metadata="$(cargo metadata --format-version 1 --no-deps --manifest-path "$LOADSHAPE_ROOT/Cargo.toml")" \
  || { echo "page_split: cargo metadata failed" >&2; exit 1; }
target_dir="$(python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' <<<"$metadata")"

# Each flag measured on the gzip'd bundle: docs/page.md, "Budget" (no `--converge`: it doubled wasm-opt's time to
# save 112 B of the first module's 404 KB gzipped).
WASM_OPT_FLAGS=(-Oz --low-memory-unused --ignore-implicit-traps --zero-filled-memory --strip-producers
  --strip-target-features --reorder-functions-by-name)

staging="${TRUNK_STAGING_DIR:?run by trunk build (Trunk.toml), which sets TRUNK_STAGING_DIR}"
for tool in wasm-split-cli wasm-bindgen wasm-opt; do
  command -v "$tool" >/dev/null || { echo "page_split: $tool is not installed: run scripts/setup.sh" >&2; exit 1; }
done
input="$target_dir/wasm32-unknown-unknown/wasm-release/loadshape-app.wasm"
[ -f "$input" ] || { echo "page_split: $input missing (index.html builds the page with profile wasm-release)" >&2; exit 1; }
glue=("$staging"/loadshape-app-*.js)
[ ${#glue[@]} = 1 ] && [ -f "${glue[0]}" ] || { echo "page_split: expected one loadshape-app-*.js in $staging" >&2; exit 1; }
name="$(basename "${glue[0]}" .js)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
wasm-split-cli --target web --out-name "$name" "$input" "$work/split"
wasm-bindgen --target web --no-typescript --keep-lld-exports --out-dir "$work/bindgen" --out-name "$name" \
  "$work/split/$name.wasm"

# wasm-opt: the main module first (the largest), then the split modules largest first, at most one per core.
split_modules=()
while IFS= read -r module; do
  if [ "$(basename "$module" .wasm)" != "$name" ]; then split_modules+=("$module"); fi
done < <(ls -S "$work"/split/*.wasm)
mkdir "$work/opt"
running=0
cores="$(nproc)"
for module in "$work/bindgen/${name}_bg.wasm" "${split_modules[@]}"; do
  if [ "$running" -ge "$cores" ]; then
    wait -n || { echo "page_split: wasm-opt failed" >&2; exit 1; }
    running=$((running - 1))
  fi
  wasm-opt "${WASM_OPT_FLAGS[@]}" "$module" -o "$work/opt/$(basename "$module")" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || { echo "page_split: wasm-opt failed" >&2; exit 1; }
  running=$((running - 1))
done
mv "$work/opt/${name}_bg.wasm" "$staging/${name}_bg.wasm"

link="$work/split/__wasm_split.js"
for module in "${split_modules[@]}"; do
  base="$(basename "$module" .wasm)"
  hashed="$base-$(sha256sum "$work/opt/$base.wasm" | cut -c1-16).wasm"
  mv "$work/opt/$base.wasm" "$staging/$hashed"
  grep -q "\"./$base.wasm\"" "$link" || { echo "page_split: $base.wasm is not named in the link file" >&2; exit 1; }
  sed -i "s|\"./$base.wasm\"|\"./$hashed\"|" "$link"
done
link_name="$name-split-$(sha256sum "$link" | cut -c1-16).js"
cp "$link" "$staging/$link_name"
# The glue imports the link file once per split point, under wasm-bindgen's names for the imports.
link_import='^\(import \* as [a-z0-9_]* from \)"./__wasm_split.js"'
grep -q "$link_import" "$work/bindgen/$name.js" \
  || { echo "page_split: wasm-bindgen's glue does not import ./__wasm_split.js" >&2; exit 1; }
sed "s|$link_import|\1\"./$link_name\"|" "$work/bindgen/$name.js" > "$staging/$name.js"
