package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// The keyed and timer workloads exist at the sizes -n gives (1M distinct
// and 1k hot keys, 100k timers at the default), keyed ones for redq alone
// and timer ones for redq and the baseline, which takes part in nothing
// else.
func TestKeyedWorkloads(t *testing.T) {
	byName := map[string]workload{}
	for _, w := range workloads(sizes{100_000}, 200, 5000) {
		byName[w.name] = w
	}
	redqOnly := []string{"keyed/1M-keys-1-goroutine", "keyed/1M-keys-8-goroutines", "keyed/1k-hot-keys-1-goroutine",
		"keyed/1k-hot-keys-8-goroutines", "keyed/memory-pending"}
	withBaseline := []string{"timers/lateness-100k", "timers/burst-100k", "timers/burst-100k-batch", "timers/consumer-dies", "timers/two-pollers",
		"timers/steady-100k-10s-next", "timers/steady-100k-10s-batch"}
	for _, name := range slices.Concat(redqOnly, withBaseline) {
		w, found := byName[name]
		if !found {
			t.Errorf("no workload %s at n=100k", name)
			continue
		}
		for _, s := range allSystems() {
			want := s.Name() == "redq" || (s.Name() == "poll-timers" && slices.Contains(withBaseline, name))
			if got := w.takesPart(s.Name()); got != want {
				t.Errorf("%s: takesPart(%q) = %v, want %v", name, s.Name(), got, want)
			}
		}
		if _, err := w.run(context.Background(), nil, newList()); !errors.Is(err, errNotMeasured) {
			t.Errorf("%s run for the list baseline: %v, want errNotMeasured", name, err)
		}
	}
	for _, w := range byName {
		if !strings.HasPrefix(w.name, "timers/") && w.takesPart("poll-timers") {
			t.Errorf("the timer baseline takes part in %s", w.name)
		}
	}
	if m := byName["keyed/1M-keys-8-goroutines"].metrics; len(m) != 4 || m[1].name != "cost near 1k pending" || m[2].name != "cost near 1M pending" {
		t.Errorf("1M-key metrics: %+v", m)
	}
	if about := byName["timers/lateness-100k"].about; !strings.HasPrefix(about, "100000 timers due over 10s, 8 consumers") {
		t.Errorf("lateness: %q", about)
	}
	if about := byName["timers/consumer-dies"].about; !strings.Contains(about, "takes 1000 fires") {
		t.Errorf("consumer-dies: %q", about)
	}
	if m := byName["timers/steady-100k-10s-batch"].metrics; len(m) != 5 || m[0].unit != "fires/s" || m[2].name != "p99 lateness" {
		t.Errorf("steady metrics: %+v", m)
	}
	if about := byName["timers/steady-100k-10s-next"].about; !strings.HasPrefix(about, "100000 timers due evenly over 10s (10000/s), 2 connections × 2 goroutines") {
		t.Errorf("steady: %q", about)
	}
	// The CI size keeps every run small.
	for _, w := range keyedWorkloads(sizes{2000}) {
		if strings.Contains(w.name, "1M") || strings.Contains(w.name, "100k") {
			t.Errorf("n=2000 makes %s", w.name)
		}
	}
}

// The keyspace-poll timers baseline measures the timer workloads only.
func TestPollTimersMeasuresNoQueueWorkload(t *testing.T) {
	s := newPollTimers()
	ctx := context.Background()
	if _, err := s.Publish(ctx, nil, 1, 1, 1); !errors.Is(err, errNotMeasured) {
		t.Errorf("Publish: %v", err)
	}
	if _, err := s.Memory(ctx, nil, 1); !errors.Is(err, errNotMeasured) {
		t.Errorf("Memory: %v", err)
	}
	if _, err := keyedOf(s); !errors.Is(err, errNotMeasured) {
		t.Errorf("keyedOf: %v", err)
	}
	if _, err := timersOf(s); err != nil {
		t.Errorf("timersOf: %v", err)
	}
}

