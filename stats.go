package redq

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stats is a snapshot of queue, timer, round and schedule counts, read in
// two round trips.
type Stats struct {
	// QueueStats holds one entry per requested queue.
	QueueStats QueueStats `json:"queues"`
	// OtherConnections lists registered connections that consume none of
	// the requested queues (publishers, idle workers), with whether their
	// heartbeat is alive.
	OtherConnections map[string]bool `json:"otherConnections"`
	// StoppedConnections lists the connections that stopped cleanly
	// (StopAllConsuming) and wait for a cleaner to unlist them: their
	// heartbeat is gone, as a dead one's is.
	StoppedConnections map[string]bool `json:"stoppedConnections,omitempty"`
	// TimerStats holds one entry per timer set of the namespace (see
	// OpenTimers); nil when there is none.
	TimerStats map[string]TimerStat `json:"timers,omitempty"`
	// RoundStats holds one entry per round of the namespace (see
	// OpenRound), whichever queues were requested; nil when there are
	// none.
	RoundStats map[string]RoundStat `json:"rounds,omitempty"`
	// ScheduleStats holds one entry per schedule set of the namespace (see
	// OpenSchedules); nil when there is none. Reading a set's counts reads
	// each of its schedules' records in Redis.
	ScheduleStats map[string]ScheduleSetStat `json:"schedules,omitempty"`
}

// TimerStat holds the counts of one timer set.
type TimerStat struct {
	// Pending counts the timers waiting to fire (Set while their key's
	// fire is handled included).
	Pending int64 `json:"pending"`
	// Firing counts the fires taken and not yet acked or released.
	Firing int64 `json:"firing"`
}

// QueueStat holds the counts of one queue.
type QueueStat struct {
	// ReadyCount counts the deliveries ready to be taken, of every priority.
	ReadyCount    int64 `json:"ready"`
	RejectedCount int64 `json:"rejected"`
	// DelayedCount counts the deliveries waiting for their due time (see
	// Delay and At).
	DelayedCount int64 `json:"delayed"`
	// ExpiredCount counts the deliveries dropped because their time to
	// live ran out (see TTL), since the queue was created or destroyed.
	ExpiredCount int64 `json:"expired"`
	// KeyedPending counts the keys with a pending item waiting for its due
	// time or a consumer (see Upsert); they are among ReadyCount and
	// DelayedCount too.
	KeyedPending int64 `json:"keyedPending"`
	// KeyedRunning counts the keys whose delivery is taken and not yet
	// settled; they are among the unacked deliveries too.
	KeyedRunning int64 `json:"keyedRunning"`
	// KeyedParked counts the successors parked behind a running delivery
	// of their key; they are in no other count.
	KeyedParked int64 `json:"keyedParked"`
	// Paused is true while the queue is paused (see Queue.Pause): no
	// connection fetches from it until it is resumed.
	Paused bool `json:"paused"`
	// RateLimit is the queue's rate limit (see WithRateLimit); zero when
	// it has none.
	RateLimit RateLimit `json:"rateLimit"`
	// GroupsPending counts the groups with pending deliveries (see
	// Group); those deliveries are among ReadyCount.
	GroupsPending int64 `json:"groupsPending"`
	// GroupsRunning counts the groups with deliveries in flight; those
	// deliveries are among the unacked ones.
	GroupsRunning int64 `json:"groupsRunning"`
	// GroupConcurrency is the queue's K (see WithGroupConcurrency):
	// DefaultGroupConcurrency when it was never set.
	GroupConcurrency int `json:"groupConcurrency"`
	// GroupRateLimit is the queue's per-group rate limit (see
	// WithGroupRateLimit); zero when it has none.
	GroupRateLimit RateLimit `json:"groupRateLimit"`
	// totals are the counters published, acked, rejected, retried (read
	// by the Inspector; see tally in scripts/lib.lua).
	totals [4]int64
	// Connections holds, per connection registered for the queue, its
	// unacked count, consumer count and whether it is alive.
	Connections ConnectionStats `json:"connections"`
}

// QueueStats are the stats of queues by name.
type QueueStats map[string]QueueStat

