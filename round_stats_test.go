package redq

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The counts of a round, by the round's clock: items, due, oldest lag,
// hand-outs in all and per second, expired.
func TestRoundStats(t *testing.T) {
	forEachRoundEnv(t, func(t *testing.T, e roundEnv) {
		virtual := e.b == nil || e.b.mini != nil // the test moves the clock
		u := e.unit
		ctx := context.Background()
		r := e.open(t, "feeds", 6*u, RoundTTL(20*u))
		for _, id := range []string{"a", "b", "c"} {
			mustAdd(t, r, id, "", true)
		}
		mustNext(t, r, "a")
		e.advance(u)
		st := roundStat(t, e, "feeds")
		if st.ItemCount != 3 || st.DueCount != 2 || st.IssuedCount != 1 || st.Period != 6*u || st.TTL != 20*u {
			t.Fatalf("after one hand-out: %+v", st)
		}
		if virtual && st.OldestLag != u {
			t.Fatalf("oldest lag %s, want %s (b waited in the front line since it was added)", st.OldestLag, u)
		}
		e.advance(6 * u) // a is due again, for 1 unit; b and c wait for 7
		st = roundStat(t, e, "feeds")
		if st.DueCount != 3 {
			t.Fatalf("after a period: %+v", st)
		}
		if virtual && st.OldestLag != 7*u {
			t.Fatalf("oldest lag %s, want %s", st.OldestLag, 7*u)
		}
		got, err := r.NextBatch(ctx, 10, 0)
		if err != nil || len(got) != 3 {
			t.Fatalf("NextBatch = %v, %v", got, err)
		}
		st = roundStat(t, e, "feeds")
		if st.DueCount != 0 || st.OldestLag != 0 || st.IssuedCount != 4 {
			t.Fatalf("after handing out everything: %+v", st)
		}
		if virtual {
			e.advance(10 * time.Second) // the next rate window
			if st = roundStat(t, e, "feeds"); st.IssuedPerSecond != 0.3 {
				t.Fatalf("issued per second %v, want 0.3 (3 in the last 10 s window)", st.IssuedPerSecond)
			}
			e.advance(20 * time.Second)
			if st = roundStat(t, e, "feeds"); st.IssuedPerSecond != 0 {
				t.Fatalf("issued per second %v after 20 idle seconds, want 0", st.IssuedPerSecond)
			}
		}
		e.advance(14 * u) // 21 units since they were added
		if st = roundStat(t, e, "feeds"); st.ItemCount != 0 {
			t.Fatalf("after the TTL: %+v", st)
		}
		if e.b != nil {
			if _, err := NewCleaner(e.conn).Clean(); err != nil {
				t.Fatal(err)
			}
		}
		if st = roundStat(t, e, "feeds"); st.ExpiredCount != 3 {
			t.Fatalf("after cleaning: %+v", st)
		}
	})
}

// Rounds appear in the text form, in JSON (durations in ms) and on the
// stats page; without rounds, all three stay as they were.
func TestRoundStatsRendered(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "stats", namespace())
		openQueue(t, c, "jobs")
		h := NewHandler(c)
		s := mustStats(t, c, "jobs")
		raw, _ := json.Marshal(s)
		if s.RoundStats != nil || strings.Contains(string(raw), "rounds") || strings.Contains(s.String(), "round") {
			t.Fatalf("stats without rounds mention them: %s\n%s", raw, s)
		}
		if _, body := handlerGet(t, h, "/"); strings.Contains(body, `id="rounds"`) {
			t.Fatalf("the page without rounds has a rounds table:\n%s", body)
		}

		r, err := c.OpenRound("feeds", time.Minute, RoundTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		mustAdd(t, r, "a", "", true)
		mustAdd(t, r, "b", "", true)
		mustNext(t, r, "a")
		s = mustStats(t, c, "jobs")
		raw, err = json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var decoded struct {
			Rounds map[string]map[string]any `json:"rounds"`
		}
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{"periodMs": 60000, "ttlMs": 3600000, "items": 2, "due": 1, "issued": 1, "expired": 0}
		for k, v := range want {
			if decoded.Rounds["feeds"][k] != v {
				t.Errorf("JSON rounds.feeds.%s = %v, want %v (%s)", k, decoded.Rounds["feeds"][k], v, raw)
			}
		}
		for _, k := range []string{"oldestLagMs", "issuedPerSecond"} {
			if _, ok := decoded.Rounds["feeds"][k]; !ok {
				t.Errorf("JSON rounds.feeds lacks %s: %s", k, raw)
			}
		}
		var back Stats
		if err := json.Unmarshal(raw, &back); err != nil || back.RoundStats["feeds"] != s.RoundStats["feeds"] {
			t.Fatalf("JSON round trip: %+v, %v; want %+v", back.RoundStats, err, s.RoundStats)
		}
		if text := s.String(); !strings.Contains(text, "feeds") || !strings.Contains(text, "oldest lag") {
			t.Fatalf("text form without the round:\n%s", text)
		}

		_, body := handlerGet(t, h, "/")
		for _, want := range []string{`id="rounds"`, `data-round="feeds"`, `<td data-field="period">1m0s</td>`, `<td data-field="ttl">1h0m0s</td>`,
			`<td data-field="items">2</td>`, `<td data-field="due">1</td>`, `<td data-field="issued">1</td>`} {
			if !strings.Contains(body, want) {
				t.Errorf("page lacks %s:\n%s", want, body)
			}
		}
		_, body = handlerGet(t, h, "/?format=json")
		if !strings.Contains(body, `"rounds"`) || !strings.Contains(body, `"periodMs": 60000`) {
			t.Errorf("JSON page lacks the round:\n%s", body)
		}
		_, body = handlerGet(t, h, "/?layout=condensed")
		if !strings.Contains(body, `data-round="feeds"`) {
			t.Errorf("condensed page lacks the round:\n%s", body)
		}
	})
}

// A round whose oldest item waits longer than a period is marked on the
// page: the workers do not keep up.
func TestRoundLagIsMarked(t *testing.T) {
	p := newStatsPage(Stats{RoundStats: map[string]RoundStat{
		"slow": {Period: time.Second, OldestLag: 3 * time.Second},
		"fine": {Period: time.Second, OldestLag: time.Millisecond},
	}}, statsQuery{}, time.Now())
	var b strings.Builder
	if err := statsTemplate.Execute(&b, p); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	slow := page[strings.Index(page, `data-round="slow"`):]
	fine := page[strings.Index(page, `data-round="fine"`):]
	if !strings.Contains(slow[:strings.Index(slow, "</tr>")], `class="lagging"`) || strings.Contains(fine[:strings.Index(fine, "</tr>")], `class="lagging"`) {
		t.Fatalf("lag marks wrong:\n%s", page)
	}
}
