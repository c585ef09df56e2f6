package redq

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq/internal/redistest"
)

// An open on a Redis nobody listens for matches ErrorUnavailable, so a
// startup loop can tell "try again later" from "fix the settings".
func TestOpenUnreachableIsUnavailable(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", closedPort(t))
	_, err := OpenConnection("open", "tcp", addr, 0, nil, namespace())
	if !errors.Is(err, ErrorUnavailable) || errors.Is(err, ErrorConfiguration) {
		t.Fatalf("OpenConnection on a closed port: %v, want ErrorUnavailable", err)
	}
	_, err = OpenConnectionWithRedisOptions("open", &redis.Options{Addr: "no-such-host.invalid:6380", MaxRetries: -1, DialerRetries: 1}, nil, namespace())
	if !errors.Is(err, ErrorUnavailable) {
		t.Fatalf("OpenConnection on an unknown host: %v, want ErrorUnavailable", err)
	}
	if _, err := OpenConnectionWithRedisOptions("open", nil, nil); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("nil redis options: %v, want an ArgumentError", err)
	}
}

// Wrong settings (database index, password, ACL) match ErrorConfiguration
// and not ErrorUnavailable.
func TestOpenWrongSettingsIsConfiguration(t *testing.T) {
	check := func(t *testing.T, what string, o *redis.Options) {
		t.Helper()
		_, err := OpenConnectionWithRedisOptions("open", o, nil, namespace())
		if !errors.Is(err, ErrorConfiguration) || errors.Is(err, ErrorUnavailable) {
			t.Fatalf("%s: %v, want ErrorConfiguration", what, err)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		m.RequireAuth("secret")
		check(t, "no password", &redis.Options{Addr: m.Addr()})
		check(t, "wrong password", &redis.Options{Addr: m.Addr(), Password: "wrong"})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		ctx := context.Background()
		if err := srv.Client(t).ConfigSet(ctx, "requirepass", "secret").Err(); err != nil {
			t.Fatal(err)
		}
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "secret"})
		t.Cleanup(func() { admin.Close() })
		// a user that may connect and ping, and nothing else
		if err := admin.Do(ctx, "ACL", "SETUSER", "pinger", "on", ">pw", "+ping", "+hello", "+client", "+select", "~*").Err(); err != nil {
			t.Fatal(err)
		}
		check(t, "db 99", &redis.Options{Addr: srv.Addr(), Password: "secret", DB: 99})
		check(t, "no password", &redis.Options{Addr: srv.Addr()})
		check(t, "wrong password", &redis.Options{Addr: srv.Addr(), Password: "wrong"})
		check(t, "ACL", &redis.Options{Addr: srv.Addr(), Username: "pinger", Password: "pw"})
		if _, err := OpenConnectionWithRedisOptions("open", &redis.Options{Addr: srv.Addr(), Password: "secret"}, nil, namespace()); err != nil {
			t.Fatalf("the right settings: %v", err)
		}
	})
}

// A failed open closes the client it made (and the embedded server), so
// that a program retrying its open in a loop does not pile up goroutines;
// a client the caller passed in stays open.
func TestFailedOpenLeaksNothing(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", closedPort(t))
	// Warm up what go-redis starts once per process.
	_, _ = OpenConnectionWithRedisOptions("leak", &redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1}, nil, namespace())
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	for i := 0; i < 20; i++ {
		_, err := OpenConnectionWithRedisOptions("leak", &redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1}, nil, namespace())
		if !errors.Is(err, ErrorUnavailable) {
			t.Fatalf("open %d: %v, want ErrorUnavailable", i, err)
		}
		if _, err := OpenConnectionWithTestRedisClient("bad tag!", nil); !errors.Is(err, ErrorInvalidArgument) {
			t.Fatalf("embedded open with a bad tag: %v, want an ArgumentError", err)
		}
	}
	// A little slack for goroutines of the test binary that come and go
	// (a leaking open leaves two per failed open).
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+3 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines after 20 failed opens, %d before:\n%s", runtime.NumGoroutine(), before, firstStacks(string(buf[:n]), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}

	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	m.SetError("ERR refused for the test")
	if _, err := OpenConnectionWithRedisClient("mine", client, nil, namespace()); err == nil {
		t.Fatal("open on a Redis that answers every command with an error succeeded")
	}
	m.SetError("")
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the caller's client after a failed open: %v, want it still open", err)
	}
}

// firstStacks returns the first n goroutine stacks of a runtime.Stack dump.
func firstStacks(dump string, n int) string {
	parts := strings.SplitN(dump, "\n\n", n+1)
	return strings.Join(parts[:min(n, len(parts))], "\n\n")
}
