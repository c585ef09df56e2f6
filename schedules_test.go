package redq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

// Tests of cron schedules (schedules.go). On miniredis Redis's clock is
// set by hand (schedClock) and the tests handle fires with step, so each
// tick is checked to the millisecond; on real Redis they run the loop
// (Run) on the wall clock. DST and leap days need a clock the test sets,
// so they run on miniredis only; the tick arithmetic they rest on is
// also tested without Redis (TestScheduleTicksAcrossDST).

func openSchedules(t testing.TB, c Connection, name string) *redisSchedules {
	t.Helper()
	s, err := c.OpenSchedules(name)
	if err != nil {
		t.Fatal(err)
	}
	return s.(*redisSchedules)
}

// fireDue handles every fire due now (miniredis: by its set clock) and
// returns how many ticks were published.
func fireDue(t testing.TB, s *redisSchedules) int {
	t.Helper()
	total := 0
	for {
		n, err := s.step(context.Background(), 0)
		if errors.Is(err, ErrorTimeout) {
			return total
		}
		if err != nil {
			t.Fatalf("step: %v", err)
		}
		total += n
	}
}

// tickDelivery is a schedule's delivery as a test sees it.
type tickDelivery struct {
	id, tick, payload, key string
}

// takeTicks takes and acks every delivery ready in q.
func takeTicks(t testing.TB, q Queue) []tickDelivery {
	t.Helper()
	var out []tickDelivery
	for {
		ds, err := q.TakeBatch(context.Background(), 1000, 0)
		if errors.Is(err, ErrorTimeout) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			out = append(out, tickDelivery{d.Header().Get(HeaderSchedule), d.Header().Get(HeaderScheduleTick), d.Payload(), d.Key()})
		}
		for i, err := range ds.AckContext(context.Background()) {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
}

func tickText(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func mustSchedule(t testing.TB, s Schedules, id, spec, payload string, opts ...ScheduleOption) {
	t.Helper()
	if err := s.Upsert(context.Background(), id, spec, []byte(payload), opts...); err != nil {
		t.Fatalf("upsert %q %q: %v", id, spec, err)
	}
}

func mustScheduleInfo(t testing.TB, s Schedules, id string) ScheduleInfo {
	t.Helper()
	in, err := s.Lookup(context.Background(), id)
	if err != nil {
		t.Fatalf("lookup %q: %v", id, err)
	}
	return in
}

// A schedule publishes one delivery per tick, at the tick by Redis's
// clock, with the tick in a header; Lookup follows it.
func TestScheduleFiresEachTickOnceAtItsTime(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "sched", namespace())
		s := openSchedules(t, c, "jobs")
		q := openQueue(t, c, "jobs")
		ctx := context.Background()
		if b.mini != nil {
			clock.skip(time.Duration(1000-clock.now.UnixMilli()%1000) * time.Millisecond) // a whole second
		}
		// every tick is published, however late a loaded host makes the loop
		mustSchedule(t, s, "ping", "@every 2s", "hello", ScheduleCatchUp(CatchUpAll(10)))
		in := mustScheduleInfo(t, s, "ping")
		if in.Spec != "@every 2s" || in.Target != "jobs" || string(in.Payload) != "hello" || in.Paused || !in.LastFire.IsZero() {
			t.Fatalf("lookup: %+v", in)
		}
		if b.mini == nil {
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(rctx) }()
			var got []tickDelivery
			eventually(t, "three ticks", func() bool {
				got = append(got, takeTicks(t, q)...)
				return len(got) >= 3
			})
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Run returned %v, want context.Canceled", err)
			}
			for i, d := range got[:3] {
				want := tickText(in.Next.Add(time.Duration(i) * 2 * time.Second))
				if d.id != "ping" || d.tick != want || d.payload != "hello" || d.key != "" {
					t.Fatalf("delivery %d: %+v, want tick %s", i, d, want)
				}
			}
			return
		}
		if !in.Next.Equal(clock.now.Add(2 * time.Second)) {
			t.Fatalf("next %v, want %v", in.Next, clock.now.Add(2*time.Second))
		}
		for i := 0; i < 3; i++ {
			tick := clock.now.Add(2 * time.Second)
			clock.skip(2*time.Second - time.Millisecond)
			if n := fireDue(t, s); n != 0 {
				t.Fatalf("published %d a millisecond before the tick", n)
			}
			clock.skip(time.Millisecond)
			if n := fireDue(t, s); n != 1 {
				t.Fatalf("tick %d: published %d, want 1", i, n)
			}
			got := takeTicks(t, q)
			if len(got) != 1 || got[0].tick != tickText(tick) || got[0].payload != "hello" {
				t.Fatalf("tick %d: %+v, want one at %s", i, got, tickText(tick))
			}
			in := mustScheduleInfo(t, s, "ping")
			if !in.LastFire.Equal(tick) || !in.Next.Equal(tick.Add(2*time.Second)) || in.Fired != int64(i+1) {
				t.Fatalf("after tick %d: %+v", i, in)
			}
		}
	})
}

