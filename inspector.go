package redq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	// name and tokens name the Inspector's keyed calls (see keyedCall).
	name   string
	tokens atomic.Int64
	// regs is the connections registered per queue at the last Overview,
	// its guess of the unacked counts to read (see unackedGuess).
	regsMu sync.Mutex
	regs   map[string][]string
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
	return &Inspector{client: client, opts: o, keys: newGlobalKeys(o.namespace), name: inspectorName()}, nil
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
	// Group is the group of a grouped delivery (see Group); "" for others.
	Group string
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
	// was taken (released for a retry, its lease lost, its connection
	// dead): the dashboard and the command show it as "retried". While a
	// consumer holds it, its Message.Attempts is one more.
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
	// RateLimit is the queue's rate limit (see WithRateLimit); zero when
	// it has none.
	RateLimit RateLimit
	// GroupsPending and GroupsRunning count the groups with pending
	// deliveries and with deliveries in flight (see Group);
	// GroupConcurrency is the queue's K and GroupRateLimit its per-group
	// rate limit (see WithGroupConcurrency, WithGroupRateLimit).
	GroupsPending, GroupsRunning int64
	GroupConcurrency             int
	GroupRateLimit               RateLimit
	// Consumers counts the consumers of every connection; Connections
	// the connections registered for the queue.
	Consumers, Connections int64
	// Published, Acked, Rejects and Retried are totals kept in Redis
	// since the queue was created or last destroyed (see "Counters" in
	// docs/inspector.md for what each counts).
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
	// handed out (zero: never); NextDue when it is due again (zero: it
	// waits in the front line, due now).
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

// Queues returns every open queue of the namespace, sorted by name: three
// round trips (the queue list, then pipelined counts, then pipelined
// unacked counts), whatever the number of queues.
func (i *Inspector) Queues(ctx context.Context) ([]QueueInfo, error) {
	names, err := i.client.SMembers(ctx, i.keys.queues).Result()
	if err != nil {
		return nil, errorf("redq: list queues: %w", err)
	}
	sort.Strings(names)
	st, err := collectStats(ctx, i.client, i.keys, names)
	if err != nil {
		return nil, err
	}
	out := make([]QueueInfo, len(names))
	for n, name := range names {
		out[n] = queueInfo(name, st.QueueStats[name])
	}
	return out, nil
}

// queueInfo is the QueueInfo of a queue's stats.
func queueInfo(name string, q QueueStat) QueueInfo {
	return QueueInfo{
		Name: name, Ready: q.ReadyCount, Delayed: q.DelayedCount, Unacked: q.UnackedCount(), Rejected: q.RejectedCount,
		KeyedPending: q.KeyedPending, Paused: q.Paused, RateLimit: q.RateLimit,
		GroupsPending: q.GroupsPending, GroupsRunning: q.GroupsRunning, GroupConcurrency: q.GroupConcurrency, GroupRateLimit: q.GroupRateLimit,
		Consumers: q.ConsumerCount(), Connections: q.ConnectionCount(),
		Published: q.totals[0], Acked: q.totals[1], Rejects: q.totals[2], Retried: q.totals[3],
	}
}

// checkQueue validates a queue name and reports ErrorNotFound for a queue
// that is not open (not in the namespace's queue set).
func (i *Inspector) checkQueue(ctx context.Context, name string) error {
	if why := validQueueName(name); why != "" {
		return argError("queue name", name, why)
	}
	ok, err := i.client.SIsMember(ctx, i.keys.queues, name).Result()
	if err != nil {
		return errorf("redq: queue %q: %w", name, err)
	}
	if !ok {
		return errorf("%w: no queue %q is open in namespace %q", ErrorNotFound, name, i.opts.namespace)
	}
	return nil
}

