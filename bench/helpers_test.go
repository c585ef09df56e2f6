package main

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// testEnv starts a private redis-server and returns an env for it.
func testEnv(t *testing.T) *env {
	t.Helper()
	s := redistest.Start(t)
	opts := &redis.Options{Addr: s.Addr()}
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	return &env{opts: opts, admin: admin, payloadSize: 100}
}

// testContext returns a context that ends before the test's deadline.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// noGoroutineLeak runs round once to let lazily started goroutines start,
// then three more times, and fails if more goroutines are left than
// before those three (clients not closed, consumers not stopped).
func noGoroutineLeak(t *testing.T, round func()) {
	t.Helper()
	round()
	time.Sleep(100 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 3 {
		round()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after three rounds:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}
