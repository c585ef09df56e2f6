package redq

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// roundTrips counts the round trips a client makes: one per command sent
// alone, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// medianOf runs f runs times and returns the median duration.
func medianOf(runs int, f func()) time.Duration {
	ds := make([]time.Duration, runs)
	for n := range ds {
		start := time.Now()
		f()
		ds[n] = time.Since(start)
	}
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	return ds[runs/2]
}

// TestInspectorBig measures, on real Redis, List over 1,000,000 rejected
// deliveries (first page, a middle page by cursor, a search) and Queues
// over 1,000 queues (time and round trips). It runs only with REDQ_BIG=1
// and not with -short; the figures are logged (go test -v), not asserted,
// except the round trips of Queues, which must not grow with the queues.
func TestInspectorBig(t *testing.T) {
	if testing.Short() || os.Getenv("REDQ_BIG") != "1" {
		t.Skip("set REDQ_BIG=1 (and no -short) to fill 1M deliveries and measure")
	}
	ctx := context.Background()
	client := realClient(t)
	ns := namespace()
	c := openT(t, backend{client: client}, "big", ns)
	q := openQueue(t, c, "big")
	const n = 1_000_000
	ids := newIDSource()
	for done := 0; done < n; {
		pipe := client.Pipeline()
		batch := make([]any, 0, 1000)
		for j := 0; j < 1000; j++ {
			env, err := encodeEnvelope(ids, time.Now(), meta{header: http.Header{HeaderError: {"downstream 503"}}},
				[]byte(fmt.Sprintf(`{"order":%d,"customer":"c%d","amount":%d}`, done+j, (done+j)%977, done+j)))
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, env)
		}
		pipe.LPush(ctx, q.keys.rejected, batch...)
		done += len(batch)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	i := newInspectorT(t, backend{client: client}, ns)
	var first Page
	d := medianOf(7, func() {
		var err error
		if first, err = i.List(ctx, "big", ListOptions{State: StateRejected}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("List rejected, first page of 50 over %d: median %v", first.Total, d)
	mid := encodeCursor(StateRejected, listPos{off: n / 2})
	d = medianOf(7, func() {
		p, err := i.List(ctx, "big", ListOptions{State: StateRejected, Cursor: mid})
		if err != nil || len(p.Items) != 50 {
			t.Fatal(p, err)
		}
	})
	t.Logf("List rejected, a page of 50 at offset 500,000 (cursor): median %v", d)
	d = medianOf(7, func() {
		p, err := i.List(ctx, "big", ListOptions{State: StateRejected, Limit: 1000})
		if err != nil || len(p.Items) != 1000 {
			t.Fatal(err)
		}
	})
	t.Logf("List rejected, first page of 1000: median %v", d)
	var sp Page
	d = medianOf(7, func() {
		var err error
		if sp, err = i.List(ctx, "big", ListOptions{State: StateRejected, Search: "no such text"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("List rejected, a search that matches nothing: %d scanned, median %v", sp.Scanned, d)
	d = medianOf(7, func() {
		if _, err := i.List(ctx, "big", ListOptions{State: StateRejected, Search: `"customer":"c5"`}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("List rejected, a search for a customer (matches ~1 in 977): median %v", d)
	if _, err := client.Del(ctx, q.keys.rejected).Result(); err != nil {
		t.Fatal(err)
	}

	// 1,000 queues with a delivery each
	for k := 0; k < 1000; k++ {
		qk := openQueue(t, c, fmt.Sprint("q", k))
		if err := qk.Publish("x"); err != nil {
			t.Fatal(err)
		}
	}
	counted := realClient(t)
	trips := &roundTrips{}
	counted.AddHook(trips)
	ci, err := NewInspector(counted, ns)
	if err != nil {
		t.Fatal(err)
	}
	var qs []QueueInfo
	// the first call after a script change (or a Redis restart) finds the
	// counts script uncached and sends it again per queue: warm up
	if _, err := ci.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	trips.n.Store(0)
	d = medianOf(7, func() {
		if qs, err = ci.Queues(ctx); err != nil {
			t.Fatal(err)
		}
	})
	perCall := trips.n.Load() / 7
	t.Logf("Queues over %d queues: median %v, %d round trips a call", len(qs), d, perCall)
	if perCall > 4 {
		t.Errorf("Queues made %d round trips for %d queues; want a small constant", perCall, len(qs))
	}
}
