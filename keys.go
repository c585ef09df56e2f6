package redq

import (
	"fmt"
	"strconv"
	"strings"
)

// Redis layout. Global keys share the hash tag {ns} so the scripts that
// touch the connections set and heartbeats stay in one cluster slot:
//
//	{ns}:connections          set of connection names
//	{ns}:queues               set of queue names
//	{ns}:timers               set of timer set names (see OpenTimers)
//	{ns}:schedules            set of schedule set names (see OpenSchedules)
//	{ns}:hb:<connection>      heartbeat: the TTL in ms, expiring after it
//	{ns}:stopped:<connection> set by StopAllConsuming until a cleaner unlists
//	                          the connection (at most a day)
//
// Every key of one queue starts with its prefix ns:{name}, so all carry the
// queue's hash tag {name}:
//
//	ns:{name}:ready                list of envelopes of priority 0, published
//	                               LPUSH, taken RPOP (and at most one wake
//	                               marker, at the tail: see scripts/lib.lua)
//	ns:{name}:ready:<p>            the same for priority p (1..MaxPriority)
//	ns:{name}:levels               sorted set of the priorities in use
//	ns:{name}:delayed              sorted set of envelopes by due time (ms,
//	                               Redis's clock)
//	ns:{name}:leases               sorted set of take:connection by the time the
//	                               lease of a taken delivery with a TTR ends
//	ns:{name}:rejected             list of envelopes
//	ns:{name}:meta                 hash: expired (count), keep_expired (0/1),
//	                               rate_n and rate_ms (see WithRateLimit),
//	                               paused (set while the queue is paused, see
//	                               Queue.Pause), and the counters: totals
//	                               np, na, nr, nt and a ring of one-minute
//	                               slots m<s>, p<s>, a<s>, r<s>, t<s> (see
//	                               tally in scripts/lib.lua)
//	ns:{name}:pub                  hash minute -> count: plain publishes sent
//	                               without Lua (see fence.go), by the
//	                               publishing process's clock, until the
//	                               next guarded publish folds them into the
//	                               meta counters (see fold_fast in
//	                               scripts/lib.lua)
//	ns:{name}:rate                 sorted set: the log of takes of a
//	                               rate-limited queue, take -> Redis ms,
//	                               trimmed to the last window (see
//	                               WithRateLimit and scripts/fetch.lua)
//	ns:{name}:resume               list: a marker that Resume pushes to wake
//	                               the fetches waiting while the queue was
//	                               paused (expires after a minute)
//	ns:{name}:consumers            hash connection -> number of consumers; a
//	                               connection may hold unacked deliveries of the
//	                               queue only while it has a field here
//	ns:{name}:unacked:<connection> hash take -> envelope, where a take is the
//	                               delivery id followed by the fence of the
//	                               fetch call that took it
//	ns:{name}:fence                counter: one fence per fetch call
//	ns:{name}:replies:<connection> hash: the last reply of fetch calls (per queue
//	                               handle or Take slot) and settle calls (per
//	                               flush slot); a cleaner leaves it to expire
//	ns:{name}:lost:<connection>    sorted set of takes, by Redis time, whose
//	                               lease ran out while the connection held them
//	                               (kept a day)
//	ns:{name}:done:<connection>    sorted set of take|token, by Redis time: the
//	                               receipts of releases and rejections with a
//	                               reason (and, under an Inspector's name
//	                               inspector-<random>, of its by-id actions),
//	                               so that the same call sent again answers
//	                               done (kept an hour)
//	ns:{name}:published:<connection>:<field>
//	                               the token of the last publish call that ran
//	                               under one of the connection's publish fields,
//	                               so that a call sent again runs once (expires
//	                               an hour after the last publish under it)
//	ns:{name}:seq                  counter for ids of foreign (non-envelope) items
//	ns:{name}:kpend                hash key -> the pending item of a key (see
//	                               Upsert and scripts/lib.lua)
//	ns:{name}:krun                 hash key -> the take of its running delivery
//	ns:{name}:kpark                hash key -> the successor parked behind it
//	ns:{name}:kver                 counter: versions of keyed items' stubs
//	ns:{name}:outbox               hash take -> ms|queue|envelope: deliveries
//	                               pushed on to a queue in another cluster
//	                               slot, staged here until that queue has
//	                               them (see scripts/move_apply.lua)
//	ns:{name}:moved                sorted set source|take -> Redis ms: the
//	                               staged moves this queue applied, so that
//	                               one applied again lands once (kept a day)
//	ns:{name}:gitems               hash group\0seq -> envelope: the pending
//	                               deliveries of groups (see Group), a
//	                               group's line numbered head..tail-1
//	ns:{name}:gidx                 hash group -> "head,tail,q": the line of
//	                               each group with pending deliveries; q is
//	                               1 while the group is in gring or gwait
//	ns:{name}:gring                list: the ring of groups that may hand
//	                               out now, each at most once (RPOP the
//	                               next, LPUSH it back after its turn)
//	ns:{name}:grun                 hash group -> deliveries in flight (taken,
//	                               not yet settled or returned)
//	ns:{name}:gwait                sorted set group -> Redis ms: when to look
//	                               at a group again (its rate allows its
//	                               next hand-out, or its rate log can go)
//	ns:{name}:glog                 hash group -> its rate log: "next;" and a
//	                               ring of 13-digit hand-out times (Redis
//	                               ms), one slot per hand-out the rate
//	                               allows (see WithGroupRateLimit)
//
// A timer set keeps the same keys under ns:{timers:name}, and a schedule
// set under ns:{schedules:name}, with one more key: ns:{schedules:name}:defs,
// the hash of its schedules' definitions (see scripts/schedule_lib.lua).
//
// Slot groups (co-location on Redis Cluster): a queue name of the form
// {group}rest puts the queue in the slot of the hash tag {group}: its
// prefix is ns:{group}rest, so its keys read ns:{group}rest:ready and so
// on. Every queue of one group, and the plain queue named group, share a
// slot, and a move between them (Push) is one script. The prefix of a
// grouped queue has a name byte right after the closing brace and a plain
// queue's has a colon there, and names hold no colon, so no queue's keys
// can be another's.
//
// Names are validated (see validName, validQueueName) so that no name can
// produce another queue's keys: they cannot contain colons or white space,
// and braces only as a queue's leading {group}.

