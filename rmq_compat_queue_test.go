package redq

import (
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Ports of rmq v5's queue_test.go (see rmq_compat_helpers_test.go). Left
// out: Test_jitteredDuration (rmq's unexported jitteredDuration; redq
// waits on Redis instead of sleeping).

// rmq's TestConnections. rmq reads the connections set (unexported
// getConnections) and each heartbeat (checkHeartbeat); the stats show the
// same: every listed connection, with whether its heartbeat is alive.
func TestRmqConnections(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		ns := namespace()
		// rmq's test first stops a connection's heartbeat twice (the second
		// time ErrorNotFound) and flushes the database: unexported
		// stopHeartbeat and flushDb. The test's own namespace starts empty.
		connection := rmqOpen(t, b, "conns-conn", ns)
		_, err := NewCleaner(connection).Clean()
		mustNil(t, err)
		wantConnections(t, connection, map[string]bool{"conns-conn": true}) // the cleaner's connection remains

		conn1 := rmqOpen(t, b, "conns-conn1", ns)
		wantConnections(t, connection, map[string]bool{"conns-conn": true, "conns-conn1": true})
		// Left out: hijackConnection("nope").checkHeartbeat() == ErrorNotFound
		// (rmq's unexported connection internals).
		conn2 := rmqOpen(t, b, "conns-conn2", ns)
		wantConnections(t, connection, map[string]bool{"conns-conn": true, "conns-conn1": true, "conns-conn2": true})

		// rmq stops conn1's heartbeat with its unexported stopHeartbeat,
		// which is what StopAllConsuming does: the connection stays listed,
		// inactive, until a cleaner runs.
		<-conn1.StopAllConsuming()
		wantConnections(t, connection, map[string]bool{"conns-conn": true, "conns-conn1": false, "conns-conn2": true})
		<-conn2.StopAllConsuming()
		wantConnections(t, connection, map[string]bool{"conns-conn": true, "conns-conn1": false, "conns-conn2": false})
	})
}

// wantConnections checks the listed connections by tag, and whether each
// is active.
func wantConnections(t *testing.T, c Connection, want map[string]bool) {
	t.Helper()
	s, err := c.CollectStats(nil)
	mustNil(t, err)
	got := map[string]bool{}
	for name, active := range s.OtherConnections {
		got[connTag(name)] = active
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("connections (tag: active) = %v, want %v", got, want)
	}
}

// rmq's TestConnectionQueues.
func TestRmqConnectionQueues(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "conn-q-conn", namespace())
		// rmq unlists all queues first (unexported unlistAllQueues): the
		// namespace is the test's own.
		if queues := sortedQueues(t, connection); len(queues) != 0 {
			t.Fatalf("open queues = %v, want none", queues)
		}

		queue1, err := connection.OpenQueue("conn-q-q1")
		mustNil(t, err)
		if queue1 == nil {
			t.Fatal("queue1 is nil")
		}
		if queues := sortedQueues(t, connection); !reflect.DeepEqual(queues, []string{"conn-q-q1"}) {
			t.Fatalf("open queues = %v", queues)
		}
		if queues := consumingQueues(t, connection); len(queues) != 0 {
			t.Fatalf("consuming queues = %v, want none", queues)
		}
		mustNil(t, queue1.StartConsuming(1, time.Millisecond))
		if queues := consumingQueues(t, connection); !reflect.DeepEqual(queues, []string{"conn-q-q1"}) {
			t.Fatalf("consuming queues = %v", queues)
		}

		queue2, err := connection.OpenQueue("conn-q-q2")
		mustNil(t, err)
		if queue2 == nil {
			t.Fatal("queue2 is nil")
		}
		if queues := sortedQueues(t, connection); len(queues) != 2 {
			t.Fatalf("open queues = %v, want 2", queues)
		}
		if queues := consumingQueues(t, connection); len(queues) != 1 {
			t.Fatalf("consuming queues = %v, want 1", queues)
		}
		mustNil(t, queue2.StartConsuming(1, time.Millisecond))
		if queues := consumingQueues(t, connection); len(queues) != 2 {
			t.Fatalf("consuming queues = %v, want 2", queues)
		}

		<-queue2.StopConsuming()
		// Left out: queue2.closeInStaleConnection() (unexported: what rmq's
		// cleaner does to a dead connection's queue) and the check after
		// it that the connection no longer consumes queue2. redq unlists a
		// connection from a queue when a cleaner returns what it held; a
		// live connection that stopped consuming stays listed (with no
		// consumers), as in rmq before that call, so that it can still
		// settle what it holds.
		if queues := sortedQueues(t, connection); len(queues) != 2 {
			t.Fatalf("open queues = %v, want 2", queues)
		}

		<-queue1.StopConsuming()
		if queues := sortedQueues(t, connection); len(queues) != 2 {
			t.Fatalf("open queues = %v, want 2", queues)
		}

		readyCount, rejectedCount, err := queue1.Destroy()
		mustNil(t, err)
		if readyCount != 0 || rejectedCount != 0 {
			t.Fatalf("Destroy = %d, %d, want 0, 0", readyCount, rejectedCount)
		}
		if queues := sortedQueues(t, connection); !reflect.DeepEqual(queues, []string{"conn-q-q2"}) {
			t.Fatalf("open queues = %v", queues)
		}
	})
}

