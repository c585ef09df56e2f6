package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redq/redq/internal/redistest"
)

// The program runs through a SIGKILL of the master: every job it
// published is acked, and consuming paused while the sentinels promoted
// the replica.
func TestRunThroughAFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	const jobs = 600
	cfg := config{sentinels: s.SentinelAddrs(), master: redistest.SentinelMasterName,
		jobs: jobs, every: 5 * time.Millisecond, timeout: 20 * time.Second}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), cfg, &out) }()

	time.Sleep(700 * time.Millisecond)
	// What the master took so far reaches the replica; what it takes in
	// the last instant before the kill may not (asynchronous replication),
	// a window too short to matter here.
	s.WaitReplicated(t, 5*time.Second)
	old := s.KillMaster(t)
	s.WaitFailover(t, old, 20*time.Second)

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run did not end")
	}
	t.Logf("output:\n%s", out.String())
	want := []*regexp.Regexp{
		regexp.MustCompile(`^published 600 jobs in \S+$`),
		regexp.MustCompile(`^consumed 600 jobs, acked 600; not acked 0, consumed more than once \d+, publish outcome unknown 0$`),
		regexp.MustCompile(`^longest pause in consuming: (\S+)$`),
		regexp.MustCompile(`^redq reported \d+ background errors$`),
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d = %q, want %s", i+1, lines[i], re)
		}
	}
	// The pause shows the failover happened while jobs flowed: the
	// sentinels wait SentinelDownAfter before they act.
	if m := want[2].FindStringSubmatch(lines[2]); m != nil {
		if d, err := time.ParseDuration(m[1]); err != nil || d < redistest.SentinelDownAfter {
			t.Errorf("longest pause %s, want at least %s: the failover did not happen mid-run", m[1], redistest.SentinelDownAfter)
		}
	}
}
