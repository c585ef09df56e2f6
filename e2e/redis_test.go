package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process of the test's own on a free
// loopback port (never 6379), without persistence.
type redisServer struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

// startRedis starts a redis-server; it skips the test without one unless
// REDQ_REQUIRE_REDIS=1, which makes that a failure.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("REDQ_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-server not found in PATH and REDQ_REQUIRE_REDIS=1")
		}
		t.Skip("redis-server not found in PATH (set REDQ_REQUIRE_REDIS=1 to fail instead)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &redisServer{t: t, port: port, dir: t.TempDir()}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func (s *redisServer) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", fmt.Sprint(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr()})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not start", s.addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server; start brings up a new one on the same port.
func (s *redisServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill() // it may have exited already
	_ = s.cmd.Wait()         // its exit status after a kill tells nothing
	s.cmd = nil
}
