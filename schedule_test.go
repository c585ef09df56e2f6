package redq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Tests of scheduling: Delay and At, waking idle consumers at the
// earliest due time, priorities, TTL, publish defaults, bad input, the new
// stats and the management verbs and the cleaner on scheduled deliveries.
//
// Time: on miniredis Redis's clock is frozen at the start of a test and
// moved by hand (schedClock), so due times are checked to the millisecond;
// on real Redis the tests use delays of a few hundred ms and generous
// bounds.

// schedClock is the clock Redis judges due times and TTLs by.
type schedClock struct {
	b   backend
	now time.Time // miniredis only: where its clock stands
}

// newSchedClock freezes miniredis's clock at the current whole millisecond;
// on real Redis the clock is the wall clock.
func newSchedClock(b backend) *schedClock {
	c := &schedClock{b: b}
	if b.mini != nil {
		c.now = time.Now().Truncate(time.Millisecond)
		b.mini.SetTime(c.now)
	}
	return c
}

// skip moves miniredis's clock on by d at once. On real Redis it does
// nothing: the test waits for the wall clock (Take with a timeout, or a
// consumer) and checks the time it took.
func (c *schedClock) skip(d time.Duration) {
	if c.b.mini != nil {
		c.now = c.now.Add(d)
		c.b.mini.SetTime(c.now)
	}
}

// pass lets d go by on Redis's clock: at once on miniredis, by sleeping on
// real Redis.
func (c *schedClock) pass(d time.Duration) {
	if c.b.mini != nil {
		c.skip(d)
		return
	}
	time.Sleep(d)
}

// until returns how long it is from now to t on the clock: miniredis's
// set time, or the wall clock on real Redis.
func (c *schedClock) until(t time.Time) time.Duration {
	if c.b.mini != nil {
		return t.Sub(c.now)
	}
	return time.Until(t)
}

// in returns the time d from now on the clock (see until): on miniredis a
// wall-clock time would drift from the set time while a loaded machine
// runs the test.
func (c *schedClock) in(d time.Duration) time.Time {
	if c.b.mini != nil {
		return c.now.Add(d)
	}
	return time.Now().Add(d)
}

// schedNothingReady asserts that nothing can be taken from q right now.
func schedNothingReady(t testing.TB, q Queue, what string) {
	t.Helper()
	ds, err := q.TakeBatch(context.Background(), 100, 0)
	if !errors.Is(err, ErrorTimeout) {
		t.Fatalf("%s: took %v (err %v), want nothing", what, schedPayloads(ds), err)
	}
}

// schedTakeAll takes everything ready in q now, in the order given.
func schedTakeAll(t testing.TB, q Queue) []string {
	t.Helper()
	ds, err := q.TakeBatch(context.Background(), 1000, 0)
	if errors.Is(err, ErrorTimeout) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return schedPayloads(ds)
}

func schedPayloads(ds Deliveries) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Payload()
	}
	return out
}

func schedWantOrder(t testing.TB, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

// schedCounts are the counts of one queue that scheduling touches.
type schedCounts struct{ ready, delayed, expired, rejected, unacked int64 }

func schedStats(t testing.TB, c Connection, queue string) schedCounts {
	t.Helper()
	s := mustStats(t, c, queue).QueueStats[queue]
	return schedCounts{s.ReadyCount, s.DelayedCount, s.ExpiredCount, s.RejectedCount, s.UnackedCount()}
}

func schedWantStats(t testing.TB, c Connection, queue string, want schedCounts) {
	t.Helper()
	if got := schedStats(t, c, queue); got != want {
		t.Fatalf("%s: stats %+v, want %+v", queue, got, want)
	}
}

// schedReceive waits up to limit for a delivery from a consumer.
func schedReceive(t testing.TB, ch <-chan Message, limit time.Duration, what string) Message {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(limit):
		t.Fatalf("%s: nothing delivered within %v", what, limit)
		return nil
	}
}

// schedBlockedWaiters lists the ids of Redis clients blocked in BLMOVE (an
// idle consumer's wait); nil on miniredis, which cannot tell.
func schedBlockedWaiters(t testing.TB, b backend) map[string]bool {
	t.Helper()
	if b.mini != nil {
		return nil
	}
	list, err := b.client.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["cmd"] == "blmove" && strings.Contains(f["flags"], "b") {
			out[f["id"]] = true
		}
	}
	return out
}

