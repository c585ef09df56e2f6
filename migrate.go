package redq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RmqHashTags says which of rmq v5's two key layouts MigrateFromRmq reads:
// rmq::queue::[name]::ready, written by rmq's OpenConnection and friends,
// or rmq::queue::{name}::ready, written by OpenClusterConnection.
type RmqHashTags int

const (
	// RmqHashTagsAuto reads both layouts and moves what either holds: a
	// deployment whose programs opened rmq both ways has keys of both.
	RmqHashTagsAuto RmqHashTags = iota
	// RmqHashTagsOff reads only the plain layout (rmq::queue::[name]::...).
	RmqHashTagsOff
	// RmqHashTagsOn reads only the layout with hash tags
	// (rmq::queue::{name}::...).
	RmqHashTagsOn
)

// String returns auto, off or on.
func (h RmqHashTags) String() string {
	switch h {
	case RmqHashTagsAuto:
		return "auto"
	case RmqHashTagsOff:
		return "off"
	case RmqHashTagsOn:
		return "on"
	}
	return "RmqHashTags(" + strconv.Itoa(int(h)) + ")"
}

// The chunk sizes MigrateFromRmq accepts: each chunk is one script call,
// which holds Redis for about a millisecond per thousand deliveries.
const (
	DefaultMigrateChunk = 1000
	MaxMigrateChunk     = 10000
)

// MigrateOptions configures MigrateFromRmq. The zero value migrates every
// queue listed in rmq's queues set into namespace "redq", reading both rmq
// key layouts, in chunks of DefaultMigrateChunk.
type MigrateOptions struct {
	// Namespace is the redq namespace to move into; "" means
	// DefaultNamespace ("redq").
	Namespace string
	// Queues names the rmq queues to move; nil or empty means every queue in
	// rmq's queues set (rmq::queues). A queue named here that rmq neither
	// lists nor holds anything of is refused (a typo?).
	Queues []string
	// DryRun reads and reports what would move, and changes nothing.
	DryRun bool
	// HashTags says which of rmq's key layouts to read (default: both).
	HashTags RmqHashTags
	// Merge allows moving into a redq queue that already holds deliveries
	// that no earlier migration put there: rmq's ready and rejected
	// deliveries line up behind redq's, and the deliveries of dead rmq
	// connections go to the front of ready, as redq's cleaner returns a dead
	// connection's. Without it such a queue is refused (see
	// MigrationRefusedError) and nothing at all moves. A queue that an
	// earlier run started to fill is never a clash.
	Merge bool
	// ChunkSize is how many deliveries one script call moves at most: 0
	// means DefaultMigrateChunk; at most MaxMigrateChunk. A call also stops
	// once it holds about 8 MiB of payloads.
	ChunkSize int
	// Progress, if set, is called after every chunk, on the goroutine of
	// MigrateFromRmq.
	Progress func(MigrateProgress)
}

var (
	// ErrorNoRmqData is returned by MigrateFromRmq when the Redis holds no
	// rmq data: rmq's queues and connections sets are empty (or, for queues
	// named in MigrateOptions.Queues, none has rmq keys). Check the address
	// and database number.
	ErrorNoRmqData = errors.New("redq: no rmq data found")
	// ErrorMigrationRefused is matched by every *MigrationRefusedError.
	ErrorMigrationRefused = errors.New("redq: migration refused")
)

// MigrationRefusedError is returned by MigrateFromRmq when a queue cannot
// be moved as it is. It is returned before anything moves, so nothing was
// changed (a dry run returns it too).
type MigrationRefusedError struct {
	Problems []MigrationProblem
}

// MigrationProblem is one reason a queue cannot be moved.
type MigrationProblem struct {
	Queue  string
	Reason string
}

