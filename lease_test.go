package redq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// redisClock moves Redis's clock forward: on miniredis with SetTime (the
// clock stands still from the first move on), on real Redis by waiting.
type redisClock struct {
	b   backend
	now time.Time
}

// freeze stops miniredis's clock at the current time (no-op on real Redis),
// so that due times computed from now on are known exactly.
func (c *redisClock) freeze() {
	if c.b.mini != nil && c.now.IsZero() {
		c.now = time.Now()
		c.b.mini.SetTime(c.now)
	}
}

func (c *redisClock) advance(d time.Duration) {
	if c.b.mini == nil {
		time.Sleep(d)
		return
	}
	c.freeze()
	c.now = c.now.Add(d)
	c.b.mini.SetTime(c.now)
}

// queueLeftovers lists the keys of q that still hold deliveries or leases
// (ready of any priority, levels, delayed, leases, rejected, unacked).
// Registration and idempotence bookkeeping (consumers, replies, meta, seq,
// fence), the notes of lost leases (which age out after a day), the
// receipts of releases and the publish records (see REPLY_KEEP in
// scripts/lib.lua) do not count.
func queueLeftovers(t testing.TB, b backend, q *redisQueue) []string {
	t.Helper()
	keys, err := b.client.Keys(context.Background(), q.keys.prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, k := range keys {
		rest := strings.TrimPrefix(k, q.keys.prefix+":")
		switch {
		case rest == "consumers", rest == "meta", rest == "pub", rest == "seq", rest == "fence",
			strings.HasPrefix(rest, "replies:"), strings.HasPrefix(rest, "lost:"), strings.HasPrefix(rest, "done:"),
			strings.HasPrefix(rest, "published:"):
		default:
			left = append(left, rest)
		}
	}
	sort.Strings(left)
	return left
}

func wantNothingLeft(t testing.TB, b backend, c Connection, q *redisQueue) {
	t.Helper()
	wantCounts(t, c, q.name, 0, 0, 0)
	if s := mustStats(t, c, q.name).QueueStats[q.name]; s.DelayedCount != 0 {
		t.Fatalf("%d delayed left", s.DelayedCount)
	}
	if left := queueLeftovers(t, b, q); len(left) > 0 {
		t.Fatalf("keys left in Redis: %v", left)
	}
}

func wantLeaseLost(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrorLeaseLost) || !errors.Is(err, ErrorNotFound) {
		t.Fatalf("%s: got %v, want an error matching ErrorLeaseLost and ErrorNotFound", what, err)
	}
}

