package redq

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis Cluster changes under a running connection: a master dies and
// its replica takes over, a slot moves to another master. go-redis's
// cluster client learns the new slot map when it reloads its state, which
// it does on some errors (MOVED, READONLY) but not on others: after a
// master's SIGKILL it may keep dialling the dead node for a long time
// unless ClusterStateReloadInterval is set. redq does not rely on the
// user's options: every error of a call that hints at a topology change
// has the slot map reloaded, at most once per topologyReloadEvery per
// connection, and the call is retried with backoff by its caller.

// topologyReloadEvery bounds how often one connection has the slot map
// reloaded (go-redis adds its own cooldown of 200ms between reloads).
const topologyReloadEvery = 100 * time.Millisecond

// topology throttles the slot map reloads of one connection.
type topology struct {
	last atomic.Int64 // UnixNano of the last reload asked for
}

// topologyChanged has the slot map of a cluster client reloaded when err
// says the topology may have changed (see topologyError); on other clients
// and other errors it does nothing. It never blocks: go-redis reloads in
// the background.
func (c *redisConnection) topologyChanged(err error) {
	if err == nil {
		return
	}
	cc, ok := c.client.(*redis.ClusterClient)
	if !ok || !topologyError(err) {
		return
	}
	c.topo.reload(cc)
}

// reload asks cc to reload its slot map unless that was asked less than
// topologyReloadEvery ago.
func (t *topology) reload(cc *redis.ClusterClient) {
	now := time.Now().UnixNano()
	last := t.last.Load()
	if now-last < int64(topologyReloadEvery) || !t.last.CompareAndSwap(last, now) {
		return
	}
	cc.ReloadState(context.Background())
}

// topologyError reports whether err, from a call on a cluster, may mean
// that the slot map changed: a redirection (MOVED, ASK), a refusal a
// failover or resharding causes (CLUSTERDOWN, READONLY, TRYAGAIN,
// MASTERDOWN, LOADING), or a node that could not be reached or did not
// answer (refused connections, timeouts, connections closed). Errors that
// a resend would get again (a wrong type, a script error) and the end of
// the caller's own context are not.
func topologyError(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) {
		return false
	}
	var redisErr redis.Error
	if errors.As(err, &redisErr) {
		msg := redisErr.Error()
		for _, p := range []string{"MOVED ", "ASK ", "CLUSTERDOWN ", "READONLY ", "TRYAGAIN ", "MASTERDOWN ", "LOADING "} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	k := classify(err)
	return k == failUnreached || k == failUnknown
}
