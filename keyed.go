package redq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keyed deliveries: a delivery with a key, of which a queue holds at most
// one pending item and runs at most one delivery at a time. Upsert creates
// the key's pending item or updates it in place (debounce, throttle,
// dedupe); an upsert while the key runs parks a successor that runs after
// it. Keyed and plain deliveries share a queue, its priorities, consumers,
// stats, cleaner and rejected list, and a keyed delivery is settled with
// the usual verbs. See the README's "Keyed deliveries and timers".

// UpsertMode says what Upsert does when the key already has a pending item
// (see OnExisting).
type UpsertMode int

const (
	// ReplaceAll gives the pending item the new payload, headers and
	// options and the new due time: every upsert postpones the run
	// (debounce), up to MaxWait. It is the default.
	ReplaceAll UpsertMode = iota
	// ReplacePayload gives the pending item the new payload, headers and
	// options and keeps its due time: it runs when first planned, with the
	// latest data (throttle).
	ReplacePayload
	// KeepExisting leaves the pending item as it is: the upsert is dropped
	// as a duplicate (dedupe). It still creates an item when the key has
	// none, and parks one when the key runs and has no successor.
	KeepExisting
)

// String returns the mode's name.
func (m UpsertMode) String() string {
	switch m {
	case ReplaceAll:
		return "ReplaceAll"
	case ReplacePayload:
		return "ReplacePayload"
	case KeepExisting:
		return "KeepExisting"
	}
	return "UpsertMode(" + strconv.Itoa(int(m)) + ")"
}

// code is the mode as the scripts read it.
func (m UpsertMode) code() string { return [...]string{"A", "P", "K"}[m] }

// UpsertOutcome is what an Upsert did.
type UpsertOutcome int

const (
	// Created: the key had no pending item; the upsert created one.
	Created UpsertOutcome = iota + 1
	// Updated: the key's pending item was updated in place (ReplaceAll or
	// ReplacePayload); it keeps its delivery id.
	Updated
	// Kept: the key's pending item (or parked successor) stays as it was
	// (KeepExisting).
	Kept
	// Queued: a delivery of the key is running; the upsert created or
	// updated the successor parked behind it, which becomes due once the
	// running delivery is settled, and not before its own due time.
	Queued
)

// String returns the outcome's name.
func (o UpsertOutcome) String() string {
	switch o {
	case Created:
		return "Created"
	case Updated:
		return "Updated"
	case Kept:
		return "Kept"
	case Queued:
		return "Queued"
	}
	return "UpsertOutcome(" + strconv.Itoa(int(o)) + ")"
}

// MaxKeyLength bounds the length of a key in bytes.
const MaxKeyLength = 1024

// OnExisting sets what Upsert does when the key already has a pending item
// (or a parked successor): ReplaceAll (the default), ReplacePayload or
// KeepExisting. It applies to Upsert only: Put refuses it. In
// WithPublishDefaults it becomes the handle's default for Upsert.
func OnExisting(mode UpsertMode) PublishOption {
	return func(o *publishOptions) error {
		if mode < ReplaceAll || mode > KeepExisting {
			return argError("OnExisting mode", mode, "must be ReplaceAll, ReplacePayload or KeepExisting")
		}
		o.onExisting, o.keyedSet = mode, true
		return nil
	}
}

// MaxWait bounds how far upserts may postpone a key's pending item: its
// due time never moves past the item's first upsert plus d, however often
// it is postponed, so a key whose events never calm down still runs at
// least every d. d must be between 1ms and MaxDelay, and at least the delay
// given. It applies to Upsert only: Put refuses it.
func MaxWait(d time.Duration) PublishOption {
	return func(o *publishOptions) error {
		if d < time.Millisecond || d > MaxDelay {
			return argError("MaxWait", d, "must be between 1ms and "+MaxDelay.String())
		}
		o.maxWait, o.keyedSet = d, true
		return nil
	}
}

// KeyedItem is what Lookup finds for a key.
type KeyedItem struct {
	Key string
	// Payload is the pending item's payload; when the key only runs, the
	// running delivery's. It is bytes, as Put and Upsert take them and as
	// RoundItem.Data is; Delivery.Payload returns a string because that is
	// rmq's interface, which redq keeps so that rmq consumers compile.
	Payload []byte
	// Due is when the pending item becomes due, by Redis's clock (zero
	// when nothing is pending). A parked successor becomes due at Due or
	// when the running delivery is settled, whichever is later.
	Due time.Time
	// Running is true while a delivery of the key is taken (by a consumer,
	// a handler or Take) and not yet settled.
	Running bool
	// Pending is true when the key has a pending item: waiting for its due
	// time or a consumer, or parked behind the running delivery.
	Pending bool
	// Updates counts the upserts merged into the pending item after the one
	// that created it (Updated and Kept outcomes).
	Updates int64
}

