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
	burn := func(n int) {
		t.Helper()
		// a script that keeps Redis busy for a while
		if err := e.admin.Eval(ctx, `local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 1`, nil, n).Err(); err != nil {
			t.Fatal(err)
		}
	}

	mctx, cpu := withRedisCPU(ctx, e.admin)
	if _, err := cpu.per(1); err == nil || !strings.Contains(err.Error(), "no timed part") {
		t.Errorf("nothing marked: err = %v, want a refusal", err)
	}
	cpuStart(mctx)
	burn(20_000_000)
	cpuStop(mctx)
	first, err := cpu.per(1)
	if err != nil {
		t.Fatal(err)
	}
	if first < 10_000 {
		t.Errorf("a script of 20M additions cost %.0f µs of Redis CPU, want at least 10 ms", first)
	}
	// work outside the marks does not count
	burn(20_000_000)
	if again, _ := cpu.per(1); again != first {
		t.Errorf("after work outside the marks: %.0f µs, want still %.0f", again, first)
	}
	// a second part adds up
	cpuStart(mctx)
	burn(20_000_000)
	cpuStop(mctx)
	both, err := cpu.per(1)
	if err != nil {
		t.Fatal(err)
	}
	if both < first*1.5 {
		t.Errorf("two parts: %.0f µs, want about twice the first part's %.0f", both, first)
	}
	if half, _ := cpu.per(2); half != both/2 {
		t.Errorf("per 2 units: %.0f µs, want %.0f", half, both/2)
	}
	// a context without a meter marks nothing and fails nothing
	cpuStart(context.Background())
	cpuStop(context.Background())
}
