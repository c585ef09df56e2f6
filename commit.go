package redq

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// committer settles deliveries (ack, reject, push, hand back) for one
// connection, coalescing the requests of many consumers into few Redis
// calls (see groupCommit): one pipeline per flush, with one script call per
// queue, verb and chunk. Every request returns only after Redis answered for
// its deliveries, or with ErrorOutcomeUnknown when no answer came in time.
//
// Each script call carries a field of the replies hash and a token, and
// Redis keeps the call's results under that field (see settle.lua). A call
// that fails without a usable answer is sent again under the same field and
// token until Redis answers or the requests' retry deadlines pass (see
// sends), so Redis settles each take at most once and the answer is the
// outcome of the first send that ran, even when a cleaner declared the
// connection dead in between. A field stays with its call until the call is
// done; the first send is made by the flush, further ones by a goroutine of
// their own, so the flush slot is free again at once.
type committer struct {
	conn   *redisConnection
	group  *groupCommit[*settleRequest]
	fields fieldPool
	// merge is set on a single-node client (a failover client is one),
	// where one script may touch the keys of many queues: the plain acks
	// of several queues in one flush then share a call of ack_many.lua
	// (see mergeAcks).
	merge bool
}

// Settle modes, as settle.lua reads them; an ack of takes none of which is
// keyed goes to ack.lua instead, and an ack of a timer set's fires to
// fire_ack.lua.
const (
	modeAck  = "A" // delete (takes none of which is keyed: ack.lua)
	modeTail = "L" // move to the tail of rejected (taken last)
	modePush = "P" // move to the tail of another queue's ready (its dest)
	modeHead = "R" // move to the head of a list (taken next)
)

// States of a settle request: a caller whose context ends while its
// request is still pending withdraws it, and then knows it was never sent.
const (
	requestPending int32 = iota
	requestTaken
	requestWithdrawn
)

type settleRequest struct {
	q        *redisQueue
	reg      *registration // under which the takes were made
	mode     string
	dest     *redisQueue // the queue of modePush; nil for the other modes
	ids      []string
	deadline time.Time      // stop sending it again after this
	report   *redisDelivery // named in DeliveryErrors while it is resent; nil: none
	state    atomic.Int32
	done     chan settleResult
}

// settleResult is Redis's answer for every id of a request.
type settleResult struct {
	codes      []int64 // per id: codeDone, codeMissing or codeLost
	registered bool    // the connection is registered for the queue
	errs       []error // per id, when its call failed for good; nil when none did
	// waited is, with WithWaitReplicas, the *ReplicationError of a call of
	// the request whose write fewer replicas confirmed.
	waited error
}

// err returns the error for id i, if its call failed.
func (r settleResult) err(i int) error {
	if r.errs == nil {
		return nil
	}
	return r.errs[i]
}

// ackFlushSlots is how many settle flushes of a connection may be under
// way at once: one. Each call costs Redis a fixed part (the round trip's
// reads and writes, the script's setup, the reply record, the counters) of
// about fourteen times what one more ack in it costs (about 23 against
// 1.6 µs of Redis's CPU, see docs/performance.md), so fuller calls matter
// more than the latency a second slot saves. Measured with ten consumers
// acking one by one on a 2-CPU machine shared with Redis: one slot needs
// about 30% less of Redis's CPU per delivery than two (7 against 10 µs)
// and delivers about a fifth more per second or better.
const ackFlushSlots = 1

func newCommitter(c *redisConnection) *committer {
	cm := &committer{conn: c, fields: fieldPool{prefix: "s"}}
	_, cm.merge = c.client.(*redis.Client)
	cm.group = newGroupCommitSlots(cm.flush, ackFlushSlots)
	return cm
}

// settle applies mode to the takes ids of q's unacked storage under reg
// (the registration that made them: see registration) and returns
// Redis's answer. dest is the destination list of a tail move. The calls
// are resent until the retry deadline for ctx (see retryDeadline). When
// ctx ends first, the error is ctx's if nothing was sent, or
// ErrorOutcomeUnknown (wrapping ctx's) if it may still run.
func (c *committer) settle(ctx context.Context, q *redisQueue, reg *registration, mode string, dest *redisQueue, ids []string, report *redisDelivery) (settleResult, error) {
	if len(ids) == 0 {
		return settleResult{registered: true}, nil
	}
	if err := ctx.Err(); err != nil {
		return settleResult{}, err
	}
	r := &settleRequest{q: q, reg: reg, mode: mode, dest: dest, ids: ids, deadline: c.conn.retryDeadline(ctx), report: report,
		done: make(chan settleResult, 1)}
	c.group.submit(r)
	return await(ctx, &r.state, r.done)
}

