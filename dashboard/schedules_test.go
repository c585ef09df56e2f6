package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redq/redq"
)

// The fake has no schedule sets; it reports an outage as the other reads
// do. The pages are tested on Redis (TestSchedulesOnRedis).

func (f *fakeSource) ScheduleSets(ctx context.Context) (map[string]redq.ScheduleSetStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return nil, f.down
	}
	return map[string]redq.ScheduleSetStat{}, nil
}

func (f *fakeSource) ScheduleSet(ctx context.Context, set string) (redq.ScheduleSetStat, error) {
	return redq.ScheduleSetStat{}, f.noSchedules()
}

func (f *fakeSource) ListSchedules(ctx context.Context, set, cursor string, limit int) (redq.SchedulePage, error) {
	return redq.SchedulePage{}, f.noSchedules()
}

func (f *fakeSource) PauseSchedule(ctx context.Context, set, id string) error { return f.noSchedules() }
func (f *fakeSource) ResumeSchedule(ctx context.Context, set, id string) error {
	return f.noSchedules()
}
func (f *fakeSource) RemoveSchedule(ctx context.Context, set, id string) error {
	return f.noSchedules()
}

func (f *fakeSource) noSchedules() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return f.down
	}
	return redq.ErrorNotFound
}

// scheduleRow returns the row of schedule id on a set's page.
func scheduleRow(body, id string) string {
	return regexp.MustCompile(`(?s)<tr data-schedule="` + regexp.QuoteMeta(id) + `">.*?</tr>`).FindString(body)
}

