package redq

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Port of rmq v5's stats_test.go (see rmq_compat_helpers_test.go).

// rmq's TestStats: the stats page in rmq's layout (Stats.GetHtml) shows
// each queue's ready, rejected, connection, unacked and consumer counts,
// and each consuming connection's.
func TestRmqStats(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ns := namespace()
		connection := rmqOpen(t, b, "stats-conn", ns)
		_, err := NewCleaner(connection).Clean()
		mustNil(t, err)

		rmqOpen(t, b, "stats-conn1", ns)
		conn2 := rmqOpen(t, b, "stats-conn2", ns)
		q1, err := conn2.OpenQueue("stats-q1")
		mustNil(t, err)
		_, err = q1.PurgeReady()
		mustNil(t, err)
		mustNil(t, q1.Publish("stats-d1"))
		q2, err := conn2.OpenQueue("stats-q2")
		mustNil(t, err)
		_, err = q2.PurgeReady()
		mustNil(t, err)
		consumer := NewTestConsumer("hand-A")
		consumer.AutoAck = false
		mustNil(t, q2.StartConsuming(10, time.Millisecond))
		_, err = q2.AddConsumer("stats-cons1", consumer)
		mustNil(t, err)
		mustNil(t, q2.Publish("stats-d2"))
		mustNil(t, q2.Publish("stats-d3"))
		mustNil(t, q2.Publish("stats-d4"))
		// rmq sleeps 2ms here and counts on the consumer having all three
		// by then; waiting for them makes that so.
		consumedN(t, consumer, 3)
		mustNil(t, consumer.Deliveries()[0].Ack())
		mustNil(t, consumer.Deliveries()[1].Reject())
		_, err = q2.AddConsumer("stats-cons2", NewTestConsumer("hand-B"))
		mustNil(t, err)

		queues, err := connection.GetOpenQueues()
		mustNil(t, err)
		stats, err := CollectStats(queues, connection)
		mustNil(t, err)
		html := stats.GetHtml("", "")
		for _, re := range []string{
			".*queue.*ready.*connection.*unacked.*consumers.*q1.*1.*0.*0.*",
			".*queue.*ready.*connection.*unacked.*consumers.*q2.*0.*1.*1.*2.*conn2.*1.*2.*",
		} {
			if !regexp.MustCompile(re).MatchString(html) {
				t.Errorf("the stats page does not match %q:\n%s", re, html)
			}
		}

		stats, err = CollectStats([]string{"stats-q1", "stats-q2"}, connection)
		mustNil(t, err)
		for key := range stats.QueueStats {
			if !regexp.MustCompile("stats.*").MatchString(key) {
				t.Errorf("queue stats key %q", key)
			}
		}
		<-q2.StopConsuming()
	})
}

// rmq's exported constructors of stats, which rmq's tests do not call:
// programs that build pages of their own use them.
func TestRmqNewStats(t *testing.T) {
	s := NewStats()
	q := NewQueueStat(3, 1)
	if q.ReadyCount != 3 || q.RejectedCount != 1 || q.UnackedCount() != 0 || q.ConsumerCount() != 0 || q.ConnectionCount() != 0 {
		t.Fatalf("NewQueueStat(3, 1) = %+v", q)
	}
	if q.String() != "[ready:3 rejected:1 conn:map[]]" {
		t.Fatalf("QueueStat.String = %q", q.String())
	}
	s.QueueStats["q"] = q
	want := `<tr><td>q</td><td></td><td>3</td><td></td><td>1</td><td></td><td></td><td></td><td>0</td><td></td><td>0</td><td></td><td>0</td><td></td></tr><tr><td>-----</td></tr></table>`
	if html := s.GetHtml("", ""); !strings.Contains(html, want) {
		t.Fatalf("GetHtml = %s", html)
	}
}

// The page in rmq's layout, row by row, as rmq's GetHtml writes it (rmq's
// test checks it with the loose regular expressions above; programs that
// scrape the page read the rows). Not one of rmq's tests.
func TestRmqStatsHtmlLayout(t *testing.T) {
	s := Stats{
		QueueStats: QueueStats{
			"q2": {ReadyCount: 0, RejectedCount: 1, Connections: ConnectionStats{
				"c2-x": {Active: true, UnackedCount: 1, ConsumerCount: 2},
			}},
			"q1": {ReadyCount: 3, Connections: ConnectionStats{}},
		},
		OtherConnections: map[string]bool{"c1-y": false},
	}
	const header = `<tr><td>queue</td><td></td><td>ready</td><td></td><td>rejected</td><td></td><td></td><td></td>` +
		`<td>connections</td><td></td><td>unacked</td><td></td><td>consumers</td><td></td></tr>`
	const q1 = `<tr><td>q1</td><td></td><td>3</td><td></td><td>0</td><td></td><td></td><td></td><td>0</td><td></td><td>0</td><td></td><td>0</td><td></td></tr>`
	const q2 = `<tr><td>q2</td><td></td><td>0</td><td></td><td>1</td><td></td><td></td><td></td><td>1</td><td></td><td>1</td><td></td><td>2</td><td></td></tr>` +
		`<tr style="color:lightgrey"><td></td><td></td><td></td><td></td><td></td><td></td><td>✓</td><td></td><td>c2-x</td><td></td><td>1</td><td></td><td>2</td><td></td></tr>`
	const others = `<tr><td>-----</td></tr>` +
		`<tr style="color:lightgrey"><td></td><td></td><td></td><td></td><td></td><td></td><td>✗</td><td></td><td>c1-y</td><td></td><td></td><td></td><td></td><td></td></tr>`
	want := `<html><body><table style="font-family:monospace">` + header + q1 + q2 + others + `</table></body></html>`
	if got := s.GetHtml("", ""); got != want {
		t.Errorf("GetHtml:\n got %s\nwant %s", got, want)
	}
	want = `<html><head><meta http-equiv="refresh" content="5"><body><table style="font-family:monospace">` +
		header + `<tr><td>q1</td><td></td><td>3</td><td></td><td>0</td><td></td><td></td><td></td><td>0</td><td></td><td>0</td><td></td><td>0</td><td></td></tr>` +
		`<tr><td>q2</td><td></td><td>0</td><td></td><td>1</td><td></td><td></td><td></td><td>1</td><td></td><td>1</td><td></td><td>2</td><td></td></tr>` +
		`</table></body></html>`
	if got := s.GetHtml("condensed", "5"); got != want {
		t.Errorf("GetHtml condensed:\n got %s\nwant %s", got, want)
	}
}