// settlePart is the part of a request that one script call carries.
type settlePart struct {
	r          *settleRequest
	from, to   int // the request's ids in the call
	groupStart int // where they start in the call's ids
}

// pendingResult collects a request's answer over the calls it spans; only
// the goroutine that sends the flush's calls touches it.
type pendingResult struct {
	res  settleResult
	left int // calls not yet done
}

// flush sends the batch's calls: one script call per queue, registration,
// mode and destination (and per chunk of fetchChunk ids), each under a
// field and a token of its own.
func (c *committer) flush(_ int, batch []*settleRequest) {
	type callKey struct {
		q    *redisQueue
		reg  *registration
		mode string
		dest *redisQueue
	}
	type call struct {
		key   callKey
		ids   []string
		parts []settlePart
		rc    *remembered
	}
	var calls []*call
	open := map[callKey]*call{}
	byRequest := make(map[*settleRequest]*pendingResult, len(batch))
	for _, r := range batch {
		if !r.state.CompareAndSwap(requestPending, requestTaken) {
			continue // withdrawn by its caller
		}
		pr := &pendingResult{res: settleResult{codes: make([]int64, len(r.ids)), registered: true}}
		byRequest[r] = pr
		for from := 0; from < len(r.ids); {
			k := callKey{r.q, r.reg, r.mode, r.dest}
			cl := open[k]
			if cl == nil || len(cl.ids) >= fetchChunk {
				cl = &call{key: k, rc: &remembered{}}
				open[k] = cl
				calls = append(calls, cl)
			}
			to := min(len(r.ids), from+fetchChunk-len(cl.ids))
			cl.parts = append(cl.parts, settlePart{r: r, from: from, to: to, groupStart: len(cl.ids)})
			cl.ids = append(cl.ids, r.ids[from:to]...)
			if r.deadline.After(cl.rc.deadline) {
				cl.rc.deadline = r.deadline
			}
			pr.left++ // each part of a request is in a call of its own
			from = to
		}
	}
	if len(calls) == 0 {
		return
	}
	rcs := make([]*remembered, len(calls))
	for i, cl := range calls {
		q := cl.key.q
		field, token := c.fields.take(c.conn)
		var dest *queueKeys
		if cl.key.dest != nil {
			dest = &cl.key.dest.keys
		}
		args := make([]any, 0, 4+len(cl.ids))
		var sc scriptCall
		if cl.key.mode == modeAck && !anyKeyed(cl.ids) {
			// acks of plain takes: the short form (see ack.lua)
			sc = scriptCall{script: scripts.ack, keys: q.keys.ackKeys(cl.key.reg.name)}
			args = append(args, cl.key.reg.name, field, token)
		} else if cl.key.mode == modeAck && q.timers && allKeyed(cl.ids) {
			// acks of a timer set's fires: their short form (see fire_ack.lua)
			sc = scriptCall{script: scripts.fireAck, keys: q.keys.fireAckKeys(cl.key.reg.name)}
			args = append(args, cl.key.reg.name, field, token)
		} else {
			sc = scriptCall{script: scripts.settle, keys: q.keys.scriptKeys("", dest, q.keys.connKeys(cl.key.reg.name))}
			args = append(args, cl.key.reg.name, cl.key.mode, field, token)
		}
		for _, id := range cl.ids {
			args = append(args, id)
		}
		sc.args = args
		cl.rc.scriptCall = sc
		cl.rc.report = func(err error, n int) {
			seen := map[*settleRequest]bool{}
			for _, p := range cl.parts {
				if p.r.report != nil && !seen[p.r] {
					seen[p.r] = true
					c.conn.report(&DeliveryError{Delivery: p.r.report, RedisErr: err, Count: n})
				}
			}
		}
		cl.rc.done = func(v any, err error) {
			c.fields.put(field)
			var codes []int64
			registered := false
			var waited error
			if errors.Is(err, ErrorNotReplicated) {
				waited, err = err, nil
			}
			if err == nil {
				codes, registered, err = parseCodes(v, len(cl.ids))
			}
			for _, p := range cl.parts {
				pr := byRequest[p.r]
				if err != nil {
					if pr.res.errs == nil {
						pr.res.errs = make([]error, len(p.r.ids))
					}
					for j := p.from; j < p.to; j++ {
						pr.res.errs[j] = err
					}
				} else {
					pr.res.registered = pr.res.registered && registered
					if waited != nil {
						pr.res.waited = waited
					}
					copy(pr.res.codes[p.from:p.to], codes[p.groupStart:p.groupStart+p.to-p.from])
				}
				if pr.left--; pr.left == 0 {
					p.r.done <- pr.res
				}
			}
		}
		rcs[i] = cl.rc
	}
	if c.merge {
		rcs = mergeAcks(rcs)
	}
	c.conn.sendAll(rcs, nil)
}