const maxNameLength = 200

// validName reports why s cannot be used as a queue name, namespace or tag,
// or "" when it can.
func validName(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > maxNameLength {
		return fmt.Sprintf("must be at most %d bytes, is %d", maxNameLength, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == '/', c == '@', c == '+', c == '=':
		default:
			return fmt.Sprintf("byte %d (%q) is not allowed; use letters, digits and - _ . / @ + =", i, c)
		}
	}
	return ""
}

// validQueueName is validName for queue names, which may also take the
// form {group}rest (see slot groups above): group and rest are valid names.
// Any other use of braces would put the queue's keys under another hash
// tag, or none, and spread them over several cluster slots.
func validQueueName(s string) string {
	if s == "" || s[0] != '{' {
		return validName(s)
	}
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return "a slot group {group} needs its closing brace"
	}
	if why := validName(s[1:end]); why != "" {
		return "slot group " + why
	}
	if why := validName(s[end+1:]); why != "" {
		return "the name after the slot group " + why
	}
	if len(s) > maxNameLength {
		return fmt.Sprintf("must be at most %d bytes, is %d", maxNameLength, len(s))
	}
	return ""
}

// slotTag is the hash tag that places a queue's keys: its group, or its
// name.
func slotTag(name string) string {
	if name != "" && name[0] == '{' {
		if end := strings.IndexByte(name, '}'); end > 0 {
			return name[1:end]
		}
	}
	return name
}

type globalKeys struct {
	ns, connections, queues, timers, schedules string
}

func newGlobalKeys(ns string) globalKeys {
	g := "{" + ns + "}"
	return globalKeys{ns: ns, connections: g + ":connections", queues: g + ":queues", timers: g + ":timers", schedules: g + ":schedules"}
}

func (g globalKeys) heartbeat(conn string) string { return "{" + g.ns + "}:hb:" + conn }

// stopped marks a connection that stopped consuming cleanly until a cleaner
// unlists it (see StopAllConsuming).
func (g globalKeys) stopped(conn string) string { return "{" + g.ns + "}:stopped:" + conn }

type queueKeys struct {
	prefix, ready, rejected, consumers, levels string
	// block is every key of the queue that is not per connection, in the
	// order the queue scripts take them as KEYS (see queue_at in
	// scripts/lib.lua): ready, levels, delayed, leases, rejected, meta,
	// consumers, fence, seq, kpend, krun, kpark, kver, outbox, moved, then
	// the ready lists of priorities 1..MaxPriority, then pub, then the
	// group keys gitems, gidx, gring, grun, gwait, glog. Built once; never
	// changed.
	outbox string
	block  []string
}

