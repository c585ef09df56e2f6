package redq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// The verbs answer what happened in Redis whatever happens to their reply:
// each test below loses a reply on purpose through procProxy
// and changes Redis before the client sends its call again.

// faultRig is a Redis with a proxy in front: admin talks to Redis
// directly, worker through the proxy.
type faultRig struct {
	direct redis.UniversalClient
	proxy  *procProxy
	admin  *redisConnection
	worker *redisConnection
	ns     string
}

// newFaultRig opens admin and worker in a namespace of their own on the
// Redis at addr. The worker's client waits long for replies (so that only
// the proxy decides when a held reply is lost), and its heartbeat comes
// only every minute unless opts say otherwise, so that a test can declare
// it dead by deleting the heartbeat key.
func newFaultRig(t *testing.T, direct redis.UniversalClient, addr string, opts ...Option) *faultRig {
	t.Helper()
	procLoadScripts(t, direct)
	r := &faultRig{direct: direct, proxy: startProcProxy(t, addr), ns: procNamespace(t)}
	proxied := redis.NewClient(&redis.Options{Addr: r.proxy.addr(), ReadTimeout: time.Minute, MinRetryBackoff: time.Millisecond})
	t.Cleanup(func() { proxied.Close() })
	var err error
	if r.admin, err = openConn(direct, "admin", nil, WithNamespace(r.ns)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-r.admin.StopAllConsuming() })
	opts = append([]Option{WithNamespace(r.ns), WithHeartbeat(time.Minute, time.Hour)}, opts...)
	if r.worker, err = openConn(proxied, "worker", nil, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.proxy.releaseHeld()
		<-r.worker.StopAllConsuming()
	})
	return r
}

// declareWorkerDead does what a pause past the heartbeat TTL and a cleaner
// do: the heartbeat is gone, and a cleaner returns what the worker held.
func (r *faultRig) declareWorkerDead(t *testing.T) int64 {
	t.Helper()
	if err := r.direct.Del(context.Background(), r.worker.keys.heartbeat(r.worker.Name())).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := NewCleaner(r.admin).Clean()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// takeN takes n deliveries on the worker.
func (r *faultRig) takeN(t *testing.T, q Queue, n int) Deliveries {
	t.Helper()
	var out Deliveries
	for len(out) < n {
		ds, err := q.TakeBatch(context.Background(), int64(n-len(out)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds...)
	}
	return out
}

// refPattern is what a request that names the take of d contains.
func refPattern(d Message) string {
	ref := d.(*redisDelivery).ref()
	return fmt.Sprintf("$%d\r\n%s\r\n", len(ref), ref)
}

func backendAddr(b backend) string {
	if b.mini != nil {
		return b.mini.Addr()
	}
	return realRedis.Addr()
}

// Fault 1: the reply of an applied Ack is lost, a cleaner declares the
// connection dead meanwhile, and go-redis sends the ack again. The answer
// is the first call's: nil, although the connection is gone now. A
// delivery the connection held and did not ack went back to ready, and
// its Ack says so.
func TestAckAppliedBeforeACleanIsNotDenied(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			realClient(t)
		}
		r := newFaultRig(t, b.client, backendAddr(b))
		procPublish(t, openQueue(t, r.admin, "jobs"), []string{"acked", "kept"})
		q := openQueue(t, r.worker, "jobs")
		ds := r.takeN(t, q, 2)
		acked, kept := ds[0], ds[1]
		if acked.Payload() != "acked" {
			acked, kept = kept, acked
		}
		r.proxy.armHold(refPattern(acked))
		ackErr := make(chan error, 1)
		go func() { ackErr <- acked.Ack() }()
		r.proxy.awaitTrip(t, 1)
		if n := r.declareWorkerDead(t); n != 1 {
			t.Fatalf("the cleaner returned %d deliveries, want the one not acked", n)
		}
		r.proxy.releaseHeld()
		if err := <-ackErr; err != nil {
			t.Fatalf("LIBRARY BUG: the Ack ran in Redis and its reply was lost; sent again after a cleaner declared "+
				"the connection dead, it returned %v instead of nil", err)
		}
		wantCounts(t, r.admin, "jobs", 1, 0, 0)
		if err := kept.AckContext(context.Background()); !errors.Is(err, ErrorNotFound) || !errors.Is(err, ErrorConnectionLost) {
			t.Fatalf("Ack of the delivery the cleaner returned: %v, want ErrorNotFound and ErrorConnectionLost", err)
		}
		wantCounts(t, r.admin, "jobs", 1, 0, 0)
	})
}

