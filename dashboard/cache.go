package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/redq/redq"
)

// overviewData is one read of the namespace's queues, timers and rounds.
type overviewData struct {
	At     time.Time
	Queues []redq.QueueInfo
	Timers map[string]redq.TimerStat
	Rounds map[string]redq.RoundStat
}

// totalsSample is the counters kept in Redis at one moment, by queue:
// published, acked, rejected.
type totalsSample struct {
	at     time.Time
	totals map[string][3]int64
}

// overviewCache keeps the last good read of the overview, shared by every
// browser, so that many open dashboards cost Redis one read per interval
// and an outage still shows the last numbers. It also keeps a minute of
// counter samples, from which the live rates come.
type overviewCache struct {
	mu      sync.Mutex
	good    *overviewData
	err     error
	errAt   time.Time
	samples []totalsSample
	dirty   bool // an action changed Redis: read afresh
}

// get returns the overview, read afresh when the last read is older than
// maxAge, else the last one. On a failed read it returns the last good
// data (nil if none) and the error.
func (c *overviewCache) get(ctx context.Context, src source, maxAge time.Duration) (*overviewData, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.dirty && c.good != nil && c.err == nil && now.Sub(c.good.At) < maxAge {
		return c.good, nil
	}
	if !c.dirty && c.err != nil && now.Sub(c.errAt) < maxAge {
		return c.good, c.err
	}
	c.dirty = false
	d, err := readOverview(ctx, src)
	if err != nil {
		c.err, c.errAt = err, now
		return c.good, err
	}
	c.good, c.err = d, nil
	s := totalsSample{at: d.At, totals: make(map[string][3]int64, len(d.Queues))}
	for _, q := range d.Queues {
		s.totals[q.Name] = [3]int64{q.Published, q.Acked, q.Rejects}
	}
	keep := c.samples[:0]
	for _, old := range c.samples {
		if d.At.Sub(old.at) <= 70*time.Second {
			keep = append(keep, old)
		}
	}
	c.samples = append(keep, s)
	return d, nil
}

// rates returns per queue the published, acked and rejected per second
// over the longest window (up to a minute, at least 3 seconds) the samples
// cover; ok is false when they cover less.
func (c *overviewCache) rates() (map[string][3]float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.samples) < 2 {
		return nil, false
	}
	last := c.samples[len(c.samples)-1]
	var first *totalsSample
	for i := range c.samples {
		if last.at.Sub(c.samples[i].at) <= 61*time.Second {
			first = &c.samples[i]
			break
		}
	}
	dt := last.at.Sub(first.at).Seconds()
	if dt < 3 {
		return nil, false
	}
	out := make(map[string][3]float64, len(last.totals))
	for name, now := range last.totals {
		then, ok := first.totals[name]
		if !ok {
			continue
		}
		var r [3]float64
		for i := range r {
			if d := now[i] - then[i]; d > 0 {
				r[i] = float64(d) / dt
			}
		}
		out[name] = r
	}
	return out, true
}

// readOverview reads the overview page's numbers in one Overview call: two
// round trips to Redis, however many queues there are.
func readOverview(ctx context.Context, src source) (*overviewData, error) {
	o, err := src.Overview(ctx)
	if err != nil {
		return nil, err
	}
	return &overviewData{At: time.Now(), Queues: o.Queues, Timers: o.Timers, Rounds: o.Rounds}, nil
}

// historyCache keeps each queue's last hour for a while: it changes once a
// minute, and the overview draws one per queue shown.
type historyCache struct {
	ttl     time.Duration
	mu      sync.Mutex
	entries map[string]historyEntry
}

type historyEntry struct {
	at     time.Time
	points []redq.RatePoint
}

// histories returns the last hour of each queue, reading those not cached
// (or cached too long ago) with a few requests at a time. A queue whose
// read fails keeps its old points, if any; the first error is returned.
func (c *historyCache) histories(ctx context.Context, src source, queues []string) (map[string][]redq.RatePoint, error) {
	now := time.Now()
	out := make(map[string][]redq.RatePoint, len(queues))
	var missing []string
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]historyEntry{}
	}
	for _, q := range queues {
		e, ok := c.entries[q]
		if ok {
			out[q] = e.points
		}
		if !ok || now.Sub(e.at) >= c.ttl {
			missing = append(missing, q)
		}
	}
	c.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	type result struct {
		queue  string
		points []redq.RatePoint
		err    error
	}
	results := make(chan result, len(missing))
	work := make(chan string)
	workers := min(8, len(missing))
	for range workers {
		go func() {
			for q := range work {
				p, err := src.History(ctx, q, time.Hour)
				results <- result{q, p, err}
			}
		}()
	}
	go func() {
		defer close(work)
		for _, q := range missing {
			select {
			case work <- q:
			case <-ctx.Done():
				results <- result{queue: q, err: ctx.Err()}
			}
		}
	}()
	var firstErr error
	c.mu.Lock()
	defer c.mu.Unlock()
	for range missing {
		r := <-results
		if r.err != nil {
			if firstErr == nil {
				firstErr = r.err
			}
			continue
		}
		c.entries[r.queue] = historyEntry{at: now, points: r.points}
		out[r.queue] = r.points
	}
	if len(c.entries) > 4*QueuesPerPage+len(queues) {
		// Forget queues not shown lately rather than grow for ever.
		for q, e := range c.entries {
			if now.Sub(e.at) > 10*c.ttl {
				delete(c.entries, q)
			}
		}
	}
	return out, firstErr
}

// lastGood keeps the last data each page (by URL) showed, so that a page
// refreshed during an outage keeps its numbers, greyed.
type lastGood struct {
	max     int
	mu      sync.Mutex
	entries map[string]lastEntry
}

type lastEntry struct {
	at   time.Time
	body any
}

func (l *lastGood) put(key string, body any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries == nil {
		l.entries = map[string]lastEntry{}
	}
	if _, ok := l.entries[key]; !ok && len(l.entries) >= l.max {
		var oldest string
		var at time.Time
		for k, e := range l.entries {
			if oldest == "" || e.at.Before(at) {
				oldest, at = k, e.at
			}
		}
		delete(l.entries, oldest)
	}
	l.entries[key] = lastEntry{at: time.Now(), body: body}
}

func (l *lastGood) get(key string) (any, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	return e.body, e.at, ok
}

// invalidate makes the next get read Redis afresh (after an action).
func (c *overviewCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirty = true
}

// invalidate forgets every cached history.
func (c *historyCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = nil
}
