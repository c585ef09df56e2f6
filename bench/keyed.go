package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The keyed and timer workloads: upserts of keyed deliveries
// and the bytes a pending one costs (redq only: none of the peers has
// keyed items), and timers side by side with the keyspace-poll timers baseline
// (polltimers.go): fire lateness, fires per second, fires lost when a consumer
// dies after taking, double fires with two pollers.

// keyedSystem is what a system offers for the keyed workloads. Only redq
// implements it; any other system reports errNotMeasured.
type keyedSystem interface {
	// Upserts runs cfg.Upserts upserts (see upsertConfig), checks that
	// the queue holds exactly what they should have left, and returns the
	// elapsed time and the cost per upsert in the two windows.
	Upserts(ctx context.Context, e *env, cfg upsertConfig) (upsertResult, error)
	// KeyedMemory upserts n distinct keys with payloads of e.payloadSize
	// bytes, due in a day, and returns Redis's used_memory growth divided
	// by n.
	KeyedMemory(ctx context.Context, e *env, n int) (float64, error)
}

// timerSystem is what a system offers for the timer workloads: redq's
// Timers and the keyspace-poll timers baseline.
type timerSystem interface {
	// FireTimers sets cfg.N timers due cfg.Lead after it starts, spread
	// evenly over cfg.Spread, then starts its consumers (and, for a
	// polling design, its pollers), handles every fire, and returns the
	// record of what fired. Only a failure to run is an error: losses and
	// double fires are the record's to tell.
	FireTimers(ctx context.Context, e *env, cfg timerConfig) (*fireTally, error)
	// TimerBurst sets n timers all due at the same moment, waits until it
	// has passed, and times consumers consumers handling every fire (redq:
	// batch fires per call when positive, see timerConfig.Batch).
	TimerBurst(ctx context.Context, e *env, n, consumers int, batch int64) (time.Duration, error)
}

// upsertConfig describes one upsert run. Upsert i (0 ≤ i < Upserts) is of
// key i mod Keys with a payload carrying sequence number i; goroutine g
// makes the upserts of the keys k with k mod Goroutines = g, in order, so
// that the upserts of one key never race and the last one of each key is
// known. Every upsert is ReplaceAll with a delay of a day, so nothing
// becomes due while the run lasts.
type upsertConfig struct {
	Keys        int
	Upserts     int
	Goroutines  int
	PayloadSize int
	// Windows, when set, are the two stretches of completed upserts
	// whose cost per upsert the run reports (for distinct keys: while
	// about from to to keys are pending). Each is cut into Split equal
	// parts, and its cost is the median of theirs, so that a pause of the
	// machine in one part does not decide it.
	Windows [2]upsertWindow
	Split   int
}

// upsertWindow is a stretch of completed upserts: from the from-th to the
// to-th completion.
type upsertWindow struct{ from, to int }

// set reports whether w is a window at all.
func (w upsertWindow) set() bool { return w.to > w.from }

// parts returns the bounds of w cut into split equal parts (the last
// takes what does not divide evenly): split+1 completion counts.
func (w upsertWindow) parts(split int) []int {
	split = max(1, min(split, w.to-w.from))
	out := make([]int, 0, split+1)
	for i := range split {
		out = append(out, w.from+i*((w.to-w.from)/split))
	}
	return append(out, w.to)
}

// upsertResult is what an upsert run measured.
type upsertResult struct {
	Elapsed time.Duration    // first upsert sent to the last one answered
	Costs   [2]time.Duration // per upsert in each window, when Windows were set
	Refused int              // upserts refused by redq's slot race and made again (see refusedLate)
}

// upsertSeqs returns the upserts goroutine g of cfg makes, in order.
func upsertSeqs(cfg upsertConfig, g int) []int {
	var keys []int
	for k := g; k < cfg.Keys; k += cfg.Goroutines {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil
	}
	// Upsert i goes to key i mod Keys: the rounds over all keys, this
	// goroutine's keys in each.
	var out []int
	for round := 0; round*cfg.Keys < cfg.Upserts; round++ {
		for _, k := range keys {
			if i := round*cfg.Keys + k; i < cfg.Upserts {
				out = append(out, i)
			}
		}
	}
	return out
}