func (e *MigrationRefusedError) Error() string {
	var b strings.Builder
	b.WriteString("redq: migration refused, nothing moved:")
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  queue %q: %s", p.Queue, p.Reason)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrorMigrationRefused) true.
func (e *MigrationRefusedError) Is(target error) bool { return target == ErrorMigrationRefused }

// MigrateFromRmq moves an rmq v5 deployment's deliveries, in the same Redis,
// into redq's layout under opts.Namespace, queue by queue under the same
// names, and lists each queue in the namespace:
//
//   - rmq's ready list to the back of redq's ready list, oldest first taken
//     first;
//   - rmq's rejected list to redq's rejected list, in the same order;
//   - the unacked lists of dead rmq connections (heartbeat gone) to the
//     front of redq's ready list, the one taken longest ago first, each with
//     one attempt counted (as redq's cleaner returns a dead connection's);
//     the unacked lists of live rmq connections are not touched but listed
//     in the report (MigrateReport.Live).
//
// Each payload becomes a redq delivery with a new id; a payload that rmq
// published with a header (rmq's PayloadWithHeader) becomes a delivery whose
// Header is that header and whose Payload is the rest. Nothing else of
// rmq's is changed: its queues and connections sets and its connections'
// registrations stay, so that rmq programs running beside redq keep
// working, and a later run moves what they published meanwhile.
//
// Each chunk moves in one Lua script call that takes the items off rmq's
// list and pushes their envelopes in the same atomic step, so a run that
// is interrupted at any point (ctx cancelled, the process killed, the
// connection broken) has lost and duplicated nothing, and running it again
// completes the job; a run over data that moved already moves nothing. A
// cancelled ctx is noticed between chunks; the chunk under way finishes.
//
// Before anything moves every selected queue is checked, and if one cannot
// be moved a *MigrationRefusedError lists why and nothing moves: a name that
// is not a valid redq queue name (an empty queue with such a name is only
// noted), a redq queue that already holds deliveries that no earlier
// migration put there (unless opts.Merge), or, on a Redis Cluster client,
// rmq keys that are not in the same cluster slot as redq's keys of the
// queue: rmq's plain layout, which rmq itself could only consume from on a
// single node. A *redis.Ring client is refused. With no rmq data at all it
// returns ErrorNoRmqData.
//
// A dead rmq connection is one whose heartbeat key is gone, as rmq's cleaner
// judges it; on a single node the check runs in the same script as each
// chunk's move, on a cluster just before it. A paused rmq consumer that
// comes back after that has the same effect as with rmq's own cleaner: the
// deliveries it held are delivered again (by redq), never lost.
func MigrateFromRmq(ctx context.Context, client redis.UniversalClient, opts MigrateOptions) (MigrateReport, error) {
	m, err := newMigration(client, opts)
	if err != nil {
		return MigrateReport{}, err
	}
	if err := m.discover(ctx); err != nil {
		return m.report(), err
	}
	if err := m.check(); err != nil {
		return m.report(), err
	}
	if opts.DryRun {
		return m.report(), nil
	}
	err = m.move(ctx)
	return m.report(), err
}

// migration is one run of MigrateFromRmq.
type migration struct {
	client  redis.UniversalClient
	cluster bool
	opts    MigrateOptions
	ns      string
	chunk   int64
	runID   string
	calls   int

	queues []*migrateQueue
	dead   []RmqHolding
	live   []RmqHolding

	total, moved int64
	start        time.Time
	elapsed      time.Duration
}

// migrateQueue is the plan and outcome for one queue.
type migrateQueue struct {
	rep     MigrateQueueReport
	keys    queueKeys
	record  string
	sources []*migrateSource
	redqHas int64 // deliveries redq holds for the queue already
	hasRec  bool  // an earlier migration moved into it
	unknown bool  // named in the options, but rmq knows no such queue
}

// migrateSource is one rmq list of a queue.
type migrateSource struct {
	kind      string // "ready", "rejected" or "unacked": the record's total too
	key       string
	layout    rmqLayout
	conn      string // an unacked list's connection
	heartbeat string // its heartbeat key
	count     int64  // its length when the run looked
	live      bool   // its connection is alive
}

func newMigration(client redis.UniversalClient, opts MigrateOptions) (*migration, error) {
	m := &migration{client: client, opts: opts, ns: opts.Namespace, chunk: int64(opts.ChunkSize)}
	switch client.(type) {
	case nil:
		return nil, argError("redis client", client, "must not be nil")
	case *redis.Ring:
		return nil, argError("redis client", "*redis.Ring", "a ring spreads keys over shards that scripts cannot span; migrate each shard with a client of its own")
	case *redis.ClusterClient:
		m.cluster = true
	}
	if m.ns == "" {
		m.ns = DefaultNamespace
	}
	if why := validName(m.ns); why != "" {
		return nil, argError("namespace", m.ns, why)
	}
	if m.chunk == 0 {
		m.chunk = DefaultMigrateChunk
	}
	if m.chunk < 1 || m.chunk > MaxMigrateChunk {
		return nil, argError("chunk size", opts.ChunkSize, fmt.Sprintf("must be 1 to %d (0: %d)", MaxMigrateChunk, DefaultMigrateChunk))
	}
	if opts.HashTags < RmqHashTagsAuto || opts.HashTags > RmqHashTagsOn {
		return nil, argError("hash tags", opts.HashTags, "must be RmqHashTagsAuto, RmqHashTagsOff or RmqHashTagsOn")
	}
	for _, q := range opts.Queues {
		if q == "" {
			return nil, argError("queue name", q, "must not be empty")
		}
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	m.runID = hex.EncodeToString(id[:])
	return m, nil
}

func (m *migration) layouts() []rmqLayout {
	switch m.opts.HashTags {
	case RmqHashTagsOff:
		return rmqLayouts[:1]
	case RmqHashTagsOn:
		return rmqLayouts[1:]
	}
	return rmqLayouts[:]
}

// discover reads rmq's sets and the lengths of every list to move, and
// what redq holds of the queues already.
func (m *migration) discover(ctx context.Context) error {
	listed, err := m.client.SMembers(ctx, rmqQueuesKey).Result()
	if err != nil {
		return readErr(ctx, "read rmq's queues ("+rmqQueuesKey+")", err)
	}
	conns, err := m.client.SMembers(ctx, rmqConnectionsKey).Result()
	if err != nil {
		return readErr(ctx, "read rmq's connections ("+rmqConnectionsKey+")", err)
	}
	slices.Sort(conns)
	names := slices.Clone(m.opts.Queues)
	if len(names) == 0 {
		if len(listed) == 0 && len(conns) == 0 {
			return errorf("%w: %s and %s are empty or missing (is this the Redis and database number rmq used?)",
				ErrorNoRmqData, rmqQueuesKey, rmqConnectionsKey)
		}
		names = listed
	}
	slices.Sort(names)
	names = slices.Compact(names)

	// Each connection's heartbeat and the queues it consumed.
	pipe := m.client.Pipeline()
	hbs := make([]*redis.IntCmd, len(conns))
	consumed := make([]*redis.StringSliceCmd, len(conns))
	for i, c := range conns {
		hbs[i] = pipe.Exists(ctx, rmqHeartbeatKey(c))
		consumed[i] = pipe.SMembers(ctx, rmqConnQueuesKey(c))
	}
	if err := execPipe(ctx, pipe); err != nil {
		return readErr(ctx, "read rmq's connections", err)
	}

	// Every list of every queue, in both layouts unless told.
	pipe = m.client.Pipeline()
	type lenOf struct {
		src *migrateSource
		cmd *redis.IntCmd
	}
	var lens []lenOf
	add := func(q *migrateQueue, s *migrateSource) {
		lens = append(lens, lenOf{s, pipe.LLen(ctx, s.key)})
		q.sources = append(q.sources, s)
	}
	for _, name := range names {
		q := &migrateQueue{rep: MigrateQueueReport{Name: name}, keys: newQueueKeys(m.ns, name)}
		q.record = q.keys.prefix + ":rmq"
		m.queues = append(m.queues, q)
		for _, l := range m.layouts() {
			// Unacked lists first: they go to the front of ready, ahead of
			// what rmq's ready list holds, which is younger.
			for i, c := range conns {
				if !slices.Contains(consumed[i].Val(), name) {
					continue
				}
				add(q, &migrateSource{kind: "unacked", key: l.unacked(c, name), layout: l, conn: c,
					heartbeat: rmqHeartbeatKey(c), live: hbs[i].Val() == 1})
			}
			add(q, &migrateSource{kind: "ready", key: l.ready(name), layout: l})
			add(q, &migrateSource{kind: "rejected", key: l.rejected(name), layout: l})
		}
	}
	if err := execPipe(ctx, pipe); err != nil {
		return readErr(ctx, "read rmq's lists", err)
	}
	for _, l := range lens {
		l.src.count = l.cmd.Val()
	}

	found := false
	for _, q := range m.queues {
		for _, s := range q.sources {
			if s.count == 0 {
				continue
			}
			found = true
			layout := s.layout.String()
			if !slices.Contains(q.rep.Layouts, layout) {
				q.rep.Layouts = append(q.rep.Layouts, layout)
			}
		}
		q.unknown = len(m.opts.Queues) > 0 && !slices.Contains(listed, q.rep.Name) && q.moving() == 0
	}
	if !found && len(m.opts.Queues) > 0 && len(listed) == 0 && len(conns) == 0 {
		return errorf("%w: none of the queues %s has rmq keys, and %s and %s are empty or missing",
			ErrorNoRmqData, strings.Join(names, ", "), rmqQueuesKey, rmqConnectionsKey)
	}
	return m.discoverRedq(ctx)
}

// moving returns how many deliveries of q the run would move.
func (q *migrateQueue) moving() int64 {
	var n int64
	for _, s := range q.sources {
		if !s.live {
			n += s.count
		}
	}
	return n
}

// discoverRedq reads, for each queue with something to move, whether redq
// holds deliveries of it already and whether an earlier run moved into it.
func (m *migration) discoverRedq(ctx context.Context) error {
	type probe struct {
		q                        *migrateQueue
		ready, delayed, rejected *redis.IntCmd
		parked, record           *redis.IntCmd
		levels                   []*redis.IntCmd
		tail, stale              *redis.StringCmd
		consumers                *redis.StringSliceCmd
	}
	var probes []probe
	pipe := m.client.Pipeline()
	for _, q := range m.queues {
		if q.moving() == 0 || validName(q.rep.Name) != "" {
			continue
		}
		// What stats count: every ready line but the wake marker and the
		// stale stubs of keyed items, the delayed set, rejected, the parked
		// successors of keyed items, and every connection's unacked hash.
		k := q.keys
		p := probe{
			q:         q,
			ready:     pipe.LLen(ctx, k.ready),
			tail:      pipe.LIndex(ctx, k.ready, -1),
			stale:     pipe.HGet(ctx, k.prefix+":meta", "kstale"),
			delayed:   pipe.ZCard(ctx, k.prefix+":delayed"),
			rejected:  pipe.LLen(ctx, k.rejected),
			parked:    pipe.HLen(ctx, k.prefix+":kpark"),
			record:    pipe.Exists(ctx, q.record),
			consumers: pipe.HKeys(ctx, k.consumers),
		}
		for level := 1; level <= MaxPriority; level++ {
			p.levels = append(p.levels, pipe.LLen(ctx, k.level(strconv.Itoa(level))))
		}
		probes = append(probes, p)
	}
	if len(probes) == 0 {
		return nil
	}
	if err := execPipe(ctx, pipe); err != nil {
		return readErr(ctx, "read namespace "+strconv.Quote(m.ns), err)
	}
	pipe = m.client.Pipeline()
	unacked := make([][]*redis.IntCmd, len(probes))
	for i, p := range probes {
		for _, c := range p.consumers.Val() {
			unacked[i] = append(unacked[i], pipe.HLen(ctx, p.q.keys.unacked(c)))
		}
	}
	if err := execPipe(ctx, pipe); err != nil {
		return readErr(ctx, "read namespace "+strconv.Quote(m.ns), err)
	}
	for i, p := range probes {
		n := p.ready.Val() + p.delayed.Val() + p.rejected.Val() + p.parked.Val()
		if p.tail.Val() == migrateWakeMarker {
			n--
		}
		for _, l := range p.levels {
			n += l.Val()
		}
		if stale, err := strconv.ParseInt(p.stale.Val(), 10, 64); err == nil {
			n -= stale
		}
		for _, u := range unacked[i] {
			n += u.Val()
		}
		p.q.redqHas = n
		p.q.hasRec = p.record.Val() == 1
	}
	return nil
}

// migrateWakeMarker is the element scripts/lib.lua pushes into an empty ready
// list to wake idle consumers (MARKER there); it is not a delivery.
const migrateWakeMarker = "\x00redq:wake"

// check fills the plan's report and refuses what cannot be moved.
func (m *migration) check() error {
	var problems []MigrationProblem
	for _, q := range m.queues {
		name := q.rep.Name
		for _, s := range q.sources {
			if s.count == 0 {
				continue
			}
			switch {
			case s.live:
				m.live = append(m.live, RmqHolding{Connection: s.conn, Queue: name, Count: s.count})
				continue
			case s.kind == "unacked":
				m.dead = append(m.dead, RmqHolding{Connection: s.conn, Queue: name, Count: s.count})
			}
			q.count(s.kind, s.count)
		}
		moving := q.moving()
		if q.unknown {
			problems = append(problems, MigrationProblem{Queue: name, Reason: "no such rmq queue: it is not listed in " +
				rmqQueuesKey + " and no rmq list of it holds anything (a typo?)"})
			continue
		}
		if why := validName(name); why != "" {
			if moving == 0 {
				if q.rep.Note == "" {
					q.rep.Note = "name is not a valid redq queue name (" + why + "); it holds nothing to move"
				}
				continue
			}
			problems = append(problems, MigrationProblem{Queue: name, Reason: fmt.Sprintf(
				"the name is not a valid redq queue name: %s; rename the queue in rmq (move its lists by hand), or leave it out with Queues (--queues)", why)})
			continue
		}
		if moving == 0 {
			continue
		}
		if q.redqHas > 0 && !q.hasRec && !m.opts.Merge {
			problems = append(problems, MigrationProblem{Queue: name, Reason: fmt.Sprintf(
				"redq's queue %q in namespace %q already holds %d deliveries (ready, delayed, rejected or unacked); to line rmq's up behind them set Merge (--merge), or choose another namespace",
				name, m.ns, q.redqHas)})
		}
		if m.cluster {
			for _, s := range q.sources {
				if s.count > 0 && !s.live && keySlot(s.key) != keySlot(q.keys.ready) {
					problems = append(problems, MigrationProblem{Queue: name, Reason: fmt.Sprintf(
						"on Redis Cluster, rmq's key %s (%s layout) is in slot %d and redq's %s in slot %d, and one script cannot move between slots; "+
							"rmq could only consume from this layout on a single node, so migrate where it ran, or with HashTags off leave it out",
						s.key, s.layout, keySlot(s.key), q.keys.ready, keySlot(q.keys.ready))})
					break
				}
			}
		}
	}
	for _, q := range m.queues {
		m.total += q.rep.Moved()
	}
	if len(problems) > 0 {
		m.opts.DryRun = true // nothing moved: report it as a plan
		return &MigrationRefusedError{Problems: problems}
	}
	return nil
}

func (q *migrateQueue) count(kind string, n int64) {
	switch kind {
	case "ready":
		q.rep.Ready += n
	case "rejected":
		q.rep.Rejected += n
	case "unacked":
		q.rep.Unacked += n
	}
}

// move runs the plan, chunk by chunk.
func (m *migration) move(ctx context.Context) error {
	m.start = time.Now()
	defer func() { m.elapsed = time.Since(m.start) }()
	// What was planned is counted again as it moves.
	m.dead = nil
	for _, q := range m.queues {
		q.rep.Ready, q.rep.Rejected, q.rep.Unacked = 0, 0, 0
	}
	for _, q := range m.queues {
		if q.moving() == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return m.interrupted(err)
		}
		if err := m.client.SAdd(context.WithoutCancel(ctx), newGlobalKeys(m.ns).queues, q.rep.Name).Err(); err != nil {
			return errorf("redq: list queue %q in namespace %q: %w", q.rep.Name, m.ns, err)
		}
		var ids [6]byte
		_, _ = rand.Read(ids[:])
		for _, s := range q.sources {
			if s.count == 0 || s.live {
				continue
			}
			if err := m.moveSource(ctx, q, s, string(ids[:])); err != nil {
				return err
			}
		}
		if err := m.left(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (m *migration) interrupted(err error) error {
	return errorf("redq: migration interrupted after moving %d of %d deliveries; nothing is lost or doubled, run it again to move the rest: %w",
		m.moved, m.total, err)
}

// moveSource moves one rmq list, at most as many items as it held when the
// run looked (rmq programs may still add to it; a later run moves those).
func (m *migration) moveSource(ctx context.Context, q *migrateQueue, s *migrateSource, ids string) error {
	dst, mode := q.keys.ready, "back"
	switch s.kind {
	case "rejected":
		dst = q.keys.rejected
	case "unacked":
		mode = "front"
	}
	keys := []string{s.key, dst, q.record}
	// The heartbeat goes into the script when one script may touch it: on
	// a single node, or when it shares the queue's slot.
	hbInScript := s.kind == "unacked" && (!m.cluster || keySlot(s.heartbeat) == keySlot(dst))
	if hbInScript {
		keys = append(keys, s.heartbeat)
	}
	var moved int64
	for moved < s.count {
		if err := ctx.Err(); err != nil {
			return m.interrupted(err)
		}
		// A chunk that was sent finishes, whatever happens to ctx, so that
		// its reply is read and counted.
		cctx := context.WithoutCancel(ctx)
		if s.kind == "unacked" && !hbInScript {
			alive, err := m.client.Exists(cctx, s.heartbeat).Result()
			if err != nil {
				return errorf("redq: read the heartbeat of rmq connection %s: %w", s.conn, err)
			}
			if alive == 1 {
				return m.cameAlive(cctx, q, s, moved)
			}
		}
		n := min(m.chunk, s.count-moved)
		m.calls++
		token := m.runID + ":" + strconv.Itoa(m.calls)
		reply, err := scripts.migrateRmq.Run(cctx, m.client, keys, token, n, mode, ids, s.kind).Result()
		if err != nil {
			return errorf("redq: move %s to %s: %w (what moved before is in place; run it again to move the rest)", s.key, dst, err)
		}
		r, err := int64s(reply)
		if err != nil || len(r) != 4 {
			return errorf("redq: move %s: unexpected reply %v", s.key, reply)
		}
		if r[3] == 1 {
			return m.cameAlive(cctx, q, s, moved)
		}
		moved += r[0]
		m.moved += r[0]
		q.count(s.kind, r[0])
		q.rep.Headers += r[1]
		q.rep.UnreadableHeaders += r[2]
		if m.opts.Progress != nil {
			m.opts.Progress(MigrateProgress{Queue: q.rep.Name, Moved: m.moved, Total: m.total, Elapsed: time.Since(m.start)})
		}
		if r[0] == 0 {
			break // rmq consumers took the rest meanwhile
		}
	}
	if s.kind == "unacked" && moved > 0 {
		m.dead = append(m.dead, RmqHolding{Connection: s.conn, Queue: q.rep.Name, Count: moved})
	}
	return nil
}

// cameAlive notes an rmq connection whose heartbeat came back while its
// unacked list was being moved: the rest stays with it.
func (m *migration) cameAlive(ctx context.Context, q *migrateQueue, s *migrateSource, moved int64) error {
	if moved > 0 {
		m.dead = append(m.dead, RmqHolding{Connection: s.conn, Queue: q.rep.Name, Count: moved})
	}
	n, err := m.client.LLen(ctx, s.key).Result()
	if err != nil {
		return errorf("redq: read %s: %w", s.key, err)
	}
	if n > 0 {
		m.live = append(m.live, RmqHolding{Connection: s.conn, Queue: q.rep.Name, Count: n})
	}
	return nil
}

// left counts what rmq's ready and rejected lists of q hold after the run.
func (m *migration) left(ctx context.Context, q *migrateQueue) error {
	pipe := m.client.Pipeline()
	var cmds []*redis.IntCmd
	for _, s := range q.sources {
		if s.kind != "unacked" {
			cmds = append(cmds, pipe.LLen(ctx, s.key))
		}
	}
	if err := execPipe(context.WithoutCancel(ctx), pipe); err != nil {
		return errorf("redq: read rmq's lists of queue %q: %w", q.rep.Name, err)
	}
	for _, c := range cmds {
		q.rep.Left += c.Val()
	}
	return nil
}

func (m *migration) report() MigrateReport {
	r := MigrateReport{Namespace: m.ns, DryRun: m.opts.DryRun, Dead: m.dead, Live: m.live, Elapsed: m.elapsed}
	for _, q := range m.queues {
		r.Queues = append(r.Queues, q.rep)
	}
	return r
}

// readErr is the error of a read that failed, before anything moved; when
// ctx ended it says so (a client with ContextTimeoutEnabled reports an
// i/o timeout instead).
func readErr(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return errorf("redq: %s: %w (%v); nothing moved", what, cerr, err)
	}
	return errorf("redq: %s: %w", what, err)
}

// execPipe runs a pipeline of reads and returns the first error of its
// commands other than redis.Nil (a missing key), which Exec would hide
// behind a redis.Nil that came first.
func execPipe(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, _ := pipe.Exec(ctx)
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}