// rmq's TestQueueCommon.
func TestRmqQueueCommon(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "queue-conn", namespace())
		queue, err := connection.OpenQueue("queue-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)
		eventuallyReady(t, connection, "queue-q", 0)
		mustNil(t, queue.Publish("queue-d1"))
		eventuallyReady(t, connection, "queue-q", 1)
		mustNil(t, queue.Publish("queue-d2"))
		eventuallyReady(t, connection, "queue-q", 2)
		count, err := queue.PurgeReady()
		mustNil(t, err)
		if count != 2 {
			t.Fatalf("PurgeReady = %d, want 2", count)
		}
		eventuallyReady(t, connection, "queue-q", 0)
		count, err = queue.PurgeReady()
		mustNil(t, err)
		if count != 0 {
			t.Fatalf("PurgeReady = %d, want 0", count)
		}

		if queues := consumingQueues(t, connection); len(queues) != 0 {
			t.Fatalf("consuming queues = %v, want none", queues)
		}
		mustNil(t, queue.StartConsuming(10, time.Millisecond))
		wantErr(t, "second StartConsuming", queue.StartConsuming(10, time.Millisecond), ErrorAlreadyConsuming)
		cons1name, err := queue.AddConsumer("queue-cons1", NewTestConsumer("queue-A"))
		mustNil(t, err)
		time.Sleep(time.Millisecond)
		if queues := consumingQueues(t, connection); len(queues) != 1 {
			t.Fatalf("consuming queues = %v, want 1", queues)
		}
		// rmq compares the consumer names it keeps in Redis (unexported
		// getConsumers). redq keeps a count per connection, which the
		// stats show; the name AddConsumer returns is the tag, a dash and
		// a suffix, as rmq's is.
		if !strings.HasPrefix(cons1name, "queue-cons1-") {
			t.Fatalf("consumer name %q does not start with its tag", cons1name)
		}
		if n := queueStat(t, connection, "queue-q").ConsumerCount(); n != 1 {
			t.Fatalf("consumers = %d, want 1", n)
		}
		_, err = queue.AddConsumer("queue-cons2", NewTestConsumer("queue-B"))
		mustNil(t, err)
		if n := queueStat(t, connection, "queue-q").ConsumerCount(); n != 2 {
			t.Fatalf("consumers = %d, want 2", n)
		}

		<-queue.StopConsuming()
	})
}

