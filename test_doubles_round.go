package redq

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// TestRound is a Round in memory, for users' unit tests, opened with
// TestConnection.OpenRound. It follows the rules of the Redis round (order,
// once per period, front line, TTL, bad input) by a local clock: time.Now,
// or the one set with SetClock. Next waits by the real clock.
type TestRound struct {
	name string

	mu      sync.Mutex
	period  time.Duration
	ttl     time.Duration
	now     func() time.Time
	items   map[string]*testRoundItem
	seq     int64
	issued  int64
	expired int64
	win     int64 // the rate window of the last hand-out, and its count
	winN    int64
	prevN   int64 // the count of the window before win
	changed chan struct{}
}

type testRoundItem struct {
	it       RoundItem
	front    int64     // its number in the front line; 0 when not there
	frontAt  time.Time // when it joined the front line
	expireAt time.Time // zero: never
}

// OpenRound returns the TestRound of that name, creating it with period.
// It checks its arguments and options as the Redis round does, and refuses
// another period or TTL for an existing round unless RoundChangeSettings
// is given.
func (c TestConnection) OpenRound(name string, period time.Duration, opts ...RoundOption) (Round, error) {
	if why := validName(name); why != "" {
		return nil, argError("round name", name, why)
	}
	if err := checkRoundPeriod(period); err != nil {
		return nil, err
	}
	var o roundOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	period = period.Truncate(time.Millisecond)
	o.ttl = o.ttl.Truncate(time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rounds[name]
	if r == nil {
		r = &TestRound{name: name, period: period, ttl: o.ttl, now: time.Now, items: map[string]*testRoundItem{}, changed: make(chan struct{})}
		c.rounds[name] = r
		return r, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case o.change:
		if period < r.period {
			r.wake()
		}
		r.period = period
		if o.ttlSet {
			r.ttl = o.ttl
		}
	case period != r.period:
		return nil, argError("round period", period, fmt.Sprintf("round %q exists with period %s; open it with that period, or give RoundChangeSettings to change it", name, r.period))
	case o.ttlSet && o.ttl != r.ttl:
		return nil, argError("round TTL", o.ttl, fmt.Sprintf("round %q exists with TTL %s; open it with that TTL or without RoundTTL, or give RoundChangeSettings to change it", name, r.ttl))
	}
	return r, nil
}

// GetRound returns the TestRound of that name, or nil if it was never
// opened.
func (c TestConnection) GetRound(name string) *TestRound {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rounds[name]
}

func (c TestConnection) roundStats() map[string]RoundStat {
	c.mu.Lock()
	rounds := make([]*TestRound, 0, len(c.rounds))
	for _, r := range c.rounds {
		rounds = append(rounds, r)
	}
	c.mu.Unlock()
	if len(rounds) == 0 {
		return nil
	}
	out := make(map[string]RoundStat, len(rounds))
	for _, r := range rounds {
		out[r.name] = r.Stat()
	}
	return out
}

// String returns the round's name.
func (r *TestRound) String() string { return r.name }

// SetClock makes the round read the time from now instead of time.Now,
// so that a test can move it.
func (r *TestRound) SetClock(now func() time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = now
	r.wake()
}

// Items returns the round's items in the order they would be handed out
// (due or not), without handing them out.
func (r *TestRound) Items() []RoundItem {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep(r.clock())
	order := r.ordered()
	out := make([]RoundItem, len(order))
	for i, x := range order {
		out[i] = x.copy()
	}
	return out
}

// Stat returns the round's counts, as CollectStats reports them.
func (r *TestRound) Stat() RoundStat {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	r.sweep(now)
	s := RoundStat{Period: r.period, TTL: r.ttl, ItemCount: int64(len(r.items)), IssuedCount: r.issued, ExpiredCount: r.expired}
	for _, x := range r.items {
		if r.due(x, now) {
			s.DueCount++
			since := x.frontAt
			if x.front == 0 {
				since = x.it.LastIssued.Add(r.period)
			}
			s.OldestLag = max(s.OldestLag, now.Sub(since))
		}
	}
	w := now.UnixMilli() / roundRateWindow.Milliseconds()
	switch r.win {
	case w:
		s.IssuedPerSecond = float64(r.prevN) / roundRateWindow.Seconds()
	case w - 1:
		s.IssuedPerSecond = float64(r.winN) / roundRateWindow.Seconds()
	}
	return s
}

func (x *testRoundItem) copy() RoundItem {
	it := x.it
	it.Data = append([]byte(nil), x.it.Data...)
	return it
}

// clock is the round's time in whole milliseconds, as Redis keeps it.
func (r *TestRound) clock() time.Time { return time.UnixMilli(r.now().UnixMilli()) }

// wake ends the waits of Next calls; r.mu is held.
func (r *TestRound) wake() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// sweep removes the items whose time to live ran out; r.mu is held.
func (r *TestRound) sweep(now time.Time) {
	for id, x := range r.items {
		if !x.expireAt.IsZero() && !x.expireAt.After(now) {
			delete(r.items, id)
			r.expired++
		}
	}
}

func (r *TestRound) due(x *testRoundItem, now time.Time) bool {
	return x.front > 0 || now.Sub(x.it.LastIssued) >= r.period
}

// ordered returns the items in round order: the front line by number,
// then by last issue (ties by id, as Redis orders equal scores).
func (r *TestRound) ordered() []*testRoundItem {
	out := make([]*testRoundItem, 0, len(r.items))
	for _, x := range r.items {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case (a.front > 0) != (b.front > 0):
			return a.front > 0
		case a.front > 0:
			return a.front < b.front
		case !a.it.LastIssued.Equal(b.it.LastIssued):
			return a.it.LastIssued.Before(b.it.LastIssued)
		}
		return a.it.ID < b.it.ID
	})
	return out
}

