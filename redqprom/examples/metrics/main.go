// Command metrics is a redq worker that serves Prometheus metrics: the
// queues' counts read from Redis (redqprom.Collector), its own fetch, ack
// and heartbeat latencies (redqprom.Observer), and its logs through slog.
// It publishes and consumes a little demo work on the queue "demo".
//
//	go run ./examples/metrics                          # an embedded Redis
//	go run ./examples/metrics -redis redis://localhost:6379/0
//	curl -s localhost:9187/metrics | grep ^redq_
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/redqprom"
)

func main() {
	redisURL := flag.String("redis", "", "Redis URL (default: an embedded Redis)")
	addr := flag.String("addr", "127.0.0.1:9187", "where to serve /metrics")
	flag.Parse()
	if err := run(*redisURL, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

func run(redisURL, addr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	redis.SetLogger(redq.RedisLogger(logger))

	if redisURL == "" {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer m.Close()
		redisURL = "redis://" + m.Addr()
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	client := redis.NewClient(opt)
	defer func() { _ = client.Close() }() // at exit, after the connection stopped

	observer := redqprom.NewObserver()
	conn, err := redq.Open(ctx, "metrics-example", client, nil,
		redq.WithNamespace("redq-metrics-example"), redq.WithLogger(logger), redq.WithObserver(observer))
	if err != nil {
		return err
	}
	defer func() { <-conn.StopAllConsuming() }()
	inspector, err := redq.NewInspector(client, redq.WithNamespace("redq-metrics-example"))
	if err != nil {
		return err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(redqprom.NewCollector(inspector), observer, collectors.NewGoCollector())

	queue, err := conn.OpenQueue("demo")
	if err != nil {
		return err
	}
	if err := queue.StartConsuming(10, time.Second); err != nil {
		return err
	}
	if _, err := queue.AddConsumerFunc("worker", func(d redq.Delivery) { _ = d.Ack() }); err != nil {
		return err
	}
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			if err := queue.PublishContext(ctx, fmt.Sprint("job ", i)); err != nil && ctx.Err() == nil {
				logger.Warn("publish failed", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	logger.Info("serving metrics", "url", "http://"+addr+"/metrics")
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}