// rmq's TestConsumerCommon. Like rmq's, it opens the connection with
// OpenClusterConnection on a single-node client.
func TestRmqConsumerCommon(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection, err := OpenClusterConnection("cons-conn", b.client, nil, namespace())
		mustNil(t, err)
		if connection == nil {
			t.Fatal("connection is nil")
		}
		rmqStopAtEnd(t, connection)

		queue1, err := connection.OpenQueue("cons-q")
		mustNil(t, err)
		_, err = queue1.PurgeReady()
		mustNil(t, err)

		consumer := NewTestConsumer("cons-A")
		consumer.AutoAck = false
		mustNil(t, queue1.StartConsuming(10, time.Millisecond))
		_, err = queue1.AddConsumer("cons-cons", consumer)
		mustNil(t, err)
		if consumer.Last() != nil {
			t.Fatalf("Last = %v, want nil", consumer.Last())
		}

		wantHeader := func(d Delivery, want http.Header) {
			t.Helper()
			if got := d.(WithHeader).Header(); !reflect.DeepEqual(got, want) {
				t.Fatalf("header = %v, want %v", got, want)
			}
		}
		mustNil(t, queue1.Publish(PayloadWithHeader("cons-d1", http.Header{"foo": []string{"bar1"}})))
		eventuallyReady(t, connection, "cons-q", 0)
		eventuallyUnacked(t, connection, "cons-q", 1)
		consumedN(t, consumer, 1)
		if p := consumer.Last().Payload(); p != "cons-d1" {
			t.Fatalf("payload = %q", p)
		}
		wantHeader(consumer.Last(), http.Header{"foo": []string{"bar1"}})

		mustNil(t, queue1.Publish(PayloadWithHeader("cons-d2", http.Header{"foo": []string{"bar2"}})))
		eventuallyReady(t, connection, "cons-q", 0)
		eventuallyUnacked(t, connection, "cons-q", 2)
		consumedN(t, consumer, 2)
		if p := consumer.Last().Payload(); p != "cons-d2" {
			t.Fatalf("payload = %q", p)
		}
		wantHeader(consumer.Last(), http.Header{"foo": []string{"bar2"}})
		// Left out: the delivery's String matching rmq's key names
		// (`[cons-d2 rmq::connection::cons-conn-…::queue::{cons-q}::unacked]`):
		// redq's keys are its own (see keys.go).

		mustNil(t, consumer.Deliveries()[0].Ack())
		eventuallyReady(t, connection, "cons-q", 0)
		eventuallyUnacked(t, connection, "cons-q", 1)

		mustNil(t, consumer.Deliveries()[1].Ack())
		eventuallyReady(t, connection, "cons-q", 0)
		eventuallyUnacked(t, connection, "cons-q", 0)

		wantErr(t, "second Ack", consumer.Deliveries()[0].Ack(), ErrorNotFound)

		mustNil(t, queue1.Publish(PayloadWithHeader("cons-d3", http.Header{"foo": []string{"bar3"}})))
		eventuallyReady(t, connection, "cons-q", 0)
		eventuallyUnacked(t, connection, "cons-q", 1)
		eventuallyRejected(t, connection, "cons-q", 0)
		consumedN(t, consumer, 3)
		if p := consumer.Last().Payload(); p != "cons-d3" {
			t.Fatalf("payload = %q", p)
		}
		wantHeader(consumer.Last(), http.Header{"foo": []string{"bar3"}})
		mustNil(t, consumer.Last().Reject())
		eventuallyReady(t, connection, "cons-q", 0)
		eventuallyUnacked(t, connection, "cons-q", 0)
		eventuallyRejected(t, connection, "cons-q", 1)

		mustNil(t, queue1.Publish("cons-d4"))
		eventuallyReady(t, connection, "cons-q", 0)
		eventuallyUnacked(t, connection, "cons-q", 1)
		eventuallyRejected(t, connection, "cons-q", 1)
		consumedN(t, consumer, 4)
		if p := consumer.Last().Payload(); p != "cons-d4" {
			t.Fatalf("payload = %q", p)
		}
		mustNil(t, consumer.Last().Reject())
		eventuallyReady(t, connection, "cons-q", 0)
		eventuallyUnacked(t, connection, "cons-q", 0)
		eventuallyRejected(t, connection, "cons-q", 2)
		count, err := queue1.PurgeRejected()
		mustNil(t, err)
		if count != 2 {
			t.Fatalf("PurgeRejected = %d, want 2", count)
		}
		eventuallyRejected(t, connection, "cons-q", 0)
		count, err = queue1.PurgeRejected()
		mustNil(t, err)
		if count != 0 {
			t.Fatalf("PurgeRejected = %d, want 0", count)
		}

		queue2, err := connection.OpenQueue("cons-func-q")
		mustNil(t, err)
		mustNil(t, queue2.StartConsuming(10, time.Millisecond))

		payloadChan := make(chan string, 1)
		ackErrs := make(chan error, 1)
		payload := "cons-func-payload"
		_, err = queue2.AddConsumerFunc("cons-func", func(delivery Delivery) {
			ackErrs <- delivery.Ack()
			payloadChan <- delivery.Payload()
		})
		mustNil(t, err)

		mustNil(t, queue2.Publish(payload))
		eventuallyReady(t, connection, "cons-func-q", 0)
		eventuallyUnacked(t, connection, "cons-func-q", 0)
		mustNil(t, <-ackErrs)
		if got := <-payloadChan; got != payload {
			t.Fatalf("payload = %q", got)
		}

		<-queue1.StopConsuming()
		<-queue2.StopConsuming()
	})
}

