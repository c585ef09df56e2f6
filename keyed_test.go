package redq

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// Keyed deliveries: every rule on miniredis, whose clock the
// tests move by hand (schedClock), and on real Redis, with short real
// delays and generous bounds.

// keyedRecord reads the pending (or, with parked, the parked) record of key
// straight from Redis: the item's delivery id (hex) and its envelope.
func keyedRecord(t testing.TB, q *redisQueue, key string, parked bool) (id string, env envelope, ok bool) {
	t.Helper()
	h := q.keys.prefix + ":kpend"
	if parked {
		h = q.keys.prefix + ":kpark"
	}
	r, err := q.conn.client.HGet(context.Background(), h, key).Result()
	if err != nil {
		return "", envelope{}, false
	}
	_, e, found := strings.Cut(r, ";")
	if !found {
		t.Fatalf("record of %q has no state: %q", key, r)
	}
	env, wellFormed := decodeEnvelope(e)
	if !wellFormed || env.key != key {
		t.Fatalf("record of %q holds %+v", key, env)
	}
	return hex.EncodeToString([]byte(env.id)), env, true
}

func mustUpsert(t testing.TB, q Queue, key, payload string, want UpsertOutcome, opts ...PublishOption) {
	t.Helper()
	got, err := q.Upsert(context.Background(), key, []byte(payload), opts...)
	if err != nil {
		t.Fatalf("upsert %q %q: %v", key, payload, err)
	}
	if got != want {
		t.Fatalf("upsert %q %q: %v, want %v", key, payload, got, want)
	}
}

func mustLookup(t testing.TB, q Queue, key string) KeyedItem {
	t.Helper()
	item, err := q.Lookup(context.Background(), key)
	if err != nil {
		t.Fatalf("lookup %q: %v", key, err)
	}
	return item
}

func wantNoKey(t testing.TB, q Queue, key string) {
	t.Helper()
	if item, err := q.Lookup(context.Background(), key); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("lookup %q: %+v, %v; want ErrorNotFound", key, item, err)
	}
}

// keyedCounts are a queue's keyed counts and the stale stubs it holds.
type keyedCounts struct{ pending, running, parked, stale int64 }

func wantKeyed(t testing.TB, q *redisQueue, want keyedCounts) {
	t.Helper()
	s := mustStats(t, q.conn, q.name).QueueStats[q.name]
	stale, _ := q.conn.client.HGet(context.Background(), q.keys.prefix+":meta", "kstale").Int64()
	got := keyedCounts{s.KeyedPending, s.KeyedRunning, s.KeyedParked, stale}
	if got != want {
		t.Fatalf("%s: keyed pending/running/parked/stale = %+v, want %+v", q.name, got, want)
	}
}

func keyedQueue(t testing.TB, b backend, name string, opts ...QueueOption) (*redisConnection, *redisQueue) {
	t.Helper()
	c := openT(t, b, "keyed", namespace())
	q, err := c.OpenQueue(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, q.(*redisQueue)
}

// 1. Upsert's modes

func TestUpsertCreatesThenUpdatesInPlaceKeepingItsID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		_, q := keyedQueue(t, b, "jobs")
		mustUpsert(t, q, "user-1", "v1", Created, Delay(time.Hour))
		id1, env, _ := keyedRecord(t, q, "user-1", false)
		if env.payload != "v1" {
			t.Fatalf("payload %q", env.payload)
		}
		mustUpsert(t, q, "user-1", "v2", Updated, Delay(time.Hour), Header(map[string][]string{"A": {"b"}}))
		id2, env, _ := keyedRecord(t, q, "user-1", false)
		if id2 != id1 || env.payload != "v2" || env.header.Get("A") != "b" {
			t.Fatalf("after the update: id %s (was %s), payload %q, header %v", id2, id1, env.payload, env.header)
		}
		mustUpsert(t, q, "user-2", "other", Created, Delay(time.Hour))
		item := mustLookup(t, q, "user-1")
		if !item.Pending || item.Running || item.Updates != 1 || string(item.Payload) != "v2" || item.Key != "user-1" {
			t.Fatalf("lookup: %+v", item)
		}
		schedWantStats(t, q.conn, "jobs", schedCounts{delayed: 2})
		wantKeyed(t, q, keyedCounts{pending: 2})
	})
}

