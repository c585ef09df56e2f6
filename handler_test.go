package redq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// tinyRetries retries at once (1-5ms), so that retry tests run fast.
func tinyRetries(maxAttempts int) QueueOption {
	return WithRetryPolicy(RetryPolicy{MaxAttempts: maxAttempts, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
}

func openQueueWith(t testing.TB, c Connection, name string, opts ...QueueOption) *redisQueue {
	t.Helper()
	q, err := c.OpenQueue(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q.(*redisQueue)
}

func startHandlers(t testing.TB, q Queue, prefetch int64, n int, h Handler) {
	t.Helper()
	if err := q.StartConsuming(prefetch, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := q.AddHandler("h", h); err != nil {
			t.Fatal(err)
		}
	}
}

// rejectedEnvelopes reads q's rejected list without changing it, oldest
// rejection last.
func rejectedEnvelopes(t testing.TB, b backend, q *redisQueue) []envelope {
	t.Helper()
	items, err := b.client.LRange(context.Background(), q.keys.rejected, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]envelope, len(items))
	for i, s := range items {
		out[i], _ = decodeEnvelope(s)
	}
	return out
}

// calls records what a handler saw, safely across goroutines.
type calls struct {
	mu       sync.Mutex
	attempts []int
	at       []time.Time
	ids      []string
}

func (c *calls) add(d Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts = append(c.attempts, d.Attempts())
	c.at = append(c.at, time.Now())
	c.ids = append(c.ids, d.ID())
}

func (c *calls) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.attempts)
}

func TestHandlerRetriesWithBackoffThenRejectsWithReason(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		c := openT(t, b, "worker", ns)
		admin := openT(t, b, "admin", ns)
		// Backoffs long enough to be seen: 20ms, then 30ms (40ms capped).
		policy := RetryPolicy{MaxAttempts: 4, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 30 * time.Millisecond}
		q := openQueueWith(t, c, "jobs", WithRetryPolicy(policy))

		mustPut(t, q, "bad", Header(http.Header{"X-Trace": {"t1"}}))
		mustPut(t, q, "good")
		var bad, good calls
		startHandlers(t, q, 10, 1, func(ctx context.Context, d Message) error {
			if d.Payload() == "good" {
				good.add(d)
				return nil
			}
			bad.add(d)
			return fmt.Errorf("attempt %d failed", d.Attempts())
		})
		eventually(t, "the failing delivery is rejected", func() bool {
			_, rejected, _ := counts(t, admin, "jobs")
			return rejected == 1
		})
		<-q.StopConsuming()
		wantCounts(t, admin, "jobs", 0, 1, 0)

		if good.n() != 1 {
			t.Fatalf("good delivery handled %d times, want once (nil acks)", good.n())
		}
		bad.mu.Lock()
		attempts, at := bad.attempts, bad.at
		bad.mu.Unlock()
		if fmt.Sprint(attempts) != "[1 2 3 4]" {
			t.Fatalf("attempts seen by the handler: %v, want [1 2 3 4]", attempts)
		}
		for i := 1; i < len(at); i++ {
			want := policy.Backoff(i) - 2*time.Millisecond // Jitter 0: exact; less a ms of rounding
			if gap := at[i].Sub(at[i-1]); gap < want {
				t.Fatalf("attempt %d came %v after attempt %d, want at least the backoff %v", i+1, gap, i, policy.Backoff(i))
			}
		}

		// The reason is readable, and ReturnRejected gives it a fresh round.
		qa := openQueue(t, admin, "jobs")
		if n, err := qa.ReturnRejected(10); err != nil || n != 1 {
			t.Fatalf("return rejected = %d, %v", n, err)
		}
		d := mustTake(t, qa, time.Second)
		h := d.Header()
		if d.Payload() != "bad" || h.Get(HeaderError) != "attempt 4 failed" || h.Get(HeaderAttempts) != "4" || h.Get("X-Trace") != "t1" {
			t.Fatalf("rejected delivery: %q headers %v", d.Payload(), h)
		}
		if d.Attempts() != 1 {
			t.Fatalf("after ReturnRejected: attempts %d, want 1", d.Attempts())
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		wantNothingLeft(t, b, admin, qa)
	})
}