// checkKey refuses a key that cannot be used. Any bytes are stored as they
// are (NUL and the scripts' delimiters included).
func checkKey(key string) error {
	switch {
	case key == "":
		return argError("key", key, "must not be empty")
	case len(key) > MaxKeyLength:
		return argError("key", key, fmt.Sprintf("must be at most %d bytes, is %d", MaxKeyLength, len(key)))
	}
	return nil
}

func (q *redisQueue) Upsert(ctx context.Context, key string, payload []byte, opts ...PublishOption) (UpsertOutcome, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	o := q.defaults
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return 0, err
		}
	}
	if o.group != "" {
		return 0, argError("group", o.group, "does not combine with Upsert: a key runs one delivery at a time")
	}
	delay := o.delay
	if !o.at.IsZero() {
		delay = max(0, time.Until(o.at))
	}
	if o.maxWait > 0 && o.maxWait < delay {
		return 0, argError("MaxWait", o.maxWait, "must not be below the delay given ("+delay.String()+")")
	}
	if err := checkPayloadSize("payload", len(payload), q.conn.opts.maxPayloadSize); err != nil {
		return 0, err
	}
	m := meta{priority: o.priority, ttr: o.ttr, ttl: o.ttl, header: o.header, key: key}
	env, err := encodeWithID(string(q.conn.ids.next(make([]byte, 0, idLen), time.Now())), m, payload)
	if err != nil {
		return 0, argError("header", o.header, err.Error())
	}
	var at int64
	if !o.at.IsZero() {
		at = max(1, o.at.UnixMilli())
	}
	out, err := q.keyedCall(ctx, "upsert", scripts.upsert, key, o.onExisting.code(), ceilMs(o.delay), at, ceilMs(o.maxWait), env)
	if err != nil {
		return 0, err
	}
	if out < int64(Created) || out > int64(Queued) {
		return 0, errorf("redq: upsert %q on %q: %w %d", key, q.name, errBadReply, out)
	}
	return UpsertOutcome(out), nil
}

func (q *redisQueue) Cancel(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	out, err := q.keyedCall(ctx, "cancel", scripts.keyedCancel, key)
	return out == 1, err
}

func (q *redisQueue) RunNow(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	out, err := q.keyedCall(ctx, "run now", scripts.keyedRunNow, key)
	return out == 1, err
}

func (q *redisQueue) Lookup(ctx context.Context, key string) (KeyedItem, error) {
	if err := checkKey(key); err != nil {
		return KeyedItem{}, err
	}
	v, err := scripts.keyedLookup.Run(ctx, q.conn.client, q.keys.block0(), key).Slice()
	if err == nil && len(v) == 2 {
		// the key runs on a connection whose storage the call did not
		// declare: ask again with it (the key may have moved meanwhile;
		// a second miss is reported as a bad reply, below)
		if conn, ok := v[1].(string); ok {
			v, err = scripts.keyedLookup.Run(ctx, q.conn.client, q.keys.scriptKeys("", nil, q.keys.connKeys(conn)), key).Slice()
		}
	}
	if err != nil {
		return KeyedItem{}, errorf("redq: lookup %q on %q: %w", key, q.name, err)
	}
	if len(v) != 4 {
		return KeyedItem{}, errorf("redq: lookup %q on %q: %w %v", key, q.name, errBadReply, v)
	}
	pending, _ := v[0].(int64)
	running, _ := v[1].(int64)
	env, _ := v[2].(string)
	updates, _ := v[3].(int64)
	if pending == 0 && running == 0 {
		return KeyedItem{}, errorf("redq: lookup %q on %q: %w", key, q.name, ErrorNotFound)
	}
	item := KeyedItem{Key: key, Running: running == 1, Pending: pending == 1, Updates: updates}
	if env != "" {
		e, ok := decodeEnvelope(env)
		if !ok {
			return KeyedItem{}, errorf("redq: lookup %q on %q: %w: the item's envelope does not parse", key, q.name, errBadReply)
		}
		item.Payload = []byte(e.payload)
		if item.Pending {
			item.Due = time.UnixMilli(e.due)
		}
	}
	return item, nil
}

// keyedCall runs one of the keyed scripts that take a token and the key
// (and args), hold a call slot's record as their own key and answer a number, once per token however often it is sent (see
// upsert.lua). Calls of many goroutines share pipelines.
func (q *redisQueue) keyedCall(ctx context.Context, verb string, script *redis.Script, key string, args ...any) (int64, error) {
	v, err := q.conn.keyed.call(ctx, func(field, token string) scriptCall {
		return scriptCall{script, q.keys.scriptKeys(q.keys.published(q.conn.Name(), field), nil),
			append([]any{token, key}, args...)}
	})
	if err != nil {
		return 0, errorf("redq: %s %q on %q: %w", verb, key, q.name, err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, errorf("redq: %s %q on %q: %w %v", verb, key, q.name, errBadReply, v)
	}
	return n, nil
}
