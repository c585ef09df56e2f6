package redq

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Tests of the schedules' policies and verbs: catch-up, overlap, jitter,
// Pause, Resume, Remove, and a changed spec at the tick it changes on. On
// miniredis the clock is set by hand and times are checked to the
// millisecond; on real Redis the test waits on the wall clock and checks
// what the schedule's counters say.

// alignSecond moves miniredis's clock to a whole second, so that @every
// ticks fall at known offsets.
func alignSecond(clock *schedClock) {
	if clock.b.mini != nil {
		clock.skip(time.Duration(1000-clock.now.UnixMilli()%1000) * time.Millisecond)
	}
}

func TestScheduleCatchUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "sched", namespace())
		s := openSchedules(t, c, "catchup")
		alignSecond(clock)
		policies := map[string]CatchUp{
			"latest": CatchUpLatest(), "all2": CatchUpAll(2), "all": CatchUpAll(100),
			"none": CatchUpNone(time.Millisecond), "none-grace": CatchUpNone(time.Hour),
		}
		queues := map[string]Queue{}
		first := map[string]time.Time{}
		for id, p := range policies {
			mustSchedule(t, s, id, "@every 1s", id, ScheduleCatchUp(p), ScheduleTarget("q-"+id))
			queues[id] = openQueue(t, c, "q-"+id)
			first[id] = mustScheduleInfo(t, s, id).Next
		}
		// the loops were down: 3 ticks (4 on real Redis, by chance) come due
		clock.pass(3500 * time.Millisecond)
		fireDue(t, s)
		for id := range policies {
			in := mustScheduleInfo(t, s, id)
			last := in.Next.Add(-time.Second)
			total := int64(last.Sub(first[id])/time.Second) + 1
			if b.mini != nil && total != 3 {
				t.Fatalf("%s: %d ticks due, want 3", id, total)
			}
			var want []string
			switch id {
			case "latest", "none-grace":
				want = []string{tickText(last)}
			case "all2":
				want = []string{tickText(last.Add(-time.Second)), tickText(last)}
			case "all":
				for tk := first[id]; !tk.After(last); tk = tk.Add(time.Second) {
					want = append(want, tickText(tk))
				}
			case "none":
				// late by more than 1ms: nothing
			}
			var got []string
			for _, d := range takeTicks(t, queues[id]) {
				got = append(got, d.tick)
			}
			if len(got) != len(want) || (len(want) > 0 && got[len(got)-1] != want[len(want)-1]) || (len(want) > 0 && got[0] != want[0]) {
				t.Fatalf("%s: published %v, want %v", id, got, want)
			}
			if in.Fired != int64(len(want)) || in.Skipped != total-int64(len(want)) {
				t.Fatalf("%s: fired %d skipped %d, want %d and %d", id, in.Fired, in.Skipped, len(want), total-int64(len(want)))
			}
			if len(want) > 0 && !in.LastFire.Equal(last) {
				t.Fatalf("%s: last fire %v, want %v", id, in.LastFire, last)
			}
		}
		if b.mini != nil {
			// on time, CatchUpNone publishes
			clock.skip(500 * time.Millisecond)
			fireDue(t, s)
			if got := takeTicks(t, queues["none"]); len(got) != 1 {
				t.Fatalf("none, on time: published %v, want one tick", got)
			}
		}
	})
}

func TestScheduleOverlap(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "sched", namespace())
		s := openSchedules(t, c, "overlap")
		ctx := context.Background()
		alignSecond(clock)
		mustSchedule(t, s, "sk", "@every 1s", "skip", ScheduleOverlap(OverlapSkip), ScheduleTarget("skipq"))
		mustSchedule(t, s, "al", "@every 1s", "allow", ScheduleTarget("allowq"))
		skipq, allowq := openQueue(t, c, "skipq"), openQueue(t, c, "allowq")
		ready := func(q *redisQueue) int64 {
			r, _, _ := counts(t, c, q.name)
			return r
		}
		tick := func() {
			t.Helper()
			clock.pass(1100 * time.Millisecond)
			fireDue(t, s)
		}
		tick()
		if ready(skipq) != 1 || ready(allowq) != 1 {
			t.Fatalf("first tick: %d and %d ready, want 1 and 1", ready(skipq), ready(allowq))
		}
		tick() // the first deliveries are still pending
		// (on a loaded host another tick may come due while fireDue runs)
		if ready(skipq) != 1 || ready(allowq) < 2 || (b.mini != nil && ready(allowq) != 2) {
			t.Fatalf("second tick: %d and %d ready, want 1 (skipped) and 2", ready(skipq), ready(allowq))
		}
		if in := mustScheduleInfo(t, s, "sk"); in.Skipped < 1 || in.Fired != 1 {
			t.Fatalf("skip: fired %d skipped %d", in.Fired, in.Skipped)
		}
		d, err := skipq.Take(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.Key() != "sk" {
			t.Fatalf("the skip schedule's delivery has key %q, want its id", d.Key())
		}
		tick() // taken, not settled: still skipped
		if ready(skipq) != 0 {
			t.Fatalf("a tick was published while the previous delivery runs")
		}
		if err := d.(*redisDelivery).AckContext(ctx); err != nil {
			t.Fatal(err)
		}
		tick() // settled: published again
		if ready(skipq) != 1 {
			t.Fatalf("after the ack: %d ready, want 1", ready(skipq))
		}
		if in := mustScheduleInfo(t, s, "sk"); in.Fired != 2 {
			t.Fatalf("skip: fired %d, want 2", in.Fired)
		}
	})
}

