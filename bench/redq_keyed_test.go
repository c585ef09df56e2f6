package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redq/redq"
)

func TestRedqUpserts(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second).(*redqSystem)
	for _, cfg := range []upsertConfig{
		{Keys: 2500, Upserts: 2500, Goroutines: 1, Windows: keyedWindows(2500), Split: keyedSplit},
		{Keys: 2500, Upserts: 2500, Goroutines: 8, Windows: keyedWindows(2500), Split: keyedSplit},
		{Keys: 20, Upserts: 300, Goroutines: 1},
		{Keys: 20, Upserts: 300, Goroutines: 8},
		{Keys: 50, Upserts: 30, Goroutines: 8}, // some keys never upserted
	} {
		cfg.PayloadSize = 100
		r, err := s.Upserts(ctx, e, cfg)
		if err != nil {
			t.Fatalf("Upserts(%+v): %v", cfg, err)
		}
		redqPlausible(t, "Upserts", r.Elapsed, 20*time.Second)
		if cfg.Windows[0].set() {
			for i, c := range r.Costs {
				redqPlausible(t, "cost per upsert", c, 10*time.Millisecond)
				if c > r.Elapsed {
					t.Errorf("window %d costs %s per upsert, the whole run took %s", i, c, r.Elapsed)
				}
			}
		}
	}
}

// The checks of an upsert run notice an upsert that answered but did not
// happen: for distinct keys by the count of pending items, for hot keys
// by the update count (an earlier upsert of a key dropped) or the payload
// (its last one dropped).
func TestRedqUpsertsNoticeADroppedUpsert(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second).(*redqSystem)
	for _, c := range []struct {
		cfg  upsertConfig
		drop int // the sequence number of the upsert dropped
		want string
	}{
		{upsertConfig{Keys: 500, Upserts: 500, Goroutines: 8}, 123, "499 keyed pending"},
		{upsertConfig{Keys: 20, Upserts: 200, Goroutines: 8}, 45, "8 updates"},
		{upsertConfig{Keys: 20, Upserts: 200, Goroutines: 1}, 185, "want the last upsert's payload 185"},
	} {
		c.cfg.PayloadSize = 100
		var dropped atomic.Bool
		_, err := s.upserts(ctx, e, c.cfg, func(real upsertCall) upsertCall {
			return func(ctx context.Context, key string, payload []byte) (redq.UpsertOutcome, error) {
				if seq, _, _ := parsePayload(payload); seq == c.drop {
					// answered as a real upsert would, but never sent
					dropped.Store(true)
					if c.drop < c.cfg.Keys {
						return redq.Created, nil
					}
					return redq.Updated, nil
				}
				return real(ctx, key, payload)
			}
		})
		if !dropped.Load() {
			t.Fatalf("%+v: upsert %d was never made", c.cfg, c.drop)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v with upsert %d dropped: %v, want an error saying %q", c.cfg, c.drop, err, c.want)
		}
	}
}

// An outcome other than the plan's (an upsert of a new key answered
// Updated) fails the run too.
func TestRedqUpsertsNoticeAWrongOutcome(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second).(*redqSystem)
	cfg := upsertConfig{Keys: 100, Upserts: 100, Goroutines: 1, PayloadSize: 100}
	_, err := s.upserts(ctx, e, cfg, func(real upsertCall) upsertCall {
		return func(ctx context.Context, key string, payload []byte) (redq.UpsertOutcome, error) {
			out, err := real(ctx, key, payload)
			if key == keyName(7) {
				out = redq.Updated
			}
			return out, err
		}
	})
	if err == nil || !strings.Contains(err.Error(), "99 created, 1 updated") {
		t.Fatalf("Upserts with a wrong outcome: %v", err)
	}
}

func TestRedqKeyedMemory(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	b, err := newRedq(time.Second).(*redqSystem).KeyedMemory(ctx, e, 2000)
	if err != nil {
		t.Fatalf("KeyedMemory: %v", err)
	}
	// At least the payload and key; well under 1 KiB.
	t.Logf("KeyedMemory(2000): %.1f B per item", b)
	if b < 110 || b > 1024 {
		t.Errorf("KeyedMemory(2000) = %.1f B per item", b)
	}
}