// rmq's TestMulti: the prefetch limit bounds the deliveries the connection
// holds of the queue, buffered or in a consumer's hands.
func TestRmqMulti(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "multi-conn", namespace())
		queue, err := connection.OpenQueue("multi-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		for i := 0; i < 20; i++ {
			mustNil(t, queue.Publish(fmt.Sprintf("multi-d%d", i)))
		}
		eventuallyReady(t, connection, "multi-q", 20)
		eventuallyUnacked(t, connection, "multi-q", 0)

		mustNil(t, queue.StartConsuming(10, time.Millisecond))
		eventuallyReadyUnacked(t, connection, "multi-q", 10, 10)

		consumer := NewTestConsumer("multi-cons")
		consumer.AutoAck = false
		consumer.AutoFinish = false
		finishAll := finishAllAtEnd(t, consumer)

		_, err = queue.AddConsumer("multi-cons", consumer)
		mustNil(t, err)

		// After the consumer is added, ready and unacked do not change.
		eventuallyReady(t, connection, "multi-q", 10)
		eventuallyUnacked(t, connection, "multi-q", 10)

		consumedN(t, consumer, 1)
		mustNil(t, consumer.Last().Ack())
		// After an ack, ready drops to 9 and unacked stays at 10.
		eventuallyReadyUnacked(t, connection, "multi-q", 9, 10)

		consumer.Finish()
		// After the consumer finishes the first delivery, nothing changes.
		eventuallyReady(t, connection, "multi-q", 9)
		eventuallyUnacked(t, connection, "multi-q", 10)

		consumedN(t, consumer, 2)
		mustNil(t, consumer.Last().Ack())
		eventuallyReadyUnacked(t, connection, "multi-q", 8, 10)

		consumer.Finish()
		eventuallyReady(t, connection, "multi-q", 8)
		eventuallyUnacked(t, connection, "multi-q", 10)

		// Lets the consumer return from Consume so that StopConsuming
		// can finish.
		finishAll()
		<-queue.StopConsuming()
	})
}

// rmq's TestBatch.
func TestRmqBatch(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "batch-conn", namespace())
		queue, err := connection.OpenQueue("batch-q")
		mustNil(t, err)
		_, err = queue.PurgeRejected()
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		for i := 0; i < 5; i++ {
			mustNil(t, queue.Publish(fmt.Sprintf("batch-d%d", i)))
		}

		mustNil(t, queue.StartConsuming(10, time.Millisecond))
		eventuallyUnacked(t, connection, "batch-q", 5)

		consumer := NewTestBatchConsumer()
		// A failed test leaves the consumer waiting in Consume.
		t.Cleanup(func() {
			if t.Failed() {
				go consumer.Finish()
			}
		})
		_, err = queue.AddBatchConsumer("batch-cons", 2, 50*time.Millisecond, consumer)
		mustNil(t, err)
		eventuallyTrue(t, "a batch of 2", func() bool { return len(consumer.Last()) == 2 })
		wantPayloads(t, consumer.Last(), "batch-d0", "batch-d1")
		mustNil(t, consumer.Last()[0].Reject())
		mustNil(t, consumer.Last()[1].Ack())
		eventuallyUnacked(t, connection, "batch-q", 3)
		eventuallyRejected(t, connection, "batch-q", 1)

		consumer.Finish()
		eventuallyTrue(t, "a batch of 2", func() bool { return len(consumer.Last()) == 2 })
		wantPayloads(t, consumer.Last(), "batch-d2", "batch-d3")
		mustNil(t, consumer.Last()[0].Reject())
		mustNil(t, consumer.Last()[1].Ack())
		eventuallyUnacked(t, connection, "batch-q", 1)
		eventuallyRejected(t, connection, "batch-q", 2)

		consumer.Finish()
		// The last batch is cleared out.
		if n := len(consumer.Last()); n != 0 {
			t.Fatalf("last batch has %d deliveries, want 0", n)
		}
		eventuallyUnacked(t, connection, "batch-q", 1)
		eventuallyRejected(t, connection, "batch-q", 2)

		// After the batch timeout the consumer gets the rest.
		eventuallyTrue(t, "a batch of 1", func() bool { return len(consumer.Last()) == 1 })
		wantPayloads(t, consumer.Last(), "batch-d4")
		mustNil(t, consumer.Last()[0].Reject())
		eventuallyUnacked(t, connection, "batch-q", 0)
		eventuallyRejected(t, connection, "batch-q", 3)

		for i := 0; i < 5; i++ {
			mustNil(t, queue.Publish(fmt.Sprintf("batch-d%d", i)))
		}
		errMaps := make(chan map[int]error, 5)
		_, err = queue.AddBatchConsumerFunc("batch-cons-func", 2, 50*time.Millisecond, func(batch Deliveries) {
			errMaps <- batch.Ack()
		})
		mustNil(t, err)
		// rmq's test ends here; this one waits for the function to ack
		// all five (the TestBatchConsumer still waits in Consume).
		eventuallyReady(t, connection, "batch-q", 0)
		eventuallyUnacked(t, connection, "batch-q", 0)
		for len(errMaps) > 0 {
			if m := <-errMaps; len(m) != 0 {
				t.Fatalf("batch Ack errors: %v", m)
			}
		}
		done := queue.StopConsuming()
		consumer.Finish()
		<-done
	})
}

