package redq

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Test doubles for users' unit tests: code that takes a Connection, Queue or
// Delivery can be tested without Redis.

// TestConnection is a Connection whose queues record what is published,
// and whose rounds are TestRounds.
type TestConnection struct {
	mu     *sync.Mutex
	queues map[string]*TestQueue
	timers map[string]*TestTimers
	rounds map[string]*TestRound
}

// NewTestConnection returns an empty TestConnection: a Connection in
// memory, without Redis, whose queues record what is published (see
// GetDeliveries). It cannot fail. For example:
//
//	conn := redq.NewTestConnection()
func NewTestConnection() TestConnection {
	return TestConnection{mu: &sync.Mutex{}, queues: map[string]*TestQueue{}, timers: map[string]*TestTimers{},
		rounds: map[string]*TestRound{}}
}

// OpenTimers returns the TestTimers of that name, creating it.
func (c TestConnection) OpenTimers(name string) (Timers, error) {
	if why := validName(name); why != "" {
		return nil, argError("timer set name", name, why)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.timers[name]
	if t == nil {
		t = &TestTimers{due: map[string]time.Time{}, changed: make(chan struct{})}
		c.timers[name] = t
	}
	return t, nil
}

// OpenSchedules refuses with an error matching ErrorNotRedis: a schedule
// set's guarantees (one delivery per tick across processes, by Redis's
// clock) are Redis's, and a test double would only pretend them. Test the
// code that consumes a schedule's deliveries with a TestQueue, and the
// schedules themselves on miniredis (OpenConnectionWithTestRedisClient).
func (c TestConnection) OpenSchedules(name string) (Schedules, error) {
	if why := validName(name); why != "" {
		return nil, argError("schedule set name", name, why)
	}
	return nil, errorf("redq: open schedules %q: %w", name, ErrorNotRedis)
}

// OpenQueue returns the TestQueue of that name, creating it. Options are
// checked and otherwise ignored.
func (c TestConnection) OpenQueue(name string, opts ...QueueOption) (Queue, error) {
	var o queueOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if why := validQueueName(name); why != "" {
		return nil, argError("queue name", name, why)
	}
	return c.GetQueue(name), nil
}

// GetQueue returns the TestQueue of that name, creating it.
func (c TestConnection) GetQueue(name string) *TestQueue {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[name]
	if q == nil {
		q = NewTestQueue(name)
		c.queues[name] = q
	}
	return q
}

// GetDeliveries returns the payloads published to the named queue.
func (c TestConnection) GetDeliveries(queueName string) []string {
	return c.GetQueue(queueName).Deliveries()
}

// Reset forgets everything published, and the items of every round.
func (c TestConnection) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range c.queues {
		q.Reset()
	}
	for _, r := range c.rounds {
		r.reset()
	}
}

// CollectStats returns the published counts as ready counts, each queue's
// paused state (see TestQueue.Pause), and the counts of every round.
func (c TestConnection) CollectStats(queueList []string) (Stats, error) {
	return c.CollectStatsContext(context.Background(), queueList)
}

// CollectStatsContext is CollectStats with a context.
func (c TestConnection) CollectStatsContext(_ context.Context, queueList []string) (Stats, error) {
	s := Stats{QueueStats: map[string]QueueStat{}, OtherConnections: map[string]bool{}}
	for _, name := range queueList {
		q := c.GetQueue(name)
		s.QueueStats[name] = QueueStat{ReadyCount: int64(len(q.Deliveries())), Paused: q.Paused(), Connections: map[string]ConnectionStat{}}
	}
	s.RoundStats = c.roundStats()
	return s, nil
}

// GetOpenQueues lists the queues opened so far.
func (c TestConnection) GetOpenQueues() ([]string, error) {
	return c.GetOpenQueuesContext(context.Background())
}

// GetOpenQueuesContext is GetOpenQueues with a context.
func (c TestConnection) GetOpenQueuesContext(context.Context) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.queues))
	for n := range c.queues {
		names = append(names, n)
	}
	return names, nil
}

