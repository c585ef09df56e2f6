package redq

import (
	"context"
	"errors"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Overview is everything a dashboard's first page or a metrics scrape
// shows of a namespace, read at once by Inspector.Overview.
type Overview struct {
	// Queues is what Inspector.Queues returns: every open queue, sorted
	// by name.
	Queues []QueueInfo
	// Connections is what Inspector.Connections returns: every
	// registered connection, sorted by name.
	Connections []ConnectionInfo
	// Timers is what Inspector.Timers returns: the counts of every timer
	// set (empty, not nil, when there is none).
	Timers map[string]TimerStat
	// Rounds is what Inspector.Rounds returns: the counts of every round
	// (empty, not nil, when there is none).
	Rounds map[string]RoundStat
	// ScheduleSets is what Inspector.ScheduleSets returns: the counts of
	// every schedule set (empty, not nil, when there is none).
	ScheduleSets map[string]ScheduleSetStat
}

// overviewGuess bounds the unacked counts Overview reads on a guess for
// queues it has not seen before: every registered connection in every
// such queue, while that makes at most this many reads. Above it, the
// pairs are read once the queues' registrations are known (one more round
// trip).
const overviewGuess = 4096

// Overview returns what Queues, Connections, Timers, Rounds and
// ScheduleSets return, in
// at most two round trips on a single Redis node, whatever the number of
// queues, connections, timers and rounds:
//
//  1. one pipeline reads the namespace's sets of queues, connections,
//     timer sets and rounds;
//  2. one pipeline reads everything per queue (its counts and totals, its
//     registered connections and their unacked counts), per connection
//     (heartbeat and stopped mark), per timer set and per round.
//
// A third round trip reads the unacked counts of connections that
// registered for a queue since the Inspector's previous Overview (on the
// first call, only when the namespace has more than a few thousand
// queue-connection pairs). After a Redis restart, which empties its script
// cache, the scripts are loaded once and their calls sent again: at most
// three round trips more, once.
//
// On a Redis Cluster client go-redis splits each pipeline by node, so a
// round trip is one pipeline per node, sent concurrently.
//
// Like the separate methods, Overview reads without writing; the four
// parts are read together but not atomically (Redis may change in
// between, as between two separate calls). An invalid queue name in the
// namespace's queue set returns an *ArgumentError, as Queues does.
func (i *Inspector) Overview(ctx context.Context) (Overview, error) {
	fail := func(err error) (Overview, error) { return Overview{}, errorf("redq: overview: %w", err) }

	// Round trip 1: the namespace's sets.
	pipe := i.client.Pipeline()
	queuesCmd := pipe.SMembers(ctx, i.keys.queues)
	connsCmd := pipe.SMembers(ctx, i.keys.connections)
	timersCmd := pipe.SMembers(ctx, i.keys.timers)
	roundsCmd := pipe.SMembers(ctx, i.keys.rounds())
	schedulesCmd := pipe.SMembers(ctx, i.keys.schedules)
	if _, err := pipe.Exec(ctx); err != nil {
		return fail(err)
	}
	queues, conns := queuesCmd.Val(), connsCmd.Val()
	sort.Strings(queues)
	sort.Strings(conns)
	for _, name := range queues {
		if why := validQueueName(name); why != "" {
			return Overview{}, argError("queue name", name, why)
		}
	}

	// Round trip 2: everything per queue, connection, timer set and round.
	guess := i.unackedGuess(queues, conns)
	pipe = i.client.Pipeline()
	type queueCmds struct {
		keys      queueKeys
		counts    *redis.Cmd
		consumers *redis.MapStringStringCmd
		unacked   map[string]*redis.IntCmd
	}
	qc := make([]queueCmds, len(queues))
	var plain []redis.Cmder // every command but the scripts
	for n, name := range queues {
		k := newQueueKeys(i.opts.namespace, name)
		q := queueCmds{keys: k, counts: scripts.counts.EvalSha(ctx, pipe, k.block0()),
			consumers: pipe.HGetAll(ctx, k.consumers), unacked: map[string]*redis.IntCmd{}}
		plain = append(plain, q.consumers)
		for _, c := range guess[name] {
			q.unacked[c] = pipe.HLen(ctx, k.unacked(c))
			plain = append(plain, q.unacked[c])
		}
		qc[n] = q
	}
	beats := make([]beat, len(conns))
	for n, c := range conns {
		beats[n] = i.readBeat(ctx, pipe, c)
		plain = append(plain, beats[n].ttl, beats[n].stopped) // GET: redis.Nil without a heartbeat
	}
	timerNames := timersCmd.Val()
	timerKeys := make([]queueKeys, len(timerNames))
	timerCounts := make([]*redis.Cmd, len(timerNames))
	for n, name := range timerNames {
		timerKeys[n] = newQueueKeys(i.opts.namespace, timerTag+name)
		timerCounts[n] = scripts.counts.EvalSha(ctx, pipe, timerKeys[n].block0())
	}
	roundCmds := queueRoundStats(ctx, pipe, i.opts.namespace, roundsCmd.Val())
	setNames := schedulesCmd.Val()
	setCounts := make([]*redis.Cmd, len(setNames))
	for n, name := range setNames {
		setCounts[n] = scripts.scheduleCounts.EvalSha(ctx, pipe, scheduleSetKeys(i.opts.namespace, name).scriptKeys())
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx) // errors are read per command below
	}
	for _, cmd := range plain {
		if err := cmd.Err(); err != nil {
			return fail(err)
		}
	}
	for _, b := range beats {
		if err := b.val.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return fail(err)
		}
	}

	// After a restart Redis has no scripts cached: load them once and send
	// the calls that found none again, in one pipeline.
	var redo []func(redis.Pipeliner)
	var missing []*redis.Script
	need := func(s *redis.Script) {
		if len(missing) == 0 || missing[len(missing)-1] != s {
			missing = append(missing, s)
		}
	}
	for n := range qc {
		if isNoScript(qc[n].counts.Err()) {
			need(scripts.counts)
			k := qc[n].keys
			redo = append(redo, func(p redis.Pipeliner) { qc[n].counts = scripts.counts.EvalSha(ctx, p, k.block0()) })
		}
	}
	for n := range timerCounts {
		if isNoScript(timerCounts[n].Err()) {
			need(scripts.counts)
			k := timerKeys[n]
			redo = append(redo, func(p redis.Pipeliner) { timerCounts[n] = scripts.counts.EvalSha(ctx, p, k.block0()) })
		}
	}
	for n := range setCounts {
		if isNoScript(setCounts[n].Err()) {
			need(scripts.scheduleCounts)
			k := scheduleSetKeys(i.opts.namespace, setNames[n]).scriptKeys()
			redo = append(redo, func(p redis.Pipeliner) { setCounts[n] = scripts.scheduleCounts.EvalSha(ctx, p, k) })
		}
	}
	for n := range roundCmds {
		if isNoScript(roundCmds[n].cmd.Err()) {
			need(scripts.roundStats)
			rc := &roundCmds[n]
			redo = append(redo, func(p redis.Pipeliner) { rc.cmd = scripts.roundStats.EvalSha(ctx, p, rc.keys, 0, 0) })
		}
	}
	if len(redo) > 0 {
		for _, s := range missing {
			if err := s.Load(ctx, i.client).Err(); err != nil {
				return fail(err)
			}
		}
		pipe = i.client.Pipeline()
		for _, f := range redo {
			f(pipe)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below (countsOf, roundStats)
	}

	// A third round trip only for registrations the guess missed.
	pipe = i.client.Pipeline()
	for _, q := range qc {
		for c := range q.consumers.Val() {
			if q.unacked[c] == nil {
				q.unacked[c] = pipe.HLen(ctx, q.keys.unacked(c))
			}
		}
	}
	if pipe.Len() > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return fail(err)
		}
	}
	seen := make(map[string][]string, len(qc))
	for n, q := range qc {
		seen[queues[n]] = nil // seen, with no registration: not guessed again
		for c := range q.consumers.Val() {
			seen[queues[n]] = append(seen[queues[n]], c)
		}
	}
	i.rememberRegistrations(seen)

	var out Overview
	// Queues, as Queues (collectStats) reads them.
	out.Queues = make([]QueueInfo, len(qc))
	for n, q := range qc {
		c, err := countsOf(ctx, i.client, q.counts, q.keys)
		if err != nil {
			return fail(err)
		}
		qs := queueStatOf(c)
		for conn, v := range q.consumers.Val() {
			consumers, _ := strconv.ParseInt(v, 10, 64) // written by set_consumers.lua; 0 if ever mangled
			qs.Connections[conn] = ConnectionStat{UnackedCount: q.unacked[conn].Val(), ConsumerCount: consumers}
		}
		out.Queues[n] = queueInfo(queues[n], qs)
	}
	// Connections, as Connections reads them.
	out.Connections = make([]ConnectionInfo, len(conns))
	byName := make(map[string]*ConnectionInfo, len(conns))
	for n, c := range conns {
		out.Connections[n] = beats[n].info(c)
		byName[c] = &out.Connections[n]
	}
	for n, q := range qc {
		for c, v := range q.consumers.Val() {
			if ci := byName[c]; ci != nil {
				ci.Consumers[queues[n]], _ = strconv.ParseInt(v, 10, 64)
				ci.Unacked[queues[n]] = q.unacked[c].Val()
			}
		}
	}
	// Timers and rounds, as Timers and Rounds read them.
	out.Timers = make(map[string]TimerStat, len(timerNames))
	for n, name := range timerNames {
		c, err := countsOf(ctx, i.client, timerCounts[n], timerKeys[n])
		if err != nil {
			return fail(err)
		}
		out.Timers[name] = TimerStat{Pending: c[4] + c[6], Firing: c[5]}
	}
	out.Rounds = map[string]RoundStat{}
	if len(roundCmds) > 0 {
		rs, err := roundStats(ctx, i.client, roundCmds)
		if err != nil {
			return fail(err)
		}
		out.Rounds = rs
	}
	out.ScheduleSets = make(map[string]ScheduleSetStat, len(setNames))
	for n, name := range setNames {
		st, err := scheduleSetStatOf(ctx, i.client, setCounts[n], scheduleSetKeys(i.opts.namespace, name))
		if err != nil {
			return fail(errorf("schedule set %q: %w", name, err))
		}
		out.ScheduleSets[name] = st
	}
	return out, nil
}

// unackedGuess returns, per queue, the connections whose unacked counts
// Overview reads in its second round trip: those registered for the queue
// at the previous Overview, and for a queue not seen then, every
// registered connection while the guesses stay under overviewGuess reads.
func (i *Inspector) unackedGuess(queues, conns []string) map[string][]string {
	i.regsMu.Lock()
	defer i.regsMu.Unlock()
	out := make(map[string][]string, len(queues))
	var fresh []string
	for _, q := range queues {
		if cs, ok := i.regs[q]; ok {
			out[q] = cs
		} else {
			fresh = append(fresh, q)
		}
	}
	if len(fresh)*len(conns) <= overviewGuess {
		for _, q := range fresh {
			out[q] = conns
		}
	}
	return out
}

// rememberRegistrations keeps the connections registered per queue for the
// next Overview's guess (see unackedGuess); queues without any are kept
// with none, so that they are not guessed again.
func (i *Inspector) rememberRegistrations(regs map[string][]string) {
	i.regsMu.Lock()
	defer i.regsMu.Unlock()
	i.regs = regs
}