// queueBlockLen is the number of keys in a queue's block (QLEN in
// scripts/lib.lua).
const queueBlockLen = 16 + MaxPriority + groupKeys

// groupKeys is the number of group keys at the end of a queue's block.
const groupKeys = 6

func newQueueKeys(ns, name string) queueKeys {
	if name != "" && name[0] == '{' {
		// {group}rest: already carries its tag (see slot groups above)
		return queueKeysOf(ns + ":" + name)
	}
	return queueKeysOf(ns + ":{" + name + "}")
}

// queueKeysOf lays out the keys of a queue whose keys start with prefix
// p (which holds the queue's hash tag).
func queueKeysOf(p string) queueKeys {
	k := queueKeys{prefix: p, ready: p + ":ready", rejected: p + ":rejected", consumers: p + ":consumers",
		levels: p + ":levels", outbox: p + ":outbox"}
	k.block = make([]string, 0, queueBlockLen)
	k.block = append(k.block, k.ready, k.levels, p+":delayed", p+":leases", k.rejected, p+":meta",
		k.consumers, p+":fence", p+":seq", p+":kpend", p+":krun", p+":kpark", p+":kver", k.outbox, p+":moved")
	for i := 1; i <= MaxPriority; i++ {
		k.block = append(k.block, k.level(strconv.Itoa(i)))
	}
	k.block = append(k.block, p+":pub")
	k.block = append(k.block, p+":gitems", p+":gidx", p+":gring", p+":grun", p+":gwait", p+":glog")
	return k
}

func (k queueKeys) unacked(conn string) string { return k.prefix + ":unacked:" + conn }

// level is the ready list of priority p (1..MaxPriority; 0 is ready).
func (k queueKeys) level(p string) string { return k.ready + ":" + p }

func (k queueKeys) replies(conn string) string { return k.prefix + ":replies:" + conn }

func (k queueKeys) lost(conn string) string { return k.prefix + ":lost:" + conn }

func (k queueKeys) done(conn string) string { return k.prefix + ":done:" + conn }

// published is the record of one publish field of a connection (see
// scripts/publish.lua).
func (k queueKeys) published(conn, field string) string {
	return k.prefix + ":published:" + conn + ":" + field
}

// Every queue script (the ones built by queueScript) gets its keys in
// KEYS in one layout, so that it touches only keys that it was given
// (Redis Cluster redirects a script by its declared keys, and a script
// that touched an undeclared key mid-resharding would fail as if the
// connection were lost, or create a key on the wrong node):
//
//	KEYS[1 .. QLEN]      the queue's block (queueKeys.block)
//	KEYS[QLEN+1]         the script's own key: a publish or call record, a
//	                     push destination, or the ready list when it has none
//	KEYS[QLEN+2 ..]      the storage of the connections it may touch, four
//	                     keys each (connKeys): unacked, replies, lost, done
//	last QLEN keys       with a destination queue (a push into another
//	                     queue): that queue's block
//
// scriptKeys builds that list from the script's own key ("": ready), the
// destination queue (nil: none) and connection storages (connKeys).
func (k queueKeys) scriptKeys(own string, dest *queueKeys, conns ...[]string) []string {
	n := queueBlockLen + 1 + 4*len(conns)
	if dest != nil {
		n += queueBlockLen
	}
	out := make([]string, 0, n)
	out = append(out, k.block...)
	if own == "" {
		own = k.ready
	}
	out = append(out, own)
	for _, c := range conns {
		out = append(out, c...)
	}
	if dest != nil {
		out = append(out, dest.block...)
	}
	return out
}

// ackKeys is the KEYS of ack.lua (acks of plain takes): consumers,
// leases, conn's storage and meta (the counters).
func (k queueKeys) ackKeys(conn string) []string {
	return append(append([]string{k.consumers, k.block[3] /* leases */}, k.connKeys(conn)...), k.meta())
}

