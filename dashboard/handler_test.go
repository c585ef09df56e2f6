package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redq/redq"
)

// browser is an HTTP client with cookies against one test server.
type browser struct {
	t    *testing.T
	srv  *httptest.Server
	c    *http.Client
	base string // srv.URL plus the prefix
}

func newBrowser(t *testing.T, h http.Handler, prefix string) *browser {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &browser{t: t, srv: srv, c: c, base: srv.URL + prefix}
}

// get returns the status and body of path (relative to the prefix).
func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	return b.do(http.MethodGet, path, nil, nil)
}

func (b *browser) do(method, path string, form url.Values, hdr http.Header) (int, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusSeeOther {
		return resp.StatusCode, resp.Header.Get("Location")
	}
	return resp.StatusCode, string(out)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// token loads path and returns the CSRF token its forms carry.
func (b *browser) token(path string) string {
	b.t.Helper()
	code, body := b.get(path)
	m := csrfRE.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		b.t.Fatalf("GET %s: %d, no CSRF token in the page:\n%s", path, code, body)
	}
	return m[1]
}

// post sends an action form.
func (b *browser) post(path string, form url.Values) (int, string) {
	b.t.Helper()
	return b.do(http.MethodPost, path, form, nil)
}

func fakeWithData() *fakeSource {
	f := newFakeSource()
	now := time.Now()
	f.add("emails", redq.DeliveryInfo{ID: "aa01", State: redq.StateReady, Payload: []byte(`{"to":"a@example.com"}`), PublishedAt: now.Add(-time.Minute), Header: http.Header{"Trace": {"t-1"}}})
	f.add("emails", redq.DeliveryInfo{ID: "aa02", State: redq.StateRejected, Payload: []byte(`<script>alert(1)</script>`), Attempts: 3, Reason: "smtp: 550 mailbox unavailable"})
	f.add("emails", redq.DeliveryInfo{ID: "aa03", State: redq.StateDelayed, Payload: []byte("later"), DueAt: now.Add(time.Hour)})
	f.add("emails", redq.DeliveryInfo{ID: "aa04", State: redq.StateKeyed, Key: "user-7", Payload: []byte("digest"), DueAt: now.Add(time.Minute)})
	f.add("emails", redq.DeliveryInfo{ID: "aa05", State: redq.StateUnacked, Connection: "worker-1", Payload: []byte("busy")})
	f.add("thumbs", redq.DeliveryInfo{ID: "bb01", State: redq.StateReady, Payload: []byte(strings.Repeat("x", 5000))})
	f.timers["reminders"] = redq.TimerStat{Pending: 4, Firing: 1}
	f.rounds["health"] = redq.RoundStat{Period: time.Minute, ItemCount: 12, DueCount: 2}
	f.conns = []redq.ConnectionInfo{
		{Name: "worker-1", State: "active", HeartbeatAge: 200 * time.Millisecond, Unacked: map[string]int64{"emails": 1}, Consumers: map[string]int64{"emails": 4}},
		{Name: "worker-0", State: "dead", HeartbeatAge: -1, Unacked: map[string]int64{}, Consumers: map[string]int64{}},
	}
	return f
}

