#!/usr/bin/env bash
# Runs the tap suite and ends with the plain summary line CI reads:
#   N passed, N failed
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
npx tap "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# tap's last line: "# { total: 40, pass: 38, fail: 1, skip: 1 }"
summary=$(grep -E '^# \{ total: ' "$log" | tail -n 1)
pass=$(sed -nE 's/.*pass: ([0-9]+).*/\1/p' <<<"$summary")
fail=$(sed -nE 's/.*fail: ([0-9]+).*/\1/p' <<<"$summary")
skip=$(sed -nE 's/.*skip: ([0-9]+).*/\1/p' <<<"$summary")
pass=${pass:-0}
fail=${fail:-0}
if [ "$status" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; fi
if [ -n "${skip:-}" ]; then
  echo "${pass} passed, ${fail} failed, ${skip} skipped"
else
  echo "${pass} passed, ${fail} failed"
fi
exit "$status"
