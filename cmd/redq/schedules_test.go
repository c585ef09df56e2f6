package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/redistest"
)

// scheduleWorld opens the schedule set "nightly" with three schedules (one
// paused) and the empty set "weekly" in tg's namespace.
func scheduleWorld(t *testing.T, tg target) (redq.Connection, redq.Schedules) {
	t.Helper()
	ctx := context.Background()
	conn := tg.open(t, "scheduler")
	s, err := conn.OpenSchedules("nightly")
	if err != nil {
		t.Fatal(err)
	}
	for _, up := range []struct {
		id, spec string
		opts     []redq.ScheduleOption
	}{
		{"report", "0 30 2 * * *", []redq.ScheduleOption{redq.ScheduleTarget("reports"), redq.ScheduleTimeZone("Europe/Berlin"),
			redq.ScheduleCatchUp(redq.CatchUpAll(3)), redq.ScheduleJitter(5 * time.Second)}},
		{"sync", "@every 1h", []redq.ScheduleOption{redq.ScheduleOverlap(redq.OverlapSkip)}},
		{"idle", "@every 2h", nil},
	} {
		if err := s.Upsert(ctx, up.id, up.spec, []byte("payload of "+up.id), up.opts...); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Pause(ctx, "idle"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.OpenSchedules("weekly"); err != nil {
		t.Fatal(err)
	}
	return conn, s
}

func TestSchedulesCommand(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		ctx := context.Background()
		_, s := scheduleWorld(t, tg)

		var sets map[string]redq.ScheduleSetStat
		if err := json.Unmarshal([]byte(mustRedq(t, tg.args("schedules", "--json")...)), &sets); err != nil {
			t.Fatal(err)
		}
		sync, err := s.Lookup(ctx, "sync")
		if err != nil {
			t.Fatal(err)
		}
		if n := sets["nightly"]; len(sets) != 2 || n.Schedules != 3 || n.Paused != 1 || !n.NextDue.Equal(sync.Next) || sets["weekly"] != (redq.ScheduleSetStat{}) {
			t.Fatalf("schedules --json = %+v", sets)
		}
		table := mustRedq(t, tg.args("schedules")...)
		if !strings.Contains(table, "NEXT DUE") || !regexpLine(table, `^nightly\s+3\s+1\s+in `) || !regexpLine(table, `^weekly\s+0\s+0\s+-\s`) {
			t.Fatalf("schedules table:\n%s", table)
		}

		var page schedulePageJSON
		if err := json.Unmarshal([]byte(mustRedq(t, tg.args("schedules", "nightly", "--json")...)), &page); err != nil {
			t.Fatal(err)
		}
		if page.Total != 3 || len(page.Items) != 3 || page.Next != "" {
			t.Fatalf("schedules nightly --json = %+v", page)
		}
		byID := map[string]scheduleJSON{}
		for _, it := range page.Items {
			byID[it.ID] = it
		}
		r := byID["report"]
		if r.Spec != "0 30 2 * * *" || r.TimeZone != "Europe/Berlin" || r.Target != "reports" || r.CatchUp != "CatchUpAll(3)" ||
			r.JitterMs != 5000 || r.Overlap != "allow" || r.Paused || r.Next == nil || r.LastFire != nil || r.Payload == nil || *r.Payload != "payload of report" {
			t.Fatalf("report: %+v", r)
		}
		if it := byID["sync"]; it.Overlap != "skip" || it.Target != "nightly" || it.Next == nil || !it.Next.Equal(sync.Next) {
			t.Fatalf("sync: %+v", it)
		}
		if it := byID["idle"]; !it.Paused || it.Next != nil {
			t.Fatalf("idle: %+v", it)
		}
		table = mustRedq(t, tg.args("schedules", "nightly")...)
		if !regexpLine(table, `^report\s+0 30 2 \* \* \*\s+Europe/Berlin\s+reports\s+no\s+in .*CatchUpAll\(3\)\s+allow\s+5s$`) ||
			!regexpLine(table, `^idle\s+@every 2h\s+-\s+nightly\s+yes\s+-\s+-\s+0\s+0`) || !strings.Contains(table, "3 of 3 schedules") {
			t.Fatalf("schedules nightly table:\n%s", table)
		}

		// the actions
		out := mustRedq(t, tg.args("schedules", "pause", "nightly", "sync")...)
		if in, err := s.Lookup(ctx, "sync"); err != nil || !in.Paused || !strings.Contains(out, `paused schedule "sync" of set "nightly"`) {
			t.Fatalf("after pause (%q): %+v, %v", out, in, err)
		}
		mustRedq(t, tg.args("schedules", "resume", "nightly", "idle")...)
		if in, err := s.Lookup(ctx, "idle"); err != nil || in.Paused || in.Next.IsZero() {
			t.Fatalf("after resume: %+v, %v", in, err)
		}
		mustRedq(t, tg.args("schedules", "remove", "nightly", "report")...)
		if _, err := s.Lookup(ctx, "report"); !errors.Is(err, redq.ErrorNotFound) {
			t.Fatalf("after remove: %v", err)
		}
		code, stdout, stderr := redqRun(t, tg.args("schedules", "remove", "nightly", "report")...)
		if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, `redq schedules: remove schedule "report" of "nightly": `) || !strings.Contains(stderr, "not found") {
			t.Fatalf("removing a removed schedule: exit %d, %q, %q", code, stdout, stderr)
		}
	})
}

