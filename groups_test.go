package redq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// groupsClean fails the test unless q holds no group state: no pending
// grouped delivery, no group in the rotation and none in flight.
func groupsClean(t testing.TB, q *redisQueue) {
	t.Helper()
	ctx := context.Background()
	c := q.conn.client
	for _, k := range []string{q.keys.gitems(), q.keys.gidx(), q.keys.grun()} {
		if n, err := c.HLen(ctx, k).Result(); err != nil || n != 0 {
			all, _ := c.HGetAll(ctx, k).Result()
			t.Fatalf("%s holds %d fields (%v), want none: %v", k, n, all, err)
		}
	}
	ring := q.keys.block[queueBlockLen-groupKeys+2]
	if n, err := c.LLen(ctx, ring).Result(); err != nil || n != 0 {
		t.Fatalf("the ring holds %d groups, want none: %v", n, err)
	}
}

// inFlight reads the in-flight count of group g.
func inFlight(t testing.TB, q *redisQueue, g string) int64 {
	t.Helper()
	n, err := q.conn.client.HGet(context.Background(), q.keys.grun(), g).Int64()
	if err != nil && err.Error() != "redis: nil" {
		t.Fatal(err)
	}
	return n
}

// A group hands out its deliveries in publish order, at most K (1 by
// default) at a time; other groups go on meanwhile, and a settle frees the
// slot.
func TestGroupFIFOAndConcurrencyOne(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "g", namespace())
		q := openQueue(t, c, "g")
		for _, p := range []string{"a1", "a2", "a3"} {
			mustPut(t, q, p, Group("a"))
		}
		mustPut(t, q, "b1", Group("b"))
		wantCounts(t, c, "g", 4, 0, 0)
		d1 := mustTake(t, q, time.Second)
		d2 := mustTake(t, q, time.Second)
		if d1.Payload() != "a1" || d2.Payload() != "b1" {
			t.Fatalf("took %q, %q; want a1, b1", d1.Payload(), d2.Payload())
		}
		if _, err := q.Take(context.Background(), 50*time.Millisecond); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("take while a's slot is held: %v, want ErrorTimeout", err)
		}
		if n := inFlight(t, q, "a"); n != 1 {
			t.Fatalf("a in flight: %d, want 1", n)
		}
		if err := d1.Ack(); err != nil {
			t.Fatal(err)
		}
		d3 := mustTake(t, q, time.Second)
		if d3.Payload() != "a2" {
			t.Fatalf("after the ack took %q, want a2", d3.Payload())
		}
		if err := d3.Ack(); err != nil {
			t.Fatal(err)
		}
		d4 := mustTake(t, q, time.Second)
		if d4.Payload() != "a3" {
			t.Fatalf("took %q, want a3", d4.Payload())
		}
		for _, d := range []Message{d2, d4} {
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		wantCounts(t, c, "g", 0, 0, 0)
		groupsClean(t, q)
	})
}

// putGroup publishes payloads into group g of the queue named name in one
// call, through a handle whose default is Group(g).
func putGroup(t testing.TB, c Connection, name, g string, payloads ...string) {
	t.Helper()
	q, err := c.OpenQueue(name, WithPublishDefaults(Group(g)))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Publish(payloads...); err != nil {
		t.Fatal(err)
	}
}

// Many consumers in one process never run more than K deliveries of a
// group at a time; with K=1 each group's deliveries run in publish order.
func TestGroupConcurrencyManyConsumers(t *testing.T) {
	for _, k := range []int{1, 3} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) { testGroupConcurrency(t, k) })
	}
}