// redq fires every timer once, not before it is due and within a fraction
// of a second, with one or two connections, and when a consumer dies
// holding fires (they come again after the cleaner).
func TestRedqFireTimers(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second).(*redqSystem)
	cfg := timerConfig{N: 300, Spread: 500 * time.Millisecond, Consumers: 4, Pairs: 1, Poll: time.Second, Drain: 10 * time.Second}
	victim := cfg
	victim.VictimTakes = 10
	pairs := cfg
	pairs.Pairs = 2
	batch := pairs
	batch.Batch = 50
	for name, c := range map[string]timerConfig{"one connection": cfg, "a consumer dies": victim, "two connections": pairs, "batches": batch} {
		tl, err := s.FireTimers(ctx, e, c)
		if err != nil {
			t.Fatalf("%s: FireTimers: %v", name, err)
		}
		if err := tl.counts().exact(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		late := tl.lateness()
		t.Logf("%s: p50 %s, p99 %s", name, percentile(late, 0.5), percentile(late, 0.99))
		for _, l := range late {
			// Never before the due time (Redis keeps whole ms, and Due
			// is by Redis's clock on this machine), and not seconds late
			// (a dead consumer's fires come back within about a second).
			if l < -time.Millisecond || l > 5*time.Second {
				t.Errorf("%s: lateness %s", name, l)
			}
		}
	}
}

func TestRedqTimerBurst(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	d, err := newRedq(time.Second).(*redqSystem).TimerBurst(ctx, e, 500, 4, 10)
	if err != nil {
		t.Fatalf("TimerBurst: %v", err)
	}
	redqPlausible(t, "TimerBurst", d, 10*time.Second)
}

// A timer run leaves no goroutine behind, the dead consumer's included.
func TestRedqFireTimersLeaksNothing(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newRedq(time.Second).(*redqSystem)
	cfg := timerConfig{N: 50, Spread: 100 * time.Millisecond, Consumers: 2, Pairs: 1, VictimTakes: 2, Poll: time.Second, Drain: 10 * time.Second}
	noGoroutineLeak(t, func() {
		if _, err := s.FireTimers(ctx, e, cfg); err != nil {
			t.Fatal(err)
		}
	})
}

// An upsert refused by redq's slot race (see refusedLate) is made again
// and counted; any other error is not.
func TestUpsertAgainAfterARefusal(t *testing.T) {
	late := fmt.Errorf("redq: upsert %q on %q: %w %d", "key:1", "bench", errors.New("redq: unexpected reply"), -1)
	calls := 0
	call := upsertCall(func(context.Context, string, []byte) (redq.UpsertOutcome, error) {
		if calls++; calls <= 2 {
			return 0, late
		}
		return redq.Created, nil
	})
	var refused atomic.Int64
	if out, err := call.again(context.Background(), "key:1", nil, &refused); err != nil || out != redq.Created || refused.Load() != 2 || calls != 3 {
		t.Fatalf("again = %v, %v after %d calls, %d refused; want Created after 3 calls, 2 refused", out, err, calls, refused.Load())
	}
	other := errors.New("redq: upsert: connection refused")
	calls = 0
	call = func(context.Context, string, []byte) (redq.UpsertOutcome, error) { calls++; return 0, other }
	if _, err := call.again(context.Background(), "key:1", nil, &refused); !errors.Is(err, other) || calls != 1 {
		t.Fatalf("again on another error = %v after %d calls, want it returned at once", err, calls)
	}
	calls = 0
	call = func(context.Context, string, []byte) (redq.UpsertOutcome, error) { calls++; return 0, late }
	if _, err := call.again(context.Background(), "key:1", nil, &refused); !refusedLate(err) || calls != refusedTries+1 {
		t.Fatalf("again refused every time = %v after %d calls, want the refusal after %d", err, calls, refusedTries+1)
	}
}
