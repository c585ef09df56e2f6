package main

import (
	"testing"
	"time"
)

// redqPlausible fails the test unless 0 < d <= limit.
func redqPlausible(t *testing.T, what string, d, limit time.Duration) {
	t.Helper()
	if d <= 0 || d > limit {
		t.Errorf("%s: %s, want in (0, %s]", what, d, limit)
	}
}

func TestRedqName(t *testing.T) {
	if got := newRedq(time.Second).Name(); got != "redq" {
		t.Errorf("newRedq(1s).Name() = %q, want redq", got)
	}
	if got := newRedq(30 * time.Second).Name(); got != "redq (poll 30s)" {
		t.Errorf("newRedq(30s).Name() = %q, want redq (poll 30s)", got)
	}
}

func TestRedqPublish(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second)
	for _, g := range []int{1, 8} {
		for _, per := range []int{1, 100} {
			d, err := s.Publish(ctx, e, 500, g, per)
			if err != nil {
				t.Fatalf("Publish(500, %d goroutines, %d per call): %v", g, per, err)
			}
			redqPlausible(t, "Publish", d, 10*time.Second)
		}
	}
}

func TestRedqEndToEnd(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second)
	for _, cfg := range []e2eConfig{
		{N: 2000, Consumers: 10, Prefetch: 1000, PayloadSize: 100},
		{N: 2000, Batch: 100, Prefetch: 1000, PayloadSize: 100},
	} {
		d, err := s.EndToEnd(ctx, e, cfg)
		if err != nil {
			t.Fatalf("EndToEnd(%+v): %v", cfg, err)
		}
		redqPlausible(t, "EndToEnd", d, 20*time.Second)
	}
}

func TestRedqSteady(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	r, err := newRedq(time.Second).Steady(ctx, e, steadyConfig{
		Rate: 1000, Duration: time.Second, Producers: 4, Consumers: 10, Prefetch: 1000, Payload: 100, DrainLimit: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("Steady: %v", err)
	}
	if r.Published < 800 || r.Published > 1200 {
		t.Errorf("published %d at 1000/s for 1 s", r.Published)
	}
	if r.Consumed != r.Published || len(r.Latencies) != r.Consumed {
		t.Errorf("consumed %d with %d latencies, published %d", r.Consumed, len(r.Latencies), r.Published)
	}
	if r.Elapsed < 900*time.Millisecond || r.Elapsed > 12*time.Second {
		t.Errorf("elapsed %s", r.Elapsed)
	}
	for _, l := range r.Latencies {
		redqPlausible(t, "Steady latency", l, 5*time.Second)
	}
}

func TestRedqIdle(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	for _, poll := range []time.Duration{time.Second, 30 * time.Second} {
		lat, err := newRedq(poll).Idle(ctx, e, 5, 20*time.Millisecond)
		if err != nil {
			t.Fatalf("Idle (poll %s): %v", poll, err)
		}
		if len(lat) != 5 {
			t.Fatalf("Idle (poll %s) returned %d samples, want 5", poll, len(lat))
		}
		for _, l := range lat {
			// A publish wakes the blocked consumer at once, whatever the poll.
			redqPlausible(t, "Idle latency", l, 500*time.Millisecond)
		}
		t.Logf("poll %s: %v", poll, lat)
	}
}

func TestRedqQueued(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	d, err := newRedq(time.Second).Queued(ctx, e, 3000, 1000)
	if err != nil {
		t.Fatalf("Queued: %v", err)
	}
	redqPlausible(t, "Queued", d, 20*time.Second)
}

func TestRedqUnacked(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	d, err := newRedq(time.Second).Unacked(ctx, e, 50, 500)
	if err != nil {
		t.Fatalf("Unacked: %v", err)
	}
	redqPlausible(t, "Unacked per ack", d, 100*time.Millisecond)
}

func TestRedqManyQueues(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	d, err := newRedq(time.Second).ManyQueues(ctx, e, 20, 5)
	if err != nil {
		t.Fatalf("ManyQueues: %v", err)
	}
	redqPlausible(t, "ManyQueues", d, 20*time.Second)
}

func TestRedqRecover(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	d, err := newRedq(time.Second).Recover(ctx, e, 2000)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	redqPlausible(t, "Recover", d, 10*time.Second)
}

func TestRedqMemory(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	b, err := newRedq(time.Second).Memory(ctx, e, 2000)
	if err != nil {
		t.Fatalf("Memory: %v", err)
	}
	// A list entry holding a 100-byte payload and a 13-byte envelope.
	if b < 100 || b > 1024 {
		t.Errorf("Memory: %.0f bytes per ready delivery", b)
	}
	t.Logf("redq: %.0f bytes per ready delivery", b)
}

// TestRedqNoLeak checks that runs leave no goroutines behind: the harness
// makes hundreds of them in one process.
func TestRedqNoLeak(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second)
	run := func() {
		t.Helper()
		if _, err := s.EndToEnd(ctx, e, e2eConfig{N: 200, Consumers: 10, Prefetch: 100, PayloadSize: 100}); err != nil {
			t.Fatalf("EndToEnd: %v", err)
		}
		if _, err := s.Idle(ctx, e, 2, time.Millisecond); err != nil {
			t.Fatalf("Idle: %v", err)
		}
		if _, err := s.Recover(ctx, e, 100); err != nil {
			t.Fatalf("Recover: %v", err)
		}
		if _, err := s.Unacked(ctx, e, 10, 100); err != nil {
			t.Fatalf("Unacked: %v", err)
		}
	}
	noGoroutineLeak(t, run)
}