// Add adds an item or renews an existing one, as Round.Add.
func (r *TestRound) Add(_ context.Context, id string, data []byte) (bool, error) {
	if err := checkRoundID(id); err != nil {
		return false, err
	}
	if err := checkPayloadSize("round item data", len(data), DefaultMaxPayloadSize); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	r.sweep(now)
	var expireAt time.Time
	if r.ttl > 0 {
		expireAt = now.Add(r.ttl)
	}
	if x := r.items[id]; x != nil {
		x.it.Data = append([]byte(nil), data...)
		x.expireAt = expireAt
		return false, nil
	}
	r.seq++
	r.items[id] = &testRoundItem{
		it:    RoundItem{ID: id, Data: append([]byte(nil), data...), Added: now},
		front: r.seq, frontAt: now, expireAt: expireAt,
	}
	r.wake()
	return true, nil
}

// Remove removes an item, as Round.Remove.
func (r *TestRound) Remove(_ context.Context, id string) (bool, error) {
	if err := checkRoundID(id); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep(r.clock())
	_, found := r.items[id]
	delete(r.items, id)
	return found, nil
}

// Get returns an item, as Round.Get.
func (r *TestRound) Get(_ context.Context, id string) (RoundItem, error) {
	if err := checkRoundID(id); err != nil {
		return RoundItem{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep(r.clock())
	x := r.items[id]
	if x == nil {
		return RoundItem{}, errorf("redq: round %q has no item %q: %w", r.name, id, ErrorNotFound)
	}
	return x.copy(), nil
}

// Len counts the items, as Round.Len.
func (r *TestRound) Len(context.Context) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep(r.clock())
	return int64(len(r.items)), nil
}

// Reissue puts an item back in the front line, as Round.Reissue.
func (r *TestRound) Reissue(_ context.Context, id string) (bool, error) {
	if err := checkRoundID(id); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	r.sweep(now)
	x := r.items[id]
	if x == nil {
		return false, nil
	}
	if x.front == 0 {
		r.seq++
		x.front, x.frontAt = r.seq, now
		r.wake()
	}
	return true, nil
}

// Next hands out the next due item, as Round.Next.
func (r *TestRound) Next(ctx context.Context, timeout time.Duration) (RoundItem, error) {
	items, err := r.NextBatch(ctx, 1, timeout)
	if err != nil {
		return RoundItem{}, err
	}
	return items[0], nil
}

// NextBatch hands out up to max due items, as Round.NextBatch.
func (r *TestRound) NextBatch(ctx context.Context, max int64, timeout time.Duration) ([]RoundItem, error) {
	if max < 1 {
		return nil, argError("max", max, "must be at least 1")
	}
	if timeout < 0 {
		return nil, argError("timeout", timeout, "must not be negative")
	}
	deadline := time.Now().Add(timeout)
	for {
		out, hint, changed := r.handOut(int(min(max, 1<<30)))
		if len(out) > 0 {
			return out, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, ErrorTimeout
		}
		wait := min(left, takeWaitCap)
		if hint > 0 {
			wait = min(wait, hint)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// handOut takes up to max due items and returns them, how long until the
// earliest item is due (0 when none is waiting), and the channel that is
// closed when an item may become due sooner.
func (r *TestRound) handOut(max int) ([]RoundItem, time.Duration, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	r.sweep(now)
	var out []RoundItem
	var hint time.Duration
	for _, x := range r.ordered() {
		if !r.due(x, now) {
			if len(out) == 0 {
				hint = x.it.LastIssued.Add(r.period).Sub(now)
			}
			break
		}
		if len(out) == max {
			break
		}
		x.front, x.frontAt = 0, time.Time{}
		x.it.LastIssued = now
		x.it.Issued++
		out = append(out, x.copy())
	}
	if n := int64(len(out)); n > 0 {
		r.issued += n
		w := now.UnixMilli() / roundRateWindow.Milliseconds()
		switch r.win {
		case w:
			r.winN += n
		case w - 1:
			r.win, r.prevN, r.winN = w, r.winN, n
		default:
			r.win, r.prevN, r.winN = w, 0, n
		}
	}
	return out, hint, r.changed
}

// reset forgets the round's items and counts.
func (r *TestRound) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = map[string]*testRoundItem{}
	r.issued, r.expired, r.win, r.winN, r.prevN = 0, 0, 0, 0, 0
}

var _ Round = (*TestRound)(nil)
