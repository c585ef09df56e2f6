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
		for b.Loop() {
			h.overview.invalidate()
			h.history.invalidate()
			get(b, "/")
		}
	})
	b.Run("warm", func(b *testing.B) {
		get(b, "/")
		for b.Loop() {
			h.overview.invalidate()
			get(b, "/")
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			h.overview.invalidate()
			get(b, "/api/overview")
		}
	})
}

// BenchmarkOverviewRender is the dashboard's own share of the overview of
// 1,000 queues: an in-memory source stands in for Redis.
//
//	go test -run '^$' -bench OverviewRender -benchtime 200x -count 5 ./dashboard/
func BenchmarkOverviewRender(b *testing.B) {
	f := newFakeSource()
	for i := range benchQueues {
		f.add(fmt.Sprintf("queue-%04d", i), redq.DeliveryInfo{ID: "01", State: redq.StateReady})
	}
	h, err := newHandler(f, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		h.overview.invalidate()
		h.history.invalidate()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != http.StatusOK {
			b.Fatalf("GET /: %d", w.Code)
		}
	}
}