// Bounds of one call of ack_many.lua: its groups (7 keys each) and its
// takes, as for one queue's call.
const (
	ackManyGroups = 64
	ackManyTakes  = fetchChunk
)

// mergeAcks returns calls with the calls of ack.lua among them (plain
// acks, one queue and registration each) put together into calls of
// ack_many.lua, up to ackManyGroups groups and ackManyTakes takes each; a
// lone call of ack.lua stays as it is. Each group keeps its field and
// token, so Redis records and answers each as if it had been sent alone,
// and a send of the merged call again answers every group as the first
// did. The merged call is sent until the latest of its groups' deadlines,
// reports a failed try to each group's report, and hands each group its
// own part of the answer, or the call's error.
func mergeAcks(calls []*remembered) []*remembered {
	var acks []*remembered
	out := calls[:0:0]
	for _, rc := range calls {
		if rc.script == scripts.ack {
			acks = append(acks, rc)
		} else {
			out = append(out, rc)
		}
	}
	if len(acks) < 2 {
		return calls
	}
	for len(acks) > 0 {
		var group []*remembered
		takes := 0
		for len(acks) > 0 && len(group) < ackManyGroups {
			n := len(acks[0].args) - 3
			if len(group) > 0 && takes+n > ackManyTakes {
				break
			}
			group = append(group, acks[0])
			takes += n
			acks = acks[1:]
		}
		if len(group) == 1 {
			out = append(out, group[0])
			continue
		}
		out = append(out, mergedAck(group, takes))
	}
	return out
}

// mergedAck is one call of ack_many.lua for the ack.lua calls group,
// which carry takes takes in all.
func mergedAck(group []*remembered, takes int) *remembered {
	keys := make([]string, 0, 7*len(group))
	args := make([]any, 0, 4*len(group)+takes)
	m := &remembered{}
	for _, rc := range group {
		keys = append(keys, rc.keys...)
		args = append(args, len(rc.args)-3)
		args = append(args, rc.args...)
		if rc.deadline.After(m.deadline) {
			m.deadline = rc.deadline
		}
	}
	m.scriptCall = scriptCall{script: scripts.ackMany, keys: keys, args: args}
	m.report = func(err error, n int) {
		for _, rc := range group {
			if rc.report != nil {
				rc.report(err, n)
			}
		}
	}
	m.done = func(v any, err error) {
		var parts []any
		if err == nil || errors.Is(err, ErrorNotReplicated) {
			// (with WithWaitReplicas the answer comes with the error)
			var ok bool
			if parts, ok = v.([]any); !ok || len(parts) != len(group) {
				parts, err = nil, errorf("%w: ack_many.lua answered %T for %d groups", errBadReply, v, len(group))
			}
		}
		for i, rc := range group {
			if parts == nil {
				rc.done(nil, err)
			} else {
				rc.done(parts[i], err)
			}
		}
	}
	return m
}

// fieldPool hands out names of fields of a replies hash (or of record
// slots), reusing those given back, so that there are as many as calls
// were ever under way at once.
//
// The scripts refuse a call whose token is older than the one recorded
// under its field (a late send of a call that is over), so a call must
// draw its token after it got its field: the previous call under the field
// gave it back first, and the token counter only grows. A token drawn
// before the field could be older than the token of a call that took the
// field meanwhile, and the script would refuse a call that never ran.
type fieldPool struct {
	prefix string
	mu     sync.Mutex
	free   []string
	n      int
}

// take hands out a field and then draws c's next token for the call that
// holds it, in that order (see above).
func (p *fieldPool) take(c *redisConnection) (field, token string) {
	p.mu.Lock()
	if k := len(p.free); k > 0 {
		field = p.free[k-1]
		p.free = p.free[:k-1]
	} else {
		p.n++
		field = p.prefix + strconv.Itoa(p.n)
	}
	p.mu.Unlock()
	return field, c.nextToken()
}

func (p *fieldPool) put(f string) {
	p.mu.Lock()
	p.free = append(p.free, f)
	p.mu.Unlock()
}

// allKeyed reports whether every take of ids is of a keyed item (its
// field ends with 'k'), as every take of a timer set is.
func allKeyed(ids []string) bool {
	for _, id := range ids {
		if id[len(id)-1] != 'k' {
			return false
		}
	}
	return true
}

// anyKeyed reports whether a take of ids is of a keyed item or of a
// group (its field ends with 'k' or 'g': see fetch.lua): its ack needs
// settle.lua, which updates the key or frees the group's slot.
func anyKeyed(ids []string) bool {
	for _, id := range ids {
		if c := id[len(id)-1]; c == 'k' || c == 'g' {
			return true
		}
	}
	return false
}
