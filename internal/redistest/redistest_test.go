package redistest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStartSetGet(t *testing.T) {
	s := Start(t)
	if s.Port() == 0 || s.Port() == defaultRedisPort {
		t.Fatalf("unexpected port %d", s.Port())
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("unexpected addr %q", s.Addr())
	}
	c := s.Client(t)
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx(t), "k").Result(); err != nil || got != "v" {
		t.Fatalf("Get = %q, %v", got, err)
	}
}

func TestRestartAppendOnlyKeepsData(t *testing.T) {
	s := Start(t, WithAppendOnly())
	port := s.Port()
	c := s.Client(t)
	if err := c.Set(ctx(t), "survivor", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Restart(t)
	if s.Port() != port {
		t.Fatalf("port changed across restart: %d -> %d", port, s.Port())
	}
	// The old client reconnects transparently; use a fresh one anyway.
	got, err := s.Client(t).Get(ctx(t), "survivor").Result()
	if err != nil || got != "yes" {
		t.Fatalf("after restart Get = %q, %v; want \"yes\"", got, err)
	}
}

func TestRestartWithoutPersistenceLosesData(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	if err := c.Set(ctx(t), "gone", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	if err := s.Client(t).Get(ctx(t), "gone").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after restart Get err = %v; want redis.Nil", err)
	}
}

func TestKillMakesPingFail(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	s.Kill() // idempotent
	s.Stop() // also a no-op now
	c2 := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c2.Close()
	if err := c2.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	// A killed server can be started again.
	s.Restart(t)
	if err := s.Client(t).Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
}

func TestStopIdempotent(t *testing.T) {
	s := Start(t)
	s.Stop()
	s.Stop()
	if err := ping(s.Addr(), time.Second); err == nil {
		t.Fatal("PING succeeded after Stop")
	}
}

func TestStartMainClose(t *testing.T) {
	if _, ok := Available(); !ok {
		t.Skip("redis-server not found in PATH")
	}
	s, err := StartMain()
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := ping(s.Addr(), time.Second); err == nil {
		t.Fatal("PING succeeded after Close")
	}
}

func TestStartFailureIncludesLog(t *testing.T) {
	bin, ok := Available()
	if !ok {
		t.Skip("redis-server not found in PATH")
	}
	// A data dir that does not exist makes redis-server exit at startup.
	_, err := start(bin, t.TempDir()+"/missing", false, nil)
	if err == nil {
		t.Fatal("start succeeded with a missing data dir")
	}
	if !strings.Contains(err.Error(), "redis.log") {
		t.Fatalf("error does not mention the log: %v", err)
	}
	t.Logf("start error (expected): %v", err)
}

func TestStartSkipsWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(RequireEnv, "")
	if _, ok := Available(); ok {
		t.Fatal("Available with empty PATH")
	}
	if _, err := StartMain(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("StartMain err = %v; want ErrNotFound", err)
	}
	var reached bool
	t.Run("skip", func(t *testing.T) {
		Start(t)
		reached = true
	})
	if reached {
		t.Fatal("Start did not skip without redis-server")
	}
}

func TestRelaunchAfterKillAndStop(t *testing.T) {
	s, err := StartMain(WithAppendOnly())
	if errors.Is(err, ErrNotFound) {
		if Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	port := s.Port()
	if err := s.Relaunch(); err != nil { // running: nothing to do
		t.Fatalf("Relaunch of a running server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	if err := c.Set(ctx(t), "survivor", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i, down := range []func(){s.Kill, s.Stop} {
		down()
		if err := s.Relaunch(); err != nil {
			t.Fatalf("Relaunch %d: %v", i, err)
		}
		if s.Port() != port {
			t.Fatalf("port changed across Relaunch: %d -> %d", port, s.Port())
		}
		if got, err := c.Get(ctx(t), "survivor").Result(); err != nil || got != "yes" {
			t.Fatalf("after Relaunch %d Get = %q, %v; want \"yes\"", i, got, err)
		}
	}
}