// StopAllConsuming returns a closed channel.
func (c TestConnection) StopAllConsuming() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// TestQueue is a Queue that records published payloads in LastDeliveries.
// Consuming methods succeed and do nothing.
type TestQueue struct {
	name string
	mu   sync.Mutex
	// LastDeliveries holds the payloads published so far, oldest first.
	// Read it with Deliveries when other goroutines publish.
	LastDeliveries []string
	// keyed holds the pending keyed items by key (see Upsert), and
	// keyedWait when each was first upserted and the latest due time its
	// MaxWaits allow (zero: none).
	keyed     map[string]KeyedItem
	keyedWait map[string][2]time.Time
	paused    bool
}

func (q *TestQueue) String() string { return q.name }

// Deliveries returns a copy of the payloads published so far (an empty
// slice, not nil, when there are none, as rmq's).
func (q *TestQueue) Deliveries() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string{}, q.LastDeliveries...)
}

// Reset forgets the published payloads (LastDeliveries is an empty slice
// afterwards, as rmq's).
func (q *TestQueue) Reset() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.LastDeliveries = []string{}
}

// Publish records the payloads.
func (q *TestQueue) Publish(payload ...string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.LastDeliveries = append(q.LastDeliveries, payload...)
	return nil
}

// PublishBytes records the payloads.
func (q *TestQueue) PublishBytes(payload ...[]byte) error {
	for _, p := range payload {
		_ = q.Publish(string(p))
	}
	return nil
}

// PublishContext records the payloads.
func (q *TestQueue) PublishContext(_ context.Context, payload ...string) error {
	return q.Publish(payload...)
}

// PublishBytesContext records the payloads.
func (q *TestQueue) PublishBytesContext(_ context.Context, payload ...[]byte) error {
	return q.PublishBytes(payload...)
}

// Put records the payload. Options are checked as the real queue checks
// them (a bad one returns its *ArgumentError and records nothing) and
// otherwise ignored.
func (q *TestQueue) Put(_ context.Context, payload []byte, opts ...PublishOption) error {
	var o publishOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return err
		}
	}
	if o.keyedSet {
		return argError("publish option", "OnExisting/MaxWait", "applies to keyed deliveries only: use Upsert")
	}
	if o.group != "" && o.priority > 0 {
		return argError("priority", o.priority, "does not combine with Group: a group's line is first in, first out")
	}
	return q.Publish(string(payload))
}

// SetPushQueue does nothing.
func (q *TestQueue) SetPushQueue(Queue) {}

// SetPushQueueSameSlot checks as the real queue does (ErrorCrossSlot for
// queues in different cluster slots) and otherwise does nothing.
func (q *TestQueue) SetPushQueueSameSlot(pushQueue Queue) error {
	if pushQueue == nil {
		return nil
	}
	if p, ok := pushQueue.(*TestQueue); ok && keySlot(slotTag(q.name)) != keySlot(slotTag(p.name)) {
		return errorf("redq: push from %q to %q: %w", q.name, p.name, ErrorCrossSlot)
	}
	return nil
}