// Several loops of several connections publish each tick exactly once,
// on one node and on a Redis Cluster, where the targets are in other
// slots than the set (and a fifth of the schedules check for overlap
// there).
func TestScheduleLoopsPublishEachTickOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini != nil {
			t.Skip("runs on the wall clock: real Redis only")
		}
		scheduleLoopsScenario(t, b)
	})
	onCluster(t, scheduleLoopsScenario)
}

func scheduleLoopsScenario(t *testing.T, b backend) {
	ns := namespace()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var sets []*redisSchedules
	for i := 0; i < 3; i++ {
		c := openT(t, b, fmt.Sprintf("loop%d", i), ns)
		s := openSchedules(t, c, "many")
		sets = append(sets, s)
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
	}
	const n, targets = 50, 5
	for i := 0; i < n; i++ {
		opts := []ScheduleOption{ScheduleTarget(fmt.Sprintf("many%d", i%targets)), ScheduleCatchUp(CatchUpAll(10))}
		if i%5 == 0 {
			opts = append(opts, ScheduleOverlap(OverlapSkip))
		}
		mustSchedule(t, sets[0], fmt.Sprintf("s%d", i), "@every 1s", "x", opts...)
	}
	c := openT(t, b, "reader", ns)
	var qs []Queue
	for i := 0; i < targets; i++ {
		qs = append(qs, openQueue(t, c, fmt.Sprintf("many%d", i)))
	}
	take := func() (out []tickDelivery) {
		for _, q := range qs {
			out = append(out, takeTicks(t, q)...)
		}
		return out
	}
	var got []tickDelivery
	deadline := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(deadline) {
		got = append(got, take()...)
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < n; i++ {
		if err := sets[0].Pause(context.Background(), fmt.Sprintf("s%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	got = append(got, take()...)
	count := map[string]int{}
	perSchedule := map[string][]string{}
	for _, d := range got {
		count[d.id+" "+d.tick]++
		perSchedule[d.id] = append(perSchedule[d.id], d.tick)
	}
	for k, v := range count {
		if v != 1 {
			t.Fatalf("tick %s published %d times", k, v)
		}
	}
	for id, ticks := range perSchedule {
		// every tick between the first and the last is delivered, or
		// counted as skipped (an OverlapSkip schedule whose fire came late
		// on a loaded host publishes only the latest tick)
		sort.Strings(ticks)
		var missing int64
		for i := 1; i < len(ticks); i++ {
			a, _ := time.Parse(time.RFC3339, ticks[i-1])
			z, _ := time.Parse(time.RFC3339, ticks[i])
			missing += int64(z.Sub(a)/time.Second) - 1
		}
		in := mustScheduleInfo(t, sets[0], id)
		if int64(len(ticks)) != in.Fired || in.Skipped != missing || len(ticks) < 2 {
			t.Fatalf("%s: %d ticks delivered in 3.5s, %d missing between them; the schedule counts %d published, %d skipped",
				id, len(ticks), missing, in.Fired, in.Skipped)
		}
	}
	if len(perSchedule) != n {
		t.Fatalf("%d schedules published, want %d", len(perSchedule), n)
	}
}

// collectTicks follows schedule id through n ticks on miniredis's clock:
// nothing is published a millisecond before each tick, and one delivery
// at it. It returns the ticks in UTC.
func collectTicks(t *testing.T, clock *schedClock, s *redisSchedules, q Queue, id string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		next := mustScheduleInfo(t, s, id).Next
		clock.now = next.Add(-time.Millisecond)
		clock.b.mini.SetTime(clock.now)
		if got := fireDue(t, s); got != 0 {
			t.Fatalf("published %d a millisecond before %v", got, next)
		}
		clock.skip(time.Millisecond)
		if got := fireDue(t, s); got != 1 {
			t.Fatalf("published %d at %v, want 1", got, next)
		}
		ds := takeTicks(t, q)
		if len(ds) != 1 || ds[0].tick != tickText(next) {
			t.Fatalf("at %v: %+v", next, ds)
		}
		out = append(out, ds[0].tick)
	}
	return out
}

// Ticks across the DST changes of Europe/Berlin and America/New_York and
// a leap day, on a clock the test sets: a wall-clock time skipped when
// the clock goes forward has no tick that day (robfig/cron's rule), a
// time repeated when it goes back ticks once, and a spec of every hour
// ticks every real hour through both.
func TestScheduleDSTAndLeapDay(t *testing.T) {
	cases := []struct {
		name, spec, zone, from string
		want                   []string
	}{
		{"Berlin spring forward, daily at 02:30", "30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T01:30:00.000Z", "2026-03-30T00:30:00.000Z", "2026-03-31T00:30:00.000Z"}},
		{"Berlin fall back, daily at 02:30", "30 2 * * *", "Europe/Berlin", "2026-10-23T12:00:00Z",
			[]string{"2026-10-24T00:30:00.000Z", "2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"}},
		{"Berlin fall back, hourly", "0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00.000Z", "2026-10-25T01:00:00.000Z", "2026-10-25T02:00:00.000Z"}},
		{"Berlin spring forward, hourly", "0 0 * * * *", "Europe/Berlin", "2026-03-28T23:30:00Z",
			[]string{"2026-03-29T00:00:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-29T02:00:00.000Z"}},
		{"New York spring forward, daily at 02:30 (zone in the spec)", "CRON_TZ=America/New_York 30 2 * * *", "", "2026-03-06T12:00:00Z",
			[]string{"2026-03-07T07:30:00.000Z", "2026-03-09T06:30:00.000Z"}},
		{"New York fall back, daily at 01:30", "0 30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z",
			[]string{"2026-10-31T05:30:00.000Z", "2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"}},
		{"New York fall back, every 30 minutes", "*/30 * * * *", "America/New_York", "2026-11-01T04:50:00Z",
			[]string{"2026-11-01T05:00:00.000Z", "2026-11-01T05:30:00.000Z", "2026-11-01T06:00:00.000Z", "2026-11-01T06:30:00.000Z"}},
		{"leap day", "0 0 29 2 *", "", "2026-01-01T00:00:00Z",
			[]string{"2028-02-29T00:00:00.000Z", "2032-02-29T00:00:00.000Z"}},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini == nil {
			t.Skip("needs a clock the test sets: miniredis only")
		}
		clock := newSchedClock(b)
		c := openT(t, b, "sched", namespace())
		s := openSchedules(t, c, "dst")
		q := openQueue(t, c, "dst")
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				from, err := time.Parse(time.RFC3339, tc.from)
				if err != nil {
					t.Fatal(err)
				}
				clock.now = from
				b.mini.SetTime(from)
				var opts []ScheduleOption
				if tc.zone != "" {
					opts = append(opts, ScheduleTimeZone(tc.zone))
				}
				id := fmt.Sprintf("case%d", i)
				mustSchedule(t, s, id, tc.spec, "x", opts...)
				got := collectTicks(t, clock, s, q, id, len(tc.want))
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("ticks %v, want %v", got, tc.want)
				}
				if _, err := s.Remove(context.Background(), id); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// Bad input is an *ArgumentError naming the field, and changes nothing in
// Redis: not the schedule's definition, not its timer.
func TestScheduleBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "sched", namespace())
		s := openSchedules(t, c, "bad")
		ctx := context.Background()
		mustSchedule(t, s, "ok", "*/5 * * * *", "x", ScheduleTarget("elsewhere"))
		defs := func() map[string]string {
			m, err := b.client.HGetAll(ctx, s.defs).Result()
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		before, beforeDefs := snapshot(t, b, c), defs()
		cases := []struct {
			name, id, spec, field string
			opts                  []ScheduleOption
		}{
			{"empty id", "", "* * * * *", "schedule id", nil},
			{"long id", string(make([]byte, MaxKeyLength+1)), "* * * * *", "schedule id", nil},
			{"empty spec", "ok", "", "schedule spec", nil},
			{"spec of 3 fields", "ok", "* * *", "schedule spec", nil},
			{"minute 61", "ok", "61 * * * *", "schedule spec", nil},
			{"unknown descriptor", "ok", "@fortnightly", "schedule spec", nil},
			{"every 0", "ok", "@every 0s", "schedule spec", nil},
			{"every negative", "ok", "@every -5s", "schedule spec", nil},
			{"every 500ms", "ok", "@every 500ms", "schedule spec", nil},
			{"every 1.5s", "ok", "@every 1500ms", "schedule spec", nil},
			{"every garbage", "ok", "@every soon", "schedule spec", nil},
			{"bad zone in spec", "ok", "CRON_TZ=Mars/Olympus 0 * * * *", "schedule time zone", nil},
			{"bad zone option", "ok", "0 * * * *", "schedule time zone", []ScheduleOption{ScheduleTimeZone("Mars/Olympus")}},
			{"local zone", "ok", "0 * * * *", "schedule time zone", []ScheduleOption{ScheduleTimeZone("Local")}},
			{"two zones", "ok", "TZ=UTC 0 * * * *", "schedule time zone", []ScheduleOption{ScheduleTimeZone("Europe/Berlin")}},
			{"never", "ok", "0 0 30 2 *", "schedule spec", nil},
			{"bad target", "ok", "0 * * * *", "schedule target", []ScheduleOption{ScheduleTarget("a b")}},
			{"negative jitter", "ok", "0 * * * *", "schedule jitter", []ScheduleOption{ScheduleJitter(-time.Second)}},
			{"catch up 0", "ok", "0 * * * *", "schedule catch-up", []ScheduleOption{ScheduleCatchUp(CatchUpAll(0))}},
			{"catch up too many", "ok", "0 * * * *", "schedule catch-up", []ScheduleOption{ScheduleCatchUp(CatchUpAll(MaxCatchUp + 1))}},
			{"no grace", "ok", "0 * * * *", "schedule catch-up", []ScheduleOption{ScheduleCatchUp(CatchUpNone(0))}},
			{"zero policy", "ok", "0 * * * *", "schedule catch-up", []ScheduleOption{ScheduleCatchUp(CatchUp{})}},
			{"bad overlap", "ok", "0 * * * *", "schedule overlap", []ScheduleOption{ScheduleOverlap(Overlap(7))}},
			{"nil option", "ok", "0 * * * *", "schedule option", []ScheduleOption{nil}},
		}
		for _, tc := range cases {
			err := s.Upsert(ctx, tc.id, tc.spec, []byte("new"), tc.opts...)
			wantArgError(t, tc.name, err)
			var ae *ArgumentError
			errors.As(err, &ae)
			if ae.Arg != tc.field {
				t.Fatalf("%s: the error names %q, want %q (%v)", tc.name, ae.Arg, tc.field, err)
			}
		}
		for _, id := range []string{"", string(make([]byte, MaxKeyLength+1))} {
			_, err := s.Remove(ctx, id)
			wantArgError(t, "remove", err)
			wantArgError(t, "pause", s.Pause(ctx, id))
			wantArgError(t, "resume", s.Resume(ctx, id))
			_, err = s.Lookup(ctx, id)
			wantArgError(t, "lookup", err)
		}
		_, _, err := s.List(ctx, 0, -1)
		wantArgError(t, "list", err)
		if _, err := c.OpenSchedules("a:b"); err == nil {
			t.Fatal("OpenSchedules took a name with a colon")
		} else {
			wantArgError(t, "open", err)
		}
		sameSnapshot(t, "bad input", before, snapshot(t, b, c))
		if after := defs(); fmt.Sprint(after) != fmt.Sprint(beforeDefs) {
			t.Fatalf("bad input changed the definitions: %v -> %v", beforeDefs, after)
		}
		if err := s.Pause(ctx, "missing"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("pause of a missing schedule: %v", err)
		}
		if err := s.Resume(ctx, "missing"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("resume of a missing schedule: %v", err)
		}
		if _, err := s.Lookup(ctx, "missing"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("lookup of a missing schedule: %v", err)
		}
	})
}

// The tick arithmetic without Redis: the parser's Next in the schedule's
// zone, with a repeated wall-clock time kept once.
func TestScheduleTicksAcrossDST(t *testing.T) {
	ts, err := parseSpec("30 2 * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC)
	var got []string
	for i, tk := 0, from; i < 3; i++ {
		tk = ts.next(tk)
		got = append(got, tickText(tk))
	}
	want := []string{"2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z", "2026-10-27T01:30:00.000Z"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ticks %v, want %v", got, want)
	}
	// an @every spec's due ticks are counted, not walked
	ev, err := parseSpec("@every 10s", "")
	if err != nil {
		t.Fatal(err)
	}
	d := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	ticks, total, next := ev.due(d, d.Add(24*time.Hour+5*time.Second), 2)
	if total != 8641 || len(ticks) != 2 || !ticks[1].Equal(d.Add(24*time.Hour)) || !next.Equal(d.Add(24*time.Hour+10*time.Second)) {
		t.Fatalf("due: %v %d %v", ticks, total, next)
	}
}
