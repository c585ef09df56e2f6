package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// One poll after the timers expired pushes each of them once, and only
// them: a timer not yet due stays registered, and fires at a later poll.
func TestPollTimersPollFiresEveryTimer(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	rdb := e.newClient(4)
	defer rdb.Close()
	tm := newPollTimersNS(rdb)
	const n = 2500 // more than one SCAN page and one push chunk
	// The timers are due a second out, far enough that the fill and the
	// first poll end before any of them is due even on a loaded machine.
	const lead = time.Second
	start := time.Now()
	due := start.Add(lead)
	dues, err := tm.fill(ctx, n, func(int) time.Time { return due })
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.createMany(ctx, []string{"later"}, []time.Duration{time.Hour}); err != nil {
		t.Fatal(err)
	}
	filled := time.Now()
	for i, d := range dues {
		if d.Before(due) || d.After(filled.Add(lead)) {
			t.Fatalf("timer %d due %v, want %v (a second after the fill started)", i, d, due)
		}
	}
	// Redis sets a timer's expiry when its transaction runs, between the
	// fill's clock reading for the timer (its due time) and the end of the
	// fill: no timer expires before its due time, nor after it plus the
	// fill's duration.
	earliest, latest := slices.MinFunc(dues, time.Time.Compare), slices.MaxFunc(dues, time.Time.Compare)
	fired, err := tm.poll(ctx)
	if polled := time.Now(); !polled.Before(earliest) {
		// Too slow to tell a poll before the due time; never seen with
		// a second's lead.
		t.Skipf("the fill and the first poll took %s, past the due time", polled.Sub(start))
	}
	if err != nil || fired != 0 {
		t.Fatalf("a poll before anything is due pushed %d (%v)", fired, err)
	}
	time.Sleep(time.Until(latest.Add(filled.Sub(start) + 50*time.Millisecond)))
	fired, err = tm.poll(ctx)
	if err != nil || fired != n {
		t.Fatalf("poll pushed %d (%v), want %d", fired, err, n)
	}
	if fired, err := tm.poll(ctx); err != nil || fired != 0 {
		t.Fatalf("a second poll pushed %d (%v), want none", fired, err)
	}
	registered, queued, err := tm.left(ctx)
	if err != nil || registered != 1 || queued != n {
		t.Fatalf("left: %d registered, %d queued (%v); want 1 and %d", registered, queued, err, n)
	}
	tl := newFireTally(n)
	for range n {
		key, err := tm.next(ctx, time.Second)
		if err != nil || key == "" {
			t.Fatalf("next: %q, %v", key, err)
		}
		tl.fired(key, time.Now(), time.Time{})
	}
	if err := tl.counts().exact(); err != nil {
		t.Fatal(err)
	}
	if key, err := tm.next(ctx, time.Second); err != nil || key != "" {
		t.Fatalf("next on an empty list: %q, %v", key, err)
	}
	if n, err := rdb.Exists(ctx, tm.timerKey("later")).Result(); err != nil || n != 1 {
		t.Fatalf("the timer not due: %d, %v", n, err)
	}
	// Nothing is left of the polls' temporary sets.
	if keys, err := rdb.Keys(ctx, tm.prefix+":_registered_*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("temporary sets left: %v, %v", keys, err)
	}
}