func mustHandler(t *testing.T, src source, opts Options) *handler {
	t.Helper()
	h, err := newHandler(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestPagesRender(t *testing.T) {
	for _, prefix := range []string{"", "/ops/redq"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			f := fakeWithData()
			b := newBrowser(t, mustHandler(t, f, Options{PathPrefix: prefix, EnableActions: true}), prefix)
			pages := []struct {
				path string
				want []string
			}{
				{"/", []string{`data-queue="emails"`, `data-queue="thumbs"`, "reminders", "health", `class="spark"`, `href="` + prefix + `/queues/emails?state=rejected"`}},
				{"/connections", []string{`data-connection="worker-1"`, "dead", `href="` + prefix + `/queues/emails?state=unacked&amp;connection=worker-1"`}},
				{"/queues/emails", []string{`data-id="aa01"`, "Trace: t-1", `class="chart"`, `data-action="pause"`}},
				{"/queues/emails?state=rejected", []string{`data-id="aa02"`, "smtp: 550 mailbox unavailable", "&lt;script&gt;alert(1)&lt;/script&gt;", `data-action="retry"`}},
				{"/queues/emails?state=delayed", []string{`data-id="aa03"`, `data-action="retry"`}},
				{"/queues/emails?state=keyed", []string{"user-7", `data-action="run-now"`, `data-action="cancel"`}},
				{"/queues/emails?state=unacked", []string{`data-id="aa05"`, "worker-1"}},
				{"/queues/emails/deliveries/aa02", []string{"smtp: 550 mailbox unavailable", "&lt;script&gt;", `data-field="download"`}},
				{"/queues/thumbs?state=ready", []string{"4.9 KiB", `class="trunc"`}},
				{"/rounds/health", []string{`data-item="0"`, "site-11", "12 items in all"}},
			}
			for _, pg := range pages {
				code, body := b.get(pg.path)
				if code != http.StatusOK {
					t.Errorf("GET %s: status %d\n%s", pg.path, code, body)
					continue
				}
				for _, w := range pg.want {
					if !strings.Contains(body, w) {
						t.Errorf("GET %s: no %q in the page", pg.path, w)
					}
				}
				if strings.Contains(body, "<script>alert") {
					t.Errorf("GET %s: a payload reached the page unescaped", pg.path)
				}
			}
			// Unacked deliveries are held by a consumer: no buttons.
			_, body := b.get("/queues/emails?state=unacked")
			if strings.Contains(body, `data-action="retry"`) || strings.Contains(body, `data-action="delete"`) {
				t.Error("the unacked tab offers actions on deliveries a consumer holds")
			}
		})
	}
}

func TestDownloadAndTruncation(t *testing.T) {
	f := fakeWithData()
	big := strings.Repeat("0123456789", 1000) // 10,000 bytes
	f.add("thumbs", redq.DeliveryInfo{ID: "bb02", State: redq.StateRejected, Payload: []byte(big)})
	b := newBrowser(t, mustHandler(t, f, Options{MaxPayload: 2000}), "")
	code, body := b.get("/queues/thumbs/deliveries/bb02")
	if code != http.StatusOK || !strings.Contains(body, `data-field="truncated"`) || !strings.Contains(body, "first 2.0 KiB of 9.8 KiB") {
		t.Fatalf("delivery page of a large payload: %d, truncation note missing", code)
	}
	if strings.Contains(body, big) {
		t.Error("the delivery page shows a payload above MaxPayload whole")
	}
	resp, err := b.c.Get(b.base + "/queues/thumbs/deliveries/bb02/payload")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if string(got) != big || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Errorf("download: %d bytes, disposition %q; want the whole payload as an attachment", len(got), resp.Header.Get("Content-Disposition"))
	}
}

func TestActions(t *testing.T) {
	f := fakeWithData()
	b := newBrowser(t, mustHandler(t, f, Options{EnableActions: true}), "")
	tok := b.token("/queues/emails?state=rejected")
	back := "/queues/emails?state=rejected"
	steps := []struct {
		action string
		form   url.Values
		call   string
	}{
		{"retry", url.Values{"id": {"aa02"}}, "retry emails aa02"},
		{"delete", url.Values{"id": {"aa01"}}, "delete emails aa01"},
		{"run-now", url.Values{"key": {"user-7"}}, "run-now emails user-7"},
		{"pause", url.Values{}, "paused=true emails"},
		{"resume", url.Values{}, "paused=false emails"},
		{"purge", url.Values{"state": {"delayed"}}, "purge emails delayed"},
	}
	for _, s := range steps {
		s.form.Set("csrf", tok)
		s.form.Set("back", back)
		code, loc := b.post("/queues/emails/actions/"+s.action, s.form)
		if code != http.StatusSeeOther || loc != back {
			t.Fatalf("%s: status %d, location %q; want 303 to %s", s.action, code, loc, back)
		}
		if calls := f.actions(); calls[len(calls)-1] != s.call {
			t.Fatalf("%s: source saw %v, want last %q", s.action, calls, s.call)
		}
		// The next page shows what happened, once.
		_, body := b.get(back)
		if !strings.Contains(body, `data-field="flash"`) {
			t.Errorf("%s: no message after the redirect", s.action)
		}
		if _, body := b.get(back); strings.Contains(body, `data-field="flash"`) {
			t.Errorf("%s: the message shows twice", s.action)
		}
	}
	if _, body := b.get("/queues/emails?state=ready"); !strings.Contains(body, `data-id="aa02"`) {
		t.Error("the retried delivery is not in ready")
	}
}