// fireAckKeys is the KEYS of fire_ack.lua (acks of a timer set's fires):
// consumers, leases, conn's unacked, replies and lost, meta (the
// counters), then what a parked timer that becomes pending touches: krun,
// kpark, kpend, kver, delayed and ready.
func (k queueKeys) fireAckKeys(conn string) []string {
	b := k.block
	return []string{k.consumers, b[3] /* leases */, k.unacked(conn), k.replies(conn), k.lost(conn), k.meta(),
		b[10] /* krun */, b[11] /* kpark */, b[9] /* kpend */, b[12] /* kver */, b[2] /* delayed */, k.ready}
}

// meta is the queue's meta hash: settings, the paused flag and the
// counters (see tally in scripts/lib.lua).
func (k queueKeys) meta() string { return k.block[5] }

// pub is the queue's hash of publish counts not yet in meta (see
// fold_fast in scripts/lib.lua).
func (k queueKeys) pub() string { return k.block[queueBlockLen-1-groupKeys] }

// gitems, gidx and grun are the group keys (see the layout above) that
// tests and benchmarks read.
func (k queueKeys) gitems() string { return k.block[queueBlockLen-groupKeys] }

func (k queueKeys) gidx() string { return k.block[queueBlockLen-groupKeys+1] }

func (k queueKeys) grun() string { return k.block[queueBlockLen-groupKeys+3] }

// resume is the list that a Resume pushes a marker into, to wake the
// consumers that wait while the queue is paused (see scripts/pause.lua).
func (k queueKeys) resume() string { return k.prefix + ":resume" }

// rate is the log of takes of a rate-limited queue (see
// scripts/fetch.lua).
func (k queueKeys) rate() string { return k.prefix + ":rate" }

// block0 is the KEYS of a script on the queue alone: no own key, no
// connection.
func (k queueKeys) block0() []string { return k.scriptKeys("", nil) }

// connKeys is the storage of one connection for the queue, in the order
// the scripts take it (see queue_keys in scripts/lib.lua).
func (k queueKeys) connKeys(conn string) []string {
	return []string{k.unacked(conn), k.replies(conn), k.lost(conn), k.done(conn)}
}

// Rounds (see round.go) live in a key space of their own: every key of one
// round starts with ns:{round:name}, so all carry the hash tag {round:name}
// (one cluster slot per round), and since queue names cannot contain a
// colon, no queue's tag {name} can equal a round's. The registry of round
// names is global:
//
//	{ns}:rounds                    set of round names
//	ns:{round:name}:order          sorted set id -> place in the round: the
//	                               time of its last issue (ms, Redis's
//	                               clock), or, while it waits in the front
//	                               line (never issued, or reissued),
//	                               -2^52 plus its number in that line: below
//	                               every issue time (see round_lib.lua)
//	ns:{round:name}:data           hash id -> data
//	ns:{round:name}:info           hash id -> added,issued,last,expireAt,front
//	                               (ms, Redis's clock; 0 for none)
//	ns:{round:name}:expiry         sorted set id -> when its TTL runs out
//	                               (only items with a TTL)
//	ns:{round:name}:state          hash: period and ttl (ms), seq (front
//	                               line counter), issued and expired
//	                               (counters), win, win_n, prev_n (hand-outs
//	                               per 10 s window, for the rate)
//	ns:{round:name}:rec:<conn>:<field>  the record of a connection's call
//	                               slot: token:outcome of its last Add, Remove
//	                               or Reissue (expires after an hour)
//	ns:{round:name}:signal         list holding one marker while an item
//	                               may have become due that waiters do not
//	                               know of (Add, Reissue); blocked Next calls
//	                               wait on it

// rounds is the set of round names of the namespace.
func (g globalKeys) rounds() string { return "{" + g.ns + "}:rounds" }

type roundKeys struct {
	prefix, order, data, info, expiry, state, signal string
}

func newRoundKeys(ns, name string) roundKeys {
	p := ns + ":{round:" + name + "}"
	return roundKeys{prefix: p, order: p + ":order", data: p + ":data", info: p + ":info",
		expiry: p + ":expiry", state: p + ":state", signal: p + ":signal"}
}

// record is the record of one call slot of a connection for the calls
// that run once per token (Add, Remove, Reissue).
func (k roundKeys) record(conn, field string) string { return k.prefix + ":rec:" + conn + ":" + field }

// all returns every key of the round in the order the round scripts take
// them as KEYS (see scripts/round_lib.lua).
func (k roundKeys) all() []string {
	return []string{k.order, k.data, k.info, k.expiry, k.state, k.signal}
}
