package redq

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// takeSlots numbers the fields of the replies hash that Take calls use, so
// that concurrent Takes on one handle keep their replies apart (see
// fetch.lua) and the number of fields stays bounded by the largest number
// of concurrent calls.
type takeSlots struct {
	mu   sync.Mutex
	free []*takeSlot
	n    int
}

type takeSlot struct {
	field string
	token uint64 // changes only after a call succeeded
}

func (s *takeSlots) get(handle int64) *takeSlot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := len(s.free); k > 0 {
		t := s.free[k-1]
		s.free = s.free[:k-1]
		return t
	}
	s.n++
	return &takeSlot{field: "t" + strconv.FormatInt(handle, 10) + "." + strconv.Itoa(s.n)}
}

func (s *takeSlots) put(t *takeSlot) {
	s.mu.Lock()
	s.free = append(s.free, t)
	s.mu.Unlock()
}

// takeWaitCap bounds one wait of Take on Redis, so that a cancelled context
// or a stop is noticed within it.
const takeWaitCap = time.Second

func (q *redisQueue) Take(ctx context.Context, timeout time.Duration) (Message, error) {
	ds, err := q.TakeBatch(ctx, 1, timeout)
	if err != nil {
		return nil, err
	}
	return ds[0], nil
}

func (q *redisQueue) TakeBatch(ctx context.Context, max int64, timeout time.Duration) (Deliveries, error) {
	if max < 1 {
		return nil, argError("max", max, "must be at least 1")
	}
	if timeout < 0 {
		return nil, argError("timeout", timeout, "must not be negative")
	}
	if q.takeStopped() {
		return nil, ErrorConsumingStopped
	}
	slot := q.takes.get(q.handle)
	defer q.takes.put(slot)
	var w *waiter // made when the call first has to wait
	defer func() {
		if w != nil {
			w.close()
		}
	}()
	deadline := time.Now().Add(timeout)
	for {
		var out Deliveries
		var hint int64
		for int64(len(out)) < max {
			reg, err := q.takeRegistration(ctx, deadline)
			if err == nil {
				err = q.register(ctx, reg)
			}
			if err != nil {
				if len(out) > 0 {
					return out, nil
				}
				return nil, errorf("redq: take from %q: %w", q.name, err)
			}
			sent := time.Now()
			want := min(max-int64(len(out)), fetchChunk)
			res, err := q.takeRetrying(ctx, reg, want, slot, deadline)
			if err != nil {
				if len(out) > 0 {
					return out, nil // they are this caller's now; the error comes again next call
				}
				if isLost(err) {
					// The registration is dead (the heartbeat loop replaces
					// it), or the queue's registration alone is gone: wait
					// for the verdict and take again, until the deadline.
					if q.awaitVerdict(ctx, reg, deadline) {
						q.forget(reg)
						continue
					}
					err = errorf("%w: %w", ErrorConnectionLost, err)
				}
				return nil, errorf("redq: take from %q: %w", q.name, err)
			}
			slot.token++
			for _, d := range q.deliveries(res, sent) {
				out = append(out, d)
			}
			hint = res.hint
			if int64(len(res.envs)) < want && hint != 0 {
				break
			}
		}
		if len(out) > 0 {
			return out, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, ErrorTimeout
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if q.takeStopped() {
			return nil, ErrorConsumingStopped
		}
		if hint != 0 {
			if w == nil {
				w = newWaiter(q.conn.client, q.keys.ready, true)
			}
			var err error
			switch {
			case hint < hintLimited:
				// the rate limit holds: sleep until a hand-out leaves its
				// window (a wait on ready would end at once)
				err = sleepCtx(ctx, min(waitFor(left, limitedWait(hint)), takeWaitCap))
			case hint == hintPaused:
				err = w.waitKey(ctx, q.keys.resume(), min(left, takeWaitCap), true)
			default:
				err = w.wait(ctx, min(waitFor(left, hint), takeWaitCap), true)
			}
			if err != nil {
				return nil, errorf("redq: take from %q: %w", q.name, err)
			}
		}
	}
}

// sleepCtx waits d; ctx's error when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// takeRetrying runs the fetch script under the slot's token, repeating it
// after Redis errors until the deadline (at least once more) or ctx ends:
// the repeat carries the same token, so deliveries the first try took but
// whose reply was lost come back to this call instead of waiting in this
// connection's storage for a later call on the same slot.
func (q *redisQueue) takeRetrying(ctx context.Context, reg *registration, n int64, slot *takeSlot, deadline time.Time) (taken, error) {
	for attempt := 1; ; attempt++ {
		t, err := q.takeRaw(ctx, reg, n, slot.field, slot.token, 0)
		q.conn.topologyChanged(err)
		if err == nil || isLost(err) || ctx.Err() != nil || (attempt > 1 && time.Now().After(deadline)) {
			return t, err
		}
		select {
		case <-ctx.Done():
			return taken{}, err
		case <-time.After(backoff(attempt, 100*time.Millisecond)):
		}
	}
}

// takeRegistration returns the connection's registration to take under,
// waiting while it is dead and not yet replaced (see registration), until
// the deadline (ErrorTimeout) or ctx ends.
func (q *redisQueue) takeRegistration(ctx context.Context, deadline time.Time) (*registration, error) {
	for {
		reg, _, changed := q.conn.usable()
		if !reg.dead.Load() {
			return reg, nil
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
			return nil, ErrorTimeout
		case <-changed:
			t.Stop()
		}
	}
}

// awaitVerdict is redisConnection.awaitVerdict for a Take, bounded by its
// deadline and ctx.
func (q *redisQueue) awaitVerdict(ctx context.Context, reg *registration, deadline time.Time) bool {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return q.conn.awaitVerdict(reg, dctx.Done())
}

func (q *redisQueue) takeStopped() bool {
	q.mu.Lock()
	stopped := q.state == stateStopped
	q.mu.Unlock()
	return stopped || q.conn.isStopped()
}