// Fault 1 across a Redis restart: a batch Ack of 100 ran, Redis was
// restarted (its script cache is empty) and a cleaner ran before the reply
// could come. Every one of the 100 is reported acked.
func TestBatchAckAcrossARedisRestartAndACleanIsNotDenied(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAppendOnly())
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { direct.Close() })
	r := newFaultRig(t, direct, srv.Addr())
	procPublish(t, openQueue(t, r.admin, "jobs"), procPayloads("job", 100))
	ds := r.takeN(t, openQueue(t, r.worker, "jobs"), 100)
	r.proxy.armHold(procScriptPatterns(scripts.ack)...)
	errs := make(chan map[int]error, 1)
	go func() { errs <- ds.Ack() }()
	r.proxy.awaitTrip(t, 1)
	srv.Restart(t)
	procLoadScripts(t, direct)
	if n := r.declareWorkerDead(t); n != 0 {
		t.Fatalf("the cleaner returned %d deliveries; the batch ack had removed them all", n)
	}
	r.proxy.releaseHeld()
	if e := <-errs; len(e) > 0 {
		t.Fatalf("LIBRARY BUG: a batch Ack that ran before a Redis restart and a clean reported %d of 100 failed, e.g. %v", len(e), e[0])
	}
	wantCounts(t, r.admin, "jobs", 0, 0, 0)
}

// Fault 2: go-redis sends a publish again after a lost reply. Each publish
// path runs once: the coalesced one, a large batch, a delayed and a
// prioritised Put.
func TestPublishRunsOnceWhenItsReplyIsLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			realClient(t)
		}
		r := newFaultRig(t, b.client, backendAddr(b))
		ctx := context.Background()
		cases := []struct {
			name           string
			n              int
			publish        func(q Queue, ps []string) error
			ready, delayed int64
		}{
			{"one", 1, func(q Queue, ps []string) error { return q.Publish(ps...) }, 1, 0},
			{"coalesced batch", 50, func(q Queue, ps []string) error { return q.Publish(ps...) }, 50, 0},
			{"large batch", 250, func(q Queue, ps []string) error { return q.Publish(ps...) }, 250, 0},
			{"delayed", 1, func(q Queue, ps []string) error { return q.Put(ctx, []byte(ps[0]), Delay(time.Hour)) }, 0, 1},
			{"priority", 1, func(q Queue, ps []string) error { return q.Put(ctx, []byte(ps[0]), Priority(3)) }, 1, 0},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				name := fmt.Sprintf("q%d", i)
				q := openQueue(t, r.worker, name)
				payloads := procPayloads(fmt.Sprintf("pub%d-", i), tc.n)
				r.proxy.arm(payloads[len(payloads)-1])
				before := r.proxy.trips()
				if err := tc.publish(q, payloads); err != nil {
					t.Fatalf("publish whose reply was lost: %v", err)
				}
				if r.proxy.trips() != before+1 {
					t.Fatalf("the proxy lost %d replies, want 1", r.proxy.trips()-before)
				}
				s := mustStats(t, r.admin, name).QueueStats[name]
				if s.ReadyCount != tc.ready || s.DelayedCount != tc.delayed {
					t.Fatalf("LIBRARY BUG: after one publish of %d whose reply was lost, ready %d and delayed %d, want %d and %d",
						tc.n, s.ReadyCount, s.DelayedCount, tc.ready, tc.delayed)
				}
			})
		}
	})
}

