package redq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Round is a round queue: a set of items, each with an id and data, that
// are handed out again and again, the least recently handed out first and
// each at most once per period, until they are removed or their time to
// live runs out. Use it to spread recurring work over a pool of workers:
// "poll each of these 50,000 feeds about every 5 minutes, and forget those
// nobody renewed for a day".
//
// The rules, all judged by Redis's clock (TIME in the scripts), never a
// client's:
//  1. An item is handed out at most once per period, across every
//     connection and worker: a hand-out picks the item, marks it issued and
//     returns it in one atomic script. (Reissue is the one way to hand an
//     item out again sooner.)
//  2. Items that were never handed out (and reissued ones) come first, in
//     the order they were added (or reissued); then the least recently
//     handed out.
//  3. An item whose time to live ran out (see RoundTTL) is never handed
//     out. Expired items are removed in bounded steps: a few by each Add
//     and Next, and the rest by a Cleaner, 1,000 per script call.
//
// Every key of a round carries its hash tag (one Redis Cluster slot per
// round). Rounds are listed in Stats.RoundStats and on the stats page.
// Methods are safe for concurrent use.
type Round interface {
	// Add adds an item. A new id joins the front of the round (it is
	// handed out next, after other items that were never handed out) and
	// Add returns true. An existing id gets the new data and a renewed
	// time to live and keeps its place in the round, so that a chatty
	// producer cannot starve the others; Add returns false. An item whose
	// time to live ran out counts as gone: adding its id again adds a new
	// item.
	Add(ctx context.Context, id string, data []byte) (bool, error)
	// Remove removes an item and reports whether it was there.
	Remove(ctx context.Context, id string) (bool, error)
	// Get returns an item without handing it out, or an error matching
	// ErrorNotFound when there is none (or its time to live ran out).
	Get(ctx context.Context, id string) (RoundItem, error)
	// Len returns the number of items whose time to live has not run out.
	Len(ctx context.Context) (int64, error)
	// Next waits up to timeout (0: not at all) for an item that is due
	// (never handed out, reissued, or last handed out at least a period
	// ago), marks it handed out now and returns it. It returns
	// ErrorTimeout when none became due in time. A waiting Next wakes when
	// the earliest item becomes due or an item is added or reissued; it
	// does not poll. After StopAllConsuming it returns
	// ErrorConsumingStopped.
	Next(ctx context.Context, timeout time.Duration) (RoundItem, error)
	// NextBatch is Next for up to max items: it returns as soon as at
	// least one is due, with as many due ones as there are, up to max.
	NextBatch(ctx context.Context, max int64, timeout time.Duration) ([]RoundItem, error)
	// Reissue puts an item back at the front of the round, to be handed
	// out again at once although its period has not passed (a worker that
	// failed on it wants it back): behind the other items waiting at the
	// front, so that an item that keeps failing cannot starve new ones.
	// It reports whether the item is there.
	Reissue(ctx context.Context, id string) (bool, error)
}

// RoundItem is an item of a round as Get, Next and NextBatch return it.
// Times are Redis's, in whole milliseconds.
type RoundItem struct {
	ID   string
	Data []byte
	// Added is when the item was added (renewals with Add do not change
	// it).
	Added time.Time
	// LastIssued is when the item was last handed out (for Next and
	// NextBatch: now), or the zero time if it never was.
	LastIssued time.Time
	// Issued counts the times the item was handed out, this one included.
	Issued int64
}

// Limits of a round's settings and items.
const (
	// MaxRoundPeriod is the longest period of a round.
	MaxRoundPeriod = 366 * 24 * time.Hour
	// MaxRoundTTL is the longest time to live of a round's items.
	MaxRoundTTL = 10 * 366 * 24 * time.Hour
	// MaxRoundIDLength is the longest item id, in bytes.
	MaxRoundIDLength = 1024
)

const (
	// roundChunk bounds the items one hand-out script call moves.
	roundChunk = 1000
	// roundSweepChunk bounds the expired items one cleaner script call
	// removes from a round.
	roundSweepChunk = 1000
)

// RoundOption configures OpenRound.
type RoundOption func(*roundOptions) error

type roundOptions struct {
	ttl    time.Duration
	ttlSet bool
	change bool
}

// RoundTTL sets the time to live of the round's items: an item is removed
// once d has passed since it was added or last renewed (by Add of its id),
// and it is never handed out after that. 0 means never (the default). d
// must be 0 or from 1ms to MaxRoundTTL; it is kept in whole milliseconds.
//
// The TTL is stored in Redis with the round at its first open and applies
// to every connection; a handle opened without RoundTTL uses the stored
// one. Opening a round with a TTL other than the stored one fails, unless
// RoundChangeSettings is given too.
func RoundTTL(d time.Duration) RoundOption {
	return func(o *roundOptions) error {
		if d < 0 || (d > 0 && d < time.Millisecond) || d > MaxRoundTTL {
			return argError("round TTL", d, "must be 0 (never) or from 1ms to "+MaxRoundTTL.String())
		}
		o.ttl, o.ttlSet = d, true
		return nil
	}
}