// schedIdleConsumer starts consuming q with a poll of 30 s, far longer than
// any bound of these tests, and one consumer that hands deliveries to the
// returned channel. It returns once the consumer is blocked on Redis with
// nothing to do (on miniredis, which polls every 100ms anyway, after a
// short pause).
func schedIdleConsumer(t testing.TB, b backend, q Queue) <-chan Message {
	t.Helper()
	before := schedBlockedWaiters(t, b)
	if err := q.StartConsuming(10, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ch := make(chan Message, 100)
	if _, err := q.AddConsumer("idle", holder{ch: ch}); err != nil {
		t.Fatal(err)
	}
	if b.mini != nil {
		time.Sleep(150 * time.Millisecond)
		return ch
	}
	eventually(t, "the consumer to wait on Redis", func() bool {
		for id := range schedBlockedWaiters(t, b) {
			if !before[id] {
				return true
			}
		}
		return false
	})
	return ch
}

// schedKeys reads every key of a connection's namespace with its type and
// whole content (heartbeats left out: they refresh on their own), to show
// that bad input changed nothing. (miniredis's DUMP serves strings only,
// so the content is read per type.)
func schedKeys(t testing.TB, b backend, c *redisConnection) map[string]string {
	t.Helper()
	ctx := context.Background()
	ns := c.opts.namespace
	out := map[string]string{}
	for _, pattern := range []string{"{" + ns + "}*", ns + ":*"} {
		keys, err := b.client.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if strings.Contains(k, ":hb:") {
				continue
			}
			typ, err := b.client.Type(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			var content any
			switch typ {
			case "string":
				content, err = b.client.Get(ctx, k).Result()
			case "list":
				content, err = b.client.LRange(ctx, k, 0, -1).Result()
			case "hash":
				var h map[string]string
				h, err = b.client.HGetAll(ctx, k).Result()
				content = fmt.Sprint(h) // fmt sorts map keys
			case "set":
				var s []string
				s, err = b.client.SMembers(ctx, k).Result()
				sort.Strings(s)
				content = s
			case "zset":
				content, err = b.client.ZRangeWithScores(ctx, k, 0, -1).Result()
			default:
				t.Fatalf("key %s has unexpected type %s", k, typ)
			}
			if err != nil {
				t.Fatal(err)
			}
			out[k] = fmt.Sprintf("%s %q", typ, fmt.Sprint(content))
		}
	}
	return out
}

func schedSameKeys(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed %s:\n  before %s\n  after  %s", what, k, v, after[k])
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s created %s: %s", what, k, v)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// 1. Delay and At

func TestDelayedDeliveryIsTakenAtItsDueTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "delay", namespace())
		q := openQueue(t, c, "q")
		const delay = 400 * time.Millisecond

		start := time.Now()
		mustPut(t, q, "first", Delay(delay))
		mustPut(t, q, "second", Delay(delay))
		schedWantStats(t, c, "q", schedCounts{delayed: 2})
		schedNothingReady(t, q, "right after publishing")

		var d Delivery
		if b.mini != nil {
			clock.skip(delay - time.Millisecond)
			schedNothingReady(t, q, "1ms before the due time")
			clock.skip(time.Millisecond)
			d = mustTake(t, q, 0)
		} else {
			d = mustTake(t, q, 5*time.Second)
			if waited := time.Since(start); waited < delay-5*time.Millisecond {
				t.Fatalf("taken %v after publishing, before its delay of %v", waited, delay)
			}
		}
		if d.Payload() != "first" {
			t.Fatalf("took %q, want the first delayed delivery", d.Payload())
		}
		// The fetch that took "first" made every due delivery ready.
		schedWantStats(t, c, "q", schedCounts{ready: 1, unacked: 1})
		if d2 := mustTake(t, q, 0); d2.Payload() != "second" {
			t.Fatalf("took %q, want second", d2.Payload())
		}
	})
}

func TestDelayedDeliveriesBecomeReadyInDueOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "due-order", namespace())
		q := openQueue(t, c, "q")
		if err := q.Publish("ready before"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "third", Delay(300*time.Millisecond))
		mustPut(t, q, "first", Delay(100*time.Millisecond))
		mustPut(t, q, "second", At(clock.in(200*time.Millisecond)))
		clock.pass(500 * time.Millisecond)
		// Due deliveries join the back of the line in the order they fell due.
		schedWantOrder(t, "due order", schedTakeAll(t, q), "ready before", "first", "second", "third")
	})
}

func TestAtInThePastIsDeliveredAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "at-past", namespace())
		q := openQueue(t, c, "q")
		mustPut(t, q, "an hour ago", At(time.Now().Add(-time.Hour)))
		mustPut(t, q, "zero time", At(time.Time{}))
		mustPut(t, q, "1900", At(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)))
		mustPut(t, q, "a second ago with a TTL", At(time.Now().Add(-time.Second)), TTL(time.Hour))
		schedWantStats(t, c, "q", schedCounts{ready: 4})
		schedWantOrder(t, "past At", schedTakeAll(t, q), "an hour ago", "zero time", "1900", "a second ago with a TTL")
	})
}

