package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/redq/redq/internal/redistest"
)

// The program's story, line by line; timings are matched loosely.
var wantLines = []*regexp.Regexp{
	regexp.MustCompile(`^upsert user-42 profile v1: Created$`),
	regexp.MustCompile(`^upsert user-42 profile v2: Updated$`),
	regexp.MustCompile(`^upsert user-42 profile v3: Updated$`),
	regexp.MustCompile(`^upsert user-42 profile v4: Updated$`),
	regexp.MustCompile(`^upsert user-42 profile v5: Updated$`),
	regexp.MustCompile(`^pending: "profile v5", 4 updates merged$`),
	regexp.MustCompile(`^upsert user-42 profile v6 while it runs: Queued$`),
	regexp.MustCompile(`^indexed user-42 with "profile v5"$`),
	regexp.MustCompile(`^indexed user-42 with "profile v6"$`),
	regexp.MustCompile(`^indexed user-7 with "chatty v\d+", while its changes went on$`),
	regexp.MustCompile(`^user-7 ran about (0\.[89]|1(\.[0-4])?)s after its first change \(MaxWait 1s\)$`),
	regexp.MustCompile(`^indexed user-7 with "chatty v14"$`),
	regexp.MustCompile(`^cancelled user-9 before it ran: true$`),
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
