package redqprom

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redq/redq"
)

// DefaultBuckets are the latency buckets of the Observer's histograms, in
// seconds: from 100µs (a settle on a local Redis) to 10s (a call resent
// through an outage).
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}

// Observer is a redq.Observer that measures the calls of the connections
// it is given to (redq.WithObserver) as Prometheus metrics: fetch, settle,
// publish and heartbeat latency histograms, the deliveries fetched, the
// failed calls and the time of the last good heartbeat. It is a
// prometheus.Collector too: register it. One Observer may serve several
// connections of a process.
type Observer struct {
	fetch, settle, publish, heartbeat *prometheus.HistogramVec
	fetched, errors                   *prometheus.CounterVec
	lastBeat                          prometheus.Gauge
}

// NewObserver returns an Observer whose histograms use buckets (in
// seconds), or DefaultBuckets when there are none. It returns no error:
// buckets that are not in strictly increasing order are a programming
// error and panic here, rather than on the first observation inside a
// consumer. For example:
//
//	obs := redqprom.NewObserver()
//	prometheus.MustRegister(obs)
//	conn, err := redq.Open(ctx, "worker", client, nil, redq.WithObserver(obs))
func NewObserver(buckets ...float64) *Observer {
	if len(buckets) == 0 {
		buckets = DefaultBuckets
	}
	for i := 1; i < len(buckets); i++ {
		if !(buckets[i] > buckets[i-1]) {
			panic(fmt.Sprintf("redqprom: NewObserver: buckets must be in strictly increasing order, got %v", buckets))
		}
	}
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	return &Observer{
		fetch:     hist("redq_fetch_duration_seconds", "How long a fetch (moving deliveries from ready to the connection's unacked storage) took.", "queue"),
		settle:    hist("redq_settle_duration_seconds", "How long an ack, reject or push took, from the call to Redis's answer (group commit wait and resends included).", "queue", "op"),
		publish:   hist("redq_publish_duration_seconds", "How long a publish call took, from the call to Redis's answer.", "queue"),
		heartbeat: hist("redq_heartbeat_duration_seconds", "How long a heartbeat refresh took."),
		fetched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redq_fetched_deliveries_total",
			Help: "Deliveries this process fetched."}, []string{"queue"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redq_call_errors_total",
			Help: "Calls to Redis that failed, by call (fetch, settle, publish, heartbeat) and queue (empty for heartbeats)."}, []string{"call", "queue"}),
		lastBeat: prometheus.NewGauge(prometheus.GaugeOpts{Name: "redq_heartbeat_last_success_timestamp_seconds",
			Help: "When a heartbeat last succeeded (Unix time)."}),
	}
}

// Observe records one call (see redq.Observer).
func (o *Observer) Observe(ev redq.Event) {
	secs := ev.Duration.Seconds()
	switch ev.Kind {
	case redq.EventFetch:
		o.fetch.WithLabelValues(ev.Queue).Observe(secs)
		if ev.Count > 0 {
			o.fetched.WithLabelValues(ev.Queue).Add(float64(ev.Count))
		}
	case redq.EventSettle:
		o.settle.WithLabelValues(ev.Queue, ev.Op).Observe(secs)
	case redq.EventPublish:
		o.publish.WithLabelValues(ev.Queue).Observe(secs)
	case redq.EventHeartbeat:
		o.heartbeat.WithLabelValues().Observe(secs)
		if ev.Err == nil {
			o.lastBeat.Set(float64(time.Now().UnixNano()) / 1e9)
		}
	default:
		return
	}
	if ev.Err != nil {
		o.errors.WithLabelValues(ev.Kind.String(), ev.Queue).Inc()
	}
}

// Describe sends the descriptors of the Observer's metrics.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range o.collectors() {
		c.Describe(ch)
	}
}

// Collect sends the Observer's metrics.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	for _, c := range o.collectors() {
		c.Collect(ch)
	}
}

func (o *Observer) collectors() []prometheus.Collector {
	return []prometheus.Collector{o.fetch, o.settle, o.publish, o.heartbeat, o.fetched, o.errors, o.lastBeat}
}
