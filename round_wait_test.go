package redq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

// Eight workers on two connections, half with Next and half with
// NextBatch, never get one item twice within a period by Redis's clock,
// and between them hand out every item.
func TestRoundAtMostOncePerPeriod(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const items, workers = 100, 8
		period := 100 * time.Millisecond
		ns := namespace()
		conns := []*redisConnection{openT(t, b, "w1", ns), openT(t, b, "w2", ns)}
		ctx := context.Background()
		rounds := make([]*redisRound, len(conns))
		for i, c := range conns {
			r, err := c.openRound(ctx, "feeds", period)
			if err != nil {
				t.Fatal(err)
			}
			rounds[i] = r
		}
		fillRound(t, rounds[0], 0, items, "")

		var mu sync.Mutex
		issues := map[string][]RoundItem{}
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		stop := time.Now().Add(time.Second)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rounds[w%2]
				for time.Now().Before(stop) {
					var got []RoundItem
					var err error
					if w < workers/2 {
						var it RoundItem
						it, err = r.Next(ctx, 50*time.Millisecond)
						got = []RoundItem{it}
					} else {
						got, err = r.NextBatch(ctx, 7, 50*time.Millisecond)
					}
					if errors.Is(err, ErrorTimeout) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					for _, it := range got {
						issues[it.ID] = append(issues[it.ID], it)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		total := 0
		for i := range items {
			id := fmt.Sprintf("id%d", i)
			its := issues[id]
			if len(its) == 0 {
				t.Fatalf("%s was never handed out", id)
			}
			total += len(its)
			sort.Slice(its, func(i, j int) bool { return its[i].Issued < its[j].Issued })
			for k := 1; k < len(its); k++ {
				if its[k].Issued != its[k-1].Issued+1 {
					t.Fatalf("%s: hand-out %d came twice or went missing: %+v", id, its[k].Issued, its)
				}
				if gap := its[k].LastIssued.Sub(its[k-1].LastIssued); gap < period {
					t.Fatalf("%s handed out twice within %s (by Redis's clock): %+v", id, gap, its)
				}
			}
		}
		t.Logf("%d hand-outs of %d items in 1s with a period of %s", total, items, period)
	})
}

// A waiting Next wakes when an item is added, when one is reissued, and
// when the earliest one becomes due; not because a wait ran out (its cap
// is raised above the Next's timeout, so a missed wake-up would end in
// ErrorTimeout).
func TestRoundNextWakes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "round", namespace())
		ctx := context.Background()
		period := 300 * time.Millisecond
		r, err := c.openRound(ctx, "feeds", period)
		if err != nil {
			t.Fatal(err)
		}
		r.waitCap = time.Minute
		const timeout = 20 * time.Second
		type result struct {
			it   RoundItem
			err  error
			took time.Duration
		}
		next := func() <-chan result {
			ch := make(chan result, 1)
			started := make(chan struct{})
			go func() {
				t0 := time.Now()
				close(started)
				it, err := r.Next(ctx, timeout)
				ch <- result{it, err, time.Since(t0)}
			}()
			<-started
			return ch
		}
		// Woken by Add.
		ch := next()
		time.Sleep(50 * time.Millisecond) // let it wait on Redis
		mustAdd(t, r, "a", "", true)
		res := <-ch
		if res.err != nil || res.it.ID != "a" || res.took > timeout/2 {
			t.Fatalf("Next waiting on an empty round, then Add: %+v", res)
		}
		// Woken when a becomes due again.
		ch = next()
		res = <-ch
		if res.err != nil || res.it.ID != "a" || res.took > timeout/2 || res.it.Issued != 2 {
			t.Fatalf("Next waiting for a to become due: %+v", res)
		}
		t.Logf("woken by the due time after %s (period %s)", res.took, period)
		// Woken by Reissue, long before a is due (the period is an hour
		// now).
		if _, err := c.OpenRound("feeds", time.Hour, RoundChangeSettings()); err != nil {
			t.Fatal(err)
		}
		ch = next()
		time.Sleep(50 * time.Millisecond)
		if ok, err := r.Reissue(ctx, "a"); err != nil || !ok {
			t.Fatalf("Reissue = %v, %v", ok, err)
		}
		res = <-ch
		if res.err != nil || res.it.ID != "a" || res.it.Issued != 3 || res.took > timeout/2 {
			t.Fatalf("Next waiting, then Reissue: %+v", res)
		}
		// Timeout 0 does not wait; a short timeout ends in ErrorTimeout.
		wantNoneDue(t, r)
		if _, err := r.Next(ctx, 20*time.Millisecond); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("Next with nothing due: %v, want ErrorTimeout", err)
		}
		// A cancelled context ends the wait.
		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		r.waitCap = 100 * time.Millisecond // the context is noticed between waits
		if _, err := r.Next(cctx, timeout); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next with a cancelled context: %v", err)
		}
		// Woken when the period is shortened, so that a is due at once.
		r.waitCap = time.Minute
		ch = next()
		time.Sleep(50 * time.Millisecond)
		if _, err := c.OpenRound("feeds", 10*time.Millisecond, RoundChangeSettings()); err != nil {
			t.Fatal(err)
		}
		res = <-ch
		if res.err != nil || res.it.ID != "a" || res.it.Issued != 4 || res.took > timeout/2 {
			t.Fatalf("Next waiting, then a shorter period: %+v", res)
		}
	})
}