func TestReplaceAllPostponesTheRun(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		_, q := keyedQueue(t, b, "jobs")
		mustUpsert(t, q, "k", "v1", Created, Delay(300*time.Millisecond))
		firstDue := mustLookup(t, q, "k").Due
		clock.pass(200 * time.Millisecond)
		mustUpsert(t, q, "k", "v2", Updated, Delay(300*time.Millisecond))
		// Due at the second upsert + 300ms: by Redis's clock at least
		// 200ms after the first upsert's due time.
		if due := mustLookup(t, q, "k").Due; due.Sub(firstDue) < 150*time.Millisecond {
			t.Fatalf("due %v after the first upsert's due time, want about 200ms; the run was not postponed", due.Sub(firstDue))
		}
		clock.pass(200 * time.Millisecond)
		schedNothingReady(t, q, "400ms after the first upsert, 200ms after the second (300ms delay)")
		clock.skip(100 * time.Millisecond)
		d := mustTake(t, q, 5*time.Second)
		if d.Payload() != "v2" || d.Key() != "k" || d.Attempts() != 1 {
			t.Fatalf("took %q key %q attempts %d", d.Payload(), d.Key(), d.Attempts())
		}
		schedNothingReady(t, q, "after the one run")
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		wantNoKey(t, q, "k")
		wantKeyed(t, q, keyedCounts{})
	})
}

func TestReplacePayloadKeepsTheDueTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		_, q := keyedQueue(t, b, "jobs")
		mustUpsert(t, q, "k", "v1", Created, Delay(300*time.Millisecond))
		mustUpsert(t, q, "k", "v2", Updated, Delay(time.Hour), OnExisting(ReplacePayload))
		clock.skip(300 * time.Millisecond)
		d := mustTake(t, q, 5*time.Second)
		if d.Payload() != "v2" {
			t.Fatalf("took %q, want the latest payload at the first due time", d.Payload())
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestKeepExistingKeepsThePendingItem(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		_, q := keyedQueue(t, b, "jobs")
		mustUpsert(t, q, "k", "v1", Created, OnExisting(KeepExisting))
		mustUpsert(t, q, "k", "v2", Kept, OnExisting(KeepExisting))
		mustUpsert(t, q, "k", "v3", Kept, OnExisting(KeepExisting), Delay(time.Hour))
		if item := mustLookup(t, q, "k"); string(item.Payload) != "v1" || item.Updates != 2 {
			t.Fatalf("lookup %+v", item)
		}
		schedWantOrder(t, "taken", schedTakeAll(t, q), "v1")
	})
}

func TestMaxWaitBoundsThePostponement(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		_, q := keyedQueue(t, b, "jobs")
		step := 100 * time.Millisecond
		opts := []PublishOption{Delay(3 * step), MaxWait(5 * step)}
		mustUpsert(t, q, "k", "v0", Created, opts...)
		first := mustLookup(t, q, "k").Due.Add(-3 * step) // the first upsert, by Redis's clock
		for i := 1; i <= 4; i++ {
			clock.pass(step)
			mustUpsert(t, q, "k", fmt.Sprintf("v%d", i), Updated, opts...)
		}
		// 400ms after the first upsert: due at first + 500ms, not last + 300ms.
		// The last upsert came at least 4 steps after the first, so
		// without MaxWait the item would be due 7 steps after it or later.
		if due := mustLookup(t, q, "k").Due.Sub(first); due < 5*step-50*time.Millisecond || due > 5*step+50*time.Millisecond {
			t.Fatalf("due %v after the first upsert, want about %v (first + MaxWait), not %v or more (last + Delay)", due, 5*step, 7*step)
		}
		if b.mini != nil {
			schedNothingReady(t, q, "before first + MaxWait")
			clock.skip(step)
			schedWantOrder(t, "at first + MaxWait", schedTakeAll(t, q), "v4")
			return
		}
		d := mustTake(t, q, 2*time.Second)
		if d.Payload() != "v4" {
			t.Fatalf("took %q", d.Payload())
		}
		item, _, _ := keyedRecord(t, q, "k", false)
		if item != "" {
			t.Fatal("the item is still pending after its run")
		}
	})
}

// A pending item already waiting in a ready list is postponed by a
// ReplaceAll with a delay: it leaves ready (its stub there is stale and
// not counted) and runs once, later.
func TestPostponingAReadyItemRunsItOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		_, q := keyedQueue(t, b, "jobs")
		mustUpsert(t, q, "k", "v1", Created)
		schedWantStats(t, q.conn, "jobs", schedCounts{ready: 1})
		mustUpsert(t, q, "k", "v2", Updated, Delay(300*time.Millisecond))
		schedWantStats(t, q.conn, "jobs", schedCounts{delayed: 1})
		wantKeyed(t, q, keyedCounts{pending: 1, stale: 1})
		schedNothingReady(t, q, "after the postponement")
		wantKeyed(t, q, keyedCounts{pending: 1}) // the take dropped the stale stub
		clock.skip(300 * time.Millisecond)
		d := mustTake(t, q, 5*time.Second)
		if d.Payload() != "v2" {
			t.Fatalf("took %q", d.Payload())
		}
		schedNothingReady(t, q, "after the one run")
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		// An update without a delay leaves a ready item where it is.
		mustUpsert(t, q, "k2", "a", Created)
		mustUpsert(t, q, "k2", "b", Updated)
		wantKeyed(t, q, keyedCounts{pending: 1})
		schedWantOrder(t, "taken", schedTakeAll(t, q), "b")
	})
}