// upsertKey is the key of upsert i.
func upsertKey(cfg upsertConfig, i int) string { return keyName(i % cfg.Keys) }

// keyName is the key of keyed item or timer k: "key:<k>".
func keyName(k int) string { return "key:" + strconv.Itoa(k) }

// keyIndex parses a key made by keyName; -1 if it is not one.
func keyIndex(key string) int {
	if len(key) < 5 || key[:4] != "key:" {
		return -1
	}
	k, err := strconv.Atoi(key[4:])
	if err != nil || k < 0 || strconv.Itoa(k) != key[4:] {
		return -1
	}
	return k
}

// upsertPlan is what the upserts of a config must leave: per key the
// number of upserts and the sequence number of the last one (-1: none).
type upsertPlan struct {
	count []int
	last  []int
}

// planUpserts returns what cfg's upserts leave behind.
func planUpserts(cfg upsertConfig) upsertPlan {
	p := upsertPlan{count: make([]int, cfg.Keys), last: make([]int, cfg.Keys)}
	for k := range p.last {
		p.last[k] = -1
	}
	for i := range cfg.Upserts {
		k := i % cfg.Keys
		p.count[k]++
		p.last[k] = i
	}
	return p
}

// pending returns how many keys have a pending item.
func (p upsertPlan) pending() int {
	n := 0
	for _, c := range p.count {
		if c > 0 {
			n++
		}
	}
	return n
}

// upsertClock records when the upserts of a run complete: the start, the
// last completion and the moments the window bounds were reached. It is
// safe for concurrent use.
type upsertClock struct {
	mu     sync.Mutex
	done   int
	start  time.Time
	last   time.Time
	bounds []int
	at     map[int]time.Time
}

// newUpsertClock returns a clock for the windows of cfg, started now.
func newUpsertClock(cfg upsertConfig) *upsertClock {
	c := &upsertClock{start: time.Now(), at: map[int]time.Time{}}
	for _, w := range cfg.Windows {
		if w.set() {
			c.bounds = append(c.bounds, w.parts(cfg.Split)...)
		}
	}
	c.at[0] = c.start
	return c
}

// completed notes one upsert answered now.
func (c *upsertClock) completed() {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done++
	c.last = now
	if slices.Contains(c.bounds, c.done) {
		c.at[c.done] = now
	}
}

// result returns the elapsed time and the cost per upsert in each window
// of cfg (the median over its parts); an error when a window was not
// reached.
func (c *upsertClock) result(cfg upsertConfig) (upsertResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := upsertResult{Elapsed: c.last.Sub(c.start)}
	for i, w := range cfg.Windows {
		if !w.set() {
			continue
		}
		bounds := w.parts(cfg.Split)
		costs := make([]float64, 0, len(bounds)-1)
		for j := 1; j < len(bounds); j++ {
			from, ok1 := c.at[bounds[j-1]]
			to, ok2 := c.at[bounds[j]]
			if !ok1 || !ok2 {
				return r, fmt.Errorf("window %d..%d not reached: %d upserts completed", bounds[j-1], bounds[j], c.done)
			}
			costs = append(costs, float64(to.Sub(from))/float64(bounds[j]-bounds[j-1]))
		}
		r.Costs[i] = time.Duration(median(costs))
	}
	return r, nil
}

// timerConfig describes one run of FireTimers.
type timerConfig struct {
	N      int           // timers: keys key:0 … key:N-1
	Lead   time.Duration // from the start of filling to the first due time: the run sets it (see calibratedLead)
	Spread time.Duration // due times spread evenly over this, in order of key
	// Consumers handle fires; a handled fire is recorded in the tally
	// with the time its consumer received it.
	Consumers int
	// Pairs is 1, or 2 for two pollers (poll-timers) or two connections, each
	// with half the consumers (redq).
	Pairs int
	// VictimTakes, when positive, makes one more consumer that takes that
	// many fires and dies before handling them (redq: its connection's
	// client is closed and its heartbeat lapses; a cleaner then runs).
	VictimTakes int
	// Poll is the pollTimers poller's pause between polls.
	Poll time.Duration
	// Drain bounds the wait for the fires after the last due time.
	Drain time.Duration
	// Batch, when positive, makes redq's consumers take up to Batch fires
	// per call (Timers.NextBatch) and ack them together (Fires.Ack); 0
	// takes and acks one at a time (Next, Fire.Ack). The baseline ignores
	// it.
	Batch int64
}

