package redq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// A Redis that refuses writes (out of memory under noeviction, or a replica
// during a failover) gets a typed error to the caller and on the error
// channel; nothing is lost, and consuming resumes once Redis accepts writes
// again (bad input). These change the server's configuration, so
// they run on a private redis-server.
func TestWritesRefusedAreTypedAndConsumingResumes(t *testing.T) {
	cases := []struct {
		name       string
		refuse     []any // a command that makes Redis refuse writes
		accept     []any // and one that ends it
		wantPrefix string
	}{
		{"out of memory", []any{"CONFIG", "SET", "maxmemory", "1"}, []any{"CONFIG", "SET", "maxmemory", "0"}, "OOM"},
		{"read-only replica", []any{"REPLICAOF", "127.0.0.1", fmt.Sprint(closedPort(t))}, []any{"REPLICAOF", "NO", "ONE"}, "READONLY"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			ctx := context.Background()
			if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { client.Close() })
			errs := make(chan error, 10000)
			c, err := openConn(client, "refused", errs, namespace(), WithRetryTimeout(300*time.Millisecond),
				WithHeartbeat(50*time.Millisecond, 30*time.Second), WithHeartbeatErrorLimit(1000))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { <-c.StopAllConsuming() })
			q := openQueue(t, c, "jobs")
			if err := q.StartConsuming(10, 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			acked := ackingConsumer(t, q)
			if err := q.Publish("before"); err != nil {
				t.Fatal(err)
			}
			waitPayload(t, acked, "before")

			if err := admin.Do(ctx, tc.refuse...).Err(); err != nil {
				t.Fatal(err)
			}
			for len(errs) > 0 { // what the connection reported before Redis refused
				if err := <-errs; err != nil {
					t.Logf("before refusing: %v", err)
				}
			}
			for name, publish := range map[string]func() error{
				"Publish":        func() error { return q.Publish("refused") },
				"Publish 200":    func() error { return q.Publish(procPayloads("refused", 200)...) },
				"Put delayed":    func() error { return q.Put(ctx, []byte("refused"), Delay(time.Minute)) },
				"Put priority":   func() error { return q.Put(ctx, []byte("refused"), Priority(2)) },
				"PublishContext": func() error { return q.PublishContext(ctx, "refused") },
			} {
				err := publish()
				if !errors.Is(err, ErrorWritesRefused) || errors.Is(err, ErrorOutcomeUnknown) {
					t.Fatalf("%s while Redis refuses writes: %v, want ErrorWritesRefused", name, err)
				}
				if !containsRedisError(err, tc.wantPrefix) {
					t.Fatalf("%s: %v does not carry Redis's %s error", name, err, tc.wantPrefix)
				}
			}
			eventuallyError(t, errs, func(err error) bool {
				var ce *ConsumeError
				return errors.As(err, &ce) && containsRedisError(ce, tc.wantPrefix)
			}, "a ConsumeError with Redis's refusal")

			if err := admin.Do(ctx, tc.accept...).Err(); err != nil {
				t.Fatal(err)
			}
			s := mustStats(t, c, "jobs").QueueStats["jobs"]
			if s.ReadyCount != 0 || s.DelayedCount != 0 || s.UnackedCount() != 0 {
				t.Fatalf("refused publishes left ready %d, delayed %d, unacked %d; want nothing", s.ReadyCount, s.DelayedCount, s.UnackedCount())
			}
			if err := q.Publish("after"); err != nil {
				t.Fatal(err)
			}
			waitPayload(t, acked, "after")
		})
	}
}

func waitPayload(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("consumed %q, want %q", got, want)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%q was not consumed", want)
	}
}

func eventuallyError(t *testing.T, errs <-chan error, match func(error) bool, what string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case err := <-errs:
			if match(err) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s on the error channel", what)
		}
	}
}

// containsRedisError reports whether a Redis error with the prefix is in
// err's chain.
func containsRedisError(err error, prefix string) bool {
	for e := err; e != nil; {
		var re redis.Error
		if errors.As(e, &re) && len(re.Error()) >= len(prefix) && re.Error()[:len(prefix)] == prefix {
			return true
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				if containsRedisError(x, prefix) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		default:
			return false
		}
	}
	return false
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// Open warns on the error channel when Redis may evict keys, and stays
// quiet when it may not (or does not say, as miniredis).
func TestOpenWarnsWhenRedisMayEvict(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	open := func(t *testing.T, client redis.UniversalClient) []error {
		errs := make(chan error, 10)
		c, err := openConn(client, "evict", errs, namespace())
		if err != nil {
			t.Fatal(err)
		}
		<-c.StopAllConsuming()
		var got []error
		for len(errs) > 0 {
			got = append(got, <-errs)
		}
		return got
	}
	t.Run("allkeys-lru", func(t *testing.T) {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		got := open(t, admin)
		var w *EvictionWarning
		if len(got) != 1 || !errors.As(got[0], &w) || w.Policy != "allkeys-lru" || !errors.Is(got[0], ErrorEvictionPolicy) {
			t.Fatalf("errors at open with allkeys-lru: %v, want one EvictionWarning", got)
		}
	})
	t.Run("noeviction", func(t *testing.T) {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if got := open(t, admin); len(got) != 0 {
			t.Fatalf("errors at open with noeviction: %v", got)
		}
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { client.Close() })
		if got := open(t, client); len(got) != 0 {
			t.Fatalf("errors at open on miniredis: %v", got)
		}
	})
}
