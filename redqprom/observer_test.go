package redqprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redq/redq"
	"github.com/redq/redq/redqprom"
)

// The Observer turns a connection's calls into histograms and counters.
func TestObserverMetrics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		obs := redqprom.NewObserver()
		reg := prometheus.NewRegistry()
		reg.MustRegister(obs)
		conn, err := redq.Open(context.Background(), "observed", b.client, nil, namespace(),
			redq.WithObserver(obs), redq.WithHeartbeat(20*time.Millisecond, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-conn.StopAllConsuming() })
		q, err := conn.OpenQueue("jobs")
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := q.Publish("x"); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.StartConsuming(10, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		got := make(chan redq.Delivery, 3)
		if _, err := q.AddConsumerFunc("w", func(d redq.Delivery) { got <- d }); err != nil {
			t.Fatal(err)
		}
		for _, verb := range []func(redq.Delivery) error{redq.Delivery.Ack, redq.Delivery.Ack, redq.Delivery.Reject} {
			if err := verb(<-got); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for strings.Contains(scrape(t, reg), "\nredq_heartbeat_last_success_timestamp_seconds 0\n") {
			if time.Now().After(deadline) {
				t.Fatal("no heartbeat observed")
			}
			time.Sleep(5 * time.Millisecond)
		}
		body := scrape(t, reg)
		wantLines(t, body,
			`redq_fetched_deliveries_total{queue="jobs"} 3`,
			`redq_settle_duration_seconds_count{op="ack",queue="jobs"} 2`,
			`redq_settle_duration_seconds_count{op="reject",queue="jobs"} 1`,
			`redq_publish_duration_seconds_count{queue="jobs"} 3`,
		)
		if problems, err := testutil.CollectAndLint(obs); err != nil || len(problems) > 0 {
			t.Errorf("lint: %v %v", problems, err)
		}
	})
}

func TestObserverCountsErrors(t *testing.T) {
	obs := redqprom.NewObserver(0.001, 0.01)
	obs.Observe(redq.Event{Kind: redq.EventHeartbeat, Duration: time.Millisecond, Err: errors.New("down")})
	obs.Observe(redq.Event{Kind: redq.EventSettle, Queue: "q", Op: "ack", Duration: 5 * time.Millisecond, Err: errors.New("down")})
	obs.Observe(redq.Event{Kind: redq.EventKind(200)}) // a kind it does not know
	reg := prometheus.NewRegistry()
	reg.MustRegister(obs)
	wantLines(t, scrape(t, reg),
		`redq_call_errors_total{call="heartbeat",queue=""} 1`,
		`redq_call_errors_total{call="settle",queue="q"} 1`,
		`redq_settle_duration_seconds_bucket{op="ack",queue="q",le="0.01"} 1`,
		`redq_heartbeat_last_success_timestamp_seconds 0`,
	)
}

// Bad constructor arguments panic at once, in the constructor, rather than
// at the first observation or scrape.
func TestConstructorsPanicOnBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"unsorted buckets": func() { redqprom.NewObserver(0.1, 0.01) },
		"repeated bucket":  func() { redqprom.NewObserver(0.1, 0.1) },
		"nil source":       func() { redqprom.NewCollector(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.HasPrefix(s, "redqprom: ") {
					t.Fatalf("recovered %v, want a panic starting redqprom:", r)
				}
			}()
			f()
		})
	}
	// sorted buckets are taken
	redqprom.NewObserver(0.001, 0.01, 1).Observe(redq.Event{Kind: redq.EventHeartbeat, Duration: time.Millisecond})
}