// 2. Running keys and their successors

func TestUpsertWhileRunningParksASuccessor(t *testing.T) {
	for _, settle := range []string{"ack", "reject", "push"} {
		t.Run(settle, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				c, q := keyedQueue(t, b, "jobs")
				next := openQueue(t, c, "next")
				q.SetPushQueue(next)
				mustUpsert(t, q, "k", "v1", Created)
				d1 := mustTake(t, q, time.Second)
				mustUpsert(t, q, "k", "v2", Queued)
				mustUpsert(t, q, "k", "v3", Queued)
				mustUpsert(t, q, "k", "v4", Kept, OnExisting(KeepExisting))
				item := mustLookup(t, q, "k")
				if !item.Running || !item.Pending || string(item.Payload) != "v3" || item.Updates != 2 {
					t.Fatalf("lookup while running: %+v", item)
				}
				wantKeyed(t, q, keyedCounts{running: 1, parked: 1})
				schedNothingReady(t, q, "while the key runs")
				var err error
				switch settle {
				case "ack":
					err = d1.Ack()
				case "reject":
					err = d1.Reject()
				case "push":
					err = d1.Push()
				}
				if err != nil {
					t.Fatal(err)
				}
				wantKeyed(t, q, keyedCounts{pending: 1})
				d2 := mustTake(t, q, time.Second)
				if d2.Payload() != "v3" || d2.ID() == d1.ID() || d2.Attempts() != 1 {
					t.Fatalf("the successor: %q id %s (first %s) attempts %d", d2.Payload(), d2.ID(), d1.ID(), d2.Attempts())
				}
				if err := d2.Ack(); err != nil {
					t.Fatal(err)
				}
				wantNoKey(t, q, "k")
				switch settle {
				case "reject":
					if n, err := q.PurgeRejected(); err != nil || n != 1 {
						t.Fatalf("rejected: %d, %v", n, err)
					}
				case "push":
					// pushed on: upserted into the next queue by its key
					if item := mustLookup(t, next, "k"); string(item.Payload) != "v1" || !item.Pending {
						t.Fatalf("pushed: %+v", item)
					}
				}
			})
		})
	}
}

func TestSuccessorIsDueNoEarlierThanItsOwnDueTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		_, q := keyedQueue(t, b, "jobs")
		mustUpsert(t, q, "k", "v1", Created)
		d1 := mustTake(t, q, time.Second)
		mustUpsert(t, q, "k", "v2", Queued, Delay(300*time.Millisecond))
		if err := d1.Ack(); err != nil {
			t.Fatal(err)
		}
		schedWantStats(t, q.conn, "jobs", schedCounts{delayed: 1})
		schedNothingReady(t, q, "before the successor's due time")
		clock.skip(300 * time.Millisecond)
		if d := mustTake(t, q, 5*time.Second); d.Payload() != "v2" {
			t.Fatalf("took %q", d.Payload())
		}
	})
}