func testGroupConcurrency(t *testing.T, k int) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "g", namespace())
		const groups, per = 4, 30
		q, err := c.OpenQueue("many", WithGroupConcurrency(k))
		if err != nil {
			t.Fatal(err)
		}
		for g := 0; g < groups; g++ {
			var ps []string
			for i := 0; i < per; i++ {
				ps = append(ps, fmt.Sprintf("%d/%03d", g, i))
			}
			putGroup(t, c, "many", strconv.Itoa(g), ps...)
		}
		var mu sync.Mutex
		running := map[string]int{}
		next := map[string]int{}
		var worst int
		var order []string
		done := make(chan struct{})
		total := 0
		if err := q.StartConsuming(10, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 12; i++ {
			if _, err := q.AddConsumerFunc("c", func(d Delivery) {
				g, n, _ := strings.Cut(d.Payload(), "/")
				mu.Lock()
				running[g]++
				worst = max(worst, running[g])
				if i, _ := strconv.Atoi(n); i != next[g] {
					order = append(order, d.Payload())
				}
				next[g]++
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				running[g]--
				mu.Unlock()
				if err := d.Ack(); err != nil {
					t.Error(err)
				}
				mu.Lock()
				total++
				if total == groups*per {
					close(done)
				}
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("consumed %d of %d", total, groups*per)
		}
		mu.Lock()
		defer mu.Unlock()
		if worst > k {
			t.Fatalf("up to %d deliveries of one group ran at once, want at most %d", worst, k)
		}
		if k > 1 && worst < 2 {
			t.Fatalf("at most %d of a group ran at once with K=%d and 12 consumers: K is not used", worst, k)
		}
		if k == 1 && len(order) > 0 {
			t.Fatalf("started out of publish order: %v", order)
		}
		wantCounts(t, c, "many", 0, 0, 0)
		groupsClean(t, q.(*redisQueue))
	})
}

// A group with 100,000 pending deliveries, published first, does not
// starve 50 groups with 10 each: every small group's first delivery is
// among the first 60 hand-outs (the groups take turns), though K lets the
// big group run many at once.
func TestGroupFairness(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "g", namespace())
		q, err := c.OpenQueue("fair", WithGroupConcurrency(1000))
		if err != nil {
			t.Fatal(err)
		}
		big := make([]string, 100_000)
		for i := range big {
			big[i] = "big"
		}
		for i := 0; i < len(big); i += 10_000 {
			putGroup(t, c, "fair", "big", big[i:i+10_000]...)
		}
		for g := 0; g < 50; g++ {
			ps := make([]string, 10)
			for i := range ps {
				ps[i] = fmt.Sprintf("s%d", g)
			}
			putGroup(t, c, "fair", fmt.Sprintf("s%d", g), ps...)
		}
		got := take(t, q.(*redisQueue), 60)
		firsts := map[string]int{}
		for i, d := range got {
			if _, ok := firsts[d.Payload()]; !ok {
				firsts[d.Payload()] = i
			}
		}
		for g := 0; g < 50; g++ {
			if _, ok := firsts[fmt.Sprintf("s%d", g)]; !ok {
				t.Fatalf("group s%d not among the first 60 hand-outs: %v", g, firsts)
			}
		}
		if len(firsts) != 51 {
			t.Fatalf("%d groups among the first 60 hand-outs, want 51", len(firsts))
		}
	})
}

// Plain and grouped deliveries of one queue take turns: neither starves
// the other, whichever was published first.
func TestGroupMixedWithPlain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "g", namespace())
		q, err := c.OpenQueue("mixed", WithGroupConcurrency(1000))
		if err != nil {
			t.Fatal(err)
		}
		plain := make([]string, 200)
		for i := range plain {
			plain[i] = "plain"
		}
		if err := q.Publish(plain...); err != nil {
			t.Fatal(err)
		}
		grouped := make([]string, 200)
		for i := range grouped {
			grouped[i] = "grouped"
		}
		putGroup(t, c, "mixed", "g", grouped...)
		if err := q.Publish(plain...); err != nil {
			t.Fatal(err)
		}
		rq := q.(*redisQueue)
		n := map[string]int{}
		// one at a time (Take), and in batches
		for i := 0; i < 10; i++ {
			d := mustTake(t, q, time.Second)
			n[d.Payload()]++
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if n["plain"] < 4 || n["grouped"] < 4 {
			t.Fatalf("10 hand-outs one at a time: %v, want both kinds taking turns", n)
		}
		n = map[string]int{}
		for _, d := range take(t, rq, 40) {
			n[d.Payload()]++
		}
		if n["plain"] < 15 || n["grouped"] < 15 {
			t.Fatalf("40 hand-outs in batches: %v, want both kinds taking turns", n)
		}
	})
}

// wantInFlight fails the test unless group g of q has n in flight.
func wantInFlight(t testing.TB, q *redisQueue, g string, n int64) {
	t.Helper()
	if got := inFlight(t, q, g); got != n {
		t.Fatalf("group %s: %d in flight, want %d", g, got, n)
	}
}