func TestSchedulePauseResumeRemove(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "sched", namespace())
		s := openSchedules(t, c, "verbs")
		q := openQueue(t, c, "verbs")
		ctx := context.Background()
		alignSecond(clock)
		mustSchedule(t, s, "p", "@every 1s", "p")
		mustSchedule(t, s, "r", "@every 1s", "r")
		if err := s.Pause(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		if err := s.Pause(ctx, "p"); err != nil {
			t.Fatalf("second pause: %v", err)
		}
		mustSchedule(t, s, "p", "@every 1s", "p") // an upsert keeps it paused
		if ok, err := s.Remove(ctx, "r"); !ok || err != nil {
			t.Fatalf("remove: %v %v", ok, err)
		}
		if ok, err := s.Remove(ctx, "r"); ok || err != nil {
			t.Fatalf("second remove: %v %v", ok, err)
		}
		clock.pass(2500 * time.Millisecond)
		if n := fireDue(t, s); n != 0 {
			t.Fatalf("published %d while paused or removed", n)
		}
		if got := takeTicks(t, q); len(got) != 0 {
			t.Fatalf("delivered %v", got)
		}
		in := mustScheduleInfo(t, s, "p")
		if !in.Paused || !in.Next.IsZero() {
			t.Fatalf("paused: %+v", in)
		}
		if _, err := s.Lookup(ctx, "r"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("lookup of a removed schedule: %v", err)
		}
		for _, id := range []string{"p", "r"} {
			if _, err := s.q.Lookup(ctx, id); !errors.Is(err, ErrorNotFound) {
				t.Fatalf("%s: its timer is left: %v", id, err)
			}
		}
		page, next, err := s.List(ctx, 0, 0)
		if err != nil || next != 0 || len(page) != 1 || page[0].ID != "p" {
			t.Fatalf("list: %+v %d %v", page, next, err)
		}
		if err := s.Resume(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		in = mustScheduleInfo(t, s, "p")
		if in.Paused || in.Next.IsZero() {
			t.Fatalf("resumed: %+v", in)
		}
		if b.mini != nil && !in.Next.Equal(clock.now.Add(500*time.Millisecond)) {
			t.Fatalf("resumed: next %v, want the first tick after now %v", in.Next, clock.now.Add(500*time.Millisecond))
		}
		clock.pass(1100 * time.Millisecond)
		fireDue(t, s)
		got := takeTicks(t, q)
		// on real Redis the first tick after now may have come within
		// 100ms, and the next one is then due too (CatchUpLatest)
		if len(got) == 0 || (b.mini != nil && len(got) != 1) ||
			(got[0].tick != tickText(in.Next) && (b.mini != nil || got[0].tick != tickText(in.Next.Add(time.Second)))) {
			t.Fatalf("after resume: %+v, want one tick at %v (the ticks missed while paused are not published)", got, in.Next)
		}
		if err := s.Resume(ctx, "p"); err != nil {
			t.Fatalf("resume of a running schedule: %v", err)
		}
	})
}