// Upsert keeps the key's pending item in memory, by the mode's rules:
// Created for a new key, then Updated (ReplaceAll, ReplacePayload) or Kept
// (KeepExisting). The due time is the local clock's plus the delay (or
// At), and never later than the item's first upsert plus the smallest
// MaxWait given. Nothing ever runs: read the items with Lookup. Options,
// keys and the payload's size are checked as the real queue checks them.
func (q *TestQueue) Upsert(_ context.Context, key string, payload []byte, opts ...PublishOption) (UpsertOutcome, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	var o publishOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return 0, err
		}
	}
	if o.group != "" {
		return 0, argError("group", o.group, "does not combine with Upsert: a key runs one delivery at a time")
	}
	now := time.Now()
	due := now.Add(o.delay)
	if !o.at.IsZero() {
		due = o.at
	}
	if o.maxWait > 0 && o.maxWait < due.Sub(now) {
		return 0, argError("MaxWait", o.maxWait, "must not be below the delay given")
	}
	if err := checkPayloadSize("payload", len(payload), DefaultMaxPayloadSize); err != nil {
		return 0, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.keyed == nil {
		q.keyed, q.keyedWait = map[string]KeyedItem{}, map[string][2]time.Time{}
	}
	item, ok := q.keyed[key]
	wait := q.keyedWait[key]
	if !ok {
		wait = [2]time.Time{now}
	}
	if limit := wait[0].Add(o.maxWait); o.maxWait > 0 && (wait[1].IsZero() || limit.Before(wait[1])) {
		wait[1] = limit
	}
	capped := func(due time.Time) time.Time {
		if !wait[1].IsZero() && due.After(wait[1]) {
			return wait[1]
		}
		return due
	}
	if !ok {
		q.keyed[key] = KeyedItem{Key: key, Payload: append([]byte(nil), payload...), Due: capped(due), Pending: true}
		q.keyedWait[key] = wait
		return Created, nil
	}
	item.Updates++
	if o.onExisting == KeepExisting {
		q.keyed[key] = item
		return Kept, nil
	}
	item.Payload = append([]byte(nil), payload...)
	if o.onExisting == ReplaceAll {
		item.Due = due
	}
	item.Due = capped(item.Due)
	q.keyed[key], q.keyedWait[key] = item, wait
	return Updated, nil
}

// Cancel forgets the key's pending item and reports whether there was one.
func (q *TestQueue) Cancel(_ context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.keyed[key]
	delete(q.keyed, key)
	delete(q.keyedWait, key)
	return ok, nil
}

