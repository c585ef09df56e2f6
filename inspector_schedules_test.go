package redq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"
)

// The Inspector lists the schedule sets with their counts, a set's
// schedules page by page with every field Lookup gives (policies
// included), and one schedule by id.
func TestInspectorSchedules(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "c", ns)
		i := newInspectorT(t, b, ns)

		sets, err := i.ScheduleSets(ctx)
		if err != nil || sets == nil || len(sets) != 0 {
			t.Fatalf("no sets yet: got %v, %v; want an empty map", sets, err)
		}

		s := openSchedules(t, c, "nightly")
		mustSchedule(t, s, "report", "0 30 2 * * *", "r", ScheduleTarget("reports"), ScheduleTimeZone("Europe/Berlin"),
			ScheduleJitter(5*time.Second), ScheduleCatchUp(CatchUpAll(3)))
		mustSchedule(t, s, "sync", "@every 1h", "s", ScheduleOverlap(OverlapSkip), ScheduleCatchUp(CatchUpNone(time.Minute)))
		mustSchedule(t, s, "idle", "@every 2h", "i")
		if err := s.Pause(ctx, "idle"); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for n := 0; n < 25; n++ {
			id := fmt.Sprintf("bulk-%02d", n)
			ids = append(ids, id)
			mustSchedule(t, s, id, "@every 30m", "b")
		}
		openSchedules(t, c, "empty")
		ids = append(ids, "idle", "report", "sync")
		sort.Strings(ids)

		sets, err = i.ScheduleSets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		report, sync := mustScheduleInfo(t, s, "report"), mustScheduleInfo(t, s, "sync")
		wantNext := sync.Next
		if report.Next.Before(wantNext) {
			wantNext = report.Next
		}
		for _, id := range ids {
			if in := mustScheduleInfo(t, s, id); !in.Paused && in.Next.Before(wantNext) {
				wantNext = in.Next
			}
		}
		want := map[string]ScheduleSetStat{"nightly": {Schedules: 28, Paused: 1, NextDue: wantNext}, "empty": {}}
		if !reflect.DeepEqual(sets, want) {
			t.Fatalf("ScheduleSets = %+v, want %+v", sets, want)
		}
		if one, err := i.ScheduleSet(ctx, "nightly"); err != nil || !reflect.DeepEqual(one, want["nightly"]) {
			t.Fatalf("ScheduleSet(nightly) = %+v, %v", one, err)
		}

		// every schedule once, over pages, each page sorted, each as Lookup
		// has it
		var listed []string
		cursor := ""
		for pages := 0; ; pages++ {
			p, err := i.ListSchedules(ctx, "nightly", cursor, 5)
			if err != nil {
				t.Fatal(err)
			}
			if p.Total != 28 {
				t.Fatalf("total %d, want 28", p.Total)
			}
			if !sort.SliceIsSorted(p.Items, func(a, b int) bool { return p.Items[a].ID < p.Items[b].ID }) {
				t.Fatalf("page not sorted by id: %v", p.Items)
			}
			for _, in := range p.Items {
				listed = append(listed, in.ID)
				if got := mustScheduleInfo(t, s, in.ID); !reflect.DeepEqual(in, got) {
					t.Fatalf("listed %+v, Lookup %+v", in, got)
				}
			}
			if p.Next == "" {
				break
			}
			if pages > 100 {
				t.Fatal("the pages do not end")
			}
			cursor = p.Next
		}
		sort.Strings(listed)
		if !reflect.DeepEqual(listed, ids) {
			t.Fatalf("listed %v, want %v", listed, ids)
		}

		got, err := i.Schedule(ctx, "nightly", "report")
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec != "0 30 2 * * *" || got.TimeZone != "Europe/Berlin" || got.Target != "reports" || got.Jitter != 5*time.Second ||
			got.CatchUp.String() != "CatchUpAll(3)" || got.Overlap != OverlapAllow || got.Paused || got.Next.IsZero() {
			t.Fatalf("Schedule(report) = %+v", got)
		}
		got, err = i.Schedule(ctx, "nightly", "sync")
		if err != nil {
			t.Fatal(err)
		}
		if got.Target != "nightly" || got.Overlap != OverlapSkip || got.CatchUp.String() != "CatchUpNone(1m0s)" || got.Jitter != 0 {
			t.Fatalf("Schedule(sync) = %+v", got)
		}
		if got, err := i.Schedule(ctx, "nightly", "idle"); err != nil || !got.Paused || !got.Next.IsZero() || got.CatchUp.String() != "CatchUpLatest()" {
			t.Fatalf("Schedule(idle) = %+v, %v", got, err)
		}
	})
}

