package redq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The stats page marks its rows with data-queue, data-connection or
// data-other and its number cells with data-field, so the tests read it
// with a few regular expressions instead of an HTML parser.
var (
	pageRowRe  = regexp.MustCompile(`(?s)<tr([^>]*)>(.*?)</tr>`)
	pageAttrRe = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)
	pageCellRe = regexp.MustCompile(`(?s)<td data-field="([a-z]+)"[^>]*>(.*?)</td>`)
	pageTagRe  = regexp.MustCompile(`<[^>]*>`)
)

// pageRow is one table row of the stats page: its attributes (class,
// data-queue, data-connection, data-other) and its cells by data-field,
// as text with tags removed and entities decoded.
type pageRow struct {
	attrs map[string]string
	cells map[string]string
}

func parseStatsPage(t *testing.T, body string) []pageRow {
	t.Helper()
	var rows []pageRow
	for _, m := range pageRowRe.FindAllStringSubmatch(body, -1) {
		r := pageRow{attrs: map[string]string{}, cells: map[string]string{}}
		for _, a := range pageAttrRe.FindAllStringSubmatch(m[1], -1) {
			r.attrs[a[1]] = html.UnescapeString(a[2])
		}
		for _, c := range pageCellRe.FindAllStringSubmatch(m[2], -1) {
			text := pageTagRe.ReplaceAllString(c[2], "")
			r.cells[c[1]] = strings.TrimSpace(html.UnescapeString(text))
		}
		rows = append(rows, r)
	}
	return rows
}