// Lookup returns the key's pending item; ErrorNotFound when there is none.
func (q *TestQueue) Lookup(_ context.Context, key string) (KeyedItem, error) {
	if err := checkKey(key); err != nil {
		return KeyedItem{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	item, ok := q.keyed[key]
	if !ok {
		return KeyedItem{}, ErrorNotFound
	}
	return item, nil
}

// RunNow sets the pending item's due time to now.
func (q *TestQueue) RunNow(_ context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	item, ok := q.keyed[key]
	if ok {
		item.Due = time.Now()
		q.keyed[key] = item
	}
	return ok, nil
}

// StartConsuming does nothing.
func (q *TestQueue) StartConsuming(int64, time.Duration) error { return nil }

// StopConsuming returns a closed channel.
func (q *TestQueue) StopConsuming() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// AddConsumer does nothing and returns a name.
func (q *TestQueue) AddConsumer(tag string, _ Consumer) (string, error) { return tag, nil }

// AddConsumerFunc does nothing and returns a name.
func (q *TestQueue) AddConsumerFunc(tag string, _ ConsumerFunc) (string, error) { return tag, nil }

// AddBatchConsumer does nothing and returns a name.
func (q *TestQueue) AddBatchConsumer(tag string, _ int64, _ time.Duration, _ BatchConsumer) (string, error) {
	return tag, nil
}

// AddBatchConsumerFunc does nothing and returns a name.
func (q *TestQueue) AddBatchConsumerFunc(tag string, _ int64, _ time.Duration, _ BatchConsumerFunc) (string, error) {
	return tag, nil
}

// ReturnUnacked returns 0.
func (q *TestQueue) ReturnUnacked(int64) (int64, error) { return 0, nil }

// ReturnRejected returns 0.
func (q *TestQueue) ReturnRejected(int64) (int64, error) { return 0, nil }

// PurgeReady forgets the published payloads and returns how many.
func (q *TestQueue) PurgeReady() (int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := int64(len(q.LastDeliveries))
	q.LastDeliveries = []string{}
	return n, nil
}

// PurgeRejected returns 0.
func (q *TestQueue) PurgeRejected() (int64, error) { return 0, nil }

// Destroy purges the published payloads.
// Destroy purges the recorded payloads and ends a pause, as Destroy does
// in Redis.
func (q *TestQueue) Destroy() (int64, int64, error) {
	n, err := q.PurgeReady()
	q.mu.Lock()
	q.paused = false
	q.mu.Unlock()
	return n, 0, err
}

// Drain removes and returns up to count payloads, oldest first.
func (q *TestQueue) Drain(count int64) ([]string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(int(count), len(q.LastDeliveries))
	out := append([]string(nil), q.LastDeliveries[:n]...)
	q.LastDeliveries = q.LastDeliveries[n:]
	return out, nil
}

// Remove deletes recorded payloads equal to payload (all when count is 0).
func (q *TestQueue) Remove(payload string, count int64, _ bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := q.LastDeliveries[:0]
	var removed int64
	for _, p := range q.LastDeliveries {
		if p == payload && (count == 0 || removed < count) {
			removed++
			continue
		}
		kept = append(kept, p)
	}
	q.LastDeliveries = kept
	return nil
}

// RemoveBytes is Remove for a payload of bytes.
func (q *TestQueue) RemoveBytes(payload []byte, count int64, removeFromRejected bool) error {
	return q.Remove(string(payload), count, removeFromRejected)
}

// ReturnUnackedContext returns 0.
func (q *TestQueue) ReturnUnackedContext(context.Context, int64) (int64, error) { return 0, nil }

// ReturnRejectedContext returns 0.
func (q *TestQueue) ReturnRejectedContext(context.Context, int64) (int64, error) { return 0, nil }

// PurgeReadyContext is PurgeReady.
func (q *TestQueue) PurgeReadyContext(context.Context) (int64, error) { return q.PurgeReady() }

// PurgeRejectedContext returns 0.
func (q *TestQueue) PurgeRejectedContext(context.Context) (int64, error) { return 0, nil }

// DestroyContext is Destroy.
func (q *TestQueue) DestroyContext(context.Context) (int64, int64, error) { return q.Destroy() }

// DrainContext is Drain.
func (q *TestQueue) DrainContext(_ context.Context, count int64) ([]string, error) {
	return q.Drain(count)
}

// RemoveContext is Remove.
func (q *TestQueue) RemoveContext(_ context.Context, payload string, count int64, fromRejected bool) error {
	return q.Remove(payload, count, fromRejected)
}

// AddHandler does nothing, like AddConsumer.
func (q *TestQueue) AddHandler(tag string, _ Handler) (string, error) { return tag, nil }

// Take returns ErrorTimeout: a TestQueue holds no deliveries to take.
func (q *TestQueue) Take(context.Context, time.Duration) (Message, error) { return nil, ErrorTimeout }

// TakeBatch returns ErrorTimeout, like Take.
func (q *TestQueue) TakeBatch(context.Context, int64, time.Duration) (Deliveries, error) {
	return nil, ErrorTimeout
}

// State is what happened to a TestDelivery.
type State int

// The states of a TestDelivery.
const (
	Unacked State = iota
	Acked
	Rejected
	Pushed
	Released
)

// String returns the constant's name ("Unacked", "Acked", …), as rmq's
// does.
func (s State) String() string {
	switch s {
	case Unacked:
		return "Unacked"
	case Acked:
		return "Acked"
	case Rejected:
		return "Rejected"
	case Pushed:
		return "Pushed"
	case Released:
		return "Released"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// TestDelivery is a Delivery for unit tests of consumers: hand it to
// Consume and check State afterwards.
type TestDelivery struct {
	mu      sync.Mutex
	State   State
	payload string
	header  http.Header
	key     string
	// Attempt is what Attempts returns (1 when left at 0).
	Attempt int
	// ReleaseDelay is the delay the last Release was given.
	ReleaseDelay time.Duration
	// Touches counts the calls of Touch.
	Touches int
}

// NewTestDelivery returns a delivery whose payload is content: a string
// as it is, anything else as JSON (as rmq's does). Its verbs only record
// the state (see GetState). It cannot fail: content that does not marshal
// to JSON becomes its %v text.
func NewTestDelivery(content any) *TestDelivery {
	if s, ok := content.(string); ok {
		return NewTestDeliveryString(s)
	}
	b, err := json.Marshal(content)
	if err != nil {
		b = []byte(fmt.Sprintf("%v", content))
	}
	return NewTestDeliveryString(string(b))
}

// NewTestDeliveryString returns a delivery with that payload, whose verbs
// only record the state (see GetState). It cannot fail. For example:
//
//	d := redq.NewTestDeliveryString("payload")
func NewTestDeliveryString(payload string) *TestDelivery {
	return &TestDelivery{payload: payload}
}

// WithHeader sets the headers the delivery reports and returns it.
func (d *TestDelivery) WithHeader(h http.Header) *TestDelivery {
	d.header = h
	return d
}

// WithKey sets the key the delivery reports and returns it.
func (d *TestDelivery) WithKey(key string) *TestDelivery {
	d.key = key
	return d
}

// Key returns the key set with WithKey, or "".
func (d *TestDelivery) Key() string { return d.key }

// Payload returns the payload.
func (d *TestDelivery) Payload() string { return d.payload }

// Header returns the headers set with WithHeader.
func (d *TestDelivery) Header() http.Header { return d.header }

// Ack marks the delivery acked; ErrorNotFound if it was settled already.
func (d *TestDelivery) Ack() error { return d.settle(Acked) }

// Reject marks the delivery rejected; ErrorNotFound if settled already.
func (d *TestDelivery) Reject() error { return d.settle(Rejected) }

// Push marks the delivery pushed; ErrorNotFound if settled already.
func (d *TestDelivery) Push() error { return d.settle(Pushed) }

// AckContext is Ack.
func (d *TestDelivery) AckContext(context.Context) error { return d.Ack() }

// RejectContext is Reject.
func (d *TestDelivery) RejectContext(context.Context) error { return d.Reject() }

// PushContext is Push.
func (d *TestDelivery) PushContext(context.Context) error { return d.Push() }

// ID returns a fixed id.
func (d *TestDelivery) ID() string { return "00000000000000000000000000000000" }

// Attempts returns Attempt, or 1 when it is 0.
func (d *TestDelivery) Attempts() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return max(1, d.Attempt)
}

// PublishedAt returns the zero time.
func (d *TestDelivery) PublishedAt() time.Time { return time.Time{} }

// Release marks the delivery released and records the delay; ErrorNotFound
// if it was settled already.
func (d *TestDelivery) Release(_ context.Context, delay time.Duration) error {
	if delay < 0 || delay > MaxDelay {
		return argError("release delay", delay, "must be between 0 and "+MaxDelay.String())
	}
	if err := d.settle(Released); err != nil {
		return err
	}
	d.mu.Lock()
	d.ReleaseDelay = delay
	d.mu.Unlock()
	return nil
}

// Touch counts the call; ErrorNotFound if the delivery was settled.
func (d *TestDelivery) Touch(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.State != Unacked {
		return ErrorNotFound
	}
	d.Touches++
	return nil
}

// GetState returns the state, safe to call from any goroutine.
func (d *TestDelivery) GetState() State {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.State
}

func (d *TestDelivery) settle(s State) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.State != Unacked {
		return ErrorNotFound
	}
	d.State = s
	return nil
}

var (
	_ Connection = TestConnection{}
	_ Queue      = (*TestQueue)(nil)
	_ Message    = (*TestDelivery)(nil)
	_ Connection = (*redisConnection)(nil)
	_ Queue      = (*redisQueue)(nil)
	_ Message    = (*redisDelivery)(nil)
)

// TestTimers is an in-memory Timers by the local clock, for unit tests of
// code that sets timers and handles their fires.
type TestTimers struct {
	mu      sync.Mutex
	due     map[string]time.Time
	changed chan struct{} // closed and replaced on every change
}

func (t *TestTimers) changedLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// Set creates or moves the timer of key.
func (t *TestTimers) Set(_ context.Context, key string, d time.Duration) error {
	return t.set(key, Delay(d), false, nil)
}

// SetAt creates or moves the timer of key to at.
func (t *TestTimers) SetAt(_ context.Context, key string, at time.Time) error {
	return t.set(key, At(at), false, nil)
}

// Create creates the timer of key when none is pending.
func (t *TestTimers) Create(_ context.Context, key string, d time.Duration) (bool, error) {
	var created bool
	err := t.set(key, Delay(d), true, &created)
	return created, err
}

// set checks key and when (Delay or At) as the real timers do.
func (t *TestTimers) set(key string, when PublishOption, onlyNew bool, created *bool) error {
	if err := checkKey(key); err != nil {
		return err
	}
	var o publishOptions
	if err := when(&o); err != nil {
		return err
	}
	at := time.Now().Add(o.delay)
	if !o.at.IsZero() {
		at = o.at
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.due[key]; ok && onlyNew {
		return nil
	}
	t.due[key] = at
	if created != nil {
		*created = true
	}
	t.changedLocked()
	return nil
}

// Cancel removes the pending timer of key.
func (t *TestTimers) Cancel(_ context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.due[key]
	delete(t.due, key)
	return ok, nil
}

// Lookup returns the due time of key's pending timer.
func (t *TestTimers) Lookup(_ context.Context, key string) (time.Time, error) {
	if err := checkKey(key); err != nil {
		return time.Time{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.due[key]
	if !ok {
		return time.Time{}, ErrorNotFound
	}
	return at, nil
}

// Next waits up to timeout for the earliest timer to be due (by the
// local clock) and returns its fire, as Timers.Next: ErrorTimeout when
// none fired in time, or ctx's error.
func (t *TestTimers) Next(ctx context.Context, timeout time.Duration) (Fire, error) {
	if timeout < 0 {
		return nil, argError("timeout", timeout, "must not be negative")
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		var key string
		var at time.Time
		for k, d := range t.due {
			if key == "" || d.Before(at) {
				key, at = k, d
			}
		}
		if key != "" && !at.After(time.Now()) {
			delete(t.due, key)
			t.mu.Unlock()
			return &TestFire{timers: t, key: key, due: at}, nil
		}
		changed := t.changed
		t.mu.Unlock()
		var wake <-chan time.Time
		if key != "" {
			wake = time.After(time.Until(at))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, ErrorTimeout
		case <-changed:
		case <-wake:
		}
	}
}

// NextBatch waits as Next does for the first fire, then adds every other
// timer that is due (earliest first), up to max.
func (t *TestTimers) NextBatch(ctx context.Context, max int64, timeout time.Duration) (Fires, error) {
	if max < 1 {
		return nil, argError("max", max, "must be at least 1")
	}
	f, err := t.Next(ctx, timeout)
	if err != nil {
		return nil, err
	}
	out := Fires{f}
	for int64(len(out)) < max {
		f, err := t.Next(ctx, 0)
		if err != nil {
			break
		}
		out = append(out, f)
	}
	return out, nil
}

// TestFire is a fire of a TestTimers timer.
type TestFire struct {
	timers *TestTimers
	key    string
	due    time.Time
	mu     sync.Mutex
	// State is Unacked until the fire is acked or released.
	State State
}

// Key returns the timer's key.
func (f *TestFire) Key() string { return f.key }

// Due returns when the timer was due.
func (f *TestFire) Due() time.Time { return f.due }

// Ack marks the fire acked; ErrorNotFound if it was settled already.
func (f *TestFire) Ack(context.Context) error { return f.settle(Acked) }

// Release sets the timer again after delay, unless one of the key is
// pending.
func (f *TestFire) Release(_ context.Context, delay time.Duration) error {
	if delay < 0 || delay > MaxDelay {
		return argError("release delay", delay, "must be between 0 and "+MaxDelay.String())
	}
	if err := f.settle(Released); err != nil {
		return err
	}
	_, err := f.timers.Create(context.Background(), f.key, delay)
	return err
}

func (f *TestFire) settle(s State) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.State != Unacked {
		return ErrorNotFound
	}
	f.State = s
	return nil
}

var (
	_ Timers = (*TestTimers)(nil)
	_ Fire   = (*TestFire)(nil)
	_ Timers = (*redisTimers)(nil)
	_ Fire   = redisFire{}
)

// Pause records that the queue is paused (see Paused). The test double
// has no consumers, so nothing else changes: Take still returns
// ErrorTimeout.
func (q *TestQueue) Pause(context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.paused = true
	return nil
}

// Resume records that the queue is no longer paused.
func (q *TestQueue) Resume(context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.paused = false
	return nil
}

// Paused reports whether the queue was paused (Pause) and not resumed
// since.
func (q *TestQueue) Paused() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.paused
}