// Queue returns one queue; an error matching ErrorNotFound when no queue of
// that name is open, an *ArgumentError for a bad name.
func (i *Inspector) Queue(ctx context.Context, name string) (QueueInfo, error) {
	if err := i.checkQueue(ctx, name); err != nil {
		return QueueInfo{}, err
	}
	st, err := collectStats(ctx, i.client, i.keys, []string{name})
	if err != nil {
		return QueueInfo{}, err
	}
	return queueInfo(name, st.QueueStats[name]), nil
}

// History returns a queue's per-minute counts over the last since (an hour
// when since is 0 or more than an hour: Redis keeps about an hour), oldest
// first, one point per minute of Redis's clock up to the current minute,
// which is still counting. Minutes without events are points of zeros.
func (i *Inspector) History(ctx context.Context, queue string, since time.Duration) ([]RatePoint, error) {
	if since < 0 {
		return nil, argError("since", since.String(), "must not be negative")
	}
	if err := i.checkQueue(ctx, queue); err != nil {
		return nil, err
	}
	if since == 0 || since > time.Hour {
		since = time.Hour
	}
	k := newQueueKeys(i.opts.namespace, queue)
	pipe := i.client.Pipeline()
	tm := pipe.Time(ctx)
	all := pipe.HGetAll(ctx, k.meta())
	pub := pipe.HGetAll(ctx, k.pub())
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, errorf("redq: history of %q: %w", queue, err)
	}
	return historyOf(tm.Val(), all.Val(), pub.Val(), since), nil
}

// historySlots is the number of minutes the ring of counters holds (HSLOTS
// in scripts/lib.lua).
const historySlots = 64

// historyOf reads the ring of per-minute counters in meta (see tally in
// scripts/lib.lua) at Redis time now, and adds the publishes counted in
// pub that are not folded into it yet (see fold_fast), by their minute.
func historyOf(now time.Time, meta, pub map[string]string, since time.Duration) []RatePoint {
	cur := now.UnixMilli() / 60000
	n := int64((since + time.Minute - 1) / time.Minute)
	n = min(max(n, 1), historySlots-1)
	out := make([]RatePoint, 0, n)
	for m := cur - n + 1; m <= cur; m++ {
		p := RatePoint{Minute: time.UnixMilli(m * 60000).UTC()}
		s := strconv.FormatInt(m%historySlots, 10)
		if meta["m"+s] == strconv.FormatInt(m, 10) {
			get := func(c string) int64 { v, _ := strconv.ParseInt(meta[c+s], 10, 64); return v }
			p.Published, p.Acked, p.Rejected, p.Retried = get("p"), get("a"), get("r"), get("t")
		}
		if v, ok := pub[strconv.FormatInt(m, 10)]; ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			p.Published += n
		}
		out = append(out, p)
	}
	return out
}

// Connections returns every registered connection, sorted by name, with
// its state, heartbeat age and part in each open queue: three round trips.
func (i *Inspector) Connections(ctx context.Context) ([]ConnectionInfo, error) {
	pipe := i.client.Pipeline()
	connsCmd := pipe.SMembers(ctx, i.keys.connections)
	queuesCmd := pipe.SMembers(ctx, i.keys.queues)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, errorf("redq: list connections: %w", err)
	}
	names, queues := connsCmd.Val(), queuesCmd.Val()
	sort.Strings(names)
	pipe = i.client.Pipeline()
	consumers := make([]*redis.MapStringStringCmd, len(queues))
	for n, q := range queues {
		consumers[n] = pipe.HGetAll(ctx, newQueueKeys(i.opts.namespace, q).consumers)
	}
	beats := make([]beat, len(names))
	for n, c := range names {
		beats[n] = i.readBeat(ctx, pipe, c)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, errorf("redq: list connections: %w", err)
	}
	out := make([]ConnectionInfo, len(names))
	byName := map[string]*ConnectionInfo{}
	for n, c := range names {
		out[n] = beats[n].info(c)
		byName[c] = &out[n]
	}
	pipe = i.client.Pipeline()
	type part struct {
		conn, queue string
		cmd         *redis.IntCmd
	}
	var parts []part
	for n, q := range queues {
		for c, v := range consumers[n].Val() {
			ci := byName[c]
			if ci == nil {
				continue
			}
			ci.Consumers[q], _ = strconv.ParseInt(v, 10, 64)
			parts = append(parts, part{c, q, pipe.HLen(ctx, newQueueKeys(i.opts.namespace, q).unacked(c))})
		}
	}
	if len(parts) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, errorf("redq: list connections: %w", err)
		}
		for _, p := range parts {
			byName[p.conn].Unacked[p.queue] = p.cmd.Val()
		}
	}
	return out, nil
}