func TestAtIsJudgedByRedisClock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "at-clock", namespace())
		q := openQueue(t, c, "q")
		if b.mini == nil {
			// One host, one clock: At in the near future waits for it.
			at := time.Now().Add(300 * time.Millisecond)
			mustPut(t, q, "soon", At(at))
			schedWantStats(t, c, "q", schedCounts{delayed: 1})
			schedNothingReady(t, q, "before its time")
			d := mustTake(t, q, 5*time.Second)
			if early := time.Until(at); d.Payload() != "soon" || early > 5*time.Millisecond {
				t.Fatalf("took %q %v before its time", d.Payload(), early)
			}
			return
		}

		// Redis's clock is an hour ahead of this process's: a time ten
		// minutes ahead here is past for Redis.
		redisNow := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		b.mini.SetTime(redisNow)
		mustPut(t, q, "past for Redis", At(time.Now().Add(10*time.Minute)))
		mustPut(t, q, "future for Redis", At(redisNow.Add(time.Minute)))
		schedWantStats(t, c, "q", schedCounts{ready: 1, delayed: 1})
		schedWantOrder(t, "Redis ahead", schedTakeAll(t, q), "past for Redis")

		// Redis's clock is an hour behind: a time ten minutes ago here is
		// still to come for Redis, and comes when Redis's clock reaches it.
		b.mini.SetTime(time.Now().Add(-time.Hour))
		at := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)
		mustPut(t, q, "future for Redis too", At(at))
		schedWantStats(t, c, "q", schedCounts{delayed: 2, unacked: 1})
		schedNothingReady(t, q, "Redis behind")
		b.mini.SetTime(at.Add(-time.Millisecond))
		schedNothingReady(t, q, "1ms before its time by Redis")
		b.mini.SetTime(at)
		d, err := q.Take(ctx, 0)
		if err != nil || d.Payload() != "future for Redis too" {
			t.Fatalf("at its time by Redis: %v %v", d, err)
		}
	})
}

// 2. An idle consumer wakes at the earliest due time, not at its poll.

func TestIdleConsumerWakesForADeliveryDelayedBeforeItStarted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "wake-before", namespace())
		q := openQueue(t, c, "q")
		const delay = 300 * time.Millisecond
		start := time.Now()
		mustPut(t, q, "delayed", Delay(delay))
		if err := q.StartConsuming(10, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		ch := make(chan Message, 10)
		if _, err := q.AddConsumer("c", holder{ch: ch}); err != nil {
			t.Fatal(err)
		}
		clock.skip(delay)
		d := schedReceive(t, ch, 5*time.Second, "delivery due in 300ms with a 30s poll")
		if b.mini == nil && time.Since(start) < delay-5*time.Millisecond {
			t.Fatalf("delivered %v after publishing, before its delay of %v", time.Since(start), delay)
		}
		if d.Payload() != "delayed" {
			t.Fatalf("got %q", d.Payload())
		}
	})
}

func TestIdleConsumerWakesForADeliveryDelayedWhileItWaits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "wake-while", namespace())
		q := openQueue(t, c, "q")
		ch := schedIdleConsumer(t, b, q)

		const delay = 500 * time.Millisecond
		start := time.Now()
		mustPut(t, q, "soon", Delay(delay))
		// A later due time published while the consumer waits for "soon"
		// does not disturb that wait.
		mustPut(t, q, "much later", Delay(time.Hour))
		clock.skip(delay)
		d := schedReceive(t, ch, 5*time.Second, "delivery due in 500ms with a 30s poll")
		if b.mini == nil && time.Since(start) < delay-5*time.Millisecond {
			t.Fatalf("delivered %v after publishing, before its delay of %v", time.Since(start), delay)
		}
		if d.Payload() != "soon" {
			t.Fatalf("got %q, want soon", d.Payload())
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-ch:
			t.Fatalf("%q delivered before its due time", d.Payload())
		case <-time.After(100 * time.Millisecond):
		}
		schedWantStats(t, c, "q", schedCounts{delayed: 1})
	})
}

func TestIdleConsumerWakesForALaterPublishThatIsDueSooner(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "wake-sooner", namespace())
		q := openQueue(t, c, "q")
		// The consumer knows of a delivery due in a minute and waits (at
		// most its poll) for it; one published later but due sooner must
		// cut that wait short.
		mustPut(t, q, "in a minute", Delay(time.Minute))
		ch := schedIdleConsumer(t, b, q)
		const delay = 300 * time.Millisecond
		start := time.Now()
		mustPut(t, q, "sooner", Delay(delay))
		clock.skip(delay)
		d := schedReceive(t, ch, 5*time.Second, "delivery due sooner than the one waited for")
		if b.mini == nil && time.Since(start) < delay-5*time.Millisecond {
			t.Fatalf("delivered %v after publishing, before its delay of %v", time.Since(start), delay)
		}
		if d.Payload() != "sooner" {
			t.Fatalf("got %q, want sooner", d.Payload())
		}
	})
}

