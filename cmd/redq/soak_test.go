//go:build linux

package main

import (
	"strings"
	"testing"
)

func TestSoakUsage(t *testing.T) {
	for _, args := range [][]string{
		{"soak", "-n", "0"},
		{"soak", "-workers", "1", "-sigstops", "1"},
		{"soak", "-down-min", "2s", "-down-max", "1s"},
		{"soak", "-hb-interval", "1s", "-hb-ttl", "1s"},
		{"soak", "-schedules", "10", "-cluster"},
		{"soak", "-schedules", "10", "-duration", "1s"},
	} {
		if code, _, stderr := redqRun(t, args...); code != 2 || !strings.Contains(stderr, "redq help soak") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a usage hint", args, code, stderr)
		}
	}
	out := mustRedq(t, "help", "soak")
	for _, want := range []string{"appendfsync always", "SIGSTOP", "zombies_resumed", "-n 1000000", "-kills", "-schedules"} {
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