func TestLeaseOfHungConsumerGoesBackToReadyForAnotherConnection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		hung := openT(t, b, "hung", ns)
		other := openT(t, b, "other", ns)
		qh := openQueue(t, hung, "jobs")
		qo := openQueue(t, other, "jobs")

		// On miniredis the lease runs out when the test moves Redis's
		// clock; on real Redis after 300ms. (Either way the new holder has
		// time to settle before its own lease runs out.)
		clock := &redisClock{b: b}
		ttr := 300 * time.Millisecond
		if b.mini != nil {
			ttr = time.Minute
			clock.freeze()
		}
		// "slow" is taken and its consumer hangs on it. The hung
		// connection then stops fetching (its consumer goes on hanging), so
		// that it cannot take "slow" back itself once the lease ran out.
		mustPut(t, qh, "slow", TTR(ttr))
		gotSlow := make(chan Message, 1)
		unblock := make(chan struct{})
		lateAck := make(chan error, 1)
		if err := qh.StartConsuming(1, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := qh.AddConsumerFunc("hung", func(dd Delivery) {
			d := dd.(Message)
			gotSlow <- d
			<-unblock
			lateAck <- d.AckContext(context.Background())
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			select {
			case <-unblock:
			default:
				close(unblock)
			}
		})
		var stale Message
		select {
		case stale = <-gotSlow:
		case <-time.After(5 * time.Second):
			t.Fatal("the hung consumer got nothing")
		}
		if stale.Attempts() != 1 {
			t.Fatalf("first take: attempts %d, want 1", stale.Attempts())
		}
		stopped := qh.StopConsuming() // finishes once the consumer returns
		// The hung connection's fetch loop must be over before the lease
		// runs out: a fetch of its own still under way would take "slow"
		// back itself (seen on a loaded machine).
		select {
		case <-qh.fetchDone:
		case <-time.After(5 * time.Second):
			t.Fatal("the hung connection's fetch loop did not end")
		}
		if n := mustStats(t, other, "jobs").QueueStats["jobs"].Connections[hung.Name()].UnackedCount; n != 1 {
			t.Fatalf("the hung connection holds %d, want the slow one", n)
		}

		// Another connection gets it once the lease ran out, although the
		// hung connection is alive.
		if b.mini != nil {
			if got, err := qo.Take(context.Background(), 0); !errors.Is(err, ErrorTimeout) {
				t.Fatalf("taken before its lease ran out: %v, %v", got, err)
			}
			clock.advance(ttr + time.Second)
		}
		d := mustTake(t, qo, 5*time.Second)
		if d.Payload() != "slow" || d.ID() != stale.ID() || d.Attempts() != 2 {
			t.Fatalf("retake: %q id %s attempts %d; want slow, id %s, attempts 2", d.Payload(), d.ID(), d.Attempts(), stale.ID())
		}
		st := mustStats(t, other, "jobs").QueueStats["jobs"]
		if cs := st.Connections[hung.Name()]; !cs.Active || hung.isStopped() {
			t.Fatalf("hung connection should be alive: %+v stopped=%v", cs, hung.isStopped())
		}
		if st.Connections[other.Name()].UnackedCount != 1 {
			t.Fatalf("new holder's unacked: %+v", st.Connections[other.Name()])
		}

		// The hung consumer wakes up: its late Ack says why it failed and
		// does not disturb the new holder.
		close(unblock)
		wantLeaseLost(t, "late ack", <-lateAck)
		if err := d.Ack(); err != nil {
			t.Fatalf("new holder's ack: %v", err)
		}
		<-stopped
		wantNothingLeft(t, b, other, qo)
	})
}

func TestStaleHandleOfRetakenDeliveryCannotActOnTheNewTake(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "worker", namespace())
		q := openQueue(t, c, "jobs")
		clock := &redisClock{b: b}
		ttr := 400 * time.Millisecond
		if b.mini != nil {
			ttr = time.Minute // the clock moves by SetTime: the new take keeps its lease
			clock.freeze()
		}
		mustPut(t, q, "job", TTR(ttr), Header(http.Header{"X-Trace": {"t1"}}))
		stale := mustTake(t, q, time.Second)
		if b.mini != nil {
			clock.advance(ttr + time.Second)
		}
		// The same connection takes it again once the lease ran out.
		d := mustTake(t, q, 5*time.Second)
		if d.ID() != stale.ID() || d.Attempts() != 2 {
			t.Fatalf("retake: id %s attempts %d; want %s and 2", d.ID(), d.Attempts(), stale.ID())
		}

		wantLeaseLost(t, "stale ack", stale.Ack())
		wantLeaseLost(t, "stale release", stale.Release(ctx, 0))
		wantLeaseLost(t, "stale delayed release", stale.Release(ctx, time.Second))
		wantLeaseLost(t, "stale touch", stale.Touch(ctx))
		wantLeaseLost(t, "stale reject", stale.Reject())

		// The new take is untouched: still held, nothing ready, delayed or
		// rejected, its lease its own.
		wantCounts(t, c, "jobs", 0, 0, 1)
		if s := mustStats(t, c, "jobs").QueueStats["jobs"]; s.DelayedCount != 0 {
			t.Fatalf("stale release scheduled it: %+v", s)
		}
		if err := d.Touch(ctx); err != nil {
			t.Fatalf("new take's touch: %v", err)
		}
		if err := d.Ack(); err != nil {
			t.Fatalf("new take's ack: %v", err)
		}
		wantCounts(t, c, "jobs", 0, 0, 0)
		// A stale verb after the new take was acked still says why.
		wantLeaseLost(t, "stale ack after the new take's ack", stale.Ack())
		wantNothingLeft(t, b, c, q)
	})
}

func TestTouchExtendsTheLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "worker", ns)
		other := openT(t, b, "other", ns)
		q := openQueue(t, c, "jobs")
		qo := openQueue(t, other, "jobs")

		// (The TTR leaves 150ms between touches for a loaded test machine.)
		const ttr = 200 * time.Millisecond
		mustPut(t, q, "long job", TTR(ttr))
		d := mustTake(t, q, time.Second)
		// Touch every 50ms for three times the TTR: meanwhile nobody else
		// can take it.
		end := time.Now().Add(3 * ttr)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		touches := 0
		for time.Now().Before(end) {
			<-tick.C
			if err := d.Touch(ctx); err != nil {
				t.Fatalf("touch %d: %v", touches+1, err)
			}
			touches++
			if got, err := qo.Take(ctx, 0); !errors.Is(err, ErrorTimeout) {
				t.Fatalf("re-delivered while touched (after %d touches): %v, %v", touches, got, err)
			}
		}
		wantCounts(t, c, "jobs", 0, 0, 1)

		// Without touches the lease runs out: the touches were what kept it.
		d2 := mustTake(t, qo, 5*time.Second)
		if d2.ID() != d.ID() || d2.Attempts() != 2 {
			t.Fatalf("after the lease: id %s attempts %d", d2.ID(), d2.Attempts())
		}
		wantLeaseLost(t, "touch after the lease ran out", d.Touch(ctx))
		if err := d2.Ack(); err != nil {
			t.Fatal(err)
		}
		err := d2.Touch(ctx)
		if !errors.Is(err, ErrorNotFound) || errors.Is(err, ErrorLeaseLost) {
			t.Fatalf("touch after ack: %v, want ErrorNotFound (and no lost lease)", err)
		}

		// Without a TTR, Touch only checks that the delivery is still ours.
		mustPut(t, q, "no lease")
		d3 := mustTake(t, q, time.Second)
		if err := d3.Touch(ctx); err != nil {
			t.Fatalf("touch without TTR: %v", err)
		}
		if err := d3.Ack(); err != nil {
			t.Fatal(err)
		}
		if err := d3.Touch(ctx); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("touch after ack without TTR: %v, want ErrorNotFound", err)
		}
		wantNothingLeft(t, b, c, q)
	})
}

func TestReleaseHandsTheDeliveryBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "worker", namespace())
		q := openQueue(t, c, "jobs")
		hdr := http.Header{"X-Trace": {"abc"}}
		mustPut(t, q, "job", Header(hdr))
		d := mustTake(t, q, time.Second)

		// Release(0): ready at once, same delivery, attempt counted.
		if err := d.Release(ctx, 0); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "jobs", 1, 0, 0)
		d2 := mustTake(t, q, time.Second)
		if d2.ID() != d.ID() || d2.Payload() != "job" || d2.Attempts() != 2 || d2.Header().Get("X-Trace") != "abc" {
			t.Fatalf("after release: id %s payload %q attempts %d header %v", d2.ID(), d2.Payload(), d2.Attempts(), d2.Header())
		}

		// Release(d): delayed, ready after d and not before.
		const delay = 200 * time.Millisecond
		clock := &redisClock{b: b}
		clock.freeze()
		start := time.Now()
		if err := d2.Release(ctx, delay); err != nil {
			t.Fatal(err)
		}
		s := mustStats(t, c, "jobs").QueueStats["jobs"]
		if s.DelayedCount != 1 || s.ReadyCount != 0 || s.UnackedCount() != 0 {
			t.Fatalf("after delayed release: %+v", s)
		}
		if got, err := q.Take(ctx, 0); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("delayed delivery taken at once: %v, %v", got, err)
		}
		if b.mini != nil {
			clock.advance(delay - time.Millisecond)
			if got, err := q.Take(ctx, 0); !errors.Is(err, ErrorTimeout) {
				t.Fatalf("delayed delivery taken 1ms early: %v, %v", got, err)
			}
			clock.advance(time.Millisecond)
		}
		d3 := mustTake(t, q, 5*time.Second)
		if b.mini == nil {
			if waited := time.Since(start); waited < delay-10*time.Millisecond {
				t.Fatalf("delayed delivery ready after %v, want %v", waited, delay)
			}
		}
		if d3.ID() != d.ID() || d3.Attempts() != 3 || d3.Header().Get("X-Trace") != "abc" {
			t.Fatalf("after delayed release: id %s attempts %d header %v", d3.ID(), d3.Attempts(), d3.Header())
		}
		if err := d3.Ack(); err != nil {
			t.Fatal(err)
		}

		// Release of an acked delivery: ErrorNotFound, nothing changed.
		if err := d3.Release(ctx, 0); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("release after ack: %v, want ErrorNotFound", err)
		}
		wantNothingLeft(t, b, c, q)

		// A bad delay: *ArgumentError, the delivery stays held.
		mustPut(t, q, "other")
		d4 := mustTake(t, q, time.Second)
		for _, bad := range []time.Duration{-time.Millisecond, MaxDelay + time.Hour} {
			err := d4.Release(ctx, bad)
			var ae *ArgumentError
			if !errors.As(err, &ae) || !errors.Is(err, ErrorInvalidArgument) {
				t.Fatalf("release(%v): %v, want *ArgumentError", bad, err)
			}
		}
		wantCounts(t, c, "jobs", 0, 0, 1)
		if err := d4.Ack(); err != nil {
			t.Fatal(err)
		}
		wantNothingLeft(t, b, c, q)
	})
}

func TestDeliveryIDPublishedAtAndAttempts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "worker", namespace())
		q := openQueue(t, c, "jobs")
		published := time.Now()
		if err := q.Publish("same", "same"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "same", TTR(time.Minute))
		mustPut(t, q, "same", Priority(3))
		ds, err := q.TakeBatch(ctx, 4, time.Second)
		if err != nil || len(ds) != 4 {
			t.Fatalf("take: %d, %v", len(ds), err)
		}
		hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
		seen := map[string]bool{}
		for _, d := range ds {
			if !hex32.MatchString(d.ID()) {
				t.Fatalf("id %q is not 32 hex digits", d.ID())
			}
			if seen[d.ID()] {
				t.Fatalf("id %s given to two publishes", d.ID())
			}
			seen[d.ID()] = true
			if at := d.PublishedAt(); at.Sub(published).Abs() > time.Second {
				t.Fatalf("PublishedAt %v, published at %v", at, published)
			}
			if d.Attempts() != 1 {
				t.Fatalf("fresh delivery: attempts %d", d.Attempts())
			}
		}
		ackAll(t, ds)
		wantNothingLeft(t, b, c, q)
	})
}