// A running delivery that goes back to waiting while a successor is parked
// is merged with it: one run follows, with the successor's payload (unless
// the successor keeps what exists), the returned delivery's id and its
// attempt counted.
func TestReturnedRunningDeliveryMergesWithItsSuccessor(t *testing.T) {
	ways := []struct {
		name     string
		ttr      time.Duration
		giveBack func(t *testing.T, b backend, q *redisQueue, d Message, clock *schedClock)
		attempts int
	}{
		{"release", 0, func(t *testing.T, _ backend, _ *redisQueue, d Message, _ *schedClock) {
			if err := d.Release(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
		}, 2},
		{"release with a delay", 0, func(t *testing.T, _ backend, q *redisQueue, d Message, clock *schedClock) {
			if err := d.Release(context.Background(), 300*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			schedNothingReady(t, q, "during the release delay")
			clock.skip(300 * time.Millisecond)
		}, 2},
		{"lease lost", 200 * time.Millisecond, func(t *testing.T, _ backend, q *redisQueue, d Message, clock *schedClock) {
			clock.pass(250 * time.Millisecond)
			if _, err := NewCleaner(q.conn).Clean(); err != nil {
				t.Fatal(err)
			}
		}, 2},
		{"connection dead", 0, func(t *testing.T, b backend, q *redisQueue, d Message, _ *schedClock) {
			if err := b.client.Del(context.Background(), q.conn.keys.heartbeat(q.conn.Name())).Err(); err != nil {
				t.Fatal(err)
			}
			if n, err := NewCleaner(q.conn).Clean(); err != nil || n != 1 {
				t.Fatalf("clean: %d, %v", n, err)
			}
		}, 2},
		{"handed back by a stop", 0, func(t *testing.T, _ backend, q *redisQueue, d Message, _ *schedClock) {
			rd := d.(*redisDelivery)
			res, err := q.conn.acks.settle(context.Background(), q, rd.reg, modeHead, nil, []string{rd.ref()}, nil)
			if err != nil || res.codes[0] != codeDone {
				t.Fatalf("hand back: %+v, %v", res, err)
			}
		}, 1},
	}
	for _, w := range ways {
		for _, mode := range []UpsertMode{ReplaceAll, KeepExisting} {
			t.Run(w.name+"/"+mode.String(), func(t *testing.T) {
				forEachBackend(t, func(t *testing.T, b backend) {
					clock := newSchedClock(b)
					c := openT(t, b, "worker", namespace())
					q := openQueue(t, c, "jobs")
					admin := openT(t, b, "admin", WithNamespace(c.opts.namespace))
					aq := openQueue(t, admin, "jobs")
					mustUpsert(t, aq, "k", "v1", Created, TTR(w.ttr))
					d1 := mustTake(t, q, time.Second)
					mustUpsert(t, aq, "k", "v2", Queued, OnExisting(mode), TTR(w.ttr))
					w.giveBack(t, b, q, d1, clock)
					wantKeyed(t, aq, keyedCounts{pending: 1})
					d2 := mustTake(t, aq, 5*time.Second)
					want := "v2"
					if mode == KeepExisting {
						want = "v1"
					}
					if d2.Payload() != want || d2.ID() != d1.ID() || d2.Attempts() != w.attempts {
						t.Fatalf("after the merge took %q id %s attempts %d; want %q, the first id %s, attempts %d",
							d2.Payload(), d2.ID(), d2.Attempts(), want, d1.ID(), w.attempts)
					}
					schedNothingReady(t, aq, "after the one merged run")
					if err := d2.Ack(); err != nil {
						t.Fatal(err)
					}
					wantNoKey(t, aq, "k")
				})
			})
		}
	}
}

// 3. Cancel, RunNow, Lookup

func TestCancelRemovesThePendingItemOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		_, q := keyedQueue(t, b, "jobs")
		mustUpsert(t, q, "delayed", "a", Created, Delay(time.Hour))
		mustUpsert(t, q, "ready", "b", Created)
		mustUpsert(t, q, "running", "c", Created, Delay(time.Millisecond))
		for _, key := range []string{"delayed", "ready"} {
			if ok, err := q.Cancel(ctx, key); !ok || err != nil {
				t.Fatalf("cancel %s: %v, %v", key, ok, err)
			}
			wantNoKey(t, q, key)
			if ok, err := q.Cancel(ctx, key); ok || err != nil {
				t.Fatalf("cancel %s again: %v, %v", key, ok, err)
			}
		}
		time.Sleep(5 * time.Millisecond)
		if b.mini != nil {
			newSchedClock(b).skip(5 * time.Millisecond)
		}
		d := mustTake(t, q, time.Second)
		if d.Key() != "running" {
			t.Fatalf("took %q: a cancelled item ran", d.Key())
		}
		if ok, err := q.Cancel(ctx, "running"); ok || err != nil {
			t.Fatalf("cancel of a running key: %v, %v", ok, err)
		}
		mustUpsert(t, q, "running", "c2", Queued)
		if ok, err := q.Cancel(ctx, "running"); !ok || err != nil {
			t.Fatalf("cancel of a parked successor: %v, %v", ok, err)
		}
		if item := mustLookup(t, q, "running"); !item.Running || item.Pending {
			t.Fatalf("lookup after cancelling the successor: %+v", item)
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		schedNothingReady(t, q, "after cancelling everything")
		wantKeyed(t, q, keyedCounts{})
		schedWantStats(t, q.conn, "jobs", schedCounts{})
	})
}

