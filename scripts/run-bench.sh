#!/usr/bin/env bash
# `make bench`: runs every benchmark compiled from bench/*.ts (dist/bench/*.js),
# prints each one's figures as it goes and writes them all to bench/RESULTS.md
# with the machine and the date. A benchmark that fails or overruns
# BENCH_TIMEOUT (seconds, default 180) is recorded as such; the others still run.
# BENCH_ONLY="bus activity" runs a subset.
# bench/media-upload needs ffmpeg and ~1.5 GB free in TMPDIR (a 500 MB video, its segments, the joined file).
set -uo pipefail
cd "$(dirname "$0")/.."

timeout_s=${BENCH_TIMEOUT:-180}
results=bench/RESULTS.md
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.out"' EXIT

shopt -s nullglob
sources=(bench/*.ts)
if [ -n "${BENCH_ONLY:-}" ]; then
  sources=()
  for name in $BENCH_ONLY; do sources+=("bench/$name.ts"); done
fi
if [ ${#sources[@]} -eq 0 ]; then
  echo "no benchmarks in bench/"
  exit 1
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')
{
  echo "# Benchmark results"
  echo
  echo "Written by \`make bench\` (scripts/run-bench.sh). Each benchmark prints its figures next to a"
  echo "baseline measured in the same run; compare ratios, not absolute numbers, across machines."
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: $(nproc) cpu(s), ${cpu:-unknown cpu}, $(awk '/MemTotal/ {printf "%.1f GiB RAM", $2/1048576}' /proc/meminfo 2>/dev/null)"
  echo "- os: $(uname -sr); node $(node --version); redis $(redis-server --version 2>/dev/null | sed -E 's/.*v=([^ ]+).*/\1/'); librdkafka $(dpkg-query -W -f='${Version}' librdkafka-dev 2>/dev/null || echo '?')"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
} >"$tmp"

failed=0
for src in "${sources[@]}"; do
  name=$(basename "$src" .ts)
  js="dist/bench/$name.js"
  echo "==> bench/$name"
  {
    echo
    echo "## bench/$name"
    echo
  } >>"$tmp"
  if [ ! -f "$js" ]; then
    echo "not built ($js missing: run make build)" | tee -a "$tmp"
    failed=$((failed + 1))
    continue
  fi
  start=$(date +%s)
  LOG_LEVEL=${LOG_LEVEL:-silent} timeout --kill-after=10 "$timeout_s" node "$js" 2>&1 | tee "$tmp.out"
  status=${PIPESTATUS[0]}
  elapsed=$(( $(date +%s) - start ))
  echo '```' >>"$tmp"
  # The table lines are Markdown already: keep them outside the code block.
  grep -v '^|' "$tmp.out" >>"$tmp"
  echo '```' >>"$tmp"
  if grep -q '^|' "$tmp.out"; then
    echo >>"$tmp"
    grep '^|' "$tmp.out" >>"$tmp"
  fi
  if [ "$status" -ne 0 ]; then
    failed=$((failed + 1))
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then note="stopped after ${timeout_s} s"; else note="exit status $status"; fi
    echo "bench/$name FAILED ($note)"
    printf '\n**failed: %s** (%s s)\n' "$note" "$elapsed" >>"$tmp"
  else
    printf '\n(%s s)\n' "$elapsed" >>"$tmp"
  fi
done

# What the profiles showed and what changed because of them (kept by hand, measured with these benches).
if [ -f bench/PROFILES.md ] && [ -z "${BENCH_ONLY:-}" ]; then
  { echo; cat bench/PROFILES.md; } >>"$tmp"
fi

mv "$tmp" "$results"
trap 'rm -f "$tmp.out"' EXIT
if [ "$failed" -gt 0 ]; then echo "==> wrote $results ($failed benchmark(s) failed)"; else echo "==> wrote $results"; fi
[ "$failed" -eq 0 ]
