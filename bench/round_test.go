package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The round workloads exist for redq and the sorted-set round baseline, at 10k and 1M
// items by the default -n; the baseline takes part in nothing else.
func TestRoundWorkloads(t *testing.T) {
	z := sizes{100_000}
	byName := map[string]workload{}
	for _, w := range roundWorkloads(z, 4000) {
		byName[w.name] = w
	}
	for _, name := range []string{"round/hand-out-10k", "round/hand-out-1M", "round/steady-10k", "round/expire-1M"} {
		w, found := byName[name]
		if !found {
			t.Errorf("no workload %s at n=100k: %v", name, byName)
			continue
		}
		for _, s := range allSystems() {
			if got, want := w.takesPart(s.Name()), s.Name() == "redq" || s.Name() == zsetRoundName; got != want {
				t.Errorf("%s: takesPart(%q) = %v, want %v", name, s.Name(), got, want)
			}
		}
		if _, err := w.run(context.Background(), nil, newList()); !errors.Is(err, errNotMeasured) {
			t.Errorf("%s run for the list baseline: %v, want errNotMeasured", name, err)
		}
	}
	if w := byName["round/hand-out-1M"]; !strings.Contains(w.about, "100000 of 1000000") {
		t.Errorf("hand-out-1M: %s", w.about)
	}
	if w := byName["round/steady-10k"]; !strings.Contains(w.about, "over one period of 2.5s") {
		t.Errorf("steady-10k: %s", w.about)
	}
	for _, w := range append(workloads(z, 200, 5000), schedWorkloads(z)...) {
		if w.takesPart(zsetRoundName) {
			t.Errorf("the round baseline takes part in %s", w.name)
		}
	}
	for _, m := range []func() (time.Duration, error){
		func() (time.Duration, error) { return zsetRoundSystem{}.Publish(context.Background(), nil, 1, 1, 1) },
		func() (time.Duration, error) { return zsetRoundSystem{}.Recover(context.Background(), nil, 1) },
	} {
		if _, err := m(); !errors.Is(err, errNotMeasured) {
			t.Errorf("the round baseline measured a queue workload: %v", err)
		}
	}
	if p := steadyPeriod(200, 4000); p != time.Second {
		t.Errorf("steadyPeriod(200, 4000) = %s, want the 1s floor", p)
	}
}

// analyseSteady counts duplicates, fairness and lag from issue times.
func TestAnalyseSteady(t *testing.T) {
	p := time.Second
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Two items, each handed out once per period, lags 0, 2, 0 and 1, 3, 0 ms.
	perfect := []handout{
		{0, at(0)}, {0, at(1000)}, {0, at(2002)}, {0, at(3002)},
		{1, at(500)}, {1, at(1501)}, {1, at(2504)}, {1, at(3504)},
	}
	end := at(4100)
	res, err := analyseSteady(perfect, 2, p, end)
	if err != nil {
		t.Fatal(err)
	}
	if res.duplicates != 0 || res.fairness != 1 || res.lagP50 != 0 || res.lagP99 != 3*time.Millisecond {
		t.Fatalf("perfect run: %+v", res)
	}
	// Item 1 handed out twice within a period (two workers took it at
	// 1501 and 1503): a duplicate, and 4 of its hand-outs fall in its
	// first three periods against item 0's 3.
	dup := append(perfect, handout{1, at(1503)})
	res, err = analyseSteady(dup, 2, p, end)
	if err != nil {
		t.Fatal(err)
	}
	if res.duplicates != 1 || res.fairness != 4.0/3 {
		t.Fatalf("run with a duplicate: %+v", res)
	}
	// An item never handed out, or first handed out too late to judge, is
	// an error.
	if _, err := analyseSteady(perfect, 3, p, end); err == nil {
		t.Fatal("an item never handed out passed")
	}
	if _, err := analyseSteady(perfect, 2, p, at(2900)); err == nil {
		t.Fatal("a run shorter than three periods from a first hand-out passed")
	}
	if _, err := analyseSteady([]handout{{5, at(0)}}, 2, p, end); err == nil {
		t.Fatal("an unknown item passed")
	}
}

func TestHandOutTally(t *testing.T) {
	tl := &handOutTally{count: make([]int, 3)}
	if first, err := tl.see([]handout{{0, time.Time{}}, {1, time.Time{}}, {0, time.Time{}}}); err != nil || first != 2 {
		t.Fatalf("see = %d, %v; want 2 first hand-outs", first, err)
	}
	if tl.distinct != 2 || tl.repeats != 1 {
		t.Fatalf("tally %+v", tl)
	}
	if _, err := tl.see([]handout{{3, time.Time{}}}); err == nil {
		t.Fatal("an unknown item passed")
	}
}

// Both rounds hand out every item once in a hand-out run; redq never twice.
func TestRoundHandOut(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	for _, s := range []system{newRedq(time.Second), newZsetRound()} {
		res, err := roundHandOut(ctx, e, s.(rounder), 600, 250)
		if err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		if res.rate <= 0 || res.batchRate <= 0 {
			t.Errorf("%s: %+v", s.Name(), res)
		}
		if s.Name() == "redq" && res.duplicates != 0 {
			t.Errorf("redq handed out %d duplicates", res.duplicates)
		}
		t.Logf("%s: %+v", s.Name(), res)
	}
}

// A steady run of redq has no duplicates; the baseline's is measured.
func TestRoundSteady(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	for _, s := range []system{newRedq(time.Second), newZsetRound()} {
		res, err := roundSteady(ctx, e, s.(rounder), 100, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		if s.Name() == "redq" && res.duplicates != 0 {
			t.Errorf("redq handed out %d duplicates", res.duplicates)
		}
		t.Logf("%s: %+v", s.Name(), res)
	}
}

// Both remove every expired item; the PING goes on meanwhile.
func TestRoundExpire(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	for _, s := range []system{newRedq(time.Second), newZsetRound()} {
		took, ping, err := roundExpire(ctx, e, s.(rounder), 3000)
		if err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		if took <= 0 || ping <= 0 {
			t.Errorf("%s: took %s, longest PING %s", s.Name(), took, ping)
		}
	}
}

// A whole run of the round workloads on the smallest sizes passes its
// checks and shows both systems.
func TestRunRoundWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs redis-server")
	}
	e := testEnv(t)
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"-redis", "redis://" + e.opts.Addr + "/0", "-n", "100", "-reps", "1",
		"-only", "round", "-quiet", "-out", t.TempDir()}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s\nstdout:\n%s", code, stderr.String(), stdout.String())
	}
	for _, want := range []string{"round/hand-out-100", "round/hand-out-1k", "round/steady-100", "round/expire-1k",
		"rate, batch 100", "duplicates", "fairness", "p99 freshness lag", "longest PING", zsetRoundName} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
}

// Round runs leave no goroutines behind (the redq waiters and
// connections are closed).
func TestRoundNoLeak(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	noGoroutineLeak(t, func() {
		t.Helper()
		for _, s := range []system{newRedq(time.Second), newZsetRound()} {
			if _, err := roundHandOut(ctx, e, s.(rounder), 300, 100); err != nil {
				t.Fatalf("%s: %v", s.Name(), err)
			}
		}
	})
}
