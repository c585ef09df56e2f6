package redq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNotImplemented is returned by the Inspector methods that are not
// built yet.
var errNotImplemented = errors.New("redq: not implemented yet")

// Inspector reads and manages the queues, connections, timers and rounds of
// one namespace without consuming: it lists deliveries in every state,
// looks one up by id, and acts on one (delete, retry, run now, cancel), on a
// state (purge) or on a queue (pause, resume). It registers no connection
// and writes nothing to Redis until an action method is called. An
// Inspector is safe for concurrent use.
type Inspector struct {
	client redis.UniversalClient
	opts   options
	keys   globalKeys
}

// NewInspector returns an Inspector on client for the namespace set by
// WithNamespace (default "redq", as for connections); other options are
// accepted and ignored. It registers nothing and writes nothing until an
// action method is called. A nil client or a bad option returns an
// *ArgumentError.
func NewInspector(client redis.UniversalClient, opts ...Option) (*Inspector, error) {
	if client == nil {
		return nil, argError("client", nil, "must not be nil")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Inspector{client: client, opts: o, keys: newGlobalKeys(o.namespace)}, nil
}

// Namespace returns the namespace the Inspector reads.
func (i *Inspector) Namespace() string { return i.opts.namespace }

// DeliveryState names where a delivery is: ready, delayed, rejected,
// unacked (held by a connection), or keyed (the pending item of a key).
type DeliveryState string

// The states a delivery can be listed in.
const (
	// StateReady is the ready lists (every priority), waiting for a
	// consumer.
	StateReady DeliveryState = "ready"
	// StateDelayed is the deliveries waiting for their due time.
	StateDelayed DeliveryState = "delayed"
	// StateRejected is the rejected deliveries (dead letters).
	StateRejected DeliveryState = "rejected"
	// StateUnacked is the deliveries taken by a connection and not yet
	// settled, per connection (ListOptions.Connection) or all.
	StateUnacked DeliveryState = "unacked"
	// StateKeyed is the pending keyed items (see Queue.Upsert), by key.
	StateKeyed DeliveryState = "keyed"
)

// DeliveryStates lists the valid states, in the order a dashboard shows
// them.
func DeliveryStates() []DeliveryState {
	return []DeliveryState{StateReady, StateDelayed, StateUnacked, StateRejected, StateKeyed}
}

// valid reports whether s is one of DeliveryStates.
func (s DeliveryState) valid() bool {
	for _, v := range DeliveryStates() {
		if s == v {
			return true
		}
	}
	return false
}

// DeliveryInfo is a snapshot of one delivery, as an Inspector reads it.
type DeliveryInfo struct {
	// ID is the delivery's id in hex, as Delivery.ID returns it.
	ID string
	// Queue is the queue's name.
	Queue string
	// State is where the delivery was found.
	State DeliveryState
	// Connection is the connection holding an unacked delivery.
	Connection string
	// Key is the key of a keyed item.
	Key string
	// Payload is the payload, cut to at most ListOptions.MaxPayload bytes
	// (default 1024).
	Payload []byte
	// PayloadSize is the full payload's size in bytes.
	PayloadSize int
	// Truncated is true when Payload is shorter than the payload.
	Truncated bool
	// Header holds the delivery's headers (nil: none).
	Header http.Header
	// Attempts counts how often the delivery went back to ready after it
	// was taken.
	Attempts int
	// Priority is the delivery's priority level (0..MaxPriority).
	Priority int
	// DueAt is when a delayed delivery or keyed item becomes due; zero
	// otherwise.
	DueAt time.Time
	// PublishedAt is when the delivery was published (from its id).
	PublishedAt time.Time
	// ExpireAt is when the delivery is dropped unless taken; zero: no TTL.
	ExpireAt time.Time
	// Reason is why the delivery was rejected (its Redq-Error header), if
	// known.
	Reason string
}

// Default and maximum page sizes and payload cut of Inspector.List.
const (
	// DefaultListLimit is the page size when ListOptions.Limit is 0.
	DefaultListLimit = 50
	// MaxListLimit is the largest page size.
	MaxListLimit = 1000
	// DefaultMaxPayload is the payload cut when ListOptions.MaxPayload
	// is 0.
	DefaultMaxPayload = 1024
	// MaxSearchScan is how many entries one List call with a Search
	// examines at most; the next page goes on from there.
	MaxSearchScan = 10000
)

// ListOptions selects a page of Inspector.List.
type ListOptions struct {
	// State is the state to list (required).
	State DeliveryState
	// Connection limits StateUnacked to one connection; "" lists every
	// connection's.
	Connection string
	// Cursor is "" for the first page, and a Page.Next otherwise.
	Cursor string
	// Limit is the page size. Default: 50 (DefaultListLimit); at most
	// 1000 (MaxListLimit).
	Limit int
	// MaxPayload cuts each payload to this many bytes. Default: 1024
	// (DefaultMaxPayload); -1: the whole payload.
	MaxPayload int
	// Search keeps the deliveries whose payload contains it or whose id
	// starts with it. A call examines at most MaxSearchScan entries (see
	// Page.Scanned) and returns a cursor to go on from there.
	Search string
}

// Page is one page of Inspector.List.
type Page struct {
	// Items are the deliveries of the page.
	Items []DeliveryInfo
	// Next is the cursor of the next page; "" when there is none.
	Next string
	// Total is how many deliveries are in that state (for a pager).
	Total int64
	// Scanned is how many entries were examined.
	Scanned int
}

// QueueInfo is a snapshot of one queue's counts and state.
type QueueInfo struct {
	// Name is the queue's name.
	Name string
	// Ready, Delayed, Unacked and Rejected count the deliveries in each
	// state.
	Ready, Delayed, Unacked, Rejected int64
	// KeyedPending counts the keys with a pending item.
	KeyedPending int64
	// Paused is true while the queue is paused (see Queue.Pause).
	Paused bool
	// Consumers counts the consumers of every connection; Connections
	// the connections registered for the queue.
	Consumers, Connections int64
	// Published, Acked, Rejects and Retried are totals kept in Redis
	// since the queue was created.
	Published, Acked, Rejects, Retried int64
}

// RatePoint is one minute of a queue's history, kept in Redis for at least
// the last hour.
type RatePoint struct {
	// Minute is the start of the minute (Redis's clock).
	Minute time.Time
	// Published, Acked, Rejected and Retried count what happened in that
	// minute.
	Published, Acked, Rejected, Retried int64
}

// ConnectionInfo is a snapshot of one registered connection.
type ConnectionInfo struct {
	// Name is the connection's name.
	Name string
	// State is "active", "stopped" (StopAllConsuming) or "dead" (its
	// heartbeat is gone; a cleaner will return what it holds).
	State string
	// HeartbeatAge is how long ago the heartbeat was refreshed; -1 when
	// there is no heartbeat.
	HeartbeatAge time.Duration
	// Unacked counts the deliveries the connection holds, per queue.
	Unacked map[string]int64
	// Consumers counts the connection's consumers, per queue.
	Consumers map[string]int64
}

// RoundItemInfo is a snapshot of one item of a round.
type RoundItemInfo struct {
	// ID is the item's id.
	ID string
	// Data is the item's data.
	Data []byte
	// Added is when the item was added; LastIssued when it was last
	// handed out (zero: never); NextDue when it is due again.
	Added, LastIssued, NextDue time.Time
	// Issued counts the hand-outs of the item.
	Issued int64
	// ExpireAt is when the item's time to live runs out; zero: none.
	ExpireAt time.Time
}

// RoundPage is one page of Inspector.ListRound.
type RoundPage struct {
	// Items are the round's items, in the order they are handed out.
	Items []RoundItemInfo
	// Next is the cursor of the next page; "" when there is none.
	Next string
	// Total is how many items the round holds.
	Total int64
}

// Queues returns every open queue of the namespace, sorted by name, in a
// constant number of round trips.
func (i *Inspector) Queues(ctx context.Context) ([]QueueInfo, error) {
	return nil, errNotImplemented
}

// Queue returns one queue; an error matching ErrorNotFound when no queue of
// that name is open.
func (i *Inspector) Queue(ctx context.Context, name string) (QueueInfo, error) {
	return QueueInfo{}, errNotImplemented
}

// History returns a queue's per-minute counts over the last since (at most
// an hour is kept), oldest first, one point per minute.
func (i *Inspector) History(ctx context.Context, queue string, since time.Duration) ([]RatePoint, error) {
	return nil, errNotImplemented
}

// Connections returns every registered connection, sorted by name.
func (i *Inspector) Connections(ctx context.Context) ([]ConnectionInfo, error) {
	return nil, errNotImplemented
}

// Stats returns what CollectStats returns, without a connection; no queues
// means every open queue.
func (i *Inspector) Stats(ctx context.Context, queues ...string) (Stats, error) {
	return Stats{}, errNotImplemented
}

// List returns one page of a queue's deliveries in the state o.State.
func (i *Inspector) List(ctx context.Context, queue string, o ListOptions) (Page, error) {
	if !o.State.valid() {
		return Page{}, argError("state", string(o.State), fmt.Sprintf("must be one of %v", DeliveryStates()))
	}
	return Page{}, errNotImplemented
}

// Delivery returns the delivery with that id (hex, as Delivery.ID), with
// its whole payload; an error matching ErrorNotFound when the queue has
// none.
func (i *Inspector) Delivery(ctx context.Context, queue, id string) (DeliveryInfo, error) {
	return DeliveryInfo{}, errNotImplemented
}

// Payload returns the whole payload of the delivery with that id.
func (i *Inspector) Payload(ctx context.Context, queue, id string) ([]byte, error) {
	return nil, errNotImplemented
}

// Delete removes a ready, delayed or rejected delivery by id.
func (i *Inspector) Delete(ctx context.Context, queue, id string) error {
	return errNotImplemented
}

// Retry moves a rejected or delayed delivery to ready now.
func (i *Inspector) Retry(ctx context.Context, queue, id string) error {
	return errNotImplemented
}

// RunNow makes the pending item of a key due now.
func (i *Inspector) RunNow(ctx context.Context, queue, key string) error {
	return errNotImplemented
}

// Cancel removes the pending item of a key.
func (i *Inspector) Cancel(ctx context.Context, queue, key string) error {
	return errNotImplemented
}

// Purge deletes every ready, delayed or rejected delivery of a queue and
// returns how many.
func (i *Inspector) Purge(ctx context.Context, queue string, state DeliveryState) (int64, error) {
	return 0, errNotImplemented
}

// Pause pauses a queue (see Queue.Pause).
func (i *Inspector) Pause(ctx context.Context, queue string) error {
	return errNotImplemented
}

// Resume resumes a paused queue (see Queue.Resume).
func (i *Inspector) Resume(ctx context.Context, queue string) error {
	return errNotImplemented
}

// Timers returns the counts of every timer set of the namespace.
func (i *Inspector) Timers(ctx context.Context) (map[string]TimerStat, error) {
	return nil, errNotImplemented
}

// Rounds returns the counts of every round of the namespace.
func (i *Inspector) Rounds(ctx context.Context) (map[string]RoundStat, error) {
	return nil, errNotImplemented
}

// ListRound returns one page of a round's items, in the order they are
// handed out; cursor "" is the first page.
func (i *Inspector) ListRound(ctx context.Context, round string, cursor string, limit int) (RoundPage, error) {
	return RoundPage{}, errNotImplemented
}
