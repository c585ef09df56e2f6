package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/redistest"
)

// benchQueues is how many queues the overview benchmarks show.
const benchQueues = 1000

// BenchmarkOverview measures the server time of the overview of a namespace
// with 1,000 queues on a real redis-server: every request reads Redis
// afresh (the shared read is invalidated). "cold" also reads the charts of
// the 100 queues on the page (they are cached for 15s otherwise); "warm"
// is a refresh within that time.
//
//	go test -run '^$' -bench Overview -benchtime 50x -count 5 ./dashboard/
func BenchmarkOverview(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	ctx := context.Background()
	conn, err := redq.Open(ctx, "bench", client, nil, redq.WithNamespace("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	for i := range benchQueues {
		q, err := conn.OpenQueue(fmt.Sprintf("queue-%04d", i))
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Publish("a", "b", "c"); err != nil {
			b.Fatal(err)
		}
	}
	insp, err := redq.NewInspector(client, redq.WithNamespace("bench"))
	if err != nil {
		b.Fatal(err)
	}
	h, err := newHandler(insp, Options{})
	if err != nil {
		b.Fatal(err)
	}
	get := func(b *testing.B, path string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusOK {
			b.Fatalf("GET %s: %d\n%s", path, w.Code, w.Body)
		}
	}
	b.Run("cold", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			h.overview.invalidate()
			h.history.invalidate()
			get(b, "/")
		}
	})
	b.Run("warm", func(b *testing.B) {
		get(b, "/")
		defer reportCPU(b)()
		for b.Loop() {
			h.overview.invalidate()
			get(b, "/")
		}
	})
	b.Run("json", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			h.overview.invalidate()
			get(b, "/api/overview")
		}
	})
}

// reportCPU adds the process's CPU time per operation (user and system,
// every goroutine) to the benchmark's report: on a shared machine it says
// more about the dashboard's cost than the wall time. Call the function it
// returns when the loop is done.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		}
	}
}
