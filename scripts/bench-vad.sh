#!/usr/bin/env bash
# bench-vad.sh: real-time factor of the silero_vad family on ggml CPU (one
# thread) and Vulkan, and of onnxruntime (onnxruntime-node, one thread) on the
# same 14.2 s signal (444 chunks) in one run, best of RUNS warm runs each
# (default 5), and the ratio onnxruntime / ggml CPU (above 1: ggml is faster).
# Needs make deps (ggml libraries, weights) plus node and npm.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
runs="${RUNS:-5}"

scripts/fetch-silero.sh --onnxruntime "$root/.deps" 2>/dev/null
ort="$root/.deps/npm-ort"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
clips=(testdata/vad/pauses_16k.wav testdata/vad/speech_16k.wav)
CGO_ENABLED=0 go build -o "$tmp/silero-bench" ./server/families/silero/cmd/silero-bench
"$tmp/silero-bench" -model .deps/models/silero_vad_v5.gguf -backends cpu,vulkan -threads 1 -runs "$runs" \
  -chunks 444 -write-f32 "$tmp/bench.f32" "${clips[@]}" > "$tmp/ggml.jsonl" 2> "$tmp/ggml.log" || {
  cat "$tmp/ggml.log" >&2; exit 1; }
node scripts/vad-reference.mjs bench "$ort" .deps/models/silero_vad_v5.onnx "$tmp/bench.f32" "$runs" > "$tmp/ort.json"

node - "$tmp/ggml.jsonl" "$tmp/ort.json" "$runs" <<'JS'
const fs = require('fs');
const [ggmlFile, ortFile, runs] = process.argv.slice(2);
const rows = fs.readFileSync(ggmlFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const ort = JSON.parse(fs.readFileSync(ortFile, 'utf8'));
const cpu = rows.find((r) => r.backend === 'cpu' && !r.error);
console.log(`Silero VAD v5: ${ort.audio_s.toFixed(2)} s at 16 kHz (${ort.chunks} chunks), best of ${runs} warm runs, 1 thread`);
const fmt = (name, ms, rtf) => console.log(`  ${name.padEnd(44)} ${ms.toFixed(1).padStart(9)} ms   RTF ${rtf.toFixed(5)}`);
for (const r of rows) {
  if (r.error) { console.log(`  ggml ${r.backend}: not measured: ${r.error}`); continue; }
  fmt(`ggml ${r.backend} (${r.device})`, r.best_ms, r.rtf);
}
fmt('onnxruntime-node 1.30.0 cpu', ort.best_ms, ort.rtf);
if (cpu) {
  const ratio = ort.rtf / cpu.rtf;
  console.log(`  ratio onnxruntime RTF / ggml cpu RTF: ${ratio.toFixed(2)}x (${ratio > 1 ? 'ggml CPU is faster' : 'onnxruntime is faster'})`);
}
JS
