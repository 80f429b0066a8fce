#!/usr/bin/env bash
# vad-reference.sh [--regen-clips]: make the silero_vad test clips (espeak-ng +
# sox) when they are missing, and compute their reference probabilities and
# segments with onnxruntime (npm onnxruntime-node@1.30.0, one thread) into
# testdata/vad/golden.json. The clips and the golden file are committed; rerun
# this after changing the clips or the post-processing variants.
# Needs: espeak-ng, sox, node + npm, go. Installs onnxruntime-node (without its
# install script, which wants the internet) under .deps/npm-ort (git-ignored).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="testdata/vad"
regen=0
[[ "${1:-}" == "--regen-clips" ]] && regen=1

for tool in espeak-ng sox node npm go; do
  command -v "$tool" >/dev/null || { echo "vad-reference: $tool is required (apt-get install espeak-ng sox nodejs npm)" >&2; exit 1; }
done

scripts/fetch-silero.sh --onnxruntime "$root/.deps" 2>/dev/null
ort="$root/.deps/npm-ort"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

say() { # say OUT.wav "text": espeak-ng speech (22050 Hz mono)
  espeak-ng -v en-us -s 160 -w "$1" "$2"
}
# sox without dither (-D) and with repeatable noise (-R): regenerating the
# clips gives the same bytes, and the silence clip is digital silence.
sox() { command sox -D -R "$@"; }

make_clips() {
  mkdir -p "$out"
  say "$tmp/s1.wav" "The quick brown fox jumps over the lazy dog near the river bank."
  say "$tmp/s2.wav" "Voice activity detection finds the parts of a recording where somebody speaks."
  say "$tmp/s3.wav" "Please call me back tomorrow morning."
  # Speech with half a second of silence before and after (16 kHz mono).
  sox "$tmp/s1.wav" -r 16000 -b 16 -c 1 "$out/speech_16k.wav" pad 0.5 0.5
  # Digital silence and white noise (repeatable: sox -R).
  sox -n -r 16000 -b 16 -c 1 "$out/silence_16k.wav" trim 0 2
  sox -n -r 16000 -b 16 -c 1 "$out/noise_16k.wav" synth 2 whitenoise vol 0.05
  # Speech, pause, speech, pause, speech.
  sox "$tmp/s3.wav" -r 16000 -c 1 "$tmp/a.wav" pad 0.3 1.0
  sox "$tmp/s2.wav" -r 16000 -c 1 "$tmp/b.wav" pad 0 0.7
  sox "$tmp/s3.wav" -r 16000 -c 1 "$tmp/c.wav" pad 0 0.3
  sox "$tmp/a.wav" "$tmp/b.wav" "$tmp/c.wav" -b 16 "$out/pauses_16k.wav"
  # 8 kHz mono speech with a pause.
  sox "$tmp/s3.wav" "$tmp/s3.wav" -r 8000 -b 16 -c 1 "$out/speech_8k.wav" pad 0.4 0.4
  # 44.1 kHz stereo: speech on the left, the same speech quieter with a
  # little noise on the right.
  sox "$tmp/s3.wav" -r 44100 -c 1 "$tmp/l.wav" pad 0.3 0.3
  sox "$tmp/l.wav" "$tmp/r.wav" vol 0.5
  sox -n -r 44100 -c 1 "$tmp/n.wav" synth "$(soxi -D "$tmp/l.wav")" pinknoise vol 0.01
  sox -m "$tmp/r.wav" "$tmp/n.wav" "$tmp/rn.wav"
  sox -M "$tmp/l.wav" "$tmp/rn.wav" -b 16 "$out/stereo_44k.wav"
}

clips=(speech_16k silence_16k noise_16k pauses_16k speech_8k stereo_44k)
missing=0
for c in "${clips[@]}"; do [[ -f "$out/$c.wav" ]] || missing=1; done
if [[ $regen == 1 || $missing == 1 ]]; then
  echo "vad-reference: making clips in $out" >&2
  make_clips
fi

files=()
for c in "${clips[@]}"; do files+=("$out/$c.wav"); done
go run scripts/vad-reference.go -out "$tmp/prep" "${files[@]}"
node scripts/vad-reference.mjs golden "$ort" .deps/models/silero_vad_v5.onnx "$tmp/prep" "$out/golden.json" "${files[@]}"
echo "vad-reference: wrote $out/golden.json" >&2
