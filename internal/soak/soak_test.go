//go:build linux

package soak

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// TestMain lets the soak run in-process: its workers re-execute this test
// binary with WorkerEnv set, which then runs the worker instead of the
// tests.
func TestMain(m *testing.M) {
	if os.Getenv(WorkerEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := runArgs(ctx, WorkerCommand, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// runArgs parses args for the command declared by declare, runs it and
// returns its exit status as the redq command would: 0, 1 on failure, 2
// on a usage error, or an ExitError's code.
func runArgs(ctx context.Context, declare func(*flag.FlagSet) func(context.Context, io.Writer, io.Writer) error, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runCommand := declare(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	err := runCommand(ctx, stdout, stderr)
	var ue UsageError
	var ee ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, err)
		return 2
	case errors.As(err, &ee):
		if ee.Err != nil {
			fmt.Fprintln(stderr, ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, err)
	return 1
}

// syncBuffer is a bytes.Buffer that the soak's goroutines may write while
// the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
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
	code := runArgs(ctx, Command, []string{"-n", "2000", "-rate", "400", "-workers", "3",
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
