package redq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Cleaner returns the unacked deliveries of dead connections to ready. A
// connection is dead once its heartbeat key is gone (it expired, or the
// connection called StopAllConsuming); a cleaner then unlists it. Run one or several cleaners
// periodically, in-process or with `redq clean`; each delivery is returned
// once however many run at the same time, and a live connection's
// deliveries are never touched.
type Cleaner struct {
	conn Connection
}

// NewCleaner returns a cleaner that works through conn's client and
// namespace. It cannot fail; Clean on a cleaner of a test double returns
// ErrorNotRedis. For example:
//
//	returned, err := redq.NewCleaner(conn).Clean()
func NewCleaner(conn Connection) *Cleaner {
	return &Cleaner{conn: conn}
}

// Clean returns the deliveries of dead connections and reports how many,
// for every queue and timer set of the namespace.
func (cl *Cleaner) Clean() (int64, error) {
	return cl.CleanContext(context.Background())
}

// CleanContext is Clean with a context. It works in five steps, each safe
// to interrupt and to run concurrently:
//  1. Connections without a heartbeat are removed from the connections
//     set, in one script that checks and removes atomically. From then on
//     their heartbeat cannot come back: such a paused connection learns it
//     is dead when it resumes.
//  2. For each queue, the connections registered for it are listed.
//  3. The connections set is read again: a registered connection that is
//     not in it is dead (connections join the set before they register).
//  4. For each dead connection and queue, its unacked deliveries go back to
//     the head of ready in bounded chunks, and the step that empties its
//     storage unregisters it from the queue.
//  5. For each queue, deliveries whose lease (TTR) ran out go back to
//     ready, due delayed deliveries become ready, and deliveries whose time
//     to live ran out are dropped from the front of each ready line (so
//     that a queue nobody consumes shows them as ready or expired), in
//     bounded chunks.
//  6. For each round, items whose time to live ran out are removed, 1,000
//     per script call.
//
// The count it returns is of deliveries returned to ready from dead
// connections and lost leases.
//
// On a Redis Cluster the queues live on several nodes. A queue whose node
// does not answer (it is down, or failing over) is left for the next run
// and the others are cleaned: CleanContext then returns what it did with a
// *CleanError that names each queue (and round) it could not clean and
// why, and matches ErrorUnavailable (or ErrorWritesRefused) when that is
// the cause. When the node of the namespace's global keys (the
// connections and queues sets) does not answer, nothing can be cleaned and
// the error says so.
func (cl *Cleaner) CleanContext(ctx context.Context) (_ int64, err error) {
	c, ok := cl.conn.(*redisConnection)
	if !ok {
		return 0, ErrorNotRedis
	}
	defer func() { c.logClean(err) }()
	global := func(what string, err error) error {
		c.topologyChanged(err)
		return &CleanError{Global: errorf("%s: %w", what, cleanCause(err))}
	}
	names, err := c.client.SMembers(ctx, c.keys.connections).Result()
	if err != nil {
		return 0, global("list connections", err)
	}
	for len(names) > 0 {
		chunk := names[:min(len(names), fetchChunk)]
		names = names[len(chunk):]
		keys := make([]string, 0, 2*len(chunk)+1)
		keys = append(keys, c.keys.connections)
		args := make([]any, len(chunk))
		for i, n := range chunk {
			keys = append(keys, c.keys.heartbeat(n), c.keys.stopped(n))
			args[i] = n
		}
		if err := scripts.declareDead.Run(ctx, c.client, keys, args...).Err(); err != nil {
			return 0, global("declare dead connections", err)
		}
	}
	queues, err := c.cleanTargets(ctx)
	if err != nil {
		return 0, global("list queues", err)
	}
	// One pipeline; a cluster client splits it by node, and a node that
	// does not answer fails only its own queues' commands.
	pipe := c.client.Pipeline()
	consumers := make([]*redis.StringSliceCmd, len(queues))
	for i, q := range queues {
		consumers[i] = pipe.HKeys(ctx, q.keys.consumers)
	}
	if len(queues) > 0 {
		_, _ = pipe.Exec(ctx) // errors are read per queue below
	}
	alive, err := c.client.SMembers(ctx, c.keys.connections).Result()
	if err != nil {
		return 0, global("list connections", err)
	}
	live := make(map[string]bool, len(alive))
	for _, n := range alive {
		live[n] = true
	}
	var total int64
	failed := &CleanError{}
	for i, q := range queues {
		n, err := q.clean(ctx, consumers[i], live)
		total += n
		if err == nil {
			// moves a pusher left half done are finished, not counted:
			// what Clean counts is what it returned to ready
			_, err = q.finishStaged(ctx)
		}
		if err != nil {
			c.topologyChanged(err)
			failed.add(ctx, c, q.keys.ready, q.label(), err)
		}
	}
	for _, f := range c.sweepRounds(ctx) {
		c.topologyChanged(f.err)
		failed.add(ctx, c, f.key, f.label, f.err)
	}
	if len(failed.Queues) > 0 {
		return total, failed
	}
	return total, nil
}

