#!/usr/bin/env bash
# The `pip install loadshape` wheel: maturin (`bindings = "bin"`, pyproject.toml) builds the release binary with the
# page embedded and packs it; then the wheel is checked as a user meets it: installed into a fresh virtualenv with
# nothing else, `loadshape --version`, a `simulate`, and `serve` answering `/` with the page and its module
# compressed, from an empty folder (so nothing can come from the checkout).
#
#   bash scripts/build_wheel.sh            # wheel in $CARGO_TARGET_DIR/wheels, checked venv beside it
#   WHEEL_DIR=out bash scripts/build_wheel.sh
#
# Prints the installed executable's path last (the browser suite's installed.test.mjs opens its page).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
OUT="${WHEEL_DIR:-$CARGO_TARGET_DIR/wheels}"
TOOLS="${LOADSHAPE_WHEEL_VENV:-$HOME/.cache/loadshape-wheel}"

want="$(awk -F'==' '/^maturin==/ {print $2}' packaging/requirements.txt)"
if [ "$("$TOOLS/bin/maturin" --version 2>/dev/null | awk '{print $2}')" != "$want" ]; then
  step "pip: maturin $want (in $TOOLS)"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q -r packaging/requirements.txt
fi
if [ ! -f dist/index.html ]; then
  step "trunk build --release (the page the wheel embeds)"
  trunk build --release --offline
fi

step "maturin build --release (the wheel)"
rm -rf "$OUT"
mkdir -p "$OUT"
"$TOOLS/bin/maturin" build --release --locked --out "$OUT" 2>&1 | grep -v '^\s*Compiling ' || true
wheel="$(ls "$OUT"/loadshape-*.whl)"
ls -l "$wheel"

step "install it into a fresh virtualenv and use it from an empty folder"
python3 -m venv "$OUT/venv"
"$OUT/venv/bin/pip" install -q --no-index "$wheel"
bin="$OUT/venv/bin/loadshape"
empty="$(mktemp -d)"
serve_pid=""
trap '[ -z "$serve_pid" ] || kill "$serve_pid" 2>/dev/null; rm -rf "$empty"' EXIT
cp examples/engine-fleet-sessions.json "$empty/scenario.json"
cd "$empty"
"$bin" --version
"$bin" simulate scenario.json | tail -n 4
env -u LOADSHAPE_DIST "$bin" serve --port 0 --data-dir "$empty/data" >"$empty/serve.out" 2>&1 &
serve_pid=$!
url=""
for _ in $(seq 100); do
  url="$(grep -o 'http://127.0.0.1:[0-9]*' "$empty/serve.out" | head -n 1 || true)"
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$empty/serve.out"; echo "build_wheel.sh: serve printed no URL" >&2; exit 1; }
grep -q 'embedded page' "$empty/serve.out" || { cat "$empty/serve.out"; echo "build_wheel.sh: serve did not use its embedded page" >&2; exit 1; }
curl -fsS "$url/" -o index.html
module="$(grep -o 'loadshape-app-[0-9a-f]*_bg.wasm' index.html | head -n 1)"
[ -n "$module" ] || { echo "build_wheel.sh: / is not the page (no wasm module named)" >&2; exit 1; }
headers="$(curl -fsS -o /dev/null -D - -H 'Accept-Encoding: gzip, deflate, br' "$url/$module")"
for want in 'content-type: application/wasm' 'content-encoding: gzip' 'cache-control: public, max-age=31536000, immutable'; do
  grep -qi "^$want" <<<"$headers" || { echo "$headers"; echo "build_wheel.sh: $module lacks '$want'" >&2; exit 1; }
done
echo "serve answered / with the page, and $module compressed and immutable"
kill "$serve_pid"
wait "$serve_pid" 2>/dev/null || true
serve_pid=""
echo "$bin"
