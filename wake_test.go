package redq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sendCounter is a go-redis hook that numbers the requests a client sends
// (a pipeline is one request), knows whether a wait is in flight, and
// notes which request's reply carried a payload.
type sendCounter struct {
	sends   atomic.Int64
	waiting atomic.Int64 // requests with a BLMOVE in flight
	mu      sync.Mutex
	carried map[string]int64 // payload -> number of the request whose reply held it
	byWait  map[string]bool  // payload -> whether that request held a wait
}

func newSendCounter() *sendCounter {
	return &sendCounter{carried: map[string]int64{}, byWait: map[string]bool{}}
}

func (h *sendCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sendCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.track([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *sendCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.track(cmds, func() error { return next(ctx, cmds) })
	}
}

func (h *sendCounter) track(cmds []redis.Cmder, run func() error) error {
	n := h.sends.Add(1)
	wait := false
	for _, c := range cmds {
		wait = wait || strings.EqualFold(c.Name(), "blmove")
	}
	if wait {
		h.waiting.Add(1)
		defer h.waiting.Add(-1)
	}
	err := run()
	for _, c := range cmds {
		cmd, ok := c.(*redis.Cmd)
		if !ok {
			continue
		}
		v, _ := cmd.Val().([]any)
		for _, x := range v {
			if s, ok := x.(string); ok && strings.Contains(s, "wake-") {
				h.mu.Lock()
				h.carried[s[strings.Index(s, "wake-"):]] = n
				h.byWait[s[strings.Index(s, "wake-"):]] = wait
				h.mu.Unlock()
			}
		}
	}
	return err
}

// wakeRig is a consumer connection whose client counts what it sends
// (h), consuming queue q (prefetch 1, a 30s poll) into got, and a
// publisher connection pub with its handle pq on the same queue.
type wakeRig struct {
	c   *redisConnection
	pub Connection
	q   Queue
	pq  Queue
	h   *sendCounter
	got chan Delivery
}

// newWakeRig opens the rig on a real Redis; readTimeout 0 keeps
// go-redis's default.
func newWakeRig(t *testing.T, readTimeout time.Duration, queue string) *wakeRig {
	t.Helper()
	shared := realClient(t)
	client := redis.NewClient(&redis.Options{Addr: shared.Options().Addr, ReadTimeout: readTimeout})
	t.Cleanup(func() { client.Close() })
	r := &wakeRig{h: newSendCounter(), got: make(chan Delivery, 1)}
	client.AddHook(r.h)
	ns := namespace()
	c, err := openConn(client, "waker", nil, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-c.StopAllConsuming() })
	r.c = c
	r.pub = openT(t, backend{name: "redis", client: shared}, "pub", ns)
	r.q = openQueue(t, c, queue)
	r.pq = openQueue(t, r.pub, queue)
	if err := r.q.StartConsuming(1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := r.q.AddConsumerFunc("w", func(d Delivery) { r.got <- d }); err != nil {
		t.Fatal(err)
	}
	return r
}

// idle waits until the consumer is idle (a wait is in flight and nothing
// else is being sent) and returns how many requests were sent by then.
func (r *wakeRig) idle(t *testing.T) int64 {
	t.Helper()
	var before int64
	eventually(t, "the consumer waits", func() bool {
		before = r.h.sends.Load()
		time.Sleep(20 * time.Millisecond)
		return r.h.waiting.Load() == 1 && r.h.sends.Load() == before
	})
	return before
}

// A delivery published into an idle queue reaches the consumer in the
// reply to the request that was waiting: the consumer's client sends
// nothing between the publish and the hand-over (before, the wait's reply
// only woke the loop, which then sent a fetch).
func TestIdleWakeHandsOverTheDeliveryInOneRoundTrip(t *testing.T) {
	r := newWakeRig(t, time.Minute, "wake")
	pub, q, pq, h, got := r.pub, r.q, r.pq, r.h, r.got
	for i := 0; i < 5; i++ {
		before := r.idle(t)
		payload := fmt.Sprintf("wake-%d", i)
		if err := pq.Publish(payload); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-got:
			h.mu.Lock()
			n, ok := h.carried[payload]
			h.mu.Unlock()
			if d.Payload() != payload || !ok || n > before {
				t.Fatalf("pickup %d: %q came in the reply to request %d (found: %v); the wait in flight at the publish was request %d or earlier", i, d.Payload(), n, ok, before)
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("publish into an idle queue was not picked up")
		}
	}
	wantCounts(t, pub, "wake", 0, 0, 0)
	start := time.Now()
	<-q.StopConsuming()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("StopConsuming took %v: the wait was not ended", d)
	}
}