func wantPayloads(t *testing.T, batch Deliveries, want ...string) {
	t.Helper()
	if got := batch.Payloads(); !reflect.DeepEqual(got, want) {
		t.Fatalf("batch payloads = %q, want %q", got, want)
	}
}

// rmq's TestReturnRejected.
func TestRmqReturnRejected(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "return-conn", namespace())
		queue, err := connection.OpenQueue("return-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		for i := 0; i < 6; i++ {
			mustNil(t, queue.Publish(fmt.Sprintf("return-d%d", i)))
		}

		eventuallyReady(t, connection, "return-q", 6)
		eventuallyUnacked(t, connection, "return-q", 0)
		eventuallyRejected(t, connection, "return-q", 0)

		mustNil(t, queue.StartConsuming(10, time.Millisecond))
		eventuallyReady(t, connection, "return-q", 0)
		eventuallyUnacked(t, connection, "return-q", 6)
		eventuallyRejected(t, connection, "return-q", 0)

		consumer := NewTestConsumer("return-cons")
		consumer.AutoAck = false
		_, err = queue.AddConsumer("cons", consumer)
		mustNil(t, err)
		eventuallyReady(t, connection, "return-q", 0)
		eventuallyUnacked(t, connection, "return-q", 6)
		eventuallyRejected(t, connection, "return-q", 0)

		consumedN(t, consumer, 6)
		ds := consumer.Deliveries()
		mustNil(t, ds[0].Reject())
		mustNil(t, ds[1].Ack())
		mustNil(t, ds[2].Reject())
		mustNil(t, ds[3].Reject())
		// delivery 4 still open
		mustNil(t, ds[5].Reject())

		eventuallyReady(t, connection, "return-q", 0)
		eventuallyUnacked(t, connection, "return-q", 1)  // delivery 4
		eventuallyRejected(t, connection, "return-q", 4) // delivery 0, 2, 3, 5

		<-queue.StopConsuming()

		n, err := queue.ReturnRejected(2)
		mustNil(t, err)
		if n != 2 {
			t.Fatalf("ReturnRejected(2) = %d", n)
		}
		eventuallyReady(t, connection, "return-q", 2)
		eventuallyUnacked(t, connection, "return-q", 1)  // delivery 4
		eventuallyRejected(t, connection, "return-q", 2) // delivery 3, 5

		n, err = queue.ReturnRejected(math.MaxInt64)
		mustNil(t, err)
		if n != 2 {
			t.Fatalf("ReturnRejected(MaxInt64) = %d", n)
		}
		eventuallyReady(t, connection, "return-q", 4)
		eventuallyUnacked(t, connection, "return-q", 1) // delivery 4
		eventuallyRejected(t, connection, "return-q", 0)
	})
}

// rmq's TestRejectFaultyMessages: a payload that starts with rmq's header
// signature but has no header line is rejected when fetched, and never
// reaches a consumer. (rmq's test builds it with its unexported
// jsonHeaderSignature; redq's name for it is rmqHeaderSignature.)
func TestRmqRejectFaultyMessages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "faulty-conn", namespace())
		queue, err := connection.OpenQueue("faulty-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		for i := 0; i < 6; i++ {
			// No line separator after the header: an error, and the
			// delivery is rejected.
			mustNil(t, queue.Publish(fmt.Sprintf("%sreturn-d%d", rmqHeaderSignature, i)))
		}

		eventuallyReady(t, connection, "faulty-q", 6)
		eventuallyUnacked(t, connection, "faulty-q", 0)
		eventuallyRejected(t, connection, "faulty-q", 0)

		mustNil(t, queue.StartConsuming(10, time.Millisecond))
		eventuallyReady(t, connection, "faulty-q", 0)
		eventuallyUnacked(t, connection, "faulty-q", 0)
		eventuallyRejected(t, connection, "faulty-q", 6)

		consumer := NewTestConsumer("faulty-cons")
		consumer.AutoAck = false
		_, err = queue.AddConsumer("cons", consumer)
		mustNil(t, err)
		eventuallyReady(t, connection, "faulty-q", 0)
		eventuallyUnacked(t, connection, "faulty-q", 0)
		eventuallyRejected(t, connection, "faulty-q", 6)

		if n := len(consumer.Deliveries()); n != 0 {
			t.Fatalf("the consumer got %d deliveries, want 0", n)
		}

		<-queue.StopConsuming()
	})
}