func TestHandlerPanicCountsAsErrorAndConsumerKeepsWorking(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "worker", namespace())
		q := openQueueWith(t, c, "jobs", tinyRetries(1))
		var handled calls
		startHandlers(t, q, 10, 1, func(ctx context.Context, d Message) error {
			if d.Payload() == "bad" {
				panic("kaboom")
			}
			handled.add(d)
			return nil
		})
		mustPut(t, q, "bad")
		eventually(t, "the panicking delivery is rejected", func() bool {
			_, rejected, _ := counts(t, c, "jobs")
			return rejected == 1
		})
		// The one handler goroutine survived the panic.
		for i := range 5 {
			mustPut(t, q, fmt.Sprintf("ok-%d", i))
		}
		eventually(t, "the handler goes on after a panic", func() bool { return handled.n() == 5 })
		eventually(t, "the acks land", func() bool {
			r, j, u := counts(t, c, "jobs")
			return r == 0 && j == 1 && u == 0
		})
		rej := rejectedEnvelopes(t, b, q)
		if len(rej) != 1 || rej[0].payload != "bad" {
			t.Fatalf("rejected: %+v", rej)
		}
		reason := rej[0].header.Get(HeaderError)
		if !strings.Contains(reason, "panic") || !strings.Contains(reason, "kaboom") || rej[0].header.Get(HeaderAttempts) != "1" {
			t.Fatalf("rejected headers: %v", rej[0].header)
		}
	})
}

func TestHandlerContextEndsWithTheLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "worker", namespace())
		q := openQueueWith(t, c, "jobs", tinyRetries(3))
		var seen calls
		firstErr := make(chan error, 1)
		startHandlers(t, q, 1, 1, func(ctx context.Context, d Message) error {
			seen.add(d)
			if d.Attempts() > 1 {
				return nil
			}
			if err := ctx.Err(); err != nil {
				firstErr <- fmt.Errorf("context done at the start: %w", err)
				return err
			}
			select {
			case <-ctx.Done():
				firstErr <- ctx.Err()
				return ctx.Err()
			case <-time.After(5 * time.Second):
				firstErr <- errors.New("context not cancelled 5s after a 100ms lease")
				return errors.New("not cancelled")
			}
		})
		mustPut(t, q, "job", TTR(100*time.Millisecond))
		select {
		case err := <-firstErr:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("first call's context: %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("first call did not end")
		}
		eventually(t, "the delivery is handled again and acked", func() bool {
			r, j, u := counts(t, c, "jobs")
			return seen.n() == 2 && r == 0 && j == 0 && u == 0
		})
		seen.mu.Lock()
		defer seen.mu.Unlock()
		if fmt.Sprint(seen.attempts) != "[1 2]" || seen.ids[0] != seen.ids[1] {
			t.Fatalf("calls: attempts %v ids %v", seen.attempts, seen.ids)
		}
	})
}

func TestHandlerTouchKeepsItsContext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "worker", namespace())
		q := openQueueWith(t, c, "jobs", tinyRetries(3))
		const ttr = 300 * time.Millisecond
		result := make(chan error, 1)
		var seen calls
		startHandlers(t, q, 1, 1, func(ctx context.Context, d Message) error {
			seen.add(d)
			// Touch every 50ms for twice the TTR: the context lives on.
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for end := time.Now().Add(2 * ttr); time.Now().Before(end); {
				select {
				case <-ctx.Done():
					result <- fmt.Errorf("context ended although touched: %w", ctx.Err())
					return ctx.Err()
				case <-tick.C:
					if err := d.Touch(ctx); err != nil {
						result <- err
						return err
					}
				}
			}
			result <- nil
			return nil
		})
		mustPut(t, q, "job", TTR(ttr))
		select {
		case err := <-result:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("handler did not finish")
		}
		eventually(t, "the ack lands", func() bool {
			r, j, u := counts(t, c, "jobs")
			return r == 0 && j == 0 && u == 0
		})
		if seen.n() != 1 {
			t.Fatalf("handled %d times, want once", seen.n())
		}
	})
}