// A connection that a cleaner declared dead while it waited idle learns it
// from the fetch that comes with the wait: that fetch refuses, takes
// nothing, and the delivery that woke it stays for a live connection.
//
// It runs on a real Redis only: miniredis has no CLIENT ID, so its waits
// go through the pool without a fetch behind them.
func TestIdleWakeOfACleanedConnectionTakesNothing(t *testing.T) {
	b := backend{name: "redis", client: realClient(t)}
	func() {
		ns := namespace()
		z, err := openConn(b.client, "zombie", nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-z.StopAllConsuming() })
		admin := openT(t, b, "admin", ns)
		qz := openQueue(t, z, "jobs")
		if err := qz.StartConsuming(1, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		zgot := make(chan Delivery, 1)
		if _, err := qz.AddConsumerFunc("z", func(d Delivery) { zgot <- d }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // let it go idle
		pause(t, b, z)
		if _, err := NewCleaner(admin).Clean(); err != nil {
			t.Fatal(err)
		}
		if err := openQueue(t, admin, "jobs").Publish("p"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		select {
		case d := <-zgot:
			t.Fatalf("the cleaned connection handed out %q", d.Payload())
		default:
		}
		wantCounts(t, admin, "jobs", 1, 0, 0)
		live := openT(t, b, "live", ns)
		d := mustTake(t, openQueue(t, live, "jobs"), 10*time.Second)
		if d.Payload() != "p" {
			t.Fatalf("live took %q", d.Payload())
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-zgot:
			t.Fatalf("the cleaned connection handed out %q", d.Payload())
		default:
		}
		resume(z)
	}()
}

// go-redis reads a pipeline with the client's read timeout, so a wait sent
// with its fetch must end before it: an idle consumer with a pollDuration
// far beyond the read timeout reports no errors and still picks up a
// publish. At 200ms the wait must leave room for Redis's 100ms timeout
// granularity.
func TestIdleWaitStaysWithinTheReadTimeout(t *testing.T) {
	for _, rt := range []time.Duration{600 * time.Millisecond, 200 * time.Millisecond} {
		t.Run(rt.String(), func(t *testing.T) { idleWaitWithin(t, rt) })
	}
}

func idleWaitWithin(t *testing.T, rt time.Duration) {
	shared := realClient(t)
	client := redis.NewClient(&redis.Options{Addr: shared.Options().Addr, ReadTimeout: rt})
	t.Cleanup(func() { client.Close() })
	errs := make(chan error, 10)
	ns := namespace()
	c, err := openConn(client, "short", errs, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-c.StopAllConsuming() })
	q := openQueue(t, c, "short")
	if err := q.StartConsuming(1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got := make(chan Delivery, 1)
	if _, err := q.AddConsumerFunc("w", func(d Delivery) { got <- d }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // several read timeouts
	if err := openQueue(t, openT(t, backend{name: "redis", client: shared}, "pub", ns), "short").Publish("late"); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("publish into an idle queue was not picked up")
	}
	select {
	case err := <-errs:
		t.Fatalf("idle consumer reported %v", err)
	default:
	}
}

// Deliveries that the consumer does not wait on directly come in the reply
// of a wait too: one of a priority (the publish pushes a wake marker), a
// delayed one (the wait ends at its due time), and the first after a
// paused queue is resumed (the consumer waits on the resume list).
func TestIdleWakeTakesPrioritiesDelayedAndResumed(t *testing.T) {
	r := newWakeRig(t, 0, "mixed")
	c, pq, h, got := r.c, r.pq, r.h, r.got
	ctx := context.Background()
	idle := func() { r.idle(t) }
	expect := func(payload string, after time.Time, notBefore time.Duration) {
		t.Helper()
		select {
		case d := <-got:
			if d.Payload() != payload {
				t.Fatalf("got %q, want %q", d.Payload(), payload)
			}
			if el := time.Since(after); el < notBefore {
				t.Fatalf("%q arrived after %v, before its due time", payload, el)
			}
			h.mu.Lock()
			byWait := h.byWait[payload]
			h.mu.Unlock()
			if !byWait {
				t.Fatalf("%q did not come in the reply of a wait", payload)
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q was not picked up", payload)
		}
	}
	idle()
	start := time.Now()
	mustPut(t, pq, "wake-priority", Priority(5))
	expect("wake-priority", start, 0)
	idle()
	start = time.Now()
	mustPut(t, pq, "wake-delayed", Delay(300*time.Millisecond))
	expect("wake-delayed", start, 250*time.Millisecond)
	if err := pq.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	mustPut(t, pq, "wake-resumed")
	idle()
	select {
	case d := <-got:
		t.Fatalf("got %q from a paused queue", d.Payload())
	case <-time.After(200 * time.Millisecond):
	}
	start = time.Now()
	if err := pq.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	expect("wake-resumed", start, 0)
	wantCounts(t, c, "mixed", 0, 0, 0)
}

// The lease of a delivery that a wait's fetch took is measured from when
// the fetch ran, not from when the wait was sent: a delivery whose time
// to run is shorter than the wait is still handed out. It runs on a real
// Redis only: miniredis has no CLIENT ID, so its waits go through the pool
// without a fetch behind them.
func TestIdleWakeHandsOutADeliveryWithATTRShorterThanTheWait(t *testing.T) {
	b := backend{name: "redis", client: realClient(t)}
	func() {
		ns := namespace()
		c := openT(t, b, "ttr", ns)
		q := openQueue(t, c, "ttr")
		if err := q.StartConsuming(1, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		got := make(chan Delivery, 1)
		if _, err := q.AddConsumerFunc("w", func(d Delivery) { got <- d }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // the wait has lasted longer than the TTR
		mustPut(t, openQueue(t, openT(t, b, "pub", ns), "ttr"), "short", TTR(time.Second))
		select {
		case d := <-got:
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a delivery with a TTR shorter than the wait was not handed out")
		}
	}()
}

// When the reply of a wait and its fetch is lost after the fetch took a
// delivery, the fetch is sent again under the same token and Redis answers
// from its record with the delivery the first send took. Its lease started
// then: the delivery's local lease end must not be later than Redis's,
// however long the lost reply was held.
func TestIdleWakeLeaseOfAReplayedFetchEndsNoLaterThanRedis(t *testing.T) {
	direct := realClient(t)
	r := newFaultRig(t, direct, realRedis.Addr())
	q := openQueue(t, r.worker, "wkl")
	got := make(chan Delivery, 10)
	r.proxy.armHold("BLMOVE")
	if err := q.StartConsuming(10, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AddConsumerFunc("w", func(d Delivery) { got <- d }); err != nil {
		t.Fatal(err)
	}
	r.proxy.awaitTrip(t, 1) // the wait is sent, its reply will be held
	time.Sleep(100 * time.Millisecond)
	mustPut(t, openQueue(t, r.admin, "wkl"), "x", TTR(3*time.Second))
	eventually(t, "the fetch behind the wait took it", func() bool {
		_, _, u := counts(t, r.admin, "wkl")
		return u == 1
	})
	time.Sleep(time.Second)
	r.proxy.releaseHeld() // the reply is lost; the fetch is sent again
	select {
	case d := <-got:
		rd := d.(*redisDelivery)
		score, err := direct.ZScore(context.Background(), q.keys.block[3], rd.ref()+":"+r.worker.Name()).Result()
		if err != nil {
			t.Fatal(err)
		}
		local, inRedis := time.Unix(0, rd.leaseEnd.Load()), time.UnixMilli(int64(score))
		if late := local.Sub(inRedis); late > time.Millisecond {
			t.Errorf("local lease end %v later than Redis's", late)
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery was not handed out")
	}
	select {
	case d := <-got:
		t.Fatalf("handed out twice: %q", d.Payload())
	case <-time.After(300 * time.Millisecond):
	}
	wantCounts(t, r.admin, "wkl", 0, 0, 0)
}
