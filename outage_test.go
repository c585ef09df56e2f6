package redq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// awaitPaused waits until c paused for heartbeat errors.
func awaitPaused(t testing.TB, c *redisConnection) {
	t.Helper()
	eventually(t, "the connection pauses", func() bool {
		c.stateMu.Lock()
		defer c.stateMu.Unlock()
		return c.paused
	})
}

// A connection whose heartbeat fails HeartbeatErrorLimit times in a row
// pauses: it hands out none of the deliveries it buffered, and it does not
// stop; once Redis answers again it resumes by itself and hands them out.
func TestHeartbeatErrorLimitPausesAndResumes(t *testing.T) {
	forEachOutage(t, func(t *testing.T, o outage) {
		errs := make(chan error, 10000)
		c, err := openConn(o.client, "paused", errs, namespace(),
			WithHeartbeat(10*time.Millisecond, 30*time.Second), WithHeartbeatErrorLimit(3))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-c.StopAllConsuming() })
		name := c.Name()
		q := openQueue(t, c, "jobs")
		if err := q.Publish("a", "b", "c", "d", "e"); err != nil {
			t.Fatal(err)
		}
		if err := q.StartConsuming(10, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		got, gate := make(chan Delivery, 10), make(chan struct{})
		var once sync.Once
		openGate := func() { once.Do(func() { close(gate) }) }
		t.Cleanup(openGate) // before the stop: a failed test must not hang it
		if _, err := q.AddConsumerFunc("gated", func(d Delivery) { got <- d; <-gate }); err != nil {
			t.Fatal(err)
		}
		first := <-got
		eventually(t, "the rest buffered", func() bool { return len(q.buf) == 4 })

		o.down()
		isUp := false
		t.Cleanup(func() {
			if !isUp {
				o.up() // a failed test must not leave the stop waiting for Redis
			}
		})
		awaitPaused(t, c)
		openGate() // the consumer asks for the next delivery: it must wait
		select {
		case d := <-got:
			t.Fatalf("a paused connection handed out %s", d.Payload())
		case <-time.After(300 * time.Millisecond):
		}
		if c.isStopped() {
			t.Fatal("the connection stopped at the heartbeat error limit")
		}

		o.up()
		isUp = true
		all := []Delivery{first}
		for len(all) < 5 {
			select {
			case d := <-got:
				all = append(all, d)
			case <-time.After(15 * time.Second):
				t.Fatalf("after Redis came back the consumer got %d of 5", len(all))
			}
		}
		for _, d := range all {
			if err := d.Ack(); err != nil {
				t.Fatalf("ack %s: %v", d.Payload(), err)
			}
		}
		if c.Name() != name {
			t.Fatalf("renamed from %s to %s although it was never declared dead", name, c.Name())
		}
		max := 0
		for len(errs) > 0 {
			err := <-errs
			var he *HeartbeatError
			if errors.As(err, &he) && he.Count > max {
				max = he.Count
			}
			if errors.Is(err, ErrorConnectionLost) {
				t.Fatalf("error channel: %v", err)
			}
		}
		if max < 3 {
			t.Fatalf("highest heartbeat error count %d, want at least the limit 3", max)
		}
		wantCounts(t, c, "jobs", 0, 0, 0)
	})
}

// WithStopOnHeartbeatErrorLimit gives rmq's behaviour: at the limit the
// connection stops all consuming, for good.
func TestStopOnHeartbeatErrorLimitStopsForGood(t *testing.T) {
	forEachOutage(t, func(t *testing.T, o outage) {
		errs := make(chan error, 1000)
		c, err := openConn(o.client, "limited", errs, namespace(),
			WithHeartbeat(10*time.Millisecond, 10*time.Second), WithHeartbeatErrorLimit(3), WithStopOnHeartbeatErrorLimit())
		if err != nil {
			t.Fatal(err)
		}
		q := openQueue(t, c, "jobs")
		if err := q.StartConsuming(1, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		o.down()
		eventually(t, "the connection stops itself", c.isStopped)
		select {
		case <-c.StopAllConsuming():
		case <-time.After(15 * time.Second):
			t.Fatal("stop did not finish")
		}
		max := 0
		for len(errs) > 0 {
			var he *HeartbeatError
			if errors.As(<-errs, &he) && he.Count > max {
				max = he.Count
			}
		}
		if max != 3 {
			t.Fatalf("highest heartbeat error count %d, want 3", max)
		}
		o.up()
		if _, err := c.OpenQueue("more"); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("OpenQueue after the stop: %v, want ErrorConsumingStopped", err)
		}
	})
}

