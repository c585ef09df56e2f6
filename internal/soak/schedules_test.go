//go:build linux

package soak

import (
	"context"
	"flag"
	"io"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

var scheduleSummary = regexp.MustCompile(`(?m)^soak: schedules=20 ticks=(\d+) lost=0 double=0 skipped=0 stalled=0 .*kills=1 sigstops=1 redis_sigterm=1 redis_sigkill=1 .*: PASS$`)

// TestSoakSchedulesTiny runs the schedules mode end to end: 20 schedules
// for 8s through 3 loop processes and one fault of each kind.
func TestSoakSchedulesTiny(t *testing.T) {
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
	var stdout, stderr syncBuffer
	code := runArgs(ctx, Command, []string{"-schedules", "20", "-duration", "8s", "-workers", "3",
		"-kills", "1", "-sigstops", "1", "-redis-sigterms", "1", "-redis-sigkills", "1",
		"-down-max", "1s", "-sigstop-max", "2s", "-progress", "2s", "-dir", t.TempDir()}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("soak exited %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	m := scheduleSummary.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no passing summary line in:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
	// 20 schedules ticking for about 8s
	if n, _ := strconv.Atoi(m[1]); n < 20*6 {
		t.Errorf("too few ticks: %s", m[0])
	}
	t.Log(m[0])
}

func TestSoakSchedulesUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-schedules", "-1"},
		{"-schedules", "5", "-cluster"},
		{"-schedules", "5", "-duration", "1s"},
	} {
		fs := flag.NewFlagSet("soak", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c := soakFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := c.validate(); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	if c := parseSoak(t, "-schedules", "100"); c.duration != 30*time.Second || c.schedules != 100 {
		t.Errorf("defaults: %+v", c)
	}
}
