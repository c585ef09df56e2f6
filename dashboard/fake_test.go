package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redq/redq"
)

// fakeSource is an in-memory Inspector for the handler's own logic: pages,
// CSRF, read-only mode and an outage that starts and ends between two
// requests. The real Inspector is exercised by the tests on Redis.
type fakeSource struct {
	mu         sync.Mutex
	down       error
	queues     map[string]*fakeQueue
	timers     map[string]redq.TimerStat
	rounds     map[string]redq.RoundStat
	conns      []redq.ConnectionInfo
	calls      []string // actions carried out
	historyErr error
}

type fakeQueue struct {
	info  redq.QueueInfo
	items map[redq.DeliveryState][]redq.DeliveryInfo
}

func newFakeSource() *fakeSource {
	return &fakeSource{queues: map[string]*fakeQueue{}, timers: map[string]redq.TimerStat{}, rounds: map[string]redq.RoundStat{}}
}

// add puts a delivery into queue in state, creating the queue.
func (f *fakeSource) add(queue string, d redq.DeliveryInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue(queue)
	d.Queue = queue
	if d.PayloadSize == 0 {
		d.PayloadSize = len(d.Payload)
	}
	q.items[d.State] = append(q.items[d.State], d)
}

func (f *fakeSource) queue(name string) *fakeQueue {
	q, ok := f.queues[name]
	if !ok {
		q = &fakeQueue{info: redq.QueueInfo{Name: name}, items: map[redq.DeliveryState][]redq.DeliveryInfo{}}
		f.queues[name] = q
	}
	return q
}

func (f *fakeSource) setDown(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = err
}

func (f *fakeSource) actions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeSource) info(q *fakeQueue) redq.QueueInfo {
	i := q.info
	i.Ready = int64(len(q.items[redq.StateReady]))
	i.Delayed = int64(len(q.items[redq.StateDelayed]))
	i.Rejected = int64(len(q.items[redq.StateRejected]))
	i.Unacked = int64(len(q.items[redq.StateUnacked]))
	i.KeyedPending = int64(len(q.items[redq.StateKeyed]))
	return i
}

func (f *fakeSource) Namespace() string { return "test" }

// Overview is the four reads of the fake together, failing as they do.
func (f *fakeSource) Overview(ctx context.Context) (redq.Overview, error) {
	var o redq.Overview
	var err error
	if o.Queues, err = f.Queues(ctx); err != nil {
		return redq.Overview{}, err
	}
	if o.Connections, err = f.Connections(ctx); err != nil {
		return redq.Overview{}, err
	}
	if o.Timers, err = f.Timers(ctx); err != nil {
		return redq.Overview{}, err
	}
	if o.Rounds, err = f.Rounds(ctx); err != nil {
		return redq.Overview{}, err
	}
	return o, nil
}

func (f *fakeSource) Queues(ctx context.Context) ([]redq.QueueInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return nil, f.down
	}
	var out []redq.QueueInfo
	for _, q := range f.queues {
		out = append(out, f.info(q))
	}
	slices.SortFunc(out, func(a, b redq.QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (f *fakeSource) Queue(ctx context.Context, name string) (redq.QueueInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return redq.QueueInfo{}, f.down
	}
	if strings.ContainsAny(name, " *") {
		return redq.QueueInfo{}, &redq.ArgumentError{Arg: "queue name", Value: name, Reason: "must not contain spaces"}
	}
	q, ok := f.queues[name]
	if !ok {
		return redq.QueueInfo{}, fmt.Errorf("queue %q: %w", name, redq.ErrorNotFound)
	}
	return f.info(q), nil
}

func (f *fakeSource) History(ctx context.Context, queue string, since time.Duration) ([]redq.RatePoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return nil, f.down
	}
	if f.historyErr != nil {
		return nil, f.historyErr
	}
	now := time.Now().Truncate(time.Minute)
	return []redq.RatePoint{
		{Minute: now.Add(-2 * time.Minute), Published: 120, Acked: 100, Rejected: 6},
		{Minute: now.Add(-time.Minute), Published: 60, Acked: 60, Rejected: 3},
	}, nil
}

func (f *fakeSource) Connections(ctx context.Context) ([]redq.ConnectionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return nil, f.down
	}
	return slices.Clone(f.conns), nil
}

func (f *fakeSource) List(ctx context.Context, queue string, o redq.ListOptions) (redq.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return redq.Page{}, f.down
	}
	q, ok := f.queues[queue]
	if !ok {
		return redq.Page{}, fmt.Errorf("queue %q: %w", queue, redq.ErrorNotFound)
	}
	if o.Cursor == "bad" {
		return redq.Page{}, &redq.ArgumentError{Arg: "cursor", Value: o.Cursor, Reason: "is not a cursor of this list"}
	}
	all := q.items[o.State]
	start := 0
	if o.Cursor != "" {
		_, _ = fmt.Sscan(o.Cursor, &start) // a bad cursor starts at 0
	}
	p := redq.Page{Total: int64(len(all))}
	for i := start; i < len(all) && len(p.Items) < o.Limit; i++ {
		p.Scanned++
		d := all[i]
		if o.Search != "" && !strings.HasPrefix(d.ID, o.Search) && !strings.Contains(string(d.Payload), o.Search) {
			continue
		}
		if o.MaxPayload >= 0 && len(d.Payload) > o.MaxPayload {
			d.Payload, d.Truncated = d.Payload[:o.MaxPayload], true
		}
		p.Items = append(p.Items, d)
		if len(p.Items) == o.Limit && i+1 < len(all) {
			p.Next = fmt.Sprint(i + 1)
		}
	}
	return p, nil
}

