package redq

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"
)

// committer settles deliveries (ack, reject, push, hand back) for one
// connection, coalescing the requests of many consumers into few Redis
// calls (see groupCommit): one pipeline per flush, with one script call per
// queue and verb. Every request returns only after Redis answered for its
// deliveries.
//
// Each flush carries a token, and Redis keeps the last reply per flush slot
// (see settle.lua), so a flush that go-redis sends again after a lost reply
// gets its first answer back instead of "not found".
type committer struct {
	conn  *redisConnection
	token atomic.Uint64
	group *groupCommit[*settleRequest]
}

// flushTimeout bounds one flush: the callers' contexts do not, since one
// flush serves many callers.
const flushTimeout = 30 * time.Second

// Settle modes, as settle.lua reads them.
const (
	modeAck  = "A" // delete
	modeTail = "L" // move to the tail of a list (taken last)
	modeHead = "R" // move to the head of a list (taken next)
)

type settleRequest struct {
	q    *redisQueue
	mode string
	dest string
	ids  []string
	done chan settleResult
}

type settleResult struct {
	codes      []int64 // per id: codeDone, codeMissing, codeLost or codeSuperseded
	registered bool
	err        error
}

func newCommitter(c *redisConnection) *committer {
	cm := &committer{conn: c}
	cm.group = newGroupCommit(cm.flush)
	return cm
}

// settle applies mode to ids of q's unacked storage and reports, per id,
// whether it was there (a code), and whether the connection is still
// registered for q. dest is the destination list of a tail move.
func (c *committer) settle(ctx context.Context, q *redisQueue, mode, dest string, ids []string) ([]int64, bool, error) {
	if len(ids) == 0 {
		return nil, true, nil
	}
	r := &settleRequest{q: q, mode: mode, dest: dest, ids: ids, done: make(chan settleResult, 1)}
	c.group.submit(r)
	select {
	case res := <-r.done:
		return res.codes, res.registered, res.err
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// flush sends one pipeline: a settle script call per queue, mode and
// destination (and per chunk of fetchChunk ids).
func (c *committer) flush(slot int, batch []*settleRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	type groupKey struct {
		q          *redisQueue
		mode, dest string
	}
	type part struct {
		r          *settleRequest
		from, to   int // the request's ids in the group
		groupStart int // where they start in the group's results
	}
	type group struct {
		key   groupKey
		ids   []string
		parts []part
	}
	var groups []*group
	open := map[groupKey]*group{}
	for _, r := range batch {
		for from := 0; from < len(r.ids); {
			k := groupKey{r.q, r.mode, r.dest}
			g := open[k]
			if g == nil || len(g.ids) >= fetchChunk {
				g = &group{key: k}
				open[k] = g
				groups = append(groups, g)
			}
			to := min(len(r.ids), from+fetchChunk-len(g.ids))
			g.parts = append(g.parts, part{r: r, from: from, to: to, groupStart: len(g.ids)})
			g.ids = append(g.ids, r.ids[from:to]...)
			from = to
		}
	}
	token := strconv.FormatUint(c.token.Add(1), 10)
	calls := make([]scriptCall, len(groups))
	for i, g := range groups {
		q := g.key.q
		dest := g.key.dest
		if dest == "" {
			dest = q.keys.ready // unused by acks; any key of the queue's slot
		}
		args := make([]any, 0, 5+len(g.ids))
		args = append(args, q.keys.prefix, c.conn.name, g.key.mode, "s"+strconv.Itoa(slot)+"."+strconv.Itoa(i), token)
		for _, id := range g.ids {
			args = append(args, id)
		}
		calls[i] = scriptCall{scripts.settle, []string{q.keys.ready, dest}, args}
	}
	cmds := evalBatch(ctx, c.conn.client, calls)
	results := map[*settleRequest]*settleResult{}
	for _, r := range batch {
		results[r] = &settleResult{codes: make([]int64, len(r.ids)), registered: true}
	}
	for i, g := range groups {
		v, err := cmds[i].Result()
		var settled []int64
		var registered bool
		if err == nil {
			settled, registered, err = codes(v, len(g.ids))
		}
		for _, p := range g.parts {
			res := results[p.r]
			if err != nil {
				res.err = err
				continue
			}
			res.registered = res.registered && registered
			copy(res.codes[p.from:p.to], settled[p.groupStart:p.groupStart+p.to-p.from])
		}
	}
	for _, r := range batch {
		r.done <- *results[r]
	}
}
