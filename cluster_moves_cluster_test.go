package redq

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// Environment of the stagepush helper.
const (
	procEnvClusterAddrs = "REDQ_TEST_CLUSTER_ADDRS" // cluster node addresses, comma-separated
	procEnvPushQueue    = "REDQ_TEST_PUSH_QUEUE"    // stagepush: the push queue
)

// procChildStagePush takes one delivery of REDQ_TEST_QUEUE on the cluster
// and pushes it to REDQ_TEST_PUSH_QUEUE, which is in another slot, and
// stops between step 1 (staged) and step 2 of the move: it emits STAGED and
// blocks until the parent kills it.
func procChildStagePush() int {
	addrs := strings.Split(os.Getenv(procEnvClusterAddrs), ",")
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	c, err := Open(context.Background(), "stager", client, nil, WithNamespace(os.Getenv(procEnvNS)))
	if err != nil {
		return procFail("open: %v", err)
	}
	rc := c.(*redisConnection)
	rc.afterStage = func() {
		procEmit("STAGED")
		select {}
	}
	q, err := c.OpenQueue(os.Getenv(procEnvQueue))
	if err != nil {
		return procFail("open queue: %v", err)
	}
	dst, err := c.OpenQueue(os.Getenv(procEnvPushQueue))
	if err != nil {
		return procFail("open push queue: %v", err)
	}
	q.SetPushQueue(dst)
	d, err := q.Take(context.Background(), 10*time.Second)
	if err != nil {
		return procFail("take: %v", err)
	}
	procEmit("TAKEN", "payload", d.Payload())
	err = d.Push()
	return procFail("push returned (%v) instead of stopping between the steps", err)
}

