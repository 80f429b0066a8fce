#!/usr/bin/env bash
# fetch-ggml.sh DEST: fetch the prebuilt ggml shared libraries that audioproof
# loads at run time through purego (no cgo), from the node-llama-cpp npm
# packages, into DEST/cpu (CPU build) and DEST/vulkan (CPU + Vulkan build).
#
# Idempotent: when DEST/VERSION already names the pinned version and every
# library is present, it does nothing. `npm pack` runs no install scripts.
# Default DEST: .deps/ggml (relative to the repository root).
#
# Needs: npm, tar. The Vulkan build also needs the Debian packages libvulkan1
# and mesa-vulkan-drivers at run time (lavapipe when there is no GPU); this
# script does not install them.
set -euo pipefail

NLC_VERSION=3.22.1
GGML_VERSION=0.25.1
GGML_COMMIT=0ad4a86
STAMP="node-llama-cpp=${NLC_VERSION} ggml=${GGML_VERSION} commit=${GGML_COMMIT}"
# sha256 of the npm tarballs, pinned so a changed package is refused.
SHA_CPU=0d953e1503d5ab4608d8ed5b739132308c81ac05ffeb760d2a7f30e08a9f90e0
SHA_VULKAN=e10577190fc4bd1649d3b655588e5c7a85fc6b6dbf7136fee596cbe9e25521e7

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/.deps/ggml}"

complete() {
	[[ -f "$dest/VERSION" ]] || return 1
	[[ "$(head -n1 "$dest/VERSION")" == "$STAMP" ]] || return 1
	[[ -f "$dest/cpu/libggml-base.so" && -f "$dest/cpu/libggml.v0.5.0.so" ]] || return 1
	[[ -f "$dest/vulkan/libggml-base.so" && -f "$dest/vulkan/libggml.vulkan.v0.5.0.so" && -f "$dest/vulkan/libggml-vulkan.so" ]] || return 1
	# Every library recorded at install time is present and unchanged.
	[[ -f "$dest/SHA256SUMS" ]] || return 1
	(cd "$dest" && sha256sum --quiet --check SHA256SUMS >/dev/null 2>&1) || return 1
	return 0
}

if complete; then
	echo "fetch-ggml: $dest already holds $STAMP; nothing to do"
	exit 0
fi

command -v npm >/dev/null || { echo "fetch-ggml: npm is required (apt-get install -y npm)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# unpack PACKAGE BINDIR SUBDIR SHA256: npm pack PACKAGE, check its sha256, copy
# its bins/BINDIR/libggml*.so into DEST/SUBDIR.
unpack() {
	local pkg="$1" bindir="$2" sub="$3" want="$4"
	echo "fetch-ggml: npm pack $pkg@$NLC_VERSION"
	(cd "$tmp" && npm pack --silent "$pkg@$NLC_VERSION" >/dev/null)
	local tgz got
	tgz="$(ls "$tmp"/*.tgz)"
	got="$(sha256sum "$tgz" | cut -d' ' -f1)"
	if [[ "$got" != "$want" ]]; then
		echo "fetch-ggml: $pkg@$NLC_VERSION has sha256 $got, expected $want; refusing it" >&2
		exit 1
	fi
	mkdir -p "$tmp/x-$sub"
	tar -xzf "$tgz" -C "$tmp/x-$sub"
	rm -f "$tgz"
	local src="$tmp/x-$sub/package/bins/$bindir"
	[[ -d "$src" ]] || { echo "fetch-ggml: $pkg has no bins/$bindir/" >&2; exit 1; }
	rm -rf "$dest/$sub.tmp"
	mkdir -p "$dest/$sub.tmp"
	cp "$src"/libggml*.so "$dest/$sub.tmp/"
	[[ -f "$src/LICENSE" ]] && cp "$src/LICENSE" "$dest/$sub.tmp/" || true
	cp "$tmp/x-$sub/package/LICENSE" "$dest/$sub.tmp/LICENSE.node-llama-cpp" 2>/dev/null || true
	rm -rf "$dest/$sub"
	mv "$dest/$sub.tmp" "$dest/$sub"
	echo "fetch-ggml: installed $(ls "$dest/$sub"/libggml*.so | wc -l) libraries into $dest/$sub"
}

mkdir -p "$dest"
rm -f "$dest/VERSION" "$dest/SHA256SUMS"
unpack @node-llama-cpp/linux-x64 linux-x64 cpu "$SHA_CPU"
unpack @node-llama-cpp/linux-x64-vulkan linux-x64-vulkan vulkan "$SHA_VULKAN"
{
	echo "$STAMP"
	echo "source: npm @node-llama-cpp/linux-x64@$NLC_VERSION (sha256 $SHA_CPU)"
	echo "source: npm @node-llama-cpp/linux-x64-vulkan@$NLC_VERSION (sha256 $SHA_VULKAN)"
} >"$dest/VERSION"
(cd "$dest" && sha256sum cpu/*.so vulkan/*.so >SHA256SUMS)
echo "fetch-ggml: done ($STAMP in $dest)"
