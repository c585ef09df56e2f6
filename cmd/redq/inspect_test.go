package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redq/redq"
)

// world is a namespace holding data of every kind: ready, delayed
// (one with a large payload), rejected (with a reason) and unacked (held by
// a dead connection) deliveries, a keyed item, a timer set and a round.
type world struct {
	tg       target
	conn     redq.Connection // the live connection that made it
	rejected string          // id of the rejected delivery
	unacked  string          // id of one delivery the dead connection holds
	dead     string          // the dead connection
	big      []byte          // payload of the large delayed delivery
}

func newWorld(t *testing.T, tg target) world {
	t.Helper()
	ctx := context.Background()
	w := world{tg: tg}
	w.dead = deadHolder(t, tg, "jobs", 1)
	conn := tg.open(t, "producer")
	w.conn = conn
	q, err := conn.OpenQueue("jobs")
	if err != nil {
		t.Fatal(err)
	}
	// One delivery to reject, with the reason in its header as a
	// handler's retry policy leaves it.
	h := http.Header{}
	h.Set(redq.HeaderError, "boom: upstream timeout")
	if err := q.Put(ctx, []byte("to reject"), redq.Header(h)); err != nil {
		t.Fatal(err)
	}
	m, err := q.Take(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w.rejected = m.ID()
	if err := m.Reject(); err != nil {
		t.Fatal(err)
	}
	if err := q.Publish("alpha", "beta"); err != nil {
		t.Fatal(err)
	}
	if err := q.Put(ctx, []byte("later"), redq.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	w.big = bytes.Repeat([]byte("0123456789"), 500)
	if err := q.Put(ctx, w.big, redq.Delay(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Upsert(ctx, "user:42", []byte("reindex"), redq.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	timers, err := conn.OpenTimers("reminders")
	if err != nil {
		t.Fatal(err)
	}
	if err := timers.Set(ctx, "invoice:7", time.Hour); err != nil {
		t.Fatal(err)
	}
	round, err := conn.OpenRound("feeds", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := round.Add(ctx, "https://a.example/rss", nil); err != nil {
		t.Fatal(err)
	}
	return w
}

// page runs "redq inspect --json" and decodes it.
func (tg target) page(t *testing.T, queue string, more ...string) pageJSON {
	t.Helper()
	out := mustRedq(t, tg.args("inspect", append([]string{queue, "--json"}, more...)...)...)
	var p pageJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return p
}

func (tg target) queues(t *testing.T) map[string]redq.QueueInfo {
	t.Helper()
	out := mustRedq(t, tg.args("queues", "--json")...)
	var qs []redq.QueueInfo
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	m := map[string]redq.QueueInfo{}
	for _, q := range qs {
		m[q.Name] = q
	}
	return m
}

func payloads(p pageJSON) []string {
	var out []string
	for _, d := range p.Items {
		if d.Payload != nil {
			out = append(out, *d.Payload)
		}
	}
	return out
}

func TestInspectCommands(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		w := newWorld(t, tg)

		jobs := tg.queues(t)["jobs"]
		if jobs.Ready != 2 || jobs.Rejected != 1 || jobs.Unacked != 1 || jobs.Paused {
			t.Errorf("queues --json: jobs %+v, want 2 ready, 1 rejected, 1 unacked, not paused", jobs)
		}
		text := mustRedq(t, tg.args("queues")...)
		if !regexp.MustCompile(`(?m)^QUEUE\s+READY\s+DELAYED\s+UNACKED\s+REJECTED`).MatchString(text) ||
			!regexp.MustCompile(`(?m)^jobs\s+2\s+\d+\s+1\s+1\s`).MatchString(text) {
			t.Errorf("queues:\n%s", text)
		}

		// Ready, a page at a time: the cursor leads to the rest, once.
		p := tg.page(t, "jobs", "--limit", "1")
		if len(p.Items) != 1 || p.Total != 2 || p.Next == "" {
			t.Fatalf("first page %+v, want 1 of 2 and a cursor", p)
		}
		p2 := tg.page(t, "jobs", "--limit", "1", "--cursor", p.Next)
		got := append(payloads(p), payloads(p2)...)
		if len(got) != 2 || got[0] == got[1] || !strings.Contains("alpha beta", got[0]) || !strings.Contains("alpha beta", got[1]) {
			t.Errorf("two pages of ready: %q", got)
		}
		text = mustRedq(t, tg.args("inspect", "jobs")...)
		if !strings.Contains(text, "alpha") || !strings.Contains(text, "beta") || !strings.Contains(text, `2 of 2 ready in queue "jobs"; no further page`) {
			t.Errorf("inspect jobs:\n%s", text)
		}

		// Rejected, with its reason; flags may follow the queue.
		p = tg.page(t, "jobs", "--state", "rejected")
		if len(p.Items) != 1 || p.Items[0].ID != w.rejected || !strings.Contains(p.Items[0].Reason, "upstream timeout") {
			t.Errorf("rejected page %+v, want %s with its reason", p, w.rejected)
		}
		text = mustRedq(t, tg.args("inspect", "jobs", "--state", "rejected")...)
		if !strings.Contains(text, w.rejected) || !strings.Contains(text, "boom: upstream timeout") {
			t.Errorf("inspect --state rejected:\n%s", text)
		}

		// Delayed: the large payload is cut, with its size.
		p = tg.page(t, "jobs", "--state", "delayed", "--max-payload", "100")
		var bigID string
		for _, d := range p.Items {
			if d.PayloadSize == len(w.big) {
				bigID = d.ID
				if !d.Truncated || d.Payload == nil || len(*d.Payload) != 100 || d.DueAt == nil {
					t.Errorf("the large delayed delivery: %+v", d)
				}
			}
		}
		if bigID == "" {
			t.Fatalf("no large delivery among the delayed: %+v", p)
		}

		// Search by payload text.
		p = tg.page(t, "jobs", "--search", "alp")
		if got := payloads(p); len(got) != 1 || got[0] != "alpha" {
			t.Errorf("--search alp: %q", got)
		}

		// Unacked: the dead connection's delivery, by connection.
		p = tg.page(t, "jobs", "--state", "unacked", "--connection", w.dead)
		if len(p.Items) != 1 || p.Items[0].Connection != w.dead {
			t.Errorf("unacked of %s: %+v", w.dead, p)
		}
		w.unacked = p.Items[0].ID

		// Keyed items, by key.
		p = tg.page(t, "jobs", "--state", "keyed")
		if len(p.Items) != 1 || p.Items[0].Key != "user:42" {
			t.Errorf("keyed: %+v", p)
		}

		// One delivery; the whole payload to a file.
		text = mustRedq(t, tg.args("delivery", "jobs", w.rejected)...)
		for _, want := range []string{"state:", "rejected", "reason:", "boom: upstream timeout", "payload:\nto reject"} {
			if !strings.Contains(text, want) {
				t.Errorf("delivery %s does not show %q:\n%s", w.rejected, want, text)
			}
		}
		file := filepath.Join(t.TempDir(), "payload")
		mustRedq(t, tg.args("delivery", "jobs", bigID, "--payload-out", file)...)
		if b, err := os.ReadFile(file); err != nil || !bytes.Equal(b, w.big) {
			t.Errorf("--payload-out wrote %d bytes (%v), want the %d of the payload", len(b), err, len(w.big))
		}
		if out := mustRedq(t, tg.args("delivery", "jobs", bigID, "--payload-out", "-")...); out != string(w.big) {
			t.Errorf("--payload-out - wrote %d bytes, want the payload alone", len(out))
		}

		text = mustRedq(t, tg.args("connections")...)
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w.dead) + `\s+dead\s+none\s+jobs\s+1\s+`).MatchString(text) {
			t.Errorf("connections does not show %s dead holding 1 of jobs:\n%s", w.dead, text)
		}
		text = mustRedq(t, tg.args("timers")...)
		if !regexp.MustCompile(`(?m)^reminders\s+1\s+0\s*$`).MatchString(text) {
			t.Errorf("timers:\n%s", text)
		}
		text = mustRedq(t, tg.args("rounds")...)
		if !regexp.MustCompile(`(?m)^feeds\s+5m0s\s+none\s+1\s+`).MatchString(text) {
			t.Errorf("rounds:\n%s", text)
		}
		// Last: the round's items (a skip here leaves the checks above run).
		var rp roundPageJSON
		if err := json.Unmarshal([]byte(mustRedq(t, tg.args("rounds", "--round", "feeds", "--json")...)), &rp); err != nil || rp.Total != 1 || len(rp.Items) != 1 {
			t.Errorf("rounds --round feeds --json: %+v, %v; want its one item", rp, err)
		}
	})
}

func TestInspectBadInput(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		newWorld(t, tg)
		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			// A queue that is not open is the user's mistake: the error
			// names the open queues.
			{[]string{"inspect", "nope"}, 2, `no queue "nope" is open in namespace "` + tg.ns + `"; open queues: jobs`},
			{[]string{"inspect", "nope", "--namespace", tg.ns + "-empty"}, 2, `no queue "nope" is open in namespace "` + tg.ns + `-empty": no queues are open`},
			{[]string{"delivery", "nope", "00000000000000000000000000000000"}, 2, "open queues: jobs"},
			{[]string{"retry", "nope", "00000000000000000000000000000000"}, 2, "open queues: jobs"},
			{[]string{"delete", "nope", "00000000000000000000000000000000"}, 2, "open queues: jobs"},
			{[]string{"purge", "nope", "--state", "ready"}, 2, "open queues: jobs"},
			{[]string{"purge", "nope", "--state", "ready", "--yes"}, 2, "open queues: jobs"},
			{[]string{"pause", "nope"}, 2, "open queues: jobs"},
			{[]string{"resume", "nope"}, 2, "open queues: jobs"},
			{[]string{"run-now", "nope", "k"}, 2, "open queues: jobs"},
			{[]string{"cancel", "nope", "k"}, 2, "open queues: jobs"},
			{[]string{"return-rejected", "--queue", "nope"}, 2, "open queues: jobs"},
			{[]string{"purge-rejected", "--queue", "nope"}, 2, "open queues: jobs"},
			{[]string{"inspect", "a:b"}, 2, "queue"},
			{[]string{"inspect", "jobs", "--state", "dead"}, 2, "ready, delayed, unacked, rejected, keyed"},
			{[]string{"inspect", "jobs", "--limit", "0"}, 2, "--limit must be from 1 to 1000"},
			{[]string{"inspect", "jobs", "--limit", "1001"}, 2, "--limit must be from 1 to 1000"},
			{[]string{"inspect", "jobs", "--connection", "x"}, 2, "--connection goes with --state unacked"},
			{[]string{"inspect", "jobs", "extra"}, 2, `unexpected argument "extra"`},
			{[]string{"inspect"}, 2, "missing QUEUE"},
			{[]string{"delivery", "jobs"}, 2, "missing ID"},
			{[]string{"delivery", "jobs", "not-hex"}, 2, "id"},
			{[]string{"delivery", "jobs", "00000000000000000000000000000000"}, 1, "not found"},
			{[]string{"purge", "jobs"}, 2, "--state is required: one of ready, delayed, rejected"},
			{[]string{"purge", "jobs", "--state", "unacked", "--yes"}, 2, "ready, delayed, rejected"},
			{[]string{"purge", "jobs", "--state", "ready"}, 2, "refusing to purge without --yes: it would delete the 2 ready deliveries"},
			{[]string{"retry", "jobs"}, 2, "missing ID"},
			{[]string{"pause"}, 2, "missing QUEUE"},
		} {
			t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
				code, stdout, stderr := redqRun(t, tg.args(tc.args[0], tc.args[1:]...)...)
				if code != tc.code || !strings.Contains(stderr, tc.want) {
					t.Errorf("exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, tc.code, tc.want, stdout, stderr)
				}
				if tc.code == 2 && !strings.Contains(stderr, "usage: redq "+tc.args[0]) {
					t.Errorf("a usage error without the usage line:\n%s", stderr)
				}
				if first, _, _ := strings.Cut(stderr, "\n"); !strings.Contains(first, tc.want) {
					t.Errorf("the error is not on one line:\n%s", stderr)
				}
				if n := strings.Count(stderr, "redq:"); n > 0 {
					t.Errorf("the library's prefix is repeated in %q", stderr)
				}
			})
		}
		if q := tg.queues(t)["jobs"]; q.Ready != 2 || q.Paused {
			t.Errorf("bad input changed the queue: %+v", q)
		}
		if names := tg.stats(t).Names(); !slices.Equal(names, []string{"jobs"}) {
			t.Errorf("queues %v after commands on a queue that is not open, want only jobs", names)
		}
	})
}