// ConnectionStats are the parts of connections in a queue, by connection
// name.
type ConnectionStats map[string]ConnectionStat

// String formats the stat as rmq does: [unacked:N consumers:N].
func (s ConnectionStat) String() string {
	return fmt.Sprintf("[unacked:%d consumers:%d]", s.UnackedCount, s.ConsumerCount)
}

// String formats the stat as rmq does: [ready:N rejected:N conn:map[...]].
func (s QueueStat) String() string {
	return fmt.Sprintf("[ready:%d rejected:%d conn:%s]", s.ReadyCount, s.RejectedCount, map[string]ConnectionStat(s.Connections))
}

// ConnectionStat is one connection's part in a queue.
type ConnectionStat struct {
	// Active is true while the connection's heartbeat is alive; a dead
	// connection's deliveries go back to ready when a cleaner runs.
	Active bool `json:"active"`
	// Stopped is true when the connection is not active because it stopped
	// cleanly (StopAllConsuming) and waits for a cleaner to unlist it,
	// rather than because it died.
	Stopped       bool  `json:"stopped,omitempty"`
	UnackedCount  int64 `json:"unacked"`
	ConsumerCount int64 `json:"consumers"`
}

// UnackedCount returns the deliveries held by all connections.
func (s QueueStat) UnackedCount() int64 {
	var n int64
	for _, c := range s.Connections {
		n += c.UnackedCount
	}
	return n
}

// ConsumerCount returns the consumers of all connections.
func (s QueueStat) ConsumerCount() int64 {
	var n int64
	for _, c := range s.Connections {
		n += c.ConsumerCount
	}
	return n
}

// ConnectionCount returns how many connections are registered for the queue.
func (s QueueStat) ConnectionCount() int64 { return int64(len(s.Connections)) }

// MarshalJSON adds the totals (unacked, consumers, connectionCount) to the
// JSON form so machines need not add them up.
func (s QueueStat) MarshalJSON() ([]byte, error) {
	type plain QueueStat
	return json.Marshal(struct {
		plain
		Unacked         int64 `json:"unacked"`
		Consumers       int64 `json:"consumers"`
		ConnectionCount int64 `json:"connectionCount"`
	}{plain(s), s.UnackedCount(), s.ConsumerCount(), s.ConnectionCount()})
}

