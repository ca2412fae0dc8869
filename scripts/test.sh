#!/usr/bin/env bash
# The README's test command, and what CI runs (.ci/run calls this): installs what is missing, then runs every
# check and test suite in order, stopping at the first failure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$LOADSHAPE_ROOT/scripts/setup.sh" --with-real-server
eval "$(bash "$LOADSHAPE_ROOT/scripts/realserver/setup.sh" --paths)"
cd "$LOADSHAPE_ROOT"

passed=0
run() {
  local name="$1"; shift
  step "$name"
  local t0=$SECONDS
  "$@"
  passed=$((passed + 1))
  echo "-- $name: ok ($((SECONDS - t0)) s)"
}

WASM=wasm32-unknown-unknown
webdriver_json="$CARGO_TARGET_DIR/webdriver.json"
mkdir -p "$CARGO_TARGET_DIR"
printf '{"goog:chromeOptions":{"binary":"/usr/bin/chromium","args":[%s]}}\n' \
  "$(for f in $CHROMIUM_FLAGS; do printf '"%s",' "$f"; done | sed 's/,$//')" >"$webdriver_json"

run "cargo fmt --check" cargo fmt --all --check
run "no import loops between files (ARCHITECTURE.md)" python3 scripts/import_cycles.py shared/src agent/src app/src
run "clippy (native)" cargo clippy --all-targets --locked -- -D warnings
run "clippy (wasm32: shared, app)" cargo clippy -p loadshape-shared -p loadshape-app --features loadshape-app/split --lib --bins --target $WASM --locked -- -D warnings
run "unit and integration tests (native)" cargo test --locked
run "real server: replay against llama.cpp's llama-server" env LOADSHAPE_LLAMA_SERVER="$LLAMA_SERVER" \
  LOADSHAPE_LLAMA_MODEL="$LLAMA_MODEL" LOADSHAPE_REQUIRE_REAL_SERVER=1 cargo test --locked -p loadshape --test real_server
run "kubernetes manifests (schemas and shard semantics)" bash scripts/check_manifests.sh "$CARGO_TARGET_DIR/debug/loadshape"
# The page is documented for the target it is built for: its dependencies were checked for wasm32 by clippy above, so
# rustdoc reuses them (natively, Leptos and its dependencies would all be checked again).
docs() {
  RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked -p loadshape-shared -p loadshape
  RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked -p loadshape-shared -p loadshape-app --features loadshape-app/split --target $WASM
}
run "cargo doc (no warnings)" docs
run "wasm-bindgen tests in headless Chromium" env CHROMEDRIVER=/usr/bin/chromedriver \
  WASM_BINDGEN_TEST_WEBDRIVER_JSON="$webdriver_json" \
  cargo test -p loadshape-shared -p loadshape-app --target $WASM --locked --test 'wasm*'
run "page unit tests (wasm32, headless Chromium)" env CHROMEDRIVER=/usr/bin/chromedriver \
  WASM_BINDGEN_TEST_WEBDRIVER_JSON="$webdriver_json" cargo test -p loadshape-app --target $WASM --locked --lib
run "trunk build --release --offline" trunk build --release --offline
run "seed equivalence (python seed vs loadshape simulate)" \
  env LOADSHAPE_BIN="$CARGO_TARGET_DIR/debug/loadshape" bash scripts/check_seed.sh
run "browser end-to-end (agent + page in headless Chromium)" \
  env LOADSHAPE_BIN="$CARGO_TARGET_DIR/debug/loadshape" node tests/browser/run.mjs

echo
echo "steps: $passed passed, 0 failed"
