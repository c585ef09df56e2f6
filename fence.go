package redq

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A plain publish (no delay, priority, time to live or key) is first sent
// without Lua, when the client allows it: one MULTI/EXEC of its LPUSH, the
// write of its publish record (the key and token that publish.lua reads)
// and its count, on a connection of its own whose identity in Redis (its
// client id and address) redq knows. That is cheaper than the guarded form
// (publish.lua), but the transaction has no guard: were it sent again after
// a lost reply, or did it run late (it waited in a socket while Redis was
// paused), its payloads would land twice.
//
// So a send whose outcome is unknown is fenced before the call is sent
// again: the connection it went on is dropped, and every later send of the
// call goes, on another connection to the same server, after a
// CLIENT KILL ID <id> ADDR <addr> of the old one. Redis runs the commands
// of one connection in order and never runs another command of a client
// it killed (what waits in its socket is dropped), so once the kill
// returns, the first send either ran, and its record holds the call's
// token, or never will. The later sends are the guarded form, which finds
// the token and lands nothing when the first send ran. The two filters
// are ANDed: a restarted server that gave the id to another client kills
// nothing. A kill that fails says nothing; the call is not sent in that
// round, and is tried again until its deadline, ending in
// ErrorOutcomeUnknown when no kill succeeded (a kill that Redis refuses,
// as when the user lost +client|kill, also turns the fast path off for
// later publishes). The publish field of a call
// that ended so is never used again: its first send may still run, and
// would write an older token over a newer call's.
//
// The fast path is used only where the fence is sound: a *redis.Client
// that talks to one server (not a failover client, whose connection after
// a failover goes to another server, where the kill cannot reach the old
// one), without WithWaitReplicas (whose write and WAIT share a connection
// already), and only once the server showed that it runs CLIENT INFO and
// lets this user run CLIENT KILL. A server that refuses either (an ACL
// without +client|kill, an old Redis, miniredis) makes the connection use
// the guarded form for good. Cluster clients, rings and other Cmdables
// always use it.
//
// Counts: the transaction cannot read the ring of per-minute counters in
// the queue's meta hash (see tally in scripts/lib.lua), so it adds its
// payloads to the field of its minute, by this process's clock, in the
// queue's small pub hash; the readers of the counters add that hash in,
// and the guarded form folds it into meta. Each connection sends the
// first publish of each minute to each queue in the guarded form, so the
// pub hash holds a minute or two at most.

// fastConn is a dedicated connection of a publish flush slot and its
// identity in Redis.
type fastConn struct {
	conn *redis.Conn
	id   int64
	addr string // the client's address as Redis sees it
}

// fence names a dedicated connection whose last send's outcome is unknown:
// it is killed before the call is sent again.
type fence struct {
	id   int64
	addr string
}

// errNotFenced marks a try of a call that was not sent because the kill of
// an earlier send's connection failed: the call's outcome is unknown, and
// it is tried again (see classify).
var errNotFenced = errors.New("redq: could not fence an earlier send of the call")

// fastPath holds a connection's dedicated publish connections.
type fastPath struct {
	client *redis.Client // nil: the client does not allow the fast path

	mu    sync.Mutex
	off   bool                  // the server refused CLIENT INFO or CLIENT KILL
	conns [flushSlots]*fastConn // per flush slot; nil: open at the next use
	fold  map[string]int64      // by ready key: the minute of the queue's last fold
}

// newFastPath returns the fast path of a connection on client with opts.
func newFastPath(client redis.UniversalClient, opts options) *fastPath {
	f := &fastPath{fold: map[string]int64{}}
	if cl, ok := client.(*redis.Client); ok && opts.waitReplicas == 0 && cl.Options().Addr != "FailoverClient" {
		f.client = cl
	}
	return f
}

// usable reports whether a flush of calls may take the fast path now:
// the client allows it, and every call's queue had its guarded send of
// this minute (the others then carry the pub hash, to be folded; see
// scripts/publish.lua).
func (f *fastPath) usable(calls []*remembered, now time.Time) bool {
	if f.client == nil {
		return false
	}
	minute := now.Unix() / 60
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off {
		return false
	}
	fast := true
	for _, call := range calls {
		if f.fold[call.push.ready] != minute {
			f.fold[call.push.ready] = minute
			call.push.fold = true
			fast = false
		}
	}
	if !fast {
		for _, call := range calls {
			call.push.fold = true
		}
	}
	return fast
}

