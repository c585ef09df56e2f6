package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The round workloads compare redq's Round with a baseline
// written from the design it replaces, the timestamp round queue (see
// zsetround.go), on the same measurements: hand-outs per second one at a
// time and 100 per call, duplicates within a period, fairness, freshness
// lag, and removing expired items. Both sides run the same worker code
// (below) over a benchRound; only the round behind it differs.

// rounder is a system that offers a round queue. redq and the sorted-set
// round baseline implement it; any other system given a round workload reports
// errNotMeasured.
type rounder interface {
	// OpenRound opens a fresh, empty round with period and ttl (0: none)
	// on clients of its own, which Close closes.
	OpenRound(ctx context.Context, e *env, period, ttl time.Duration) (benchRound, error)
}

// benchRound is one round of a system under test.
type benchRound interface {
	// Fill adds items from..from+n-1 with data of size bytes, from
	// several goroutines, as fast as the system allows (untimed).
	Fill(ctx context.Context, from, n, size int) error
	// Next hands out up to max due items (max 1: the one-at-a-time call),
	// waiting up to wait for one to become due, the system's own way; it
	// returns none when none did.
	Next(ctx context.Context, max int, wait time.Duration) ([]handout, error)
	// RemoveExpired removes every item whose TTL ran out, the way the
	// system's cleaner does, and returns how many it removed.
	RemoveExpired(ctx context.Context) (int, error)
	// Len returns the number of items the round holds.
	Len(ctx context.Context) (int, error)
	// Close closes the round's clients.
	Close() error
}

// handout is one item handed out: its number and when it was marked
// issued, by the clock the system judges periods by (Redis's for redq,
// the worker's for the baseline).
type handout struct {
	item int
	at   time.Time
}

// roundItemID names item i; itemNumber reads it back.
func roundItemID(i int) string { return fmt.Sprintf("item-%d", i) }

func itemNumber(id string) (int, error) {
	var i int
	if _, err := fmt.Sscanf(id, "item-%d", &i); err != nil {
		return 0, fmt.Errorf("unexpected item id %q", id)
	}
	return i, nil
}

const (
	// roundWorkers is the worker count of every round workload.
	roundWorkers = 8
	// roundBatch is the batch size of the batched hand-outs.
	roundBatch = 100
	// roundLongPeriod is the period of the hand-out runs: longer than any
	// run, so every repeat is a duplicate.
	roundLongPeriod = time.Hour
	// roundWait is how long one Next call of a worker waits.
	roundWait = 100 * time.Millisecond
	// roundFillers is how many goroutines fill a round.
	roundFillers = 16
	// roundMinPeriod is the shortest period of a steady run.
	roundMinPeriod = time.Second
	// roundSteadyPeriods is how long a steady run's workers run, in
	// periods after the first (which adds the items).
	roundSteadyPeriods = 3
)

// rounderOf returns s as a rounder, or errNotMeasured.
func rounderOf(s system) (rounder, error) {
	r, ok := s.(rounder)
	if !ok {
		return nil, fmt.Errorf("%s: no round workloads: %w", s.Name(), errNotMeasured)
	}
	return r, nil
}

// roundSizes are the round workloads' sizes, from -n: small (n/10, 10k at
// the default) and big (10n, 1M) rounds; k hand-outs per mode in the
// hand-out runs (half the items, at most n); the steady run's rate (items
// per period / period).
type roundSizes struct {
	small, big int
	rate       int
}

func newRoundSizes(z sizes, rate int) roundSizes {
	return roundSizes{small: z.scaled(1, 10, 100), big: z.scaled(10, 1, 1000), rate: rate}
}

// handOutCount is how many items each mode of a hand-out run takes from
// a round of n items.
func handOutCount(n, base int) int { return min(n/2, base) }

// steadyPeriod is the period of a steady run of n items: n/rate, at least
// roundMinPeriod.
func steadyPeriod(n, rate int) time.Duration {
	return max(roundMinPeriod, time.Duration(float64(n)/float64(rate)*float64(time.Second)).Round(time.Millisecond))
}

