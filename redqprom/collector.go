// Package redqprom exports redq's state to Prometheus: a Collector that
// reads the counts kept in Redis on each scrape (correct across processes
// and restarts, whoever publishes and consumes), and an Observer that
// measures the calls one process makes (fetch, settle, heartbeat and
// publish latencies).
//
// It is a module of its own, so that redq itself does not depend on the
// Prometheus client. See docs/metrics.md for the metric list and the
// Grafana dashboard.
package redqprom

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redq/redq"
)

// Source is what a Collector reads on each scrape; *redq.Inspector is
// one. A Source that is also an OverviewSource is read with its one
// Overview call instead of the four.
type Source interface {
	Queues(ctx context.Context) ([]redq.QueueInfo, error)
	Connections(ctx context.Context) ([]redq.ConnectionInfo, error)
	Timers(ctx context.Context) (map[string]redq.TimerStat, error)
	Rounds(ctx context.Context) (map[string]redq.RoundStat, error)
}

// ScheduleSource is a Source that also reads the schedule sets, as
// *redq.Inspector's ScheduleSets does. A Collector reports the schedule
// metrics of an OverviewSource (from its Overview) or of a ScheduleSource;
// of a bare Source, none.
type ScheduleSource interface {
	ScheduleSets(ctx context.Context) (map[string]redq.ScheduleSetStat, error)
}

// OverviewSource is a Source that reads all four parts at once, as
// *redq.Inspector's Overview does in two round trips to Redis (the four
// separate reads take nine). A Collector over an OverviewSource calls
// only Overview.
type OverviewSource interface {
	Source
	Overview(ctx context.Context) (redq.Overview, error)
}

// DefaultTimeout bounds the Redis reads of one scrape.
const DefaultTimeout = 5 * time.Second

// Option configures a Collector.
type Option func(*Collector)

// WithTimeout bounds the Redis reads of one scrape. Default:
// DefaultTimeout. A d below a millisecond is ignored.
func WithTimeout(d time.Duration) Option {
	return func(c *Collector) {
		if d >= time.Millisecond {
			c.timeout = d
		}
	}
}

// WithoutConnections leaves out redq_connections, which costs a read of
// every connection's registrations per scrape. Default: included. Over an
// OverviewSource, which reads everything in one call, it leaves out the
// metric only.
func WithoutConnections() Option {
	return func(c *Collector) { c.connections = false }
}

// WithoutTimersAndRounds leaves out the timer and round metrics. Default:
// included. Over an OverviewSource it leaves out the metrics only.
func WithoutTimersAndRounds() Option {
	return func(c *Collector) { c.timersRounds = false }
}

// Collector is a prometheus.Collector over a Source (an *redq.Inspector):
// on each scrape it reads every queue's counts and totals, the
// connections, the timer sets, the rounds and the schedule sets (see
// ScheduleSource), and reports them as the
// redq_* metrics listed in docs/metrics.md. An OverviewSource is read in
// one call (two round trips to Redis for an Inspector, whatever the number
// of queues); another Source with its four reads, concurrently. When a
// read fails it reports redq_up 0 and what it could read (nothing when the
// one Overview call failed); the scrape itself does not fail.
type Collector struct {
	src          Source
	timeout      time.Duration
	connections  bool
	timersRounds bool

	up, scrapeSeconds                          *prometheus.Desc
	deliveries, keyedPending, paused           *prometheus.Desc
	consumers, queueConnections                *prometheus.Desc
	published, acked, rejected, retried        *prometheus.Desc
	conns                                      *prometheus.Desc
	timersPending, timersFiring                *prometheus.Desc
	roundItems, roundDue, roundLag, roundIssue *prometheus.Desc
	roundExpired                               *prometheus.Desc
	schedules, schedulesPaused, scheduleFired  *prometheus.Desc
}

