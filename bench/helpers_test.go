package main

import (
	"context"
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
