package main

import (
	"context"
	"testing"
	"time"
)

// baselineSystems returns the hand-written systems under test.
func baselineSystems() []system { return []system{newStreams(), newList()} }

// baselineRun runs f for each hand-written system as a parallel subtest
// with its own redis-server and a context that ends before the test's
// deadline.
func baselineRun(t *testing.T, f func(t *testing.T, ctx context.Context, e *env, s system)) {
	t.Helper()
	for _, s := range baselineSystems() {
		t.Run(s.Name(), func(t *testing.T) {
			t.Parallel()
			e := testEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			t.Cleanup(cancel)
			f(t, ctx, e, s)
		})
	}
}

// baselineKeys returns the number of keys in e's database.
func baselineKeys(t *testing.T, ctx context.Context, e *env) int64 {
	t.Helper()
	n, err := e.admin.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("DBSIZE: %v", err)
	}
	return n
}

func TestBaselineNames(t *testing.T) {
	if got := newStreams().Name(); got != "streams" {
		t.Errorf("newStreams().Name() = %q, want streams", got)
	}
	if got := newList().Name(); got != "list" {
		t.Errorf("newList().Name() = %q, want list", got)
	}
}

func TestBaselinePublish(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		for _, c := range []struct{ goroutines, perCall int }{{1, 1}, {8, 1}, {1, 100}, {3, 7}} {
			d, err := s.Publish(ctx, e, 200, c.goroutines, c.perCall)
			if err != nil {
				t.Fatalf("Publish(200, %d goroutines, %d per call): %v", c.goroutines, c.perCall, err)
			}
			t.Logf("Publish(200, %d goroutines, %d per call): %s", c.goroutines, c.perCall, d)
			if d <= 0 || d > 10*time.Second {
				t.Errorf("Publish(200, %d goroutines, %d per call) took %s", c.goroutines, c.perCall, d)
			}
		}
	})
}

func TestBaselineEndToEnd(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		for _, cfg := range []e2eConfig{
			{N: 1000, Consumers: 10, Prefetch: 1000, PayloadSize: 100},
			{N: 1000, Batch: 100, Prefetch: 1000, PayloadSize: 100},
			{N: 50, Consumers: 10, Prefetch: 1000, PayloadSize: 64 << 10},
		} {
			d, err := s.EndToEnd(ctx, e, cfg)
			if err != nil {
				t.Fatalf("EndToEnd(%+v): %v", cfg, err)
			}
			t.Logf("EndToEnd(%+v): %s", cfg, d)
			if d <= 0 || d > 10*time.Second {
				t.Errorf("EndToEnd(%+v) took %s", cfg, d)
			}
		}
		if _, err := s.EndToEnd(ctx, e, e2eConfig{N: 10, PayloadSize: 100}); err == nil {
			t.Error("EndToEnd with neither consumers nor batch: no error")
		}
	})
}

func TestBaselineSteady(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		cfg := steadyConfig{
			Rate: 500, Duration: time.Second, Producers: 4, Consumers: 10, Prefetch: 1000,
			Payload: 100, DrainLimit: 10 * time.Second,
		}
		r, err := s.Steady(ctx, e, cfg)
		if err != nil {
			t.Fatalf("Steady: %v", err)
		}
		t.Logf("Steady: published %d, consumed %d in %s, p50 %s, p99 %s",
			r.Published, r.Consumed, r.Elapsed, percentile(r.Latencies, 0.5), percentile(r.Latencies, 0.99))
		if r.Published < 400 || r.Published > 600 {
			t.Errorf("published %d, want about 500", r.Published)
		}
		if r.Consumed != r.Published || len(r.Latencies) != r.Consumed {
			t.Errorf("published %d, consumed %d, %d latencies", r.Published, r.Consumed, len(r.Latencies))
		}
		if r.Elapsed < 900*time.Millisecond || r.Elapsed > 3*time.Second {
			t.Errorf("elapsed %s, want about 1 s", r.Elapsed)
		}
		if p50 := percentile(r.Latencies, 0.5); p50 <= 0 || p50 > 100*time.Millisecond {
			t.Errorf("p50 latency %s", p50)
		}
	})
}