// libStat reads a queue's counts through the library's CollectStats on
// the world's connection, apart from the commands under test.
func (w world) libStat(t *testing.T) redq.QueueStat {
	t.Helper()
	s, err := w.conn.CollectStatsContext(context.Background(), []string{"jobs"})
	if err != nil {
		t.Fatal(err)
	}
	return s.QueueStats["jobs"]
}

func TestActCommands(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		w := newWorld(t, tg)

		// Retry: rejected to ready, once.
		if out := mustRedq(t, tg.args("retry", "jobs", w.rejected)...); !strings.Contains(out, "is ready now") {
			t.Errorf("retry: %q", out)
		}
		if q := w.libStat(t); q.ReadyCount != 3 || q.RejectedCount != 0 {
			t.Errorf("after retry: %+v", q)
		}
		code, _, stderr := redqRun(t, tg.args("retry", "jobs", w.rejected)...)
		if code != 1 || !strings.Contains(stderr, w.rejected) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("retry of a delivery that moved: exit %d, %q; want 1 and one line naming it", code, stderr)
		}
		if q := w.libStat(t); q.ReadyCount != 3 {
			t.Errorf("the failed retry changed the queue: %+v", q)
		}

		// Delete it from ready.
		if out := mustRedq(t, tg.args("delete", "jobs", w.rejected)...); !strings.Contains(out, "deleted delivery "+w.rejected) {
			t.Errorf("delete: %q", out)
		}
		if q := w.libStat(t); q.ReadyCount != 2 {
			t.Errorf("after delete: %+v", q)
		}

		// A live consumer's delivery is not the CLI's to act on.
		w.unacked = tg.page(t, "jobs", "--state", "unacked").Items[0].ID
		if code, _, stderr := redqRun(t, tg.args("delete", "jobs", w.unacked)...); code == 0 {
			t.Errorf("delete of an unacked delivery succeeded: %q", stderr)
		}
		if q := w.libStat(t); q.UnackedCount() != 1 {
			t.Errorf("after the refused delete: %+v", q)
		}

		// Keyed: run now makes it due now; cancel removes it.
		if out := mustRedq(t, tg.args("run-now", "jobs", "user:42")...); !strings.Contains(out, `keyed item "user:42" of queue "jobs" is due now`) {
			t.Errorf("run-now: %q", out)
		}
		p := tg.page(t, "jobs", "--state", "keyed")
		if len(p.Items) != 1 || p.Items[0].DueAt == nil || time.Until(*p.Items[0].DueAt) > time.Minute {
			t.Errorf("after run-now: %+v", p)
		}
		if out := mustRedq(t, tg.args("cancel", "jobs", "user:42")...); !strings.Contains(out, "cancelled") {
			t.Errorf("cancel: %q", out)
		}
		if p := tg.page(t, "jobs", "--state", "keyed"); len(p.Items) != 0 {
			t.Errorf("after cancel: %+v", p)
		}
		if code, _, _ := redqRun(t, tg.args("cancel", "jobs", "user:42")...); code != 1 {
			t.Errorf("cancel of a key with nothing pending: exit %d, want 1", code)
		}

		// Pause and resume.
		if out := mustRedq(t, tg.args("pause", "jobs")...); !strings.Contains(out, `paused queue "jobs"`) {
			t.Errorf("pause: %q", out)
		}
		if !tg.queues(t)["jobs"].Paused || !w.libStat(t).Paused {
			t.Error("not paused after pause")
		}
		if text := mustRedq(t, tg.args("queues")...); !regexp.MustCompile(`(?m)^jobs(\s+\d+){5}\s+yes\s`).MatchString(text) {
			t.Errorf("queues does not show jobs paused:\n%s", text)
		}
		mustRedq(t, tg.args("resume", "jobs")...)
		if tg.queues(t)["jobs"].Paused || w.libStat(t).Paused {
			t.Error("paused after resume")
		}

		// Purge by state, only with --yes.
		if out := mustRedq(t, tg.args("purge", "jobs", "--state", "delayed", "--yes")...); !strings.Contains(out, `purged 2 delayed deliveries of queue "jobs"`) {
			t.Errorf("purge: %q", out)
		}
		if q := w.libStat(t); q.DelayedCount != 0 || q.ReadyCount != 2 {
			t.Errorf("after purge: %+v", q)
		}
		// A queue must be open to be paused: a mistyped name would
		// otherwise leave a pause behind that no one sees.
		if code, _, stderr := redqRun(t, tg.args("pause", "nope")...); code != 2 || !strings.Contains(stderr, "open queues: jobs") {
			t.Errorf("pause of an unknown queue: exit %d, %q; want 2 and the open queues", code, stderr)
		}
	})
}