func TestIdleConsumerWakesForAPriorityPublish(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "wake-prio", namespace())
		q := openQueue(t, c, "q")
		ch := schedIdleConsumer(t, b, q)
		mustPut(t, q, "urgent", Priority(3))
		d := schedReceive(t, ch, 5*time.Second, "priority publish into an idle queue with a 30s poll")
		if d.Payload() != "urgent" {
			t.Fatalf("got %q", d.Payload())
		}
		// The wake left nothing behind that counts or is delivered.
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		schedWantStats(t, c, "q", schedCounts{})
		if err := q.Publish("plain"); err != nil {
			t.Fatal(err)
		}
		if d := schedReceive(t, ch, 5*time.Second, "plain publish after the wake"); d.Payload() != "plain" {
			t.Fatalf("got %q, want plain", d.Payload())
		}
	})
}

// 3. Priorities

func TestHigherPriorityIsTakenFirstAndFIFOWithinALevel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "prio", namespace())
		q := openQueue(t, c, "q")
		if err := q.Publish("0a"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "5a", Priority(5))
		mustPut(t, q, "1a", Priority(1))
		if err := q.Publish("0b"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "5b", Priority(5))
		mustPut(t, q, "9a", Priority(MaxPriority))
		mustPut(t, q, "1b", Priority(1))
		mustPut(t, q, "0c", Priority(0))
		schedWantStats(t, c, "q", schedCounts{ready: 8})

		// Take one at a time for three, then a consumer for the rest.
		var got []string
		for range 3 {
			got = append(got, mustTake(t, q, 0).Payload())
		}
		for _, d := range hold(t, q, 10, 5) {
			got = append(got, d.Payload())
		}
		schedWantOrder(t, "priority order", got, "9a", "5a", "5b", "1a", "1b", "0a", "0b", "0c")
	})
}

func TestPriorityOrderHoldsForConcurrentPublishers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "prio-conc", namespace())
		q := openQueue(t, c, "q")
		const publishers, each = 6, 50
		var wg sync.WaitGroup
		errs := make(chan error, publishers)
		for g := range publishers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(g)))
				for i := range each {
					level := r.IntN(MaxPriority + 1)
					payload := fmt.Sprintf("%d %d %d", g, i, level)
					var err error
					if level == 0 && i%2 == 0 {
						err = q.Publish(payload)
					} else {
						err = q.Put(ctx, []byte(payload), Priority(level))
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		schedWantStats(t, c, "q", schedCounts{ready: publishers * each})

		// Take everything with single Takes and batches of varied sizes.
		var got []string
		for i := 0; len(got) < publishers*each; i++ {
			var ds Deliveries
			var err error
			if i%3 == 0 {
				var d Message
				d, err = q.Take(ctx, 0)
				ds = Deliveries{d}
			} else {
				ds, err = q.TakeBatch(ctx, int64(1+i%17), 0)
			}
			if err != nil {
				t.Fatalf("after %d deliveries: %v", len(got), err)
			}
			got = append(got, schedPayloads(ds)...)
		}
		schedNothingReady(t, q, "after taking all")

		lastLevel := MaxPriority
		last := map[[2]int]int{} // publisher, level -> last sequence number
		for n, p := range got {
			var g, i, level int
			if _, err := fmt.Sscanf(p, "%d %d %d", &g, &i, &level); err != nil {
				t.Fatal(err)
			}
			if level > lastLevel {
				t.Fatalf("delivery %d (%q) has level %d after level %d", n, p, level, lastLevel)
			}
			lastLevel = level
			k := [2]int{g, level}
			if prev, ok := last[k]; ok && i <= prev {
				t.Fatalf("publisher %d, level %d: %d taken after %d", g, level, i, prev)
			}
			last[k] = i
		}
	})
}

// 4. TTL

func TestDeliveryNotTakenWithinItsTTLExpires(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "ttl", namespace())
		q := openQueue(t, c, "q")
		const ttl = 300 * time.Millisecond
		mustPut(t, q, "dies", TTL(ttl))
		mustPut(t, q, "dies with a priority", TTL(ttl), Priority(2))
		mustPut(t, q, "lives", TTL(time.Hour))
		if err := q.Publish("plain"); err != nil {
			t.Fatal(err)
		}
		schedWantStats(t, c, "q", schedCounts{ready: 4})
		clock.pass(ttl + 200*time.Millisecond)

		schedWantOrder(t, "after the TTL", schedTakeAll(t, q), "lives", "plain")
		schedNothingReady(t, q, "after the TTL")
		schedWantStats(t, c, "q", schedCounts{expired: 2, unacked: 2})
	})
}

