#!/usr/bin/env bash
# Fetch everything the server and its tests need, once: Debian packages,
# the prebuilt ggml libraries (npm packages), the Silero VAD weights
# (converted to GGUF), the onnxruntime reference, and the Go modules.
# Idempotent: a second run checks stamps and does no network work.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=${AUDIOPROOF_DEPS_DIR:-.deps}
mkdir -p "$DEPS"

say() { printf 'deps: %s\n' "$*"; }

# --- Debian packages -------------------------------------------------------
PKGS=(espeak-ng libespeak-ng1 sox libvulkan1 mesa-vulkan-drivers nodejs npm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm may come from elsewhere than Debian: accept them on PATH.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]}")
fi
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "deps: missing Debian packages: ${missing[*]}" >&2
    echo "deps: install them as root, then run make deps again:" >&2
    echo "      sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  say "Debian packages present"
fi

# --- ggml libraries (CPU and Vulkan builds) ---------------------------------
bash scripts/fetch-ggml.sh "$DEPS/ggml"

# --- Silero VAD weights, converted to GGUF ---------------------------------
bash scripts/fetch-silero.sh --onnxruntime "$DEPS"

# --- Go modules -------------------------------------------------------------
if [[ ! -f "$DEPS/go-modules.stamp" || go.sum -nt "$DEPS/go-modules.stamp" ]]; then
  say "downloading Go modules"
  go mod download
  touch "$DEPS/go-modules.stamp"
else
  say "Go modules present"
fi
say "ready in $DEPS"