// regexpLine reports whether a line of text matches re.
func regexpLine(text, re string) bool {
	return regexp.MustCompile("(?m)" + re).MatchString(text)
}

func TestSchedulesCommandUsage(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		ctx := context.Background()
		_, s := scheduleWorld(t, tg)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"nope"}, `no schedule set "nope" in namespace "` + tg.ns + `"; schedule sets: nightly, weekly`},
			{[]string{"pause", "nope", "sync"}, `no schedule set "nope"`},
			{[]string{"pause", "nightly"}, "pause takes SET ID"},
			{[]string{"remove"}, "remove takes SET ID"},
			{[]string{"nightly", "sync"}, `unexpected argument "sync"`},
			{[]string{"--cursor", "5"}, "--cursor and --limit go with SET"},
			{[]string{"nightly", "--limit", "0"}, "--limit must be from 1"},
			{[]string{"pause", "nightly", "sync", "--json"}, "--json goes with the listings"},
			{[]string{"pause", "nightly", ""}, "schedule id"},
			{[]string{"nightly", "--cursor", "x"}, "cursor"},
			{[]string{"bad:name"}, "schedule set name"},
		} {
			code, stdout, stderr := redqRun(t, tg.args("schedules", tc.args...)...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, tc.want) || !strings.HasPrefix(stderr, "redq schedules: ") {
				t.Errorf("schedules %v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, stdout, stderr, tc.want)
			}
		}
		if in, err := s.Lookup(ctx, "sync"); err != nil || in.Paused {
			t.Fatalf("a usage error changed sync: %+v, %v", in, err)
		}
	})
}

// The listings change nothing in Redis, and the real binary prints an
// action's failure on one line.
func TestSchedulesCommandReadOnlyAndExec(t *testing.T) {
	srv := redistest.Start(t)
	tg := newTarget(t, srv.Addr())
	conn, _ := scheduleWorld(t, tg)
	<-conn.StopAllConsuming() // its heartbeat would change keys by itself
	before := snapshot(t, tg.client)
	for _, args := range [][]string{
		tg.args("schedules"), tg.args("schedules", "--json"), tg.args("schedules", "nightly"),
		tg.args("schedules", "nightly", "--json", "--limit", "1"), tg.args("schedules", "nope"),
	} {
		redqRun(t, args...)
	}
	after := snapshot(t, tg.client)
	for k, b := range before {
		if a, ok := after[k]; !ok || a.dump != b.dump {
			t.Errorf("key %s changed", k)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d keys, were %d", len(after), len(before))
	}

	code, stdout, _ := redqExec(t, tg.args("schedules", "pause", "nightly", "sync")...)
	if code != 0 || !strings.Contains(stdout, `paused schedule "sync"`) {
		t.Fatalf("pause: exit %d, %q", code, stdout)
	}
	code, _, stderr := redqExec(t, tg.args("schedules", "resume", "nightly", "gone")...)
	if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "redq schedules: ") || strings.Contains(stderr, "redq: ") {
		t.Fatalf("resume of an unknown schedule: exit %d, %q", code, stderr)
	}
}
