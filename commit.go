package redq

import (
	"context"
	"sync"
	"time"
)

// committer coalesces acks from many consumers into few Redis calls (group
// commit). A caller whose ack finds no flush under way flushes everything
// pending, its own ack included, in one pipeline with one script call per
// queue; acks that arrive meanwhile wait for the next flush, which the
// flushing caller hands to a new goroutine so it can return at once. Every
// Ack returns only after Redis answered for its delivery.
type committer struct {
	conn       *redisConnection
	maxFlushes int

	mu      sync.Mutex
	pending []*ackRequest
	flushes int
}

type ackRequest struct {
	q    *redisQueue
	id   string
	done chan ackResult
}

type ackResult struct {
	deleted, registered bool
	err                 error
}

// flushTimeout bounds one flush: the callers' contexts do not, since one
// flush serves many callers.
const flushTimeout = 30 * time.Second

func newCommitter(c *redisConnection) *committer {
	return &committer{conn: c, maxFlushes: 2}
}

// ack deletes one delivery from q's unacked storage and reports whether it
// was there and whether the connection is still registered for q.
func (c *committer) ack(ctx context.Context, q *redisQueue, id string) (deleted, registered bool, err error) {
	r := &ackRequest{q: q, id: id, done: make(chan ackResult, 1)}
	c.mu.Lock()
	c.pending = append(c.pending, r)
	if c.flushes < c.maxFlushes {
		c.flushes++
		batch := c.pending
		c.pending = nil
		c.mu.Unlock()
		c.flush(batch)
		c.mu.Lock()
		if len(c.pending) > 0 {
			go c.drain()
		} else {
			c.flushes--
		}
	}
	c.mu.Unlock()
	select {
	case res := <-r.done:
		return res.deleted, res.registered, res.err
	case <-ctx.Done():
		return false, false, ctx.Err()
	}
}

// drain flushes until nothing is pending; it owns one flush slot.
func (c *committer) drain() {
	for {
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.flushes--
			c.mu.Unlock()
			return
		}
		batch := c.pending
		c.pending = nil
		c.mu.Unlock()
		c.flush(batch)
	}
}

// flush sends one pipeline: an ack script call per queue (and per chunk).
func (c *committer) flush(batch []*ackRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	type group struct {
		q    *redisQueue
		reqs []*ackRequest
	}
	var groups []*group
	byQueue := map[*redisQueue]*group{}
	for _, r := range batch {
		g := byQueue[r.q]
		if g == nil || len(g.reqs) == fetchChunk {
			g = &group{q: r.q}
			byQueue[r.q] = g
			groups = append(groups, g)
		}
		g.reqs = append(g.reqs, r)
	}
	calls := make([]scriptCall, len(groups))
	for i, g := range groups {
		ids := make([]string, len(g.reqs))
		for j, r := range g.reqs {
			ids[j] = r.id
		}
		calls[i] = scriptCall{scripts.ack, []string{g.q.unackedKey, g.q.keys.consumers}, ackArgs(c.conn.name, ids)}
	}
	cmds := evalBatch(ctx, c.conn.client, calls)
	for i, g := range groups {
		v, err := cmds[i].Result()
		var deleted []bool
		var registered bool
		if err == nil {
			deleted, registered, err = flags(v, len(g.reqs))
		}
		for j, r := range g.reqs {
			if err != nil {
				r.done <- ackResult{err: err}
			} else {
				r.done <- ackResult{deleted: deleted[j], registered: registered}
			}
		}
	}
}