func (f *fakeSource) find(queue, id string) (*fakeQueue, redq.DeliveryState, int, error) {
	if f.down != nil {
		return nil, "", 0, f.down
	}
	if id == "" || strings.Trim(id, "0123456789abcdef") != "" {
		return nil, "", 0, &redq.ArgumentError{Arg: "delivery id", Value: id, Reason: "must be hexadecimal"}
	}
	q, ok := f.queues[queue]
	if !ok {
		return nil, "", 0, fmt.Errorf("queue %q: %w", queue, redq.ErrorNotFound)
	}
	for st, items := range q.items {
		for i, d := range items {
			if d.ID == id {
				return q, st, i, nil
			}
		}
	}
	return nil, "", 0, fmt.Errorf("delivery %s: %w", id, redq.ErrorNotFound)
}

func (f *fakeSource) Delivery(ctx context.Context, queue, id string) (redq.DeliveryInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, st, i, err := f.find(queue, id)
	if err != nil {
		return redq.DeliveryInfo{}, err
	}
	d := q.items[st][i]
	if len(d.Payload) > 1024 {
		d.Payload, d.Truncated = d.Payload[:1024], true
	}
	return d, nil
}

func (f *fakeSource) Payload(ctx context.Context, queue, id string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, st, i, err := f.find(queue, id)
	if err != nil {
		return nil, err
	}
	return q.items[st][i].Payload, nil
}

// move takes id out of one of states and, unless to is "", puts it in to.
func (f *fakeSource) move(queue, id string, states []redq.DeliveryState, to redq.DeliveryState, verb string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, st, i, err := f.find(queue, id)
	if err != nil {
		return err
	}
	if !slices.Contains(states, st) {
		return fmt.Errorf("delivery %s is %s: %w", id, st, redq.ErrorNotFound)
	}
	d := q.items[st][i]
	q.items[st] = slices.Delete(q.items[st], i, i+1)
	if to != "" {
		d.State = to
		q.items[to] = append(q.items[to], d)
	}
	f.calls = append(f.calls, verb+" "+queue+" "+id)
	return nil
}

func (f *fakeSource) Delete(ctx context.Context, queue, id string) error {
	return f.move(queue, id, []redq.DeliveryState{redq.StateReady, redq.StateDelayed, redq.StateRejected}, "", "delete")
}

func (f *fakeSource) Retry(ctx context.Context, queue, id string) error {
	return f.move(queue, id, []redq.DeliveryState{redq.StateDelayed, redq.StateRejected}, redq.StateReady, "retry")
}

func (f *fakeSource) byKey(queue, key, verb string, to redq.DeliveryState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return f.down
	}
	q, ok := f.queues[queue]
	if !ok {
		return fmt.Errorf("queue %q: %w", queue, redq.ErrorNotFound)
	}
	// A key's pending item may wait in keyed, delayed or ready.
	for _, st := range []redq.DeliveryState{redq.StateKeyed, redq.StateDelayed, redq.StateReady} {
		for i, d := range q.items[st] {
			if d.Key == key {
				q.items[st] = slices.Delete(q.items[st], i, i+1)
				if to != "" {
					d.State = to
					q.items[to] = append(q.items[to], d)
				}
				f.calls = append(f.calls, verb+" "+queue+" "+key)
				return nil
			}
		}
	}
	return fmt.Errorf("key %q: %w", key, redq.ErrorNotFound)
}

func (f *fakeSource) RunNow(ctx context.Context, queue, key string) error {
	return f.byKey(queue, key, "run-now", redq.StateReady)
}

func (f *fakeSource) Cancel(ctx context.Context, queue, key string) error {
	return f.byKey(queue, key, "cancel", "")
}

func (f *fakeSource) Purge(ctx context.Context, queue string, state redq.DeliveryState) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return 0, f.down
	}
	q, ok := f.queues[queue]
	if !ok {
		return 0, fmt.Errorf("queue %q: %w", queue, redq.ErrorNotFound)
	}
	n := int64(len(q.items[state]))
	delete(q.items, state)
	f.calls = append(f.calls, fmt.Sprintf("purge %s %s", queue, state))
	return n, nil
}

func (f *fakeSource) setPaused(queue string, paused bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return f.down
	}
	q, ok := f.queues[queue]
	if !ok {
		return fmt.Errorf("queue %q: %w", queue, redq.ErrorNotFound)
	}
	q.info.Paused = paused
	f.calls = append(f.calls, fmt.Sprintf("paused=%v %s", paused, queue))
	return nil
}

func (f *fakeSource) Pause(ctx context.Context, queue string) error { return f.setPaused(queue, true) }
func (f *fakeSource) Resume(ctx context.Context, queue string) error {
	return f.setPaused(queue, false)
}

func (f *fakeSource) Timers(ctx context.Context) (map[string]redq.TimerStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return nil, f.down
	}
	return f.timers, nil
}

func (f *fakeSource) Rounds(ctx context.Context) (map[string]redq.RoundStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return nil, f.down
	}
	return f.rounds, nil
}

var errFakeDown = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

var _ http.Handler = (*handler)(nil)

func (f *fakeSource) ListRound(ctx context.Context, round string, cursor string, limit int) (redq.RoundPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return redq.RoundPage{}, f.down
	}
	st, ok := f.rounds[round]
	if !ok {
		return redq.RoundPage{}, fmt.Errorf("round %q: %w", round, redq.ErrorNotFound)
	}
	p := redq.RoundPage{Total: st.ItemCount}
	for i := range min(int(st.ItemCount), limit) {
		p.Items = append(p.Items, redq.RoundItemInfo{ID: fmt.Sprint(i), Data: []byte("site-" + fmt.Sprint(i)), NextDue: time.Now().Add(time.Minute)})
	}
	return p, nil
}