func TestActionOnMovedDelivery(t *testing.T) {
	f := fakeWithData()
	b := newBrowser(t, mustHandler(t, f, Options{EnableActions: true}), "")
	tok := b.token("/queues/emails?state=rejected")
	form := url.Values{"csrf": {tok}, "id": {"aa02"}}
	if code, _ := b.post("/queues/emails/actions/retry", form); code != http.StatusSeeOther {
		t.Fatalf("first retry: %d", code)
	}
	// The page still shows the button; a second click finds it moved.
	code, body := b.post("/queues/emails/actions/retry", form)
	if code != http.StatusConflict || !strings.Contains(body, "moved meanwhile") || !strings.Contains(body, "Nothing was changed") {
		t.Fatalf("retry of a delivery that moved: %d\n%s", code, body)
	}
	if n := len(f.actions()); n != 1 {
		t.Errorf("%d actions carried out, want 1", n)
	}
	code, body = b.post("/queues/emails/actions/cancel", url.Values{"csrf": {tok}, "key": {"nokey"}})
	if code != http.StatusConflict || !strings.Contains(body, "Key nokey") {
		t.Errorf("cancel of a missing key: %d", code)
	}
}

func TestActionsRefused(t *testing.T) {
	t.Run("read-only", func(t *testing.T) {
		f := fakeWithData()
		b := newBrowser(t, mustHandler(t, f, Options{}), "")
		code, body := b.get("/queues/emails?state=rejected")
		if code != http.StatusOK || strings.Contains(body, "data-action=") || strings.Contains(body, `name="csrf"`) {
			t.Errorf("a read-only page offers actions (status %d)", code)
		}
		for _, a := range actions {
			code, _ := b.post("/queues/emails/actions/"+a, url.Values{"id": {"aa02"}, "key": {"user-7"}, "state": {"rejected"}})
			if code != http.StatusForbidden {
				t.Errorf("read-only %s: status %d, want 403", a, code)
			}
		}
		if calls := f.actions(); len(calls) != 0 {
			t.Errorf("read-only dashboard carried out %v", calls)
		}
	})
	t.Run("csrf", func(t *testing.T) {
		f := fakeWithData()
		b := newBrowser(t, mustHandler(t, f, Options{EnableActions: true}), "")
		tok := b.token("/queues/emails")
		other := newBrowser(t, mustHandler(t, f, Options{EnableActions: true}), "")
		otherTok := other.token("/queues/emails")
		cases := map[string]url.Values{
			"no token":                 {"id": {"aa02"}},
			"empty token":              {"id": {"aa02"}, "csrf": {""}},
			"garbage":                  {"id": {"aa02"}, "csrf": {"zz"}},
			"another handler's token":  {"id": {"aa02"}, "csrf": {otherTok}},
			"token with a bit flipped": {"id": {"aa02"}, "csrf": {flip(tok)}},
		}
		for name, form := range cases {
			if code, _ := b.post("/queues/emails/actions/retry", form); code != http.StatusForbidden {
				t.Errorf("%s: status %d, want 403", name, code)
			}
		}
		// A token is bound to its cookie: without the cookie it is void.
		bare := &http.Client{}
		resp, err := bare.PostForm(b.base+"/queues/emails/actions/retry", url.Values{"id": {"aa02"}, "csrf": {tok}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("token without its cookie: status %d, want 403", resp.StatusCode)
		}
		// A cross-site form post is refused even with the token.
		code, _ := b.do(http.MethodPost, "/queues/emails/actions/retry", url.Values{"id": {"aa02"}, "csrf": {tok}}, http.Header{"Sec-Fetch-Site": {"cross-site"}})
		if code != http.StatusForbidden {
			t.Errorf("cross-site post: status %d, want 403", code)
		}
		if calls := f.actions(); len(calls) != 0 {
			t.Errorf("refused requests carried out %v", calls)
		}
		// GET on an action is not an action.
		if code, _ := b.get("/queues/emails/actions/retry?id=aa02"); code != http.StatusNotFound {
			t.Errorf("GET on an action: %d, want 404", code)
		}
		if calls := f.actions(); len(calls) != 0 {
			t.Errorf("GET on an action carried out %v", calls)
		}
	})
}

func flip(tok string) string {
	c := byte('0')
	if tok[0] == '0' {
		c = '1'
	}
	return string(c) + tok[1:]
}

func TestBadInput(t *testing.T) {
	f := fakeWithData()
	b := newBrowser(t, mustHandler(t, f, Options{EnableActions: true}), "")
	tok := b.token("/queues/emails")
	cases := []struct {
		method, path string
		form         url.Values
		status       int
		want         []string
	}{
		{"GET", "/queues/emails?state=dead", nil, 400, []string{"ready", "delayed", "rejected", "unacked", "keyed"}},
		{"GET", "/queues/emails?limit=0", nil, 400, []string{"from 1 to 1000"}},
		{"GET", "/queues/emails?limit=x", nil, 400, []string{"from 1 to 1000"}},
		{"GET", "/queues/emails?cursor=bad", nil, 400, []string{"cursor"}},
		{"GET", "/queues/no%20such", nil, 400, []string{"queue name"}},
		{"GET", "/queues/nosuch", nil, 404, []string{"No such queue", "emails", "thumbs"}},
		{"GET", "/queues/emails/deliveries/xyz!", nil, 400, []string{"delivery id"}},
		{"GET", "/queues/emails/deliveries/ffff", nil, 404, []string{"Delivery not found"}},
		{"GET", "/queues/emails/deliveries/xyz!/payload", nil, 400, []string{"delivery id"}},
		{"GET", "/?page=0", nil, 400, []string{"page number"}},
		{"GET", "/nothing/here", nil, 404, []string{"Page not found"}},
		{"GET", "/rounds/nosuch", nil, 404, []string{"No such round"}},
		{"POST", "/queues/emails/actions/explode", url.Values{"csrf": {tok}}, 400, []string{"pause", "resume", "purge", "retry", "delete", "run-now", "cancel"}},
		{"POST", "/queues/emails/actions/purge", url.Values{"csrf": {tok}, "state": {"unacked"}}, 400, []string{"ready", "delayed", "rejected"}},
		{"POST", "/queues/emails/actions/retry", url.Values{"csrf": {tok}, "id": {"not-hex"}}, 400, []string{"delivery id"}},
	}
	for _, c := range cases {
		code, body := b.do(c.method, c.path, c.form, nil)
		if code != c.status {
			t.Errorf("%s %s: status %d, want %d\n%s", c.method, c.path, code, c.status, body)
			continue
		}
		if !strings.Contains(body, "<html") {
			t.Errorf("%s %s: not a page", c.method, c.path)
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s %s: no %q in the answer", c.method, c.path, w)
			}
		}
	}
	if calls := f.actions(); len(calls) != 0 {
		t.Errorf("bad requests carried out %v", calls)
	}
}