func TestRunNowMakesThePendingItemDue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		_, q := keyedQueue(t, b, "jobs")
		if ok, err := q.RunNow(ctx, "none"); ok || err != nil {
			t.Fatalf("run now of nothing: %v, %v", ok, err)
		}
		mustUpsert(t, q, "k", "v1", Created, Delay(time.Hour))
		if ok, err := q.RunNow(ctx, "k"); !ok || err != nil {
			t.Fatalf("run now: %v, %v", ok, err)
		}
		d := mustTake(t, q, time.Second)
		mustUpsert(t, q, "k", "v2", Queued, Delay(time.Hour))
		if ok, err := q.RunNow(ctx, "k"); !ok || err != nil {
			t.Fatalf("run now of a parked successor: %v, %v", ok, err)
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		if d := mustTake(t, q, time.Second); d.Payload() != "v2" {
			t.Fatalf("took %q", d.Payload())
		}
	})
}

func TestLookupReportsWhatAKeyHas(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		_, q := keyedQueue(t, b, "jobs")
		wantNoKey(t, q, "k")
		before := time.Now()
		mustUpsert(t, q, "k", "v1", Created, Delay(time.Hour))
		item := mustLookup(t, q, "k")
		if due := item.Due.Sub(before); b.mini == nil && (due < 59*time.Minute || due > 61*time.Minute) {
			t.Fatalf("due in %v, want an hour", due)
		}
		if b.mini != nil && !item.Due.Equal(clock.now.Add(time.Hour)) {
			t.Fatalf("due %v, want %v", item.Due, clock.now.Add(time.Hour))
		}
		if _, err := q.RunNow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, time.Second)
		item = mustLookup(t, q, "k")
		if !item.Running || item.Pending || string(item.Payload) != "v1" || !item.Due.IsZero() {
			t.Fatalf("lookup while running: %+v", item)
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		wantNoKey(t, q, "k")
	})
}

// 4. Keyed and plain deliveries share a queue

func TestKeyedAndPlainDeliveriesShareAQueue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c, q := keyedQueue(t, b, "jobs")
		if err := q.Publish("plain-1", "plain-2"); err != nil {
			t.Fatal(err)
		}
		mustUpsert(t, q, "urgent", "keyed-9", Created, Priority(9))
		mustUpsert(t, q, "normal", "keyed-0", Created)
		mustPut(t, q, "plain-5", Priority(5))
		s := mustStats(t, c, "jobs").QueueStats["jobs"]
		if s.ReadyCount != 5 || s.KeyedPending != 2 {
			t.Fatalf("stats %+v", s)
		}
		schedWantOrder(t, "taken", schedTakeAll(t, q), "keyed-9", "plain-5", "plain-1", "plain-2", "keyed-0")
	})
}

// 5. The rules under concurrency, for every consumer kind

// keyedRun is the bookkeeping of a concurrent run: per key, how many runs
// are under way and the newest upsert (by sequence number) that ran.
type keyedRun struct {
	keys     []string
	running  []atomic.Int32
	newest   []atomic.Int64
	runs     atomic.Int64
	overlaps atomic.Int64
}

func newKeyedRun(n int) *keyedRun {
	r := &keyedRun{running: make([]atomic.Int32, n), newest: make([]atomic.Int64, n)}
	for i := 0; i < n; i++ {
		r.keys = append(r.keys, fmt.Sprintf("key-%d", i))
	}
	return r
}

// work runs one delivery: it checks that no other run of its key is under
// way, works a little, and tells whether to release it (about one in
// eight) rather than ack it. The run is over before the caller settles.
func (r *keyedRun) work(t testing.TB, d Message) (release bool) {
	i, err := strconv.Atoi(strings.TrimPrefix(d.Key(), "key-"))
	if err != nil {
		t.Errorf("a delivery of key %q", d.Key())
		return false
	}
	if r.running[i].Add(1) > 1 {
		r.overlaps.Add(1)
	}
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
	release = rand.IntN(8) == 0
	if !release {
		seq, _ := strconv.ParseInt(strings.TrimPrefix(d.Payload(), d.Key()+"#"), 10, 64)
		for {
			old := r.newest[i].Load()
			if seq <= old || r.newest[i].CompareAndSwap(old, seq) {
				break
			}
		}
		r.runs.Add(1)
	}
	r.running[i].Add(-1)
	return release
}

func TestKeyedRulesHoldUnderConcurrency(t *testing.T) {
	t.Parallel()
	kinds := []string{"consumer", "batch", "handler", "take"}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				keyedConcurrently(t, b, kind)
			})
		})
	}
}

