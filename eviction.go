package redq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// EvictionWarning is sent to the error channel by Open when a Redis server
// may evict keys under memory pressure: its maxmemory-policy is not
// noeviction. An evicted key can be a ready list, a connection's unacked
// deliveries or a heartbeat, so deliveries can be lost or handed out twice.
// Set maxmemory-policy noeviction (then Redis refuses writes when full, and
// the verbs return ErrorWritesRefused) and watch memory. It matches
// ErrorEvictionPolicy.
type EvictionWarning struct {
	Addr   string // the server, as the client knows it ("" for a single node)
	Policy string // its maxmemory-policy
}

// ErrorEvictionPolicy is matched by every *EvictionWarning.
var ErrorEvictionPolicy = errors.New("redq: Redis may evict keys (maxmemory-policy is not noeviction)")

func (w *EvictionWarning) Error() string {
	at := ""
	if w.Addr != "" {
		at = " on " + w.Addr
	}
	return fmt.Sprintf("redq: maxmemory-policy is %q%s: Redis may evict queue keys and lose deliveries; set it to noeviction", w.Policy, at)
}

// Is makes errors.Is(err, ErrorEvictionPolicy) true.
func (w *EvictionWarning) Is(target error) bool { return target == ErrorEvictionPolicy }

// checkEviction reads the eviction policy of every master the client talks
// to and reports each one that is not noeviction. Servers that do not say
// (INFO refused, or no such field, as on miniredis) are not reported: the
// check is advice, never a reason to fail.
func (c *redisConnection) checkEviction(ctx context.Context) {
	var mu sync.Mutex
	check := func(ctx context.Context, addr string, client redis.Cmdable) error {
		info, err := client.Info(ctx, "memory").Result()
		if err != nil {
			return nil
		}
		if p := infoField(info, "maxmemory_policy"); p != "" && p != "noeviction" {
			mu.Lock()
			c.report(&EvictionWarning{Addr: addr, Policy: p})
			mu.Unlock()
		}
		return nil
	}
	if cc, ok := c.client.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return check(ctx, node.Options().Addr, node)
		})
		return
	}
	_ = check(ctx, "", c.client)
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
