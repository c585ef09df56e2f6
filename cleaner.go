package redq

import (
	"context"
	"fmt"

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

// NewCleaner returns a cleaner that works through conn.
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
func (cl *Cleaner) CleanContext(ctx context.Context) (int64, error) {
	c, ok := cl.conn.(*redisConnection)
	if !ok {
		return 0, ErrorNotRedis
	}
	names, err := c.client.SMembers(ctx, c.keys.connections).Result()
	if err != nil {
		return 0, fmt.Errorf("redq: clean: list connections: %w", err)
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
			return 0, fmt.Errorf("redq: clean: declare dead connections: %w", err)
		}
	}
	queues, err := c.cleanTargets(ctx)
	if err != nil {
		return 0, err
	}
	pipe := c.client.Pipeline()
	consumers := make([]*redis.StringSliceCmd, len(queues))
	for i, q := range queues {
		consumers[i] = pipe.HKeys(ctx, q.keys.consumers)
	}
	if len(queues) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("redq: clean: list consumers: %w", err)
		}
	}
	alive, err := c.client.SMembers(ctx, c.keys.connections).Result()
	if err != nil {
		return 0, fmt.Errorf("redq: clean: list connections: %w", err)
	}
	live := make(map[string]bool, len(alive))
	for _, n := range alive {
		live[n] = true
	}
	var total int64
	for i, q := range queues {
		for _, conn := range consumers[i].Val() {
			if live[conn] {
				continue
			}
			n, err := q.returnUnacked(ctx, conn, 0, true)
			total += n
			if err != nil {
				return total, fmt.Errorf("redq: clean: %w", err)
			}
		}
		n, err := q.maintain(ctx)
		total += n
		if err != nil {
			return total, fmt.Errorf("redq: clean: %w", err)
		}
		// moves a pusher left half done are finished, not counted: what
		// Clean counts is what it returned to ready
		if _, err := q.finishStaged(ctx); err != nil {
			return total, fmt.Errorf("redq: clean: %w", err)
		}
	}
	if err := c.sweepRounds(ctx); err != nil {
		return total, fmt.Errorf("redq: clean: %w", err)
	}
	return total, nil
}

// cleanTargets lists the queues and timer sets of the namespace, as
// queue handles on their storage.
func (c *redisConnection) cleanTargets(ctx context.Context) ([]*redisQueue, error) {
	pipe := c.client.Pipeline()
	queues := pipe.SMembers(ctx, c.keys.queues)
	timers := pipe.SMembers(ctx, c.keys.timers)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redq: clean: list queues: %w", err)
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
			return returned, fmt.Errorf("leases and due deliveries of %q: %w", q.name, err)
		}
		if len(v) < 3 {
			return returned, fmt.Errorf("leases and due deliveries of %q: unexpected reply %v", q.name, v)
		}
		ns, err := int64s(v[:3])
		if err != nil {
			return returned, fmt.Errorf("leases and due deliveries of %q: %w", q.name, err)
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