// roundWorkloads returns the round workloads, for redq and the sorted-set
// round baseline.
func roundWorkloads(z sizes, rate int) []workload {
	rs := newRoundSizes(z, rate)
	systems := []string{"redq", zsetRoundName}
	rateMetric := metric{"rate", "hand-outs/s", higherIsBetter}
	batchMetric := metric{"rate, batch 100", "hand-outs/s", higherIsBetter}
	// A repeat within the period is a duplicate; rates count items, not
	// repeats.
	dupMetric := metric{"duplicates", "hand-outs", lowerIsBetter}
	handOut := func(n int) workload {
		k := handOutCount(n, z.n)
		return workload{
			name: "round/hand-out-" + count(n),
			about: fmt.Sprintf("%d workers hand out %d of %d due items one per call, then %d more %d per call (period 1h: a repeat is a duplicate)",
				roundWorkers, k, n, k, roundBatch),
			metrics: []metric{rateMetric, batchMetric, dupMetric},
			systems: systems,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				r, err := rounderOf(s)
				if err != nil {
					return nil, err
				}
				res, err := roundHandOut(ctx, e, r, n, k)
				if err != nil {
					return nil, err
				}
				return []float64{res.rate, res.batchRate, float64(res.duplicates)}, nil
			},
		}
	}
	period := steadyPeriod(rs.small, rs.rate)
	return []workload{
		handOut(rs.small),
		handOut(rs.big),
		{
			name: "round/steady-" + count(rs.small),
			about: fmt.Sprintf("%d items added over one period of %s, %d workers calling Next for %d more; fairness counts each item's hand-outs in the %d periods from its first",
				rs.small, period, roundWorkers, roundSteadyPeriods, roundSteadyPeriods),
			metrics: []metric{
				dupMetric,
				{"fairness", "max/min", lowerIsBetter},
				{"p50 freshness lag", "µs", lowerIsBetter},
				{"p99 freshness lag", "µs", lowerIsBetter},
			},
			systems: systems,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				r, err := rounderOf(s)
				if err != nil {
					return nil, err
				}
				st, err := roundSteady(ctx, e, r, rs.small, period)
				if err != nil {
					return nil, err
				}
				return []float64{float64(st.duplicates), st.fairness, micros(st.lagP50), micros(st.lagP99)}, nil
			},
		},
		{
			name:    "round/expire-" + count(rs.big),
			about:   fmt.Sprintf("remove %d expired items the way each system's cleaner does, while a PING is sent again and again", rs.big),
			metrics: []metric{seconds, {"longest PING", "µs", lowerIsBetter}},
			systems: systems,
			run: func(ctx context.Context, e *env, s system) ([]float64, error) {
				r, err := rounderOf(s)
				if err != nil {
					return nil, err
				}
				took, ping, err := roundExpire(ctx, e, r, rs.big)
				if err != nil {
					return nil, err
				}
				return []float64{took.Seconds(), micros(ping)}, nil
			},
		},
	}
}

// handOutResult is what a hand-out run measured.
type handOutResult struct {
	rate, batchRate float64 // items handed out per second (repeats not counted)
	duplicates      int     // hand-outs of items handed out before
}

// roundHandOut fills a round (period roundLongPeriod) with n items, then
// has roundWorkers workers hand out k of them one per call, and then k
// more (or what is left) roundBatch per call, each timed from the start of
// the workers to the hand-out that reached the count. Each item may be
// handed out once in the run: a repeat is a duplicate, and does not count
// towards k (it is work wasted). Afterwards the round must still hold all
// n items.
func roundHandOut(ctx context.Context, e *env, r rounder, n, k int) (handOutResult, error) {
	var res handOutResult
	br, err := r.OpenRound(ctx, e, roundLongPeriod, 0)
	if err != nil {
		return res, err
	}
	defer func() { _ = br.Close() }() // the measurement is taken; closing changes nothing
	if err := br.Fill(ctx, 0, n, e.payloadSize); err != nil {
		return res, fmt.Errorf("fill: %w", err)
	}
	seen := &handOutTally{count: make([]int, n)}
	if res.rate, err = runWorkers(ctx, br, 1, k, seen); err != nil {
		return res, fmt.Errorf("one per call: %w", err)
	}
	if res.batchRate, err = runWorkers(ctx, br, roundBatch, min(k, n-seen.distinct), seen); err != nil {
		return res, fmt.Errorf("%d per call: %w", roundBatch, err)
	}
	res.duplicates = seen.repeats
	if got, err := br.Len(ctx); err != nil || got != n {
		return res, fmt.Errorf("the round holds %d items (%v) after handing out, want all %d", got, err, n)
	}
	return res, nil
}

// handOutTally counts the hand-outs of each item of a hand-out run.
type handOutTally struct {
	mu       sync.Mutex
	count    []int
	distinct int // items handed out at least once
	repeats  int // hand-outs of items handed out before
}

// see records hand-outs and returns how many items they handed out for
// the first time.
func (t *handOutTally) see(hs []handout) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	first := 0
	for _, h := range hs {
		if h.item < 0 || h.item >= len(t.count) {
			return 0, fmt.Errorf("handed out item %d of %d", h.item, len(t.count))
		}
		if t.count[h.item] == 0 {
			first++
		} else {
			t.repeats++
		}
		t.count[h.item]++
	}
	t.distinct += first
	return first, nil
}