// conn returns slot's dedicated connection, opened if need be, or nil when
// none can be had now (the calls then go in the guarded form). Opening it
// reads its identity and checks that this user may kill a client; a
// server that refuses turns the fast path off for good.
func (f *fastPath) conn(ctx context.Context, slot int) *fastConn {
	f.mu.Lock()
	fc := f.conns[slot]
	f.mu.Unlock()
	if fc != nil {
		return fc
	}
	// Closing it drops the connection rather than handing it back to the
	// pool: once dropped, it must carry no other command.
	conn := f.client.EphemeralConn()
	info, err := conn.ClientInfo(ctx).Result()
	if err == nil {
		// its own id with SKIPME: kills nothing, and is refused when the
		// user may not kill
		err = conn.Do(ctx, "CLIENT", "KILL", "ID", info.ID, "SKIPME", "yes").Err()
	}
	if err != nil {
		_ = conn.Close()
		if classify(err) == failAnswered {
			f.mu.Lock()
			f.off = true
			f.mu.Unlock()
		}
		return nil
	}
	fc = &fastConn{conn: conn, id: info.ID, addr: info.Addr}
	f.mu.Lock()
	f.conns[slot] = fc
	f.mu.Unlock()
	return fc
}

// drop closes slot's dedicated connection fc.
func (f *fastPath) drop(slot int, fc *fastConn) {
	f.mu.Lock()
	if f.conns[slot] == fc {
		f.conns[slot] = nil
	}
	f.mu.Unlock()
	_ = fc.conn.Close()
}

// close closes the dedicated connections; a later publish opens them
// again.
func (f *fastPath) close() {
	f.mu.Lock()
	conns := f.conns
	f.conns = [flushSlots]*fastConn{}
	f.mu.Unlock()
	for _, fc := range conns {
		if fc != nil {
			_ = fc.conn.Close()
		}
	}
}

// send makes the first try of plain publishes calls on slot's dedicated
// connection, in one transaction, and returns each call's command (its
// value: how many envelopes it added), or nil when no dedicated connection
// could be had. When the outcome is unknown, the connection is dropped and
// each call gets its fence.
func (f *fastPath) send(ctx context.Context, slot int, calls []*remembered) []*redis.Cmd {
	fc := f.conn(ctx, slot)
	if fc == nil {
		return nil
	}
	minute := strconv.FormatInt(time.Now().Unix()/60, 10)
	pipe := fc.conn.TxPipeline()
	pushes := make([]*redis.IntCmd, len(calls))
	for i, call := range calls {
		pc := call.push
		pushes[i] = pipe.LPush(ctx, pc.ready, pc.envs...)
		pipe.Set(ctx, pc.record, pc.token, replyKeep)
		pipe.HIncrBy(ctx, pc.pub, minute, int64(len(pc.envs)))
	}
	_, err := pipe.Exec(ctx)
	out := make([]*redis.Cmd, len(calls))
	var redisErr redis.Error
	if err != nil && !errors.As(err, &redisErr) {
		f.drop(slot, fc)
		for i, call := range calls {
			call.fence = &fence{id: fc.id, addr: fc.addr}
			out[i] = redis.NewCmd(ctx)
			out[i].SetErr(err)
		}
		return out
	}
	for i, call := range calls {
		out[i] = redis.NewCmd(ctx)
		if perr := pushes[i].Err(); perr != nil {
			// Redis answered: the transaction was refused (nothing ran),
			// or the LPUSH failed (the key holds another type)
			out[i].SetErr(perr)
			continue
		}
		out[i].SetVal(int64(len(call.push.envs)))
	}
	return out
}

// sendFenced sends calls, all plain publishes, of which some carry a fence
// whose kill has not succeeded yet: on one connection, the kills first,
// then, only when every kill succeeded, the calls in the guarded form.
func (c *redisConnection) sendFenced(ctx context.Context, calls []*remembered) []*redis.Cmd {
	conn := c.publisher.fast.client.Conn()
	defer func() { _ = conn.Close() }() // a pooled connection goes back; nothing to report
	var err error
	killed := map[fence]bool{}
	for _, call := range calls {
		if call.fence == nil || call.fenced || killed[*call.fence] {
			continue
		}
		// an integer reply, 0 or 1: either way the old client is gone
		if kerr := conn.Do(ctx, "CLIENT", "KILL", "ID", call.fence.id, "ADDR", call.fence.addr).Err(); kerr != nil {
			err = errorf("%w: %w", errNotFenced, kerr)
			if classify(kerr) == failAnswered {
				// refused for good (an ACL changed since the probe):
				// later publishes take the guarded form
				c.publisher.fast.mu.Lock()
				c.publisher.fast.off = true
				c.publisher.fast.mu.Unlock()
			}
			break
		}
		killed[*call.fence] = true
	}
	if err != nil {
		out := make([]*redis.Cmd, len(calls))
		for i := range calls {
			out[i] = redis.NewCmd(ctx)
			out[i].SetErr(err)
		}
		return out
	}
	for _, call := range calls {
		if call.fence != nil && killed[*call.fence] {
			call.fenced = true
		}
	}
	return sendBatch(ctx, conn, calls)
}

// needsFence reports whether a call of calls waits for a kill.
func needsFence(calls []*remembered) bool {
	for _, call := range calls {
		if call.fence != nil && !call.fenced {
			return true
		}
	}
	return false
}