// Names returns the queue names in order.
func (s Stats) Names() []string {
	names := make([]string, 0, len(s.QueueStats))
	for n := range s.QueueStats {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// String renders the stats as a plain text table.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-30s %10s %10s %10s %10s %10s %10s %12s\n", "queue", "ready", "rejected", "delayed", "expired", "unacked", "consumers", "connections")
	for _, name := range s.Names() {
		q := s.QueueStats[name]
		fmt.Fprintf(&b, "%-30s %10d %10d %10d %10d %10d %10d %12d\n", name, q.ReadyCount, q.RejectedCount, q.DelayedCount, q.ExpiredCount, q.UnackedCount(), q.ConsumerCount(), q.ConnectionCount())
		if q.Paused {
			b.WriteString("  paused: no connection fetches from it until it is resumed\n")
		}
		if q.KeyedPending+q.KeyedRunning+q.KeyedParked > 0 {
			fmt.Fprintf(&b, "  keyed: %d pending, %d running, %d parked\n", q.KeyedPending, q.KeyedRunning, q.KeyedParked)
		}
		conns := make([]string, 0, len(q.Connections))
		for c := range q.Connections {
			conns = append(conns, c)
		}
		sort.Strings(conns)
		for _, c := range conns {
			cs := q.Connections[c]
			fmt.Fprintf(&b, "  %-28s %10s %10s %10s %10s %10d %10d %12s\n", c, "", "", "", "", cs.UnackedCount, cs.ConsumerCount, stateWord(cs.Active, cs.Stopped))
		}
	}
	writeTimerStats(&b, s.TimerStats)
	others := make([]string, 0, len(s.OtherConnections))
	for c := range s.OtherConnections {
		others = append(others, c)
	}
	sort.Strings(others)
	for _, c := range others {
		fmt.Fprintf(&b, "connection %s %s\n", c, stateWord(s.OtherConnections[c], s.StoppedConnections[c]))
	}
	writeRoundStats(&b, s.RoundStats)
	writeScheduleStats(&b, s.ScheduleStats)
	return b.String()
}

// GetHtml renders the stats in rmq's page layout, for programs that serve
// or scrape it: a monospace table of queues with their ready, rejected,
// connection, unacked and consumer counts, and (unless layout is
// "condensed") a row per connection of each queue and per other
// connection, marked with ActiveSign. refresh, when not empty, is the
// page's refresh in seconds. NewHandler serves redq's own page.
func (s Stats) GetHtml(layout, refresh string) string {
	var b strings.Builder
	b.WriteString("<html>")
	if refresh != "" {
		fmt.Fprintf(&b, `<head><meta http-equiv="refresh" content="%s">`, html.EscapeString(refresh))
	}
	b.WriteString(`<body><table style="font-family:monospace">`)
	row := func(style string, cells ...string) {
		if style != "" {
			fmt.Fprintf(&b, `<tr style="%s">`, style)
		} else {
			b.WriteString("<tr>")
		}
		for _, c := range cells {
			fmt.Fprintf(&b, "<td>%s</td><td></td>", c)
		}
		b.WriteString("</tr>")
	}
	row("", "queue", "ready", "rejected", "", "connections", "unacked", "consumers")
	for _, name := range s.Names() {
		q := s.QueueStats[name]
		row("", html.EscapeString(name), strconv.FormatInt(q.ReadyCount, 10), strconv.FormatInt(q.RejectedCount, 10), "",
			strconv.Itoa(len(q.Connections)), strconv.FormatInt(q.UnackedCount(), 10), strconv.FormatInt(q.ConsumerCount(), 10))
		if layout == "condensed" {
			continue
		}
		for _, conn := range sortedStatsKeys(q.Connections) {
			cs := q.Connections[conn]
			row("color:lightgrey", "", "", "", ActiveSign(cs.Active), html.EscapeString(conn),
				strconv.FormatInt(cs.UnackedCount, 10), strconv.FormatInt(cs.ConsumerCount, 10))
		}
	}
	if layout != "condensed" {
		b.WriteString("<tr><td>-----</td></tr>")
		for _, conn := range sortedStatsKeys(s.OtherConnections) {
			row("color:lightgrey", "", "", "", ActiveSign(s.OtherConnections[conn]), html.EscapeString(conn), "", "")
		}
	}
	b.WriteString("</table></body></html>")
	return b.String()
}

func stateWord(active, stopped bool) string {
	switch {
	case active:
		return "active"
	case stopped:
		return "stopped"
	}
	return "dead"
}

// queueStatOf is the QueueStat of counts.lua's reply n, with no
// connections yet.
func queueStatOf(n []int64) QueueStat {
	k := int(n[16])
	if k < 1 {
		k = DefaultGroupConcurrency
	}
	return QueueStat{ReadyCount: n[0], RejectedCount: n[1], DelayedCount: n[2], ExpiredCount: n[3],
		KeyedPending: n[4], KeyedRunning: n[5], KeyedParked: n[6], Paused: n[7] == 1, totals: [4]int64(n[8:12]),
		RateLimit: rateLimitOf(n[12], n[13]), GroupsPending: n[14], GroupsRunning: n[15], GroupConcurrency: k,
		GroupRateLimit: rateLimitOf(n[17], n[18]), Connections: map[string]ConnectionStat{}}
}

// countsLen is the length of counts.lua's reply.
const countsLen = 19

// countsOf reads the reply of a pipelined counts.lua call, running it again
// on its own when Redis did not know the script.
func countsOf(ctx context.Context, client redis.Cmdable, cmd *redis.Cmd, k queueKeys) ([]int64, error) {
	v, err := cmd.Result()
	if isNoScript(err) {
		v, err = scripts.counts.Run(ctx, client, k.block0()).Result()
	}
	if err != nil {
		return nil, err
	}
	n, err := int64s(v)
	if err == nil && len(n) != countsLen {
		err = errorf("unexpected reply %v", v)
	}
	return n, err
}

func (c *redisConnection) CollectStats(queueList []string) (Stats, error) {
	return c.CollectStatsContext(context.Background(), queueList)
}

func (c *redisConnection) CollectStatsContext(ctx context.Context, queueList []string) (Stats, error) {
	// The consumer counts of this connection's AddConsumer calls are
	// written in the background (see countWriter): wait for them.
	if err := c.counts.await(ctx); err != nil {
		return Stats{}, err
	}
	return collectStats(ctx, c.client, c.keys, queueList)
}

// collectStats reads the stats of the queues queueList (and every timer
// set, round and schedule set) of the namespace of g: the work of CollectStats, shared
// by connections and the Inspector. It reads only: two round trips.
func collectStats(ctx context.Context, client redis.UniversalClient, g globalKeys, queueList []string) (Stats, error) {
	stats := Stats{QueueStats: map[string]QueueStat{}, OtherConnections: map[string]bool{}}
	for _, name := range queueList {
		if why := validQueueName(name); why != "" {
			return stats, argError("queue name", name, why)
		}
	}
	// Round trip 1: counts, registered connections per queue, and the
	// connections set.
	type queueCmds struct {
		keys      queueKeys
		counts    *redis.Cmd
		consumers *redis.MapStringStringCmd
	}
	pipe := client.Pipeline()
	qc := make([]queueCmds, len(queueList))
	for i, name := range queueList {
		k := newQueueKeys(g.ns, name)
		qc[i] = queueCmds{keys: k, counts: scripts.counts.EvalSha(ctx, pipe, k.block0()), consumers: pipe.HGetAll(ctx, k.consumers)}
	}
	members := pipe.SMembers(ctx, g.connections)
	timerSets := pipe.SMembers(ctx, g.timers)
	rounds := pipe.SMembers(ctx, g.rounds())
	scheduleSets := pipe.SMembers(ctx, g.schedules)
	_, err := pipe.Exec(ctx)
	counts := make([][]int64, len(queueList))
	for i, q := range qc {
		var cerr error
		if counts[i], cerr = countsOf(ctx, client, q.counts, q.keys); cerr != nil {
			return stats, errorf("redq: collect stats: %w", cerr)
		}
	}
	if err != nil && !isNoScript(err) {
		return stats, errorf("redq: collect stats: %w", err)
	}
	if err := members.Err(); err != nil {
		return stats, errorf("redq: collect stats: %w", err)
	}
	if err := timerSets.Err(); err != nil {
		return stats, errorf("redq: collect stats: %w", err)
	}
	if err := rounds.Err(); err != nil {
		return stats, errorf("redq: collect stats: %w", err)
	}
	if err := scheduleSets.Err(); err != nil {
		return stats, errorf("redq: collect stats: %w", err)
	}
	for _, q := range qc {
		if err := q.consumers.Err(); err != nil {
			return stats, errorf("redq: collect stats: %w", err)
		}
	}
	registered := map[string]bool{}
	for _, m := range members.Val() {
		registered[m] = true
	}
	// Round trip 2: unacked counts, heartbeats and the counts of timer
	// sets, rounds and schedule sets.
	pipe = client.Pipeline()
	unacked := make([]map[string]*redis.IntCmd, len(queueList))
	beats := map[string]*redis.IntCmd{}
	stops := map[string]*redis.IntCmd{}
	beat := func(conn string) {
		if beats[conn] == nil {
			beats[conn] = pipe.Exists(ctx, g.heartbeat(conn))
			stops[conn] = pipe.Exists(ctx, g.stopped(conn))
		}
	}
	for i, q := range qc {
		unacked[i] = map[string]*redis.IntCmd{}
		for conn := range q.consumers.Val() {
			unacked[i][conn] = pipe.HLen(ctx, q.keys.unacked(conn))
			beat(conn)
		}
	}
	for conn := range registered {
		beat(conn)
	}
	timerKeys := make([]queueKeys, len(timerSets.Val()))
	timerCounts := make([]*redis.Cmd, len(timerKeys))
	for i, name := range timerSets.Val() {
		timerKeys[i] = newQueueKeys(g.ns, timerTag+name)
		timerCounts[i] = scripts.counts.EvalSha(ctx, pipe, timerKeys[i].block0())
	}
	roundCmds := queueRoundStats(ctx, pipe, g.ns, rounds.Val())
	setNames := scheduleSets.Val()
	setCounts := make([]*redis.Cmd, len(setNames))
	for i, name := range setNames {
		setCounts[i] = scripts.scheduleCounts.EvalSha(ctx, pipe, scheduleSetKeys(g.ns, name).scriptKeys())
	}
	if len(beats)+len(timerCounts)+len(roundCmds)+len(setCounts) > 0 {
		// A script may not be cached (NOSCRIPT): countsOf, roundStats and
		// scheduleSetStatOf run it again; every other command must have
		// succeeded.
		if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) {
			return stats, errorf("redq: collect stats: %w", err)
		}
		for conn, b := range beats {
			for _, cmd := range []*redis.IntCmd{b, stops[conn]} {
				if err := cmd.Err(); err != nil {
					return stats, errorf("redq: collect stats: %w", err)
				}
			}
		}
		for _, u := range unacked {
			for _, cmd := range u {
				if err := cmd.Err(); err != nil {
					return stats, errorf("redq: collect stats: %w", err)
				}
			}
		}
	}
	if len(roundCmds) > 0 {
		rs, err := roundStats(ctx, client, roundCmds)
		if err != nil {
			return stats, errorf("redq: collect stats: %w", err)
		}
		stats.RoundStats = rs
	}
	if len(setCounts) > 0 {
		stats.ScheduleStats = make(map[string]ScheduleSetStat, len(setNames))
	}
	for i, name := range setNames {
		st, err := scheduleSetStatOf(ctx, client, setCounts[i], scheduleSetKeys(g.ns, name))
		if err != nil {
			return stats, errorf("redq: collect stats: schedule set %q: %w", name, err)
		}
		stats.ScheduleStats[name] = st
	}
	if len(timerCounts) > 0 {
		stats.TimerStats = map[string]TimerStat{}
	}
	for i, name := range timerSets.Val() {
		n, err := countsOf(ctx, client, timerCounts[i], timerKeys[i])
		if err != nil {
			return stats, errorf("redq: collect stats: %w", err)
		}
		stats.TimerStats[name] = TimerStat{Pending: n[4] + n[6], Firing: n[5]}
	}
	alive := func(conn string) bool { return registered[conn] && beats[conn].Val() == 1 }
	stopped := func(conn string) bool { return registered[conn] && !alive(conn) && stops[conn].Val() == 1 }
	for conn := range registered {
		if stopped(conn) {
			if stats.StoppedConnections == nil {
				stats.StoppedConnections = map[string]bool{}
			}
			stats.StoppedConnections[conn] = true
		}
	}
	seen := map[string]bool{}
	for i, name := range queueList {
		n := counts[i]
		qs := queueStatOf(n)
		for conn, n := range qc[i].consumers.Val() {
			consumers, _ := strconv.ParseInt(n, 10, 64) // written by set_consumers.lua; 0 if ever mangled
			qs.Connections[conn] = ConnectionStat{Active: alive(conn), Stopped: stopped(conn), UnackedCount: unacked[i][conn].Val(), ConsumerCount: consumers}
			seen[conn] = true
		}
		stats.QueueStats[name] = qs
	}
	for conn := range registered {
		if !seen[conn] {
			stats.OtherConnections[conn] = alive(conn)
		}
	}
	return stats, nil
}