// Remove or Pause while a tick's fire is taken, before or after the loop
// read the schedule: the tick publishes nothing and does not bring the
// schedule's timer back.
func TestScheduleRemoveWhileTickIsHandled(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, verb := range []string{"remove", "pause"} {
			for _, when := range []string{"before the read", "after the read"} {
				t.Run(verb+" "+when, func(t *testing.T) {
					clock := newSchedClock(b)
					c := openT(t, b, "sched", namespace())
					s := openSchedules(t, c, "race")
					q := openQueue(t, c, "race")
					ctx := context.Background()
					mustSchedule(t, s, "x", "@every 1s", "x")
					clock.pass(1100 * time.Millisecond)
					ds, err := s.q.TakeBatch(ctx, 10, 0)
					if err != nil {
						t.Fatal(err)
					}
					change := func() {
						var err error
						if verb == "remove" {
							_, err = s.Remove(ctx, "x")
						} else {
							err = s.Pause(ctx, "x")
						}
						if err != nil {
							t.Error(err)
						}
					}
					if when == "before the read" {
						change()
					} else {
						s.afterRead = change
					}
					if n, err := s.handle(ctx, ds); n != 0 || err != nil {
						t.Fatalf("handle: published %d (%v)", n, err)
					}
					s.afterRead = nil
					for _, err := range ds.AckContext(ctx) {
						t.Fatal(err)
					}
					if _, err := s.q.Lookup(ctx, "x"); !errors.Is(err, ErrorNotFound) {
						t.Fatalf("the timer came back: %v", err)
					}
					clock.pass(1100 * time.Millisecond)
					if n := fireDue(t, s); n != 0 {
						t.Fatalf("published %d after %s", n, verb)
					}
					if got := takeTicks(t, q); len(got) != 0 {
						t.Fatalf("delivered %v", got)
					}
					if verb == "pause" {
						if in := mustScheduleInfo(t, s, "x"); !in.Paused || in.Fired != 0 {
							t.Fatalf("after the pause: %+v", in)
						}
					}
				})
			}
		}
	})
}

// A changed spec takes effect from the next tick: a tick already due is
// published once, with the new definition; a tick not yet due is
// replaced by the new spec's; no tick twice, none lost.
func TestScheduleSpecChangeAtTheTick(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "sched", namespace())
		s := openSchedules(t, c, "change")
		q := openQueue(t, c, "change")
		ctx := context.Background()
		alignSecond(clock)

		// due, not yet handled
		mustSchedule(t, s, "due", "@every 1s", "v1")
		n1 := mustScheduleInfo(t, s, "due").Next
		clock.pass(1100 * time.Millisecond)
		mustSchedule(t, s, "due", "@every 1h", "v2")
		if in := mustScheduleInfo(t, s, "due"); !in.Next.Equal(n1) || in.Version != 2 {
			t.Fatalf("the due tick moved: %+v, want next %v", in, n1)
		}
		fireDue(t, s)
		got := takeTicks(t, q)
		if len(got) != 1 || got[0].tick != tickText(n1) || got[0].payload != "v2" {
			t.Fatalf("due tick: %+v, want one at %v with v2", got, n1)
		}
		if in := mustScheduleInfo(t, s, "due"); !in.Next.Equal(n1.Add(time.Hour)) {
			t.Fatalf("next %v, want the new spec's %v", in.Next, n1.Add(time.Hour))
		}

		// taken by a loop as the spec changes
		mustSchedule(t, s, "taken", "@every 1s", "v1")
		n1 = mustScheduleInfo(t, s, "taken").Next
		clock.pass(1100 * time.Millisecond)
		ds, err := s.q.TakeBatch(ctx, 10, 0)
		if err != nil || len(ds) != 1 {
			t.Fatalf("take: %v %v", ds, err)
		}
		// the loop read v1; the change comes before it handles the tick
		s.afterRead = func() { mustSchedule(t, s, "taken", "@every 1h", "v2") }
		n, err := s.handle(ctx, ds)
		s.afterRead = nil
		if n != 1 || err != nil {
			t.Fatalf("handle: %d %v", n, err)
		}
		for _, err := range ds.AckContext(ctx) {
			t.Fatal(err)
		}
		got = takeTicks(t, q)
		if len(got) != 1 || got[0].tick != tickText(n1) || got[0].payload != "v2" {
			t.Fatalf("taken tick: %+v, want one at %v with v2", got, n1)
		}
		clock.pass(1100 * time.Millisecond)
		if n := fireDue(t, s); n != 0 {
			t.Fatalf("published %d more", n)
		}

		// not yet due: the new spec's tick replaces it
		mustSchedule(t, s, "early", "@every 1h", "v1")
		old := mustScheduleInfo(t, s, "early").Next
		mustSchedule(t, s, "early", "@every 1s", "v2")
		in := mustScheduleInfo(t, s, "early")
		if !in.Next.Before(old) {
			t.Fatalf("next %v, want the new spec's, before %v", in.Next, old)
		}
		clock.pass(1100 * time.Millisecond)
		fireDue(t, s)
		got = takeTicks(t, q)
		// on a loaded host the next tick may come due while fireDue runs
		if len(got) == 0 || got[0].payload != "v2" || (b.mini != nil && len(got) != 1) {
			t.Fatalf("early: %+v, want one tick of v2", got)
		}
		// on real Redis a second tick of the new spec may be due by now
		// (CatchUpLatest publishes the latest)
		if tk, _ := time.Parse(time.RFC3339, got[0].tick); tk.Before(in.Next) || !tk.Before(old) ||
			(b.mini != nil && !tk.Equal(in.Next)) {
			t.Fatalf("early: tick %v, want the new spec's %v (the old spec's was %v)", tk, in.Next, old)
		}
	})
}