// NewCollector returns a collector over src; register it with
// prometheus.MustRegister (or a registry of your own). One Collector per
// namespace: its metrics carry no namespace label (add one with
// prometheus.WrapRegistererWith when several are registered). It does not
// touch Redis and returns no error: Redis errors show at scrape time as
// redq_up 0. A nil src is a programming error and panics here, not at the
// first scrape; a nil Option panics too. For example:
//
//	prometheus.MustRegister(redqprom.NewCollector(inspector))
func NewCollector(src Source, opts ...Option) *Collector {
	if src == nil {
		panic("redqprom: NewCollector: nil Source")
	}
	q := []string{"queue"}
	c := &Collector{
		src: src, timeout: DefaultTimeout, connections: true, timersRounds: true,
		up:               prometheus.NewDesc("redq_up", "1 when the last scrape read everything from Redis, 0 when a read failed.", nil, nil),
		scrapeSeconds:    prometheus.NewDesc("redq_scrape_duration_seconds", "How long the scrape's Redis reads took.", nil, nil),
		deliveries:       prometheus.NewDesc("redq_queue_deliveries", "Deliveries in the queue by state: ready, delayed, unacked (taken, not settled) or rejected.", []string{"queue", "state"}, nil),
		keyedPending:     prometheus.NewDesc("redq_queue_keyed_pending", "Keys with a pending keyed item (also counted as ready or delayed).", q, nil),
		paused:           prometheus.NewDesc("redq_queue_paused", "1 while the queue is paused (no connection fetches from it), else 0.", q, nil),
		consumers:        prometheus.NewDesc("redq_queue_consumers", "Consumers of the queue, over every connection.", q, nil),
		queueConnections: prometheus.NewDesc("redq_queue_connections", "Connections registered for the queue.", q, nil),
		published:        prometheus.NewDesc("redq_queue_published_total", "Deliveries published to the queue since it was created (kept in Redis).", q, nil),
		acked:            prometheus.NewDesc("redq_queue_acked_total", "Deliveries acked since the queue was created (kept in Redis).", q, nil),
		rejected:         prometheus.NewDesc("redq_queue_rejected_total", "Deliveries rejected since the queue was created (kept in Redis).", q, nil),
		retried:          prometheus.NewDesc("redq_queue_retried_total", "Deliveries sent back for another attempt since the queue was created (kept in Redis).", q, nil),
		conns:            prometheus.NewDesc("redq_connections", "Registered connections by state: active, stopped (waiting for a cleaner) or dead (heartbeat gone).", []string{"state"}, nil),
		timersPending:    prometheus.NewDesc("redq_timers_pending", "Timers waiting to fire, per timer set.", []string{"timers"}, nil),
		timersFiring:     prometheus.NewDesc("redq_timers_firing", "Timer fires taken and not yet acked, per timer set.", []string{"timers"}, nil),
		roundItems:       prometheus.NewDesc("redq_round_items", "Items of the round whose time to live has not run out.", []string{"round"}, nil),
		roundDue:         prometheus.NewDesc("redq_round_due", "Items of the round due now.", []string{"round"}, nil),
		roundLag:         prometheus.NewDesc("redq_round_oldest_lag_seconds", "How long the round's most overdue item has been due.", []string{"round"}, nil),
		roundIssue:       prometheus.NewDesc("redq_round_issued_total", "Hand-outs of the round's items since it was created.", []string{"round"}, nil),
		roundExpired:     prometheus.NewDesc("redq_round_expired_total", "Items of the round removed because their time to live ran out.", []string{"round"}, nil),
		schedules:        prometheus.NewDesc("redq_schedules", "Schedules of the schedule set.", []string{"set"}, nil),
		schedulesPaused:  prometheus.NewDesc("redq_schedules_paused", "Paused schedules of the schedule set.", []string{"set"}, nil),
		scheduleFired:    prometheus.NewDesc("redq_schedule_ticks_fired_total", "Ticks the schedule set's schedules published (it drops when a schedule is removed, which Prometheus reads as a reset).", []string{"set"}, nil),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Describe sends the descriptors of every metric the collector reports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.scrapeSeconds, c.deliveries, c.keyedPending, c.paused, c.consumers,
		c.queueConnections, c.published, c.acked, c.rejected, c.retried, c.conns, c.timersPending, c.timersFiring,
		c.roundItems, c.roundDue, c.roundLag, c.roundIssue, c.roundExpired, c.schedules, c.schedulesPaused, c.scheduleFired} {
		ch <- d
	}
}