func TestRedisDown(t *testing.T) {
	f := fakeWithData()
	b := newBrowser(t, mustHandler(t, f, Options{Refresh: MinRefresh}), "")
	poll := http.Header{pollHeader: {"1"}}
	for _, path := range []string{"/", "/queues/emails?state=rejected", "/connections"} {
		if code, _ := b.get(path); code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
	}
	f.setDown(errFakeDown)
	time.Sleep(MinRefresh) // past the overview's shared read
	for _, path := range []string{"/", "/queues/emails?state=rejected", "/connections", "/queues/emails/deliveries/aa02"} {
		code, body := b.get(path)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "Redis cannot be read") || !strings.Contains(body, "connection refused") {
			t.Errorf("GET %s with Redis down: status %d, or no banner", path, code)
		}
		if !strings.Contains(body, "<html") {
			t.Errorf("GET %s with Redis down: not a page", path)
		}
	}
	// The last numbers stay, greyed.
	_, body := b.get("/")
	if !strings.Contains(body, `data-queue="emails"`) || !strings.Contains(body, `id="live" class="stale"`) {
		t.Error("overview with Redis down: the last numbers are not shown greyed")
	}
	_, body = b.get("/queues/emails?state=rejected")
	if !strings.Contains(body, `data-id="aa02"`) || !strings.Contains(body, `id="live" class="stale"`) {
		t.Error("queue page with Redis down: the last list is not shown greyed")
	}
	// The browser's refresh gets the same as JSON.
	code, js := b.do("GET", "/", nil, poll)
	var r pollReply
	if err := json.Unmarshal([]byte(js), &r); err != nil || code != http.StatusServiceUnavailable || r.Down == "" || !r.Stale || !strings.Contains(r.HTML, "emails") {
		t.Errorf("refresh with Redis down: %d %+v (%v)", code, r, err)
	}
	// A page never seen before still answers with a page.
	code, body = b.get("/queues/thumbs")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "Redis cannot be read") {
		t.Errorf("new page with Redis down: %d", code)
	}
	f.setDown(nil)
	time.Sleep(MinRefresh)
	code, js = b.do("GET", "/", nil, poll)
	r = pollReply{}
	if err := json.Unmarshal([]byte(js), &r); err != nil || code != http.StatusOK || r.Down != "" || r.Stale {
		t.Errorf("refresh after Redis came back: %d %+v (%v)", code, r, err)
	}
}

