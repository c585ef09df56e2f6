package redq

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestBatchConsumerFillsBatchesAndFlushesOnTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "batch", namespace())
		q := openQueue(t, c, "batch")
		payloads := make([]string, 25)
		for i := range payloads {
			payloads[i] = fmt.Sprint(i)
		}
		if err := q.Publish(payloads...); err != nil {
			t.Fatal(err)
		}
		if err := q.StartConsuming(100, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		const timeout = 200 * time.Millisecond
		batches := make(chan Deliveries, 10)
		if _, err := q.AddBatchConsumerFunc("b", 10, timeout, func(ds Deliveries) { batches <- ds }); err != nil {
			t.Fatal(err)
		}
		var sizes []int
		var all []string
		for len(all) < 25 {
			select {
			case ds := <-batches:
				sizes = append(sizes, len(ds))
				all = append(all, ds.Payloads()...)
				if errs := ds.Ack(); len(errs) != 0 {
					t.Fatalf("batch ack: %v", errs)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("batches so far %v", sizes)
			}
		}
		if len(sizes) != 3 || sizes[0] != 10 || sizes[1] != 10 || sizes[2] != 5 {
			t.Fatalf("batch sizes %v, want [10 10 5]", sizes)
		}
		for i, p := range all {
			if p != fmt.Sprint(i) {
				t.Fatalf("order %v", all)
			}
		}
		wantCounts(t, c, "batch", 0, 0, 0)

		// A partial batch waits for the timeout, counted from its first
		// delivery, and not much longer.
		start := time.Now()
		if err := q.Publish("x", "y"); err != nil {
			t.Fatal(err)
		}
		ds := <-batches
		if waited := time.Since(start); len(ds) != 2 || waited < timeout {
			t.Fatalf("partial batch of %d after %v, want 2 after at least %v", len(ds), waited, timeout)
		}
		// Batch verbs: one call for the batch; a second ack reports per index.
		if errs := ds[:1].Reject(); len(errs) != 0 {
			t.Fatal(errs)
		}
		if errs := ds.AckContext(context.Background()); len(errs) != 1 || errs[0] == nil {
			t.Fatalf("ack of a batch whose first was rejected: %v", errs)
		}
		wantCounts(t, c, "batch", 0, 1, 0)
	})
}

func TestBatchPushAndMixedDeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "bp", namespace())
		q := openQueue(t, c, "src")
		dst := openQueue(t, c, "dst")
		q.SetPushQueue(dst)
		if err := q.Publish("1", "2", "3"); err != nil {
			t.Fatal(err)
		}
		ds := Deliveries(hold(t, q, 3, 3))
		// A test double in the batch is settled on its own.
		double := NewTestDeliveryString("double")
		ds = append(ds, double)
		if errs := ds.Push(); len(errs) != 0 {
			t.Fatalf("push: %v", errs)
		}
		if double.GetState() != Pushed {
			t.Fatalf("double is %v", double.GetState())
		}
		wantCounts(t, c, "src", 0, 0, 0)
		wantCounts(t, c, "dst", 3, 0, 0)
		if errs := ds.PushContext(context.Background()); len(errs) != 4 {
			t.Fatalf("second push: %v, want 4 errors", errs)
		}
	})
}

// A batch larger than one script call holds (1,000) is settled in chunks,
// each delivery exactly once.
func TestLargeBatchIsSettledInChunks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "large", namespace())
		q := openQueue(t, c, "large")
		payloads := make([]string, 2500)
		for i := range payloads {
			payloads[i] = fmt.Sprint(i)
		}
		if err := q.Publish(payloads...); err != nil {
			t.Fatal(err)
		}
		ds := Deliveries(take(t, q, 2500))
		if errs := ds[:1200].Reject(); len(errs) != 0 {
			t.Fatalf("reject: %d errors, e.g. %v", len(errs), errs[0])
		}
		errs := ds.Ack()
		if len(errs) != 1200 {
			t.Fatalf("ack of 2500 of which 1200 were rejected: %d errors", len(errs))
		}
		for i := 0; i < 1200; i++ {
			if errs[i] == nil {
				t.Fatalf("delivery %d was rejected, its ack must fail", i)
			}
		}
		wantCounts(t, c, "large", 0, 1200, 0)
	})
}