// timerDue returns the due time of timer i of cfg, counting from base:
// base + Lead + (i+1)/N of Spread, in whole milliseconds.
func timerDue(cfg timerConfig, base time.Time, i int) time.Time {
	return base.Add(cfg.Lead + spreadDelay(i, cfg.N, cfg.Spread)).Truncate(time.Millisecond)
}

// timerCalibrate is how many throwaway timers a run sets to learn how long
// setting its timers takes (see calibratedLead).
const timerCalibrate = 2000

// timerBurstMargin is how long a burst run waits past the due time of its
// timers before its consumers start, so that every timer is due.
const timerBurstMargin = 100 * time.Millisecond

// calibratedLead returns how long a run leaves for setting n timers
// before the first is due: half a second plus twice the time setting them
// should take, judged by timing set(c) for c = min(n, timerCalibrate)
// throwaway timers (set the same way, due in a day, in a place the run
// does not check). The machine may be busy: a fixed lead would be too
// short there or waste time elsewhere.
func calibratedLead(ctx context.Context, n int, set func(ctx context.Context, c int) error) (time.Duration, error) {
	c := max(1, min(n, timerCalibrate))
	start := time.Now()
	if err := set(ctx, c); err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	took := time.Since(start)
	return 500*time.Millisecond + 2*took*time.Duration(n)/time.Duration(c), nil
}

// fireTally records, per timer, every time a live consumer handled its
// fire, and the first one's lateness. It is safe for concurrent use.
type fireTally struct {
	mu      sync.Mutex
	count   []int
	late    []time.Duration // of the first handling
	unknown int             // fires of keys that are not the run's
	handled int             // distinct timers handled
	first   time.Time       // the earliest due time of a handled fire
	last    time.Time       // the latest receipt of a first handling
	done    chan struct{}   // closed when every timer was handled once
	closed  bool
}

// newFireTally returns a tally for timers 0..n-1.
func newFireTally(n int) *fireTally {
	t := &fireTally{count: make([]int, n), late: make([]time.Duration, n), done: make(chan struct{})}
	t.closeIfDone()
	return t
}

func (t *fireTally) closeIfDone() {
	if !t.closed && t.handled >= len(t.count) {
		t.closed = true
		close(t.done)
	}
}

// fired records that a consumer received the fire of key at, due at due.
func (t *fireTally) fired(key string, at, due time.Time) {
	k := keyIndex(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if k < 0 || k >= len(t.count) {
		t.unknown++
		return
	}
	t.count[k]++
	if t.count[k] == 1 {
		t.late[k] = at.Sub(due)
		if t.first.IsZero() || due.Before(t.first) {
			t.first = due
		}
		if at.After(t.last) {
			t.last = at
		}
		t.handled++
		t.closeIfDone()
	}
}

// Done is closed once every timer was handled at least once.
func (t *fireTally) Done() <-chan struct{} { return t.done }

// fireCounts are what a tally found.
type fireCounts struct {
	N       int
	Handled int // timers handled at least once
	Lost    int // timers never handled
	Double  int // timers handled more than once
	Fires   int // handlings in all
	Unknown int
}

// counts returns what the tally found so far.
func (t *fireTally) counts() fireCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := fireCounts{N: len(t.count), Unknown: t.unknown}
	for _, n := range t.count {
		c.Fires += n
		switch {
		case n == 0:
			c.Lost++
		case n > 1:
			c.Double++
		}
		if n > 0 {
			c.Handled++
		}
	}
	return c
}

// String says what was found, for errors.
func (c fireCounts) String() string {
	return fmt.Sprintf("%d of %d timers handled, %d lost, %d handled more than once (%d fires), %d unknown",
		c.Handled, c.N, c.Lost, c.Double, c.Fires, c.Unknown)
}