// A whole baseline run with one poller fires every timer once, about a
// poll period late at worst; a consumer that dies after taking loses its
// fires; two pollers started together push timers twice.
func TestPollTimersFireTimers(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	s := newPollTimers().(pollTimersSystem)
	cfg := timerConfig{N: 300, Spread: 500 * time.Millisecond, Consumers: 4, Pairs: 1, Poll: 200 * time.Millisecond, Drain: 10 * time.Second}

	tl, err := s.FireTimers(ctx, e, cfg)
	if err != nil {
		t.Fatalf("FireTimers: %v", err)
	}
	if err := tl.counts().exact(); err != nil {
		t.Fatalf("one poller: %v", err)
	}
	late := tl.lateness()
	if len(late) != cfg.N || slices.Min(late) < -time.Millisecond || slices.Max(late) > cfg.Poll+2*time.Second {
		t.Fatalf("%d lateness samples from %s to %s", len(late), slices.Min(late), slices.Max(late))
	}
	t.Logf("one poller: p50 %s, p99 %s", percentile(late, 0.5), percentile(late, 0.99))

	victim := cfg
	victim.VictimTakes = 10
	tl, err = s.FireTimers(ctx, e, victim)
	if err != nil {
		t.Fatalf("FireTimers with a victim: %v", err)
	}
	if c := tl.counts(); c.Lost != 10 || c.Double != 0 {
		t.Fatalf("a consumer died holding 10 fires: %s; want 10 lost", c)
	}

	pairs := cfg
	pairs.Pairs = 2
	tl, err = s.FireTimers(ctx, e, pairs)
	if err != nil {
		t.Fatalf("FireTimers with two pollers: %v", err)
	}
	// Whether their polls overlap is up to timing (see
	// TestPollTimersOverlappingPollsFireTwice for the overlap itself).
	c := tl.counts()
	t.Logf("two pollers: %s", c)
	if c.Lost != 0 {
		t.Fatalf("two pollers: %s; want none lost", c)
	}
}

// Two polls that overlap, both past their SDIFF before either pushed, push
// every expired timer twice: the design's flaw that the bench counts as
// double fires.
func TestPollTimersOverlappingPollsFireTwice(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	rdb := e.newClient(4)
	defer rdb.Close()
	tm := newPollTimersNS(rdb)
	const n = 50
	keys, afters := make([]string, n), make([]time.Duration, n)
	for i := range keys {
		keys[i], afters[i] = fmt.Sprintf("t%d", i), time.Millisecond
	}
	if err := tm.createMany(ctx, keys, afters); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // every timer expired
	var arrived atomic.Int32
	both := make(chan struct{})
	tm.afterDiff = func() {
		if arrived.Add(1) == 2 {
			close(both)
		}
		select { // until the other poll has read the same timers
		case <-both:
		case <-time.After(10 * time.Second):
		}
	}
	pushed := make(chan int, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			n, err := tm.poll(ctx)
			pushed <- n
			errs <- err
		}()
	}
	total := 0
	for range 2 {
		total += <-pushed
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	fires, err := rdb.LRange(ctx, tm.queue(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if total != 2*n || len(fires) != 2*n {
		t.Fatalf("two overlapping polls pushed %d fires (%d in the queue), want every one of the %d timers twice", total, len(fires), n)
	}
}

func TestPollTimersTimerBurst(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	d, err := newPollTimers().(pollTimersSystem).TimerBurst(ctx, e, 500, 4, 0)
	if err != nil {
		t.Fatalf("TimerBurst: %v", err)
	}
	if d <= 0 {
		t.Fatalf("TimerBurst took %s, want a positive duration", d)
	}
}

// The stop of a pollTimers crew lets a BRPOP finish instead of cutting it off,
// so the bench drops no fire itself.
func TestPollTimersCrewStopsGracefully(t *testing.T) {
	e, ctx := testEnv(t), testContext(t)
	rdb := e.newClient(4)
	defer rdb.Close()
	tm := newPollTimersNS(rdb)
	tl := newFireTally(1)
	crew := newPollTimersCrew(ctx)
	tm.consumers(ctx, crew, 1, tl, []time.Time{time.Now()})
	waitBlocked(t, e, 1) // the consumer waits in BRPOP
	stopped := make(chan error, 1)
	go func() { stopped <- crew.stop() }()
	time.Sleep(50 * time.Millisecond)
	if err := rdb.LPush(context.Background(), tm.queue(), keyName(0)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if c := tl.counts(); c.Handled != 1 {
		t.Fatalf("the fire pushed while stopping: %s", c)
	}
}

// waitBlocked waits until Redis has n clients blocked.
func waitBlocked(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := e.admin.InfoMap(context.Background(), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		if info["Clients"]["blocked_clients"] == strconv.Itoa(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s clients blocked, want %d", info["Clients"]["blocked_clients"], n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