// Every upsert of a plan is made once, each goroutine owns its keys (so
// the upserts of one key never race) and makes them in order, and the
// plan knows the last upsert and the count of every key.
func TestUpsertPlan(t *testing.T) {
	for _, cfg := range []upsertConfig{
		{Keys: 1000, Upserts: 1000, Goroutines: 8},
		{Keys: 20, Upserts: 250, Goroutines: 8},
		{Keys: 7, Upserts: 100, Goroutines: 3},
		{Keys: 50, Upserts: 30, Goroutines: 8},
		{Keys: 10, Upserts: 95, Goroutines: 1},
	} {
		seen := make([]int, cfg.Upserts)
		lastOf := map[int]int{}
		for g := range cfg.Goroutines {
			prev := -1
			for _, i := range upsertSeqs(cfg, g) {
				if i <= prev {
					t.Fatalf("%+v: goroutine %d makes %d after %d", cfg, g, i, prev)
				}
				prev = i
				if k := i % cfg.Keys; k%cfg.Goroutines != g {
					t.Fatalf("%+v: goroutine %d upserts key %d", cfg, g, k)
				}
				seen[i]++
				lastOf[i%cfg.Keys] = i
			}
		}
		for i, n := range seen {
			if n != 1 {
				t.Fatalf("%+v: upsert %d made %d times", cfg, i, n)
			}
		}
		p := planUpserts(cfg)
		for k := range cfg.Keys {
			want, ok := lastOf[k]
			if !ok {
				want = -1
			}
			if p.last[k] != want {
				t.Errorf("%+v: key %d: last %d, want %d", cfg, k, p.last[k], want)
			}
		}
		if want := min(cfg.Keys, cfg.Upserts); p.pending() != want {
			t.Errorf("%+v: %d pending, want %d", cfg, p.pending(), want)
		}
		if upsertKey(cfg, cfg.Keys+3) != "key:3" || keyIndex("key:3") != 3 {
			t.Errorf("key of upsert %d: %s", cfg.Keys+3, upsertKey(cfg, cfg.Keys+3))
		}
	}
	for _, bad := range []string{"", "key:", "key:-1", "key:01", "kee:1", "key:1x"} {
		if keyIndex(bad) != -1 {
			t.Errorf("keyIndex(%q) = %d, want -1", bad, keyIndex(bad))
		}
	}
}

