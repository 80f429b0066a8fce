#!/usr/bin/env bash
# Run every Go fuzz target in the module for a short time each.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-30s}
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
  pkg=./$(dirname "${f#./}")
  for name in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
    echo "fuzz: $pkg $name for $t"
    go test -run='^$' -fuzz="^${name}\$" -fuzztime="$t" "$pkg"
  done
done
