package redq

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// startReplicated starts a primary and a replica of it and waits until the
// replica is in sync.
func startReplicated(t testing.TB) (primary, replica *redistest.Server) {
	t.Helper()
	skipShort(t, "starts a primary and a replica")
	primary, replica = redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	// no wait for more replicas before a full sync starts (5s by default)
	if err := primary.Client(t).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Client(t).Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	admin, radmin := primary.Client(t), replica.Client(t)
	eventually(t, "the replica to be in sync", func() bool {
		info, err := admin.Info(ctx, "replication").Result()
		rinfo, rerr := radmin.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "state=online") && rerr == nil && strings.Contains(rinfo, "master_link_status:up")
	})
	return primary, replica
}

// serverPid is the process id of a redis-server, from INFO server.
func serverPid(t testing.TB, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if pid, err := strconv.Atoi(v); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no process_id in INFO server: %q", info)
	return 0
}

// sigstop stops a redis-server with SIGSTOP until the test ends.
func sigstop(t testing.TB, c *redis.Client) {
	t.Helper()
	pid := serverPid(t, c)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
}

// With WithWaitReplicas, publishes and settles succeed while the replica
// keeps up, and say ErrorNotReplicated when it does not, with the writes
// done once in the primary: nothing lost, nothing twice.
func TestWaitReplicasSaysWhenReplicasDidNotConfirm(t *testing.T) {
	primary, replica := startReplicated(t)
	client := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { client.Close() })
	// a generous timeout while the replica is in sync (a busy machine),
	// a short one once it is stopped
	ns := namespace()
	open := func(timeout time.Duration) (*redisConnection, *redisQueue) {
		c, err := openConn(client, "waits", nil, ns, WithWaitReplicas(1, timeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.StopAllConsuming() })
		return c, openQueue(t, c, "jobs")
	}
	c, q := open(5 * time.Second)
	ctx := context.Background()
	type verb struct {
		name string
		run  func() error
	}
	verbs := func(q *redisQueue, held []Message) []verb {
		return []verb{
			{"Publish", func() error { return q.Publish("one") }},
			{"Publish 200", func() error { return q.Publish(procPayloads("many", 200)...) }},
			{"Put delayed", func() error { return q.Put(ctx, []byte("later"), Delay(time.Hour)) }},
			{"Ack", func() error { return held[0].Ack() }},
			{"Reject", func() error { return held[1].Reject() }},
			{"Release", func() error { return held[2].Release(ctx, 0) }},
			{"batch Ack", func() error {
				for _, err := range (Deliveries{held[3], held[4]}).AckContext(ctx) {
					return err
				}
				return nil
			}},
		}
	}
	if err := q.Publish("a", "b", "c", "d", "e"); err != nil {
		t.Fatal(err)
	}
	for _, v := range verbs(q, take(t, q, 5)) {
		if err := v.run(); err != nil {
			t.Fatalf("%s with the replica in sync: %v", v.name, err)
		}
	}
	// ready: 1 + 200 + the released one; delayed: 1; rejected: 1
	wantStats := func(ready, delayed, rejected, unacked int64) {
		t.Helper()
		s := mustStats(t, c, "jobs").QueueStats["jobs"]
		if s.ReadyCount != ready || s.DelayedCount != delayed || s.RejectedCount != rejected || s.UnackedCount() != unacked {
			t.Fatalf("ready %d, delayed %d, rejected %d, unacked %d; want %d, %d, %d, %d",
				s.ReadyCount, s.DelayedCount, s.RejectedCount, s.UnackedCount(), ready, delayed, rejected, unacked)
		}
	}
	wantStats(202, 1, 1, 0)
	_, q2 := open(300 * time.Millisecond)
	held := take(t, q2, 5)
	wantStats(197, 1, 1, 5)

	// Let the replica confirm every write so far, so that only a WAIT on
	// the connection that carried a write can tell that it did not reach
	// the replica.
	sync := primary.Client(t).Conn()
	defer sync.Close()
	if err := sync.Set(ctx, "sync", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := sync.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT before stopping the replica: %d, %v", n, err)
	}
	sigstop(t, replica.Client(t))
	for _, v := range verbs(q2, held) {
		start := time.Now()
		err := v.run()
		var re *ReplicationError
		if !errors.Is(err, ErrorNotReplicated) || !errors.As(err, &re) || re.Want != 1 || re.Got != 0 {
			t.Fatalf("%s with the replica stopped: %v, want a ReplicationError of 0 of 1", v.name, err)
		}
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Errorf("%s returned after %v, before the replica wait's timeout", v.name, d)
		}
	}
	// every write was done once: 202-5+1+200+1 ready, 2 delayed, 2 rejected
	wantStats(399, 2, 2, 0)
}