func keyedConcurrently(t *testing.T, b backend, kind string) {
	const (
		nKeys      = 12
		publishers = 8
		perPub     = 120
	)
	ns := namespace()
	policy := RetryPolicy{MaxAttempts: 1000, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	run := newKeyedRun(nKeys)
	stop := make(chan struct{})
	var takers sync.WaitGroup
	var queues []*redisQueue
	for _, tag := range []string{"a", "b"} {
		c := openT(t, b, tag, ns)
		qi, err := c.OpenQueue("jobs", WithRetryPolicy(policy))
		if err != nil {
			t.Fatal(err)
		}
		q := qi.(*redisQueue)
		queues = append(queues, q)
		settle := func(d Message) {
			if run.work(t, d) {
				if err := d.Release(context.Background(), 0); err != nil {
					t.Errorf("release: %v", err)
				}
				return
			}
			if err := d.Ack(); err != nil {
				t.Errorf("ack: %v", err)
			}
		}
		if kind != "take" {
			if err := q.StartConsuming(8, 20*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		for w := 0; w < 3; w++ {
			var err error
			switch kind {
			case "consumer":
				_, err = q.AddConsumerFunc("w", func(d Delivery) { settle(d.(Message)) })
			case "batch":
				_, err = q.AddBatchConsumerFunc("w", 4, 5*time.Millisecond, func(ds Deliveries) {
					var acks Deliveries
					for _, d := range ds {
						if run.work(t, d) {
							if err := d.Release(context.Background(), 0); err != nil {
								t.Errorf("release: %v", err)
							}
						} else {
							acks = append(acks, d)
						}
					}
					if errs := acks.Ack(); len(errs) > 0 {
						t.Errorf("batch ack: %v", errs)
					}
				})
			case "handler":
				_, err = q.AddHandler("w", func(_ context.Context, d Message) error {
					if run.work(t, d) {
						return errors.New("try again")
					}
					return nil
				})
			case "take":
				takers.Add(1)
				go func() {
					defer takers.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ds, err := q.TakeBatch(context.Background(), 3, 50*time.Millisecond)
						if errors.Is(err, ErrorTimeout) {
							continue
						}
						if err != nil {
							t.Errorf("take: %v", err)
							return
						}
						for _, d := range ds {
							settle(d)
						}
					}
				}()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { close(stop); takers.Wait() })

	// Publishers upsert the same keys at once; each key's payloads carry a
	// sequence number that grows with every upsert of the key.
	seqs := make([]atomic.Int64, nKeys)
	modes := []UpsertMode{ReplaceAll, ReplacePayload}
	var pubs sync.WaitGroup
	for p := 0; p < publishers; p++ {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			q := queues[p%2]
			for i := 0; i < perPub; i++ {
				k := rand.IntN(nKeys)
				// The sequence number is taken under the upsert's order
				// per key: an upsert that returns later may carry a
				// smaller number, so the check below only relies on the
				// number of the last upsert of each key, made after all
				// others returned.
				payload := fmt.Sprintf("%s#%d", run.keys[k], seqs[k].Add(1))
				if _, err := q.Upsert(context.Background(), run.keys[k], []byte(payload), OnExisting(modes[i%2])); err != nil {
					t.Errorf("upsert: %v", err)
					return
				}
			}
		}()
	}
	pubs.Wait()
	// One last upsert per key, after every other one returned: it (or a
	// later one) must run.
	for k := range run.keys {
		payload := fmt.Sprintf("%s#%d", run.keys[k], seqs[k].Add(1))
		if _, err := queues[0].Upsert(context.Background(), run.keys[k], []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every key's last upsert to run", func() bool {
		for k := range run.keys {
			if run.newest[k].Load() != seqs[k].Load() {
				return false
			}
		}
		return true
	})
	if n := run.overlaps.Load(); n > 0 {
		t.Fatalf("LIBRARY BUG: %d times two runs of one key were under way at once", n)
	}
	upserts := int64(publishers*perPub + nKeys)
	if runs := run.runs.Load(); runs < int64(nKeys) || runs > upserts {
		t.Fatalf("%d runs for %d upserts of %d keys", runs, upserts, nKeys)
	}
	eventually(t, "the queue to be empty", func() bool {
		s := mustStats(t, queues[0].conn, "jobs").QueueStats["jobs"]
		return s.ReadyCount == 0 && s.DelayedCount == 0 && s.UnackedCount() == 0 && s.KeyedPending == 0 &&
			s.KeyedRunning == 0 && s.KeyedParked == 0 && s.RejectedCount == 0
	})
	t.Logf("%s: %d runs of %d upserts", kind, run.runs.Load(), upserts)
}

// 6. Bad input

func TestBadKeyedInputIsRefusedAndChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c, q := keyedQueue(t, b, "jobs")
		ctx := context.Background()
		mustUpsert(t, q, "k", "v", Created, Delay(time.Hour))
		before := schedKeys(t, b, c)
		long := strings.Repeat("x", MaxKeyLength+1)
		cases := []struct {
			name string
			call func() error
		}{
			{"empty key", func() error { _, err := q.Upsert(ctx, "", []byte("p")); return err }},
			{"long key", func() error { _, err := q.Upsert(ctx, long, []byte("p")); return err }},
			{"unknown mode", func() error { _, err := q.Upsert(ctx, "k", []byte("p"), OnExisting(UpsertMode(7))); return err }},
			{"negative mode", func() error { _, err := q.Upsert(ctx, "k", []byte("p"), OnExisting(UpsertMode(-1))); return err }},
			{"MaxWait below 1ms", func() error { _, err := q.Upsert(ctx, "k", []byte("p"), MaxWait(time.Microsecond)); return err }},
			{"MaxWait below the delay", func() error {
				_, err := q.Upsert(ctx, "k", []byte("p"), Delay(time.Minute), MaxWait(time.Second))
				return err
			}},
			{"MaxWait below At", func() error {
				_, err := q.Upsert(ctx, "k", []byte("p"), At(time.Now().Add(time.Hour)), MaxWait(time.Second))
				return err
			}},
			{"negative delay", func() error { _, err := q.Upsert(ctx, "k", []byte("p"), Delay(-time.Second)); return err }},
			{"OnExisting on Put", func() error { return q.Put(ctx, []byte("p"), OnExisting(KeepExisting)) }},
			{"MaxWait on Put", func() error { return q.Put(ctx, []byte("p"), MaxWait(time.Second)) }},
			{"empty key to Cancel", func() error { _, err := q.Cancel(ctx, ""); return err }},
			{"long key to RunNow", func() error { _, err := q.RunNow(ctx, long); return err }},
			{"long key to Lookup", func() error { _, err := q.Lookup(ctx, long); return err }},
		}
		for _, tc := range cases {
			err := tc.call()
			var ae *ArgumentError
			if !errors.As(err, &ae) || !errors.Is(err, ErrorInvalidArgument) {
				t.Fatalf("%s: %v, want an *ArgumentError", tc.name, err)
			}
		}
		small, err := Open(ctx, "small", b.client, nil, WithNamespace(c.opts.namespace), WithMaxPayloadSize(4))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { <-small.StopAllConsuming() }()
		sq, _ := small.OpenQueue("jobs")
		if _, err := sq.Upsert(ctx, "k", []byte("too large")); !errors.Is(err, ErrorPayloadTooLarge) {
			t.Fatalf("oversized payload: %v", err)
		}
		after := schedKeys(t, b, c)
		for k := range after {
			if strings.Contains(k, "}:connections") {
				delete(after, k) // the small connection came and went
				delete(before, k)
			}
		}
		schedSameKeys(t, "bad keyed input", before, after)
	})
}

