package main

import (
	"errors"
	"testing"
	"time"
)

func TestAsynqName(t *testing.T) {
	if got := newAsynq(0).Name(); got != "asynq" {
		t.Errorf("newAsynq(0).Name() = %q, want asynq", got)
	}
	if got := newAsynq(10 * time.Millisecond).Name(); got != "asynq (check 10ms)" {
		t.Errorf("newAsynq(10ms).Name() = %q, want asynq (check 10ms)", got)
	}
}

func TestAsynqPublish(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newAsynq(10 * time.Millisecond)
	for _, g := range []int{1, 8} {
		d, err := s.Publish(ctx, e, 200, g, 1)
		if err != nil {
			t.Fatalf("Publish(200, %d goroutines): %v", g, err)
		}
		if d <= 0 || d > 10*time.Second {
			t.Errorf("Publish(200, %d goroutines) took %s", g, d)
		}
	}
	if _, err := s.Publish(ctx, e, 200, 1, 100); !errors.Is(err, errNotMeasured) {
		t.Errorf("Publish with 100 per call: err = %v, want errNotMeasured", err)
	}
}

func TestAsynqEndToEnd(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newAsynq(10 * time.Millisecond)
	d, err := s.EndToEnd(ctx, e, e2eConfig{N: 500, Consumers: 10, Prefetch: 1000, PayloadSize: 100})
	if err != nil {
		t.Fatalf("EndToEnd: %v", err)
	}
	if d <= 0 || d > 20*time.Second {
		t.Errorf("EndToEnd of 500 took %s", d)
	}
	if _, err := s.EndToEnd(ctx, e, e2eConfig{N: 500, Batch: 100, PayloadSize: 100}); !errors.Is(err, errNotMeasured) {
		t.Errorf("EndToEnd with batch: err = %v, want errNotMeasured", err)
	}
}

func TestAsynqSteady(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newAsynq(10 * time.Millisecond)
	r, err := s.Steady(ctx, e, steadyConfig{
		Rate: 500, Duration: time.Second, Producers: 4, Consumers: 10, Payload: 100, DrainLimit: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("Steady: %v", err)
	}
	if r.Published < 400 || r.Published > 600 {
		t.Errorf("published %d at 500/s for 1 s", r.Published)
	}
	if r.Consumed != r.Published || len(r.Latencies) != r.Consumed {
		t.Errorf("consumed %d with %d latencies, published %d", r.Consumed, len(r.Latencies), r.Published)
	}
	if r.Elapsed < 900*time.Millisecond || r.Elapsed > 12*time.Second {
		t.Errorf("elapsed %s", r.Elapsed)
	}
	for _, l := range r.Latencies {
		if l <= 0 || l > 10*time.Second {
			t.Fatalf("implausible latency %s", l)
		}
	}
}

func TestAsynqIdle(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	lat, err := newAsynq(10*time.Millisecond).Idle(ctx, e, 5, 5*time.Millisecond)
	if err != nil {
		t.Fatalf("Idle (check 10ms): %v", err)
	}
	if len(lat) != 5 {
		t.Fatalf("Idle (check 10ms) returned %d samples, want 5", len(lat))
	}
	for _, l := range lat {
		// The processor sleeps 5–15 ms between polls of an empty queue.
		if l <= 0 || l > time.Second {
			t.Errorf("Idle (check 10ms) latency %s", l)
		}
	}
	lat, err = newAsynq(0).Idle(ctx, e, 2, 5*time.Millisecond)
	if err != nil {
		t.Fatalf("Idle (default): %v", err)
	}
	if len(lat) != 2 {
		t.Fatalf("Idle (default) returned %d samples, want 2", len(lat))
	}
	for _, l := range lat {
		// The default sleep is 0.5–1.5 s.
		if l <= 0 || l > 3*time.Second {
			t.Errorf("Idle (default) latency %s", l)
		}
	}
}

func TestAsynqManyQueues(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	d, err := newAsynq(10*time.Millisecond).ManyQueues(ctx, e, 20, 5)
	if err != nil {
		t.Fatalf("ManyQueues: %v", err)
	}
	if d <= 0 || d > 20*time.Second {
		t.Errorf("ManyQueues 20×5 took %s", d)
	}
}

func TestAsynqMemory(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	b, err := newAsynq(0).Memory(ctx, e, 500)
	if err != nil {
		t.Fatalf("Memory: %v", err)
	}
	// A task hash with a 100-byte payload plus a list entry: a few
	// hundred bytes, surely more than the payload and less than 4 KiB.
	if b < 100 || b > 4096 {
		t.Errorf("Memory: %.0f bytes per task", b)
	}
	t.Logf("asynq: %.0f bytes per ready task", b)
}

func TestAsynqNotMeasured(t *testing.T) {
	ctx := testContext(t)
	var e *env // these workloads never touch Redis
	s := newAsynq(0)
	if _, err := s.Queued(ctx, e, 1000, 100); !errors.Is(err, errNotMeasured) {
		t.Errorf("Queued: err = %v, want errNotMeasured", err)
	}
	if _, err := s.Unacked(ctx, e, 10, 100); !errors.Is(err, errNotMeasured) {
		t.Errorf("Unacked: err = %v, want errNotMeasured", err)
	}
	if _, err := s.Recover(ctx, e, 100); !errors.Is(err, errNotMeasured) {
		t.Errorf("Recover: err = %v, want errNotMeasured", err)
	}
}

// TestAsynqNoLeak checks that runs leave no goroutines behind: the
// harness makes hundreds of them in one process.
func TestAsynqNoLeak(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newAsynq(10 * time.Millisecond)
	run := func() {
		t.Helper()
		if _, err := s.EndToEnd(ctx, e, e2eConfig{N: 100, Consumers: 10, PayloadSize: 100}); err != nil {
			t.Fatalf("EndToEnd: %v", err)
		}
		if _, err := s.Idle(ctx, e, 2, time.Millisecond); err != nil {
			t.Fatalf("Idle: %v", err)
		}
		if _, err := s.Memory(ctx, e, 100); err != nil {
			t.Fatalf("Memory: %v", err)
		}
	}
	noGoroutineLeak(t, run)
}