// clean returns the unacked deliveries of q's dead connections (those
// registered in consumers and not live), then its lost leases, due and
// expired deliveries (see maintain).
func (q *redisQueue) clean(ctx context.Context, consumers *redis.StringSliceCmd, live map[string]bool) (int64, error) {
	conns, err := consumers.Result()
	if err != nil {
		return 0, errorf("list consumers of %q: %w", q.name, err)
	}
	var total int64
	for _, conn := range conns {
		if live[conn] {
			continue
		}
		n, err := q.returnUnacked(ctx, conn, 0, true)
		total += n
		if err != nil {
			return total, err
		}
	}
	n, err := q.maintain(ctx)
	return total + n, err
}

// label names q in a CleanError: its name, "timers <name>" for a timer
// set or "schedules <name>" for a schedule set.
func (q *redisQueue) label() string {
	switch q.keys.prefix {
	case newQueueKeys(q.conn.opts.namespace, q.name).prefix:
		return q.name
	case newQueueKeys(q.conn.opts.namespace, scheduleTag+q.name).prefix:
		return "schedules " + q.name
	}
	return "timers " + q.name
}

// CleanError is the error of a Clean that could not clean everything: on a
// Redis Cluster, the queues whose node did not answer. What it names is
// left for the next Clean; everything else was cleaned, and the count
// Clean returned is of that. It matches ErrorUnavailable (a node could not
// be reached or did not answer) or ErrorWritesRefused (a node refused, for
// example during a failover) when one of its failures has that cause.
type CleanError struct {
	// Global is set when the namespace's global keys (the connections and
	// queues sets, on one node) could not be read or written: then nothing
	// was cleaned.
	Global error
	// Queues maps each queue that could not be cleaned to why: a queue's
	// name, "timers <name>" for a timer set, "schedules <name>" for a
	// schedule set, "round <name>" for a round.
	Queues map[string]error
	// Nodes maps the same names to the address of the cluster node that
	// serves them, where the client could tell (a cluster client).
	Nodes map[string]string
}

func (e *CleanError) add(ctx context.Context, c *redisConnection, key, name string, err error) {
	if e.Queues == nil {
		e.Queues, e.Nodes = map[string]error{}, map[string]string{}
	}
	e.Queues[name] = cleanCause(err)
	if cc, ok := c.client.(*redis.ClusterClient); ok {
		if node, nerr := cc.MasterForKey(ctx, key); nerr == nil {
			e.Nodes[name] = node.Options().Addr
		}
	}
}

// Error lists what could not be cleaned, by queue (and node).
func (e *CleanError) Error() string {
	if e.Global != nil {
		return onePrefix("redq: clean: " + e.Global.Error())
	}
	names := make([]string, 0, len(e.Queues))
	for n := range e.Queues {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "redq: clean: %d not cleaned:", len(names))
	for _, n := range names {
		if node := e.Nodes[n]; node != "" {
			fmt.Fprintf(&b, " %q (node %s): %v;", n, node, e.Queues[n])
		} else {
			fmt.Fprintf(&b, " %q: %v;", n, e.Queues[n])
		}
	}
	return onePrefix(strings.TrimSuffix(b.String(), ";"))
}