// Pause, resume and remove by the Inspector act as the Schedules verbs do:
// a paused schedule publishes nothing, a resumed one goes on from its next
// tick, a removed one is gone; each reports an unknown schedule or set.
func TestInspectorScheduleActions(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		clock := newSchedClock(b)
		c := openT(t, b, "c", ns)
		i := newInspectorT(t, b, ns)
		s := openSchedules(t, c, "every")
		q := openQueue(t, c, "every")
		// every tick due is published (CatchUpAll), so that a tick missed
		// while paused would show
		mustSchedule(t, s, "a", "@every 1s", "a", ScheduleCatchUp(CatchUpAll(10)))
		mustSchedule(t, s, "b", "@every 1s", "b")

		if err := i.PauseSchedule(ctx, "every", "a"); err != nil {
			t.Fatal(err)
		}
		if err := i.PauseSchedule(ctx, "every", "a"); err != nil {
			t.Fatalf("pausing a paused schedule: %v", err)
		}
		if in := mustScheduleInfo(t, s, "a"); !in.Paused || !in.Next.IsZero() {
			t.Fatalf("after PauseSchedule: %+v", in)
		}
		if st, err := i.ScheduleSet(ctx, "every"); err != nil || st.Paused != 1 || st.Schedules != 2 {
			t.Fatalf("ScheduleSet after a pause: %+v, %v", st, err)
		}
		clock.pass(1500 * time.Millisecond)
		fireDue(t, s)
		for _, d := range takeTicks(t, q) {
			if d.id == "a" {
				t.Fatalf("the paused schedule published %+v", d)
			}
		}

		if err := i.ResumeSchedule(ctx, "every", "a"); err != nil {
			t.Fatal(err)
		}
		in := mustScheduleInfo(t, s, "a")
		if in.Paused || in.Next.IsZero() {
			t.Fatalf("after ResumeSchedule: %+v", in)
		}
		if err := i.ResumeSchedule(ctx, "every", "a"); err != nil {
			t.Fatalf("resuming a running schedule: %v", err)
		}
		if again := mustScheduleInfo(t, s, "a"); !again.Next.Equal(in.Next) || again.Version != in.Version {
			t.Fatalf("resuming a running schedule changed it: %+v, was %+v", again, in)
		}
		clock.pass(1500 * time.Millisecond)
		fireDue(t, s)
		var fromA []string
		for _, d := range takeTicks(t, q) {
			if d.id == "a" {
				fromA = append(fromA, d.tick)
			}
		}
		// on real Redis the wall clock may pass a second tick meanwhile
		if len(fromA) == 0 || fromA[0] != tickText(in.Next) || len(fromA) > 2 {
			t.Fatalf("after resume, a published %v, want its ticks from %s", fromA, tickText(in.Next))
		}

		if err := i.RemoveSchedule(ctx, "every", "b"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Lookup(ctx, "b"); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("Lookup after RemoveSchedule: %v", err)
		}
		clock.pass(1500 * time.Millisecond)
		fireDue(t, s)
		for _, d := range takeTicks(t, q) {
			if d.id == "b" {
				t.Fatalf("the removed schedule published %+v", d)
			}
		}
		for name, err := range map[string]error{
			"remove":  i.RemoveSchedule(ctx, "every", "b"),
			"pause":   i.PauseSchedule(ctx, "every", "b"),
			"resume":  i.ResumeSchedule(ctx, "every", "b"),
			"look up": func() error { _, err := i.Schedule(ctx, "every", "b"); return err }(),
		} {
			if !errors.Is(err, ErrorNotFound) || errors.Is(err, ErrorInvalidArgument) {
				t.Errorf("%s of a removed schedule: %v, want ErrorNotFound", name, err)
			}
		}
	})
}

// Bad input is an *ArgumentError naming the field, an unknown set an
// error matching ErrorNotFound; neither changes anything in Redis.
func TestInspectorSchedulesBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "c", ns)
		i := newInspectorT(t, b, ns)
		s := openSchedules(t, c, "set")
		mustSchedule(t, s, "a", "@every 1h", "a")
		if err := s.Pause(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		mustSchedule(t, s, "b", "@every 1h", "b")
		before := snapshot(t, b, c)

		long := string(make([]byte, MaxKeyLength+1))
		bad := []struct {
			name, field string
			err         error
		}{
			{"set name", "schedule set name", i.PauseSchedule(ctx, "", "a")},
			{"set name with a colon", "schedule set name", i.ResumeSchedule(ctx, "a:b", "a")},
			{"empty id", "schedule id", i.PauseSchedule(ctx, "set", "")},
			{"long id", "schedule id", i.RemoveSchedule(ctx, "set", long)},
			{"resume empty id", "schedule id", i.ResumeSchedule(ctx, "set", "")},
			{"lookup empty id", "schedule id", func() error { _, err := i.Schedule(ctx, "set", ""); return err }()},
			{"list limit", "limit", func() error { _, err := i.ListSchedules(ctx, "set", "", -1); return err }()},
			{"list limit too big", "limit", func() error { _, err := i.ListSchedules(ctx, "set", "", MaxListLimit+1); return err }()},
			{"list cursor", "cursor", func() error { _, err := i.ListSchedules(ctx, "set", "x", 0); return err }()},
			{"list set name", "schedule set name", func() error { _, err := i.ListSchedules(ctx, "", "", 0); return err }()},
			{"set counts name", "schedule set name", func() error { _, err := i.ScheduleSet(ctx, ""); return err }()},
		}
		for _, tc := range bad {
			var ae *ArgumentError
			if !errors.As(tc.err, &ae) || ae.Arg != tc.field {
				t.Errorf("%s: %v, want an *ArgumentError naming %q", tc.name, tc.err, tc.field)
			}
		}
		unknown := map[string]error{
			"pause":   i.PauseSchedule(ctx, "nope", "a"),
			"resume":  i.ResumeSchedule(ctx, "nope", "a"),
			"remove":  i.RemoveSchedule(ctx, "nope", "a"),
			"look up": func() error { _, err := i.Schedule(ctx, "nope", "a"); return err }(),
			"list":    func() error { _, err := i.ListSchedules(ctx, "nope", "", 0); return err }(),
			"counts":  func() error { _, err := i.ScheduleSet(ctx, "nope"); return err }(),
		}
		for name, err := range unknown {
			if !errors.Is(err, ErrorNotFound) || errors.Is(err, ErrorInvalidArgument) {
				t.Errorf("%s on an unknown set: %v, want ErrorNotFound", name, err)
			}
		}
		if after := snapshot(t, b, c); !reflect.DeepEqual(before, after) {
			t.Fatalf("bad input changed Redis:\nbefore %v\nafter  %v", before, after)
		}
		if in := mustScheduleInfo(t, s, "a"); !in.Paused {
			t.Fatal("bad input resumed a")
		}
	})
}
