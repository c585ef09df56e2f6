package redqprom_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/redq/redq"
	"github.com/redq/redq/redqprom"
)

// A worker process that logs through slog, measures its calls with an
// Observer and serves /metrics with the queues' counts read from Redis.
func Example() {
	m, _ := miniredis.Run() // your Redis
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	ctx := context.Background()

	mux := http.NewServeMux() // your server's
	// readme:start
	logger := slog.Default()
	redis.SetLogger(redq.RedisLogger(logger)) // go-redis's own lines, de-duplicated
	observer := redqprom.NewObserver()
	conn, err := redq.Open(ctx, "worker", client, nil, redq.WithLogger(logger), redq.WithObserver(observer))
	if err != nil {
		panic(err)
	}
	inspector, err := redq.NewInspector(client)
	if err != nil {
		panic(err)
	}
	registry := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	registry.MustRegister(redqprom.NewCollector(inspector), observer)
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	// readme:end
	defer func() { <-conn.StopAllConsuming() }()
	defer logging.Enable() // go-redis's default logger again

	queue, _ := conn.OpenQueue("emails")
	_ = queue.Publish("hello")
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, `redq_queue_deliveries{queue="emails",state="ready"}`) || strings.HasPrefix(line, "redq_up") {
			fmt.Println(line)
		}
	}
	// Output:
	// redq_queue_deliveries{queue="emails",state="ready"} 1
	// redq_up 1
}