// redq queues shows a queue's rate limit, in the table and as JSON.
func TestQueuesShowRateLimit(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		conn := tg.open(t, "producer")
		if _, err := conn.OpenQueue("sms", redq.WithRateLimit(100, time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.OpenQueue("mail"); err != nil {
			t.Fatal(err)
		}
		qs := tg.queues(t)
		if got := qs["sms"].RateLimit; got != (redq.RateLimit{N: 100, Per: time.Second}) {
			t.Errorf("queues --json: sms limit %v, want 100/1s", got)
		}
		if got := qs["mail"].RateLimit; !got.IsZero() {
			t.Errorf("queues --json: mail limit %v, want none", got)
		}
		text := mustRedq(t, tg.args("queues")...)
		if !regexp.MustCompile(`(?m)^QUEUE\s.*\sPAUSED\s+RATE\s`).MatchString(text) ||
			!regexp.MustCompile(`(?m)^sms\s.*\sno\s+100/1s\s`).MatchString(text) ||
			!regexp.MustCompile(`(?m)^mail\s.*\sno\s+-\s`).MatchString(text) {
			t.Errorf("queues:\n%s", text)
		}
	})
}

// redq queues shows a queue's groups: pending/running, K and the
// per-group rate, and "-" for a queue without grouped work.
func TestQueuesShowGroups(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		conn := tg.open(t, "producer")
		q, err := conn.OpenQueue("tenants", redq.WithGroupConcurrency(2), redq.WithGroupRateLimit(10, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range []string{"a", "a", "b"} {
			if err := q.Put(context.Background(), []byte("job"), redq.Group(g)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.OpenQueue("mail"); err != nil {
			t.Fatal(err)
		}
		qs := tg.queues(t)
		if got := qs["tenants"]; got.GroupsPending != 2 || got.GroupConcurrency != 2 || got.GroupRateLimit != (redq.RateLimit{N: 10, Per: time.Second}) {
			t.Errorf("queues --json: tenants %+v, want 2 groups pending, K=2, 10/1s", got)
		}
		text := mustRedq(t, tg.args("queues")...)
		if !regexp.MustCompile(`(?m)^QUEUE\s.*\sRATE\s+GROUPS\s`).MatchString(text) ||
			!regexp.MustCompile(`(?m)^tenants\s.*\s-\s+2/0 K=2 10/1s\s`).MatchString(text) ||
			!regexp.MustCompile(`(?m)^mail\s.*\sno\s+-\s+-\s`).MatchString(text) {
			t.Errorf("queues:\n%s", text)
		}
	})
}

// Pending grouped deliveries show in the ready listing and in show with
// their group (text and JSON).
func TestInspectGrouped(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		ctx := context.Background()
		conn := tg.open(t, "producer")
		q, err := conn.OpenQueue("mail")
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Put(ctx, []byte("for tenant 42"), redq.Group("tenant-42")); err != nil {
			t.Fatal(err)
		}
		p := tg.page(t, "mail")
		if len(p.Items) != 1 || p.Items[0].Group != "tenant-42" {
			t.Fatalf("ready page %+v, want the grouped delivery with its group", p)
		}
		text := mustRedq(t, tg.args("inspect", "mail")...)
		if !regexp.MustCompile(`(?m)^ID\s+PRIORITY\s+GROUP\s`).MatchString(text) ||
			!regexp.MustCompile(`(?m)^`+p.Items[0].ID+`\s+0\s+tenant-42\s`).MatchString(text) {
			t.Errorf("inspect mail:\n%s", text)
		}
		text = mustRedq(t, tg.args("delivery", "mail", p.Items[0].ID)...)
		if !regexp.MustCompile(`(?m)^group:\s+tenant-42$`).MatchString(text) {
			t.Errorf("show:\n%s", text)
		}
	})
}