// On a real Redis Cluster (3 masters, 3 replicas): Push between slots takes
// the staged path and lands once; Push within a slot group is one script;
// SetPushQueueSameSlot refuses another slot; and a process SIGKILLed
// between step 1 and step 2 of a move loses nothing: a cleaner finishes
// the move and the delivery is in the push queue exactly once.
func TestClusterMovesAcrossSlots(t *testing.T) {
	t.Parallel() // own redis-server or cluster; see docs/testing.md
	cl := redistest.StartCluster(t)
	client := cl.Client(t)
	ctx := context.Background()

	t.Run("push", func(t *testing.T) {
		c, err := openConn(client, "colo", nil, namespace())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-c.StopAllConsuming() })
		q := openQueue(t, c, "orders")
		retry := openQueue(t, c, "{orders}retry")
		other := openQueue(t, c, "payments")
		if q.sameSlot(other) || !q.sameSlot(retry) {
			t.Fatal("test queues are not laid out as the test needs")
		}
		if err := q.Publish("1", "2", "3"); err != nil {
			t.Fatal(err)
		}
		ds := take(t, q, 3)
		q.SetPushQueue(other)
		if !c.stagesPush(q, other) {
			t.Fatal("a push across slots on a cluster client does not stage")
		}
		if err := ds[0].Push(); err != nil {
			t.Fatal(err)
		}
		if errs := (Deliveries{ds[1]}).Push(); len(errs) > 0 {
			t.Fatal(errs)
		}
		if err := q.SetPushQueueSameSlot(other); !errors.Is(err, ErrorCrossSlot) {
			t.Fatalf("SetPushQueueSameSlot across slots: %v", err)
		}
		if err := q.SetPushQueueSameSlot(retry); err != nil {
			t.Fatal(err)
		}
		if err := ds[2].Push(); err != nil {
			t.Fatal(err)
		}
		if got, err := other.Drain(10); err != nil || len(got) != 2 {
			t.Fatalf("push queue in another slot holds %v, %v; want 2", got, err)
		}
		if got, err := retry.Drain(10); err != nil || len(got) != 1 || got[0] != "3" {
			t.Fatalf("push queue in the group holds %v, %v; want [3]", got, err)
		}
		if n := client.HLen(ctx, q.keys.outbox).Val(); n != 0 {
			t.Fatalf("outbox holds %d", n)
		}

		// a keyed delivery pushed across slots is upserted there
		q.SetPushQueue(other)
		if _, err := q.Upsert(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, q, 5*time.Second)
		if err := d.Push(); err != nil {
			t.Fatal(err)
		}
		if item := mustLookup(t, other, "k"); !item.Pending || string(item.Payload) != "v" {
			t.Fatalf("keyed push across slots: %+v", item)
		}
		if _, err := NewCleaner(c).Clean(); err != nil {
			t.Fatalf("clean on the cluster: %v", err)
		}
	})

	// Grouped takes pushed across slots (move_apply.lua) land once in
	// their group's line there, and free their slots in the source.
	t.Run("grouped push", func(t *testing.T) {
		ns := namespace()
		c, err := openConn(client, "gcolo", nil, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-c.StopAllConsuming() })
		q := openQueue(t, c, "tenants")
		other := openQueue(t, c, "tenants-failed")
		if q.sameSlot(other) {
			t.Fatal("test queues share a slot")
		}
		q.SetPushQueue(other)
		if !c.stagesPush(q, other) {
			t.Fatal("a push across slots on a cluster client does not stage")
		}
		insp, err := NewInspector(client, ns)
		if err != nil {
			t.Fatal(err)
		}
		groupedPush(t, c, insp, q, other)
	})

	// Every key declared: while the queue's slot is being migrated, with
	// its keys split between two masters, scripts get ASK or TRYAGAIN,
	// which are retried, and none fails or creates a key on the wrong node
	// (MIGRATE would then fail with BUSYKEY).
	t.Run("resharding", func(t *testing.T) {
		c, err := openConn(client, "reshard", nil, namespace())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-c.StopAllConsuming() })
		q := openQueue(t, c, "moving")
		const first, later = 40, 20
		if err := q.Publish(procPayloads("a", first)...); err != nil {
			t.Fatal(err)
		}
		mustPut(t, q, "prio", Priority(3))
		ackAll(t, func() Deliveries {
			ds, err := q.TakeBatch(ctx, 5, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			return ds
		}())
		slot := int(keySlot(q.keys.ready))
		from, err := cl.MasterFor(ctx, q.keys.ready)
		if err != nil {
			t.Fatal(err)
		}
		masters, err := cl.Masters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		to := masters[0]
		if to == from {
			to = masters[1]
		}
		m, err := cl.BeginMigration(ctx, slot, to)
		if err != nil {
			t.Fatal(err)
		}
		// split the queue's keys: every one moves but the ready list, by
		// which a script that declared only it would be routed
		node := from.Client(t)
		keys, err := node.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		args := []any{"MIGRATE", strings.Split(to.Addr(), ":")[0], strings.Split(to.Addr(), ":")[1], "", 0, 5000, "KEYS"}
		split := 0
		for _, k := range keys {
			if k != q.keys.ready {
				args = append(args, k)
				split++
			}
		}
		if split == 0 || len(keys) == split {
			t.Fatalf("keys of the slot: %v", keys)
		}
		if err := node.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("migrate %d keys: %v", split, err)
		}
		// A fetch sent once, with no retry, meets TRYAGAIN: Redis saw all
		// its keys. (Scripts that declared only the ready list got "Script
		// attempted to access a non local key", which nothing retries.)
		probe := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1})
		defer probe.Close()
		if err := scripts.fetch.Run(ctx, probe, q.fetchKeys(c.registration()), c.Name(), 1, 1, "probe", 0).Err(); !redis.IsTryAgainError(err) {
			t.Fatalf("a fetch on the split slot: %v, want TRYAGAIN", err)
		}
		done := make(chan error, 1)
		acked := 0
		go func() {
			if err := q.Publish(procPayloads("b", later)...); err != nil {
				done <- err
				return
			}
			for acked < first+1+later-5 {
				d, err := q.Take(ctx, 20*time.Second)
				if err != nil {
					done <- err
					return
				}
				if err := d.Ack(); err != nil {
					done <- err
					return
				}
				acked++
			}
			done <- nil
		}()
		time.Sleep(300 * time.Millisecond)
		if err := m.Finish(ctx); err != nil {
			t.Fatalf("finish the migration: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("after %d acks: %v", acked, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("consuming did not finish; %d acked", acked)
		}
		wantCounts(t, c, "moving", 0, 0, 0)
	})

	t.Run("killed between the steps", func(t *testing.T) {
		nsOpt := namespace()
		var o options
		_ = nsOpt(&o)
		admin, err := openConn(client, "admin", nil, nsOpt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-admin.StopAllConsuming() })
		src := openQueue(t, admin, "work")
		dst := openQueue(t, admin, "dead")
		if src.sameSlot(dst) {
			t.Fatal("test queues share a slot")
		}
		if err := src.Publish("only"); err != nil {
			t.Fatal(err)
		}
		h := startProcHelper(t, "stagepush", map[string]string{
			procEnvClusterAddrs: strings.Join(cl.Addrs(), ","),
			procEnvNS:           o.namespace,
			procEnvQueue:        "work",
			procEnvPushQueue:    "dead",
		})
		h.await("STAGED", 60*time.Second, nil)
		h.kill()
		if n := client.HLen(ctx, src.keys.outbox).Val(); n != 1 {
			t.Fatalf("outbox holds %d after the kill, want the staged delivery", n)
		}
		if n := client.LLen(ctx, dst.keys.ready).Val(); n != 0 {
			t.Fatalf("push queue holds %d before the cleaner", n)
		}
		for i := 0; i < 2; i++ { // a second pass finds nothing to do
			if _, err := NewCleaner(admin).Clean(); err != nil {
				t.Fatal(err)
			}
		}
		got, err := dst.Drain(10)
		if err != nil || len(got) != 1 || got[0] != "only" {
			t.Fatalf("push queue holds %v, %v; want [only] exactly once", got, err)
		}
		if n := client.HLen(ctx, src.keys.outbox).Val(); n != 0 {
			t.Fatalf("outbox holds %d after the cleaner", n)
		}
		if got, _ := src.Drain(10); len(got) != 0 {
			t.Fatalf("source holds %v", got)
		}
	})
}
