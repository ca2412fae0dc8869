#!/usr/bin/env bash
# The README's test command, and what CI runs (.ci/run calls this): installs what is missing, then runs every
# check and test suite, stopping at the first failure.
#
# The installs the native steps do not need (apt, the wasm32 target, the page's tools, npm and pip packages) run in the
# background while the native steps run, then the page's builds (wasm32: clippy, docs, the wasm test binaries,
# trunk) once the native test binaries are built: the native tests mostly wait on real time (live calibrations and
# capacity searches against the emulated engine), so the background takes the idle cores. llama.cpp's build starts
# when the installs end, beside the page's builds and then their test suites; the real-server suite runs last, alone.
# The background runs at SCHED_IDLE, so a timed test never waits for a core it holds. Both share one target dir, so
# the host-side crates (proc macros, build scripts) build once: the native tests run from their binaries rather than
# through `cargo test`, which would hold the target dir's lock while they run. docs/measurements.md, "CI, cold
# project", has what this saves.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$LOADSHAPE_ROOT/scripts/setup.sh" --native
eval "$(bash "$LOADSHAPE_ROOT/scripts/realserver/setup.sh" --paths)"
cd "$LOADSHAPE_ROOT"
# The tests' scratch files (std::env::temp_dir, node's os.tmpdir, Chromium's and chromedriver's profiles) go to one
# folder of this run: removed when every step has passed, kept and named when one fails.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/loadshape-test.XXXXXX")"
export TMPDIR="$scratch"

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
mkdir -p "$CARGO_TARGET_DIR"
export CHROMEDRIVER=/usr/bin/chromedriver
export WASM_BINDGEN_TEST_WEBDRIVER_JSON="$CARGO_TARGET_DIR/webdriver.json"
printf '{"goog:chromeOptions":{"binary":"/usr/bin/chromium","args":[%s]}}\n' \
  "$(for f in $CHROMIUM_FLAGS; do printf '"%s",' "$f"; done | sed 's/,$//')" >"$WASM_BINDGEN_TEST_WEBDRIVER_JSON"

# The page's steps: cargo for wasm32.
page_clippy() {
  cargo clippy -p loadshape-shared -p loadshape-app --features loadshape-app/split --lib --bins --target $WASM \
    --locked -- -D warnings
}
# Documented for the target it is built for, so rustdoc reuses clippy's checks of the page's dependencies.
page_docs() {
  RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked -p loadshape-shared -p loadshape-app \
    --features loadshape-app/split --target $WASM
}
wasm_tests() { cargo test -p loadshape-shared -p loadshape-app --target $WASM --locked --test 'wasm*' "$@"; }
page_unit_tests() { cargo test -p loadshape-app --target $WASM --locked --lib "$@"; }
page_build() { trunk build --release --offline; }
wheel_build() {
  WHEEL_DIR="$scratch/wheel" bash scripts/build_wheel.sh | tee "$scratch/wheel.log"
  tail -n 1 "$scratch/wheel.log" >"$installed_bin"
}

