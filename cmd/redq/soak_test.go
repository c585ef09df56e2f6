//go:build linux

package main

import (
	"context"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// TestMain lets the soak run in-process: its workers re-execute this test
// binary with soakWorkerEnv set, which then runs the worker instead of the
// tests.
func TestMain(m *testing.M) {
	if os.Getenv(soakWorkerEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

var soakSummary = regexp.MustCompile(`(?m)^soak: published=(\d+) acked=(\d+) .*lost=0 dup_ids=0 double_landed=0 redelivered=\d+.* false_ack_errors=0 .*kills=1 sigstops=1 zombies_resumed=1/1 .*redis_sigterm=1 redis_sigkill=1 .*: PASS$`)

// TestSoakTiny runs a tiny soak end to end: 2000 deliveries and one fault
// of each kind, on a redis-server of its own.
func TestSoakTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak takes a while; skipped with -short")
	}
	if _, ok := redistest.Available(); !ok {
		if redistest.Required() {
			t.Fatalf("redis-server not found in PATH, but %s=1 requires it", redistest.RequireEnv)
		}
		t.Skip("redis-server not found in PATH; set REDQ_REQUIRE_REDIS=1 to make this an error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var stdout, stderr syncBuffer
	code := run(ctx, []string{"soak", "-n", "2000", "-rate", "400", "-workers", "3",
		"-kills", "1", "-sigstops", "1", "-redis-sigterms", "1", "-redis-sigkills", "1",
		"-down-max", "1s", "-progress", "2s", "-dir", dir}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("soak exited %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	m := soakSummary.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no passing summary line in:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
	if m[1] == "0" {
		t.Errorf("nothing was published: %s", m[0])
	}
	if !strings.Contains(stderr.String(), "published 2000/2000") && !strings.Contains(stderr.String(), "published all 2000") {
		t.Errorf("no progress line says everything was published:\n%s", &stderr)
	}
	t.Log(m[0])
}

func TestSoakUsage(t *testing.T) {
	for _, args := range [][]string{
		{"soak", "-n", "0"},
		{"soak", "-workers", "1", "-sigstops", "1"},
		{"soak", "-down-min", "2s", "-down-max", "1s"},
		{"soak", "-hb-interval", "1s", "-hb-ttl", "1s"},
	} {
		if code, _, stderr := redqRun(t, args...); code != 2 || !strings.Contains(stderr, "redq help soak") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a usage hint", args, code, stderr)
		}
	}
	out := mustRedq(t, "help", "soak")
	for _, want := range []string{"appendfsync always", "SIGSTOP", "zombies_resumed", "-n 1000000", "-kills"} {
		if !strings.Contains(out, want) {
			t.Errorf("redq help soak does not mention %q:\n%s", want, out)
		}
	}
	if out := mustRedq(t, "help"); strings.Contains(out, "soak-worker") || !strings.Contains(out, "soak ") {
		t.Errorf("redq help should list soak and hide soak-worker:\n%s", out)
	}
}

func TestSoakWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	code, _, stderr := redqRun(t, "soak", "-n", "10")
	if code != 1 || !strings.Contains(stderr, "redis-server not found in PATH") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