// Fault 2 with Redis shut down (SIGTERM) between running a publish and
// answering it: the publish is in Redis once when it returns.
func TestPublishAcrossARedisRestartRunsOnce(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAppendOnly())
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { direct.Close() })
	r := newFaultRig(t, direct, srv.Addr())
	q := openQueue(t, r.worker, "jobs")
	payloads := procPayloads("job", 20)
	r.proxy.armHold(payloads[len(payloads)-1])
	pubErr := make(chan error, 1)
	go func() { pubErr <- q.Publish(payloads...) }()
	r.proxy.awaitTrip(t, 1)
	srv.Restart(t)
	r.proxy.releaseHeld()
	if err := <-pubErr; err != nil {
		t.Fatalf("publish across a restart: %v", err)
	}
	wantCounts(t, r.admin, "jobs", 20, 0, 0)
}

// Fault 4: an Ack whose reply was lost keeps being sent while Redis is
// unreachable, longer than the heartbeat TTL, and returns nil once Redis
// answers. When the retry timeout runs out first, the Ack says that its
// outcome is unknown if it may have run, and that Redis was unavailable
// if it never left the process; neither is ErrorNotFound.
func TestAckKeepsTryingWhileRedisIsUnreachable(t *testing.T) {
	t.Parallel()
	skipShort(t, "keeps Redis unreachable for seconds")
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			realClient(t)
		}
		setup := func(t *testing.T, retry time.Duration) (*faultRig, Message) {
			r := newFaultRig(t, b.client, backendAddr(b), WithHeartbeat(100*time.Millisecond, time.Second),
				WithHeartbeatErrorLimit(1000), WithRetryTimeout(retry))
			procPublish(t, openQueue(t, r.admin, "jobs"), []string{"job"})
			return r, r.takeN(t, openQueue(t, r.worker, "jobs"), 1)[0]
		}
		t.Run("comes back", func(t *testing.T) {
			r, d := setup(t, 30*time.Second)
			r.proxy.armHold(refPattern(d))
			began := time.Now()
			ackErr := make(chan error, 1)
			go func() { ackErr <- d.Ack() }()
			r.proxy.awaitTrip(t, 1)
			r.proxy.down()
			time.Sleep(2500 * time.Millisecond) // past the heartbeat TTL
			r.proxy.up(t)
			if err := <-ackErr; err != nil {
				t.Fatalf("LIBRARY BUG: an Ack that ran, whose reply was lost while Redis was unreachable for 2.5s "+
					"(heartbeat TTL 1s, retry timeout 30s), returned %v", err)
			}
			if took := time.Since(began); took < 2500*time.Millisecond {
				t.Fatalf("Ack returned after %v, before Redis came back", took)
			}
			wantCounts(t, r.admin, "jobs", 0, 0, 0)
		})
		t.Run("outcome unknown", func(t *testing.T) {
			r, d := setup(t, 500*time.Millisecond)
			r.proxy.armHold(refPattern(d))
			ackErr := make(chan error, 1)
			go func() { ackErr <- d.Ack() }()
			r.proxy.awaitTrip(t, 1)
			r.proxy.down()
			err := <-ackErr
			r.proxy.up(t)
			if !errors.Is(err, ErrorOutcomeUnknown) || errors.Is(err, ErrorNotFound) {
				t.Fatalf("Ack that ran without a reply until the retry timeout: %v, want ErrorOutcomeUnknown", err)
			}
			wantCounts(t, r.admin, "jobs", 0, 0, 0) // it did run
		})
		t.Run("unavailable", func(t *testing.T) {
			r, d := setup(t, 500*time.Millisecond)
			r.proxy.down()
			err := d.Ack()
			r.proxy.up(t)
			if !errors.Is(err, ErrorUnavailable) || errors.Is(err, ErrorOutcomeUnknown) || errors.Is(err, ErrorNotFound) {
				t.Fatalf("Ack while Redis was unreachable all along: %v, want ErrorUnavailable", err)
			}
			wantCounts(t, r.admin, "jobs", 0, 0, 1) // it did not run
			if err := d.Ack(); err != nil {
				t.Fatalf("Ack once Redis is back: %v", err)
			}
			wantCounts(t, r.admin, "jobs", 0, 0, 0)
		})
	})
}

