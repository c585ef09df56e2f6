package redq

import "fmt"

// Redis layout. Global keys share the hash tag {ns} so the scripts that
// touch the connections set and heartbeats stay in one cluster slot:
//
//	{ns}:connections          set of connection names
//	{ns}:queues               set of queue names
//	{ns}:timers               set of timer set names (see OpenTimers)
//	{ns}:hb:<connection>      heartbeat, expires after the heartbeat TTL
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
//	ns:{name}:meta                 hash: expired (count), keep_expired (0/1)
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
//	                               reason, so that the same call sent again
//	                               answers done (kept an hour)
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
//
// A timer set keeps the same keys under ns:{timers:name}.
//
// Names are validated (see validName) so that no name can produce another
// queue's keys: they cannot contain braces, colons or white space.

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

type globalKeys struct {
	ns, connections, queues, timers string
}

func newGlobalKeys(ns string) globalKeys {
	g := "{" + ns + "}"
	return globalKeys{ns: ns, connections: g + ":connections", queues: g + ":queues", timers: g + ":timers"}
}

func (g globalKeys) heartbeat(conn string) string { return "{" + g.ns + "}:hb:" + conn }

// stopped marks a connection that stopped consuming cleanly until a cleaner
// unlists it (see StopAllConsuming).
func (g globalKeys) stopped(conn string) string { return "{" + g.ns + "}:stopped:" + conn }

type queueKeys struct {
	prefix, ready, rejected, consumers, levels string
}

func newQueueKeys(ns, name string) queueKeys {
	p := ns + ":{" + name + "}"
	return queueKeys{prefix: p, ready: p + ":ready", rejected: p + ":rejected", consumers: p + ":consumers", levels: p + ":levels"}
}

func (k queueKeys) unacked(conn string) string { return k.prefix + ":unacked:" + conn }

// level is the ready list of priority p (1..MaxPriority; 0 is ready).
func (k queueKeys) level(p string) string { return k.ready + ":" + p }

func (k queueKeys) replies(conn string) string { return k.prefix + ":replies:" + conn }

// published is the record of one publish field of a connection (see
// scripts/publish.lua).
func (k queueKeys) published(conn, field string) string {
	return k.prefix + ":published:" + conn + ":" + field
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