func TestBaselineIdle(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		lat, err := s.Idle(ctx, e, 5, 5*time.Millisecond)
		if err != nil {
			t.Fatalf("Idle: %v", err)
		}
		t.Logf("Idle: %v", lat)
		if len(lat) != 5 {
			t.Fatalf("Idle returned %d samples, want 5", len(lat))
		}
		for i, d := range lat {
			// A blocked reader is woken by the publish: well under the 1 s
			// blocking timeout.
			if d <= 0 || d > 200*time.Millisecond {
				t.Errorf("sample %d: %s", i, d)
			}
		}
	})
}

func TestBaselineQueued(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		d, err := s.Queued(ctx, e, 2000, 500)
		if err != nil {
			t.Fatalf("Queued(2000, 500): %v", err)
		}
		t.Logf("Queued(2000, 500): %s", d)
		if d <= 0 || d > 10*time.Second {
			t.Errorf("Queued(2000, 500) took %s", d)
		}
	})
}

func TestBaselineUnacked(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		for _, held := range []int{50, 1} {
			d, err := s.Unacked(ctx, e, held, 500)
			if err != nil {
				t.Fatalf("Unacked(%d, 500): %v", held, err)
			}
			t.Logf("Unacked(%d, 500): %s per ack", held, d)
			if d <= 0 || d > 10*time.Millisecond {
				t.Errorf("Unacked(%d, 500): %s per ack", held, d)
			}
		}
	})
}

func TestBaselineManyQueues(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		for _, c := range []struct{ queues, perQueue int }{{20, 5}, {3, 40}} {
			d, err := s.ManyQueues(ctx, e, c.queues, c.perQueue)
			if err != nil {
				t.Fatalf("ManyQueues(%d, %d): %v", c.queues, c.perQueue, err)
			}
			t.Logf("ManyQueues(%d, %d): %s", c.queues, c.perQueue, d)
			if d <= 0 || d > 10*time.Second {
				t.Errorf("ManyQueues(%d, %d) took %s", c.queues, c.perQueue, d)
			}
		}
	})
}

func TestBaselineRecover(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		for _, n := range []int{1000, 2500} {
			d, err := s.Recover(ctx, e, n)
			if err != nil {
				t.Fatalf("Recover(%d): %v", n, err)
			}
			t.Logf("Recover(%d): %s", n, d)
			if d <= 0 || d > 10*time.Second {
				t.Errorf("Recover(%d) took %s", n, d)
			}
		}
	})
}

func TestBaselineMemory(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		b, err := s.Memory(ctx, e, 1000)
		if err != nil {
			t.Fatalf("Memory(1000): %v", err)
		}
		// A 100-byte payload costs at least its bytes and, with the
		// bookkeeping of a stream or list, well under 1 KiB.
		t.Logf("Memory(1000): %.1f B per delivery", b)
		if b < 100 || b > 1024 {
			t.Errorf("Memory(1000) = %.1f B per delivery", b)
		}
	})
}

// TestBaselineNoLeak checks that a round of every method leaves no
// goroutine behind (clients closed, consumers stopped).
// It runs the systems one after the other: goroutine counts of parallel
// subtests would mix.
func TestBaselineNoLeak(t *testing.T) {
	e := testEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, s := range baselineSystems() {
		noGoroutineLeak(t, func() {
			t.Helper()
			if _, err := s.EndToEnd(ctx, e, e2eConfig{N: 300, Consumers: 10, Prefetch: 1000, PayloadSize: 100}); err != nil {
				t.Fatalf("%s: EndToEnd: %v", s.Name(), err)
			}
			if _, err := s.Queued(ctx, e, 600, 100); err != nil {
				t.Fatalf("%s: Queued: %v", s.Name(), err)
			}
			if _, err := s.Idle(ctx, e, 1, time.Millisecond); err != nil {
				t.Fatalf("%s: Idle: %v", s.Name(), err)
			}
			if keys := baselineKeys(t, ctx, e); keys == 0 {
				t.Errorf("%s: no keys after the runs: did they use this server?", s.Name())
			}
		})
	}
}

// TestBaselineCancelled checks that a cancelled context ends a run with an
// error instead of a hang.
func TestBaselineCancelled(t *testing.T) {
	baselineRun(t, func(t *testing.T, ctx context.Context, e *env, s system) {
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := s.Queued(ctx, e, 300_000, 300_000); err == nil {
			t.Error("Queued with a 50 ms context: no error")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("cancelled Queued returned after %s", d)
		}
	})
}