// Keys are stored as they are: the scripts' delimiters, NUL and bytes that
// are not UTF-8 work.
func TestKeysWithAnyBytesWork(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		_, q := keyedQueue(t, b, "jobs")
		keys := []string{"a:b:c", "semi;colon,comma", "nul\x00byte", "\x05stub-like1:x", "\xff\xfe", " ", strings.Repeat("k", MaxKeyLength)}
		for _, k := range keys {
			mustUpsert(t, q, k, "v-"+k, Created)
			mustUpsert(t, q, k, "w-"+k, Updated)
		}
		got := map[string]string{}
		for len(got) < len(keys) {
			d := mustTake(t, q, time.Second)
			got[d.Key()] = d.Payload()
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range keys {
			if got[k] != "w-"+k {
				t.Fatalf("key %q ran with %q", k, got[k])
			}
		}
		schedNothingReady(t, q, "after every key ran once")
		wantKeyed(t, q, keyedCounts{})
	})
}

// 7. Management verbs and the cleaner on keyed items

func TestManagementVerbsOnKeyedItems(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		ctx := context.Background()
		_, q := keyedQueue(t, b, "jobs", WithKeepExpired(true))
		// PurgeReady takes the keyed items that wait in ready with it.
		mustUpsert(t, q, "ready", "r", Created)
		mustUpsert(t, q, "later", "l", Created, Delay(time.Hour))
		mustUpsert(t, q, "moved", "m1", Created)
		mustUpsert(t, q, "moved", "m2", Updated, Delay(time.Hour)) // a stale stub in ready
		if n, err := q.PurgeReady(); err != nil || n != 1 {
			t.Fatalf("purge ready: %d, %v", n, err)
		}
		wantNoKey(t, q, "ready")
		mustLookup(t, q, "later")
		mustLookup(t, q, "moved")
		wantKeyed(t, q, keyedCounts{pending: 2})
		// Drain returns a keyed item's payload and takes it from its key.
		if _, err := q.RunNow(ctx, "later"); err != nil {
			t.Fatal(err)
		}
		if got, err := q.Drain(10); err != nil || len(got) != 1 || got[0] != "l" {
			t.Fatalf("drain: %v, %v", got, err)
		}
		wantNoKey(t, q, "later")
		// A rejected keyed delivery returned from rejected is upserted by
		// its key: into the pending item when there is one.
		mustUpsert(t, q, "r2", "first", Created)
		d := mustTake(t, q, time.Second)
		if err := d.Reject(); err != nil {
			t.Fatal(err)
		}
		if n, err := q.ReturnRejected(10); err != nil || n != 1 {
			t.Fatalf("return rejected: %d, %v", n, err)
		}
		if item := mustLookup(t, q, "r2"); string(item.Payload) != "first" || !item.Pending {
			t.Fatalf("returned from rejected: %+v", item)
		}
		// The cleaner drops an expired keyed item at the front of ready and
		// keeps it in rejected (WithKeepExpired).
		if _, err := q.Cancel(ctx, "r2"); err != nil {
			t.Fatal(err)
		}
		mustUpsert(t, q, "ttl", "t", Created, TTL(100*time.Millisecond))
		clock.pass(150 * time.Millisecond)
		if _, err := NewCleaner(q.conn).Clean(); err != nil {
			t.Fatal(err)
		}
		wantNoKey(t, q, "ttl")
		s := mustStats(t, q.conn, "jobs").QueueStats["jobs"]
		if s.ExpiredCount != 1 || s.RejectedCount != 1 || s.ReadyCount != 0 {
			t.Fatalf("after the expiry: %+v", s)
		}
		// Destroy removes every pending item, parked ones too; a running
		// delivery can still be acked.
		mustUpsert(t, q, "run", "x", Created)
		d = mustTake(t, q, time.Second)
		mustUpsert(t, q, "run", "y", Queued)
		if _, _, err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
		wantKeyed(t, q, keyedCounts{running: 1})
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		wantKeyed(t, q, keyedCounts{})
		wantNoKey(t, q, "moved")
	})
}