func TestHandlerContextEndsWhenConsumingStopsWithoutCountingAnAttempt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "worker", ns)
		other := openT(t, b, "other", ns)
		q := openQueue(t, c, "jobs")
		mustPut(t, q, "plain")
		mustPut(t, q, "leased", TTR(time.Minute))
		started := make(chan string, 2)
		ended := make(chan error, 2)
		startHandlers(t, q, 2, 2, func(ctx context.Context, d Message) error {
			started <- d.Payload()
			select {
			case <-ctx.Done():
				ended <- ctx.Err()
				return ctx.Err()
			case <-time.After(10 * time.Second):
				ended <- errors.New("context not cancelled by StopConsuming")
				return nil
			}
		})
		for range 2 {
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Fatal("handlers did not start")
			}
		}
		select {
		case <-q.StopConsuming():
		case <-time.After(5 * time.Second):
			t.Fatal("StopConsuming did not finish")
		}
		for range 2 {
			if err := <-ended; !errors.Is(err, context.Canceled) {
				t.Fatalf("handler's context: %v, want context.Canceled", err)
			}
		}
		wantCounts(t, other, "jobs", 2, 0, 0)
		ds, err := openQueue(t, other, "jobs").TakeBatch(ctx, 2, time.Second)
		if err != nil || len(ds) != 2 {
			t.Fatalf("take: %d, %v", len(ds), err)
		}
		for _, d := range ds {
			if d.Attempts() != 1 {
				t.Fatalf("%q after a stop: attempts %d, want 1", d.Payload(), d.Attempts())
			}
		}
		ackAll(t, ds)
		wantCounts(t, other, "jobs", 0, 0, 0)
	})
}

func TestHandlerRejectsUnrunDeliveryAttemptedTooOften(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		taker := openT(t, b, "taker", ns)
		worker := openT(t, b, "worker", ns)
		qt := openQueue(t, taker, "jobs")
		// Its lease runs out twice (MaxAttempts): a consumer that hangs or
		// crashes on it each time.
		mustPut(t, qt, "poison", TTR(50*time.Millisecond))
		first := mustTake(t, qt, time.Second)
		second := mustTake(t, qt, 5*time.Second)
		if second.Attempts() != 2 {
			t.Fatalf("second take: attempts %d", second.Attempts())
		}

		q := openQueueWith(t, worker, "jobs", tinyRetries(2))
		var ran calls
		startHandlers(t, q, 1, 1, func(ctx context.Context, d Message) error {
			ran.add(d)
			return nil
		})
		eventually(t, "the delivery is rejected", func() bool {
			r, j, u := counts(t, worker, "jobs")
			return r == 0 && j == 1 && u == 0
		})
		if ran.n() != 0 {
			t.Fatalf("handler ran %d times on a delivery past its attempts", ran.n())
		}
		rej := rejectedEnvelopes(t, b, q)
		if len(rej) != 1 || rej[0].payload != "poison" {
			t.Fatalf("rejected: %+v", rej)
		}
		n, err := strconv.Atoi(rej[0].header.Get(HeaderAttempts))
		if err != nil || n < 3 || rej[0].header.Get(HeaderError) == "" {
			t.Fatalf("rejected headers: %v", rej[0].header)
		}
		wantLeaseLost(t, "first taker's late ack", first.Ack())
		wantLeaseLost(t, "second taker's late ack", second.Ack())
	})
}