// Every way a grouped take leaves its connection frees the group's slot
// exactly once: release (to the front of the line, or later), reject,
// a lease that ran out, the cleaner, Push to another queue, and the
// hand-back of a stopping consumer's buffer. At the end nothing is in
// flight and nothing is left.
func TestGroupReturnsFreeTheSlot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "g", ns)
		q := openQueue(t, c, "ret")
		clock := &redisClock{b: b}
		ttr := 300 * time.Millisecond
		if b.mini != nil {
			ttr = time.Minute
			clock.freeze()
		}
		next := func(want string) Message {
			t.Helper()
			d := mustTake(t, q, 2*time.Second)
			if d.Payload() != want {
				t.Fatalf("took %q, want %q", d.Payload(), want)
			}
			return d
		}
		nothing := func() {
			t.Helper()
			if d, err := q.Take(ctx, 0); !errors.Is(err, ErrorTimeout) {
				t.Fatalf("took %v (%v) while the group's slot is held", d, err)
			}
		}
		for _, p := range []string{"a1", "a2", "a3"} {
			mustPut(t, q, p, Group("a"))
		}

		// release at once: back to the front of the line
		d := next("a1")
		wantInFlight(t, q, "a", 1)
		nothing()
		if err := d.Release(ctx, 0); err != nil {
			t.Fatal(err)
		}
		wantInFlight(t, q, "a", 0)
		d = next("a1")
		if d.Attempts() != 2 {
			t.Fatalf("released delivery: attempts %d, want 2", d.Attempts())
		}
		// reject: the slot is free, a2 is next
		if err := d.Reject(); err != nil {
			t.Fatal(err)
		}
		wantInFlight(t, q, "a", 0)
		d = next("a2")
		// release later: the slot is free at once, a3 is next
		if err := d.Release(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}
		wantInFlight(t, q, "a", 0)
		d = next("a3")
		wantInFlight(t, q, "a", 1)

		// push to another queue: it joins the group there
		q2 := openQueue(t, c, "ret2")
		q.SetPushQueue(q2)
		if err := d.Push(); err != nil {
			t.Fatal(err)
		}
		wantInFlight(t, q, "a", 0)
		if st := mustStats(t, c, "ret2").QueueStats["ret2"]; st.ReadyCount != 1 || st.GroupsPending != 1 {
			t.Fatalf("push queue: %+v, want the delivery pending in its group", st)
		}
		d = mustTake(t, q2, time.Second)
		if d.Payload() != "a3" {
			t.Fatalf("push queue handed out %q", d.Payload())
		}
		wantInFlight(t, q2, "a", 1)
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}

		// a lease that runs out: back to the front, slot free
		mustPut(t, q, "b1", Group("b"), TTR(ttr))
		mustPut(t, q, "b2", Group("b"))
		next("b1") // its holder never settles it
		wantInFlight(t, q, "b", 1)
		clock.advance(ttr + 100*time.Millisecond)
		d = next("b1")
		if d.Attempts() != 2 {
			t.Fatalf("after the lease: attempts %d, want 2", d.Attempts())
		}
		wantInFlight(t, q, "b", 1)
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		d = next("b2")
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		wantInFlight(t, q, "b", 0)

		// the cleaner returns what a dead connection held
		dead := openT(t, b, "dead", ns)
		qd := openQueue(t, dead, "ret")
		mustPut(t, q, "c1", Group("c"))
		mustPut(t, q, "c2", Group("c"))
		if got := mustTake(t, qd, time.Second); got.Payload() != "c1" {
			t.Fatalf("took %q, want c1", got.Payload())
		}
		wantInFlight(t, q, "c", 1)
		nothing()
		pause(t, b, dead)
		if _, err := NewCleaner(c).Clean(); err != nil {
			t.Fatal(err)
		}
		wantInFlight(t, q, "c", 0)
		d = next("c1")
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		d = next("c2")
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}

		// a stopping consumer hands back its buffer: K=6; another
		// connection holds d1 throughout, so that a slot freed twice
		// would show
		q6, err := c.OpenQueue("ret5", WithGroupConcurrency(6))
		if err != nil {
			t.Fatal(err)
		}
		putGroup(t, c, "ret5", "d", "d1", "d2", "d3", "d4", "d5", "d6", "d7")
		r5 := q6.(*redisQueue)
		other := openT(t, b, "other", ns)
		d1 := mustTake(t, openQueue(t, other, "ret5"), time.Second)
		q5 := openQueue(t, c, "ret5")
		if err := q5.StartConsuming(5, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		// the consumer holds the first until the stop began; should the
		// loop hand it more before it sees the stop, it acks them
		gotFirst, release := make(chan Delivery, 1), make(chan struct{})
		var extra atomic.Int64
		var firstOnce sync.Once
		if _, err := q5.AddConsumerFunc("blocked", func(d Delivery) {
			isFirst := false
			firstOnce.Do(func() { isFirst = true })
			if !isFirst {
				extra.Add(1)
				if err := d.Ack(); err != nil {
					t.Error(err)
				}
				return
			}
			gotFirst <- d
			<-release
			if err := d.Ack(); err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
		if got := (<-gotFirst).Payload(); got != "d2" {
			t.Fatalf("the consumer got %q first, want d2", got)
		}
		eventually(t, "the buffer filled", func() bool { return inFlight(t, r5, "d") == 6 })
		stopped := q5.StopConsuming()
		close(release)
		<-stopped
		wantInFlight(t, r5, "d", 1)
		if err := d1.Ack(); err != nil {
			t.Fatal(err)
		}
		wantInFlight(t, r5, "d", 0)
		for _, want := range []string{"d3", "d4", "d5", "d6", "d7"}[extra.Load():] {
			d := mustTake(t, q6, time.Second)
			if d.Payload() != want {
				t.Fatalf("after the hand-back took %q, want %q", d.Payload(), want)
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}

		// the rejected a1 comes back into its group; the released a2 is due
		// in an hour
		if n, err := q.ReturnRejected(10); err != nil || n != 1 {
			t.Fatalf("ReturnRejected: %d, %v", n, err)
		}
		d = next("a1")
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "ret", 0, 0, 0)
		if st := mustStats(t, c, "ret").QueueStats["ret"]; st.DelayedCount != 1 {
			t.Fatalf("delayed: %d, want the released a2", st.DelayedCount)
		}
		if b.mini != nil {
			clock.advance(time.Hour)
		} else {
			// real Redis: make it due by hand instead of waiting an hour
			if err := b.client.ZAdd(ctx, q.keys.block[2], redis.Z{Score: 1, Member: mustZFirst(t, b, q)}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d = next("a2")
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		for _, rq := range []*redisQueue{q, q2, r5} {
			groupsClean(t, rq)
			wantCounts(t, c, rq.name, 0, 0, 0)
		}
	})
}

// mustZFirst returns the first member of q's delayed set.
func mustZFirst(t testing.TB, b backend, q *redisQueue) string {
	t.Helper()
	m, err := b.client.ZRange(context.Background(), q.keys.block[2], 0, 0).Result()
	if err != nil || len(m) != 1 {
		t.Fatalf("delayed set: %v, %v", m, err)
	}
	return m[0]
}

// A per-group rate holds per group, by Redis's clock, while other groups
// go on; consumers wait for the next allowed hand-out without polling.
func TestGroupRateLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		admin := openT(t, b, "admin", ns)
		const n, per = 3, time.Second
		qa, err := admin.OpenQueue("rated", WithGroupConcurrency(100), WithGroupRateLimit(n, per))
		if err != nil {
			t.Fatal(err)
		}
		rqa := qa.(*redisQueue)
		for _, g := range []string{"a", "b"} {
			ps := make([]string, 3*n)
			for i := range ps {
				ps[i] = g
			}
			putGroup(t, admin, "rated", g, ps...)
		}
		// all that may go now: n of each group, then nothing
		got := take(t, rqa, 2*n)
		per2 := map[string]int{}
		for _, d := range got {
			per2[d.Payload()]++
		}
		if per2["a"] != n || per2["b"] != n {
			t.Fatalf("first hand-outs: %v, want %d of each group", per2, n)
		}
		if d, err := qa.Take(context.Background(), 0); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("a hand-out beyond the rate: %v, %v", d, err)
		}
		ackAll(t, got)

		// consumers on a client that counts fetch calls
		opts := b.client.(*redis.Client).Options()
		client := redis.NewClient(&redis.Options{Addr: opts.Addr})
		t.Cleanup(func() { client.Close() })
		h := &fetchCounter{}
		client.AddHook(h)
		worker, err := openConn(client, "worker", nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-worker.StopAllConsuming() })
		qw := openQueue(t, worker, "rated")
		const poll = 400 * time.Millisecond
		if err := qw.StartConsuming(10, poll); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		times := map[string][]time.Time{}
		total := 0
		for i := 0; i < 3; i++ {
			if _, err := qw.AddConsumerFunc("c", func(d Delivery) {
				handed := time.Now()
				_ = d.Ack() // counted once acked: the group's slot is free then
				mu.Lock()
				times[d.Payload()] = append(times[d.Payload()], handed)
				total++
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		before := h.n.Load()
		time.Sleep(per / 2)
		// (a wait on miniredis, which has no CLIENT ID, lasts shortWait)
		wait := poll
		if b.mini != nil {
			wait = shortWait
		}
		if fetches := h.n.Load() - before; fetches > int64(per/2/wait)+3 {
			t.Fatalf("%d fetches in %v while both groups waited for their rate, want a few", fetches, per/2)
		}
		eventually(t, "the rest consumed", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return total == 4*n
		})
		mu.Lock()
		defer mu.Unlock()
		for g, ts := range times {
			if len(ts) != 2*n {
				t.Fatalf("group %s: %d hand-outs, want %d", g, len(ts), 2*n)
			}
			// the second round waits for the first to leave the window
			// (measured on this process's clock, with room for its lag)
			if d := ts[n].Sub(start); d < per/2 {
				t.Fatalf("group %s: its %d-th hand-out came %v after the first %d, within the window", g, n+1, d, n)
			}
		}
		groupsClean(t, rqa)
	})
}