func TestCleanerReturnsExpiredLeasesOfLiveConnection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		holderConn := openT(t, b, "holder", ns)
		admin := openT(t, b, "admin", ns)
		q := openQueue(t, holderConn, "jobs")
		qa := openQueue(t, admin, "jobs")
		clock := &redisClock{b: b}
		ttr := 400 * time.Millisecond
		if b.mini != nil {
			ttr = time.Minute
			clock.freeze()
		}
		const n = 50
		for i := range n {
			mustPut(t, q, fmt.Sprintf("job-%d", i), TTR(ttr))
		}
		held, err := q.TakeBatch(ctx, n, time.Second)
		if err != nil || len(held) != n {
			t.Fatalf("take: %d, %v", len(held), err)
		}
		if b.mini != nil {
			// Before the TTR nothing is returned.
			if got, err := NewCleaner(admin).Clean(); err != nil || got != 0 {
				t.Fatalf("clean before the TTR = %d, %v", got, err)
			}
		}
		clock.advance(ttr + 200*time.Millisecond)
		got, err := NewCleaner(admin).Clean()
		if err != nil || got != n {
			t.Fatalf("clean = %d, %v; want %d", got, err, n)
		}
		s := mustStats(t, admin, "jobs").QueueStats["jobs"]
		if s.ReadyCount != n || s.UnackedCount() != 0 || !s.Connections[holderConn.Name()].Active {
			t.Fatalf("after clean: %+v", s)
		}
		if got, err := NewCleaner(admin).Clean(); err != nil || got != 0 {
			t.Fatalf("second clean = %d, %v", got, err)
		}

		ids := map[string]bool{}
		for _, d := range held {
			ids[d.ID()] = true
		}
		retaken, err := qa.TakeBatch(ctx, n, time.Second)
		if err != nil || len(retaken) != n {
			t.Fatalf("retake: %d, %v", len(retaken), err)
		}
		for _, d := range retaken {
			if !ids[d.ID()] || d.Attempts() != 2 {
				t.Fatalf("retaken %s: attempts %d (known id: %v)", d.ID(), d.Attempts(), ids[d.ID()])
			}
		}
		ackAll(t, retaken)
		for _, d := range held {
			wantLeaseLost(t, "holder's late ack", d.Ack())
		}
		wantNothingLeft(t, b, admin, qa)
	})
}

func TestCleanerCountsAnAttemptForDeadConnection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		dead, err := openConn(b.client, "dead", make(chan error, 100), ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-dead.StopAllConsuming() })
		admin := openT(t, b, "admin", ns)
		q := openQueue(t, dead, "jobs")
		qa := openQueue(t, admin, "jobs")
		if err := q.Publish("a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "leased", TTR(time.Minute))
		held, err := q.TakeBatch(ctx, 4, time.Second)
		if err != nil || len(held) != 4 {
			t.Fatalf("take: %d, %v", len(held), err)
		}

		pause(t, b, dead) // the process crashes with its deliveries
		got, err := NewCleaner(admin).Clean()
		if err != nil || got != 4 {
			t.Fatalf("clean = %d, %v; want 4", got, err)
		}
		retaken, err := qa.TakeBatch(ctx, 4, time.Second)
		if err != nil || len(retaken) != 4 {
			t.Fatalf("retake: %d, %v", len(retaken), err)
		}
		for _, d := range retaken {
			if d.Attempts() != 2 {
				t.Fatalf("%q after a crash: attempts %d, want 2", d.Payload(), d.Attempts())
			}
		}
		ackAll(t, retaken)
		for _, d := range held {
			err := d.AckContext(context.Background())
			if !errors.Is(err, ErrorNotFound) || !errors.Is(err, ErrorConnectionLost) {
				t.Fatalf("zombie ack: %v, want ErrorNotFound and ErrorConnectionLost", err)
			}
		}
		wantNothingLeft(t, b, admin, qa)
	})
}