// A Release whose reply was lost while a cleaner declared the connection
// dead answers from its receipt, as the settle verbs do from their record.
func TestReleaseAppliedBeforeACleanIsNotDenied(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			realClient(t)
		}
		r := newFaultRig(t, b.client, backendAddr(b))
		procPublish(t, openQueue(t, r.admin, "jobs"), []string{"job"})
		d := r.takeN(t, openQueue(t, r.worker, "jobs"), 1)[0]
		r.proxy.armHold(refPattern(d))
		relErr := make(chan error, 1)
		go func() { relErr <- d.Release(context.Background(), 0) }()
		r.proxy.awaitTrip(t, 1)
		if n := r.declareWorkerDead(t); n != 0 {
			t.Fatalf("the cleaner returned %d; the release had returned the delivery", n)
		}
		r.proxy.releaseHeld()
		if err := <-relErr; err != nil {
			t.Fatalf("Release that ran before a clean: %v, want nil", err)
		}
		wantCounts(t, r.admin, "jobs", 1, 0, 0)
	})
}

// The publish guard: a plain publish sent twice lands once, in either of
// its forms and across them, a send of an older call under the same field
// (one that reached Redis late) lands nothing, and the next call lands.
// Also for Put's script.
func TestPublishGuardRunsEachCallOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c, err := openConn(b.client, "guard", nil, namespace())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-c.StopAllConsuming() })
		q := openQueue(t, c, "jobs")
		ctx := context.Background()
		p := c.publisher
		envs := func(prefix string, n int) []any {
			out := make([]any, n)
			for i := range out {
				e, err := encodeEnvelope(c.ids, time.Now(), meta{}, []byte(fmt.Sprintf("%s-%d", prefix, i)))
				if err != nil {
					t.Fatal(err)
				}
				out[i] = e
			}
			return out
		}
		send := func(token string, es []any) int64 {
			t.Helper()
			n, err := pushBatch(ctx, c.client, []*pushCall{p.pushCall(q, "pX", token, es)})[0].Int64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		// Both forms of a plain publish: the script with the envelopes
		// (small calls) and the transaction of an LPUSH and the guard.
		big := pushScriptMax + 2
		first := envs("first", 3)
		if n := send("10", first); n != 3 {
			t.Fatalf("first send published %d, want 3", n)
		}
		if n := send("10", first); n != 0 {
			t.Fatalf("the same call sent again published %d, want 0", n)
		}
		if n := send("9", envs("late", 2)); n != 0 {
			t.Fatalf("a late send of an older call published %d, want 0", n)
		}
		if n := send("9", envs("late", big)); n != 0 {
			t.Fatalf("a late send of an older call in a transaction published %d, want 0", n)
		}
		wantCounts(t, c, "jobs", 3, 0, 0)
		got, err := q.Drain(10)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != "[first-0 first-1 first-2]" {
			t.Fatalf("ready holds %v, want the first call's three", got)
		}
		large := envs("large", big)
		if n := send("11", large); n != int64(big) {
			t.Fatalf("a large call published %d, want %d", n, big)
		}
		if n := send("11", large); n != 0 {
			t.Fatalf("a large call sent again published %d, want 0", n)
		}
		if n, err := q.Drain(int64(2 * big)); err != nil || len(n) != big {
			t.Fatalf("ready held %d of the large call (%v), want %d", len(n), err, big)
		}
		// A call sent in one form and again in the other (it went with
		// other calls the first time, alone the second) lands once.
		small, other := p.pushCall(q, "pX", "12", envs("mixed", 2)), p.pushCall(q, "pZ", "12", envs("other", big))
		for i, cmd := range pushBatch(ctx, c.client, []*pushCall{small, other}) {
			if n, err := cmd.Int64(); err != nil || n != int64(len([]*pushCall{small, other}[i].envs)) {
				t.Fatalf("call %d of a mixed batch: %d, %v", i, n, err)
			}
		}
		if n := send("12", small.envs); n != 0 {
			t.Fatalf("a call sent again alone published %d, want 0", n)
		}
		wantCounts(t, c, "jobs", int64(2+big), 0, 0)
		if _, err := q.PurgeReady(); err != nil {
			t.Fatal(err)
		}
		if n := send("13", envs("next", 2)); n != 2 {
			t.Fatalf("the next call published %d, want 2", n)
		}
		put := func(token string) int64 {
			t.Helper()
			keys := q.keys.scriptKeys(q.keys.published(c.Name(), "pY"), nil)
			n, err := scripts.put.Run(ctx, c.client, keys, 0, 0, 60000, 0, token, envs("put", 1)[0]).Int64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if put("5") != 1 || put("5") != 0 || put("4") != 0 {
			t.Fatal("Put's script did not run its call exactly once")
		}
		s := mustStats(t, c, "jobs").QueueStats["jobs"]
		if s.ReadyCount != 2 || s.DelayedCount != 1 {
			t.Fatalf("ready %d, delayed %d; want 2 and 1", s.ReadyCount, s.DelayedCount)
		}
	})
}

