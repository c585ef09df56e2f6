//go:build linux

package main

import (
	"context"
	"flag"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"regexp"
	"slices"
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

func TestSoakClusterUsage(t *testing.T) {
	for _, args := range [][]string{
		{"soak", "-cluster", "-redis-sigkills", "1"},
		{"soak", "-cluster", "-redis-sigterms", "1"},
		{"soak", "-master-kills", "1"},
		{"soak", "-reshards", "1"},
		{"soak", "-queues", "2"},
		{"soak", "-cluster", "-queues", "0"},
		{"soak", "-cluster", "-queues", "17"},
		{"soak", "-cluster", "-master-kills", "-1"},
		{"soak", "-cluster", "-resume-limit", "0s"},
	} {
		if code, _, stderr := redqRun(t, args...); code != 2 || !strings.Contains(stderr, "redq help soak") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a usage hint", args, code, stderr)
		}
	}
	out := mustRedq(t, "help", "soak")
	for _, want := range []string{"-cluster", "-master-kills", "-reshards", "kill_to_acks", "global keys"} {
		if !strings.Contains(out, want) {
			t.Errorf("redq help soak does not mention %q:\n%s", want, out)
		}
	}
}

// parseSoak parses soak flags as the command does and returns the
// configuration, after the defaults of its mode.
func parseSoak(t *testing.T, args ...string) soakConfig {
	t.Helper()
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	c := soakFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.modeDefaults(set)
	if err := c.validate(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return *c
}

func countFaults(plan []faultKind) map[faultKind]int {
	n := map[faultKind]int{}
	for _, f := range plan {
		n[f]++
	}
	return n
}

// The faults each mode plans: Redis restarts on one redis-server, master
// SIGKILLs and reshardings on a cluster, consumer kills and SIGSTOPs on
// both.
func TestSoakClusterPlan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	single := parseSoak(t)
	if got, want := countFaults(faultPlan(single, rng)), map[faultKind]int{faultKill: 3, faultSIGSTOP: 2, faultRedisTerm: 2, faultRedisKill: 2}; !maps.Equal(got, want) {
		t.Errorf("default plan %v, want %v", got, want)
	}
	if single.queues != 1 || single.cluster {
		t.Errorf("default: %d queues, cluster %v", single.queues, single.cluster)
	}
	c := parseSoak(t, "-cluster")
	if got, want := countFaults(faultPlan(c, rng)), map[faultKind]int{faultKill: 3, faultSIGSTOP: 2, faultMasterKill: 2, faultReshard: 1}; !maps.Equal(got, want) {
		t.Errorf("-cluster plan %v, want %v", got, want)
	}
	c = parseSoak(t, "-cluster", "-n", "10000", "-master-kills", "5", "-reshards", "2", "-kills", "0", "-sigstops", "0", "-queues", "4")
	if got, want := countFaults(faultPlan(c, rng)), map[faultKind]int{faultMasterKill: 5, faultReshard: 2}; !maps.Equal(got, want) || c.queues != 4 {
		t.Errorf("plan %v with %d queues, want %v and 4", got, c.queues, want)
	}
}

// The cluster soak's queues are in different slots, the first in the slot
// of the global keys, the others spread over the masters' thirds of the
// slot range; keySlot hashes as Redis Cluster does.
func TestSoakClusterQueues(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":             12739, // CRC16 (XMODEM) check value 0x31C3
		"{user1000}.following":  keySlot("user1000"),
		"foo{}{bar}":            keySlot("foo{}{bar}"), // an empty tag: the whole key
		"{redq}:connections":    keySlot("redq"),
		"redq:{soak}:ready":     keySlot("soak"),
		"redq:{soak}:unacked:x": keySlot("soak"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("a") == keySlot("b") {
		t.Error("keySlot does not hash")
	}
	if got := soakQueueNames("redq", 3, false); !slices.Equal(got, []string{"soak"}) {
		t.Errorf("single Redis: %v", got)
	}
	names := soakQueueNames("redq", 3, true)
	if len(names) != 3 {
		t.Fatalf("%v", names)
	}
	if keySlot(queueKey("redq", names[0])) != keySlot(globalKey("redq")) {
		t.Errorf("%s is not in the slot of the global keys", names[0])
	}
	thirds := map[int]bool{}
	for _, name := range names {
		if strings.ContainsAny(name, "{}:") {
			t.Errorf("queue name %q", name)
		}
		thirds[keySlot(queueKey("redq", name))*3/clusterSlots] = true
	}
	if len(thirds) != 3 {
		t.Errorf("queues %v are not on three masters' thirds", names)
	}
}