func TestExpiredDeliveryIsKeptInRejectedWhenConfigured(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		ns := namespace()
		c := openT(t, b, "keep", ns)
		if _, err := c.OpenQueue("q", WithKeepExpired(true)); err != nil {
			t.Fatal(err)
		}
		// The setting lives in Redis: a handle of another connection,
		// opened without the option, follows it.
		c2 := openT(t, b, "keep-other", ns)
		q := openQueue(t, c2, "q")
		const ttl = 300 * time.Millisecond
		mustPut(t, q, "x", TTL(ttl))
		clock.pass(ttl + 200*time.Millisecond)
		schedNothingReady(t, q, "after the TTL")
		schedWantStats(t, c, "q", schedCounts{expired: 1, rejected: 1})

		// ReturnRejected brings it back as if new: a fresh TTL (its old
		// expiry has passed) and a first attempt.
		if n, err := q.ReturnRejected(10); err != nil || n != 1 {
			t.Fatalf("ReturnRejected: %d %v", n, err)
		}
		d := mustTake(t, q, 0)
		if d.Payload() != "x" || d.Attempts() != 1 {
			t.Fatalf("returned delivery: %q with %d attempts, want x with 1", d.Payload(), d.Attempts())
		}
		if err := d.Reject(); err != nil {
			t.Fatal(err)
		}
		// ...and its TTL still applies.
		if n, err := q.ReturnRejected(10); err != nil || n != 1 {
			t.Fatalf("ReturnRejected: %d %v", n, err)
		}
		clock.pass(ttl + 200*time.Millisecond)
		schedNothingReady(t, q, "after the fresh TTL")
		schedWantStats(t, c, "q", schedCounts{expired: 2, rejected: 1})
	})
}

func TestTTLOfADelayedDeliveryCountsFromItsDueTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "ttl-delay", namespace())
		q := openQueue(t, c, "q")
		// The TTL is shorter than the delay: counted from publishing, it
		// would be over before the delivery is due.
		const delay, ttl = 500 * time.Millisecond, 300 * time.Millisecond
		start := time.Now()
		// one due time for both: two Delays could fall in two milliseconds
		due := clock.in(delay)
		mustPut(t, q, "a", At(due), TTL(ttl))
		mustPut(t, q, "b", At(due), TTL(ttl))

		var d Delivery
		if b.mini != nil {
			clock.skip(delay + ttl - time.Millisecond)
			d = mustTake(t, q, 0)
		} else {
			d = mustTake(t, q, 5*time.Second)
		}
		if d.Payload() != "a" {
			t.Fatalf("took %q, want a", d.Payload())
		}
		schedWantStats(t, c, "q", schedCounts{ready: 1, unacked: 1})

		// "b" became ready with "a" and expires ttl after its due time.
		if b.mini != nil {
			clock.skip(time.Millisecond)
		} else {
			time.Sleep(time.Until(start.Add(delay + ttl + 200*time.Millisecond)))
		}
		schedNothingReady(t, q, "after the due time plus TTL")
		schedWantStats(t, c, "q", schedCounts{expired: 1, unacked: 1})
	})
}

func TestTakenDeliveryCanBeAckedAfterItsTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "ttl-ack", namespace())
		q := openQueue(t, c, "q")
		const ttl = 200 * time.Millisecond
		mustPut(t, q, "x", TTL(ttl))
		d := mustTake(t, q, 0)
		clock.pass(ttl + 200*time.Millisecond)
		if err := d.Ack(); err != nil {
			t.Fatalf("ack after the TTL: %v", err)
		}
		schedWantStats(t, c, "q", schedCounts{})
	})
}

// 5. Publish defaults