// A client the program closed never comes back: the connection stops
// instead of trying for ever, so its goroutines end.
func TestClosedClientStopsTheConnection(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	c, err := openConn(client, "closed", nil, namespace(), WithHeartbeat(10*time.Millisecond, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	q := openQueue(t, c, "jobs")
	if err := q.StartConsuming(1, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the connection stops itself", c.isStopped)
	select {
	case <-c.StopAllConsuming():
	case <-time.After(15 * time.Second):
		t.Fatal("stop did not finish")
	}
}

// outageRun is a worker connection consuming "jobs" with a consumer and
// "takes" with a Take loop, behind a proxy the test can cut, on a private
// redis-server with an append-only file; and an admin connection beside it
// that publishes and may run a cleaner in a loop.
type outageRun struct {
	t      *testing.T
	srv    *redistest.Server
	proxy  *procProxy
	ns     Option
	errs   chan error
	worker *redisConnection
	admin  *redisConnection

	mu       sync.Mutex
	consumed map[string]int
	badAcks  []string
}

func newOutageRun(t *testing.T, opts ...redistest.Option) *outageRun {
	skipShort(t, "stops and restarts Redis for seconds at a time")
	srv := redistest.Start(t, opts...)
	r := &outageRun{t: t, srv: srv, ns: namespace(), errs: make(chan error, 100000), consumed: map[string]int{}}
	r.proxy = startProcProxy(t, srv.Addr())
	// No retries inside go-redis: an outage reaches redq at once.
	wc := redis.NewClient(&redis.Options{Addr: r.proxy.addr(), MaxRetries: -1, DialerRetries: 1})
	ac := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { wc.Close(); ac.Close() })
	var err error
	r.worker, err = openConn(wc, "worker", r.errs, r.ns,
		WithHeartbeat(100*time.Millisecond, time.Second), WithHeartbeatErrorLimit(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-r.worker.StopAllConsuming() })
	r.admin, err = openConn(ac, "admin", nil, r.ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-r.admin.StopAllConsuming() })
	q := openQueue(t, r.worker, "jobs")
	if err := q.StartConsuming(10, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AddConsumerFunc("w", func(d Delivery) {
		time.Sleep(time.Millisecond)
		r.settle(d)
	}); err != nil {
		t.Fatal(err)
	}
	tq := openQueue(t, r.worker, "takes")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			d, err := tq.Take(ctx, 200*time.Millisecond)
			if err != nil {
				if !errors.Is(err, ErrorTimeout) {
					time.Sleep(20 * time.Millisecond)
				}
				continue
			}
			r.settle(d)
		}
	}()
	return r
}

// settle counts d as consumed and acks it; an ack may fail only because
// the delivery was taken under a registration declared dead meanwhile.
func (r *outageRun) settle(d Delivery) {
	r.mu.Lock()
	r.consumed[d.Payload()]++
	r.mu.Unlock()
	err := d.(Message).AckContext(context.Background())
	if err != nil && (!errors.Is(err, ErrorNotFound) || !errors.Is(err, ErrorConnectionLost)) {
		r.mu.Lock()
		r.badAcks = append(r.badAcks, fmt.Sprintf("%s: %v", d.Payload(), err))
		r.mu.Unlock()
	}
}

func (r *outageRun) publish(queue, prefix string, n int) {
	r.t.Helper()
	q := openQueue(r.t, r.admin, queue)
	for i := 0; i < n; i++ {
		if err := q.Publish(fmt.Sprintf("%s-%s-%03d", queue, prefix, i)); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *outageRun) count() (distinct, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.consumed {
		total += n
	}
	return len(r.consumed), total
}

// cleanLoop runs a cleaner from the admin connection every 100ms until the
// returned function is called; it meets the outage too.
func (r *outageRun) cleanLoop() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			_, _ = NewCleaner(r.admin).CleanContext(cctx)
			ccancel()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// finish waits until everything published was consumed and nothing is left
// in Redis, and checks the duplicates.
func (r *outageRun) finish(want, maxDup int) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		distinct, _ := r.count()
		ready, rejected, unacked := counts(r.t, r.admin, "jobs")
		tr, tj, tu := counts(r.t, r.admin, "takes")
		if distinct == want && ready+rejected+unacked+tr+tj+tu == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("consumed %d of %d; jobs %d/%d/%d, takes %d/%d/%d (ready/rejected/unacked); errors: %v",
				distinct, want, ready, rejected, unacked, tr, tj, tu, drainErrs(r.errs, 10))
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var dups []string
	for p, n := range r.consumed {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", p, n))
		}
	}
	sort.Strings(dups)
	if len(dups) > maxDup {
		r.t.Errorf("%d deliveries consumed more than once (at most %d were in flight): %v", len(dups), maxDup, dups)
	}
	if len(r.badAcks) > 0 {
		r.t.Errorf("acks failed: %v", r.badAcks)
	}
	if r.worker.isStopped() {
		r.t.Error("the worker stopped")
	}
}

