package redq

import (
	"fmt"
	"testing"
	"time"
)

// Ports of rmq v5's queue_cluster_test.go. rmq's cluster tests are its
// single-node tests of queue_test.go run on a Redis Cluster with
// OpenClusterConnection, so they are the single-node ports of
// rmq_compat_queue_test.go run on the shared real cluster (see
// forEachRmqPort), as their "cluster" subtests:
//
//	TestClusterConnections                       TestRmqConnections/cluster
//	TestClusterConnectionQueues                  TestRmqConnectionQueues/cluster
//	TestClusterQueueCommon                       TestRmqQueueCommon/cluster
//	TestClusterConsumerCommon                    TestRmqConsumerCommon/cluster
//	TestClusterMulti                             TestRmqMulti/cluster
//	TestClusterBatch                             TestRmqBatch/cluster
//	TestClusterReturnRejected                    TestRmqReturnRejected/cluster
//	TestClusterPushQueue                         TestRmqPushQueue/cluster
//	TestClusterStopConsuming_Consumer            TestRmqStopConsumingConsumer/cluster
//	TestClusterStopConsuming_BatchConsumer       TestRmqStopConsumingBatchConsumer/cluster
//	TestClusterConnection_StopAllConsuming_…     TestRmqStopAllConsuming…/cluster
//	TestClusterQueue_StopConsuming_…             TestRmqQueueStopConsuming…/cluster
//	TestClusterQueueDrain                        TestRmqQueueDrain/cluster
//	TestClusterMix                               TestRmqClusterMix (below)
//	BenchmarkClusterQueue                        BenchmarkRmqClusterQueue (below)
//
// Where rmq's cluster test differs from its single-node twin it is in
// what the ports leave out anyway: rmq's key names ([q] against {q}), its
// unexported internals (flushDb, hijackConnection) and connection counts
// relative to a flushed database (each port has a namespace of its own,
// so it counts exactly). Left out: TestCluster_jitteredDuration (rmq's
// unexported jitteredDuration, as for the single-node port).

// rmq's TestClusterMix: a connection to a single Redis and one to a
// cluster, each publishing and consuming a queue of the same name, do not
// see each other's deliveries. Left out: the deliveries' String() with
// rmq's key names ([cons-q] on the single node, {cons-q} on the cluster):
// redq puts every queue's keys under a hash tag on every client.
func TestRmqClusterMix(t *testing.T) {
	ns := namespace()
	connection1 := rmqOpen(t, backend{name: "redis", client: realClient(t)}, "conn1", ns)
	connection2 := rmqOpen(t, clusterBackend(t), "conn2", ns)
	for i, connection := range []Connection{connection1, connection2} {
		queue, err := connection.OpenQueue("cons-q")
		mustNil(t, err)
		if queue == nil {
			t.Fatal("queue is nil")
		}
		_, err = queue.PurgeReady()
		mustNil(t, err)

		consumer := NewTestConsumer("cons-A")
		consumer.AutoAck = false
		finishAllAtEnd(t, consumer)
		mustNil(t, queue.StartConsuming(int64(10*(i+1)), time.Millisecond))
		_, err = queue.AddConsumer("cons-cons", consumer)
		mustNil(t, err)
		if consumer.Last() != nil {
			t.Fatalf("consumer %d has a delivery before any publish", i+1)
		}

		payload := fmt.Sprintf("cons-d%d", i+1)
		mustNil(t, queue.Publish(payload))
		eventuallyReady(t, connection, "cons-q", 0)
		eventuallyUnacked(t, connection, "cons-q", 1)
		consumedN(t, consumer, 1)
		if got := consumer.Last().Payload(); got != payload {
			t.Fatalf("connection %d consumed %q, want %q", i+1, got, payload)
		}
	}
}

// rmq's BenchmarkClusterQueue: BenchmarkRmqQueue on the shared cluster.
func BenchmarkRmqClusterQueue(b *testing.B) {
	conn, err := OpenClusterConnection("bench-conn", sharedCluster(b).Client(b), nil, namespace())
	if err != nil {
		b.Fatal(err)
	}
	benchRmqQueue(b, conn)
}