// The cost windows sit at 1k pending and at the end, ten parts each, and
// the cost of a window is the median of its parts: one slow part (a
// pause of the machine) does not move it.
func TestUpsertWindows(t *testing.T) {
	w := keyedWindows(1_000_000)
	if w != [2]upsertWindow{{1000, 11_000}, {990_000, 1_000_000}} {
		t.Fatalf("windows for 1M: %v", w)
	}
	w = keyedWindows(20_000)
	if w[0].from != 800 || w[1].to != 20_000 || w[0].to > w[1].from {
		t.Fatalf("windows for 20k: %v", w)
	}
	if got := (upsertWindow{10, 35}).parts(5); !slices.Equal(got, []int{10, 15, 20, 25, 30, 35}) {
		t.Fatalf("parts: %v", got)
	}
	if got := (upsertWindow{10, 13}).parts(5); !slices.Equal(got, []int{10, 11, 12, 13}) {
		t.Fatalf("parts of a short window: %v", got)
	}

	cfg := upsertConfig{Keys: 100, Upserts: 100, Windows: [2]upsertWindow{{10, 20}, {80, 100}}, Split: 2}
	c := newUpsertClock(cfg)
	base := c.start
	for i := 1; i <= 100; i++ {
		c.completed()
		// Rewrite the clock: 1 ms per upsert, but the part 80..90 took
		// ten times as long.
		step := time.Duration(i) * time.Millisecond
		if i > 80 {
			step += time.Duration(min(i-80, 10)) * 9 * time.Millisecond
		}
		if _, ok := c.at[i]; ok {
			c.at[i] = base.Add(step)
		}
		c.last = base.Add(step)
	}
	r, err := c.result(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Costs[0] != time.Millisecond {
		t.Errorf("first window: %s per upsert, want 1ms", r.Costs[0])
	}
	// parts of 10 ms/upsert and 1 ms/upsert: their median is the mean of the two
	if r.Costs[1] != 5500*time.Microsecond {
		t.Errorf("second window: %s per upsert, want 5.5ms", r.Costs[1])
	}
	if r.Elapsed != 190*time.Millisecond {
		t.Errorf("elapsed %s, want 190ms", r.Elapsed)
	}

	short := newUpsertClock(cfg)
	for range 50 {
		short.completed()
	}
	if _, err := short.result(cfg); err == nil || !strings.Contains(err.Error(), "not reached") {
		t.Errorf("a run that stopped at 50: %v, want a window not reached", err)
	}
}

// The fire tally is what the lost and double counts rest on: it must
// count a timer never handled as lost, one handled twice as a double
// fire, a fire of a foreign key as unknown, and take the lateness of the
// first handling.
func TestFireTallyCountsLostAndDoubleFires(t *testing.T) {
	due := time.Now()
	tl := newFireTally(5)
	for _, k := range []int{0, 1, 2, 4} { // 3 is lost
		tl.fired(keyName(k), due.Add(time.Duration(k+1)*time.Millisecond), due)
	}
	tl.fired(keyName(2), due.Add(time.Second), due) // a double fire
	select {
	case <-tl.Done():
		t.Fatal("Done with a timer never handled")
	default:
	}
	c := tl.counts()
	if c.Lost != 1 || c.Double != 1 || c.Handled != 4 || c.Fires != 5 || c.Unknown != 0 {
		t.Fatalf("counts %+v, want 1 lost, 1 double, 4 handled, 5 fires", c)
	}
	if err := c.exact(); err == nil || !strings.Contains(err.Error(), "1 lost, 1 handled more than once") {
		t.Fatalf("exact: %v", err)
	}
	late := tl.lateness()
	slices.Sort(late)
	if !slices.Equal(late, []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond}) {
		t.Fatalf("lateness %v: want the first handling of each handled timer", late)
	}

	tl.fired(keyName(3), due, due)
	<-tl.Done()
	tl.fired("key:5", due, due)
	tl.fired("someone-else", due, due)
	if c := tl.counts(); c.Lost != 0 || c.Unknown != 2 || c.exact() == nil {
		t.Fatalf("counts %+v: want no loss and 2 unknown, and not exact", c)
	}

	ok := newFireTally(3)
	for k := range 3 {
		ok.fired(keyName(k), due, due)
	}
	if err := ok.counts().exact(); err != nil {
		t.Fatalf("every timer once: %v", err)
	}
	if err := newFireTally(0).counts().exact(); err != nil {
		t.Fatalf("no timers: %v", err)
	}
}

// Due times are spread evenly after the lead, in whole milliseconds.
func TestTimerDue(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 123_456_789, time.UTC)
	cfg := timerConfig{N: 1000, Lead: 2 * time.Second, Spread: 10 * time.Second}
	if got, want := timerDue(cfg, base, 0), base.Add(2*time.Second+10*time.Millisecond).Truncate(time.Millisecond); !got.Equal(want) {
		t.Errorf("first due %v, want %v", got, want)
	}
	if got := timerDue(cfg, base, 999).Sub(timerDue(cfg, base, 0)); got != 9990*time.Millisecond {
		t.Errorf("last − first = %s", got)
	}
	lead, err := calibratedLead(context.Background(), 10_000, func(_ context.Context, c int) error {
		if c != timerCalibrate {
			t.Errorf("calibrating with %d timers", c)
		}
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	// 2000 took 20ms: 10k take 100 ms, twice that plus 500 ms.
	if err != nil || lead < 700*time.Millisecond || lead > time.Second {
		t.Errorf("calibratedLead = %s, %v; want about 700ms", lead, err)
	}
	if victimTakes(100_000) != 1000 || victimTakes(2000) != 20 || victimTakes(50) != 1 {
		t.Errorf("victimTakes: %d %d %d", victimTakes(100_000), victimTakes(2000), victimTakes(50))
	}
}