func TestOverviewPagesAndFilter(t *testing.T) {
	f := newFakeSource()
	for i := range 250 {
		f.add(queueName(i), redq.DeliveryInfo{ID: "01", State: redq.StateReady})
	}
	b := newBrowser(t, mustHandler(t, f, Options{}), "")
	_, body := b.get("/")
	if n := strings.Count(body, "data-queue="); n != QueuesPerPage {
		t.Errorf("first page shows %d queues, want %d", n, QueuesPerPage)
	}
	if !strings.Contains(body, "page 1 of 3") {
		t.Error("no pager on the overview of 250 queues")
	}
	_, body = b.get("/?page=3")
	if n := strings.Count(body, "data-queue="); n != 50 {
		t.Errorf("last page shows %d queues, want 50", n)
	}
	_, body = b.get("/?filter=q-012")
	if n := strings.Count(body, "data-queue="); n != 10 {
		t.Errorf("filter q-012 shows %d queues, want 10", n)
	}
}

func queueName(i int) string { return fmt.Sprintf("q-%04d", i) }

func TestOptions(t *testing.T) {
	bad := []Options{
		{Refresh: time.Millisecond}, {Refresh: 2 * time.Hour}, {PageSize: -1}, {PageSize: MaxPageSize + 1},
		{MaxPayload: -5}, {Timeout: -1}, {PathPrefix: "redq"}, {PathPrefix: "/redq/"},
	}
	for _, o := range bad {
		if _, err := newHandler(newFakeSource(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil inspector accepted")
	}
	if !slices.Contains(actions, "pause") {
		t.Error("actions lost pause")
	}
}

func TestFormatDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-1: "—", 1500 * time.Microsecond: "2ms", 1500 * time.Millisecond: "1.5s", time.Minute: "1m",
		90 * time.Second: "1m30s", time.Hour: "1h0m", 90 * time.Minute: "1h30m",
	} {
		if got := formatDur(d); got != want {
			t.Errorf("formatDur(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestLastMinuteRates(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 30, 15, 0, time.UTC) // a quarter into the minute
	pts := []redq.RatePoint{
		{Minute: now.Truncate(time.Minute).Add(-2 * time.Minute), Published: 6000},
		{Minute: now.Truncate(time.Minute).Add(-time.Minute), Published: 120, Acked: 60},
		{Minute: now.Truncate(time.Minute), Published: 30, Rejected: 6},
	}
	r, ok := lastMinuteRates(pts, now)
	// 30 this minute + three quarters of 120 = 120 in the last 60s: 2/s.
	if !ok || r[0] != 2 || r[1] != 0.75 || r[2] != 0.1 {
		t.Errorf("rates %v, %v; want [2 0.75 0.1]", r, ok)
	}
	if _, ok := lastMinuteRates(nil, now); ok {
		t.Error("rates from no history")
	}
}

func TestActionRedirectStaysInside(t *testing.T) {
	for _, prefix := range []string{"", "/redq"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			f := fakeWithData()
			b := newBrowser(t, mustHandler(t, f, Options{EnableActions: true, PathPrefix: prefix}), prefix)
			tok := b.token("/queues/emails")
			overview := prefix + "/"
			cases := map[string]string{
				prefix + "/queues/emails?state=rejected": prefix + "/queues/emails?state=rejected",
				prefix + "/":                             prefix + "/",
				"/\t/evil.example":                       overview,
				"/\n/evil.example":                       overview,
				"/\r/evil.example":                       overview,
				"/\x7f/evil.example":                     overview,
				"/\x00/evil.example":                     overview,
				"//evil.example":                         overview,
				"/\\evil.example":                        overview,
				"/%2F/evil.example":                      overview,
				"https://evil.example/":                  overview,
				"http:/evil.example":                     overview,
				"javascript:alert(1)":                    overview,
				"evil.example":                           overview,
				"":                                       overview,
				prefix + "/../../elsewhere":              overview,
				prefix + "/%2e%2e/elsewhere":             overview,
				prefix + "/queues/emails\t/x":            overview,
			}
			if prefix != "" {
				cases["/queues/emails"] = overview // outside the prefix
				cases["/redqx/"] = overview
			}
			for back, want := range cases {
				code, loc := b.post("/queues/emails/actions/pause", url.Values{"csrf": {tok}, "back": {back}})
				if code != http.StatusSeeOther || loc != want {
					t.Errorf("back %q: status %d, location %q; want 303 to %q", back, code, loc, want)
				}
			}
		})
	}
}

// An action on a queue that is not open is a 404 listing the open queues,
// as the GET pages answer, not a 409 "moved meanwhile".
func TestActionOnUnknownQueue(t *testing.T) {
	f := fakeWithData()
	b := newBrowser(t, mustHandler(t, f, Options{EnableActions: true}), "")
	tok := b.token("/queues/emails")
	for action, form := range map[string]url.Values{
		"retry":   {"id": {"aa02"}},
		"delete":  {"id": {"aa01"}},
		"run-now": {"key": {"user-7"}},
		"cancel":  {"key": {"user-7"}},
		"pause":   {},
		"resume":  {},
		"purge":   {"state": {"rejected"}},
	} {
		form.Set("csrf", tok)
		code, body := b.post("/queues/nosuch/actions/"+action, form)
		if code != http.StatusNotFound || !strings.Contains(body, "No such queue") || !strings.Contains(body, "emails") || !strings.Contains(body, "thumbs") || strings.Contains(body, "moved meanwhile") {
			t.Errorf("%s on an unknown queue: status %d, want 404 listing the open queues\n%s", action, code, body)
		}
	}
	if calls := f.actions(); len(calls) != 0 {
		t.Errorf("actions on an unknown queue carried out %v", calls)
	}
	// A delivery that moved in a queue that is open is still a 409.
	if code, body := b.post("/queues/emails/actions/retry", url.Values{"csrf": {tok}, "id": {"ffff"}}); code != http.StatusConflict || !strings.Contains(body, "moved meanwhile") {
		t.Errorf("retry of a missing delivery in an open queue: %d, want 409", code)
	}
}

// rowActions returns the data-action values of the row of delivery id.
func rowActions(t *testing.T, body, id string) []string {
	t.Helper()
	i := strings.Index(body, `<tr data-id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no row %s in the page", id)
	}
	row := body[i:]
	row = row[:strings.Index(row, "</tr>")]
	var out []string
	for _, m := range regexp.MustCompile(`data-action="([a-z-]+)"`).FindAllStringSubmatch(row, -1) {
		out = append(out, m[1])
	}
	return out
}

// A keyed item waiting in ready or delayed is offered the keyed actions
// (run now, cancel), not retry and delete by id; other rows keep theirs.
func TestKeyedRowActions(t *testing.T) {
	f := fakeWithData()
	f.add("emails", redq.DeliveryInfo{ID: "aa06", State: redq.StateDelayed, Key: "user-8", Payload: []byte("digest"), DueAt: time.Now().Add(time.Hour)})
	f.add("emails", redq.DeliveryInfo{ID: "aa07", State: redq.StateReady, Key: "user-9", Payload: []byte("digest")})
	b := newBrowser(t, mustHandler(t, f, Options{EnableActions: true}), "")
	for _, c := range []struct {
		path, id string
		want     []string
	}{
		{"/queues/emails?state=delayed", "aa06", []string{"run-now", "cancel"}},
		{"/queues/emails?state=delayed", "aa03", []string{"retry", "delete"}},
		{"/queues/emails?state=ready", "aa07", []string{"run-now", "cancel"}},
		{"/queues/emails?state=ready", "aa01", []string{"delete"}},
		{"/queues/emails?state=keyed", "aa04", []string{"run-now", "cancel"}},
		{"/queues/emails?state=rejected", "aa02", []string{"retry", "delete"}},
	} {
		_, body := b.get(c.path)
		if got := rowActions(t, body, c.id); !slices.Equal(got, c.want) {
			t.Errorf("%s row %s: actions %v, want %v", c.path, c.id, got, c.want)
		}
		if c.want[0] == "run-now" && !strings.Contains(body, `name="key" value="`) {
			t.Errorf("%s: the keyed actions carry no key", c.path)
		}
	}
	// The delivery page offers the same.
	for id, want := range map[string][]string{"aa06": {"run-now", "cancel"}, "aa07": {"run-now", "cancel"}, "aa03": {"retry", "delete"}} {
		_, body := b.get("/queues/emails/deliveries/" + id)
		var got []string
		for _, m := range regexp.MustCompile(`data-action="([a-z-]+)"`).FindAllStringSubmatch(body, -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("delivery page %s: actions %v, want %v", id, got, want)
		}
	}
	// And the button works: cancel by the row's key.
	tok := b.token("/queues/emails?state=delayed")
	if code, _ := b.post("/queues/emails/actions/cancel", url.Values{"csrf": {tok}, "key": {"user-8"}}); code != http.StatusSeeOther {
		t.Errorf("cancel of the keyed delayed row: %d", code)
	}
}