// exact returns nil when every timer was handled exactly once and nothing
// else, else an error saying what was found.
func (c fireCounts) exact() error {
	if c.Lost == 0 && c.Double == 0 && c.Unknown == 0 {
		return nil
	}
	return fmt.Errorf("fires: %s", c)
}

// lateness returns the lateness of the first handling of every timer that
// was handled.
func (t *fireTally) lateness() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]time.Duration, 0, t.handled)
	for k, n := range t.count {
		if n > 0 {
			out = append(out, t.late[k])
		}
	}
	return out
}

// rate returns the timers handled per second from the earliest due time to
// the last first handling: the due rate when the consumers keep up, less
// when fires back up.
func (t *fireTally) rate() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	span := t.last.Sub(t.first)
	if t.handled == 0 || span <= 0 {
		return 0
	}
	return float64(t.handled) / span.Seconds()
}

// keyedOf returns s as a keyedSystem, or errNotMeasured.
func keyedOf(s system) (keyedSystem, error) {
	k, ok := s.(keyedSystem)
	if !ok {
		return nil, fmt.Errorf("%s: no keyed workloads: %w", s.Name(), errNotMeasured)
	}
	return k, nil
}

// timersOf returns s as a timerSystem, or errNotMeasured.
func timersOf(s system) (timerSystem, error) {
	t, ok := s.(timerSystem)
	if !ok {
		return nil, fmt.Errorf("%s: no timer workloads: %w", s.Name(), errNotMeasured)
	}
	return t, nil
}

// Timer and keyed workload parameters.
const (
	// keyedGoroutines is the concurrency of the 8-goroutine upsert runs.
	keyedGoroutines = 8
	// timerConsumers is the consumer count of every timer run.
	timerConsumers = 8
	// steadyConsumers is the consumer count of the steady timer runs:
	// 2 connections × 2 goroutines.
	steadyConsumers = 4
	// steadyBatchMax is the most fires a steady batch run takes per call.
	steadyBatchMax = 100
	// pollTimersPoll is the baseline's pause between polls.
	pollTimersPoll = time.Second
)

// victimTakes is how many fires the consumer that dies takes: 1% of the
// timers, between 1 and 1000.
func victimTakes(n int) int { return max(1, min(1000, n/100)) }

// keyedSplit is how many parts each cost window of a distinct-key run
// has.
const keyedSplit = 10

// keyedWindows returns the two cost windows of a distinct-key run of keys
// upserts: keyedSplit·w completions from w pending keys on, and the last
// keyedSplit·w, where w is 1000 (for small runs a 25th of the keys).
func keyedWindows(keys int) [2]upsertWindow {
	w := max(1, min(1000, keys/25))
	return [2]upsertWindow{{w, w + keyedSplit*w}, {keys - keyedSplit*w, keys}}
}