func TestTakeAndConsumersShareOneQueue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ns := namespace()
		pusher := openT(t, b, "pusher", ns)
		puller := openT(t, b, "puller", ns)
		qc := openQueue(t, pusher, "jobs")
		qt := openQueue(t, puller, "jobs")

		const total = 2000
		var mu sync.Mutex
		acked := map[string]int{}
		byWay := map[string]int{}
		var failures []error
		record := func(way string, d Message) {
			err := d.Ack()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, fmt.Errorf("%s ack %q: %w", way, d.Payload(), err))
				return
			}
			acked[d.Payload()]++
			byWay[way]++
		}
		done := func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(failures) > 0 || byWay["take"]+byWay["batch"]+byWay["consumer"] >= total
		}

		// Two goroutines pull through one handle of the second connection,
		// one with Take and one with TakeBatch.
		pullDone := make(chan error, 2)
		pull := func(way string, take func() (Deliveries, error)) {
			for !done() {
				ds, err := take()
				if errors.Is(err, ErrorTimeout) {
					continue
				}
				if err != nil {
					pullDone <- err
					return
				}
				for _, d := range ds {
					record(way, d)
				}
			}
			pullDone <- nil
		}
		go pull("take", func() (Deliveries, error) {
			d, err := qt.Take(ctx, 100*time.Millisecond)
			return Deliveries{d}, err
		})
		go pull("batch", func() (Deliveries, error) { return qt.TakeBatch(ctx, 20, 100*time.Millisecond) })
		payloads := make([]string, total)
		for i := range payloads {
			payloads[i] = fmt.Sprintf("job-%d", i)
		}
		if err := qc.Publish(payloads...); err != nil {
			t.Fatal(err)
		}
		if err := qc.StartConsuming(10, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := qc.AddConsumerFunc("c", func(dd Delivery) { d := dd.(Message); record("consumer", d) }); err != nil {
			t.Fatal(err)
		}
		eventually(t, "every payload acked", done)
		for range 2 {
			if err := <-pullDone; err != nil {
				t.Fatalf("pull loop: %v", err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(failures) > 0 {
			t.Fatal(failures)
		}
		for _, p := range payloads {
			if acked[p] != 1 {
				t.Fatalf("%q acked %d times", p, acked[p])
			}
		}
		if len(acked) != total {
			t.Fatalf("%d distinct payloads acked, want %d", len(acked), total)
		}
		t.Logf("acked by Take: %d, by TakeBatch: %d, by the consumer: %d", byWay["take"], byWay["batch"], byWay["consumer"])
		if byWay["take"]+byWay["batch"] == 0 || byWay["consumer"] == 0 {
			t.Fatalf("one side got nothing: %v", byWay)
		}
		wantCounts(t, pusher, "jobs", 0, 0, 0)
	})
}

func TestTakeWaitsTimesOutAndStops(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "taker", ns)
		q := openQueue(t, c, "jobs")

		// Timeout 0 on an empty queue: ErrorTimeout at once.
		start := time.Now()
		if d, err := q.Take(ctx, 0); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("take(0) on empty queue: %v, %v", d, err)
		}
		if waited := time.Since(start); waited > time.Second {
			t.Fatalf("take(0) waited %v", waited)
		}

		// A waiting Take returns soon after a publish from elsewhere.
		got := make(chan Message, 1)
		errs := make(chan error, 1)
		go func() {
			d, err := q.Take(ctx, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			got <- d
		}()
		time.Sleep(50 * time.Millisecond)
		published := time.Now()
		mustPut(t, openQueue(t, openT(t, b, "publisher", ns), "jobs"), "wake up")
		select {
		case d := <-got:
			if d.Payload() != "wake up" {
				t.Fatalf("took %q", d.Payload())
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case err := <-errs:
			t.Fatalf("waiting take: %v", err)
		case <-time.After(4 * time.Second):
			t.Fatal("waiting take did not return after a publish")
		}
		t.Logf("take returned %v after the publish", time.Since(published))

		// TakeBatch: up to max, at least one, without waiting for max.
		if err := q.Publish("a", "b", "c", "d", "e"); err != nil {
			t.Fatal(err)
		}
		ds, err := q.TakeBatch(ctx, 3, time.Second)
		if err != nil || len(ds) != 3 {
			t.Fatalf("take batch of 3 from 5: %d, %v", len(ds), err)
		}
		ackAll(t, ds)
		start = time.Now()
		ds, err = q.TakeBatch(ctx, 10, 5*time.Second)
		if err != nil || len(ds) != 2 || strings.Join(ds.Payloads(), ",") != "d,e" {
			t.Fatalf("take batch of 10 from 2: %v, %v", ds.Payloads(), err)
		}
		if waited := time.Since(start); waited > 4*time.Second {
			t.Fatalf("take batch waited %v for more than there was", waited)
		}
		ackAll(t, ds)
		for _, bad := range []func() error{
			func() error { _, err := q.TakeBatch(ctx, 0, time.Second); return err },
			func() error { _, err := q.Take(ctx, -time.Second); return err },
		} {
			if err := bad(); !errors.Is(err, ErrorInvalidArgument) {
				t.Fatalf("bad take arguments: %v, want an ArgumentError", err)
			}
		}

		// A cancelled context ends a waiting Take.
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			_, err := q.Take(cctx, 10*time.Second)
			errs <- err
		}()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case err := <-errs:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled take: %v, want context.Canceled", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("a cancelled take kept waiting")
		}

		// StopAllConsuming ends a waiting Take, and later Takes fail.
		go func() {
			_, err := q.Take(ctx, 10*time.Second)
			errs <- err
		}()
		time.Sleep(50 * time.Millisecond)
		<-c.StopAllConsuming()
		select {
		case err := <-errs:
			if !errors.Is(err, ErrorConsumingStopped) {
				t.Fatalf("take waiting across a stop: %v, want ErrorConsumingStopped", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("a waiting take outlived StopAllConsuming")
		}
		if _, err := q.Take(ctx, 0); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("take after StopAllConsuming: %v, want ErrorConsumingStopped", err)
		}
	})
}