// An upsert, a cancel and a run-now whose reply is lost are sent again and
// answer what the first send did, once: an upsert that created the item
// says Created (not Updated), and merges once.
func TestKeyedCallsRunOnceWhenTheirReplyIsLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			realClient(t)
		}
		r := newFaultRig(t, b.client, backendAddr(b))
		q := openQueue(t, r.worker, "jobs")
		lose := func(pattern string) {
			r.proxy.arm(pattern)
		}
		before := r.proxy.trips()
		lose("payload-one")
		mustUpsert(t, q, "k", "payload-one", Created, Delay(time.Hour))
		lose("payload-two")
		mustUpsert(t, q, "k", "payload-two", Updated, Delay(time.Hour))
		if item := mustLookup(t, q, "k"); item.Updates != 1 || string(item.Payload) != "payload-two" {
			t.Fatalf("LIBRARY BUG: after two upserts whose replies were lost: %+v, want one update", item)
		}
		lose(procScriptPatterns(scripts.keyedRunNow)[0])
		if ok, err := q.RunNow(context.Background(), "k"); !ok || err != nil {
			t.Fatalf("run now whose reply was lost: %v, %v", ok, err)
		}
		lose(procScriptPatterns(scripts.keyedCancel)[0])
		if ok, err := q.Cancel(context.Background(), "k"); !ok || err != nil {
			t.Fatalf("LIBRARY BUG: cancel whose reply was lost: %v, %v; want true", ok, err)
		}
		if got := r.proxy.trips() - before; got != 4 {
			t.Fatalf("the proxy lost %d replies, want 4", got)
		}
		wantNoKey(t, q, "k")
		s := mustStats(t, r.admin, "jobs").QueueStats["jobs"]
		if s.ReadyCount != 0 || s.DelayedCount != 0 || s.KeyedPending != 0 {
			t.Fatalf("left: %+v", s)
		}
	})
}

