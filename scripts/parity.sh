#!/usr/bin/env bash
# make parity: the four variants (upstream built from BASE, unflagged,
# flagged with slots omitted, flagged with slots=1) on every backend, then
# verify the evidence archive the run left in out/parity (name in LATEST).
# In CI both CPU and Vulkan are required, so a missing Vulkan device fails.
set -uo pipefail
cd "$(dirname "$0")/.."
backends=auto
[[ "${CI:-}" == true ]] && backends=cpu,vulkan
go run ./checkpoints run --plan default --base "${1:-origin/main}" --out out/parity --backends "$backends"
status=$?
if [[ -f out/parity/LATEST ]]; then
  go run ./evidence verify "out/parity/$(cat out/parity/LATEST)" || status=1
fi
exit $status
