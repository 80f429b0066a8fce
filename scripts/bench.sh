#!/usr/bin/env bash
# make bench: every speed figure beside its reference, measured in the same run.
#  1. Silero VAD: ggml CPU and Vulkan against onnxruntime (one thread).
#  2. Runtimes: the fixture model at 1, 2, 4, 8 slots against the legacy
#     runtime (req/s, p50/p99), and the admission overhead per request.
#  3. Boundary checker: a generated repository of thousands of files against
#     `git diff --name-only` for the same check.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== 1/3 Silero VAD: ggml vs onnxruntime =="
bash scripts/bench-vad.sh
echo
echo "== 2/3 runtimes: parallel slots vs legacy (fixture model) =="
go test -run '^$' -bench 'BenchmarkFixtureSlots' -benchtime "${BENCHTIME:-400x}" ./runtimes/parallel/ | grep -vE '^(goos|goarch|pkg|cpu):'
go test -run '^$' -bench 'BenchmarkAdmission' ./runtimes/parallel/ | grep -vE '^(goos|goarch|pkg|cpu):'
echo
echo "== 3/3 boundary checker vs git diff --name-only =="
go test -run '^$' -bench . -benchtime 3x ./boundaries/... | grep -vE '^(goos|goarch|pkg|cpu):'
