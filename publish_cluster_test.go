package redq

import (
	"context"
	"fmt"
	"strconv"
	"testing"
)

// A flush of coalesced publishes to queues in different slots, too large
// for the script form, lands every call on a cluster: a transaction
// cannot span slots, so each queue's call is a transaction of its own.
func TestPushBatchAcrossSlotsOnCluster(t *testing.T) {
	c := clusterClient(t)
	ctx := context.Background()
	var calls []*pushCall
	for i, name := range []string{"a", "b"} { // slots 15495 and 3300
		k := newQueueKeys(DefaultNamespace, name)
		envs := make([]any, pushScriptMax+1)
		for j := range envs {
			envs[j] = fmt.Sprintf("%s%d", name, j)
		}
		calls = append(calls, &pushCall{ready: k.ready, record: k.published("conn", "p1"), token: strconv.Itoa(i + 1), envs: envs})
	}
	for i, cmd := range pushBatch(ctx, c, calls) {
		if n, err := cmd.Int(); err != nil || n != pushScriptMax+1 {
			t.Errorf("call %d: %d, %v; want %d", i, n, err, pushScriptMax+1)
		}
		if n := c.LLen(ctx, calls[i].ready).Val(); n != pushScriptMax+1 {
			t.Errorf("%s holds %d, want %d", calls[i].ready, n, pushScriptMax+1)
		}
	}
}
