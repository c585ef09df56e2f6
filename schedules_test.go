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
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := newSchedClock(b)
		c := openT(t, b, "sched", namespace())
		s := openSchedules(t, c, "jobs")
		q := openQueue(t, c, "jobs")
		ctx := context.Background()
		if b.mini != nil {
			clock.skip(time.Duration(1000-clock.now.UnixMilli()%1000) * time.Millisecond) // a whole second
		}
		mustSchedule(t, s, "ping", "@every 2s", "hello")
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

// Several loops of several connections publish each tick exactly once.
func TestScheduleLoopsPublishEachTickOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.mini != nil {
			t.Skip("runs on the wall clock: real Redis only")
		}
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
		const n = 50
		for i := 0; i < n; i++ {
			mustSchedule(t, sets[0], fmt.Sprintf("s%d", i), "@every 1s", "x")
		}
		c := openT(t, b, "reader", ns)
		q := openQueue(t, c, "many")
		count := map[string]int{}
		var got []tickDelivery
		deadline := time.Now().Add(3500 * time.Millisecond)
		for time.Now().Before(deadline) {
			got = append(got, takeTicks(t, q)...)
			time.Sleep(20 * time.Millisecond)
		}
		for i := 0; i < n; i++ {
			if _, err := sets[0].Remove(context.Background(), fmt.Sprintf("s%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		wg.Wait()
		got = append(got, takeTicks(t, q)...)
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
			sort.Strings(ticks)
			for i := 1; i < len(ticks); i++ {
				a, _ := time.Parse(time.RFC3339, ticks[i-1])
				z, _ := time.Parse(time.RFC3339, ticks[i])
				if z.Sub(a) != time.Second {
					t.Fatalf("%s: ticks %s then %s: one lost", id, ticks[i-1], ticks[i])
				}
			}
			if len(ticks) < 2 {
				t.Fatalf("%s: %d ticks in 3.5s", id, len(ticks))
			}
		}
		if len(perSchedule) != n {
			t.Fatalf("%d schedules published, want %d", len(perSchedule), n)
		}
	})
}