// A grouped delivery with Delay joins its group's line when due; until
// then the group's other deliveries go on.
func TestGroupDelay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "g", namespace())
		q := openQueue(t, c, "later")
		clock := &redisClock{b: b}
		clock.freeze()
		mustPut(t, q, "late", Group("a"), Delay(300*time.Millisecond))
		mustPut(t, q, "now", Group("a"))
		if st := mustStats(t, c, "later").QueueStats["later"]; st.DelayedCount != 1 || st.ReadyCount != 1 {
			t.Fatalf("stats: %+v", st)
		}
		d := mustTake(t, q, time.Second)
		if d.Payload() != "now" {
			t.Fatalf("took %q, want now", d.Payload())
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		clock.advance(300 * time.Millisecond)
		d = mustTake(t, q, 2*time.Second)
		if d.Payload() != "late" {
			t.Fatalf("took %q, want late", d.Payload())
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		groupsClean(t, q)
	})
}

// Consumers do not poll while every group with pending deliveries is
// full; an ack that frees a slot wakes them at once.
func TestGroupFullDoesNotPoll(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		admin := openT(t, b, "admin", ns)
		qa := openQueue(t, admin, "full")
		putGroup(t, admin, "full", "a", "a1", "a2")
		held := mustTake(t, qa, time.Second)

		opts := b.client.(*redis.Client).Options()
		client := redis.NewClient(&redis.Options{Addr: opts.Addr})
		t.Cleanup(func() { client.Close() })
		h := &fetchCounter{}
		client.AddHook(h)
		worker, err := openConn(client, "worker", nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-worker.StopAllConsuming() })
		qw := openQueue(t, worker, "full")
		const poll = 3 * time.Second
		if err := qw.StartConsuming(10, poll); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 2)
		if _, err := qw.AddConsumerFunc("c", func(d Delivery) {
			got <- d.Payload()
			_ = d.Ack()
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		before := h.n.Load()
		time.Sleep(time.Second)
		// (a wait on miniredis, which has no CLIENT ID, lasts shortWait)
		wait := poll
		if b.mini != nil {
			wait = shortWait
		}
		if fetches := h.n.Load() - before; fetches > int64(time.Second/wait)+2 {
			t.Fatalf("%d fetches in a second while the only group was full", fetches)
		}
		select {
		case p := <-got:
			t.Fatalf("handed out %q while the group was full", p)
		default:
		}
		acked := time.Now()
		if err := held.Ack(); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-got:
			if p != "a2" {
				t.Fatalf("got %q, want a2", p)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the ack that freed the slot did not wake the consumer")
		}
		if b.mini == nil && time.Since(acked) > 500*time.Millisecond {
			t.Fatalf("woke %v after the ack, want at once (not at the end of a %v wait)", time.Since(acked), poll)
		}
	})
}

