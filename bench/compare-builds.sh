#!/usr/bin/env bash
# compare-builds.sh runs engine benchmarks of two builds of redq in
# alternating rounds on this machine and prints, per benchmark, each
# build's median ns/op and the median of the per-round ratios after/before.
# Shared machines drift; alternating rounds and per-round ratios keep the
# comparison fair. Each test binary starts its own redis-server.
#
# usage: bench/compare-builds.sh BEFORE_REV AFTER_REV [ROUNDS] [BENCH_REGEXP] [BENCHTIME]
# e.g.:  bench/compare-builds.sh 9612c3c HEAD 8 'BenchmarkPublish/(single-1goroutine|batch100)$' 2s
set -euo pipefail
before=${1:?before revision}
after=${2:?after revision}
rounds=${3:-6}
bench=${4:-'BenchmarkPublish/(single-1goroutine|batch100)$'}
benchtime=${5:-2s}

root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
cleanup() {
  git -C "$root" worktree remove --force "$work/before" >/dev/null 2>&1 || true
  git -C "$root" worktree remove --force "$work/after" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

for side in before after; do
  rev=${!side}
  git -C "$root" worktree add --detach "$work/$side" "$rev" >/dev/null 2>&1
  (cd "$work/$side" && go test -c -o "$work/$side.test" .)
  echo "built $side: $(git -C "$root" log --oneline -1 "$rev")" >&2
done

out=$work/results
for r in $(seq 1 "$rounds"); do
  for side in before after; do
    REDQ_REQUIRE_REDIS=1 "$work/$side.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" 2>/dev/null |
      awk -v r="$r" -v s="$side" '/^Benchmark/ { print r, s, $1, $3 }' >>"$out"
  done
  echo "round $r/$rounds done" >&2
done

# median of a list of numbers, one per line
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-50s %12s %12s %10s\n' benchmark "before ns/op" "after ns/op" after/before
for b in $(awk '{ print $3 }' "$out" | sort -u); do
  mb=$(awk -v b="$b" '$3 == b && $2 == "before" { print $4 }' "$out" | median)
  ma=$(awk -v b="$b" '$3 == b && $2 == "after" { print $4 }' "$out" | median)
  ratio=$(awk -v b="$b" '$3 == b { v[$1 " " $2] = $4; rs[$1] = 1 }
    END { for (r in rs) if ((r " before") in v && (r " after") in v) print v[r " after"] / v[r " before"] }' "$out" | median)
  printf '%-50s %12.0f %12.0f %10.3f\n' "$b" "$mb" "$ma" "$ratio"
done
