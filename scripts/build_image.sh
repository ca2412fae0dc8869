#!/usr/bin/env bash
# The loadshape container image, built offline: a static (musl) release binary made on this host, then an image
# FROM scratch (deploy/kubernetes/Containerfile.prebuilt: the binary with the page embedded, a CA bundle, user
# 65532), then checked by running it with no network (`--version` and a short `simulate`) and by its default command
# (`serve --listen 0.0.0.0`) answering `/` with the page. Idempotent: a second run rebuilds nothing that
# is up to date and re-tags the same image.
#
#   bash scripts/build_image.sh                 # IMAGE=loadshape:latest, podman (else docker)
#   IMAGE=registry.example/loadshape:0.1 ENGINE=docker bash scripts/build_image.sh
#   SAVE=loadshape.tar bash scripts/build_image.sh   # also write the image as an archive (kind load image-archive)
#
# Needs: rustup's x86_64-unknown-linux-musl target and musl-gcc (Debian's musl-tools), cmake (aws-lc-rs), podman
# or docker. What is missing is installed when this can (rustup from the Rust registry; apt-get as root), else named.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/env.sh"
TARGET=x86_64-unknown-linux-musl
IMAGE="${IMAGE:-loadshape:latest}"
ENGINE="${ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}"

step "toolchain: $TARGET, musl-gcc, cmake, $ENGINE"
if ! rustup target list --installed | grep -qx "$TARGET"; then
  rustup target add "$TARGET"
fi
missing=()
command -v musl-gcc >/dev/null || missing+=(musl-tools)
command -v cmake >/dev/null || missing+=(cmake)
command -v "$ENGINE" >/dev/null || missing+=("$ENGINE")
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y --no-install-recommends "${missing[@]}"
  else
    echo "build_image.sh: install ${missing[*]} first (Debian: apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
CA=/etc/ssl/certs/ca-certificates.crt
[ -r "$CA" ] || { echo "build_image.sh: $CA is missing (Debian: apt-get install ca-certificates)" >&2; exit 1; }

if [ ! -f "$ROOT/dist/index.html" ]; then
  step "the page (trunk build --release), which the release binary embeds"
  (cd "$ROOT" && trunk build --release --offline)
fi

step "static release binary (cargo build --release --target $TARGET)"
cargo build --release --locked -p loadshape --target "$TARGET"
BIN="$CARGO_TARGET_DIR/$TARGET/release/loadshape"
# A FROM-scratch image has no loader and no libc: the binary must be static.
if ! file "$BIN" | grep -q 'statically linked\|static-pie linked'; then
  echo "build_image.sh: $BIN is not statically linked: $(file "$BIN")" >&2
  exit 1
fi
ls -l "$BIN"

step "image $IMAGE ($ENGINE build, FROM scratch)"
CTX="$(mktemp -d)"
trap 'rm -rf "$CTX"' EXIT
# The release profile keeps line tables (debug = "line-tables-only": 85 MB); the image drops the DWARF and keeps
# the symbol names, so a backtrace still names functions (19 MB).
if command -v strip >/dev/null; then
  strip --strip-debug -o "$CTX/loadshape" "$BIN"
else
  cp "$BIN" "$CTX/loadshape"
fi
cp "$CA" "$CTX/ca-certificates.crt"
mkdir "$CTX/data"
"$ENGINE" build -f "$ROOT/deploy/kubernetes/Containerfile.prebuilt" -t "$IMAGE" "$CTX"

step "run it with no network: --version, then a short simulate"
# RUN_OPTS: extra `run` options. Unset, a plain run is tried first; where it fails under podman (e.g. a VM
# without CAP_SYS_RESOURCE, where crun cannot raise the open-files limit to its default, and a machine mixing
# cgroup v1 and v2, which crun refuses), runc (Debian's `runc`) is used with limits that raise nothing.
if [ -z "${RUN_OPTS+set}" ]; then
  RUN_OPTS=""
  if ! "$ENGINE" run --rm --network none "$IMAGE" --version >/dev/null 2>"$CTX/run.err"; then
    echo "plain '$ENGINE run' failed: $(tail -n 1 "$CTX/run.err")"
    if [ "$ENGINE" = podman ] && command -v runc >/dev/null; then
      # Podman's own default process limit (32768), or this shell's when lower: never a raise.
      nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
      RUN_OPTS="--runtime runc --ulimit nofile=$(ulimit -Sn):$(ulimit -Hn) --ulimit nproc=$nproc:$nproc"
      echo "retrying with: $RUN_OPTS"
    else
      echo "build_image.sh: the image does not run here; install runc (podman --runtime runc) or set RUN_OPTS" >&2
      exit 1
    fi
  fi
fi
# shellcheck disable=SC2086 # RUN_OPTS is a list of options
"$ENGINE" run --rm --network none $RUN_OPTS "$IMAGE" --version
# The image's user (65532, not root) reads the scenario from standard input: nothing is mounted.
"$ENGINE" run --rm -i --network none $RUN_OPTS "$IMAGE" simulate - < "$ROOT/examples/engine-fleet-sessions.json" | tail -n 12
uid="$("$ENGINE" image inspect "$IMAGE" --format '{{.Config.User}}')"
[ "$uid" = "65532:65532" ] || { echo "build_image.sh: the image runs as '$uid', not 65532:65532" >&2; exit 1; }

step "its default command serves the embedded page (a token set, as a non-loopback bind requires)"
# shellcheck disable=SC2086 # RUN_OPTS is a list of options
cid="$("$ENGINE" run -d --rm $RUN_OPTS -p 127.0.0.1::8080 -e LOADSHAPE_TOKEN="$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" "$IMAGE")"
trap '"$ENGINE" rm -f "$cid" >/dev/null 2>&1; rm -rf "$CTX"' EXIT
port="$("$ENGINE" port "$cid" 8080 | head -n 1 | sed 's/.*://')"
ok=""
for _ in $(seq 50); do
  # The agent answers the Host it serves on (its port inside the container), not the host's mapped port.
  if curl -fsS -H 'Host: 127.0.0.1:8080' "http://127.0.0.1:$port/" 2>/dev/null | grep -q '_bg.wasm'; then ok=1; break; fi
  sleep 0.2
done
[ -n "$ok" ] || { "$ENGINE" logs "$cid"; echo "build_image.sh: the image's serve did not answer / with the page" >&2; exit 1; }
echo "serve in the image answered / with the page"
"$ENGINE" rm -f "$cid" >/dev/null

size="$("$ENGINE" image inspect "$IMAGE" --format '{{.Size}}')"
echo "image $IMAGE: $size bytes ($(( size / 1024 / 1024 )) MiB), user $uid, entrypoint /loadshape"
if [ -n "${SAVE:-}" ]; then
  rm -f "$SAVE"
  "$ENGINE" save -o "$SAVE" "$IMAGE"
  echo "saved to $SAVE ($(stat -c %s "$SAVE") bytes)"
fi