func TestPublishDefaultsApplyToPublishAndPutAndPutOverridesThem(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "defaults", namespace())
		plain := openQueue(t, c, "q")
		q, err := c.OpenQueue("q", WithPublishDefaults(Priority(5), Header(http.Header{"Origin": {"defaults"}})))
		if err != nil {
			t.Fatal(err)
		}
		if err := plain.Publish("base"); err != nil {
			t.Fatal(err)
		}
		if err := q.Publish("published"); err != nil {
			t.Fatal(err)
		}
		if err := q.PublishBytes([]byte("published bytes")); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "put")
		mustPut(t, q, "overridden", Priority(1), Header(http.Header{"Origin": {"put"}}))

		ds, err := plain.TakeBatch(ctx, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		schedWantOrder(t, "defaults", schedPayloads(ds), "published", "published bytes", "put", "overridden", "base")
		for i, want := range []string{"defaults", "defaults", "defaults", "put", ""} {
			if got := ds[i].Header().Get("Origin"); got != want {
				t.Fatalf("%q has Origin %q, want %q", ds[i].Payload(), got, want)
			}
		}

		later, err := c.OpenQueue("q", WithPublishDefaults(Delay(time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		if err := later.Publish("a"); err != nil {
			t.Fatal(err)
		}
		if err := later.PublishBytes([]byte("b")); err != nil {
			t.Fatal(err)
		}
		mustPut(t, later, "c")
		mustPut(t, later, "now", Delay(0))
		schedWantStats(t, c, "q", schedCounts{ready: 1, delayed: 3, unacked: 5})
		schedWantOrder(t, "Delay(0) overrides the default", schedTakeAll(t, plain), "now")
	})
}

// 6. Bad input

func TestBadSchedulingInputIsRefusedAndChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "bad-sched", namespace())
		q, err := c.OpenQueue("q", WithKeepExpired(true), WithPublishDefaults(TTL(time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		// Some of everything: a held delivery with a lease, a rejected
		// one, ready ones at two levels, a delayed one, and a queue
		// nobody took from.
		mustPut(t, q, "held", Priority(9), TTR(time.Hour))
		held := mustTake(t, q, 0)
		mustPut(t, q, "rejected", Priority(9))
		if err := mustTake(t, q, 0).Reject(); err != nil {
			t.Fatal(err)
		}
		if err := q.Publish("ready"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "priority", Priority(4))
		mustPut(t, q, "delayed", Delay(time.Hour))
		untaken := openQueue(t, c, "untaken")
		before := schedKeys(t, b, c)

		p := []byte("bad")
		cases := []struct {
			what string
			err  error
		}{
			{"Delay(-1ns)", q.Put(ctx, p, Delay(-1))},
			{"Delay(-1s)", q.Put(ctx, p, Delay(-time.Second))},
			{"Delay beyond MaxDelay", q.Put(ctx, p, Delay(MaxDelay+time.Millisecond))},
			{"At beyond MaxDelay", q.Put(ctx, p, At(time.Now().Add(MaxDelay+time.Minute)))},
			{"TTL(-1ns)", q.Put(ctx, p, TTL(-1))},
			{"TTL(1ns)", q.Put(ctx, p, TTL(1))},
			{"TTL(999µs)", q.Put(ctx, p, TTL(999*time.Microsecond))},
			{"TTR(-1s)", q.Put(ctx, p, TTR(-time.Second))},
			{"TTR(1ns)", q.Put(ctx, p, TTR(1))},
			{"TTR(500µs)", q.Put(ctx, p, TTR(500*time.Microsecond))},
			{"Priority(-1)", q.Put(ctx, p, Priority(-1))},
			{"Priority(MaxPriority+1)", q.Put(ctx, p, Priority(MaxPriority+1))},
			{"good options then a bad one", q.Put(ctx, p, Priority(3), Delay(time.Second), TTL(-time.Second))},
			{"bad option then a good one", q.Put(ctx, p, Priority(MaxPriority+1), Priority(3))},
			{"defaults Delay(-1s)", second(c.OpenQueue("new", WithPublishDefaults(Delay(-time.Second))))},
			{"defaults Priority(10)", second(c.OpenQueue("new", WithPublishDefaults(Priority(MaxPriority+1))))},
			{"defaults TTR(1µs)", second(c.OpenQueue("new", WithPublishDefaults(TTR(time.Microsecond))))},
			{"defaults TTL(-1ns)", second(c.OpenQueue("new", WithKeepExpired(true), WithPublishDefaults(TTL(-1))))},
			{"defaults At beyond MaxDelay", second(c.OpenQueue("q", WithPublishDefaults(At(time.Now().Add(2*MaxDelay)))))},
			{"Take(-1ns)", second(untaken.Take(ctx, -1))},
			{"TakeBatch(max 0)", second(untaken.TakeBatch(ctx, 0, time.Second))},
			{"TakeBatch(max -1)", second(untaken.TakeBatch(ctx, -1, 0))},
			{"TakeBatch(timeout -1ms)", second(untaken.TakeBatch(ctx, 1, -time.Millisecond))},
			{"Release(-1ns)", held.Release(ctx, -1)},
			{"Release beyond MaxDelay", held.Release(ctx, MaxDelay+time.Millisecond)},
		}
		good := RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Minute, Jitter: 0.2}
		for what, change := range map[string]func(*RetryPolicy){
			"MaxAttempts 0":              func(p *RetryPolicy) { p.MaxAttempts = 0 },
			"MaxAttempts -1":             func(p *RetryPolicy) { p.MaxAttempts = -1 },
			"InitialBackoff -1ns":        func(p *RetryPolicy) { p.InitialBackoff = -1 },
			"MaxBackoff below Initial":   func(p *RetryPolicy) { p.MaxBackoff = p.InitialBackoff - 1 },
			"MaxBackoff beyond MaxDelay": func(p *RetryPolicy) { p.MaxBackoff = MaxDelay + time.Millisecond },
			"Jitter -0.1":                func(p *RetryPolicy) { p.Jitter = -0.1 },
			"Jitter 1.1":                 func(p *RetryPolicy) { p.Jitter = 1.1 },
			"Jitter NaN":                 func(p *RetryPolicy) { p.Jitter = math.NaN() },
		} {
			p := good
			change(&p)
			_, err := c.OpenQueue("new", WithRetryPolicy(p))
			cases = append(cases, struct {
				what string
				err  error
			}{"retry policy " + what, err})
		}
		for _, tc := range cases {
			wantArgError(t, tc.what, tc.err)
		}
		schedSameKeys(t, "bad input", before, schedKeys(t, b, c))

		// The edges of every range are accepted.
		edges := openQueue(t, c, "edges")
		for what, opt := range map[string]PublishOption{
			"Delay(0)":         Delay(0),
			"Delay(MaxDelay)":  Delay(MaxDelay),
			"At near MaxDelay": At(time.Now().Add(MaxDelay - time.Minute)),
			"TTL(0)":           TTL(0),
			"TTL(1ms)":         TTL(time.Millisecond),
			"TTR(0)":           TTR(0),
			"TTR(1ms)":         TTR(time.Millisecond),
			"Priority(0)":      Priority(0),
			"Priority(Max)":    Priority(MaxPriority),
		} {
			if err := edges.Put(ctx, []byte(what), opt); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		for _, p := range []RetryPolicy{
			{MaxAttempts: 1},
			{MaxAttempts: 1, InitialBackoff: MaxDelay, MaxBackoff: MaxDelay, Jitter: 1},
		} {
			if _, err := c.OpenQueue("edges", WithRetryPolicy(p)); err != nil {
				t.Fatalf("retry policy %+v: %v", p, err)
			}
		}
		if err := held.Release(ctx, MaxDelay); err != nil {
			t.Fatalf("Release(MaxDelay): %v", err)
		}
	})
}