// keyedWorkloads returns the keyed and timer workloads, sized from z: 10n
// distinct keys and n/100 hot keys (1M and 1k at the default n), n items
// for memory, and n timers spread over 10 s (at least 1 s, shorter for a
// small n).
func keyedWorkloads(z sizes) []workload {
	n := z.n
	redqOnly := []string{"redq"}
	both := []string{"redq", "poll-timers"}
	distinct := z.scaled(10, 1, 1000)
	hot := z.scaled(1, 100, 10)
	win := keyedWindows(distinct)
	upsertRate := metric{"rate", "upserts/s", higherIsBetter}
	lowCost := metric{"cost near " + count(win[0].from) + " pending", "µs/upsert", lowerIsBetter}
	highCost := metric{"cost near " + count(distinct) + " pending", "µs/upsert", lowerIsBetter}
	// refused counts the upserts redq refused by the race that
	// refusedLate describes, made again: 0 once that is fixed.
	refused := metric{"refused by the slot race, sent again", "upserts", lowerIsBetter}
	upserts := func(name, about string, cfg upsertConfig) workload {
		metrics := []metric{upsertRate}
		if cfg.Windows[0].to > 0 {
			metrics = append(metrics, lowCost, highCost)
		}
		metrics = append(metrics, refused)
		return workload{
			name: name, about: about, metrics: metrics, systems: redqOnly,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				ks, err := keyedOf(s)
				if err != nil {
					return nil, err
				}
				cfg.PayloadSize = e.payloadSize
				r, err := ks.Upserts(ctx, e, cfg)
				if err != nil {
					return nil, err
				}
				out := []float64{float64(cfg.Upserts) / r.Elapsed.Seconds()}
				if cfg.Windows[0].to > 0 {
					out = append(out, micros(r.Costs[0]), micros(r.Costs[1]))
				}
				return append(out, float64(r.Refused)), nil
			},
		}
	}
	var out []workload
	for _, g := range []int{1, keyedGoroutines} {
		cfg := upsertConfig{Keys: distinct, Upserts: distinct, Goroutines: g, Windows: win, Split: keyedSplit}
		out = append(out, upserts(
			fmt.Sprintf("keyed/%s-keys-%s", count(distinct), goroutines(g)),
			fmt.Sprintf("upsert %d distinct keys (%d B, due in a day), 1 per call, from %d goroutine(s); cost per upsert: median of %d parts of completions %d–%d and of %d–%d",
				distinct, 100, g, keyedSplit, win[0].from, win[0].to, win[1].from, win[1].to),
			cfg))
	}
	for _, c := range []struct{ g, upserts int }{{1, z.scaled(1, 10, 100)}, {keyedGoroutines, z.scaled(1, 4, 100)}} {
		cfg := upsertConfig{Keys: hot, Upserts: c.upserts, Goroutines: c.g}
		out = append(out, upserts(
			fmt.Sprintf("keyed/%s-hot-keys-%s", count(hot), goroutines(c.g)),
			fmt.Sprintf("%d upserts (ReplaceAll, due in a day) round %d hot keys, 1 per call, from %d goroutine(s)", c.upserts, hot, c.g),
			cfg))
	}
	out = append(out, workload{
		name:    "keyed/memory-pending",
		about:   fmt.Sprintf("Redis used_memory growth per pending keyed item, %d items of %d B, keys key:<i>, due in a day", n, 100),
		metrics: []metric{{"bytes", "B/item", lowerIsBetter}},
		systems: redqOnly,
		run: func(ctx context.Context, e *env, s system) ([]float64, error) {
			ks, err := keyedOf(s)
			if err != nil {
				return nil, err
			}
			b, err := ks.KeyedMemory(ctx, e, n)
			return []float64{b}, err
		},
	})

	spread := max(time.Second, time.Duration(float64(10*time.Second)*float64(n)/100_000))
	base := timerConfig{
		N: n, Spread: spread, Consumers: timerConsumers, Pairs: 1,
		Poll: pollTimersPoll, Drain: time.Minute,
	}
	lateness := []metric{
		{"p50 lateness", "µs", lowerIsBetter}, {"p99 lateness", "µs", lowerIsBetter}, {"max lateness", "µs", lowerIsBetter},
	}
	faults := []metric{{"lost fires", "fires", lowerIsBetter}, {"double fires", "fires", lowerIsBetter}}
	// fire makes a workload of one FireTimers run per system. redq must
	// handle every timer exactly once in every run; so must the baseline
	// when baselineExact (one poller, no crash), or its lateness would mean
	// little. Otherwise the baseline's losses and double fires are what
	// the workload reports.
	fire := func(name, about string, cfg timerConfig, metrics []metric, baselineExact bool,
		values func(tl *fireTally) []float64) workload {
		return workload{
			name: name, about: about, metrics: metrics, systems: both,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				ts, err := timersOf(s)
				if err != nil {
					return nil, err
				}
				tl, err := ts.FireTimers(ctx, e, cfg)
				if err != nil {
					return nil, err
				}
				c := tl.counts()
				if c.Unknown > 0 || s.Name() == "redq" || baselineExact {
					if err := c.exact(); err != nil {
						return nil, err
					}
				}
				return values(tl), nil
			},
		}
	}
	faultCounts := func(tl *fireTally) []float64 {
		c := tl.counts()
		return []float64{float64(c.Lost), float64(c.Double)}
	}
	// steady: n timers due evenly over the spread (100k over 10 s at the
	// default n: 10k fires/s), handled by 2 connections with 2 goroutines
	// each, one fire per call or in batches.
	steadyName := fmt.Sprintf("timers/steady-%s-%ds", count(n), int(spread.Seconds()))
	steadyMetrics := []metric{
		{"rate", "fires/s", higherIsBetter},
		{"p50 lateness", "µs", lowerIsBetter}, {"p99 lateness", "µs", lowerIsBetter},
		{"lost fires", "fires", lowerIsBetter}, {"double fires", "fires", lowerIsBetter},
	}
	steady := base
	steady.Consumers, steady.Pairs = steadyConsumers, 2
	steadyBatch := steady
	steadyBatch.Batch = steadyBatchMax
	steadyValues := func(tl *fireTally) []float64 {
		c, late := tl.counts(), tl.lateness()
		if len(late) == 0 {
			return []float64{0, 0, 0, float64(c.Lost), float64(c.Double)}
		}
		return []float64{tl.rate(), micros(percentile(late, 0.50)), micros(percentile(late, 0.99)), float64(c.Lost), float64(c.Double)}
	}
	// burst: n timers due at once, timerConsumers consumers; with batch,
	// redq's take up to batch fires per call and ack them together.
	burst := func(batch int64, suffix string) workload {
		about := fmt.Sprintf("%d timers all due at once, %d consumers handle every fire (poll-timers: its first poll included)", n, timerConsumers)
		if batch > 0 {
			about = fmt.Sprintf("as timers/burst-%s, redq's consumers with NextBatch of up to %d fires and one Ack per batch (poll-timers: the same)", count(n), batch)
		}
		return workload{
			name: "timers/burst-" + count(n) + suffix, about: about,
			metrics: []metric{{"rate", "fires/s", higherIsBetter}},
			systems: both,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				ts, err := timersOf(s)
				if err != nil {
					return nil, err
				}
				d, err := ts.TimerBurst(ctx, e, n, timerConsumers, batch)
				return []float64{float64(n) / d.Seconds()}, err
			},
		}
	}
	steadyRun := func(name, about string, cfg timerConfig) workload {
		return fire(name, about, cfg, steadyMetrics, false, steadyValues)
	}
	victim := base
	victim.VictimTakes = victimTakes(n)
	pairs := base
	pairs.Pairs = 2
	out = append(out,
		fire("timers/lateness-"+count(n),
			fmt.Sprintf("%d timers due over %s, %d consumers (poll-timers: 1 poller, a pause of %s); receipt − due time",
				n, spread, timerConsumers, pollTimersPoll),
			base, lateness, true, func(tl *fireTally) []float64 {
				late := tl.lateness()
				if len(late) == 0 {
					return []float64{0, 0, 0}
				}
				return []float64{micros(percentile(late, 0.50)), micros(percentile(late, 0.99)), micros(slices.Max(late))}
			}),
		burst(0, ""),
		burst(steadyBatchMax, "-batch"),
		fire("timers/consumer-dies",
			fmt.Sprintf("as lateness, and one more consumer takes %d fires and dies before handling them (redq: its heartbeat lapses, a cleaner runs)",
				victim.VictimTakes),
			victim, faults, false, faultCounts),
		fire("timers/two-pollers",
			"as lateness, with two pollers started together (redq: two connections with 4 consumers each)",
			pairs, faults, false, faultCounts),
		steadyRun(steadyName+"-next",
			fmt.Sprintf("%d timers due evenly over %s (%d/s), 2 connections × 2 goroutines, Next and Ack per fire (poll-timers: 2 pollers, %d consumers); handled rate, receipt − due time",
				n, spread, int(float64(n)/spread.Seconds()), steadyConsumers),
			steady),
		steadyRun(steadyName+"-batch",
			fmt.Sprintf("as %s-next, with NextBatch of up to %d fires and one Ack per batch (poll-timers: the same as -next)", steadyName, steadyBatchMax),
			steadyBatch),
	)
	return out
}

// goroutines says "1 goroutine" or "8 goroutines".
func goroutines(g int) string {
	if g == 1 {
		return "1-goroutine"
	}
	return strconv.Itoa(g) + "-goroutines"
}