// Unwrap returns the failures, so that errors.Is matches their causes.
func (e *CleanError) Unwrap() []error {
	if e.Global != nil {
		return []error{e.Global}
	}
	out := make([]error, 0, len(e.Queues))
	for _, err := range e.Queues {
		out = append(out, err)
	}
	return out
}

// cleanCause marks err with ErrorUnavailable when Redis could not be
// reached or did not answer, or with ErrorWritesRefused when it refused
// the call for now; other errors are returned as they are. (A clean that
// did not finish is safe to run again: it picks up where it stopped.)
func cleanCause(err error) error {
	if errors.Is(err, ErrorUnavailable) || errors.Is(err, ErrorWritesRefused) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	switch classify(err) {
	case failUnreached, failUnknown:
		return errorf("%w: %w", ErrorUnavailable, err)
	case failRefused, failOOM:
		return errorf("%w: %w", ErrorWritesRefused, err)
	}
	return err
}

// cleanTargets lists the queues, timer sets and schedule sets of the
// namespace, as queue handles on their storage.
func (c *redisConnection) cleanTargets(ctx context.Context) ([]*redisQueue, error) {
	pipe := c.client.Pipeline()
	queues := pipe.SMembers(ctx, c.keys.queues)
	timers := pipe.SMembers(ctx, c.keys.timers)
	schedules := pipe.SMembers(ctx, c.keys.schedules)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, errorf("redq: clean: list queues: %w", err)
	}
	var out []*redisQueue
	for _, name := range queues.Val() {
		out = append(out, newQueue(c, name, queueOptions{}))
	}
	for _, name := range timers.Val() {
		q := newQueue(c, name, queueOptions{})
		q.setKeys(newQueueKeys(c.opts.namespace, timerTag+name))
		out = append(out, q)
	}
	for _, name := range schedules.Val() {
		q := newQueue(c, name, queueOptions{})
		q.setKeys(newQueueKeys(c.opts.namespace, scheduleTag+name))
		out = append(out, q)
	}
	return out, nil
}

// maintain returns q's deliveries whose lease ran out, promotes its due
// delayed deliveries and drops expired ones from the front of its ready
// lines, in chunks of fetchChunk, and reports how many leases it returned.
// A lease can be returned only by a call that declares its connection's
// storage: the script names the connections it met without it, and the
// next call declares them.
func (q *redisQueue) maintain(ctx context.Context) (int64, error) {
	var returned int64
	var others []string
	for {
		conns := make([][]string, len(others))
		for i, c := range others {
			conns[i] = q.keys.connKeys(c)
		}
		v, err := scripts.maintain.Run(ctx, q.conn.client, q.keys.scriptKeys("", nil, conns...), fetchChunk).Slice()
		if err != nil {
			return returned, errorf("leases and due deliveries of %q: %w", q.name, err)
		}
		if len(v) < 3 {
			return returned, errorf("leases and due deliveries of %q: unexpected reply %v", q.name, v)
		}
		ns, err := int64s(v[:3])
		if err != nil {
			return returned, errorf("leases and due deliveries of %q: %w", q.name, err)
		}
		returned += ns[0]
		// come back with the connections named (at most maxOthers a
		// call), unless the call declared just those and ended no lease:
		// then they cannot be served, and asking again would not end
		var need []string
		for _, x := range v[3:] {
			if c, ok := x.(string); ok && len(need) < maxOthers {
				need = append(need, c)
			}
		}
		more := len(need) > 0 && (ns[0] > 0 || !sameNames(need, others))
		others = need
		if !more && ns[0] < fetchChunk && ns[1] < fetchChunk && ns[2] < fetchChunk {
			return returned, nil
		}
	}
}

// sameNames reports whether a and b hold the same names.
func sameNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	in := make(map[string]bool, len(b))
	for _, x := range b {
		in[x] = true
	}
	for _, x := range a {
		if !in[x] {
			return false
		}
	}
	return true
}
