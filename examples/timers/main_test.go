package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/redq/redq/internal/redistest"
)

// The program's story, line by line; which worker got a fire and how late
// it was are matched loosely.
var wantLines = []*regexp.Regexp{
	regexp.MustCompile(`^create invoice-1 again: false \(it is pending\)$`),
	regexp.MustCompile(`^moved invoice-4 to 300ms, cancelled invoice-3$`),
	regexp.MustCompile(`^fired invoice-1 to worker [12], \S+ after its due time$`),
	regexp.MustCompile(`^fired invoice-4 to worker [12], \S+ after its due time$`),
	regexp.MustCompile(`^fired invoice-2 to worker [12], \S+ after its due time$`),
	regexp.MustCompile(`^fired once each, in due order: invoice-1 invoice-4 invoice-2$`),
	regexp.MustCompile(`^set invoice-5 again while it fired: still pending after the old fire's ack \(due in \S+\)$`),
	regexp.MustCompile(`^fired invoice-5 again$`),
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