// Many items added while workers wait are all handed out: a wake-up is
// never lost between a worker's hand-out call and its wait.
func TestRoundNoLostWakeups(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "round", namespace())
		ctx := context.Background()
		r, err := c.openRound(ctx, "feeds", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// The cap and the workers' timeout are above the deadline below,
		// so a lost wake-up is not made good by a wait running out.
		r.waitCap = time.Minute
		const timeout = 20 * time.Second
		const n, workers = 200, 4
		got := make(chan string, n)
		var wg sync.WaitGroup
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					it, err := r.Next(wctx, timeout)
					if err != nil {
						if wctx.Err() == nil {
							t.Errorf("Next: %v", err)
						}
						return // stopped once everything is handed out
					}
					got <- it.ID
				}
			}()
		}
		for i := range n {
			mustAdd(t, r, fmt.Sprintf("id%d", i), "", true)
			if i%10 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		seen := map[string]bool{}
		deadline := time.After(10 * time.Second)
		for len(seen) < n {
			select {
			case id := <-got:
				if seen[id] {
					t.Fatalf("%s handed out twice", id)
				}
				seen[id] = true
			case <-deadline:
				t.Fatalf("%d of %d items handed out within 10s: a wake-up was lost", len(seen), n)
			}
		}
		// Stop the workers; a wait on Redis does not notice the cancel, so
		// wake them until they have all returned.
		stop()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for {
			if err := b.client.LPush(ctx, r.keys.signal, "1").Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}

// The wake marker stays while due items are left that a waiter may not
// know of, and goes once a hand-out leaves none: deleting it after every
// hand-out would leave a worker that blocks just then asleep while items
// are due.
func TestRoundWakeMarker(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "round", namespace())
		ctx := context.Background()
		r, err := c.openRound(ctx, "feeds", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		marker := func() int64 { t.Helper(); return b.client.LLen(ctx, r.keys.signal).Val() }
		mustAdd(t, r, "x", "", true)
		mustAdd(t, r, "y", "", true)
		if m := marker(); m != 1 {
			t.Fatalf("%d markers after two adds, want 1", m)
		}
		if items, hint, err := r.handOut(ctx, 1); err != nil || len(items) != 1 || hint != 0 || marker() != 1 {
			t.Fatalf("hand-out of x: %v, hint %d, %v, %d markers; want x, hint 0 and the marker kept (y is due)", items, hint, err, marker())
		}
		if items, hint, err := r.handOut(ctx, 2); err != nil || len(items) != 1 || hint <= 0 || marker() != 0 {
			t.Fatalf("hand-out of y: %v, hint %d, %v, %d markers; want y, a positive hint and no marker", items, hint, err, marker())
		}
		if ok, err := r.Reissue(ctx, "x"); err != nil || !ok || marker() != 1 {
			t.Fatalf("Reissue(x) = %v, %v with %d markers; want a marker", ok, err, marker())
		}
	})
}

// After StopAllConsuming, Next and OpenRound refuse; Add, Get, Len,
// Remove and Reissue still work.
func TestRoundAfterStopAllConsuming(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "round", namespace())
		ctx := context.Background()
		r, err := c.OpenRound("feeds", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		<-c.StopAllConsuming()
		if _, err := r.Next(ctx, time.Second); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("Next after StopAllConsuming: %v", err)
		}
		if _, err := r.NextBatch(ctx, 5, 0); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("NextBatch after StopAllConsuming: %v", err)
		}
		if _, err := c.OpenRound("other", time.Hour); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("OpenRound after StopAllConsuming: %v", err)
		}
		mustAdd(t, r, "a", "", true)
		if ok, err := r.Reissue(ctx, "a"); err != nil || !ok {
			t.Fatalf("Reissue after StopAllConsuming: %v, %v", ok, err)
		}
		if n, err := r.Len(ctx); err != nil || n != 1 {
			t.Fatalf("Len after StopAllConsuming: %d, %v", n, err)
		}
	})
}