// rmq's TestPushQueue.
func TestRmqPushQueue(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		if b.name == "cluster" {
			t.Skip("needs cross-slot moves")
		}
		connection := rmqOpen(t, b, "push", namespace())
		queue1, err := connection.OpenQueue("queue1")
		mustNil(t, err)
		queue2, err := connection.OpenQueue("queue2")
		mustNil(t, err)
		queue1.SetPushQueue(queue2)
		// Left out: queue2's ready key equals queue1's push key (rmq's
		// unexported fields).

		consumer1 := NewTestConsumer("push-cons")
		consumer1.AutoAck = false
		consumer1.AutoFinish = false
		finishAllAtEnd(t, consumer1)
		mustNil(t, queue1.StartConsuming(10, time.Millisecond))
		_, err = queue1.AddConsumer("push-cons", consumer1)
		mustNil(t, err)

		consumer2 := NewTestConsumer("push-cons")
		consumer2.AutoAck = false
		consumer2.AutoFinish = false
		finishAllAtEnd(t, consumer2)
		mustNil(t, queue2.StartConsuming(10, time.Millisecond))
		_, err = queue2.AddConsumer("push-cons", consumer2)
		mustNil(t, err)

		mustNil(t, queue1.Publish("d1"))
		eventuallyUnacked(t, connection, "queue1", 1)
		consumedN(t, consumer1, 1)

		mustNil(t, consumer1.Last().Push())
		eventuallyUnacked(t, connection, "queue1", 0)
		eventuallyUnacked(t, connection, "queue2", 1)
		consumedN(t, consumer2, 1)

		mustNil(t, consumer2.Last().Push())
		eventuallyRejected(t, connection, "queue2", 1)
	})
}

// rmq's TestStopConsuming_Consumer: after StopConsuming every delivery is
// ready, unacked or consumed.
func TestRmqStopConsumingConsumer(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "consume", namespace())
		queue, err := connection.OpenQueue("consume-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		deliveryCount := int64(30)
		for i := int64(0); i < deliveryCount; i++ {
			mustNil(t, queue.Publish("d"+strconv.FormatInt(i, 10)))
		}

		mustNil(t, queue.StartConsuming(20, time.Millisecond))

		var consumers []*TestConsumer
		for i := 0; i < 10; i++ {
			consumer := NewTestConsumer("c" + strconv.Itoa(i))
			consumers = append(consumers, consumer)
			_, err = queue.AddConsumer("consume", consumer)
			mustNil(t, err)
		}

		finishedChan := queue.StopConsuming()
		if finishedChan == nil {
			t.Fatal("StopConsuming returned nil")
		}
		<-finishedChan

		var consumedCount int64
		for _, consumer := range consumers {
			consumedCount += int64(len(consumer.Deliveries()))
		}
		eventuallyTrue(t, "ready+unacked+consumed == published", func() bool {
			return readCount(t, connection, "consume-q", countReady)+readCount(t, connection, "consume-q", countUnacked)+consumedCount == deliveryCount
		})
	})
}

// rmq's TestStopConsuming_BatchConsumer.
func TestRmqStopConsumingBatchConsumer(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "batchConsume", namespace())
		queue, err := connection.OpenQueue("batchConsume-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		deliveryCount := int64(50)
		for i := int64(0); i < deliveryCount; i++ {
			mustNil(t, queue.Publish("d"+strconv.FormatInt(i, 10)))
		}

		mustNil(t, queue.StartConsuming(20, time.Millisecond))

		var consumers []*TestBatchConsumer
		for i := 0; i < 10; i++ {
			consumer := NewTestBatchConsumer()
			consumer.AutoFinish = true
			consumers = append(consumers, consumer)
			_, err = queue.AddBatchConsumer("consume", 5, time.Second, consumer)
			mustNil(t, err)
		}

		finishedChan := queue.StopConsuming()
		if finishedChan == nil {
			t.Fatal("StopConsuming returned nil")
		}
		<-finishedChan

		var consumedCount int64
		for _, consumer := range consumers {
			consumedCount += consumer.Consumed()
		}
		eventuallyTrue(t, "ready+unacked+consumed == published", func() bool {
			return readCount(t, connection, "batchConsume-q", countReady)+readCount(t, connection, "batchConsume-q", countUnacked)+consumedCount == deliveryCount
		})
	})
}