// number returns the leading number of a cell ("1 1 dead" -> "1").
func (r pageRow) number(field string) string {
	f := strings.Fields(r.cells[field])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func (r pageRow) wantNumbers(t *testing.T, what string, want map[string]string) {
	t.Helper()
	for field, w := range want {
		if got := r.number(field); got != w {
			t.Errorf("%s: %s = %q, want %q (cells %v)", what, field, got, w, r.cells)
		}
	}
}

// pageRows splits the rows by kind: queue rows in page order, connection
// rows by queue and connection name, other connections by name.
func pageRows(t *testing.T, body string) (queues []pageRow, conns map[string]map[string]pageRow, others map[string]pageRow) {
	t.Helper()
	conns, others = map[string]map[string]pageRow{}, map[string]pageRow{}
	for _, r := range parseStatsPage(t, body) {
		switch {
		case r.attrs["data-other"] != "":
			others[r.attrs["data-other"]] = r
		case r.attrs["data-connection"] != "":
			q := r.attrs["data-queue"]
			if conns[q] == nil {
				conns[q] = map[string]pageRow{}
			}
			conns[q][r.attrs["data-connection"]] = r
		case r.attrs["data-queue"] != "":
			queues = append(queues, r)
		}
	}
	return queues, conns, others
}

func handlerGet(t *testing.T, h http.Handler, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	res := rec.Result()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

// handlerFixture is a namespace with two queues in known states:
//
//	jobs:  ready 4, rejected 3, delayed 6, expired 7, unacked 5, held by
//	       a dead connection
//	other: ready 0, unacked 3, held by the live handler connection with
//	       2 consumers
//
// plus a publisher connection that consumes nothing.
type handlerFixture struct {
	handler                  http.Handler
	dead, consumer, producer string // connection names
}

func newHandlerFixture(t *testing.T, b backend) handlerFixture {
	t.Helper()
	ns := namespace()
	producer := openT(t, b, "producer", ns)
	worker := openT(t, b, "worker", ns)
	server := openT(t, b, "server", ns)

	jobsP := openQueue(t, producer, "jobs")
	otherP := openQueue(t, producer, "other")

	// A worker takes all 10 jobs, rejects 3, acks 2, and dies holding 5.
	if err := jobsP.Publish("j0", "j1", "j2", "j3", "j4", "j5", "j6", "j7", "j8", "j9"); err != nil {
		t.Fatal(err)
	}
	held := hold(t, openQueue(t, worker, "jobs"), 10, 10)
	for _, d := range held[:3] {
		if err := d.Reject(); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range held[3:5] {
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	// It dies: no heartbeat, and no marker of a clean stop.
	<-worker.StopAllConsuming()
	if err := b.client.Del(context.Background(), worker.keys.stopped(worker.Name())).Err(); err != nil {
		t.Fatal(err)
	}
	if err := jobsP.Publish("k0", "k1", "k2", "k3"); err != nil {
		t.Fatal(err)
	}
	scheduleAndExpire(t, b, jobsP, 6, 7)

	// The server consumes "other" with two consumers that hold 3.
	other := openQueue(t, server, "other")
	if err := other.StartConsuming(10, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	h := holder{ch: make(chan Message, 100)}
	for range 2 {
		if _, err := other.AddConsumer("holder", h); err != nil {
			t.Fatal(err)
		}
	}
	if err := otherP.Publish("o0", "o1", "o2"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-h.ch:
		case <-time.After(15 * time.Second):
			t.Fatal("the other queue's consumers got nothing")
		}
	}
	return handlerFixture{handler: NewHandler(server), dead: worker.Name(), consumer: server.Name(), producer: producer.Name()}
}

// scheduleAndExpire leaves q with delayed deliveries due in an hour and
// expired ones: published with a delay and a time to live of 1ms each, and
// found out of date by the cleaner's round on q (not a whole Clean, which
// would also return what dead connections hold). The round must come after
// both ran out by Redis's clock (a delivery promoted while its time to
// live still runs waits in ready until a fetch drops it): on miniredis the
// clock jumps a minute ahead; on real Redis the test waits until TIME has
// passed them.
func scheduleAndExpire(t *testing.T, b backend, q *redisQueue, delayed, expired int) {
	t.Helper()
	ctx := context.Background()
	for i := range delayed {
		if err := q.Put(ctx, []byte(fmt.Sprint("later ", i)), Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range expired {
		if err := q.Put(ctx, []byte(fmt.Sprint("stale ", i)), Delay(time.Millisecond), TTL(time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	if b.mini != nil {
		b.mini.SetTime(time.Now().Add(time.Minute))
	} else {
		published, err := b.client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "Redis's clock to pass the stale deliveries' expiry", func() bool {
			now, err := b.client.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			return now.Sub(published) > 10*time.Millisecond
		})
	}
	if _, err := q.maintain(ctx); err != nil {
		t.Fatal(err)
	}
	if s := mustStats(t, q.conn, q.name).QueueStats[q.name]; s.DelayedCount != int64(delayed) || s.ExpiredCount != int64(expired) {
		t.Fatalf("%s: delayed/expired = %d/%d after the cleaner's round, want %d/%d", q.name, s.DelayedCount, s.ExpiredCount, delayed, expired)
	}
}

func TestHandlerOnRedis(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newHandlerFixture(t, b)

		t.Run("html", func(t *testing.T) {
			res, body := handlerGet(t, f.handler, "/")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			if ct := res.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type = %q", ct)
			}
			if !strings.Contains(body, "<title>redq</title>") {
				t.Error("page has no title redq")
			}
			if strings.Contains(body, `http-equiv="refresh"`) {
				t.Error("page refreshes without ?refresh")
			}
			queues, conns, others := pageRows(t, body)
			if len(queues) != 2 || queues[0].attrs["data-queue"] != "jobs" || queues[1].attrs["data-queue"] != "other" {
				t.Fatalf("queue rows = %v, want jobs and other in that order", queues)
			}
			queues[0].wantNumbers(t, "jobs", map[string]string{"ready": "4", "rejected": "3", "delayed": "6", "expired": "7", "unacked": "5", "consumers": "0", "connections": "1"})
			queues[1].wantNumbers(t, "other", map[string]string{"ready": "0", "rejected": "0", "delayed": "0", "expired": "0", "unacked": "3", "consumers": "2", "connections": "1"})
			if !strings.Contains(body, `<td data-field="expired" class="nonzero-expired">7</td>`) {
				t.Error("jobs' expired cell is not highlighted")
			}
			if strings.Count(body, "nonzero-expired") != 2 { // the style rule and jobs
				t.Errorf("nonzero-expired appears %d times, want in the style and for jobs only", strings.Count(body, "nonzero-expired"))
			}
			wantAlignedColumns(t, body)
			if c := queues[0].cells["connections"]; !strings.Contains(c, "1 dead") {
				t.Errorf("jobs connections cell %q does not flag the dead connection", c)
			}
			if c := queues[1].cells["connections"]; strings.Contains(c, "dead") {
				t.Errorf("other connections cell %q flags a dead connection", c)
			}

			if len(conns["jobs"]) != 1 || len(conns["other"]) != 1 {
				t.Fatalf("connection rows = %v, want one per queue", conns)
			}
			dead, ok := conns["jobs"][f.dead]
			if !ok {
				t.Fatalf("no row for dead connection %s under jobs: %v", f.dead, conns["jobs"])
			}
			dead.wantNumbers(t, "dead connection", map[string]string{"status": "dead", "unacked": "5", "consumers": "0"})
			if !strings.Contains(dead.attrs["class"], "dead") {
				t.Errorf("dead connection row class %q is not marked dead", dead.attrs["class"])
			}
			live, ok := conns["other"][f.consumer]
			if !ok {
				t.Fatalf("no row for connection %s under other: %v", f.consumer, conns["other"])
			}
			live.wantNumbers(t, "live connection", map[string]string{"status": "active", "unacked": "3", "consumers": "2"})
			if strings.Contains(live.attrs["class"], "dead") {
				t.Errorf("live connection row class %q is marked dead", live.attrs["class"])
			}

			if len(others) != 1 {
				t.Fatalf("other connections = %v, want only the producer %s", others, f.producer)
			}
			if p, ok := others[f.producer]; !ok || p.cells["status"] != "active" {
				t.Errorf("producer %s in other connections: %v, %v; want active", f.producer, ok, p.cells)
			}
		})

		t.Run("condensed", func(t *testing.T) {
			res, body := handlerGet(t, f.handler, "/?layout=condensed")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			queues, conns, others := pageRows(t, body)
			if len(queues) != 2 {
				t.Fatalf("condensed page has %d queue rows, want 2", len(queues))
			}
			queues[0].wantNumbers(t, "jobs", map[string]string{"ready": "4", "rejected": "3", "delayed": "6", "expired": "7", "unacked": "5", "connections": "1"})
			wantAlignedColumns(t, body)
			if len(conns) != 0 || len(others) != 0 {
				t.Errorf("condensed page shows connection rows: %v, others %v", conns, others)
			}
			for _, name := range []string{f.dead, f.consumer, f.producer} {
				if strings.Contains(body, name) {
					t.Errorf("condensed page mentions connection %s", name)
				}
			}
			if !strings.Contains(body, "1 other connection") {
				t.Error("condensed page does not count the other connections")
			}
		})

		t.Run("json", func(t *testing.T) {
			res, body := handlerGet(t, f.handler, "/?format=json")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			var s Stats
			if err := json.Unmarshal([]byte(body), &s); err != nil {
				t.Fatalf("decode %s: %v", body, err)
			}
			jobs, other := s.QueueStats["jobs"], s.QueueStats["other"]
			if len(s.QueueStats) != 2 {
				t.Errorf("queues = %v, want jobs and other", s.Names())
			}
			if jobs.ReadyCount != 4 || jobs.RejectedCount != 3 || jobs.DelayedCount != 6 || jobs.ExpiredCount != 7 || jobs.UnackedCount() != 5 {
				t.Errorf("jobs = %d/%d/%d/%d/%d ready/rejected/delayed/expired/unacked, want 4/3/6/7/5",
					jobs.ReadyCount, jobs.RejectedCount, jobs.DelayedCount, jobs.ExpiredCount, jobs.UnackedCount())
			}
			if other.DelayedCount != 0 || other.ExpiredCount != 0 {
				t.Errorf("other = %d/%d delayed/expired, want 0/0", other.DelayedCount, other.ExpiredCount)
			}
			if cs, ok := jobs.Connections[f.dead]; !ok || cs.Active || cs.UnackedCount != 5 {
				t.Errorf("jobs connection %s = %+v (present %v), want dead with 5 unacked", f.dead, cs, ok)
			}
			if other.UnackedCount() != 3 || other.ConsumerCount() != 2 || !other.Connections[f.consumer].Active {
				t.Errorf("other = %+v, want 3 unacked, 2 consumers, %s active", other, f.consumer)
			}
			if len(s.OtherConnections) != 1 || !s.OtherConnections[f.producer] {
				t.Errorf("other connections = %v, want %s active", s.OtherConnections, f.producer)
			}
			// The totals are in the JSON too, for machines.
			var raw struct {
				Queues map[string]map[string]any `json:"queues"`
			}
			if err := json.Unmarshal([]byte(body), &raw); err != nil {
				t.Fatal(err)
			}
			for key, want := range map[string]float64{"ready": 4, "rejected": 3, "delayed": 6, "expired": 7, "unacked": 5} {
				if got := raw.Queues["jobs"][key]; got != want {
					t.Errorf(`JSON queues.jobs.%s = %v, want %v`, key, got, want)
				}
			}
		})

		t.Run("refresh", func(t *testing.T) {
			res, body := handlerGet(t, f.handler, "/?refresh=7&layout=condensed")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			if !strings.Contains(body, `<meta http-equiv="refresh" content="7">`) {
				t.Error("no refresh meta tag for ?refresh=7")
			}
			// The layout links keep the refresh.
			if !strings.Contains(body, `href="?refresh=7"`) {
				t.Error("the full-layout link drops the refresh")
			}
		})
	})
}

// wantAlignedColumns checks that every row of the queues table has as many
// cells as the header has columns, so that numbers sit under their names.
func wantAlignedColumns(t *testing.T, body string) {
	t.Helper()
	start, end := strings.Index(body, `<table id="queues">`), strings.Index(body, "</table>")
	if start < 0 || end < start {
		t.Fatal("no queues table")
	}
	cellRe := regexp.MustCompile(`<t[hd][ >]`)
	rows := pageRowRe.FindAllStringSubmatch(body[start:end], -1)
	if len(rows) < 2 {
		t.Fatalf("queues table has %d rows", len(rows))
	}
	columns := len(cellRe.FindAllString(rows[0][2], -1))
	for _, r := range rows[1:] {
		if n := len(cellRe.FindAllString(r[2], -1)); n != columns && !strings.Contains(r[2], "colspan") {
			t.Errorf("row%s has %d cells, the header %d columns", r[1], n, columns)
		}
	}
}

// handlerStubConn is a Connection that answers stats with whatever the test
// sets, including names no real queue can have, and counts the calls.
type handlerStubConn struct {
	queues   []string
	stats    Stats
	queueErr error
	statsErr error
	calls    int
	ctxSeen  []context.Context
}

func (c *handlerStubConn) OpenQueue(string, ...QueueOption) (Queue, error) {
	return nil, errors.New("stub")
}
func (c *handlerStubConn) OpenTimers(string) (Timers, error)       { return nil, errors.New("stub") }
func (c *handlerStubConn) OpenSchedules(string) (Schedules, error) { return nil, errors.New("stub") }
func (c *handlerStubConn) OpenRound(string, time.Duration, ...RoundOption) (Round, error) {
	return nil, errors.New("stub")
}
func (c *handlerStubConn) CollectStats(q []string) (Stats, error) {
	return c.CollectStatsContext(context.Background(), q)
}

func (c *handlerStubConn) CollectStatsContext(ctx context.Context, _ []string) (Stats, error) {
	c.calls++
	c.ctxSeen = append(c.ctxSeen, ctx)
	return c.stats, c.statsErr
}
func (c *handlerStubConn) GetOpenQueues() ([]string, error) {
	return c.GetOpenQueuesContext(context.Background())
}

func (c *handlerStubConn) GetOpenQueuesContext(ctx context.Context) ([]string, error) {
	c.calls++
	c.ctxSeen = append(c.ctxSeen, ctx)
	return c.queues, c.queueErr
}

func (c *handlerStubConn) StopAllConsuming() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

func TestHandlerBadQuery(t *testing.T) {
	for _, q := range []string{
		"refresh=0", "refresh=3601", "refresh=-5", "refresh=abc", "refresh=1.5", "refresh=%205",
		"layout=full", "layout=CONDENSED",
		"format=xml", "format=JSON",
	} {
		t.Run(q, func(t *testing.T) {
			stub := &handlerStubConn{}
			res, body := handlerGet(t, NewHandler(stub), "/?"+q)
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %q", res.StatusCode, body)
			}
			name := q[:strings.IndexByte(q, '=')]
			if !strings.Contains(body, "invalid "+name) {
				t.Errorf("body %q does not say which option is invalid", body)
			}
			if stub.calls != 0 {
				t.Errorf("a bad request read Redis %d times", stub.calls)
			}
		})
	}
	for _, q := range []string{"refresh=1", "refresh=3600", "layout=", "layout=condensed", "format=html", "format=json", "format=", "unknown=ignored"} {
		t.Run("ok "+q, func(t *testing.T) {
			stub := &handlerStubConn{stats: Stats{QueueStats: map[string]QueueStat{}, OtherConnections: map[string]bool{}}}
			if res, body := handlerGet(t, NewHandler(stub), "/?"+q); res.StatusCode != http.StatusOK {
				t.Errorf("status %d, want 200; body %q", res.StatusCode, body)
			}
		})
	}
}

func TestHandlerMethodNotAllowed(t *testing.T) {
	stub := &handlerStubConn{}
	rec := httptest.NewRecorder()
	NewHandler(stub).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") == "" {
		t.Errorf("POST: status %d, Allow %q; want 405 with Allow", rec.Code, rec.Header().Get("Allow"))
	}
	if stub.calls != 0 {
		t.Errorf("POST read Redis %d times", stub.calls)
	}
}

func TestHandlerRedisErrors(t *testing.T) {
	for name, stub := range map[string]*handlerStubConn{
		"list queues":   {queueErr: errors.New("redq: list queues: connection refused")},
		"collect stats": {queues: []string{"q"}, statsErr: errors.New("redq: collect stats: connection refused")},
	} {
		t.Run(name, func(t *testing.T) {
			for _, target := range []string{"/", "/?format=json"} {
				res, body := handlerGet(t, NewHandler(stub), target)
				if res.StatusCode != http.StatusInternalServerError {
					t.Errorf("%s: status %d, want 500", target, res.StatusCode)
				}
				if !strings.Contains(body, "connection refused") || strings.Contains(body, "<html") {
					t.Errorf("%s: body %q, want the plain error text", target, body)
				}
				if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
					t.Errorf("%s: Content-Type %q, want text/plain", target, ct)
				}
			}
		})
	}
}

// TestHandlerEscapesNames feeds the page names that real queues and
// connections cannot have (they are validated), to prove that the
// template escapes text and attributes: html/template, not text/template.
func TestHandlerEscapesNames(t *testing.T) {
	const evilQueue = `<script>alert("q")</script>`
	const evilConn = `c"><img src=x onerror=alert(1)>`
	stub := &handlerStubConn{
		queues: []string{evilQueue},
		stats: Stats{
			QueueStats: map[string]QueueStat{evilQueue: {
				ReadyCount:  1,
				Connections: map[string]ConnectionStat{evilConn: {Active: true, UnackedCount: 2, ConsumerCount: 1}},
			}},
			OtherConnections: map[string]bool{"<b>other</b>": false},
		},
	}
	res, body := handlerGet(t, NewHandler(stub), "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	for _, raw := range []string{"<script>alert", `"><img`, "<img src=x", "<b>other"} {
		if strings.Contains(body, raw) {
			t.Errorf("page contains unescaped %q", raw)
		}
	}
	queues, conns, others := pageRows(t, body)
	if len(queues) != 1 || queues[0].attrs["data-queue"] != evilQueue {
		t.Fatalf("queue rows %v: the escaped name does not round-trip", queues)
	}
	if _, ok := conns[evilQueue][evilConn]; !ok {
		t.Errorf("connection rows %v: the escaped connection name does not round-trip", conns)
	}
	if o, ok := others["<b>other</b>"]; !ok || o.cells["status"] != "dead" {
		t.Errorf("other connections %v: want <b>other</b> dead", others)
	}
}

func TestHandlerNoQueues(t *testing.T) {
	stub := &handlerStubConn{stats: Stats{QueueStats: map[string]QueueStat{}, OtherConnections: map[string]bool{}}}
	res, body := handlerGet(t, NewHandler(stub), "/")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "No queues") {
		t.Errorf("status %d, body without the empty note:\n%s", res.StatusCode, body)
	}
	// The note spans the whole table.
	if columns := strings.Count(body, `<th scope="col"`) - 2; !strings.Contains(body, fmt.Sprintf(`colspan="%d">No queues`, columns)) { // minus the other-connections table's two
		t.Errorf("the empty note does not span the %d columns:\n%s", columns, body)
	}
}

// TestHandlerUsesRequestContext checks that Redis is read in the request's
// context, so a client that goes away cancels the work.
func TestHandlerUsesRequestContext(t *testing.T) {
	type key struct{}
	stub := &handlerStubConn{queues: []string{"q"}, stats: Stats{QueueStats: map[string]QueueStat{"q": {}}}}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req = req.WithContext(context.WithValue(req.Context(), key{}, "request"))
	NewHandler(stub).ServeHTTP(httptest.NewRecorder(), req)
	if len(stub.ctxSeen) != 2 {
		t.Fatalf("%d Redis calls, want 2", len(stub.ctxSeen))
	}
	for i, ctx := range stub.ctxSeen {
		if ctx.Value(key{}) != "request" {
			t.Errorf("call %d did not get the request's context", i)
		}
	}
}

// The page and the JSON show per queue the keys pending, running and
// parked, and per timer set its pending timers and fires.
func TestHandlerShowsKeyedItemsAndTimers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "page", namespace())
		q := openQueue(t, c, "jobs")
		mustUpsert(t, q, "a", "1", Created)
		mustUpsert(t, q, "b", "2", Created, Delay(time.Hour))
		d := mustTake(t, q, time.Second)
		mustUpsert(t, q, d.Key(), "3", Queued)
		ts := openTimers(t, c, "reminders")
		if err := ts.Set(context.Background(), "x", time.Hour); err != nil {
			t.Fatal(err)
		}
		h := NewHandler(c)
		_, body := handlerGet(t, h, "/")
		for field, want := range map[string]string{"keyed-pending": "1", "keyed-running": "1", "keyed-parked": "1"} {
			re := regexp.MustCompile(`data-field="` + field + `">(\d+)<`)
			if m := re.FindStringSubmatch(body); m == nil || m[1] != want {
				t.Errorf("page %s = %v, want %s", field, m, want)
			}
		}
		var timers pageRow
		for _, r := range parseStatsPage(t, body) {
			if r.attrs["data-timers"] == "reminders" {
				timers = r
			}
		}
		timers.wantNumbers(t, "timer set row", map[string]string{"pending": "1", "firing": "0"})
		_, js := handlerGet(t, h, "/?format=json")
		var got struct {
			Queues map[string]struct {
				KeyedPending int64 `json:"keyedPending"`
				KeyedRunning int64 `json:"keyedRunning"`
				KeyedParked  int64 `json:"keyedParked"`
			} `json:"queues"`
			Timers map[string]TimerStat `json:"timers"`
		}
		if err := json.Unmarshal([]byte(js), &got); err != nil {
			t.Fatal(err)
		}
		if j := got.Queues["jobs"]; j.KeyedPending != 1 || j.KeyedRunning != 1 || j.KeyedParked != 1 {
			t.Errorf("JSON keyed counts %+v", j)
		}
		if got.Timers["reminders"] != (TimerStat{Pending: 1}) {
			t.Errorf("JSON timers %+v", got.Timers)
		}
		if s := mustStats(t, c, "jobs").String(); !strings.Contains(s, "keyed: 1 pending, 1 running, 1 parked") || !regexp.MustCompile(`(?m)^timer set +pending +firing\n^reminders +1 +0$`).MatchString(s) {
			t.Errorf("text stats:\n%s", s)
		}
	})
}

// A connection that stopped cleanly stays listed, as stopped, until a
// cleaner unlists it (as rmq keeps it listed, inactive).
func TestStoppedConnectionIsListedAsStoppedUntilACleanerRuns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		worker := openT(t, b, "worker", ns)
		idle := openT(t, b, "idle", ns)
		admin := openT(t, b, "admin", ns)
		if err := openQueue(t, admin, "jobs").Publish("a"); err != nil {
			t.Fatal(err)
		}
		hold(t, openQueue(t, worker, "jobs"), 1, 1)
		<-worker.StopAllConsuming()
		<-idle.StopAllConsuming()
		s := mustStats(t, admin, "jobs")
		cs, listed := s.QueueStats["jobs"].Connections[worker.Name()]
		if !listed || cs.Active || !cs.Stopped || cs.UnackedCount != 1 {
			t.Fatalf("stopped worker: listed %v, %+v", listed, cs)
		}
		if active, listed := s.OtherConnections[idle.Name()]; !listed || active || !s.StoppedConnections[idle.Name()] {
			t.Fatalf("stopped idle connection: listed %v, active %v, stopped %v", listed, active, s.StoppedConnections)
		}
		_, body := handlerGet(t, NewHandler(admin), "/")
		_, conns, others := pageRows(t, body)
		if got := conns["jobs"][worker.Name()].cells["status"]; got != "stopped" {
			t.Fatalf("page status of the stopped worker: %q", got)
		}
		if got := others[idle.Name()].cells["status"]; got != "stopped" {
			t.Fatalf("page status of the stopped idle connection: %q", got)
		}
		if n, err := NewCleaner(admin).Clean(); err != nil || n != 1 {
			t.Fatalf("clean: %d, %v", n, err)
		}
		s = mustStats(t, admin, "jobs")
		if _, listed := s.QueueStats["jobs"].Connections[worker.Name()]; listed {
			t.Fatal("the cleaner left the stopped worker listed")
		}
		if _, listed := s.OtherConnections[idle.Name()]; listed || len(s.StoppedConnections) != 0 {
			t.Fatalf("after the clean: others %v, stopped %v", s.OtherConnections, s.StoppedConnections)
		}
		if n, _ := b.client.Exists(context.Background(), worker.keys.stopped(worker.Name()), idle.keys.stopped(idle.Name())).Result(); n != 0 {
			t.Fatalf("%d stopped markers left after the clean", n)
		}
		wantCounts(t, admin, "jobs", 1, 0, 0)
	})
}

// The stats page shows a queue's rate limit, and its JSON carries it.
func TestHandlerShowsRateLimit(t *testing.T) {
	stub := &handlerStubConn{stats: Stats{QueueStats: map[string]QueueStat{
		"sms":  {RateLimit: RateLimit{N: 100, Per: time.Second}, Connections: ConnectionStats{}},
		"mail": {Connections: ConnectionStats{}},
	}, OtherConnections: map[string]bool{}}}
	_, body := handlerGet(t, NewHandler(stub), "/")
	if !strings.Contains(body, `data-field="rate-limit"`) || !strings.Contains(body, ">100/1s<") {
		t.Errorf("no rate limit 100/1s on the page:\n%s", body)
	}
	if n := strings.Count(body, `data-field="rate-limit"`); n != 1 {
		t.Errorf("%d rate limits shown, want only sms's", n)
	}
	_, body = handlerGet(t, NewHandler(stub), "/?format=json")
	var got struct {
		QueueStats map[string]struct {
			RateLimit RateLimit `json:"rateLimit"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || got.QueueStats["sms"].RateLimit != (RateLimit{100, time.Second}) {
		t.Errorf("no rate limit in the JSON:\n%s", body)
	}
}

// The stats page shows a queue's groups (see Group): the groups with
// pending deliveries and with deliveries in flight, K and the per-group
// rate; a queue without grouped work shows none.
func TestHandlerShowsGroups(t *testing.T) {
	stub := &handlerStubConn{stats: Stats{QueueStats: map[string]QueueStat{
		"tenants": {GroupsPending: 3, GroupsRunning: 1, GroupConcurrency: 2, GroupRateLimit: RateLimit{N: 10, Per: time.Second}, Connections: ConnectionStats{}},
		"mail":    {GroupConcurrency: 1, Connections: ConnectionStats{}},
	}, OtherConnections: map[string]bool{}}}
	_, body := handlerGet(t, NewHandler(stub), "/")
	if !strings.Contains(body, ">groups 3/1 K=2 10/1s<") {
		t.Errorf("no groups 3/1 K=2 10/1s on the page:\n%s", body)
	}
	if n := strings.Count(body, `data-field="groups"`); n != 1 {
		t.Errorf("%d queues show groups, want only tenants", n)
	}
}

// Stats count each schedule set (schedules, paused, the next tick), in the
// struct, its text form and on the stats page; a namespace without one has
// none.
func TestStatsShowScheduleSets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "sched-stats", namespace())
		if s := mustStats(t, c); s.ScheduleStats != nil {
			t.Fatalf("schedule stats %v before any set", s.ScheduleStats)
		}
		s := openSchedules(t, c, "nightly")
		mustSchedule(t, s, "report", "0 0 3 * * *", "report")
		mustSchedule(t, s, "cleanup", "0 30 3 * * *", "cleanup")
		if err := s.Pause(ctx, "cleanup"); err != nil {
			t.Fatal(err)
		}
		want := mustScheduleInfo(t, s, "report").Next
		st := mustStats(t, c).ScheduleStats["nightly"]
		if st.Schedules != 2 || st.Paused != 1 || !st.NextDue.Equal(want) {
			t.Fatalf("stats of nightly: %+v, want 2 schedules, 1 paused, next due %v", st, want)
		}
		if text := mustStats(t, c).String(); !regexp.MustCompile(`(?m)^nightly\s+2\s+1\s+0\s+0\s+` + regexp.QuoteMeta(want.UTC().Format(time.RFC3339)) + `$`).MatchString(text) {
			t.Errorf("text form:\n%s", text)
		}
		_, body := handlerGet(t, NewHandler(c), "/")
		if !strings.Contains(body, `data-schedules="nightly"`) || !strings.Contains(body, `<td data-field="paused">1</td>`) ||
			!strings.Contains(body, want.UTC().Format("2006-01-02 15:04:05 UTC")) {
			t.Errorf("no schedule set nightly (2 schedules, 1 paused) on the page:\n%s", body)
		}
	})
}