// 7. Stats

func TestStatsShowDelayedAndExpired(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "stats", namespace())
		q := openQueue(t, c, "q")
		for i := range 3 {
			mustPut(t, q, fmt.Sprint("delayed ", i), Delay(time.Hour))
		}
		mustPut(t, q, "expires 1", TTL(50*time.Millisecond))
		mustPut(t, q, "expires 2", TTL(50*time.Millisecond), Priority(1))
		clock.pass(250 * time.Millisecond)
		schedNothingReady(t, q, "after the TTL")
		if err := q.Publish("ready"); err != nil {
			t.Fatal(err)
		}
		s := mustStats(t, c, "q")

		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var parsed struct {
			Queues map[string]map[string]any `json:"queues"`
		}
		if err := json.Unmarshal(raw, &parsed); err != nil {
			t.Fatal(err)
		}
		js := parsed.Queues["q"]
		if js["ready"] != 1.0 || js["delayed"] != 3.0 || js["expired"] != 2.0 || js["rejected"] != 0.0 {
			t.Fatalf("JSON %s: want ready 1, delayed 3, expired 2, rejected 0", raw)
		}

		lines := strings.Split(s.String(), "\n")
		header := strings.Fields(lines[0])
		var row []string
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "q" {
				row = f
			}
		}
		if len(row) != len(header) {
			t.Fatalf("no row for q matching the header in\n%s", s)
		}
		got := map[string]string{}
		for i, h := range header {
			got[h] = row[i]
		}
		if got["ready"] != "1" || got["delayed"] != "3" || got["expired"] != "2" {
			t.Fatalf("String() columns %v, want ready 1, delayed 3, expired 2:\n%s", got, s)
		}
	})
}

// 8. Management verbs across priorities and the delayed set

func TestPurgeReadyRemovesEveryPriorityLevel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "purge", namespace())
		q := openQueue(t, c, "q")
		if err := q.Publish("a", "b"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "c", Priority(3))
		mustPut(t, q, "d", Priority(MaxPriority))
		mustPut(t, q, "e", Priority(MaxPriority))
		mustPut(t, q, "later", Delay(time.Hour))
		if n, err := q.PurgeReady(); err != nil || n != 5 {
			t.Fatalf("PurgeReady: %d %v, want 5", n, err)
		}
		schedWantStats(t, c, "q", schedCounts{delayed: 1})
		schedNothingReady(t, q, "after PurgeReady")
		// The levels work as before.
		mustPut(t, q, "again", Priority(3))
		if err := q.Publish("plain"); err != nil {
			t.Fatal(err)
		}
		schedWantOrder(t, "after PurgeReady", schedTakeAll(t, q), "again", "plain")
	})
}

func TestDrainTakesTheHighestPriorityFirst(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "drain", namespace())
		q := openQueue(t, c, "q")
		if err := q.Publish("0a"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "2a", Priority(2))
		mustPut(t, q, "7", Priority(7))
		mustPut(t, q, "2b", Priority(2))
		if err := q.Publish("0b"); err != nil {
			t.Fatal(err)
		}
		got, err := q.Drain(3)
		if err != nil {
			t.Fatal(err)
		}
		schedWantOrder(t, "Drain(3)", got, "7", "2a", "2b")
		if got, err = q.Drain(10); err != nil {
			t.Fatal(err)
		}
		schedWantOrder(t, "Drain(10)", got, "0a", "0b")
		schedWantStats(t, c, "q", schedCounts{})
	})
}

