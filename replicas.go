package redq

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// With WithWaitReplicas, every write of a publish or a settle is followed
// by Redis's WAIT on the connection that carried it, on the node that holds
// its keys: a Lua script cannot call WAIT, and WAIT counts the writes of
// its own connection only. The write and the WAIT go on one connection of
// the node (redis.Client.Conn): the write's pipeline, then the WAIT. When
// fewer replicas than asked for confirmed the write in time, the verb
// returns a *ReplicationError: the write stands.

// sender is what a batch of calls is sent on: a client, or one connection
// of a node.
type sender interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	TxPipeline() redis.Pipeliner
}

// checkWaitReplicas refuses, at open, a client or a server that cannot
// serve WithWaitReplicas: only a *redis.Client (a failover client is one)
// and a *redis.ClusterClient can reach the node of a write, and the server
// must replicate (miniredis does not: its WAIT always answers 0).
func (c *redisConnection) checkWaitReplicas(ctx context.Context) error {
	switch c.client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		return unsupportedClient("WithWaitReplicas", c.client,
			"WAIT must reach the node of each write on the connection that wrote it; use a *redis.Client (a failover client is one) or a *redis.ClusterClient")
	}
	info, err := c.client.Info(ctx, "replication").Result()
	var redisErr redis.Error
	switch {
	case err != nil && errors.As(err, &redisErr) && !redis.IsAuthError(err) && !redis.IsPermissionError(err):
		return errorf("%w: %w: WithWaitReplicas needs a Redis that replicates; INFO replication answered: %w", ErrorConfiguration, ErrorUnsupportedClient, err)
	case err != nil:
		return openError(err)
	case !strings.Contains(info, "role:"):
		return errorf("%w: %w: WithWaitReplicas needs a Redis that replicates; INFO replication does not name a role", ErrorConfiguration, ErrorUnsupportedClient)
	}
	return nil
}

// nodeFor returns the client of the node that holds key: the client
// itself, or on a cluster the master of key's slot.
func (c *redisConnection) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	switch cl := c.client.(type) {
	case *redis.Client:
		return cl, nil
	case *redis.ClusterClient:
		return cl.MasterForKey(ctx, key)
	}
	return nil, errBareCmdable // refused at open (see checkWaitReplicas)
}

// waitReplicas sends WAIT on conn, which just carried writes, and returns
// a *ReplicationError when fewer replicas than asked for confirmed them.
func (c *redisConnection) waitReplicas(ctx context.Context, conn *redis.Conn) error {
	return c.replicaCount(conn.Wait(ctx, c.opts.waitReplicas, c.opts.waitTimeout).Result())
}

// replicaCount reads the answer of a WAIT: nil when enough replicas
// confirmed, or a *ReplicationError.
func (c *redisConnection) replicaCount(got int64, err error) error {
	want := c.opts.waitReplicas
	if err != nil {
		return &ReplicationError{Want: want, Err: err}
	}
	if int(got) < want {
		return &ReplicationError{Want: want, Got: int(got)}
	}
	return nil
}

// replicated runs send on one connection of the node that holds key, and
// then, when send reports that something was written, waits there for the
// replicas. It returns send's error, or else the *ReplicationError of the
// wait. Without WithWaitReplicas it runs send on the client.
func (c *redisConnection) replicated(ctx context.Context, key string, send func(s sender) error) error {
	if c.opts.waitReplicas == 0 {
		return send(c.client)
	}
	node, err := c.nodeFor(ctx, key)
	if err != nil {
		return err
	}
	conn := node.Conn()
	defer func() { _ = conn.Close() }() // back to the pool; a failed return only drops it
	if err := send(conn); err != nil {
		c.slotsMoved(ctx, err)
		return err
	}
	return c.waitReplicas(ctx, conn)
}

// slotsMoved has a cluster client reload its slot map when err says that
// a node redq sent a call to itself no longer holds the call's slot.
func (c *redisConnection) slotsMoved(ctx context.Context, err error) {
	cl, ok := c.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	if _, moved := redis.IsMovedError(err); moved {
		cl.ReloadState(ctx)
	}
}