// rmq's TestConnection_StopAllConsuming_CantOpenQueue.
func TestRmqStopAllConsumingCantOpenQueue(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "consume", namespace())
		finishedChan := connection.StopAllConsuming()
		if finishedChan == nil {
			t.Fatal("StopAllConsuming returned nil")
		}
		<-finishedChan

		queue, err := connection.OpenQueue("consume-q")
		if queue != nil {
			t.Fatalf("OpenQueue after StopAllConsuming = %#v, want nil", queue)
		}
		wantErr(t, "OpenQueue after StopAllConsuming", err, ErrorConsumingStopped)
	})
}

// rmq's TestClusterConnection_StopAllConsuming_CalledTwice (from
// queue_cluster_test.go, the one test there without a single-node twin),
// on a single node: calling StopAllConsuming again is safe, and the
// heartbeat stays stopped. rmq checks the heartbeat with its unexported
// checkHeartbeat; the stats show it as an inactive connection.
func TestRmqStopAllConsumingCalledTwice(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		ns := namespace()
		connection, err := OpenClusterConnection("conn1", b.client, nil, ns)
		mustNil(t, err)
		rmqStopAtEnd(t, connection)
		observer := rmqOpen(t, b, "observer", ns)

		finishedChan := connection.StopAllConsuming()
		if finishedChan == nil {
			t.Fatal("StopAllConsuming returned nil")
		}
		<-finishedChan
		wantConnections(t, observer, map[string]bool{"conn1": false, "observer": true})

		finishedChan = connection.StopAllConsuming()
		if finishedChan == nil {
			t.Fatal("the second StopAllConsuming returned nil")
		}
		<-finishedChan
		wantConnections(t, observer, map[string]bool{"conn1": false, "observer": true})
	})
}

// rmq's TestConnection_StopAllConsuming_CantStartConsuming.
func TestRmqStopAllConsumingCantStartConsuming(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "consume", namespace())
		queue, err := connection.OpenQueue("consume-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		<-connection.StopAllConsuming()

		wantErr(t, "StartConsuming after StopAllConsuming", queue.StartConsuming(20, time.Millisecond), ErrorConsumingStopped)
	})
}

// rmq's TestQueue_StopConsuming_CantStartConsuming.
func TestRmqQueueStopConsumingCantStartConsuming(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "consume", namespace())
		queue, err := connection.OpenQueue("consume-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		<-queue.StopConsuming()

		wantErr(t, "StartConsuming after StopConsuming", queue.StartConsuming(20, time.Millisecond), ErrorConsumingStopped)
	})
}

// rmq's TestConnection_StopAllConsuming_CantAddConsumer.
func TestRmqStopAllConsumingCantAddConsumer(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "consume", namespace())
		queue, err := connection.OpenQueue("consume-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		mustNil(t, queue.StartConsuming(20, time.Millisecond))
		<-connection.StopAllConsuming()

		_, err = queue.AddConsumer("late-consume", NewTestConsumer("late-consumer"))
		wantErr(t, "AddConsumer after StopAllConsuming", err, ErrorConsumingStopped)
	})
}

// rmq's TestQueue_StopConsuming_CantAddConsumer.
func TestRmqQueueStopConsumingCantAddConsumer(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "consume", namespace())
		queue, err := connection.OpenQueue("consume-q")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		mustNil(t, queue.StartConsuming(20, time.Millisecond))
		<-queue.StopConsuming()

		_, err = queue.AddConsumer("late-consume", NewTestConsumer("late-consumer"))
		wantErr(t, "AddConsumer after StopConsuming", err, ErrorConsumingStopped)
	})
}