func TestScheduleJitter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			t.Skip("checks the publish time to the millisecond: miniredis only")
		}
		clock := newSchedClock(b)
		c := openT(t, b, "sched", namespace())
		s := openSchedules(t, c, "jitter")
		q := openQueue(t, c, "jitter")
		mustSchedule(t, s, "j", "0 * * * *", "x", ScheduleJitter(10*time.Minute))
		tick := mustScheduleInfo(t, s, "j").Next
		j := time.Duration(jitterOf("j", tick.UnixMilli(), (10*time.Minute).Milliseconds())) * time.Millisecond
		if j == 0 {
			t.Fatal("a jitter of 0 out of 10 minutes: pick another id")
		}
		clock.now = tick.Add(j - time.Millisecond)
		b.mini.SetTime(clock.now)
		if n := fireDue(t, s); n != 0 {
			t.Fatalf("published %d before the tick's jitter (%v) ran out", n, j)
		}
		clock.skip(time.Millisecond)
		fireDue(t, s)
		got := takeTicks(t, q)
		if len(got) != 1 || got[0].tick != tickText(tick) {
			t.Fatalf("published %+v, want the tick %v at %v", got, tick, tick.Add(j))
		}
	})
}

// A loop that dies between a tick's script and the move to the target:
// the staged delivery reaches the target once, by the next Clean or by a
// loop that starts; a move sent again lands nothing.
func TestScheduleStagedTickIsFinished(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, by := range []string{"cleaner", "loop"} {
			t.Run(by, func(t *testing.T) {
				clock := newSchedClock(b)
				ns := namespace()
				dead := openT(t, b, "dead", ns)
				s := openSchedules(t, dead, "staged")
				ctx := context.Background()
				mustSchedule(t, s, "x", "@every 1s", "x")
				// to just after the first tick: a later second would
				// make the fire publish that one (the latest due)
				info, err := s.Lookup(ctx, "x")
				if err != nil {
					t.Fatal(err)
				}
				clock.pass(clock.until(info.Next) + 100*time.Millisecond)
				ds, err := s.q.TakeBatch(ctx, 10, 0)
				if err != nil {
					t.Fatal(err)
				}
				vals, err := b.client.HMGet(ctx, s.defs, "x").Result()
				if err != nil {
					t.Fatal(err)
				}
				r, _ := parseScheduleRec(vals[0].(string))
				now, err := s.redisNow(ctx)
				if err != nil {
					t.Fatal(err)
				}
				out, fields, n, err := s.fire(ctx, "x", r, now)
				if out != 1 || n != 1 || err != nil {
					t.Fatalf("fire: %d %d %v", out, n, err)
				}
				_ = ds // the loop dies holding its fire, its tick staged

				other := openT(t, b, "other", ns)
				q := openQueue(t, other, "staged")
				if got := takeTicks(t, q); len(got) != 0 {
					t.Fatalf("delivered before the move: %v", got)
				}
				if by == "cleaner" {
					if _, err := NewCleaner(other).Clean(); err != nil {
						t.Fatal(err)
					}
				} else {
					s2 := openSchedules(t, other, "staged")
					rctx, cancel := context.WithCancel(ctx)
					done := make(chan error, 1)
					go func() { done <- s2.Run(rctx) }()
					eventually(t, "the outbox to empty", func() bool { return b.client.HLen(ctx, s.q.keys.outbox).Val() == 0 })
					cancel()
					if err := <-done; !errors.Is(err, context.Canceled) {
						t.Fatalf("Run returned %v", err)
					}
				}
				got := takeTicks(t, q)
				if len(got) != 1 || got[0].tick != tickText(r.info("x").Next) {
					t.Fatalf("after the %s: %+v, want the staged tick once", by, got)
				}
				if applied, err := s.q.finishMoves(ctx, fields); applied != 0 || err != nil {
					t.Fatalf("the move sent again applied %d (%v)", applied, err)
				}
				if got := takeTicks(t, q); len(got) != 0 {
					t.Fatalf("the move sent again delivered %v", got)
				}
			})
		}
	})
}
