package redq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// clusterClient starts a one-node Redis Cluster (every slot on one
// redis-server in cluster mode, which refuses scripts and commands that
// span slots as a real cluster does) and returns a cluster client on it.
func clusterClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	s := redistest.Start(t, redistest.WithArgs("--cluster-enabled", "yes"))
	ctx := context.Background()
	node := s.Client(t)
	if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cluster to be ok", func() bool {
		info, _ := node.ClusterInfo(ctx).Result()
		return strings.Contains(info, "cluster_state:ok")
	})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.Addr()}})
	t.Cleanup(func() { c.Close() })
	return c
}

// On Redis Cluster, rmq's layout with hash tags moves (each chunk's script
// touches one slot, the heartbeat is read before it); the plain layout,
// whose keys are in other slots than redq's, is refused and nothing moves.
func TestMigrateOnCluster(t *testing.T) {
	c := clusterClient(t)
	ctx := context.Background()
	tagged := rmqFixture{t: t, c: c, l: rmqLayouts[1]}
	tagged.publish("tasks", "t0", "t1", "t2", "t3")
	tagged.connection("dead", false)
	tagged.connection("live", true)
	tagged.take("dead", "tasks", 2)
	tagged.take("live", "tasks", 1)
	tagged.reject("tasks", "j0")

	r := migrate(t, c, MigrateOptions{ChunkSize: 1})
	wantQueueReport(t, r, "tasks", 1, 1, 2, 0)
	if len(r.Live) != 1 || r.Live[0].Connection != "live" {
		t.Fatalf("live:\n%s", r)
	}
	wantGot(t, "tasks", consumeAll(t, c, DefaultNamespace, "tasks"), append(plainGot(2, "t0", "t1"), plainGot(1, "t3")...))
	wantGot(t, "rejected", consumeRejected(t, c, DefaultNamespace, "tasks"), plainGot(1, "j0"))

	// A dead connection that comes back between chunks keeps the rest.
	tagged.publish("more", "m0", "m1", "m2")
	tagged.connection("paused", false)
	tagged.take("paused", "more", 3)
	calls := 0
	r = migrate(t, c, MigrateOptions{Queues: []string{"more"}, ChunkSize: 1, Progress: func(MigrateProgress) {
		if calls++; calls == 1 {
			tagged.must(c.Set(ctx, rmqHeartbeatKey("paused"), "1", time.Minute).Err())
		}
	}})
	if len(r.Live) != 1 || r.Live[0].Count != 2 || len(r.Dead) != 1 || r.Dead[0].Count != 1 {
		t.Fatalf("a connection that came back:\n%s", r)
	}

	// rmq publishers with the plain layout (which could publish on a
	// cluster, but never consume).
	plain := rmqFixture{t: t, c: c, l: rmqLayouts[0]}
	plain.publish("tasks", "p0")
	before := dbSnapshot(t, c) // KEYS goes to one node: this cluster has one
	_, err := MigrateFromRmq(ctx, c, MigrateOptions{})
	if !errors.Is(err, ErrorMigrationRefused) || !strings.Contains(err.Error(), "rmq::queue::[tasks]::ready (plain layout) is in slot") {
		t.Fatalf("the plain layout on a cluster: %v", err)
	}
	sameDB(t, "a refused run", before, dbSnapshot(t, c))
	// Told to read only the layout with hash tags, it leaves the plain one.
	r = migrate(t, c, MigrateOptions{HashTags: RmqHashTagsOn})
	if r.Moved() != 0 {
		t.Fatalf("moved:\n%s", r)
	}
}
