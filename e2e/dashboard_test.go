// Package e2e drives the dashboard in a real browser (headless Chromium,
// through chromedp) against a real redis-server. It is a module of its own
// so that chromedp never enters the library's go.mod.
//
// The test fails instead of skipping when Chromium is missing and
// REDQ_REQUIRE_BROWSER=1, and writes screenshots into ../docs when
// REDQ_SCREENSHOTS=1.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/redq/redq"
	"github.com/redq/redq/dashboard"
)

const prefix = "/redq"

// browserPath finds Chromium, or skips (fails with REDQ_REQUIRE_BROWSER=1).
func browserPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("REDQ_REQUIRE_BROWSER") == "1" {
		t.Fatal("no Chromium in PATH and REDQ_REQUIRE_BROWSER=1 (install it: apt-get install -y chromium)")
	}
	t.Skip("no Chromium in PATH (apt-get install -y chromium; set REDQ_REQUIRE_BROWSER=1 to fail instead)")
	return ""
}

func newBrowser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browserPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
	}
	actx, cancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return bctx
}

// fill puts deliveries in every state and a minute of traffic into the
// namespace, as a small service would.
func fill(t *testing.T, ctx context.Context, client *redis.Client) {
	t.Helper()
	conn, err := redq.Open(ctx, "mailer", client, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { <-conn.StopAllConsuming() })
	emails, err := conn.OpenQueue("emails", redq.WithRetryPolicy(redq.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	hdr := redq.Header(http.Header{"Trace-Id": {"4bf92f3577b34da6"}})
	for i := range 120 {
		p := fmt.Sprintf(`{"to":"user%d@example.com","template":"welcome","locale":"en"}`, i)
		if i%10 == 0 {
			p = fmt.Sprintf(`{"to":"bounce%d@example.net","template":"receipt"}`, i)
		}
		if err := emails.Put(ctx, []byte(p), hdr); err != nil {
			t.Fatal(err)
		}
	}
	if err := emails.StartConsuming(20, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var handled = make(chan struct{}, 200)
	if _, err := emails.AddHandler("sender", func(ctx context.Context, m redq.Message) error {
		defer func() { handled <- struct{}{} }()
		if strings.Contains(string(m.Payload()), "bounce") {
			return errors.New("smtp: 550 5.1.1 mailbox unavailable")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for range 120 {
		select {
		case <-handled:
		case <-time.After(20 * time.Second):
			t.Fatal("the handler did not get through the emails")
		}
	}
	for i := range 8 {
		if err := emails.Put(ctx, fmt.Appendf(nil, `{"to":"later%d@example.com"}`, i), redq.Delay(time.Duration(i+1)*10*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	<-emails.StopConsuming()

	reports, err := conn.OpenQueue("reports")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if err := reports.Put(ctx, fmt.Appendf(nil, "monthly report %d for account %d", i, 1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	health, err := conn.OpenRound("health-checks", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if _, err := health.Add(ctx, fmt.Sprintf("site-%d", i), fmt.Appendf(nil, "https://site-%d.example.com/healthz", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := health.Next(ctx, 0); err != nil {
		t.Fatal(err)
	}
	reminders, err := conn.OpenTimers("reminders")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := reminders.Set(ctx, fmt.Sprintf("cart-%d", i), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	digests, err := conn.OpenQueue("digests")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := digests.Upsert(ctx, fmt.Sprintf("user-%d", i), []byte("daily digest"), redq.Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDashboardInBrowser(t *testing.T) {
	bctx := newBrowser(t, context.Background())
	srv := startRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer client.Close()
	fill(t, ctx, client)

	insp, err := redq.NewInspector(client)
	if err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(insp, dashboard.Options{EnableActions: true, PathPrefix: prefix, Refresh: time.Second, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", h)
	web := httptest.NewServer(mux)
	defer web.Close()
	base := web.URL + prefix
	bctx, cancelRun := context.WithTimeout(bctx, 50*time.Second)
	defer cancelRun()

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if os.Getenv("REDQ_SCREENSHOTS") != "1" {
				return nil
			}
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join("..", "docs", "dashboard-"+name+".png"), png, 0o644)
		})
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	click := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }

	// Every page loads and shows what is in Redis.
	do("overview",
		chromedp.Navigate(base+"/"),
		visible(`tr[data-queue="emails"] td[data-field="rejected"]`),
		visible(`tr[data-queue="digests"]`),
		visible(`tr[data-round="health-checks"]`),
		visible(`tr[data-timer="reminders"]`),
		shot("overview"))
	if got := text(`tr[data-queue="emails"] td[data-field="rejected"]`); got != "12" {
		t.Errorf("overview shows %q rejected emails, want 12", got)
	}
	do("connections",
		chromedp.Navigate(base+"/connections"),
		visible(`table[data-table="connections"] tr[data-connection]`))
	do("round",
		chromedp.Navigate(base+"/rounds/health-checks"),
		visible(`tr[data-item="site-0"]`))
	do("keyed tab",
		chromedp.Navigate(base+"/queues/digests?state=keyed"),
		visible(`td[data-field="key"]`))
	do("delayed tab",
		chromedp.Navigate(base+"/queues/emails?state=delayed"),
		visible(`table[data-table="deliveries"] tr[data-id]`))

	do("rejected tab",
		chromedp.Navigate(base+"/queues/emails?state=rejected"),
		visible(`table[data-table="deliveries"] tr[data-id] td[data-field="reason"]`),
		shot("queue"))
	attr, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`table[data-table="deliveries"] tr[data-id]`), "data-id"))
	if err != nil || attr.Value == "" {
		t.Fatalf("no delivery id on the rejected tab: %v", err)
	}
	id := attr.Value
	do("delivery",
		chromedp.Navigate(base+"/queues/emails/deliveries/"+id),
		visible(`[data-field="payload"]`),
		shot("delivery"))
	if got := text(`[data-field="reason"]`); !strings.Contains(got, "mailbox unavailable") {
		t.Errorf("delivery page shows reason %q", got)
	}

	// Retry a rejected delivery: it is in ready afterwards, in Redis.
	do("retry",
		chromedp.Navigate(base+"/queues/emails?state=rejected"),
		visible(`#live-toggle`),
		click(`#live-toggle`), // hold the refresh while clicking
		click(fmt.Sprintf(`tr[data-id="%s"] button[data-action="retry"]`, id)),
		visible(`[data-field="flash"]`))
	d, err := insp.Delivery(ctx, "emails", id)
	if err != nil || d.State != redq.StateReady {
		t.Errorf("after retry in the browser, Redis has %q, %v; want it ready", d.State, err)
	}

	// Pause the queue: Redis says paused, and so does the page.
	do("pause",
		chromedp.Navigate(base+"/queues/emails"),
		visible(`#live-toggle`),
		click(`#live-toggle`),
		click(`button[data-action="pause"]`),
		visible(`[data-field="flash"]`),
		visible(`span[data-field="paused"]`))
	q, err := insp.Queue(ctx, "emails")
	if err != nil || !q.Paused {
		t.Errorf("after pause in the browser, Redis has paused=%v, %v", q.Paused, err)
	}

	// Pause a schedule from its set's page: Redis says paused, and so
	// does the page.
	conn, err := redq.Open(ctx, "scheduler", client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	sched, err := conn.OpenSchedules("nightly")
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.Upsert(ctx, "report", "0 30 2 * * *", []byte("report"), redq.ScheduleTimeZone("Europe/Berlin")); err != nil {
		t.Fatal(err)
	}
	do("schedules",
		chromedp.Navigate(base+"/schedules"),
		visible(`tr[data-set="nightly"] td[data-field="schedules"]`))
	do("pause a schedule",
		chromedp.Navigate(base+"/schedules/nightly"),
		visible(`#live-toggle`),
		click(`#live-toggle`),
		click(`tr[data-schedule="report"] button[data-action="pause"]`),
		visible(`[data-field="flash"]`),
		visible(`tr[data-schedule="report"] button[data-action="resume"]`))
	if got := text(`tr[data-schedule="report"] [data-field="state"]`); got != "paused" {
		t.Errorf("after pause in the browser, the page says %q", got)
	}
	if in, err := insp.Schedule(ctx, "nightly", "report"); err != nil || !in.Paused {
		t.Errorf("after pause in the browser, Redis has %+v, %v", in, err)
	}

	// Redis goes away: a banner, the numbers greyed, and the page keeps
	// polling until Redis is back.
	do("before the outage",
		chromedp.Navigate(base+"/"),
		visible(`tr[data-queue="emails"]`))
	srv.stop()
	do("outage",
		visible(`#banner`),
		visible(`#live.stale tr[data-queue="emails"]`))
	if got := text(`#banner`); !strings.Contains(got, "Redis cannot be read") {
		t.Errorf("banner %q", got)
	}
	srv.start()
	do("recovery",
		chromedp.WaitNotVisible(chromedp.CSS(`#banner`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#live.stale`)))
}
