#!/usr/bin/env bash
# Run the boundary checker against BASE (default origin/main) and pack its
# JSON and JUnit reports into an evidence archive under out/boundaries.
# Without the base ref (a clone with no remote), fall back to the merge base
# with main, and skip with a message when there is no base at all.
set -uo pipefail
cd "$(dirname "$0")/.."
want=${1:-origin/main}
base=$want
if ! git rev-parse --verify -q "$base^{commit}" >/dev/null; then
  if git rev-parse --verify -q "main^{commit}" >/dev/null && [[ $(git rev-parse HEAD) != $(git rev-parse main) ]]; then
    base=$(git merge-base HEAD main)
    echo "boundaries: $want not found; checking against the merge base with main ($base)"
  else
    echo "boundaries: no base ref ($want does not exist here): nothing to compare against, skipping"
    exit 0
  fi
fi
out=out/boundaries
mkdir -p "$out"
go run ./boundaries --base "$base" --merge-base --format json --output "$out/report.json"
status=$?
go run ./boundaries --base "$base" --merge-base --format junit --output "$out/junit.xml" >/dev/null
go run ./evidence pack --kind boundaries --attach "$out/report.json" --attach "$out/junit.xml" \
  --out "$out" --command "go run ./boundaries --base $base --merge-base" --exit-status "$status" || exit 2
exit "$status"