// connectionStates are the states redq_connections always reports, 0
// included, so that a panel shows a line for each.
var connectionStates = []string{"active", "stopped", "dead"}

// Collect reads redq's state from Redis and sends the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	start := time.Now()
	var (
		wg     sync.WaitGroup
		queues []redq.QueueInfo
		conns  []redq.ConnectionInfo
		timers map[string]redq.TimerStat
		rounds map[string]redq.RoundStat
		sets   map[string]redq.ScheduleSetStat
		errs   [5]error
	)
	if ov, ok := c.src.(OverviewSource); ok {
		o, err := ov.Overview(ctx)
		queues, conns, timers, rounds, sets = o.Queues, o.Connections, o.Timers, o.Rounds, o.ScheduleSets
		errs = [5]error{err, err, err, err, err}
	} else {
		if ss, ok := c.src.(ScheduleSource); ok {
			wg.Go(func() { sets, errs[4] = ss.ScheduleSets(ctx) })
		}
		wg.Go(func() { queues, errs[0] = c.src.Queues(ctx) })
		if c.connections {
			wg.Go(func() { conns, errs[1] = c.src.Connections(ctx) })
		}
		if c.timersRounds {
			wg.Go(func() { timers, errs[2] = c.src.Timers(ctx) })
			wg.Go(func() { rounds, errs[3] = c.src.Rounds(ctx) })
		}
		wg.Wait()
	}
	if !c.timersRounds {
		timers, rounds = nil, nil
	}
	up := 1.0
	for _, err := range errs {
		if err != nil {
			up = 0
		}
	}
	// a part that failed reports nothing rather than something partial
	if errs[0] != nil {
		queues = nil
	}
	if errs[1] != nil {
		conns = nil
	}
	if errs[2] != nil {
		timers = nil
	}
	if errs[3] != nil {
		rounds = nil
	}
	if errs[4] != nil {
		sets = nil
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(c.scrapeSeconds, prometheus.GaugeValue, time.Since(start).Seconds())

	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, q := range queues {
		gauge(c.deliveries, q.Ready, q.Name, "ready")
		gauge(c.deliveries, q.Delayed, q.Name, "delayed")
		gauge(c.deliveries, q.Unacked, q.Name, "unacked")
		gauge(c.deliveries, q.Rejected, q.Name, "rejected")
		gauge(c.keyedPending, q.KeyedPending, q.Name)
		paused := int64(0)
		if q.Paused {
			paused = 1
		}
		gauge(c.paused, paused, q.Name)
		gauge(c.consumers, q.Consumers, q.Name)
		gauge(c.queueConnections, q.Connections, q.Name)
		counter(c.published, q.Published, q.Name)
		counter(c.acked, q.Acked, q.Name)
		counter(c.rejected, q.Rejects, q.Name)
		counter(c.retried, q.Retried, q.Name)
	}
	if c.connections && errs[1] == nil {
		byState := map[string]int64{}
		for _, s := range connectionStates {
			byState[s] = 0
		}
		for _, cn := range conns {
			byState[cn.State]++
		}
		for s, n := range byState {
			gauge(c.conns, n, s)
		}
	}
	for name, t := range timers {
		gauge(c.timersPending, t.Pending, name)
		gauge(c.timersFiring, t.Firing, name)
	}
	for name, r := range rounds {
		gauge(c.roundItems, r.ItemCount, name)
		gauge(c.roundDue, r.DueCount, name)
		ch <- prometheus.MustNewConstMetric(c.roundLag, prometheus.GaugeValue, r.OldestLag.Seconds(), name)
		counter(c.roundIssue, r.IssuedCount, name)
		counter(c.roundExpired, r.ExpiredCount, name)
	}
	for name, st := range sets {
		gauge(c.schedules, st.Schedules, name)
		gauge(c.schedulesPaused, st.Paused, name)
		counter(c.scheduleFired, st.Fired, name)
	}
}