// rmq's TestQueueDrain.
func TestRmqQueueDrain(t *testing.T) {
	forEachRmqPort(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "drain-connection", namespace())
		queue, err := connection.OpenQueue("drain-queue")
		mustNil(t, err)

		for x := 0; x < 100; x++ {
			mustNil(t, queue.Publish(fmt.Sprintf("%d", x)))
		}
		eventuallyReady(t, connection, "drain-queue", 100)

		for x := 1; x <= 10; x++ {
			values, err := queue.Drain(10)
			mustNil(t, err)
			if len(values) != 10 {
				t.Fatalf("Drain(10) gave %d values", len(values))
			}
			eventuallyReady(t, connection, "drain-queue", int64(100-x*10))
		}

		// Not in rmq's test: Drain of more than is ready. rmq's pops one
		// at a time and returns what it got with redis.Nil; redq's drains
		// in one call and returns what was ready with no error (see the
		// README's rmq section).
		mustNil(t, queue.Publish("last"))
		values, err := queue.Drain(10)
		if err != nil || len(values) != 1 || values[0] != "last" {
			t.Fatalf("Drain(10) of 1 = %q, %v, want [last], nil", values, err)
		}
	})
}

// rmq's TestQueueHeader.
func TestRmqQueueHeader(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		connection := rmqOpen(t, b, "queue-h-conn", namespace())
		queue, err := connection.OpenQueue("queue-h")
		mustNil(t, err)
		_, err = queue.PurgeReady()
		mustNil(t, err)

		mustNil(t, queue.StartConsuming(2, time.Millisecond))
		time.Sleep(time.Millisecond)

		var consumed atomic.Int64
		problems := make(chan string, 10)
		cons := ConsumerFunc(func(delivery Delivery) {
			defer consumed.Add(1)
			h, ok := delivery.(WithHeader)
			if !ok {
				problems <- "the delivery is not a WithHeader"
				return
			}
			switch delivery.Payload() {
			case "queue-d1":
				if len(h.Header()) != 0 {
					problems <- fmt.Sprintf("queue-d1 has header %v", h.Header())
				}
			case "queue-d2":
				if got := h.Header().Get("X-Foo"); got != "d2" {
					problems <- fmt.Sprintf("queue-d2 X-Foo = %q", got)
				}
			default:
				problems <- fmt.Sprintf("unexpected payload: %q", delivery.Payload())
			}
		})

		_, err = queue.AddConsumer("queue-cons1", cons)
		mustNil(t, err)

		mustNil(t, queue.Publish("queue-d1"))
		mustNil(t, queue.Publish(PayloadWithHeader("queue-d2", http.Header{"X-Foo": []string{"d2"}})))

		eventuallyTrue(t, "2 consumed", func() bool { return consumed.Load() == 2 })
		close(problems)
		for p := range problems {
			t.Error(p)
		}

		<-queue.StopConsuming()
	})
}

// rmq's BenchmarkQueue: ten TestConsumers consume b.N deliveries, each
// once. On the test binary's redis-server when there is one, else on
// miniredis.
func BenchmarkRmqQueue(b *testing.B) {
	var conn Connection
	var err error
	if realRedis != nil {
		conn, err = OpenConnectionWithRedisClient("bench-conn", realRedis.Client(b), nil, namespace())
	} else {
		conn, err = OpenConnectionWithTestRedisClient("bench-conn", nil, namespace())
	}
	if err != nil {
		b.Fatal(err)
	}
	benchRmqQueue(b, conn)
}

// benchRmqQueue is BenchmarkRmqQueue on conn.
func benchRmqQueue(b *testing.B, conn Connection) {
	queueName := fmt.Sprintf("bench-q%d", b.N)
	queue, err := conn.OpenQueue(queueName)
	if err != nil {
		b.Fatal(err)
	}
	if err := queue.StartConsuming(10, time.Millisecond); err != nil {
		b.Fatal(err)
	}
	var consumers []*TestConsumer
	for i := 0; i < 10; i++ {
		consumer := NewTestConsumer("bench-A")
		consumers = append(consumers, consumer)
		if _, err := queue.AddConsumer("bench-cons", consumer); err != nil {
			b.Fatal(err)
		}
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := queue.Publish("bench-d"); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := conn.CollectStats([]string{queueName})
		if err != nil {
			b.Fatal(err)
		}
		qs := s.QueueStats[queueName]
		if qs.ReadyCount == 0 && qs.UnackedCount() == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("timeout waiting for all messages to be consumed: %d messages %d ready %d unacked", b.N, qs.ReadyCount, qs.UnackedCount())
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	sum := 0
	for _, consumer := range consumers {
		sum += len(consumer.Deliveries())
	}
	if sum != b.N {
		b.Fatalf("consumed %d of %d", sum, b.N)
	}
	<-conn.StopAllConsuming()
}