// RoundChangeSettings makes OpenRound store its period (and its TTL, if
// RoundTTL is given) in place of the round's stored ones, instead of
// failing when they differ: for a deploy that changes them. Every handle
// of the round, on any connection, follows at its next call. Items keep
// their place, and the time to live they were given until they are
// renewed.
func RoundChangeSettings() RoundOption {
	return func(o *roundOptions) error {
		o.change = true
		return nil
	}
}

type redisRound struct {
	name   string
	conn   *redisConnection
	keys   roundKeys
	keyArg []string
	// period and ttl as stored when the handle was opened, in ms; the
	// scripts read the stored ones and use these only if those are gone.
	period, ttl int64
	// waitCap bounds one wait on Redis, so that a cancelled context or a
	// stop is noticed within it (takeWaitCap; tests raise it to show that
	// a wait ends by a wake-up, not by the cap).
	waitCap time.Duration
}

// OpenRound returns a handle on the named round, creating it with the
// given period (the least time between two hand-outs of one item) if it
// does not exist, and lists it in Redis (see Stats.RoundStats). Names
// follow the rules of queue names; a round and a queue of the same name
// are unrelated. The period must be from 1ms to MaxRoundPeriod and is kept
// in whole milliseconds.
//
// The period (and the TTL, see RoundTTL) is stored with the round at its
// first open. Opening an existing round with another period fails with an
// *ArgumentError that names the stored one, and changes nothing, unless
// RoundChangeSettings is given. After StopAllConsuming it fails with
// ErrorConsumingStopped.
func (c *redisConnection) OpenRound(name string, period time.Duration, opts ...RoundOption) (Round, error) {
	r, err := c.openRound(context.Background(), name, period, opts...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (c *redisConnection) openRound(ctx context.Context, name string, period time.Duration, opts ...RoundOption) (*redisRound, error) {
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
	if c.isStopped() {
		return nil, ErrorConsumingStopped
	}
	k := newRoundKeys(c.opts.namespace, name)
	ttlArg := int64(-1)
	if o.ttlSet {
		ttlArg = o.ttl.Milliseconds()
	}
	change := "0"
	if o.change {
		change = "1"
	}
	stored, err := scripts.roundOpen.Run(ctx, c.client, k.all(), period.Milliseconds(), ttlArg, change).Int64Slice()
	if err == nil && len(stored) != 2 {
		err = errorf("unexpected reply %v", stored)
	}
	if err != nil {
		return nil, errorf("redq: open round %q: %w", name, err)
	}
	if stored[0] != period.Milliseconds() {
		return nil, argError("round period", period, fmt.Sprintf("round %q exists with period %s; open it with that period, or give RoundChangeSettings to change it",
			name, time.Duration(stored[0])*time.Millisecond))
	}
	if o.ttlSet && stored[1] != ttlArg {
		return nil, argError("round TTL", o.ttl, fmt.Sprintf("round %q exists with TTL %s; open it with that TTL or without RoundTTL, or give RoundChangeSettings to change it",
			name, time.Duration(stored[1])*time.Millisecond))
	}
	// The registry is a global key, in another cluster slot than the
	// round's: a command of its own, after the round's settings are in.
	if err := c.client.SAdd(ctx, c.keys.rounds(), name).Err(); err != nil {
		return nil, errorf("redq: open round %q: %w", name, err)
	}
	return &redisRound{name: name, conn: c, keys: k, keyArg: k.all(), period: stored[0], ttl: stored[1], waitCap: takeWaitCap}, nil
}

// openRounds lists the rounds that were opened in the connection's
// namespace.
func (c *redisConnection) openRounds(ctx context.Context) ([]string, error) {
	names, err := c.client.SMembers(ctx, c.keys.rounds()).Result()
	if err != nil {
		return nil, errorf("redq: list rounds: %w", err)
	}
	return names, nil
}

func checkRoundPeriod(period time.Duration) error {
	if period < time.Millisecond || period > MaxRoundPeriod {
		return argError("round period", period, "must be from 1ms to "+MaxRoundPeriod.String())
	}
	return nil
}

func checkRoundID(id string) error {
	switch {
	case id == "":
		return argError("round item id", id, "must not be empty")
	case len(id) > MaxRoundIDLength:
		return argError("round item id", id[:32]+"…", fmt.Sprintf("must be at most %d bytes, is %d", MaxRoundIDLength, len(id)))
	}
	return nil
}

func (r *redisRound) String() string { return r.name }

func (r *redisRound) Add(ctx context.Context, id string, data []byte) (bool, error) {
	if err := checkRoundID(id); err != nil {
		return false, err
	}
	if err := checkPayloadSize("round item data", len(data), r.conn.opts.maxPayloadSize); err != nil {
		return false, err
	}
	n, err := r.once(ctx, scripts.roundAdd, id, data, r.period, r.ttl)
	if err != nil {
		return false, errorf("redq: add to round %q: %w", r.name, err)
	}
	return n == 1, nil
}

func (r *redisRound) Remove(ctx context.Context, id string) (bool, error) {
	if err := checkRoundID(id); err != nil {
		return false, err
	}
	n, err := r.once(ctx, scripts.roundRemove, id)
	if err != nil {
		return false, errorf("redq: remove from round %q: %w", r.name, err)
	}
	return n == 1, nil
}

func (r *redisRound) Reissue(ctx context.Context, id string) (bool, error) {
	if err := checkRoundID(id); err != nil {
		return false, err
	}
	n, err := r.once(ctx, scripts.roundReissue, id)
	if err != nil {
		return false, errorf("redq: reissue in round %q: %w", r.name, err)
	}
	return n == 1, nil
}

// once runs a round script that answers a number once per token (Add,
// Remove, Reissue): with the round's keys and the record of the call slot
// it holds, and the token after args. Calls of many goroutines share
// pipelines, and a call is sent again while Redis gives no answer (see
// scriptBatcher), so its answer is what it did even when a reply was lost.
func (r *redisRound) once(ctx context.Context, script *redis.Script, args ...any) (int64, error) {
	v, err := r.conn.keyed.call(ctx, func(field, token string) scriptCall {
		return scriptCall{script, append(append([]string(nil), r.keyArg...), r.keys.record(r.conn.Name(), field)),
			append(append([]any(nil), args...), token)}
	})
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, errorf("%w %v", errBadReply, v)
	}
	return n, nil
}

func (r *redisRound) Get(ctx context.Context, id string) (RoundItem, error) {
	if err := checkRoundID(id); err != nil {
		return RoundItem{}, err
	}
	v, err := scripts.roundGet.Run(ctx, r.conn.client, r.keyArg, id).Slice()
	if err != nil {
		return RoundItem{}, errorf("redq: get from round %q: %w", r.name, err)
	}
	if len(v) == 0 {
		return RoundItem{}, errorf("redq: round %q has no item %q: %w", r.name, id, ErrorNotFound)
	}
	it, err := roundItem(id, v)
	if err != nil {
		return RoundItem{}, errorf("redq: get from round %q: %w", r.name, err)
	}
	return it, nil
}

func (r *redisRound) Len(ctx context.Context) (int64, error) {
	n, err := scripts.roundLen.Run(ctx, r.conn.client, r.keyArg).Int64()
	if err != nil {
		return 0, errorf("redq: length of round %q: %w", r.name, err)
	}
	return n, nil
}

func (r *redisRound) Next(ctx context.Context, timeout time.Duration) (RoundItem, error) {
	items, err := r.NextBatch(ctx, 1, timeout)
	if err != nil {
		return RoundItem{}, err
	}
	return items[0], nil
}

func (r *redisRound) NextBatch(ctx context.Context, max int64, timeout time.Duration) ([]RoundItem, error) {
	if max < 1 {
		return nil, argError("max", max, "must be at least 1")
	}
	if timeout < 0 {
		return nil, argError("timeout", timeout, "must not be negative")
	}
	if r.conn.isStopped() {
		return nil, ErrorConsumingStopped
	}
	var w *waiter // made when the call first has to wait
	defer func() {
		if w != nil {
			w.close()
		}
	}()
	deadline := time.Now().Add(timeout)
	for {
		var out []RoundItem
		var hint int64
		for int64(len(out)) < max {
			items, h, err := r.handOut(ctx, int(min(max-int64(len(out)), roundChunk)))
			if err != nil {
				if len(out) > 0 {
					return out, nil // they are marked issued: the caller's now; the error comes again next call
				}
				return nil, errorf("redq: next of round %q: %w", r.name, err)
			}
			out = append(out, items...)
			if hint = h; hint != 0 {
				break // nothing more is due now
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
		if r.conn.isStopped() {
			return nil, ErrorConsumingStopped
		}
		if w == nil {
			w = newWaiter(r.conn.client, r.keys.signal, true)
		}
		if err := w.wait(ctx, min(waitFor(left, hint), r.waitCap), true); err != nil {
			return nil, errorf("redq: next of round %q: %w", r.name, err)
		}
	}
}

// handOut runs the hand-out script for up to n items and returns them and
// its hint (see round_next.lua).
func (r *redisRound) handOut(ctx context.Context, n int) ([]RoundItem, int64, error) {
	v, err := scripts.roundNext.Run(ctx, r.conn.client, r.keyArg, n, r.period).Slice()
	if err != nil {
		return nil, 0, err
	}
	if len(v) == 0 || (len(v)-1)%3 != 0 {
		return nil, 0, errorf("unexpected reply of %d elements", len(v))
	}
	hint, ok := v[0].(int64)
	if !ok {
		return nil, 0, errorf("unexpected hint %v", v[0])
	}
	items := make([]RoundItem, 0, (len(v)-1)/3)
	for i := 1; i < len(v); i += 3 {
		id, _ := v[i].(string)
		it, err := roundItem(id, v[i+1:i+3])
		if err != nil {
			return nil, 0, err
		}
		items = append(items, it)
	}
	return items, hint, nil
}

// roundItem makes an item from the script reply {data, info}.
func roundItem(id string, v []any) (RoundItem, error) {
	data, ok1 := v[0].(string)
	info, ok2 := v[1].(string)
	if !ok1 || !ok2 {
		return RoundItem{}, errors.New("unexpected reply for an item")
	}
	f := strings.Split(info, ",")
	if len(f) != 5 {
		return RoundItem{}, errorf("unexpected item info %q", info)
	}
	var n [3]int64
	for i := range n {
		x, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return RoundItem{}, errorf("unexpected item info %q", info)
		}
		n[i] = x
	}
	it := RoundItem{ID: id, Data: []byte(data), Added: time.UnixMilli(n[0]), Issued: n[1]}
	if n[2] > 0 {
		it.LastIssued = time.UnixMilli(n[2])
	}
	return it, nil
}

// sweepRounds removes the expired items of every round of the namespace,
// roundSweepChunk per script call (the cleaner's last step), and reports
// the rounds it could not sweep.
func (c *redisConnection) sweepRounds(ctx context.Context) []roundFailure {
	names, err := c.openRounds(ctx)
	if err != nil {
		return []roundFailure{{key: c.keys.rounds(), label: "the list of rounds", err: err}}
	}
	var failed []roundFailure
	for _, name := range names {
		keys := newRoundKeys(c.opts.namespace, name).all()
		for {
			n, err := scripts.roundSweep.Run(ctx, c.client, keys, roundSweepChunk).Int64()
			if err != nil {
				failed = append(failed, roundFailure{key: keys[0], label: "round " + name, err: errorf("expired items of round %q: %w", name, err)})
				break
			}
			if n < roundSweepChunk {
				break
			}
		}
	}
	return failed
}

// roundFailure is a round that sweepRounds could not sweep: a key of its
// slot, how a CleanError names it and why.
type roundFailure struct {
	key, label string
	err        error
}

// roundStatCmd is the stats script of one round queued on a pipeline.
type roundStatCmd struct {
	name string
	keys []string
	cmd  *redis.Cmd
}

// queueRoundStats queues the stats script of each round on pipe.
func queueRoundStats(ctx context.Context, pipe redis.Pipeliner, ns string, names []string) []roundStatCmd {
	out := make([]roundStatCmd, 0, len(names))
	for _, name := range names {
		keys := newRoundKeys(ns, name).all()
		out = append(out, roundStatCmd{name: name, keys: keys, cmd: scripts.roundStats.EvalSha(ctx, pipe, keys, 0, 0)})
	}
	return out
}

// roundStats reads the replies of queueRoundStats, running a script again
// where Redis did not have it cached.
func roundStats(ctx context.Context, c redis.UniversalClient, cmds []roundStatCmd) (map[string]RoundStat, error) {
	out := make(map[string]RoundStat, len(cmds))
	for _, rc := range cmds {
		v, err := rc.cmd.Result()
		if isNoScript(err) {
			v, err = scripts.roundStats.Run(ctx, c, rc.keys, 0, 0).Result()
		}
		var n []int64
		if err == nil {
			n, err = int64s(v)
			if err == nil && len(n) != 8 {
				err = errorf("unexpected reply %v", v)
			}
		}
		if err != nil {
			return nil, errorf("round %q: %w", rc.name, err)
		}
		ms := func(x int64) time.Duration { return time.Duration(x) * time.Millisecond }
		out[rc.name] = RoundStat{
			ItemCount: n[0], DueCount: n[1], OldestLag: ms(n[2]), IssuedCount: n[3],
			IssuedPerSecond: float64(n[4]) / roundRateWindow.Seconds(), ExpiredCount: n[5],
			Period: ms(n[6]), TTL: ms(n[7]),
		}
	}
	return out, nil
}

// roundRateWindow is the window of RoundStat.IssuedPerSecond (ROUND_WINDOW
// in round_lib.lua).
const roundRateWindow = 10 * time.Second
