package redq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func openTimers(t testing.TB, c Connection, name string) Timers {
	t.Helper()
	ts, err := c.OpenTimers(name)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// nextFire waits for the next fire within limit.
func nextFire(t testing.TB, ts Timers, limit time.Duration) Fire {
	t.Helper()
	f, err := ts.Next(context.Background(), limit)
	if err != nil {
		t.Fatalf("next fire: %v", err)
	}
	return f
}

// noFire asserts that nothing fires within d.
func noFire(t testing.TB, ts Timers, d time.Duration, what string) {
	t.Helper()
	if f, err := ts.Next(context.Background(), d); !errors.Is(err, ErrorTimeout) {
		t.Fatalf("%s: fired %v (%v), want nothing", what, f, err)
	}
}

func TestTimerFiresAtItsDueTimeByRedisClock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "timers", namespace())
		ts := openTimers(t, c, "reminders")
		ctx := context.Background()
		set := time.Now()
		if err := ts.Set(ctx, "invoice-7", 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		due, err := ts.Lookup(ctx, "invoice-7")
		if err != nil {
			t.Fatal(err)
		}
		if b.mini != nil && !due.Equal(clock.now.Add(300*time.Millisecond)) {
			t.Fatalf("due %v, want %v", due, clock.now.Add(300*time.Millisecond))
		}
		if b.mini != nil {
			noFire(t, ts, 200*time.Millisecond, "before the due time")
			clock.skip(300 * time.Millisecond)
		}
		f := nextFire(t, ts, 5*time.Second)
		if f.Key() != "invoice-7" || !f.Due().Equal(due) {
			t.Fatalf("fire %q due %v, want invoice-7 due %v", f.Key(), f.Due(), due)
		}
		if b.mini == nil {
			if time.Since(set) < 300*time.Millisecond {
				t.Fatalf("fired %v after the Set, before its due time", time.Since(set))
			}
		}
		if _, err := ts.Lookup(ctx, "invoice-7"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("lookup of a firing timer: %v, want ErrorNotFound", err)
		}
		if err := f.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if err := f.Ack(ctx); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("second ack: %v", err)
		}
	})
}

func TestTimerSetCreateCancelAndLookup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "timers", namespace())
		ts := openTimers(t, c, "t")
		ctx := context.Background()
		if ok, err := ts.Create(ctx, "a", time.Hour); !ok || err != nil {
			t.Fatalf("create: %v, %v", ok, err)
		}
		if ok, err := ts.Create(ctx, "a", time.Millisecond); ok || err != nil {
			t.Fatalf("create of a pending timer: %v, %v", ok, err)
		}
		if err := ts.Set(ctx, "a", 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := ts.SetAt(ctx, "b", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if ok, err := ts.Cancel(ctx, "b"); !ok || err != nil {
			t.Fatalf("cancel: %v, %v", ok, err)
		}
		if ok, err := ts.Cancel(ctx, "b"); ok || err != nil {
			t.Fatalf("cancel again: %v, %v", ok, err)
		}
		if _, err := ts.Lookup(ctx, "b"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("lookup of a cancelled timer: %v", err)
		}
		clock.skip(200 * time.Millisecond)
		f := nextFire(t, ts, 5*time.Second)
		if f.Key() != "a" {
			t.Fatalf("fired %q", f.Key())
		}
		if err := f.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		noFire(t, ts, 150*time.Millisecond, "after the only timer fired and the other was cancelled")
		s := mustStats(t, c).TimerStats["t"]
		if s != (TimerStat{}) {
			t.Fatalf("stats %+v, want none pending or firing", s)
		}
	})
}

