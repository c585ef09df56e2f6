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

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/redistest"
)

// backend is a Redis with a namespace of data for one test.
type backend struct {
	client *redis.Client
	insp   *redq.Inspector
	stop   func() // makes Redis unreachable
}

// onBackends runs f on miniredis and on a real redis-server.
func onBackends(t *testing.T, f func(t *testing.T, be backend)) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		f(t, newBackend(t, m.Addr(), m.Close))
	})
	t.Run("redis", func(t *testing.T) {
		s := redistest.Start(t)
		f(t, newBackend(t, s.Addr(), s.Stop))
	})
}

func newBackend(t *testing.T, addr string, stop func()) backend {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	insp, err := redq.NewInspector(c, redq.WithNamespace("dash"))
	if err != nil {
		t.Fatal(err)
	}
	return backend{client: c, insp: insp, stop: stop}
}

// fill leaves in queue "jobs": 3 ready, 2 delayed, 2 rejected (with their
// handler's error) and 1 pending key; it returns the rejected ids.
func fill(t *testing.T, be backend) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := redq.Open(ctx, "filler", be.client, nil, redq.WithNamespace("dash"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-conn.StopAllConsuming() })
	q, err := conn.OpenQueue("jobs", redq.WithRetryPolicy(redq.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"fail-1", "fail-2"} {
		if err := q.Put(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.StartConsuming(10, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	if _, err := q.AddHandler("failer", func(ctx context.Context, m redq.Message) error {
		defer func() { done <- struct{}{} }()
		return errors.New("downstream said no")
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler did not run")
		}
	}
	// The handler's rejections are settled after it returned: wait for
	// both before stopping, which would leave one in flight unacked.
	var ids []string
	deadline := time.Now().Add(30 * time.Second) // a loaded machine settles slowly
	for len(ids) < 2 && time.Now().Before(deadline) {
		p, err := be.insp.List(ctx, "jobs", redq.ListOptions{State: redq.StateRejected})
		if err != nil {
			t.Fatal(err)
		}
		ids = ids[:0]
		for _, d := range p.Items {
			ids = append(ids, d.ID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(ids) != 2 {
		t.Fatalf("rejected ids %v, want 2", ids)
	}
	<-q.StopConsuming()
	for _, p := range []string{"r-1", "r-2", `{"big":"` + strings.Repeat("x", 3000) + `"}`} {
		if err := q.Put(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"later-1", "later-2"} {
		if err := q.Put(ctx, []byte(p), redq.Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Upsert(ctx, "user-1", []byte("digest"), redq.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	return ids
}

// dump is every key of the Redis with its value, to show that nothing
// changed.
func dump(t *testing.T, c *redis.Client) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		if strings.Contains(k, "heartbeat") {
			continue // the filler's heartbeat is renewed as time goes
		}
		v, _ := c.Dump(ctx, k).Result()
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func TestOnRedis(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		rejected := fill(t, be)
		h := mustHandler(t, be.insp, Options{EnableActions: true, PathPrefix: "/redq"})
		b := newBrowser(t, h, "/redq")

		for path, want := range map[string]string{
			"/":                                      `data-queue="jobs"`,
			"/connections":                           `data-connection=`,
			"/queues/jobs":                           "r-1",
			"/queues/jobs?state=delayed":             "later-1",
			"/queues/jobs?state=rejected":            "downstream said no",
			"/queues/jobs?state=keyed":               "user-1",
			"/queues/jobs?state=unacked":             `data-table="deliveries"`,
			"/queues/jobs?state=ready&q=r-2":         "r-2",
			"/queues/jobs/deliveries/" + rejected[0]: "downstream said no",
			"/api/overview":                          `"jobs"`,
		} {
			code, body := b.get(path)
			if code != http.StatusOK || !strings.Contains(body, want) {
				t.Errorf("GET %s: %d, no %q in\n%s", path, code, want, body)
			}
		}
		if _, body := b.get("/queues/jobs?state=ready&q=r-2"); strings.Contains(body, ">r-1<") || !strings.Contains(body, `data-field="scanned"`) {
			t.Error("search for r-2 shows r-1, or does not say how much it scanned")
		}

		// A rejected row's retried count agrees with the Redq-Attempts
		// header its handler wrote: taken once (attempt 1), rejected on the
		// first failure, never back in ready (retried 0).
		_, body := b.get("/queues/jobs?state=rejected")
		for _, id := range rejected {
			row := regexp.MustCompile(`(?s)<tr data-id="` + id + `">.*?</tr>`).FindString(body)
			if !strings.Contains(row, "Redq-Attempts: 1<") || !strings.Contains(row, `data-field="retried">0<`) {
				t.Errorf("rejected row %s: want retried 0 beside Redq-Attempts: 1\n%s", id, row)
			}
		}
		if _, body := b.get("/queues/jobs/deliveries/" + rejected[0]); !strings.Contains(body, `data-field="retried">0<`) {
			t.Errorf("the rejected delivery's page does not show retried 0\n%s", body)
		}
		if _, body := b.get("/queues/jobs?state=ready&q=r-1"); !strings.Contains(body, `data-field="retried">0<`) {
			t.Errorf("a ready delivery never taken does not show retried 0\n%s", body)
		}

		// The keyed item waiting in delayed is offered its key's actions.
		delayed, err := be.insp.List(ctx, "jobs", redq.ListOptions{State: redq.StateDelayed})
		if err != nil {
			t.Fatal(err)
		}
		_, body = b.get("/queues/jobs?state=delayed")
		for _, d := range delayed.Items {
			want := []string{"retry", "delete"}
			if d.Key != "" {
				want = []string{"run-now", "cancel"}
			}
			if got := rowActions(t, body, d.ID); !slices.Equal(got, want) {
				t.Errorf("delayed row %s (key %q): actions %v, want %v", d.ID, d.Key, got, want)
			}
		}

		// Refused actions change nothing.
		before := dump(t, be.client)
		tok := b.token("/queues/jobs?state=rejected")
		if code, _ := b.post("/queues/jobs/actions/retry", url.Values{"id": {rejected[0]}}); code != http.StatusForbidden {
			t.Errorf("retry without a token: %d", code)
		}
		ro := newBrowser(t, mustHandler(t, be.insp, Options{PathPrefix: "/redq"}), "/redq")
		if code, _ := ro.post("/queues/jobs/actions/purge", url.Values{"state": {"ready"}}); code != http.StatusForbidden {
			t.Errorf("purge on a read-only dashboard: %d", code)
		}
		if code, _ := b.post("/queues/jobs/actions/retry", url.Values{"csrf": {tok}, "id": {"nothex"}}); code != http.StatusBadRequest {
			t.Errorf("retry of a malformed id: %d", code)
		}
		if after := dump(t, be.client); !slices.Equal(before, after) {
			t.Errorf("refused actions changed Redis")
		}

		// Actions carried out, checked in Redis.
		post := func(action string, form url.Values) {
			t.Helper()
			form.Set("csrf", tok)
			if code, body := b.post("/queues/jobs/actions/"+action, form); code != http.StatusSeeOther {
				t.Fatalf("%s: %d\n%s", action, code, body)
			}
		}
		post("retry", url.Values{"id": {rejected[0]}})
		if d, err := be.insp.Delivery(ctx, "jobs", rejected[0]); err != nil || d.State != redq.StateReady {
			t.Errorf("after retry: %v %v", d.State, err)
		}
		// The same click again finds it moved, and changes nothing.
		before = dump(t, be.client)
		if code, body := b.post("/queues/jobs/actions/retry", url.Values{"csrf": {tok}, "id": {rejected[0]}}); code != http.StatusConflict || !strings.Contains(body, "moved meanwhile") {
			t.Errorf("retry of a delivery that moved: %d\n%s", code, body)
		}
		if after := dump(t, be.client); !slices.Equal(before, after) {
			t.Errorf("a refused retry changed Redis")
		}
		// A queue that was never opened is a 404 listing the open ones.
		for action, form := range map[string]url.Values{"retry": {"id": {rejected[1]}}, "cancel": {"key": {"user-1"}}, "pause": {}} {
			form.Set("csrf", tok)
			if code, body := b.post("/queues/nosuch/actions/"+action, form); code != http.StatusNotFound || !strings.Contains(body, "No such queue") || !strings.Contains(body, "jobs") {
				t.Errorf("%s on a queue never opened: %d, want 404 listing jobs\n%s", action, code, body)
			}
		}
		if after := dump(t, be.client); !slices.Equal(before, after) {
			t.Errorf("an action on an unknown queue changed Redis")
		}
		post("delete", url.Values{"id": {rejected[1]}})
		if _, err := be.insp.Delivery(ctx, "jobs", rejected[1]); !errors.Is(err, redq.ErrorNotFound) {
			t.Errorf("after delete: %v", err)
		}
		post("pause", url.Values{})
		if q, err := be.insp.Queue(ctx, "jobs"); err != nil || !q.Paused {
			t.Errorf("after pause: %+v %v", q, err)
		}
		if _, body := b.get("/"); !strings.Contains(body, `data-field="paused"`) {
			t.Error("the overview does not show the queue paused")
		}
		post("resume", url.Values{})
		if q, err := be.insp.Queue(ctx, "jobs"); err != nil || q.Paused {
			t.Errorf("after resume: %+v %v", q, err)
		}
		post("run-now", url.Values{"key": {"user-1"}})
		post("purge", url.Values{"state": {"delayed"}})
		if q, err := be.insp.Queue(ctx, "jobs"); err != nil || q.Delayed != 0 || q.KeyedPending != 1 && q.Ready != 5 {
			t.Errorf("after run-now and purge delayed: %+v %v", q, err)
		}

		// Redis goes away: pages answer with a banner and the last numbers.
		be.stop()
		time.Sleep(DefaultRefresh)
		for _, path := range []string{"/", "/queues/jobs", "/connections"} {
			code, body := b.get(path)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "Redis cannot be read") || !strings.Contains(body, `class="stale"`) {
				t.Errorf("GET %s with Redis stopped: %d\n%s", path, code, body)
			}
		}
		if _, body := b.get("/"); !strings.Contains(body, `data-queue="jobs"`) {
			t.Error("the overview lost the last numbers when Redis stopped")
		}
	})
}

func TestClosedClient(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	insp, err := redq.NewInspector(c)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, mustHandler(t, insp, Options{}), "")
	c.Close()
	code, body := b.get("/")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "Redis cannot be read") || !strings.Contains(body, "<html") {
		t.Errorf("closed client: %d\n%s", code, body)
	}
}