func TestRetryPolicyBackoff(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	want := []time.Duration{10, 20, 40, 80, 100, 100, 100}
	for i, w := range want {
		if got := p.Backoff(i + 1); got != w*time.Millisecond {
			t.Fatalf("Backoff(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := p.Backoff(10_000); got != p.MaxBackoff {
		t.Fatalf("Backoff(10000) = %v, want the cap", got)
	}
	if got := DefaultRetryPolicy.Backoff(1_000); got < 8*time.Minute || got > 10*time.Minute {
		t.Fatalf("default Backoff(1000) = %v, want 10m less at most 20%%", got)
	}
	if got := (RetryPolicy{MaxAttempts: 3}).Backoff(2); got != 0 {
		t.Fatalf("zero backoff policy: %v", got)
	}

	for _, jitter := range []float64{0.2, 1} {
		pj := p
		pj.Jitter = jitter
		for i, w := range want {
			d := w * time.Millisecond
			lo := time.Duration(float64(d) * (1 - jitter))
			below := false
			for range 200 {
				got := pj.Backoff(i + 1)
				if got < lo || got > d {
					t.Fatalf("jitter %v: Backoff(%d) = %v, want within [%v, %v]", jitter, i+1, got, lo, d)
				}
				below = below || got < d
			}
			if !below {
				t.Fatalf("jitter %v: Backoff(%d) never shortened in 200 tries", jitter, i+1)
			}
		}
	}

	if _, err := openT(t, backend{client: realOrMini(t)}, "w", namespace()).OpenQueue("q", WithRetryPolicy(RetryPolicy{MaxAttempts: 0})); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("MaxAttempts 0: %v, want an ArgumentError", err)
	}
}