// WithWaitReplicas is refused at open, with ErrorUnsupportedClient, on a
// client that cannot reach the node of a write and on a Redis that does
// not replicate (miniredis); bad values are ArgumentErrors.
func TestWaitReplicasRefusesWhatCannotServeIt(t *testing.T) {
	m := miniredis.RunT(t)
	unsupported := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrorUnsupportedClient) || !errors.Is(err, ErrorConfiguration) {
			t.Errorf("%s: %v, want ErrorUnsupportedClient", what, err)
		}
	}
	opt := WithWaitReplicas(1, time.Second)
	_, err := OpenConnectionWithTestRedisClient("waits", nil, opt)
	unsupported("miniredis", err)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m.Addr()}})
	t.Cleanup(func() { ring.Close() })
	_, err = OpenConnectionWithRedisClient("waits", ring, nil, opt)
	unsupported("a ring client", err)
	bare := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { bare.Close() })
	_, err = OpenConnectionWithRedisClient("waits", struct{ redis.Cmdable }{bare}, nil, opt)
	unsupported("a bare Cmdable", err)
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("refused opens left keys %v", keys)
	}
	for _, bad := range []Option{WithWaitReplicas(0, time.Second), WithWaitReplicas(1, 0), WithWaitReplicas(1, time.Hour)} {
		if _, err := OpenConnectionWithTestRedisClient("waits", nil, bad); !errors.Is(err, ErrorInvalidArgument) {
			t.Errorf("bad WithWaitReplicas: %v, want an ArgumentError", err)
		}
	}
}

// clusterWithReplica starts a one-master Redis Cluster whose master has a
// replica, and returns a cluster client on it and the replica's server.
func clusterWithReplica(t *testing.T) (*redis.ClusterClient, *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	master := redistest.Start(t, redistest.WithArgs("--cluster-enabled", "yes", "--repl-diskless-sync-delay", "0"))
	replica := redistest.Start(t, redistest.WithArgs("--cluster-enabled", "yes"))
	m, r := master.Client(t), replica.Client(t)
	if err := m.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	id, err := m.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", master.Port()).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replica to replicate the master", func() bool {
		return r.Do(ctx, "CLUSTER", "REPLICATE", id).Err() == nil
	})
	eventually(t, "the cluster to be ok with the replica in sync", func() bool {
		ci, _ := m.ClusterInfo(ctx).Result()
		info, _ := m.Info(ctx, "replication").Result()
		rinfo, _ := r.Info(ctx, "replication").Result()
		return strings.Contains(ci, "cluster_state:ok") && strings.Contains(info, "state=online") && strings.Contains(rinfo, "master_link_status:up")
	})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{master.Addr()}})
	t.Cleanup(func() { c.Close() })
	return c, replica
}

// On a cluster client, WAIT goes to the master of each write's slot, on
// the connection that carried the write.
func TestWaitReplicasOnCluster(t *testing.T) {
	client, replica := clusterWithReplica(t)
	ctx := context.Background()
	ns := namespace()
	open := func(timeout time.Duration) *redisQueue {
		c, err := openConn(client, "waits", nil, ns, WithWaitReplicas(1, timeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.StopAllConsuming() })
		return openQueue(t, c, "jobs")
	}
	q, other := open(5*time.Second), open(5*time.Second)
	q2, _ := other.conn.openQueue(ctx, "other") // another slot
	for _, qq := range []*redisQueue{q, q2} {
		if err := qq.Publish("a", "b"); err != nil {
			t.Fatalf("publish with the replica in sync: %v", err)
		}
		if err := qq.Put(ctx, []byte("c"), Priority(1)); err != nil {
			t.Fatalf("put with the replica in sync: %v", err)
		}
		for _, d := range take(t, qq, 3) {
			if err := d.Ack(); err != nil {
				t.Fatalf("ack with the replica in sync: %v", err)
			}
		}
	}
	// Large publishes to two slots of one node, flushed together: one
	// transaction per slot (a transaction cannot span slots).
	large := make([]string, 11)
	for i := range large {
		large[i] = "large-" + strconv.Itoa(i)
	}
	q3, err := q.conn.openQueue(ctx, "other") // q's connection: one publisher
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for i := 0; i < 2; i++ {
			for _, qq := range []*redisQueue{q, q3} {
				wg.Go(func() { errs <- qq.Publish(large...) })
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("large publishes to two slots, round %d: %v", r, err)
			}
		}
	}
	for _, qq := range []*redisQueue{q, q3} {
		if n, err := client.LLen(ctx, qq.keys.ready).Result(); err != nil || n != 2*rounds*11 {
			t.Fatalf("%s ready after the large publishes: %d, %v; want %d", qq.name, n, err, 2*rounds*11)
		}
		if _, err := qq.PurgeReady(); err != nil {
			t.Fatal(err)
		}
	}
	short := open(300 * time.Millisecond)
	sigstop(t, replica.Client(t))
	if err := short.Publish("d"); !errors.Is(err, ErrorNotReplicated) {
		t.Fatalf("publish with the replica stopped: %v, want ErrorNotReplicated", err)
	}
	if err := short.Put(ctx, []byte("e"), Priority(1)); !errors.Is(err, ErrorNotReplicated) {
		t.Fatalf("put with the replica stopped: %v, want ErrorNotReplicated", err)
	}
	if n, err := client.LLen(ctx, short.keys.ready).Result(); err != nil || n != 1 {
		t.Fatalf("ready after the publish: %d, %v; want 1", n, err)
	}
}