// Concurrent calls share record slots (fields) across the two flush slots
// of a group commit. A call whose token were older than the last token
// recorded under its field would be refused by the scripts as a late send:
// a publish silently dropped, an ack answered ErrorNotFound, an upsert
// answered -1. Many goroutines publishing, acking and upserting at once
// must never meet that.
func TestConcurrentCallsAreNeverTakenForLateSends(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		const goroutines, each = 32, 150
		c := openT(t, b, "busy", namespace())
		q := openQueue(t, c, "jobs")
		ctx := context.Background()
		run := func(f func(g, i int) error) {
			var wg sync.WaitGroup
			errs := make(chan error, goroutines*each)
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						if err := f(g, i); err != nil {
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("LIBRARY BUG: %v", err)
			}
		}
		run(func(g, i int) error { return q.Publish(fmt.Sprintf("p%d-%d", g, i)) })
		wantCounts(t, c, "jobs", goroutines*each, 0, 0)
		ds := take(t, q, goroutines*each)
		run(func(g, i int) error { return ds[g*each+i].Ack() })
		wantCounts(t, c, "jobs", 0, 0, 0)
		run(func(g, i int) error {
			out, err := q.Upsert(ctx, fmt.Sprintf("k%d-%d", g, i), nil, Delay(time.Hour))
			if err == nil && out != Created {
				err = fmt.Errorf("upsert of a new key: %v", out)
			}
			return err
		})
		if s := mustStats(t, c, "jobs").QueueStats["jobs"]; s.KeyedPending != goroutines*each {
			t.Fatalf("LIBRARY BUG: %d keys pending after %d upserts", s.KeyedPending, goroutines*each)
		}
	})
}

// A round's Add, Reissue and Remove whose reply is lost are sent again and
// answer what the first send did: true for the item the first send added
// or removed.
func TestRoundCallsRunOnceWhenTheirReplyIsLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			realClient(t)
		}
		r := newFaultRig(t, b.client, backendAddr(b))
		round, err := r.worker.OpenRound("feeds", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		before := r.proxy.trips()
		r.proxy.arm("feed-one")
		if added, err := round.Add(ctx, "feed-one", []byte("data")); !added || err != nil {
			t.Fatalf("LIBRARY BUG: Add whose reply was lost: %v, %v; want true (it added the item)", added, err)
		}
		if _, err := round.Next(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		r.proxy.arm(procScriptPatterns(scripts.roundReissue)[0])
		if ok, err := round.Reissue(ctx, "feed-one"); !ok || err != nil {
			t.Fatalf("Reissue whose reply was lost: %v, %v", ok, err)
		}
		r.proxy.arm(procScriptPatterns(scripts.roundRemove)[0])
		if removed, err := round.Remove(ctx, "feed-one"); !removed || err != nil {
			t.Fatalf("LIBRARY BUG: Remove whose reply was lost: %v, %v; want true (it removed the item)", removed, err)
		}
		if got := r.proxy.trips() - before; got != 3 {
			t.Fatalf("the proxy lost %d replies, want 3", got)
		}
		if n, err := round.Len(ctx); n != 0 || err != nil {
			t.Fatalf("the round holds %d, %v; want nothing", n, err)
		}
	})
}

