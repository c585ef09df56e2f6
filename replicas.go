package redq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

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
		return fmt.Errorf("%w: %w: WithWaitReplicas needs a Redis that replicates; INFO replication answered: %w", ErrorConfiguration, ErrorUnsupportedClient, err)
	case err != nil:
		return openError(err)
	case !strings.Contains(info, "role:"):
		return fmt.Errorf("%w: %w: WithWaitReplicas needs a Redis that replicates; INFO replication does not name a role", ErrorConfiguration, ErrorUnsupportedClient)
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
	want, timeout := c.opts.waitReplicas, c.opts.waitTimeout
	got, err := conn.Wait(ctx, want, timeout).Result()
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
	defer conn.Close()
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

// sendReplicated is sendOnce's send with WithWaitReplicas: the calls are
// sent per node, each group on one connection of its node and followed by
// a WAIT there, the groups at the same time. It returns each call's
// command and, for the calls that Redis carried out, the *ReplicationError
// of their group's wait, if any.
func (c *redisConnection) sendReplicated(ctx context.Context, calls []*remembered) ([]*redis.Cmd, []error) {
	cmds := make([]*redis.Cmd, len(calls))
	waits := make([]error, len(calls))
	groups := map[*redis.Client][]int{}
	var order []*redis.Client
	for i, call := range calls {
		key := call.firstKey()
		node, err := c.nodeFor(ctx, key)
		if err != nil {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(err)
			continue
		}
		if groups[node] == nil {
			order = append(order, node)
		}
		groups[node] = append(groups[node], i)
	}
	var wg sync.WaitGroup
	for _, node := range order {
		idx := groups[node]
		wg.Go(func() {
			group := make([]*remembered, len(idx))
			for j, i := range idx {
				group[j] = calls[i]
			}
			conn := node.Conn()
			defer conn.Close()
			got := sendBatch(ctx, conn, group)
			wrote := false
			for j, i := range idx {
				cmds[i] = got[j]
				wrote = wrote || got[j].Err() == nil
				c.slotsMoved(ctx, got[j].Err())
			}
			if !wrote {
				return
			}
			if err := c.waitReplicas(ctx, conn); err != nil {
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

// firstKey is a key of the call's slot.
func (r *remembered) firstKey() string {
	if r.push != nil {
		return r.push.ready
	}
	return r.keys[0]
}