// Stats returns what CollectStats returns, without a connection; no queues
// means every open queue.
func (i *Inspector) Stats(ctx context.Context, queues ...string) (Stats, error) {
	if len(queues) == 0 {
		names, err := i.client.SMembers(ctx, i.keys.queues).Result()
		if err != nil {
			return Stats{}, errorf("redq: collect stats: %w", err)
		}
		queues = names
	}
	return collectStats(ctx, i.client, i.keys, queues)
}

// Pause pauses a queue for every connection (see Queue.Pause); an error
// matching ErrorNotFound when no queue of that name is open. Pausing a
// paused queue does nothing.
func (i *Inspector) Pause(ctx context.Context, queue string) error {
	if err := i.checkQueue(ctx, queue); err != nil {
		return err
	}
	if err := setPaused(ctx, i.client, newQueueKeys(i.opts.namespace, queue), true); err != nil {
		return errorf("redq: pause %q: %w", queue, err)
	}
	return nil
}

// Resume ends a pause of a queue and wakes its consumers (see
// Queue.Resume); an error matching ErrorNotFound when no queue of that
// name is open. Resuming a queue that is not paused does nothing.
func (i *Inspector) Resume(ctx context.Context, queue string) error {
	if err := i.checkQueue(ctx, queue); err != nil {
		return err
	}
	if err := setPaused(ctx, i.client, newQueueKeys(i.opts.namespace, queue), false); err != nil {
		return errorf("redq: resume %q: %w", queue, err)
	}
	return nil
}

// Timers returns the counts of every timer set of the namespace (empty, not
// nil, when there is none).
func (i *Inspector) Timers(ctx context.Context) (map[string]TimerStat, error) {
	st, err := collectStats(ctx, i.client, i.keys, nil)
	if err != nil {
		return nil, err
	}
	if st.TimerStats == nil {
		return map[string]TimerStat{}, nil
	}
	return st.TimerStats, nil
}

// Rounds returns the counts of every round of the namespace (empty, not
// nil, when there is none).
func (i *Inspector) Rounds(ctx context.Context) (map[string]RoundStat, error) {
	st, err := collectStats(ctx, i.client, i.keys, nil)
	if err != nil {
		return nil, err
	}
	if st.RoundStats == nil {
		return map[string]RoundStat{}, nil
	}
	return st.RoundStats, nil
}