// Purging ready (the queue's PurgeReady and the Inspector's Purge)
// removes pending grouped deliveries and counts them; a delivery in
// flight keeps its slot until it is settled. Drain takes grouped
// deliveries after the ready lists.
func TestGroupPurgeAndDrain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "g", ns)
		q := openQueue(t, c, "purge")
		insp, err := NewInspector(b.client, ns)
		if err != nil {
			t.Fatal(err)
		}
		putGroup(t, c, "purge", "a", "a1", "a2", "a3")
		putGroup(t, c, "purge", "b", "b1")
		if err := q.Publish("plain"); err != nil {
			t.Fatal(err)
		}
		held := mustTake(t, q, time.Second) // plain or a grouped one
		n, err := insp.Purge(ctx, "purge", StateReady)
		if err != nil || n != 4 {
			t.Fatalf("Inspector purge of ready: %d, %v; want 4", n, err)
		}
		if st := mustStats(t, c, "purge").QueueStats["purge"]; st.ReadyCount != 0 || st.GroupsPending != 0 {
			t.Fatalf("after the purge: %+v", st)
		}
		if err := held.Ack(); err != nil {
			t.Fatal(err)
		}
		groupsClean(t, q)

		putGroup(t, c, "purge", "a", "a4", "a5")
		if err := q.Publish("p2"); err != nil {
			t.Fatal(err)
		}
		got, err := q.Drain(10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0] != "p2" || got[1] != "a4" || got[2] != "a5" {
			t.Fatalf("Drain: %q, want p2, a4, a5", got)
		}
		// a drained line leaves the ring: a group put there again later
		// gets one turn, not two
		groupsClean(t, q)
		putGroup(t, c, "purge", "y", "y1")
		putGroup(t, c, "purge", "z", "z1", "z2")
		if got, err := q.Drain(1); err != nil || len(got) != 1 {
			t.Fatalf("Drain(1): %q, %v", got, err)
		}
		ring := q.keys.block[queueBlockLen-groupKeys+2]
		members := b.client.LRange(ctx, ring, 0, -1).Val()
		seen := map[string]bool{}
		for _, g := range members {
			if seen[g] || !b.client.HExists(ctx, q.keys.gidx(), g).Val() {
				t.Fatalf("after Drain(1) the ring holds %q: %q twice or without a line", members, g)
			}
			seen[g] = true
		}
		if got, err := q.Drain(10); err != nil || len(got) != 2 {
			t.Fatalf("Drain(10): %q, %v; want the 2 left", got, err)
		}
		groupsClean(t, q)
		putGroup(t, c, "purge", "c", "c1")
		if n, err := q.PurgeReady(); err != nil || n != 1 {
			t.Fatalf("PurgeReady: %d, %v; want 1", n, err)
		}
		wantCounts(t, c, "purge", 0, 0, 0)
		groupsClean(t, q)
	})
}

// The test doubles take the group options and refuse what the real queue
// refuses.
func TestGroupTestDoubles(t *testing.T) {
	ctx := context.Background()
	c := NewTestConnection()
	q, err := c.OpenQueue("q", WithGroupConcurrency(2), WithGroupRateLimit(5, time.Second), WithoutGroupRateLimit())
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Put(ctx, []byte("x"), Group("g")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenQueue("q", WithGroupConcurrency(0)); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("K=0 on a test double: %v", err)
	}
	if err := q.Put(ctx, []byte("x"), Group("g"), Priority(1)); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("Group with Priority on a test double: %v", err)
	}
	if _, err := q.Upsert(ctx, "k", []byte("x"), Group("g")); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("Upsert with Group on a test double: %v", err)
	}
	if got := c.GetDeliveries("q"); len(got) != 1 || got[0] != "x" {
		t.Fatalf("recorded %v", got)
	}
}
