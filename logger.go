package redq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// LogReminderInterval is how often a problem that goes on (Redis
// unreachable, a queue that cannot be fetched from) is logged again while
// it lasts, and how long a problem that has no success to end it (a
// settle being resent) must stay quiet before its next failure counts as
// a new one.
const LogReminderInterval = time.Minute

// WithLogger makes the connection log what happens in the background
// through l: heartbeat failures, the connection pausing and resuming,
// losing its registration and going on under a new one, fetch and settle
// failures, and cleaner failures (through a Cleaner on this connection).
// Everything it logs also reaches the error channel, as before.
//
// A Redis outage logs a few lines, not one per retry: the first failure
// of each kind (warn), a pause of the connection (error), a reminder
// every LogReminderInterval while it lasts (warn), and the recovery with
// how long it took and how many attempts failed (info). Messages start
// with "redq: "; attributes are "queue", "connection", "err", "failures"
// and "after".
//
// A nil l is refused. Default: no logging (the error channel only).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return argError("logger", l, "must not be nil")
		}
		o.logger = l
		return nil
	}
}

// logState remembers the problems that are going on, so that each is
// logged when it starts, now and then while it lasts, and when it ends.
// Its zero value is ready for use.
type logState struct {
	mu       sync.Mutex
	episodes map[string]*episode
}

// episode is one problem that is going on.
type episode struct {
	start, last, logged time.Time // first and last failure, last line
	failures            int
	paused              bool // the connection paused because of it
}

// fail records a failure of what and reports whether to log it (the
// first of an episode, or a reminder) and the episode as it is now.
// A first failure (the error's count is 1) starts a new episode. Without a
// success to end it (quietEnds), an episode ends by itself once no failure
// came for LogReminderInterval.
func (s *logState) fail(what string, now time.Time, first, quietEnds bool) (episode, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.episodes == nil {
		s.episodes = map[string]*episode{}
	}
	e := s.episodes[what]
	if e != nil && (first || quietEnds && now.Sub(e.last) >= LogReminderInterval) {
		e = nil
	}
	if e == nil {
		e = &episode{start: now, logged: now}
		s.episodes[what] = e
		e.last, e.failures = now, 1
		return *e, true
	}
	e.last = now
	e.failures++
	if now.Sub(e.logged) >= LogReminderInterval {
		e.logged = now
		return *e, true
	}
	return *e, false
}

// markPaused records that the episode of what paused the connection and
// reports whether it had not already.
func (s *logState) markPaused(what string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.episodes[what]
	if e == nil || e.paused {
		return false
	}
	e.paused = true
	return true
}

// end ends the episode of what, if there is one, and returns it.
func (s *logState) end(what string) (episode, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.episodes[what]
	if e == nil {
		return episode{}, false
	}
	delete(s.episodes, what)
	return *e, true
}

// logReport logs a background error that is about to be reported on the
// error channel (see report), if the connection has a logger.
func (c *redisConnection) logReport(err error) {
	l := c.opts.logger
	if l == nil {
		return
	}
	ctx := context.Background()
	now := time.Now()
	var (
		hb   *HeartbeatError
		ce   *ConsumeError
		de   *DeliveryError
		lost *ConnectionLostError
		ev   *EvictionWarning
	)
	switch {
	case errors.As(err, &hb):
		e, log := c.logs.fail("heartbeat", now, hb.Count == 1, false)
		if log {
			c.logFailure(ctx, l, "redq: heartbeat failed", e, now, slog.String("connection", c.Name()), slog.Any("err", hb.RedisErr))
		}
		if hb.Count >= c.opts.heartbeatErrorLimit && c.logs.markPaused("heartbeat") {
			what := "redq: connection paused: it fetches and hands out nothing until a heartbeat succeeds"
			if c.opts.stopOnHeartbeatErrorLimit {
				what = "redq: connection stops consuming: heartbeat error limit reached"
			}
			l.LogAttrs(ctx, slog.LevelError, what, slog.String("connection", c.Name()), slog.Int("failures", hb.Count),
				slog.Duration("after", now.Sub(e.start).Round(time.Millisecond)), slog.Any("err", hb.RedisErr))
		}
	case errors.As(err, &ce):
		e, log := c.logs.fail("queue "+ce.Queue, now, ce.Count == 1, false)
		if log {
			c.logFailure(ctx, l, "redq: fetching failed", e, now, slog.String("queue", ce.Queue), slog.Any("err", ce.RedisErr))
		}
	case errors.As(err, &de):
		// resends of one delivery's settle; several deliveries may be
		// resent at once in an outage, so they share one episode
		e, log := c.logs.fail("settle", now, false, true)
		if log {
			c.logFailure(ctx, l, "redq: settling failed, sending again", e, now, slog.Any("delivery", de.Delivery), slog.Any("err", de.RedisErr))
		}
	case errors.As(err, &lost):
		l.LogAttrs(ctx, slog.LevelWarn, "redq: connection was declared dead or forgotten by Redis; it goes on under a new name",
			slog.String("connection", lost.OldName), slog.String("new", lost.NewName))
	case errors.As(err, &ev):
		l.LogAttrs(ctx, slog.LevelWarn, "redq: Redis may evict keys (maxmemory-policy is not noeviction)",
			slog.String("addr", ev.Addr), slog.String("policy", ev.Policy))
	default:
		l.LogAttrs(ctx, slog.LevelError, "redq: background error", slog.Any("err", err))
	}
}

