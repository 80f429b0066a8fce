#!/usr/bin/env bash
# make bench: every speed figure beside its reference, measured in the same run.
#  1. Silero VAD: ggml CPU and Vulkan against onnxruntime (one thread).
#  2. Runtimes: the fixture model at 1, 2, 4, 8 slots against the legacy
#     runtime (req/s, p50/p99), and the admission overhead per request.
#  3. Boundary checker: a generated repository of thousands of files against
#     `git diff --name-only` for the same check.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== 1/3 Silero VAD: ggml vs onnxruntime =="
bash scripts/bench-vad.sh
echo
echo "== 2/3 runtimes: parallel slots vs legacy (fixture model) =="
go test -run '^$' -bench 'BenchmarkFixtureSlots' -benchtime "${BENCHTIME:-400x}" ./runtimes/parallel/ | grep -vE '^(goos|goarch|pkg|cpu):' | tee "$tmp/slots.txt"
# req/s of each variant as a ratio to the legacy runtime measured above
awk '/^BenchmarkFixtureSlots/ { for (i = 1; i <= NF; i++) if ($(i+1) == "req/s") rps = $i;
       name = $1; sub(/^BenchmarkFixtureSlots\//, "", name); sub(/-[0-9]+$/, "", name);
       if (name == "legacy") base = rps; else if (base > 0) printf "  %-22s %8.1f req/s = %.2fx legacy\n", name, rps, rps / base }' "$tmp/slots.txt"
go test -run '^$' -bench 'BenchmarkAdmission' ./runtimes/parallel/ | grep -vE '^(goos|goarch|pkg|cpu):'
echo
echo "== 3/3 boundary checker vs git diff --name-only =="
go test -run '^$' -bench . -benchtime 3x ./boundaries/... | grep -vE '^(goos|goarch|pkg|cpu):' | tee "$tmp/bound.txt"
awk '/^BenchmarkCheck\// { split($1, p, "/"); kind = p[2]; tree = p[3]; sub(/-[0-9]+$/, "", tree); t[kind "/" tree] = $3 }
     END { for (k in t) { split(k, q, "/"); if (q[1] == "boundaries" && t["git-diff-name-only/" q[2]] > 0)
             printf "  %-8s boundaries = %.2fx the time of git diff --name-only\n", q[2], t[k] / t["git-diff-name-only/" q[2]] } }' "$tmp/bound.txt"