// The schedules pages list the sets and a set's schedules, and their
// buttons pause, resume and remove one in Redis; a read-only dashboard,
// a request without the token and an unknown set change nothing.
func TestSchedulesOnRedis(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		conn, err := redq.Open(ctx, "scheduler", be.client, nil, redq.WithNamespace("dash"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-conn.StopAllConsuming() })
		s, err := conn.OpenSchedules("nightly")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Upsert(ctx, "report", "0 30 2 * * *", nil, redq.ScheduleTimeZone("Europe/Berlin"), redq.ScheduleTarget("reports"),
			redq.ScheduleJitter(5*time.Second), redq.ScheduleCatchUp(redq.CatchUpAll(3))); err != nil {
			t.Fatal(err)
		}
		if err := s.Upsert(ctx, "sync", "@every 1h", nil, redq.ScheduleOverlap(redq.OverlapSkip)); err != nil {
			t.Fatal(err)
		}
		if err := s.Pause(ctx, "sync"); err != nil {
			t.Fatal(err)
		}
		h := mustHandler(t, be.insp, Options{EnableActions: true, PathPrefix: "/redq"})
		b := newBrowser(t, h, "/redq")

		code, body := b.get("/schedules")
		row := regexp.MustCompile(`(?s)<tr data-set="nightly">.*?</tr>`).FindString(body)
		if code != http.StatusOK || !strings.Contains(row, `data-field="schedules">2<`) || !strings.Contains(row, `data-field="paused">1<`) ||
			!strings.Contains(row, `href="/redq/schedules/nightly"`) || !strings.Contains(body, `href="/redq/schedules" class="current"`) {
			t.Fatalf("GET /schedules: %d\n%s", code, body)
		}
		code, body = b.get("/schedules/nightly")
		if code != http.StatusOK {
			t.Fatalf("GET /schedules/nightly: %d\n%s", code, body)
		}
		report, sync := scheduleRow(body, "report"), scheduleRow(body, "sync")
		for _, want := range []string{"0 30 2 * * *", "Europe/Berlin", `href="/redq/queues/reports"`, `data-field="state">running<`,
			"CatchUpAll(3)", "jitter 5s", `data-action="pause"`, `data-action="remove"`} {
			if !strings.Contains(report, want) {
				t.Errorf("report's row lacks %q:\n%s", want, report)
			}
		}
		for _, want := range []string{"@every 1h", `data-field="state">paused<`, "OverlapSkip", `data-action="resume"`, `data-field="next">—<`} {
			if !strings.Contains(sync, want) {
				t.Errorf("sync's row lacks %q:\n%s", want, sync)
			}
		}

		// refused: no token, read-only, unknown set, bad id, unknown action
		before := dump(t, be.client)
		tok := b.token("/schedules/nightly")
		if code, _ := b.post("/schedules/nightly/actions/pause", url.Values{"id": {"report"}}); code != http.StatusForbidden {
			t.Errorf("pause without a token: %d", code)
		}
		ro := newBrowser(t, mustHandler(t, be.insp, Options{PathPrefix: "/redq"}), "/redq")
		if _, body := ro.get("/schedules/nightly"); strings.Contains(body, "data-action=") {
			t.Error("a read-only dashboard offers schedule actions")
		}
		if code, _ := ro.post("/schedules/nightly/actions/pause", url.Values{"id": {"report"}}); code != http.StatusForbidden {
			t.Errorf("pause on a read-only dashboard: %d", code)
		}
		if code, _ := b.post("/schedules/nope/actions/pause", url.Values{"csrf": {tok}, "id": {"report"}}); code != http.StatusNotFound {
			t.Errorf("pause in an unknown set: %d", code)
		}
		if code, _ := b.post("/schedules/nightly/actions/pause", url.Values{"csrf": {tok}, "id": {""}}); code != http.StatusBadRequest {
			t.Errorf("pause of an empty id: %d", code)
		}
		if code, _ := b.post("/schedules/nightly/actions/run-now", url.Values{"csrf": {tok}, "id": {"report"}}); code != http.StatusBadRequest {
			t.Errorf("run-now: %d", code)
		}
		if code, _ := b.get("/schedules/nope"); code != http.StatusNotFound {
			t.Errorf("GET an unknown set: %d", code)
		}
		if after := dump(t, be.client); !slices.Equal(before, after) {
			t.Errorf("refused actions changed Redis")
		}

		// carried out
		back := "/redq/schedules/nightly"
		for _, a := range []struct{ action, id string }{{"pause", "report"}, {"resume", "sync"}} {
			if code, _ := b.post("/schedules/nightly/actions/"+a.action, url.Values{"csrf": {tok}, "id": {a.id}, "back": {back}}); code != http.StatusSeeOther {
				t.Fatalf("%s %s: %d", a.action, a.id, code)
			}
		}
		if in, err := s.Lookup(ctx, "report"); err != nil || !in.Paused {
			t.Fatalf("report after pause: %+v, %v", in, err)
		}
		if in, err := s.Lookup(ctx, "sync"); err != nil || in.Paused || in.Next.IsZero() {
			t.Fatalf("sync after resume: %+v, %v", in, err)
		}
		if code, _ := b.post("/schedules/nightly/actions/remove", url.Values{"csrf": {tok}, "id": {"report"}, "back": {back}}); code != http.StatusSeeOther {
			t.Fatalf("remove: %d", code)
		}
		code, body = b.get("/schedules/nightly")
		if code != http.StatusOK || !strings.Contains(body, "Schedule report is removed.") || scheduleRow(body, "report") != "" {
			t.Fatalf("remove: %d\n%s", code, body)
		}
		if _, err := s.Lookup(ctx, "report"); !errors.Is(err, redq.ErrorNotFound) {
			t.Fatalf("report after remove: %v", err)
		}
		if code, body := b.post("/schedules/nightly/actions/remove", url.Values{"csrf": {tok}, "id": {"report"}, "back": {back}}); code != http.StatusConflict || !strings.Contains(body, "removed meanwhile") {
			t.Errorf("removing it again: %d\n%s", code, body)
		}
	})
}

// While Redis is down the schedules page says so and answers 503.
func TestSchedulesPageRedisDown(t *testing.T) {
	f := fakeWithData()
	f.setDown(errors.New("dial tcp: connection refused"))
	b := newBrowser(t, mustHandler(t, f, Options{}), "")
	if code, body := b.get("/schedules"); code != http.StatusServiceUnavailable || !strings.Contains(body, `data-field="banner"`) {
		t.Errorf("GET /schedules with Redis down: %d\n%s", code, body)
	}
}