// Replicas given the same Options.Secret accept each other's forms; with
// their own random secrets (the default) or different ones, they do not.
func TestSharedSecret(t *testing.T) {
	secret := []byte(strings.Repeat("s", MinSecretLen))
	f := fakeWithData()
	a := newBrowser(t, mustHandler(t, f, Options{EnableActions: true, Secret: secret}), "")
	tok := a.token("/queues/emails")
	// The browser goes to another replica with the same cookie jar: cookies
	// do not depend on the port.
	replica := func(opts Options) *browser {
		r := newBrowser(t, mustHandler(t, f, opts), "")
		r.c = a.c
		return r
	}
	same := Options{EnableActions: true, Secret: slices.Clone(secret)}
	secret[0] = 'x' // the handler kept its own copy
	if code, loc := replica(same).post("/queues/emails/actions/pause", url.Values{"csrf": {tok}}); code != http.StatusSeeOther {
		t.Errorf("a replica with the same secret: %d %s, want 303", code, loc)
	}
	for name, opts := range map[string]Options{
		"default (random) secret": {EnableActions: true},
		"another secret":          {EnableActions: true, Secret: []byte(strings.Repeat("t", MinSecretLen))},
	} {
		if code, _ := replica(opts).post("/queues/emails/actions/resume", url.Values{"csrf": {tok}}); code != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", name, code)
		}
	}
	if calls := f.actions(); !slices.Equal(calls, []string{"paused=true emails"}) {
		t.Errorf("actions carried out: %v, want only the pause", calls)
	}
	for _, s := range [][]byte{{}, []byte("short")} {
		if _, err := newHandler(newFakeSource(), Options{Secret: s}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Secret of %d bytes: %v, want ErrInvalidOptions", len(s), err)
		}
	}
}