// runWorkers has roundWorkers workers call Next(batch) until want more
// items were handed out for the first time, and returns the rate: want
// divided by the time from the start to the hand-out that reached it.
// Workers stop between calls, never during one: a call cut short could
// have marked items issued that nobody sees.
func runWorkers(ctx context.Context, br benchRound, batch, want int, seen *handOutTally) (float64, error) {
	if want <= 0 {
		return 0, errors.New("nothing to hand out")
	}
	var (
		count   atomic.Int64
		reached atomic.Int64 // ns since start
		stop    atomic.Bool
		errOnce sync.Once
		runErr  error
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { runErr = err })
		stop.Store(true)
	}
	start := time.Now()
	for range roundWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				hs, err := br.Next(ctx, batch, roundWait)
				if err != nil {
					fail(err)
					return
				}
				if len(hs) == 0 {
					continue
				}
				at := time.Since(start)
				first, err := seen.see(hs)
				if err != nil {
					fail(err)
					return
				}
				if c := count.Add(int64(first)); c >= int64(want) && c-int64(first) < int64(want) {
					reached.Store(int64(at))
					stop.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if runErr != nil {
		return 0, runErr
	}
	if reached.Load() == 0 {
		return 0, fmt.Errorf("%d of %d hand-outs: %w", count.Load(), want, ctx.Err())
	}
	return float64(want) / time.Duration(reached.Load()).Seconds(), nil
}

// steadyResult is what a steady run measured (see analyseSteady).
type steadyRoundResult struct {
	duplicates     int
	fairness       float64
	lagP50, lagP99 time.Duration
}

// roundSteady opens a round with period and adds n items evenly over the
// first period (from one goroutine, paced by this process's clock) while
// roundWorkers workers call Next, one item per call, until
// roundSteadyPeriods more periods have passed, and analyses the
// hand-outs (analyseSteady).
func roundSteady(ctx context.Context, e *env, r rounder, n int, period time.Duration) (steadyRoundResult, error) {
	br, err := r.OpenRound(ctx, e, period, 0)
	if err != nil {
		return steadyRoundResult{}, err
	}
	defer func() { _ = br.Close() }() // the measurement is taken; closing changes nothing
	runFor := time.Duration(roundSteadyPeriods+1)*period + period/10
	start := time.Now()
	end := start.Add(runFor)
	var (
		mu      sync.Mutex
		all     []handout
		wg      sync.WaitGroup
		errOnce sync.Once
		runErr  error
		stop    atomic.Bool
	)
	fail := func(err error) {
		errOnce.Do(func() { runErr = err })
		stop.Store(true)
	}
	for range roundWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Workers stop between calls (see runWorkers).
			for !stop.Load() && ctx.Err() == nil && time.Now().Before(end) {
				hs, err := br.Next(ctx, 1, min(roundWait, max(time.Until(end), 0)))
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				all = append(all, hs...)
				mu.Unlock()
			}
		}()
	}
	// The producer: item i is added at i/n of the first period.
	for i := 0; i < n && !stop.Load(); {
		due := start.Add(time.Duration(float64(period) * float64(i) / float64(n)))
		if d := time.Until(due); d > 0 {
			if err := sleep(ctx, d); err != nil {
				fail(err)
				break
			}
		}
		j := i + 1
		for j < n && !start.Add(time.Duration(float64(period)*float64(j)/float64(n))).After(time.Now()) {
			j++ // catch up in one call when behind
		}
		if err := br.Fill(ctx, i, j-i, e.payloadSize); err != nil {
			fail(fmt.Errorf("add items %d..%d: %w", i, j-1, err))
			break
		}
		i = j
	}
	wg.Wait()
	if runErr != nil {
		return steadyRoundResult{}, runErr
	}
	if err := ctx.Err(); err != nil {
		return steadyRoundResult{}, err
	}
	return analyseSteady(all, n, period, end)
}