func TestDestroyAlsoEmptiesDelayed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clock := newSchedClock(b)
		ns := namespace()
		c := openT(t, b, "destroy", ns)
		q := openQueue(t, c, "q")
		mustPut(t, q, "expires", TTL(50*time.Millisecond))
		clock.pass(200 * time.Millisecond)
		schedNothingReady(t, q, "after the TTL")
		mustPut(t, q, "rejected", Priority(9))
		if err := mustTake(t, q, 0).Reject(); err != nil {
			t.Fatal(err)
		}
		if err := q.Publish("ready"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "priority", Priority(5))
		mustPut(t, q, "delayed 1", Delay(300*time.Millisecond))
		mustPut(t, q, "delayed 2", Delay(300*time.Millisecond), Priority(2))
		schedWantStats(t, c, "q", schedCounts{ready: 2, delayed: 2, expired: 1, rejected: 1})

		ready, rejected, err := q.Destroy()
		if err != nil || ready != 2 || rejected != 1 {
			t.Fatalf("Destroy: %d ready, %d rejected, %v; want 2, 1", ready, rejected, err)
		}
		schedWantStats(t, c, "q", schedCounts{})
		if n := b.client.Exists(ctx, q.keys.prefix+":delayed").Val(); n != 0 {
			t.Fatal("the delayed set is still there")
		}
		// Nothing comes back when the delayed deliveries would have been due.
		clock.pass(500 * time.Millisecond)
		if _, err := NewCleaner(c).Clean(); err != nil {
			t.Fatal(err)
		}
		schedNothingReady(t, q, "after the due time")
		schedWantStats(t, c, "q", schedCounts{})
	})
}

func TestRemoveFindsPayloadsInPriorityLists(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "remove", namespace())
		q := openQueue(t, c, "q")
		mustPut(t, q, "x", Priority(4))
		if err := q.Publish("x"); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "y", Priority(4))
		mustPut(t, q, "x", Priority(MaxPriority))
		mustPut(t, q, "z")
		if err := q.Remove("x", 0, false); err != nil {
			t.Fatal(err)
		}
		schedWantStats(t, c, "q", schedCounts{ready: 2})
		schedWantOrder(t, "after Remove", schedTakeAll(t, q), "y", "z")
	})
}

// 9. The cleaner promotes due deliveries of a queue nobody consumes.

func TestCleanerPromotesDueDeliveriesOfAnUnconsumedQueue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "promote", namespace())
		const delay = 300 * time.Millisecond
		q, err := c.OpenQueue("q", WithPublishDefaults(Delay(delay)))
		if err != nil {
			t.Fatal(err)
		}
		// More than two of the cleaner's chunks of 1000: 2490 in one
		// publish, and 10 at a priority.
		const plainCount, prioCount = 2490, 10
		payloads := make([][]byte, plainCount)
		for i := range payloads {
			payloads[i] = fmt.Appendf(nil, "p%d", i)
		}
		if err := q.PublishBytes(payloads...); err != nil {
			t.Fatal(err)
		}
		for i := range prioCount {
			mustPut(t, q, fmt.Sprint("high ", i), Priority(4))
		}
		schedWantStats(t, c, "q", schedCounts{delayed: plainCount + prioCount})

		clock.pass(delay + 200*time.Millisecond)
		n, err := NewCleaner(c).Clean()
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("Clean returned %d; promotions are not returns", n)
		}
		schedWantStats(t, c, "q", schedCounts{ready: plainCount + prioCount})

		high, err := q.Drain(prioCount)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range high {
			if !strings.HasPrefix(p, "high ") {
				t.Fatalf("Drain(%d) after promotion: %q, want the priority ones first", prioCount, high)
			}
		}
		rest, err := q.Drain(plainCount + 1)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, p := range rest {
			seen[p] = true
		}
		for _, p := range payloads {
			if !seen[string(p)] {
				t.Fatalf("%s missing after promotion (%d drained)", p, len(rest))
			}
		}
		if len(rest) != plainCount {
			t.Fatalf("drained %d, want %d", len(rest), plainCount)
		}
	})
}

// A wake marker left in the ready list of a queue nobody consumes does not
// keep the cleaner from finding the expired deliveries behind it.
func TestCleanerDropsExpiredBehindAWakeMarker(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "c", namespace())
		q := openQueue(t, c, "q")
		ctx := context.Background()
		// a delayed publish into an empty queue leaves the marker in ready
		if err := q.Put(ctx, []byte("later"), Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := q.Put(ctx, []byte("short"), TTL(time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if b.mini != nil {
			b.mini.SetTime(time.Now().Add(time.Second))
		} else {
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := NewCleaner(c).Clean(); err != nil {
			t.Fatal(err)
		}
		s := mustStats(t, c, "q").QueueStats["q"]
		if s.ExpiredCount != 1 || s.ReadyCount != 0 || s.DelayedCount != 1 {
			t.Fatalf("after Clean: expired %d ready %d delayed %d, want 1, 0, 1", s.ExpiredCount, s.ReadyCount, s.DelayedCount)
		}
	})
}
