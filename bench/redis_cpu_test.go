package main

import (
	"context"
	"strings"
	"testing"
)

// The meter counts only what Redis does between a system's marks, adds up
// several timed parts, and refuses to report a workload whose system
// marked nothing.
func TestRedisCPUCountsTheTimedPartOnly(t *testing.T) {
	e := testEnv(t)
	ctx := testContext(t)
	// burn keeps Redis busy with a script of n additions
	burn := func(n int) {
		t.Helper()
		if err := e.admin.Eval(ctx, `local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 1`, nil, n).Err(); err != nil {
			t.Fatal(err)
		}
	}
	mctx, cpu := withRedisCPU(ctx, e.admin)
	// part runs burn(n) as one timed part and returns the total so far
	part := func(n int) float64 {
		t.Helper()
		cpuStart(mctx)
		burn(n)
		cpuStop(mctx)
		total, err := cpu.per(1)
		if err != nil {
			t.Fatal(err)
		}
		return total
	}

	if _, err := cpu.per(1); err == nil || !strings.Contains(err.Error(), "no timed part") {
		t.Errorf("nothing marked: err = %v, want a refusal", err)
	}
	first := part(20_000_000)
	if first < 10_000 {
		t.Errorf("a script of 20M additions cost %.0f µs of Redis CPU, want at least 10 ms", first)
	}
	// as much work again outside the marks, then a small second part: the
	// total is the two parts, not the work between them
	burn(20_000_000)
	both := part(1_000_000)
	if both <= first || both > first*1.5 {
		t.Errorf("a big part (%.0f µs), big work outside the marks, then a small part: total %.0f µs, want a little over the first part", first, both)
	}
	if half, _ := cpu.per(2); half != both/2 {
		t.Errorf("per 2 units: %.0f µs, want %.0f", half, both/2)
	}
	// a context without a meter marks nothing and does not panic
	cpuStart(context.Background())
	cpuStop(context.Background())
}