// RoundStat holds the counts of one round (see Round). Counts are read in
// one script, by Redis's clock.
type RoundStat struct {
	// Period is the round's period; TTL its items' time to live (0:
	// none).
	Period, TTL time.Duration
	// ItemCount counts the items whose time to live has not run out.
	ItemCount int64
	// DueCount counts the items due now: never handed out, reissued, or
	// handed out a period ago or more (including any whose time to live
	// ran out and that are not removed yet).
	DueCount int64
	// OldestLag is how long the most overdue item has been due: 0 when
	// the workers keep up.
	OldestLag time.Duration
	// IssuedCount counts the hand-outs since the round was created.
	IssuedCount int64
	// IssuedPerSecond is the rate of hand-outs over the last complete
	// 10-second window of Redis's clock.
	IssuedPerSecond float64
	// ExpiredCount counts the items removed because their time to live
	// ran out, since the round was created.
	ExpiredCount int64
}

// roundStatJSON is RoundStat's JSON form, with durations in milliseconds.
type roundStatJSON struct {
	PeriodMs        int64   `json:"periodMs"`
	TTLMs           int64   `json:"ttlMs"`
	Items           int64   `json:"items"`
	Due             int64   `json:"due"`
	OldestLagMs     int64   `json:"oldestLagMs"`
	Issued          int64   `json:"issued"`
	IssuedPerSecond float64 `json:"issuedPerSecond"`
	Expired         int64   `json:"expired"`
}