// A queue's rate limit shows on its overview row and its page; a queue
// without one shows none.
func TestRateLimitShown(t *testing.T) {
	f := fakeWithData()
	f.queue("emails").info.RateLimit = redq.RateLimit{N: 100, Per: time.Second}
	b := newBrowser(t, mustHandler(t, f, Options{}), "")
	for _, path := range []string{"/", "/queues/emails"} {
		_, body := b.get(path)
		if !strings.Contains(body, `data-field="rate-limit"`) || !strings.Contains(body, ">100/1s<") {
			t.Errorf("GET %s: no rate limit 100/1s in the page", path)
		}
	}
	if _, body := b.get("/queues/thumbs"); strings.Contains(body, `data-field="rate-limit"`) {
		t.Error("GET /queues/thumbs: a rate limit shown for a queue without one")
	}
}

// A queue's groups show on its overview row and its page: groups pending
// and running, K and the per-group rate; a queue without grouped work
// shows none.
func TestGroupsShown(t *testing.T) {
	f := fakeWithData()
	info := &f.queue("emails").info
	info.GroupsPending, info.GroupsRunning, info.GroupConcurrency = 4, 2, 3
	info.GroupRateLimit = redq.RateLimit{N: 5, Per: time.Minute}
	b := newBrowser(t, mustHandler(t, f, Options{}), "")
	for _, path := range []string{"/", "/queues/emails"} {
		_, body := b.get(path)
		if !strings.Contains(body, `data-field="groups"`) || !strings.Contains(body, ">groups 4/2 K=3 5/1m0s<") {
			t.Errorf("GET %s: no groups 4/2 K=3 5/1m0s in the page", path)
		}
	}
	if _, body := b.get("/queues/thumbs"); strings.Contains(body, `data-field="groups"`) {
		t.Error("GET /queues/thumbs: groups shown for a queue without grouped work")
	}
}
