package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/redq/redq/internal/redistest"
)

// The program's story, line by line.
var wantLines = []*regexp.Regexp{
	regexp.MustCompile(`^nightly-sales: next at 02:00 Berlin time$`),
	regexp.MustCompile(`^heartbeat: 3 ticks from two loops, 0 published twice$`),
	regexp.MustCompile(`^heartbeat paused: true, [3-9] ticks published so far$`),
	regexp.MustCompile(`^nightly-sales moved: next at 03:30 Berlin time \(version 2\)$`),
}

func checkOutput(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(wantLines) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(wantLines), out)
	}
	for i, re := range wantLines {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d = %q, want %s", i+1, lines[i], re)
		}
	}
}

func TestRunEmbedded(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), "", &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkOutput(t, out.String())
}

func TestRunRealRedis(t *testing.T) {
	s := redistest.Start(t)
	var out bytes.Buffer
	if err := run(context.Background(), "redis://"+s.Addr()+"/0", &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkOutput(t, out.String())
}