// MarshalJSON writes the counts with durations in whole milliseconds:
// periodMs, ttlMs, items, due, oldestLagMs, issued, issuedPerSecond,
// expired.
func (s RoundStat) MarshalJSON() ([]byte, error) {
	return json.Marshal(roundStatJSON{
		PeriodMs: s.Period.Milliseconds(), TTLMs: s.TTL.Milliseconds(), Items: s.ItemCount, Due: s.DueCount,
		OldestLagMs: s.OldestLag.Milliseconds(), Issued: s.IssuedCount, IssuedPerSecond: s.IssuedPerSecond, Expired: s.ExpiredCount,
	})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (s *RoundStat) UnmarshalJSON(b []byte) error {
	var j roundStatJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	ms := func(x int64) time.Duration { return time.Duration(x) * time.Millisecond }
	*s = RoundStat{
		Period: ms(j.PeriodMs), TTL: ms(j.TTLMs), ItemCount: j.Items, DueCount: j.Due, OldestLag: ms(j.OldestLagMs),
		IssuedCount: j.Issued, IssuedPerSecond: j.IssuedPerSecond, ExpiredCount: j.Expired,
	}
	return nil
}

// RoundNames returns the round names in order.
func (s Stats) RoundNames() []string {
	return sortedStatsKeys(s.RoundStats)
}

// writeTimerStats writes the timer sets as a table, as the queues and
// rounds are written.
func writeTimerStats(b *strings.Builder, timers map[string]TimerStat) {
	if len(timers) == 0 {
		return
	}
	fmt.Fprintf(b, "%-30s %10s %10s\n", "timer set", "pending", "firing")
	for _, name := range sortedStatsKeys(timers) {
		t := timers[name]
		fmt.Fprintf(b, "%-30s %10d %10d\n", name, t.Pending, t.Firing)
	}
}

// writeRoundStats appends the rounds table to the text form of Stats.
func writeRoundStats(b *strings.Builder, rounds map[string]RoundStat) {
	if len(rounds) == 0 {
		return
	}
	fmt.Fprintf(b, "%-30s %10s %10s %10s %10s %12s %10s %10s %10s\n", "round", "period", "ttl", "items", "due", "oldest lag", "issued/s", "issued", "expired")
	for _, name := range sortedStatsKeys(rounds) {
		r := rounds[name]
		fmt.Fprintf(b, "%-30s %10s %10s %10d %10d %12s %10.1f %10d %10d\n", name, r.Period, r.TTL, r.ItemCount, r.DueCount, r.OldestLag, r.IssuedPerSecond, r.IssuedCount, r.ExpiredCount)
	}
}

// ScheduleNames returns the schedule set names in order.
func (s Stats) ScheduleNames() []string {
	return sortedStatsKeys(s.ScheduleStats)
}

// writeScheduleStats appends the schedule sets table to the text form of
// Stats.
func writeScheduleStats(b *strings.Builder, sets map[string]ScheduleSetStat) {
	if len(sets) == 0 {
		return
	}
	fmt.Fprintf(b, "%-30s %10s %10s %10s %10s %s\n", "schedule set", "schedules", "paused", "fired", "skipped", "next due")
	for _, name := range sortedStatsKeys(sets) {
		st := sets[name]
		next := "-"
		if !st.NextDue.IsZero() {
			next = st.NextDue.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(b, "%-30s %10d %10d %10d %10d %s\n", name, st.Schedules, st.Paused, st.Fired, st.Skipped, next)
	}
}