// analyseSteady judges the hand-outs of a steady run of n items that
// ended at end, by the issue times the system reported:
//   - duplicates: hand-outs less than a period after the item's previous
//     one;
//   - fairness: per item, the hand-outs in the roundSteadyPeriods periods
//     from its first (a round that keeps up gives each exactly that many),
//     the largest count over the smallest;
//   - freshness lag: for every hand-out but an item's first, the time from
//     its due time (the previous hand-out plus a period) to it; duplicates
//     are left out.
//
// Every item must have been handed out, early enough for its window to
// end before the run did.
func analyseSteady(all []handout, n int, period time.Duration, end time.Time) (steadyRoundResult, error) {
	var res steadyRoundResult
	byItem := make([][]time.Time, n)
	for _, h := range all {
		if h.item < 0 || h.item >= n {
			return res, fmt.Errorf("handed out item %d of %d", h.item, n)
		}
		byItem[h.item] = append(byItem[h.item], h.at)
	}
	var lags []time.Duration
	most, least := 0, -1
	for i, ts := range byItem {
		if len(ts) == 0 {
			return res, fmt.Errorf("item %d was never handed out", i)
		}
		sort.Slice(ts, func(a, b int) bool { return ts[a].Before(ts[b]) })
		window := ts[0].Add(roundSteadyPeriods * period)
		if window.After(end) {
			return res, fmt.Errorf("item %d was first handed out %s before the end of the run, less than %d periods", i, end.Sub(ts[0]), roundSteadyPeriods)
		}
		inWindow := 0
		for k, at := range ts {
			if at.Before(window) {
				inWindow++
			}
			if k == 0 {
				continue
			}
			if gap := at.Sub(ts[k-1]); gap < period {
				res.duplicates++
				continue
			}
			lags = append(lags, at.Sub(ts[k-1].Add(period)))
		}
		most = max(most, inWindow)
		if least < 0 || inWindow < least {
			least = inWindow
		}
	}
	res.fairness = float64(most) / float64(least)
	if len(lags) == 0 {
		return res, errors.New("no item was handed out twice")
	}
	res.lagP50, res.lagP99 = percentile(lags, 0.50), percentile(lags, 0.99)
	return res, nil
}

// roundExpire fills a round of n items with a TTL that outlasts the fill
// (chosen from the speed of a probe fill, so that none expires while
// others are added), waits until every TTL has run out, and times RemoveExpired while another client sends PING after PING;
// it returns that time and the longest PING. Everything must be removed.
func roundExpire(ctx context.Context, e *env, r rounder, n int) (time.Duration, time.Duration, error) {
	ttl, err := expireTTL(ctx, e, r, n)
	if err != nil {
		return 0, 0, err
	}
	br, err := r.OpenRound(ctx, e, roundLongPeriod, ttl)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = br.Close() }() // the measurement is taken; closing changes nothing
	start := time.Now()
	if err := br.Fill(ctx, 0, n, e.payloadSize); err != nil {
		return 0, 0, fmt.Errorf("fill: %w", err)
	}
	filled := time.Now()
	// A round whose items expired while others were added (redq's Add
	// removes some on its way) holds fewer: the TTL was too short.
	if got, err := br.Len(ctx); err != nil || got != n {
		return 0, 0, fmt.Errorf("the round holds %d items (%v) after filling for %s with a TTL of %s, want %d", got, err, filled.Sub(start), ttl, n)
	}
	// The last item expires a TTL after the fill ended.
	if err := sleep(ctx, time.Until(filled.Add(ttl+50*time.Millisecond))); err != nil {
		return 0, 0, err
	}
	// Filling made as many payloads here: collect them now, so that the
	// collector does not slow the pings of one system and not the other's.
	runtime.GC()
	pinger := e.newClient(1)
	defer func() { _ = pinger.Close() }() // a probe client
	stop := make(chan struct{})
	longest := make(chan time.Duration, 1)
	go func() { longest <- pingUntil(ctx, pinger, stop) }()
	t0 := time.Now()
	removed, err := br.RemoveExpired(ctx)
	took := time.Since(t0)
	close(stop)
	ping := <-longest
	if err != nil {
		return 0, 0, fmt.Errorf("remove expired: %w", err)
	}
	if removed != n {
		return 0, 0, fmt.Errorf("removed %d expired items, want %d", removed, n)
	}
	if got, err := br.Len(ctx); err != nil || got != 0 {
		return 0, 0, fmt.Errorf("the round holds %d items (%v) after removing the expired ones, want none", got, err)
	}
	return took, ping, nil
}

// expireTTL returns a TTL for n items that outlasts filling them: two and
// a half times the fill time a probe of 1% predicts (a big round fills
// more slowly than a small one), plus 1 s.
func expireTTL(ctx context.Context, e *env, r rounder, n int) (time.Duration, error) {
	probe := max(n/100, 100)
	br, err := r.OpenRound(ctx, e, roundLongPeriod, 0)
	if err != nil {
		return 0, err
	}
	defer func() { _ = br.Close() }() // the measurement is taken; closing changes nothing
	start := time.Now()
	if err := br.Fill(ctx, 0, probe, e.payloadSize); err != nil {
		return 0, fmt.Errorf("probe fill: %w", err)
	}
	predicted := time.Duration(float64(time.Since(start)) * float64(n) / float64(probe))
	return (predicted*5/2 + time.Second).Round(time.Millisecond), nil
}

// pingUntil sends PING after PING until stop is closed and returns the
// longest round trip.
func pingUntil(ctx context.Context, c *redis.Client, stop <-chan struct{}) time.Duration {
	var longest time.Duration
	for {
		select {
		case <-stop:
			return longest
		default:
		}
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return longest
		}
		longest = max(longest, time.Since(t0))
	}
}