# The native test binaries, built once and run as `cargo test` runs them (in their package's folder), without
# holding the target dir's lock: "DIR<TAB>BINARY" lines in $native_tests.
native_tests="$scratch/native-tests.tsv"
native_built="$scratch/native-built"
page_built="$scratch/page-built"
wheel_built="$scratch/wheel-built"
installed_bin="$scratch/installed-bin"
build_native_tests() {
  cargo test --locked --no-run --message-format=json-render-diagnostics | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(os.path.dirname(m["manifest_path"]), m["executable"], sep="\t")
' >"$native_tests"
  echo "$(wc -l <"$native_tests") test binaries"
}
run_native_tests() {
  local dir bin
  while IFS=$'\t' read -r dir bin; do
    printf '     Running %s\n' "${bin#"$CARGO_TARGET_DIR"/}"
    (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$bin") || { echo "failed: $bin (in $dir)" >&2; return 1; }
  done <"$native_tests"
}
background() {
  # A failed page step ends this job: llama.cpp's build (below) ends with it.
  trap 'echo "$passed" >"$bg_log.passed"; [ -z "$llama_pid" ] || kill_tree "$llama_pid"' EXIT
  run "installs (scripts/setup.sh --tests)" bash "$LOADSHAPE_ROOT/scripts/setup.sh" --tests
  # llama.cpp's build starts now that cmake is installed, beside the page's builds: they leave a core idle part of the
  # time (trunk's release build links the page with LTO and runs wasm-opt on one core), and the build takes it. Its
  # log is shown when it ends, after the page's steps.
  local llama_log="$scratch/llama-build.log"
  local llama_step="real server: llama.cpp's llama-server and a tiny model (scripts/realserver/setup.sh)"
  (run "$llama_step" bash "$LOADSHAPE_ROOT/scripts/realserver/setup.sh") >"$llama_log" 2>&1 &
  llama_pid=$!
  # The page's builds start once the native ones are done, so they fill the native tests' waits rather than hold the
  # target dir's lock while the native build waits for it.
  local t0=$SECONDS
  until [ -e "$native_built" ]; do sleep 1; done
  echo "-- waited $((SECONDS - t0)) s for the native builds"
  run "clippy (wasm32: shared, app)" page_clippy
  run "cargo doc (wasm32: shared, app; no warnings)" page_docs
  run "build the wasm-bindgen tests" wasm_tests --no-run
  run "build the page unit tests" page_unit_tests --no-run
  run "trunk build --release --offline" page_build
  touch "$page_built"
  # The wheel embeds the page just built; the browser suite opens the page its installed executable serves.
  run "wheel: maturin build, pip install into a fresh virtualenv, --version, simulate, serve (scripts/build_wheel.sh)" \
    wheel_build
  touch "$wheel_built"
  # The build goes on beside the page's test suites (the real-server suite runs after it, alone).
  local status=0
  wait "$llama_pid" || status=$?
  llama_pid=""
  cat "$llama_log"
  [ "$status" = 0 ] || { echo "$llama_step: failed (above)" >&2; return 1; }
  passed=$((passed + 1))
}
llama_pid=""

# Ends the background job if a step fails first: the processes this script started, by PID. Not apt-get and what it
# runs: stopped midway, it would leave Debian's package database locked and half-configured, so it is left to finish.
kill_tree() {
  local child
  case "$(ps -o comm= -p "$1" 2>/dev/null)" in apt-get | sudo) return ;; esac
  for child in $(pgrep -P "$1" || true); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
bg_pid=""
bg_log="$scratch/background.log"
bg_shown=0
# Waits until the background job has touched MARK (or, without one, until it ends), then shows its log so far. The
# job writes $bg_log.passed when it ends, so a job that ended without the mark (it failed) is not waited on forever.
await_background() {
  local what="$1" mark="${2:-}" t0=$SECONDS status=0
  step "$what (in the background)"
  if [ -n "$mark" ]; then
    while [ ! -e "$mark" ] && [ ! -e "$bg_log.passed" ]; do sleep 1; done
  fi
  if [ -z "$mark" ] || [ ! -e "$mark" ]; then
    [ -z "$bg_pid" ] || wait "$bg_pid" || status=$?
    bg_pid=""
  fi
  tail -c +$((bg_shown + 1)) "$bg_log"
  bg_shown=$(stat -c %s "$bg_log")
  [ "$status" = 0 ] || { echo "$what: failed (above)" >&2; exit 1; }
  echo "-- $what: done, waited $((SECONDS - t0)) s"
}
cleanup() {
  local status=$?
  [ -z "$bg_pid" ] || kill_tree "$bg_pid"
  if [ "$status" = 0 ]; then rm -rf "$scratch"; else echo "the tests' scratch files are kept in $scratch" >&2; fi
}
trap cleanup EXIT

step "the installs, the page's builds and llama.cpp's: started in the background (shown after the native steps)"
(
  chrt -i -p 0 "$BASHPID" 2>/dev/null || renice -n 19 -p "$BASHPID" >/dev/null
  passed=0
  background
) >"$bg_log" 2>&1 &
bg_pid=$!

run "cargo fmt --check" cargo fmt --all --check
run "the tree speaks of the project only: no build-machine paths, no narration (scripts/check_words.sh)" \
  bash scripts/check_words.sh
run "no import loops between files (ARCHITECTURE.md)" python3 scripts/import_cycles.py shared/src agent/src app/src
run "ground-truth converters (synthetic lines; the real runs: scripts/bench_groundtruth.sh)" \
  python3 scripts/groundtruth.py --selftest
run "clippy (native)" cargo clippy --all-targets --locked -- -D warnings
run "build the native tests" build_native_tests
run "cargo doc (native: shared, agent; no warnings)" env RUSTDOCFLAGS="-D warnings" \
  cargo doc --no-deps --locked -p loadshape-shared -p loadshape
run "doc tests (native)" cargo test --locked --doc
touch "$native_built"
run "unit and integration tests (native, from their binaries)" run_native_tests

await_background "the installs and the page's builds" "$page_built"
run "kubernetes manifests (schemas and shard semantics)" bash scripts/check_manifests.sh "$CARGO_TARGET_DIR/debug/loadshape"

run "wasm-bindgen tests in headless Chromium" wasm_tests
run "page unit tests (wasm32, headless Chromium)" page_unit_tests
run "seed equivalence (python seed vs loadshape simulate)" \
  env LOADSHAPE_BIN="$CARGO_TARGET_DIR/debug/loadshape" bash scripts/check_seed.sh
await_background "the wheel" "$wheel_built"
run "browser end-to-end (agent + page in headless Chromium; the installed wheel's page too)" \
  env LOADSHAPE_BIN="$CARGO_TARGET_DIR/debug/loadshape" LOADSHAPE_INSTALLED_BIN="$(cat "$installed_bin")" \
  node tests/browser/run.mjs

await_background "llama.cpp's build"
passed=$((passed + $(cat "$bg_log.passed")))
# After the background, not beside it: llama-server computes for real, and a build on the other core (even at
# SCHED_IDLE: the two cores can share one physical core) slowed it in calibrate's probe and not in the held-out run,
# so the prediction came out 2.1× the live TTFT p50.
run "real server: replay against llama.cpp's llama-server (and with a draft model)" env \
  LOADSHAPE_LLAMA_SERVER="$LLAMA_SERVER" LOADSHAPE_LLAMA_MODEL="$LLAMA_MODEL" \
  LOADSHAPE_LLAMA_DRAFT_MODEL="$LLAMA_DRAFT_MODEL" LOADSHAPE_REQUIRE_REAL_SERVER=1 \
  cargo test --locked -p loadshape --test real_server

echo
echo "steps: $passed passed, 0 failed"