// ListRound returns one page of a round's items, in the order they are
// handed out (the front line first, then by last hand-out); cursor "" is
// the first page, Page.Next the next one; limit as ListOptions.Limit. An
// unknown round returns an error matching ErrorNotFound.
func (i *Inspector) ListRound(ctx context.Context, round string, cursor string, limit int) (RoundPage, error) {
	if why := validName(round); why != "" {
		return RoundPage{}, argError("round name", round, why)
	}
	if limit < 0 || limit > MaxListLimit {
		return RoundPage{}, argError("limit", limit, fmt.Sprintf("must be 0 (default %d) to %d", DefaultListLimit, MaxListLimit))
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	var off int64
	if cursor != "" {
		p, err := decodeCursor("round", cursor)
		if err != nil {
			return RoundPage{}, err
		}
		off = p.off
	}
	ok, err := i.client.SIsMember(ctx, i.keys.rounds(), round).Result()
	if err != nil {
		return RoundPage{}, errorf("redq: list round %q: %w", round, err)
	}
	if !ok {
		return RoundPage{}, errorf("%w: no round %q in namespace %q", ErrorNotFound, round, i.opts.namespace)
	}
	k := newRoundKeys(i.opts.namespace, round)
	pipe := i.client.Pipeline()
	total := pipe.ZCard(ctx, k.order)
	period := pipe.HGet(ctx, k.state, "period")
	ids := pipe.ZRangeWithScores(ctx, k.order, off, off+int64(limit)-1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return RoundPage{}, errorf("redq: list round %q: %w", round, err)
	}
	page := RoundPage{Total: total.Val(), Items: []RoundItemInfo{}}
	zs := ids.Val()
	if len(zs) == 0 {
		return page, nil
	}
	names := make([]string, len(zs))
	for n, z := range zs {
		names[n] = z.Member.(string)
	}
	pipe = i.client.Pipeline()
	data := pipe.HMGet(ctx, k.data, names...)
	info := pipe.HMGet(ctx, k.info, names...)
	if _, err := pipe.Exec(ctx); err != nil {
		return RoundPage{}, errorf("redq: list round %q: %w", round, err)
	}
	per, _ := strconv.ParseInt(period.Val(), 10, 64)
	ms := func(v int64) time.Time {
		if v <= 0 {
			return time.Time{}
		}
		return time.UnixMilli(v)
	}
	for n, id := range names {
		it := RoundItemInfo{ID: id}
		if d, ok := data.Val()[n].(string); ok {
			it.Data = []byte(d)
		}
		if s, ok := info.Val()[n].(string); ok {
			var f [5]int64
			for j, part := range strings.SplitN(s, ",", 5) {
				f[j], _ = strconv.ParseInt(part, 10, 64)
			}
			it.Added, it.Issued, it.LastIssued, it.ExpireAt = ms(f[0]), f[1], ms(f[2]), ms(f[3])
		}
		if zs[n].Score >= 0 && per > 0 {
			it.NextDue = time.UnixMilli(int64(zs[n].Score) + per)
		}
		page.Items = append(page.Items, it)
	}
	if off+int64(len(zs)) < page.Total {
		page.Next = encodeCursor("round", listPos{off: off + int64(len(zs))})
	}
	return page, nil
}

// beat is what a pipeline reads of one connection's liveness: its
// heartbeat's time to live and value (the full TTL in ms, written by
// heartbeat.lua) and its stopped mark.
type beat struct {
	ttl     *redis.DurationCmd
	val     *redis.StringCmd
	stopped *redis.IntCmd
}

// readBeat queues the reads of connection c's beat on pipe.
func (i *Inspector) readBeat(ctx context.Context, pipe redis.Pipeliner, c string) beat {
	return beat{pipe.PTTL(ctx, i.keys.heartbeat(c)), pipe.Get(ctx, i.keys.heartbeat(c)), pipe.Exists(ctx, i.keys.stopped(c))}
}

// info is connection c as its beat shows it: active with its heartbeat's
// age, stopped, or dead (awaiting a cleaner); its per-queue maps are empty.
func (b beat) info(c string) ConnectionInfo {
	ci := ConnectionInfo{Name: c, State: "dead", HeartbeatAge: -1, Unacked: map[string]int64{}, Consumers: map[string]int64{}}
	if ttl := b.ttl.Val(); ttl > 0 {
		ci.State = "active"
		if full, err := strconv.ParseInt(b.val.Val(), 10, 64); err == nil && full > 1 {
			ci.HeartbeatAge = max(0, time.Duration(full)*time.Millisecond-ttl)
		}
	} else if b.stopped.Val() == 1 {
		ci.State = "stopped"
	}
	return ci
}