func TestEveryStaleHandleOfALeaseLostTwiceLearnsWhy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		c := openT(t, b, "worker", ns)
		other := openT(t, b, "other", ns)
		q := openQueue(t, c, "jobs")
		qo := openQueue(t, other, "jobs")
		clock := &redisClock{b: b}
		ttr := 100 * time.Millisecond
		if b.mini != nil {
			ttr = time.Minute
			clock.freeze()
		}
		mustPut(t, q, "job", TTR(ttr))
		// The same connection takes it twice and loses the lease both times.
		first := mustTake(t, q, time.Second)
		if b.mini != nil {
			clock.advance(ttr + time.Second)
		}
		second := mustTake(t, q, 5*time.Second)
		if b.mini != nil {
			clock.advance(ttr + time.Second)
		}
		third := mustTake(t, qo, 5*time.Second)
		if third.Attempts() != 3 {
			t.Fatalf("third take: attempts %d, want 3", third.Attempts())
		}
		if err := third.Ack(); err != nil {
			t.Fatal(err)
		}
		wantLeaseLost(t, "second holder's late ack", second.Ack())
		wantLeaseLost(t, "first holder's late ack", first.Ack())
		wantNothingLeft(t, b, other, qo)
	})
}

// A Release whose reply was lost is sent again under the same token: the
// repeat answers done from the receipt of the first, also when the
// delivery was taken again by the same connection in between, and it does
// not release that new take. A second Release call (a new token) on the
// same handle is refused.
func TestRepeatedReleaseDoesNotActOnALaterTake(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "c", namespace())
		q := openQueue(t, c, "q")
		ctx := context.Background()
		if err := q.Publish("p"); err != nil {
			t.Fatal(err)
		}
		d := take(t, q, 1)[0].(*redisDelivery)
		release := func() []int64 {
			t.Helper()
			v, err := scripts.release.Run(ctx, b.client, q.keys.scriptKeys("", nil, q.keys.connKeys(c.Name())), c.Name(), d.ref(), "token-1", 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			ns, err := int64s(v)
			if err != nil {
				t.Fatal(err)
			}
			return ns
		}
		if got := release(); got[0] != 1 || got[1] != codeDone {
			t.Fatalf("release: %v", got)
		}
		d2 := take(t, q, 1)[0]
		if d2.Attempts() != 2 {
			t.Fatalf("re-take attempts %d, want 2", d2.Attempts())
		}
		if got := release(); got[0] != 1 || got[1] != codeDone {
			t.Fatalf("the same release sent again: %v, want {1, 1} (it was done)", got)
		}
		wantCounts(t, c, "q", 0, 0, 1)
		if err := d.Release(ctx, 0); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("a second Release call on the released handle: %v, want ErrorNotFound", err)
		}
		wantCounts(t, c, "q", 0, 0, 1)
		if err := d2.Ack(); err != nil {
			t.Fatalf("new holder's Ack: %v", err)
		}
		// An Ack on the released handle is still refused.
		if err := d.Ack(); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("Ack after Release: %v, want ErrorNotFound", err)
		}
	})
}

// A take without a lease that went back to ready (Release, or Reject and
// ReturnRejected, which resets the attempts) and was taken again by the
// same connection is a new take: every verb on the old handle is refused
// with ErrorNotFound and leaves the new take alone, and the new holder's
// verbs work.
func TestStaleHandleWithoutLeaseCannotSettleALaterTake(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, how := range []string{"release", "reject and return"} {
			t.Run(how, func(t *testing.T) {
				c := openT(t, b, "worker", namespace())
				q := openQueue(t, c, "jobs")
				ctx := context.Background()
				if err := q.Publish("job"); err != nil {
					t.Fatal(err)
				}
				stale := mustTake(t, q, time.Second)
				switch how {
				case "release":
					if err := stale.Release(ctx, 0); err != nil {
						t.Fatal(err)
					}
				default:
					if err := stale.Reject(); err != nil {
						t.Fatal(err)
					}
					if n, err := q.ReturnRejected(1); err != nil || n != 1 {
						t.Fatalf("return rejected: %d, %v", n, err)
					}
				}
				d := mustTake(t, q, time.Second)
				if d.ID() != stale.ID() {
					t.Fatalf("retook %s, want %s", d.ID(), stale.ID())
				}
				for verb, err := range map[string]error{
					"ack":     stale.Ack(),
					"reject":  stale.Reject(),
					"push":    stale.Push(),
					"release": stale.Release(ctx, 0),
					"touch":   stale.Touch(ctx),
					"batch":   Deliveries{stale}.Ack()[0],
				} {
					if !errors.Is(err, ErrorNotFound) || errors.Is(err, ErrorLeaseLost) || errors.Is(err, ErrorConnectionLost) {
						t.Errorf("stale %s: %v, want ErrorNotFound alone", verb, err)
					}
				}
				wantCounts(t, c, "jobs", 0, 0, 1)
				if err := d.Touch(ctx); err != nil {
					t.Fatalf("new take's touch: %v", err)
				}
				if err := d.Ack(); err != nil {
					t.Fatalf("new take's ack: %v", err)
				}
				wantNothingLeft(t, b, c, q)
			})
		}
	})
}