// drainErrs returns the distinct messages on errs, at most n.
func drainErrs(errs chan error, n int) []string {
	seen := map[string]bool{}
	var out []string
	for len(errs) > 0 && len(out) < n {
		msg := (<-errs).Error()
		if !seen[msg] {
			seen[msg] = true
			out = append(out, msg)
		}
	}
	return out
}

// awaitLost waits for the worker's *ConnectionLostError.
func (r *outageRun) awaitLost(old string) *ConnectionLostError {
	r.t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case err := <-r.errs:
			var lost *ConnectionLostError
			if errors.As(err, &lost) {
				if !errors.Is(err, ErrorConnectionLost) || lost.OldName != old || lost.NewName == old {
					r.t.Fatalf("%v: old %s, new %s (want old %s); matches ErrorConnectionLost: %v",
						err, lost.OldName, lost.NewName, old, errors.Is(err, ErrorConnectionLost))
				}
				return lost
			}
		case <-timeout:
			r.t.Fatal("no *ConnectionLostError on the error channel")
		}
	}
}

// A Redis outage longer than the heartbeat error limit and the heartbeat
// TTL, with a cleaner running all along, does not stop the worker: the
// same connection resumes consuming (and its Take caller taking) once
// Redis is back. Nothing is lost; only deliveries that were in flight are
// consumed twice.
func TestLongOutageResumesTheSameConnection(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	const before, after = 100, 40
	outage := func(r *outageRun) {
		r.srv.Kill()
		awaitPaused(r.t, r.worker)
		time.Sleep(1500 * time.Millisecond) // past the TTL of 1s
	}
	t.Run("cleaner first", func(t *testing.T) {
		r := newOutageRun(t, redistest.WithAppendOnly())
		stopCleaning := r.cleanLoop()
		defer stopCleaning()
		old := r.worker.Name()
		r.publish("jobs", "before", before)
		r.publish("takes", "before", before/10)
		eventually(t, "some consumed", func() bool { d, _ := r.count(); return d >= 20 })
		outage(r)
		// The worker stays cut off while Redis comes back and the cleaner
		// declares it dead and returns what it held.
		r.proxy.down()
		r.srv.Restart(t)
		eventually(t, "the cleaner declares the worker dead", func() bool {
			live, err := r.admin.client.SIsMember(context.Background(), r.admin.keys.connections, old).Result()
			return err == nil && !live
		})
		r.proxy.up(t)
		lost := r.awaitLost(old)
		if r.worker.Name() != lost.NewName {
			t.Fatalf("Name() = %s, want the fresh %s", r.worker.Name(), lost.NewName)
		}
		r.publish("jobs", "after", after)
		r.publish("takes", "after", after/10)
		// In flight: the prefetch buffer (10) and the delivery in the
		// consumer, and the one delivery a Take may hold.
		r.finish(before+after+(before+after)/10, 12)
	})
	t.Run("heartbeat first", func(t *testing.T) {
		r := newOutageRun(t, redistest.WithAppendOnly())
		stopCleaning := r.cleanLoop()
		old := r.worker.Name()
		r.publish("jobs", "before", before)
		r.publish("takes", "before", before/10)
		eventually(t, "some consumed", func() bool { d, _ := r.count(); return d >= 20 })
		outage(r)
		// The cleaner meets the outage and is stopped; the worker's
		// heartbeat comes back first, after its TTL lapsed.
		stopCleaning()
		r.srv.Restart(t)
		eventually(t, "the worker resumes", func() bool {
			_, ok, _ := r.worker.usable()
			return ok
		})
		stopCleaning = r.cleanLoop()
		defer stopCleaning()
		r.publish("jobs", "after", after)
		r.publish("takes", "after", after/10)
		r.finish(before+after+(before+after)/10, 0)
		if r.worker.Name() != old {
			t.Fatalf("renamed from %s to %s although its heartbeat came back first", old, r.worker.Name())
		}
		for len(r.errs) > 0 {
			if err := <-r.errs; errors.Is(err, ErrorConnectionLost) {
				t.Fatalf("error channel: %v", err)
			}
		}
	})
}