// A timer Set again while its fire is handled is a new timer: the old
// fire's Ack does not remove it, and it fires at its own time.
func TestSetWhileFiringSurvivesTheOldAck(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "timers", namespace())
		ts := openTimers(t, c, "t")
		ctx := context.Background()
		if err := ts.Set(ctx, "k", 0); err != nil {
			t.Fatal(err)
		}
		f1 := nextFire(t, ts, 5*time.Second)
		if err := ts.Set(ctx, "k", 0); err != nil {
			t.Fatal(err)
		}
		if ok, err := ts.Create(ctx, "k", 0); ok || err != nil {
			t.Fatalf("create while a new timer is pending: %v, %v", ok, err)
		}
		if s := mustStats(t, c).TimerStats["t"]; s != (TimerStat{Pending: 1, Firing: 1}) {
			t.Fatalf("stats while firing %+v", s)
		}
		noFire(t, ts, 100*time.Millisecond, "a second fire of the key while the first is handled")
		if err := f1.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		f2 := nextFire(t, ts, 5*time.Second)
		if f2.Key() != "k" {
			t.Fatalf("fired %q", f2.Key())
		}
		if err := f2.Release(ctx, 0); err != nil {
			t.Fatal(err)
		}
		f3 := nextFire(t, ts, 5*time.Second)
		if err := f3.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		noFire(t, ts, 100*time.Millisecond, "after the last ack")
	})
}

// A fire taken by a connection that dies fires again once a cleaner ran,
// to another connection; cancelling before the due time means no fire.
func TestFireOfADeadConnectionFiresAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		dying := openT(t, b, "dying", ns)
		alive := openT(t, b, "alive", ns)
		ctx := context.Background()
		tsDying := openTimers(t, dying, "t")
		tsAlive := openTimers(t, alive, "t")
		if err := tsAlive.Set(ctx, "k", 0); err != nil {
			t.Fatal(err)
		}
		if err := tsAlive.Set(ctx, "cancelled", 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		f := nextFire(t, tsDying, 5*time.Second)
		if ok, err := tsAlive.Cancel(ctx, "cancelled"); err != nil || !ok {
			t.Fatalf("cancel of a pending timer: %v, %v", ok, err)
		}
		if err := b.client.Del(ctx, dying.keys.heartbeat(dying.Name())).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := NewCleaner(alive).Clean(); err != nil || n != 1 {
			t.Fatalf("clean: %d, %v", n, err)
		}
		again := nextFire(t, tsAlive, 5*time.Second)
		if again.Key() != "k" || !again.Due().Equal(f.Due()) {
			t.Fatalf("fired again %q due %v; first %q due %v", again.Key(), again.Due(), f.Key(), f.Due())
		}
		if err := f.Ack(ctx); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("the dead connection's ack: %v", err)
		}
		if err := again.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
		if b.mini != nil {
			newSchedClock(b).skip(time.Second)
		}
		noFire(t, tsAlive, 150*time.Millisecond, "a cancelled timer")
	})
}

// Many timers and several waiting processes on two connections: every
// timer fires exactly once (no poller races), none before its due time.
func TestEveryTimerFiresOnceAmongManyWaiters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		const n = 300
		ns := namespace()
		ctx := context.Background()
		var sets []Timers
		for _, tag := range []string{"a", "b"} {
			sets = append(sets, openTimers(t, openT(t, b, tag, ns), "t"))
		}
		for i := 0; i < n; i++ {
			if err := sets[i%2].Set(ctx, fmt.Sprintf("t%03d", i), time.Duration(i%50)*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		fired := map[string]int{}
		var wg sync.WaitGroup
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for w := 0; w < 6; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					f, err := sets[w%2].Next(wctx, time.Second)
					if errors.Is(err, ErrorTimeout) {
						continue
					}
					if err != nil {
						return
					}
					if time.Until(f.Due()) > 5*time.Millisecond {
						t.Errorf("%s fired %v before its due time", f.Key(), time.Until(f.Due()))
					}
					mu.Lock()
					fired[f.Key()]++
					mu.Unlock()
					if err := f.Ack(ctx); err != nil {
						t.Errorf("ack: %v", err)
					}
				}
			}()
		}
		eventually(t, "every timer to fire", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(fired) == n
		})
		time.Sleep(100 * time.Millisecond)
		cancel()
		wg.Wait()
		for k, times := range fired {
			if times != 1 {
				t.Errorf("%s fired %d times", k, times)
			}
		}
	})
}

func TestBadTimerInputIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "timers", namespace())
		if _, err := c.OpenTimers("bad name"); !errors.Is(err, ErrorInvalidArgument) {
			t.Fatalf("bad name: %v", err)
		}
		ts := openTimers(t, c, "t")
		ctx := context.Background()
		before := schedKeys(t, b, c)
		for name, err := range map[string]error{
			"empty key":      ts.Set(ctx, "", time.Second),
			"long key":       ts.SetAt(ctx, strings.Repeat("k", MaxKeyLength+1), time.Now()),
			"negative delay": ts.Set(ctx, "k", -time.Second),
			"far delay":      ts.Set(ctx, "k", MaxDelay+time.Hour),
			"create empty": func() error {
				_, err := ts.Create(ctx, "", time.Second)
				return err
			}(),
		} {
			if !errors.Is(err, ErrorInvalidArgument) {
				t.Fatalf("%s: %v", name, err)
			}
		}
		schedSameKeys(t, "bad timer input", before, schedKeys(t, b, c))
	})
}

// A timer set and a queue of the same name are separate.
func TestTimerSetAndQueueOfOneNameAreSeparate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "timers", namespace())
		ctx := context.Background()
		ts := openTimers(t, c, "x")
		q := openQueue(t, c, "x")
		mustUpsert(t, q, "k", "queued", Created)
		if err := ts.Set(ctx, "k", 0); err != nil {
			t.Fatal(err)
		}
		if d := mustTake(t, q, time.Second); d.Payload() != "queued" {
			t.Fatalf("queue took %q", d.Payload())
		}
		if f := nextFire(t, ts, time.Second); f.Key() != "k" {
			t.Fatalf("fired %q", f.Key())
		}
	})
}

func TestTestTimersFollowTheRules(t *testing.T) {
	ctx := context.Background()
	ts, err := NewTestConnection().OpenTimers("t")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if ok, _ := ts.Create(ctx, "a", 20*time.Millisecond); !ok {
		t.Fatal("create")
	}
	if ok, _ := ts.Create(ctx, "a", time.Hour); ok {
		t.Fatal("create of a pending timer")
	}
	if err := ts.Set(ctx, "b", time.Hour); err != nil {
		t.Fatal(err)
	}
	if ok, _ := ts.Cancel(ctx, "b"); !ok {
		t.Fatal("cancel")
	}
	f := nextFire(t, ts, time.Second)
	if f.Key() != "a" || time.Since(began) < 20*time.Millisecond {
		t.Fatalf("fired %q after %v", f.Key(), time.Since(began))
	}
	if err := f.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Ack(ctx); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("second ack: %v", err)
	}
	if err := ts.Set(ctx, "", 0); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("empty key: %v", err)
	}
	if err := ts.Set(ctx, "c", -time.Second); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("negative delay: %v", err)
	}
	noFire(t, ts, 30*time.Millisecond, "nothing pending")
	// At with the zero time means at once, as for the real timers.
	if err := ts.SetAt(ctx, "d", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if f := nextFire(t, ts, time.Second); f.Key() != "d" {
		t.Fatalf("fired %q, want d", f.Key())
	}
}

// Next waits as Take and Round.Next do: timeout 0 does not wait, an
// empty set times out with ErrorTimeout, a negative timeout is refused.
func TestTimersNextTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ts := openTimers(t, openT(t, b, "timers", namespace()), "next-timeout")
		if f, err := ts.Next(ctx, 0); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("Next(0) on no timers = %v, %v; want ErrorTimeout", f, err)
		}
		if _, err := ts.Next(ctx, -time.Millisecond); !errors.Is(err, ErrorInvalidArgument) {
			t.Fatalf("Next(-1ms) = %v; want an *ArgumentError", err)
		}
		if err := ts.Set(ctx, "k", 0); err != nil {
			t.Fatal(err)
		}
		f, err := ts.Next(ctx, 0)
		if err != nil || f.Key() != "k" {
			t.Fatalf("Next(0) on a due timer = %v, %v", f, err)
		}
		if err := f.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// NextBatch takes every due fire (up to max) in one call, not those due