// logFailure logs the first failure of an episode, or a reminder that it
// goes on.
func (c *redisConnection) logFailure(ctx context.Context, l *slog.Logger, msg string, e episode, now time.Time, attrs ...slog.Attr) {
	if e.failures > 1 {
		msg += " (still)"
		attrs = append(attrs, slog.Int("failures", e.failures), slog.Duration("for", now.Sub(e.start).Round(time.Millisecond)))
	}
	l.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
}

// logRecovered logs that what works again after failures (see logReport):
// the heartbeat ("heartbeat") or fetching from a queue ("queue <name>").
// Callers call it only after failures, so that it costs nothing otherwise.
func (c *redisConnection) logRecovered(what string) {
	l := c.opts.logger
	if l == nil {
		return
	}
	e, ok := c.logs.end(what)
	if !ok {
		return
	}
	ctx := context.Background()
	attrs := []slog.Attr{slog.Int("failures", e.failures), slog.Duration("after", time.Since(e.start).Round(time.Millisecond))}
	switch {
	case what == "heartbeat" && e.paused:
		l.LogAttrs(ctx, slog.LevelInfo, "redq: connection resumed: heartbeat works again", append(attrs, slog.String("connection", c.Name()))...)
	case what == "heartbeat":
		l.LogAttrs(ctx, slog.LevelInfo, "redq: heartbeat works again", append(attrs, slog.String("connection", c.Name()))...)
	case strings.HasPrefix(what, "queue "):
		l.LogAttrs(ctx, slog.LevelInfo, "redq: fetching works again", append(attrs, slog.String("queue", strings.TrimPrefix(what, "queue ")))...)
	default:
		l.LogAttrs(ctx, slog.LevelInfo, "redq: "+what+" works again", attrs...)
	}
}

// logClean logs a cleaner run's failure, or its success after failures.
func (c *redisConnection) logClean(err error) {
	l := c.opts.logger
	if l == nil {
		return
	}
	if err == nil {
		c.logRecovered("cleaner")
		return
	}
	if errors.Is(err, ErrorNotRedis) {
		return
	}
	now := time.Now()
	e, log := c.logs.fail("cleaner", now, false, false)
	if log {
		c.logFailure(context.Background(), l, "redq: cleaner failed", e, now, slog.Any("err", err))
	}
}

// RedisLog routes the log lines of go-redis to a *slog.Logger, de-duplicated
// (see RedisLogger). It implements go-redis's logging interface (the
// parameter of redis.SetLogger).
type RedisLog struct {
	l        *slog.Logger
	interval time.Duration
	burst    int

	mu      sync.Mutex
	seen    map[string]*redisLine // by format string
	window  time.Time             // start of the current window
	emitted int                   // lines logged in the current window
}

// redisLine is what RedisLog remembers of one kind of line (one format
// string of go-redis).
type redisLine struct {
	logged     time.Time // when it was last logged
	suppressed int       // since then
}

// RedisLogBurst is how many lines RedisLog logs at most per
// LogReminderInterval, whatever their kinds.
const RedisLogBurst = 10

// RedisLogger returns a logger for go-redis's own log lines (dial errors,
// "discarding bad PubSub connection", pool messages) that sends them to l:
// lines about failures at warn, others at debug, each prefixed with
// "redis: " and with a "source" attribute of "go-redis".
//
// go-redis logs a line per failed dial and per broken connection, dozens
// in a few seconds of a Redis outage. RedisLogger logs each kind of line
// (one format string) at most once per LogReminderInterval, with a
// "suppressed" attribute counting the ones it held back since, and at most
// RedisLogBurst lines per LogReminderInterval in all.
//
// go-redis's logger is one per process, so redq never sets it: a program
// opts in once, at start,
//
//	redis.SetLogger(redq.RedisLogger(logger))
//
// A nil l logs nothing (go-redis's lines are dropped).
func RedisLogger(l *slog.Logger) *RedisLog {
	return &RedisLog{l: l, interval: LogReminderInterval, burst: RedisLogBurst, seen: map[string]*redisLine{}}
}

// Printf logs one line of go-redis (see RedisLogger).
func (r *RedisLog) Printf(ctx context.Context, format string, v ...any) {
	if r == nil || r.l == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.window) >= r.interval {
		r.window, r.emitted = now, 0
	}
	line := r.seen[format]
	if line != nil && now.Sub(line.logged) < r.interval {
		line.suppressed++
		r.mu.Unlock()
		return
	}
	if r.emitted >= r.burst {
		if line != nil {
			line.suppressed++
		}
		r.mu.Unlock()
		return
	}
	suppressed := 0
	if line == nil {
		line = &redisLine{}
		r.seen[format] = line
		if len(r.seen) > 1000 { // formats are a fixed set; this only bounds memory
			clear(r.seen)
			r.seen[format] = line
		}
	} else {
		suppressed = line.suppressed
	}
	line.logged, line.suppressed = now, 0
	r.emitted++
	r.mu.Unlock()

	if ctx == nil {
		ctx = context.Background()
	}
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if !strings.HasPrefix(msg, "redis: ") {
		msg = "redis: " + msg
	}
	attrs := []slog.Attr{slog.String("source", "go-redis")}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	r.l.LogAttrs(ctx, redisLineLevel(format), msg, attrs...)
}

// redisLineLevel guesses the level of a go-redis line from its format:
// warn for failures, debug for the rest.
func redisLineLevel(format string) slog.Level {
	f := strings.ToLower(format)
	for _, w := range []string{"fail", "error", "err=", "discard", "bad", "panic", "refused", "timeout", "unable", "cannot", "closing", "removing"} {
		if strings.Contains(f, w) {
			return slog.LevelWarn
		}
	}
	return slog.LevelDebug
}