// A fetch repeated after a lost reply gives back only the deliveries still
// held at the attempt it took: not a later take of one of them whose lease
// ran out meanwhile and that another caller of the same connection holds.
func TestRepeatedFetchSkipsALaterTakeOfALostLease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "c", namespace())
		q := openQueue(t, c, "q")
		ctx := context.Background()
		if err := q.Put(ctx, []byte("x"), TTR(5*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if err := scripts.setConsumers.Run(ctx, b.client, []string{q.keys.consumers}, c.Name(), 0, "1").Err(); err != nil {
			t.Fatal(err)
		}
		// the fetch loop's call under token 7: it ran, but say its reply was lost
		if res, err := q.takeRaw(ctx, q.conn.registration(), 1, q.fetchField(), 7, 0); err != nil || len(res.envs) != 1 {
			t.Fatal(res, err)
		}
		if b.mini != nil {
			b.mini.SetTime(time.Now().Add(time.Second))
		} else {
			time.Sleep(50 * time.Millisecond)
		}
		// a Take on the same connection returns the lost lease and takes it again
		d2, err := q.Take(ctx, time.Second)
		if err != nil || d2.Attempts() != 2 {
			t.Fatalf("take after the lease ran out: %v, %v", d2, err)
		}
		again, err := q.takeRaw(ctx, q.conn.registration(), 1, q.fetchField(), 7, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(again.envs) != 0 {
			t.Fatalf("the repeated fetch handed out %d deliveries, want none (the second take is Take's)", len(again.envs))
		}
		if err := d2.Ack(); err != nil {
			t.Fatal(err)
		}
	})
}

// A fetch repeated after a lost reply gives back a delivery taken at a
// later attempt (one that was released before) as it does a first take.
func TestRepeatedFetchReturnsAReleasedDeliveryAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "c", namespace())
		q := openQueue(t, c, "q")
		ctx := context.Background()
		if err := q.Publish("first", "second"); err != nil {
			t.Fatal(err)
		}
		d := take(t, q, 1)[0]
		if err := d.Release(ctx, 0); err != nil {
			t.Fatal(err)
		}
		// "second" (attempt 0) then "first" (attempt 1), under token 9
		res, err := q.takeRaw(ctx, q.conn.registration(), 2, q.fetchField(), 9, 0)
		if err != nil || len(res.envs) != 2 {
			t.Fatal(res, err)
		}
		again, err := q.takeRaw(ctx, q.conn.registration(), 2, q.fetchField(), 9, 0)
		if err != nil || len(again.envs) != 2 || again.envs[0] != res.envs[0] || again.envs[1] != res.envs[1] || again.fence != res.fence {
			t.Fatalf("repeat gave %d deliveries under fence %s (%v), want the same two under %s", len(again.envs), again.fence, err, res.fence)
		}
		if got := newDelivery(q, again.reg, again.envs[1], again.fence, time.Now()); got.Payload() != "first" || got.Attempts() != 2 {
			t.Fatalf("repeat's second delivery %q attempt %d, want first at 2", got.Payload(), got.Attempts())
		}
	})
}