// evalThenWait is evalBatch on one connection with a WAIT in the same
// pipeline, after the calls: one round trip. A call whose script Redis
// did not have cached is run again with EVAL, and then WAIT is sent again
// after it. It returns the calls' commands and the answer of the last
// WAIT (see replicaCount); nil when no call was carried out.
//
// A pipeline's replies are read under the client's read timeout, whatever
// the commands: when the WAIT could outlast it, WAIT is sent on its own
// after the pipeline, as a blocking command.
func (c *redisConnection) evalThenWait(ctx context.Context, node *redis.Client, conn *redis.Conn, calls []scriptCall) ([]*redis.Cmd, error) {
	pipe := conn.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, sc := range calls {
		cmds[i] = sc.script.EvalSha(ctx, pipe, sc.keys, sc.args...)
	}
	var wait *redis.Cmd
	if rt := node.Options().ReadTimeout; rt < 0 || c.opts.waitTimeout+time.Second < rt {
		wait = pipe.Do(ctx, "WAIT", c.opts.waitReplicas, c.opts.waitTimeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	again := wait == nil
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			cmds[i] = calls[i].script.Eval(ctx, conn, calls[i].keys, calls[i].args...)
			again = true
		}
	}
	wrote := false
	for _, cmd := range cmds {
		wrote = wrote || cmd.Err() == nil
	}
	switch {
	case !wrote:
		return cmds, nil
	case again:
		return cmds, c.waitReplicas(ctx, conn)
	}
	return cmds, c.replicaCount(wait.Int64())
}

// runScript runs one script call and returns Redis's answer; with
// WithWaitReplicas, on one connection of the node that holds its keys,
// followed by a WAIT in the same pipeline, and a *ReplicationError (with
// the answer) when fewer replicas than asked for confirmed its write.
func (c *redisConnection) runScript(ctx context.Context, sc scriptCall) (any, error) {
	if c.opts.waitReplicas == 0 {
		return sc.script.Run(ctx, c.client, sc.keys, sc.args...).Result()
	}
	node, err := c.nodeFor(ctx, sc.keys[0])
	if err != nil {
		return nil, err
	}
	conn := node.Conn()
	defer func() { _ = conn.Close() }() // back to the pool; a failed return only drops it
	cmds, waited := c.evalThenWait(ctx, node, conn, []scriptCall{sc})
	v, err := cmds[0].Result()
	if err != nil {
		c.slotsMoved(ctx, err)
		return nil, err
	}
	return v, waited
}

// sendReplicated is sendOnce's send with WithWaitReplicas: the calls are
// sent per node and slot, each group on one connection of its node and
// followed by a WAIT there, the groups at the same time. It returns each call's
// command and, for the calls that Redis carried out, the *ReplicationError
// of their group's wait, if any.
func (c *redisConnection) sendReplicated(ctx context.Context, calls []*remembered) ([]*redis.Cmd, []error) {
	cmds := make([]*redis.Cmd, len(calls))
	waits := make([]error, len(calls))
	// One group per node and slot: a group of large publishes is one
	// transaction, which cannot span slots even on one node.
	type place struct {
		node *redis.Client
		slot uint16
	}
	groups := map[place][]int{}
	var order []place
	for i, call := range calls {
		key := call.firstKey()
		node, err := c.nodeFor(ctx, key)
		if err != nil {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(err)
			continue
		}
		at := place{node, keySlot(key)}
		if groups[at] == nil {
			order = append(order, at)
		}
		groups[at] = append(groups[at], i)
	}
	var wg sync.WaitGroup
	for _, at := range order {
		idx, node := groups[at], at.node
		wg.Go(func() {
			group := make([]*remembered, len(idx))
			for j, i := range idx {
				group[j] = calls[i]
			}
			conn := node.Conn()
			defer func() { _ = conn.Close() }() // back to the pool; a failed return only drops it
			var got []*redis.Cmd
			var waited error
			if sc := scriptsOf(group); sc != nil {
				got, waited = c.evalThenWait(ctx, node, conn, sc)
			} else {
				// a transaction: WAIT cannot follow it in its pipeline
				got = sendBatch(ctx, conn, group)
				wrote := false
				for _, cmd := range got {
					wrote = wrote || cmd.Err() == nil
				}
				if wrote {
					waited = c.waitReplicas(ctx, conn)
				}
			}
			for j, i := range idx {
				cmds[i] = got[j]
				c.slotsMoved(ctx, got[j].Err())
			}
			if err := waited; err != nil {
				for j, i := range idx {
					if got[j].Err() == nil {
						waits[i] = err
					}
				}
			}
		})
	}
	wg.Wait()
	return cmds, waits
}

// scriptsOf returns the calls as script calls, or nil when they are
// plain publishes sent as a transaction (see pushBatch).
func scriptsOf(calls []*remembered) []scriptCall {
	if calls[0].push != nil {
		pc := make([]*pushCall, len(calls))
		for i, call := range calls {
			pc[i] = call.push
		}
		return pushScripts(pc)
	}
	sc := make([]scriptCall, len(calls))
	for i, call := range calls {
		sc[i] = call.scriptCall
	}
	return sc
}

// firstKey is a key of the call's slot.
func (r *remembered) firstKey() string {
	if r.push != nil {
		return r.push.ready
	}
	return r.keys[0]
}