// The reply of a fetch that took grouped deliveries is lost and the call
// is sent again: the resend answers the same takes (from the call's record,
// where grouped takes are marked), and each group's slot was taken once,
// so nothing more of a full group is handed out.
func TestGroupedFetchRunsOnceWhenItsReplyIsLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			realClient(t)
		}
		r := newFaultRig(t, b.client, backendAddr(b))
		ctx := context.Background()
		q := openQueue(t, r.worker, "gq")
		putGroup(t, r.admin, "gq", "a", "a1", "a2")
		putGroup(t, r.admin, "gq", "b", "b1", "b2")
		r.proxy.arm(scripts.fetch.Hash())
		before := r.proxy.trips()
		ds, err := q.TakeBatch(ctx, 4, 5*time.Second)
		if err != nil {
			t.Fatalf("take whose reply was lost: %v", err)
		}
		if r.proxy.trips() != before+1 {
			t.Fatalf("the proxy lost %d replies, want 1", r.proxy.trips()-before)
		}
		got := map[string]bool{}
		for _, d := range ds {
			got[d.Payload()] = true
		}
		if len(ds) != 2 || !got["a1"] || !got["b1"] {
			t.Fatalf("the resent fetch answered %d takes %v, want a1 and b1", len(ds), got)
		}
		for _, g := range []string{"a", "b"} {
			if n := inFlight(t, q, g); n != 1 {
				t.Fatalf("LIBRARY BUG: group %s has %d in flight after one take whose reply was lost, want 1", g, n)
			}
		}
		wantCounts(t, r.admin, "gq", 2, 0, 2)
		if more, err := q.TakeBatch(ctx, 4, 50*time.Millisecond); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("a take while both groups are full: %d, %v; want ErrorTimeout", len(more), err)
		}
		if errs := ds.Ack(); len(errs) != 0 {
			t.Fatal(errs)
		}
		rest := r.takeN(t, q, 2)
		if p := rest[0].Payload() + rest[1].Payload(); p != "a2b2" && p != "b2a2" {
			t.Fatalf("after the acks took %q, want a2 and b2", p)
		}
		if errs := rest.Ack(); len(errs) != 0 {
			t.Fatal(errs)
		}
		wantCounts(t, r.admin, "gq", 0, 0, 0)
		groupsClean(t, q)
	})
}

// Fault 1 for a timer's fire: the reply of an applied Fire.Ack is lost, a
// timer of its key was set while it fired, and a cleaner declares the
// connection dead before go-redis sends the ack again. The answer is the
// first call's, nil; the timer set meanwhile fires once, and so does the
// fire the connection held and did not ack (the cleaner returned it).
func TestFireAckAppliedBeforeACleanIsNotDenied(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			realClient(t)
		}
		ctx := context.Background()
		r := newFaultRig(t, b.client, backendAddr(b))
		admin := openTimers(t, r.admin, "t")
		for _, k := range []string{"acked", "kept"} {
			if err := admin.Set(ctx, k, 0); err != nil {
				t.Fatal(err)
			}
		}
		ts := openTimers(t, r.worker, "t")
		var fs Fires
		for len(fs) < 2 {
			got, err := ts.NextBatch(ctx, int64(2-len(fs)), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, got...)
		}
		acked, kept := fs[0], fs[1]
		if acked.Key() != "acked" {
			acked, kept = kept, acked
		}
		if err := admin.Set(ctx, "acked", 0); err != nil {
			t.Fatal(err)
		}
		r.proxy.armHold(refPattern(acked.(redisFire).d))
		ackErr := make(chan error, 1)
		go func() { ackErr <- acked.Ack(ctx) }()
		r.proxy.awaitTrip(t, 1)
		if n := r.declareWorkerDead(t); n != 1 {
			t.Fatalf("the cleaner returned %d fires, want the one not acked", n)
		}
		r.proxy.releaseHeld()
		if err := <-ackErr; err != nil {
			t.Fatalf("LIBRARY BUG: the fire's Ack ran in Redis and its reply was lost; sent again after a cleaner declared "+
				"the connection dead, it returned %v instead of nil", err)
		}
		if err := kept.Ack(ctx); !errors.Is(err, ErrorNotFound) || !errors.Is(err, ErrorConnectionLost) {
			t.Fatalf("Ack of the fire the cleaner returned: %v, want ErrorNotFound and ErrorConnectionLost", err)
		}
		got := map[string]int{}
		for {
			f, err := admin.Next(ctx, 300*time.Millisecond)
			if errors.Is(err, ErrorTimeout) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got[f.Key()]++
			if err := f.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got["acked"] != 1 || got["kept"] != 1 || len(got) != 2 {
			t.Fatalf("fired afterwards %v, want the timer set meanwhile and the returned fire once each", got)
		}
		if s := mustStats(t, r.admin).TimerStats["t"]; s != (TimerStat{}) {
			t.Fatalf("stats at the end %+v, want none", s)
		}
	})
}