// 8. A consumer process of a keyed delivery is killed while a successor
// waits: after the clean, exactly one run follows, with the newest payload.
func TestProcessKilledWhileASuccessorWaits(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	srv := redistest.Start(t)
	client := srv.Client(t)
	ns := procNamespace(t)
	admin, err := openConn(client, "admin", nil, WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-admin.StopAllConsuming() })
	q := openQueue(t, admin, "jobs")
	mustUpsert(t, q, "k", "v1", Created)

	env := procEnv(srv, ns, "jobs", "victim")
	env[procEnvAckLimit] = "0" // hold the first delivery, never settle it
	env[procEnvPrefetch] = "1"
	env[procEnvHBTTL] = "1s"
	env[procEnvAckFile] = filepath.Join(t.TempDir(), "acks")
	victim := startProcHelper(t, "consume", env)
	victim.await("HELD", 60*time.Second, nil) // the first message: a start beside other process tests
	mustUpsert(t, q, "k", "v2", Queued)
	mustUpsert(t, q, "k", "v3", Queued)
	victim.kill()

	cl := NewCleaner(admin)
	procWait(t, 20*time.Second, "the cleaner to return the killed consumer's delivery", func() bool {
		n, err := cl.Clean()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}, func() string { return procQueueState(admin, "jobs") })
	item := mustLookup(t, q, "k")
	if item.Running || !item.Pending || string(item.Payload) != "v3" {
		t.Fatalf("after the clean: %+v, want one pending item with v3", item)
	}
	d := mustTake(t, q, 5*time.Second)
	if d.Payload() != "v3" || d.Attempts() != 2 {
		t.Fatalf("took %q (attempts %d), want v3 on its second attempt", d.Payload(), d.Attempts())
	}
	schedNothingReady(t, q, "after the one run")
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	wantNoKey(t, q, "k")
	wantCounts(t, admin, "jobs", 0, 0, 0)
	wantKeyed(t, q, keyedCounts{})
	if n, err := cl.Clean(); err != nil || n != 0 {
		t.Fatalf("final clean: %d, %v", n, err)
	}
}