// later; Fires.Ack acks them together, and a fire acked already answers
// ErrorNotFound by its index while the others are acked. A timer set
// again while its fire is handled survives the batch's ack. Bad input
// changes nothing.
func TestTimersNextBatchAndAckTogether(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "timers", namespace())
		ts := openTimers(t, c, "batch")
		if _, err := ts.NextBatch(ctx, 0, 0); !errors.Is(err, ErrorInvalidArgument) {
			t.Fatalf("NextBatch max 0: %v", err)
		}
		if _, err := ts.NextBatch(ctx, 1, -time.Millisecond); !errors.Is(err, ErrorInvalidArgument) {
			t.Fatalf("NextBatch negative timeout: %v", err)
		}
		if fs, err := ts.NextBatch(ctx, 10, 0); !errors.Is(err, ErrorTimeout) {
			t.Fatalf("NextBatch on no timers: %v, %v", fs, err)
		}
		for i := 0; i < 5; i++ {
			if err := ts.Set(ctx, fmt.Sprintf("k%d", i), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := ts.Set(ctx, "later", time.Hour); err != nil {
			t.Fatal(err)
		}
		fs, err := ts.NextBatch(ctx, 3, 5*time.Second)
		if err != nil || len(fs) != 3 {
			t.Fatalf("NextBatch 3: %d fires, %v", len(fs), err)
		}
		rest, err := ts.NextBatch(ctx, 100, 5*time.Second)
		if err != nil || len(rest) != 2 {
			t.Fatalf("NextBatch of the rest: %d fires, %v", len(rest), err)
		}
		fs = append(fs, rest...)
		seen := map[string]bool{}
		for _, f := range fs {
			seen[f.Key()] = true
		}
		if len(seen) != 5 || seen["later"] {
			t.Fatalf("fired %v", seen)
		}
		// a timer of a fired key set again meanwhile stays
		if err := ts.Set(ctx, fs[1].Key(), 0); err != nil {
			t.Fatal(err)
		}
		if err := fs[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		errs := fs.Ack(ctx)
		if len(errs) != 1 || !errors.Is(errs[0], ErrorNotFound) {
			t.Fatalf("acks of the batch: %v, want ErrorNotFound for index 0 only", errs)
		}
		again := nextFire(t, ts, 5*time.Second)
		if again.Key() != fs[1].Key() {
			t.Fatalf("fired %q, want %q set again", again.Key(), fs[1].Key())
		}
		// the same fire twice in one batch is acked once
		if errs := (Fires{again, again}).Ack(ctx); len(errs) != 1 || !errors.Is(errs[1], ErrorNotFound) {
			t.Fatalf("a fire twice in one batch: %v, want ErrorNotFound for index 1 only", errs)
		}
		if s := mustStats(t, c).TimerStats["batch"]; s != (TimerStat{Pending: 1}) {
			t.Fatalf("stats after the acks %+v, want only the later timer pending", s)
		}
		noFire(t, ts, 50*time.Millisecond, "after the batch's ack")
	})
}

func TestTestTimersNextBatch(t *testing.T) {
	ctx := context.Background()
	ts, err := NewTestConnection().OpenTimers("t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.NextBatch(ctx, 0, 0); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("NextBatch max 0: %v", err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if err := ts.Set(ctx, k, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.Set(ctx, "later", time.Hour); err != nil {
		t.Fatal(err)
	}
	fs, err := ts.NextBatch(ctx, 10, time.Second)
	if err != nil || len(fs) != 3 {
		t.Fatalf("NextBatch: %d fires, %v", len(fs), err)
	}
	if errs := fs.Ack(ctx); len(errs) != 0 {
		t.Fatal(errs)
	}
	if errs := fs.Ack(ctx); len(errs) != 3 || !errors.Is(errs[2], ErrorNotFound) {
		t.Fatalf("second ack: %v", errs)
	}
	if _, err := ts.NextBatch(ctx, 10, 0); !errors.Is(err, ErrorTimeout) {
		t.Fatalf("NextBatch with only a later timer: %v", err)
	}
}

