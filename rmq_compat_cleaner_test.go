package redq

import (
	"testing"
	"time"
)

// Port of rmq v5's cleaner_test.go (see rmq_compat_helpers_test.go).

// rmq's TestCleaner: connections die (their heartbeat is stopped, with
// rmq's unexported stopHeartbeat, ported as a helper) while a consumer
// holds a delivery and the prefetch buffer holds another; a cleaner
// returns exactly those to ready, and a later connection consumes them.
func TestRmqCleaner(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		// rmq's test first flushes the database (unexported flushDb); the
		// test's own namespace starts empty.
		conn := rmqOpen(t, b, "cleaner-conn1", ns)
		if queues := sortedQueues(t, conn); len(queues) != 0 {
			t.Fatalf("open queues = %v, want none", queues)
		}
		queue, err := conn.OpenQueue("q1")
		mustNil(t, err)
		if queues := sortedQueues(t, conn); len(queues) != 1 {
			t.Fatalf("open queues = %v, want 1", queues)
		}
		_, err = conn.OpenQueue("q2")
		mustNil(t, err)
		if queues := sortedQueues(t, conn); len(queues) != 2 {
			t.Fatalf("open queues = %v, want 2", queues)
		}

		eventuallyReady(t, conn, "q1", 0)
		for i, p := range []string{"del1", "del2", "del3", "del4", "del5", "del6"} {
			mustNil(t, queue.Publish(p))
			eventuallyReady(t, conn, "q1", int64(i+1))
		}

		eventuallyUnacked(t, conn, "q1", 0)
		mustNil(t, queue.StartConsuming(2, time.Millisecond))
		eventuallyUnacked(t, conn, "q1", 2)
		eventuallyReady(t, conn, "q1", 4)

		consumer := NewTestConsumer("c-A")
		consumer.AutoFinish = false
		consumer.AutoAck = false
		finishAllAtEnd(t, consumer)

		_, err = queue.AddConsumer("consumer1", consumer)
		mustNil(t, err)
		time.Sleep(10 * time.Millisecond)
		eventuallyUnacked(t, conn, "q1", 2)
		eventuallyReady(t, conn, "q1", 4)

		consumedN(t, consumer, 1)
		wantPayload(t, consumer.Last(), "del1")
		mustNil(t, consumer.Last().Ack())
		eventuallyUnacked(t, conn, "q1", 2)
		eventuallyReady(t, conn, "q1", 3)

		consumer.Finish()
		time.Sleep(10 * time.Millisecond)
		eventuallyUnacked(t, conn, "q1", 2)
		eventuallyReady(t, conn, "q1", 3)
		consumedN(t, consumer, 2)
		wantPayload(t, consumer.Last(), "del2")

		// Not waited for, as in rmq: the consumer is still in Consume.
		queue.StopConsuming()
		mustNil(t, stopHeartbeat(conn))
		time.Sleep(time.Millisecond)

		conn = rmqOpen(t, b, "cleaner-conn1", ns)
		queue, err = conn.OpenQueue("q1")
		mustNil(t, err)

		for i, p := range []string{"del7", "del8", "del9", "del10", "del11"} {
			mustNil(t, queue.Publish(p))
			eventuallyReady(t, conn, "q1", int64(4+i))
		}

		eventuallyUnacked(t, conn, "q1", 0)
		mustNil(t, queue.StartConsuming(2, time.Millisecond))
		eventuallyUnacked(t, conn, "q1", 2)
		eventuallyReady(t, conn, "q1", 6)

		consumer = NewTestConsumer("c-B")
		consumer.AutoFinish = false
		consumer.AutoAck = false
		finishAllAtEnd(t, consumer)

		_, err = queue.AddConsumer("consumer2", consumer)
		mustNil(t, err)
		time.Sleep(10 * time.Millisecond)
		eventuallyUnacked(t, conn, "q1", 2)
		eventuallyReady(t, conn, "q1", 6)
		consumedN(t, consumer, 1)
		wantPayload(t, consumer.Last(), "del4")

		consumer.Finish() // del4 stays unacked
		time.Sleep(10 * time.Millisecond)
		eventuallyUnacked(t, conn, "q1", 2)
		eventuallyReady(t, conn, "q1", 6)

		consumedN(t, consumer, 2)
		wantPayload(t, consumer.Last(), "del5")
		mustNil(t, consumer.Last().Ack())
		time.Sleep(10 * time.Millisecond)
		eventuallyUnacked(t, conn, "q1", 2)
		eventuallyReady(t, conn, "q1", 5)

		queue.StopConsuming()
		mustNil(t, stopHeartbeat(conn))
		time.Sleep(time.Millisecond)

		cleanerConn := rmqOpen(t, b, "cleaner-conn", ns)
		cleaner := NewCleaner(cleanerConn)
		returned, err := cleaner.Clean()
		mustNil(t, err)
		if returned != 4 {
			t.Fatalf("Clean returned %d, want 4", returned)
		}
		eventuallyReady(t, conn, "q1", 9) // 2 of 11 were acked above
		if queues := sortedQueues(t, conn); len(queues) != 2 {
			t.Fatalf("open queues = %v, want 2", queues)
		}

		conn = rmqOpen(t, b, "cleaner-conn1", ns)
		queue, err = conn.OpenQueue("q1")
		mustNil(t, err)
		mustNil(t, queue.StartConsuming(10, time.Millisecond))
		consumer = NewTestConsumer("c-C")

		_, err = queue.AddConsumer("consumer3", consumer)
		mustNil(t, err)
		time.Sleep(10 * time.Millisecond)
		consumedN(t, consumer, 9)

		queue.StopConsuming()
		mustNil(t, stopHeartbeat(conn))
		time.Sleep(time.Millisecond)

		returned, err = cleaner.Clean()
		mustNil(t, err)
		if returned != 0 {
			t.Fatalf("Clean returned %d, want 0", returned)
		}
		mustNil(t, stopHeartbeat(cleanerConn))
	})
}

func wantPayload(t *testing.T, d Delivery, want string) {
	t.Helper()
	if d == nil {
		t.Fatalf("no delivery, want %q", want)
	}
	if got := d.Payload(); got != want {
		t.Fatalf("payload = %q, want %q", got, want)
	}
}
