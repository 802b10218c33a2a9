#!/usr/bin/env bash
# Runs the tap suite and ends with the plain summary line CI reads:
#   N passed, N failed
#
# tap starts files in alphabetical order, so the long system tests (the
# fault tests and `make up`, each a whole system with kills, 1-2 minutes;
# the fuzz) would start last and run on alone at the end. They run instead in
# a second tap process from the start, one after the other, beside the rest
# of the suite (TEST_JOBS, default 4): the suite's wall time is about the
# rest's, not the rest's plus theirs.
# Arguments (test files) run everything named in one tap process instead.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

LONG=(test/system/faults-processes.test.ts test/system/faults-infra.test.ts test/system/redis-cluster-failover.test.ts test/common/up.test.ts test/system/tracing.test.ts test/system/fuzz.test.ts)

# tap's last line: "# { total: 40, pass: 38, fail: 1, skip: 1 }"
count() {
  local summary
  summary=$(grep -E '^# \{ total: ' "$1" | tail -n 1)
  sed -nE "s/.*$2: ([0-9]+).*/\1/p" <<<"$summary"
}

if [ "$#" -gt 0 ]; then
  npx tap "$@" 2>&1 | tee "$logs/main.log"
  statuses=("${PIPESTATUS[0]}")
  parts=(main)
else
  rest=()
  while IFS= read -r f; do
    skip=0
    for l in "${LONG[@]}"; do [ "$f" = "$l" ] && skip=1; done
    [ "$skip" -eq 0 ] && rest+=("$f")
  done < <(find test -name '*.test.ts' | sort)
  # Each is a whole system on a machine the rest of the suite keeps busy: more than .taprc's per-file time.
  npx tap --jobs=1 --timeout=420 "${LONG[@]}" >"$logs/long.log" 2>&1 &
  long_pid=$!
  # The long lane measures recovery: a killed service back within a bound, publishers never kept
  # waiting past their timeout. On 2 cores beside four busy test files, CI twice saw the processes
  # it restarted take over a minute to answer. The rest of the suite yields the CPU to it (nice
  # only weighs CPU shares: an idle long lane costs the rest nothing); its tests have no such bounds.
  nice -n "${TEST_REST_NICE:-5}" npx tap --jobs="${TEST_JOBS:-4}" "${rest[@]}" 2>&1 | tee "$logs/main.log"
  main_status=${PIPESTATUS[0]}
  wait "$long_pid"
  long_status=$?
  echo "==> the long system tests (run beside the rest): ${LONG[*]}"
  cat "$logs/long.log"
  statuses=("$main_status" "$long_status")
  parts=(main long)
fi

pass=0 fail=0 skip=0 status=0
for i in "${!parts[@]}"; do
  log="$logs/${parts[$i]}.log"
  s=${statuses[$i]}
  p=$(count "$log" pass) f=$(count "$log" fail) k=$(count "$log" skip)
  p=${p:-0} f=${f:-0} k=${k:-0}
  # A run that failed without a failing assertion (a crash, a timeout) still counts as a failure.
  if [ "$s" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  [ "$s" -ne 0 ] && status=$s
  pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + k))
done
if [ "$skip" -gt 0 ]; then
  echo "${pass} passed, ${fail} failed, ${skip} skipped"
else
  echo "${pass} passed, ${fail} failed"
fi
exit "$status"
