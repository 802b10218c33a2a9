#!/usr/bin/env bash
# `make bench`: runs every benchmark compiled from bench/*.ts (dist/bench/*.js),
# prints each one's figures as it goes and writes them all to bench/RESULTS.md
# with the machine and the date. A benchmark that fails or overruns
# its time limit is recorded as such; the others still run. The limit is
# BENCH_TIMEOUT (seconds) when set, else the `bench-timeout: N` a benchmark's
# source declares, else 180.
# BENCH_ONLY="bus activity" runs a subset (and RESULTS.md then holds only it);
# with BENCH_MERGE=1 their sections replace the same sections of the existing
# RESULTS.md and the rest is kept (`make bench-distributed`).
# Lines a benchmark prints starting with "~ " are progress: shown, not recorded.
# Its lines starting with "|" are Markdown tables: recorded as tables, the
# other lines in code blocks, in the order printed.
# bench/media-upload needs ffmpeg and ~1.5 GB free in TMPDIR (a 500 MB video, its segments, the joined file).
set -uo pipefail
cd "$(dirname "$0")/.."

merge=${BENCH_MERGE:-}
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
  declared=$(grep -m1 -oE 'bench-timeout: [0-9]+' "$src" | grep -oE '[0-9]+')
  timeout_s=${BENCH_TIMEOUT:-${declared:-180}}
  if [ -n "$merge" ]; then
    echo "(measured alone by \`BENCH_ONLY=$name\` on $(date -u '+%Y-%m-%d %H:%M UTC') at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); the header above is the last full \`make bench\`'s)" >>"$tmp"
    echo >>"$tmp"
  fi
  start=$(date +%s)
  # --kill-after leaves time for a benchmark to stop what it started (bench/distributed: make down).
  LOG_LEVEL=${LOG_LEVEL:-silent} timeout --kill-after=60 "$timeout_s" node "$js" 2>&1 | tee "$tmp.out"
  status=${PIPESTATUS[0]}
  elapsed=$(( $(date +%s) - start ))
  # In the order printed: text in code blocks, the table lines (Markdown already) outside them,
  # blank lines at the edges of a code block dropped; progress lines are not kept.
  awk '
    /^~ / { next }
    /^\|/ { if (incode) { print "```"; incode = 0 } if (!intable) print ""; intable = 1; blanks = 0; print; next }
    /^[[:space:]]*$/ { blanks++; next }
    {
      if (intable) { print ""; intable = 0 }
      if (!incode) { print "```"; incode = 1 } else for (; blanks > 0; blanks--) print ""
      blanks = 0
      print
    }
    END { if (incode) print "```" }
  ' "$tmp.out" >>"$tmp"
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

if [ -n "$merge" ] && [ -n "${BENCH_ONLY:-}" ] && [ -f "$results" ]; then
  # Each `## bench/<name>` section just measured replaces its namesake (up to the next `## `);
  # a new one goes before the profiles section (or at the end).
  awk -v fresh="$tmp" '
    BEGIN {
      while ((getline line < fresh) > 0) {
        if (line ~ /^## bench\//) { name = line; order[++n] = name; body[name] = line "\n"; continue }
        if (name != "") body[name] = body[name] line "\n"
      }
    }
    function flush_new() { for (i = 1; i <= n; i++) if (!(order[i] in done)) { printf "%s\n", body[order[i]]; done[order[i]] = 1 } }
    /^## / {
      skipping = 0
      if ($0 in body) { sub(/\n+$/, "\n", body[$0]); printf "%s\n", body[$0]; done[$0] = 1; skipping = 1; next }
      if ($0 !~ /^## bench\//) flush_new()
    }
    !skipping { print }
    END { flush_new() }
  ' "$results" >"$tmp.merged"
  # The profiles section is bench/PROFILES.md's, as after a full run.
  if [ -f bench/PROFILES.md ]; then
    first=$(head -n 1 bench/PROFILES.md)
    awk -v first="$first" '$0 == first { exit } { print }' "$tmp.merged" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >"$tmp.cut"
    { cat "$tmp.cut"; echo; cat bench/PROFILES.md; } >"$tmp.merged"
    rm -f "$tmp.cut"
  fi
  mv "$tmp.merged" "$results"
  rm -f "$tmp"
else
  mv "$tmp" "$results"
fi
trap 'rm -f "$tmp.out"' EXIT
if [ "$failed" -gt 0 ]; then echo "==> wrote $results ($failed benchmark(s) failed)"; else echo "==> wrote $results"; fi
[ "$failed" -eq 0 ]