// Redis restarted without persistence forgets every registration: the
// worker goes on under a fresh one, its consumer and Take caller with it.
func TestRestartWithoutPersistenceResumesUnderAFreshName(t *testing.T) {
	r := newOutageRun(t)
	timers, err := r.worker.OpenTimers("alarms")
	if err != nil {
		t.Fatal(err)
	}
	old := r.worker.Name()
	r.publish("jobs", "before", 20)
	r.publish("takes", "before", 5)
	eventually(t, "all consumed", func() bool { d, _ := r.count(); return d == 25 })
	r.srv.Restart(t)
	if lost := r.awaitLost(old); lost.NewName == old {
		t.Fatalf("the connection went on under its old name %s", old)
	}
	r.publish("jobs", "after", 20)
	r.publish("takes", "after", 5)
	r.finish(50, 0)
	// A timer set opened before works under the fresh registration too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := timers.Set(ctx, "wake", 0); err != nil {
		t.Fatal(err)
	}
	fire, err := timers.Next(ctx, 10*time.Second)
	if err != nil || fire.Key() != "wake" {
		t.Fatalf("Next = %v, %v", fire, err)
	}
	if err := fire.Ack(ctx); err != nil {
		t.Fatalf("ack the fire under the fresh registration: %v", err)
	}
}

// A Redis demoted to a replica (READONLY) and promoted back: the worker
// pauses while its heartbeat is refused and resumes under its own name.
func TestReadOnlyDemotionAndBackResumes(t *testing.T) {
	r := newOutageRun(t)
	old := r.worker.Name()
	r.publish("jobs", "before", 20)
	eventually(t, "all consumed", func() bool { d, _ := r.count(); return d == 20 })
	admin := r.srv.Client(t)
	ctx := context.Background()
	// A replica of a master that does not answer keeps its data and
	// refuses writes.
	if err := admin.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	awaitPaused(t, r.worker)
	var sawReadOnly bool
	for len(r.errs) > 0 {
		var he *HeartbeatError
		if err := <-r.errs; errors.As(err, &he) && classify(he.RedisErr) == failRefused {
			sawReadOnly = true
		}
	}
	if !sawReadOnly {
		t.Error("no HeartbeatError carried Redis's refusal")
	}
	if err := admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	r.publish("jobs", "after", 20)
	r.publish("takes", "after", 5)
	r.finish(45, 0)
	if r.worker.Name() != old {
		t.Fatalf("renamed from %s to %s", old, r.worker.Name())
	}
}

// TestMeasureOutageRecovery measures, with default options, the time from
// Redis back after an outage to the first delivery consumed by the same
// process, with a cleaner running every second from another connection.
// It runs only with REDQ_MEASURE_OUTAGE set to the outage's length (for
// example 90s).
func TestMeasureOutageRecovery(t *testing.T) {
	length, err := time.ParseDuration(os.Getenv("REDQ_MEASURE_OUTAGE"))
	if err != nil {
		t.Skip("set REDQ_MEASURE_OUTAGE=90s to measure")
	}
	srv := redistest.Start(t, redistest.WithAppendOnly())
	ns := namespace()
	errs := make(chan error, 100000)
	wc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	ac := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	worker, err := openConn(wc, "worker", errs, ns)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := openConn(ac, "admin", nil, ns)
	if err != nil {
		t.Fatal(err)
	}
	q := openQueue(t, worker, "jobs")
	if err := q.StartConsuming(10, time.Second); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 100)
	if _, err := q.AddConsumerFunc("w", func(d Delivery) { got <- time.Now(); _ = d.Ack() }); err != nil {
		t.Fatal(err)
	}
	pub := openQueue(t, admin, "jobs")
	if err := pub.Publish("before"); err != nil {
		t.Fatal(err)
	}
	<-got
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
				_, _ = NewCleaner(admin).Clean()
			}
		}
	}()
	old := worker.Name()
	srv.Kill()
	time.Sleep(length)
	srv.Restart(t)
	back := time.Now()
	if err := pub.Publish("after"); err != nil {
		t.Fatal(err)
	}
	first := <-got
	close(stop)
	t.Logf("outage %v: first delivery consumed %v after Redis was back (renamed: %v); errors: %v",
		length, first.Sub(back), worker.Name() != old, drainErrs(errs, 5))
}