// While fires back up, Next takes several at once and serves the next
// calls from them; those no call asks for go back to Redis, where another
// connection takes them, and every timer fires once.
func TestNextTakesBackedUpFiresTogetherAndHandsBackTheRest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const n = 40
		ns := namespace()
		ctx := context.Background()
		first := openT(t, b, "first", ns)
		tsFirst := openTimers(t, first, "t")
		tsOther := openTimers(t, openT(t, b, "other", ns), "t")
		for i := 0; i < n; i++ {
			if err := tsFirst.Set(ctx, fmt.Sprintf("k%02d", i), 0); err != nil {
				t.Fatal(err)
			}
		}
		fired := map[string]int{}
		// 1, 2, 4 and 8 fires taken: 15, of which 4 handed out and acked
		for i := 0; i < 4; i++ {
			f := nextFire(t, tsFirst, 5*time.Second)
			fired[f.Key()]++
			if err := f.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		st := mustStats(t, first).TimerStats["t"]
		if st.Firing < 2 || st.Firing+st.Pending != n-4 {
			t.Fatalf("after 4 fires handled in a backlog: %+v, want more than one firing (taken ahead) and %d in all", st, n-4)
		}
		// the first connection asks for nothing more: the other one gets
		// every remaining fire, those taken ahead once they are handed back
		for len(fired) < n {
			f := nextFire(t, tsOther, 5*time.Second)
			fired[f.Key()]++
			if err := f.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for k, times := range fired {
			if times != 1 {
				t.Errorf("%s fired %d times", k, times)
			}
		}
		if st := mustStats(t, first).TimerStats["t"]; st != (TimerStat{}) {
			t.Fatalf("stats after every fire: %+v, want none pending or firing", st)
		}
		noFire(t, tsFirst, 150*time.Millisecond, "after every fire was acked")
	})
}

// StopAllConsuming hands back the fires a Next took ahead before it
// returns, so that a program that closes its client right after loses no
// time to them and leaves nothing running.
func TestStopAllConsumingHandsBackFiresTakenAhead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const n = 20
		ns := namespace()
		ctx := context.Background()
		c := openT(t, b, "c", ns)
		ts := openTimers(t, c, "t")
		for i := 0; i < n; i++ {
			if err := ts.Set(ctx, fmt.Sprintf("k%02d", i), 0); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 4; i++ { // takes of 1, 2, 4, 8: 11 kept ahead
			if err := nextFire(t, ts, 5*time.Second).Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		<-c.StopAllConsuming()
		st := mustStats(t, openT(t, b, "reader", ns)).TimerStats["t"]
		if st != (TimerStat{Pending: n - 4}) {
			t.Fatalf("right after StopAllConsuming: %+v, want the %d fires not acked pending again", st, n-4)
		}
		if _, err := ts.Next(ctx, 0); !errors.Is(err, ErrorConsumingStopped) {
			t.Fatalf("Next after the stop: %v, want ErrorConsumingStopped", err)
		}
	})
}

// A timer set for later while its key fires becomes pending when the fire
// is acked, due at its own time: it does not fire before, and it fires
// then. The acks are counted.
func TestSetForLaterWhileFiringFiresAtItsOwnTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "timers", namespace())
		ts := openTimers(t, c, "t")
		ctx := context.Background()
		if err := ts.Set(ctx, "k", 0); err != nil {
			t.Fatal(err)
		}
		f1 := nextFire(t, ts, 5*time.Second)
		if err := ts.Set(ctx, "k", 400*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := f1.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		due, err := ts.Lookup(ctx, "k")
		if err != nil {
			t.Fatalf("lookup of the timer set during the fire, after its ack: %v", err)
		}
		if b.mini != nil && !due.Equal(clock.now.Add(400*time.Millisecond)) {
			t.Fatalf("due %v, want %v", due, clock.now.Add(400*time.Millisecond))
		}
		if s := mustStats(t, c).TimerStats["t"]; s != (TimerStat{Pending: 1}) {
			t.Fatalf("stats after the ack %+v, want the new timer pending", s)
		}
		noFire(t, ts, 100*time.Millisecond, "before the new timer's due time")
		clock.skip(400 * time.Millisecond)
		f2 := nextFire(t, ts, 5*time.Second)
		if f2.Key() != "k" || !f2.Due().Equal(due) {
			t.Fatalf("fired %q due %v, want k due %v", f2.Key(), f2.Due(), due)
		}
		if b.mini == nil && time.Now().Before(due) {
			t.Fatalf("fired at %v, before its due time %v", time.Now(), due)
		}
		if err := f2.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if s := mustStats(t, c).TimerStats["t"]; s != (TimerStat{}) {
			t.Fatalf("stats after the last ack %+v, want none", s)
		}
		k := newQueueKeys(c.opts.namespace, timerTag+"t")
		tm, err := b.client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		var acked int64
		for _, p := range historyOf(tm, b.client.HGetAll(ctx, k.meta()).Val(), nil, time.Hour) {
			acked += p.Acked
		}
		if acked != 2 {
			t.Fatalf("%d acks counted, want 2", acked)
		}
	})
}
