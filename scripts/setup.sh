#!/usr/bin/env bash
# Installs whatever is missing to build and test loadshape on a fresh Debian 12 + rustup machine.
# Idempotent: a second run checks versions and installs nothing. Only package registries are used.
#   scripts/setup.sh                     what scripts/run.sh needs: the agent and the page
#   scripts/setup.sh --with-real-server  ... and llama.cpp's llama-server with a tiny model (scripts/realserver/setup.sh,
#                                        cached outside the clone), for the real-server tests
#   scripts/setup.sh --tests             ... and cmake for llama.cpp's build, not the build: scripts/test.sh runs the
#                                        build later (scripts/realserver/setup.sh), beside its browser suites
#   scripts/setup.sh --native            only what the native checks need (rustup's clippy and rustfmt): scripts/test.sh
#                                        runs this first and the rest in the background, beside its native steps
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$LOADSHAPE_ROOT"
mode="${1:-}"
case "$mode" in
  "" | --with-real-server | --tests | --native) ;;
  *) echo "setup.sh: unknown option '$mode' (expected --with-real-server, --tests or --native)" >&2; exit 2 ;;
esac

rustup component list --installed | grep -q '^clippy' || rustup component add clippy
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
[ "$mode" != --native ] || exit 0

need_apt=()
# Liberation is one of chromium's recommends (the rest is desktop plumbing headless runs never use: printing, udev,
# upower, notifications): the pages render in the same fonts.
command -v chromium >/dev/null || need_apt+=(chromium fonts-liberation)
command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
command -v node >/dev/null || need_apt+=(nodejs npm)
python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# llama.cpp's build needs cmake (scripts/realserver/setup.sh): in the same apt run.
case "$mode" in --with-real-server | --tests) command -v cmake >/dev/null || need_apt+=(cmake) ;; esac
case "$mode" in --tests) command -v curl >/dev/null || need_apt+=(curl) ;; esac  # scripts/build_wheel.sh
# apt runs in the background while cargo builds trunk and wasm-bindgen-cli (it mostly downloads and unpacks; those
# compile), and everything that needs its packages (node, npm, python3-venv, cmake) waits for it: `apt_done`. Without
# recommends: 33 packages instead of 122 for chromium, chromium-driver and cmake (docs/measurements.md).
apt_pid=""
apt_log=""
if ((${#need_apt[@]})); then
  apt_log="$(mktemp)"
  step "apt: ${need_apt[*]} (in the background)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${need_apt[@]}"; } \
    >"$apt_log" 2>&1 &
  apt_pid=$!
fi
apt_done() {
  [ -n "$apt_pid" ] || return 0
  if ! wait "$apt_pid"; then
    cat "$apt_log" >&2
    echo "setup: apt-get install ${need_apt[*]} failed" >&2
    exit 1
  fi
  apt_pid=""
  rm -f "$apt_log"
  step "apt: ${need_apt[*]} installed"
}

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  step "rustup: wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi
# `cargo install` at opt-level 0, without LTO, for the build tools whose own code is a sliver of the time they run:
# they install in about half the time and do the same work.
install_unoptimized() {
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
    cargo install "$@"
}
# wasm-bindgen-cli's test runner spends its time reading, rewriting and writing the test binaries' wasm: those crates
# stay at opt-level 3 (all of it at 0 cost the wasm tests 50-60 s more every run), the rest at 0. The install takes
# 22 % less time and CPU than at opt-level 3 throughout, for wasm tests as fast within the noise
# (docs/measurements.md, "CI, cold on a fresh machine").
wasm_bindgen_optimized=()
for crate in walrus wasmparser wasm-encoder wasm-bindgen-cli-support wasm-bindgen-shared gimli id-arena leb128 \
  leb128fmt hashbrown indexmap; do
  wasm_bindgen_optimized+=(--config "profile.release.package.$crate.opt-level=3")
done

if [ "$(trunk --version 2>/dev/null)" != "trunk $TRUNK_VERSION" ]; then
  step "cargo install trunk $TRUNK_VERSION (trunk 0.22 needs a newer rustc)"
  # Unoptimized and without its default features (no TLS stack, no crates.io update check: an offline build uses
  # neither): the install takes 202 s instead of 409 s with the default features at opt-level 1 (2 cores,
  # 2026-12-03, fresh target dirs), and the page's `trunk build --release` is byte-identical and as fast: trunk only
  # orchestrates cargo, wasm-bindgen and wasm-opt, and its own code was 0.02-0.08 % of the build's CPU samples
  # (docs/measurements.md, "CI, cold on a fresh machine").
  install_unoptimized trunk --version "$TRUNK_VERSION" --locked --no-default-features
fi
if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $WASM_BINDGEN_VERSION" ]; then
  step "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION (must equal Cargo.lock)"
  # Not --locked: the CLI's own lock names a crate version the registry no longer serves. --no-default-features:
  # no rustls; the test runner talks plain HTTP to chromedriver on 127.0.0.1 (188 s instead of 218 s).
  install_unoptimized wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --no-default-features \
    "${wasm_bindgen_optimized[@]}"
fi

if ! cargo install --list | grep -qx "wasm_split_cli_support v$WASM_SPLIT_VERSION:"; then
  step "cargo install wasm_split_cli_support $WASM_SPLIT_VERSION (wasm-split-cli: the page's lazy modules)"
  # Unoptimized, like trunk: 36 s instead of 73 s at opt-level 1, for byte-identical modules split in 0.5 s instead
  # of 0.1 s (2026-12-03).
  install_unoptimized wasm_split_cli_support --version "$WASM_SPLIT_VERSION" --features build-binary --locked
fi

apt_done
# binaryen 132 from npm for wasm-opt: Debian's binaryen 108 builds a page that stays blank.
if [ "$(wasm-opt --version 2>/dev/null | awk '{print $3}')" != "132" ]; then
  step "npm: binaryen 132"
  (cd tools/binaryen && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ ! -d tests/browser/node_modules/playwright-core ]; then
  step "npm: playwright-core (drives Debian's chromium)"
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi

# The Kubernetes manifest checker (scripts/check_manifests.sh): PyPI's kubernetes-validate, which bundles the
# Kubernetes JSON schemas, pinned in deploy/kubernetes/requirements.txt, in a venv outside the clone.
kube_venv="${LOADSHAPE_KUBE_VENV:-$HOME/.cache/loadshape-kube-validate}"
kube_want="$(awk -F'==' '/^kubernetes-validate==/ {print $2}' deploy/kubernetes/requirements.txt)"
if [ "$("$kube_venv/bin/pip" show kubernetes-validate 2>/dev/null | awk '/^Version/ {print $2}')" != "$kube_want" ]; then
  step "pip: kubernetes-validate $kube_want (Kubernetes schemas for deploy/kubernetes/)"
  python3 -m venv "$kube_venv"
  "$kube_venv/bin/pip" install -q -r deploy/kubernetes/requirements.txt
fi

if [ "$mode" = --with-real-server ]; then
  step "real server: llama.cpp llama-server + tiny model (built once, cached in ${LOADSHAPE_LLAMA_DIR:-~/.cache/loadshape-llama})"
  bash "$LOADSHAPE_ROOT/scripts/realserver/setup.sh"
fi
