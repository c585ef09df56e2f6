package redq

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// Schedules is a named set of cron schedules. Each schedule publishes one
// delivery on its target queue per tick, exactly once, however many
// processes run the set's loop (Run) and whichever of them dies:
//
//   - a schedule's next tick is a timer of the set (see Timers): its loop
//     waits on the timer engine, judged by Redis's clock, so an idle loop
//     costs nothing, and each tick's fire goes to one loop;
//   - the loop that handles a fire stages the tick's delivery, moves the
//     schedule's next tick on and sets its timer in one atomic step, taken
//     only if the schedule is still at that tick; the delivery then moves
//     to the target queue once (as Push moves a delivery between Redis
//     Cluster slots, see move.go), finished by a cleaner if the loop dies
//     between the two steps;
//   - a fire held by a process that died fires again once a cleaner has run
//     (see Cleaner), and is then handled once.
//
// Specs are parsed by github.com/robfig/cron/v3 (see Upsert). Open schedule
// sets with Connection.OpenSchedules.
type Schedules interface {
	// Upsert creates the schedule id, or changes it. spec is a cron
	// expression of 5 fields (minute, hour, day of month, month, day of
	// week) or 6 with a leading seconds field, optionally after a time
	// zone prefix "CRON_TZ=Europe/Berlin " (or "TZ=..."), or a descriptor:
	// @yearly, @monthly, @weekly, @daily, @hourly, or @every d with d a
	// whole number of seconds, at least 1s. Without a zone the spec is in
	// UTC (or the zone of ScheduleTimeZone). Each tick publishes payload
	// on the target queue (ScheduleTarget; default: the queue named like
	// the set).
	//
	// A new schedule's first tick is the first one after now, by Redis's
	// clock. A changed schedule takes effect from its next tick: a tick
	// already due is still published once (with the new definition), and
	// no tick is published twice. A paused schedule stays paused. Bad
	// input (an empty id, a spec or zone that does not parse, a bad option)
	// is an *ArgumentError naming the field, and changes nothing.
	Upsert(ctx context.Context, id, spec string, payload []byte, opts ...ScheduleOption) error
	// Remove removes the schedule id and reports whether it existed. A
	// tick being handled meanwhile publishes nothing.
	Remove(ctx context.Context, id string) (bool, error)
	// Pause stops the schedule id's ticks until Resume; ErrorNotFound when
	// there is no such schedule. A tick being handled meanwhile publishes
	// nothing.
	Pause(ctx context.Context, id string) error
	// Resume starts a paused schedule again from its first tick after now
	// (the ticks missed while paused are not published); ErrorNotFound
	// when there is no such schedule. Resuming a running schedule does
	// nothing.
	Resume(ctx context.Context, id string) error
	// Lookup returns the schedule id; ErrorNotFound when there is none.
	Lookup(ctx context.Context, id string) (ScheduleInfo, error)
	// List returns a page of the set's schedules, in no order, as SCAN
	// does: start with cursor 0 and go on with the cursor returned until
	// it is 0. count hints at the page size (default 100 when 0). A
	// schedule upserted or removed meanwhile may be missed or listed
	// twice.
	List(ctx context.Context, cursor uint64, count int64) (page []ScheduleInfo, next uint64, err error)
	// Run handles the set's ticks until ctx ends (it returns ctx's error)
	// or the connection stops (ErrorConsumingStopped). Any number of
	// processes may run it at once; each tick is published once. Errors
	// of Redis are reported on the connection's error channel as
	// DeliveryErrors, and Run goes on once Redis answers again.
	Run(ctx context.Context) error
}

// ScheduleInfo is a schedule as Lookup and List return it.
type ScheduleInfo struct {
	ID       string
	Spec     string // as given to Upsert
	TimeZone string // of ScheduleTimeZone; "" when not given
	Target   string // the queue its deliveries go to
	Payload  []byte
	// Next is the schedule's next tick (zero while paused). A tick is
	// published at Next, or up to the jitter after it.
	Next time.Time
	// LastFire is the latest tick published (zero before the first).
	LastFire time.Time
	Paused   bool
	// Fired and Skipped count the ticks published and the ticks left out
	// (by the catch-up and overlap policies).
	Fired, Skipped int64
	// Version counts the upserts of the schedule.
	Version int64
	// Jitter, CatchUp and Overlap are the schedule's policies (see
	// ScheduleJitter, ScheduleCatchUp and ScheduleOverlap).
	Jitter  time.Duration
	CatchUp CatchUp
	Overlap Overlap
}

// ScheduleOption configures a schedule (see Schedules.Upsert).
type ScheduleOption func(*scheduleDef) error

// ScheduleTarget sets the queue that the schedule's ticks are published
// on. Default: the queue named like the schedule set.
func ScheduleTarget(queue string) ScheduleOption {
	return func(d *scheduleDef) error {
		if why := validQueueName(queue); why != "" {
			return argError("schedule target", queue, why)
		}
		d.Target = queue
		return nil
	}
}

// ScheduleTimeZone sets the time zone of a spec that names none, by its
// IANA name ("Europe/Berlin"). "Local" is refused: processes may disagree
// about it. Default: UTC.
func ScheduleTimeZone(name string) ScheduleOption {
	return func(d *scheduleDef) error {
		if name == "" || name == "Local" {
			return argError("schedule time zone", name, "must name a zone, such as UTC or Europe/Berlin")
		}
		if _, err := time.LoadLocation(name); err != nil {
			return argError("schedule time zone", name, err.Error())
		}
		d.Zone = name
		return nil
	}
}

// ScheduleHeader sets the headers of the schedule's deliveries. Each
// delivery also carries HeaderSchedule and HeaderScheduleTick, which
// replace any of those names in h. Default: none.
func ScheduleHeader(h http.Header) ScheduleOption {
	return func(d *scheduleDef) error {
		d.Header = h
		return nil
	}
}

// ScheduleJitter spreads the schedule's deliveries: each tick is published
// at a random point (the same for that tick in every process) within d
// after it, so that many schedules of the same spec do not publish at
// once. d must be between 0 and MaxDelay. Default: 0.
func ScheduleJitter(d time.Duration) ScheduleOption {
	return func(def *scheduleDef) error {
		if d < 0 || d > MaxDelay {
			return argError("schedule jitter", d, "must be between 0 and "+MaxDelay.String())
		}
		def.JitterMs = d.Milliseconds()
		return nil
	}
}

// CatchUp is a schedule's catch-up policy: which ticks it publishes when
// more than one is due at once (its loops were down, or paused by a long
// outage of Redis).
type CatchUp struct {
	mode  string // "latest", "all" or "none"
	n     int
	grace time.Duration
}

// CatchUpLatest publishes only the latest tick that is due, however late.
// It is the default.
func CatchUpLatest() CatchUp { return CatchUp{mode: "latest", n: 1} }

// CatchUpAll publishes every tick that is due, in order, but at most the
// latest n of them. n must be between 1 and MaxCatchUp.
func CatchUpAll(n int) CatchUp { return CatchUp{mode: "all", n: n} }

// CatchUpNone publishes a tick only while it is on time: late by at most
// grace. After downtime the schedule goes on from its next tick. grace
// must be between 1ms and MaxDelay.
func CatchUpNone(grace time.Duration) CatchUp { return CatchUp{mode: "none", grace: grace} }

// String returns the policy as it is written in Go: "CatchUpLatest()",
// "CatchUpAll(10)" or "CatchUpNone(5s)".
func (p CatchUp) String() string {
	switch p.mode {
	case "", "latest":
		return "CatchUpLatest()"
	case "all":
		return "CatchUpAll(" + strconv.Itoa(p.n) + ")"
	case "none":
		return "CatchUpNone(" + p.grace.String() + ")"
	}
	return "CatchUp(" + p.mode + ")"
}

// MaxCatchUp bounds the ticks CatchUpAll publishes at once.
const MaxCatchUp = 1000

// ScheduleCatchUp sets the schedule's catch-up policy. Default:
// CatchUpLatest().
func ScheduleCatchUp(p CatchUp) ScheduleOption {
	return func(d *scheduleDef) error {
		switch {
		case p.mode == "latest":
		case p.mode == "all" && p.n >= 1 && p.n <= MaxCatchUp:
		case p.mode == "none" && p.grace >= time.Millisecond && p.grace <= MaxDelay:
		case p.mode == "all":
			return argError("schedule catch-up", p.n, "CatchUpAll needs n between 1 and "+strconv.Itoa(MaxCatchUp))
		case p.mode == "none":
			return argError("schedule catch-up", p.grace, "CatchUpNone needs a grace between 1ms and "+MaxDelay.String())
		default:
			return argError("schedule catch-up", p, "use CatchUpLatest, CatchUpAll or CatchUpNone")
		}
		d.CatchUp, d.CatchUpN, d.GraceMs = p.mode, p.n, p.grace.Milliseconds()
		return nil
	}
}

// Overlap is a schedule's overlap policy (see ScheduleOverlap).
type Overlap int

const (
	// OverlapAllow publishes every tick, whether or not the previous
	// tick's delivery is still pending or being handled. It is the
	// default.
	OverlapAllow Overlap = iota
	// OverlapSkip skips a tick while the previous tick's delivery is still
	// in the target queue, pending (ready or delayed) or taken and not yet
	// settled. Its deliveries are keyed deliveries (see Queue.Upsert) with
	// the schedule's id as key, so that two of a schedule never run at
	// once even when a tick races the previous delivery's settle: a tick
	// published then waits behind it.
	OverlapSkip
)

// String returns the policy's name.
func (o Overlap) String() string {
	switch o {
	case OverlapAllow:
		return "OverlapAllow"
	case OverlapSkip:
		return "OverlapSkip"
	}
	return "Overlap(" + strconv.Itoa(int(o)) + ")"
}

// ScheduleOverlap sets the schedule's overlap policy. Default:
// OverlapAllow.
func ScheduleOverlap(o Overlap) ScheduleOption {
	return func(d *scheduleDef) error {
		if o != OverlapAllow && o != OverlapSkip {
			return argError("schedule overlap", o, "must be OverlapAllow or OverlapSkip")
		}
		d.Skip = o == OverlapSkip
		return nil
	}
}

const (
	// HeaderSchedule names the header that carries the id of the schedule
	// that published a delivery.
	HeaderSchedule = "Redq-Schedule"
	// HeaderScheduleTick names the header that carries the tick a delivery
	// was published for, in RFC 3339 with milliseconds, in UTC.
	HeaderScheduleTick = "Redq-Schedule-Tick"
)

// scheduleTag makes the hash tag of a schedule set's keys (see timerTag).
const scheduleTag = "schedules:"

// scheduleBatch bounds the fires a loop takes at once.
const scheduleBatch = 100

// maxCatchUpScan bounds the ticks of a cron spec that a fire counts
// through to find the latest due one (an @every spec needs no count).
const maxCatchUpScan = 100000

// scheduleDef is a schedule's definition as the set stores it (JSON).
type scheduleDef struct {
	Spec     string      `json:"spec"`
	Zone     string      `json:"zone,omitempty"`
	Target   string      `json:"target"`
	Payload  []byte      `json:"payload"`
	Header   http.Header `json:"header,omitempty"`
	JitterMs int64       `json:"jitter,omitempty"`
	CatchUp  string      `json:"catchup"`
	CatchUpN int         `json:"n,omitempty"`
	GraceMs  int64       `json:"grace,omitempty"`
	Skip     bool        `json:"skip,omitempty"`
}

// scheduleRec is a schedule's record: its state and definition.
type scheduleRec struct {
	ver, next, last, fired, skipped int64
	paused                          bool
	def                             scheduleDef
}

func parseScheduleRec(s string) (scheduleRec, bool) {
	head, def, ok := strings.Cut(s, ";")
	if !ok {
		return scheduleRec{}, false
	}
	f := strings.Split(head, ",")
	if len(f) != 6 {
		return scheduleRec{}, false
	}
	var n [6]int64
	for i, x := range f {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return scheduleRec{}, false
		}
		n[i] = v
	}
	r := scheduleRec{ver: n[0], paused: n[1] == 1, next: n[2], last: n[3], fired: n[4], skipped: n[5]}
	if json.Unmarshal([]byte(def), &r.def) != nil {
		return scheduleRec{}, false
	}
	return r, true
}

// cronParser accepts 5 fields, or 6 with seconds first, and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// tickSpec is a parsed spec: the parser's schedule and what redq adds to
// it (see next).
type tickSpec struct {
	s     cron.Schedule
	loc   *time.Location
	every time.Duration // @every: the period
	fixed bool          // a spec of given hours (not every hour)
}

// parseSpec parses spec in zone (the spec's own prefix wins; "": UTC).
func parseSpec(spec, zone string) (tickSpec, error) {
	t := strings.TrimSpace(spec)
	if t == "" {
		return tickSpec{}, argError("schedule spec", spec, "must not be empty")
	}
	hasZone := strings.HasPrefix(t, "CRON_TZ=") || strings.HasPrefix(t, "TZ=")
	if hasZone && zone != "" {
		return tickSpec{}, argError("schedule time zone", zone, "the spec names its own zone")
	}
	if !hasZone {
		if zone == "" {
			zone = "UTC"
		}
		t = "CRON_TZ=" + zone + " " + t
	}
	_, body, _ := strings.Cut(t, " ")
	if strings.HasPrefix(body, "TZ=") || strings.HasPrefix(body, "CRON_TZ=") {
		return tickSpec{}, argError("schedule spec", spec, "names a time zone twice")
	}
	var every time.Duration
	if rest, ok := strings.CutPrefix(strings.TrimSpace(body), "@every "); ok {
		// the parser rounds a period below a second up to one, and a zero or
		// negative one too: refuse those here
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return tickSpec{}, argError("schedule spec", spec, err.Error())
		}
		if d < time.Second || d%time.Second != 0 {
			return tickSpec{}, argError("schedule spec", spec, "@every needs a whole number of seconds, at least 1s")
		}
		every = d
	}
	s, err := cronParser.Parse(t)
	if err != nil {
		if strings.Contains(err.Error(), "location") {
			return tickSpec{}, argError("schedule time zone", spec, err.Error())
		}
		return tickSpec{}, argError("schedule spec", spec, err.Error())
	}
	ts := tickSpec{s: s, loc: time.UTC, every: every}
	if ss, ok := s.(*cron.SpecSchedule); ok {
		ts.loc = ss.Location
		const starBit = 1 << 63 // the parser's mark of a '*' field
		ts.fixed = ss.Hour&starBit == 0
	}
	return ts, nil
}

// next returns the first tick after t. Where a clock is set back (the end
// of summer time), the parser gives a spec of given hours such as "30 1 *
// * *" the repeated wall-clock time twice; next keeps only the first, as
// cron does. A spec of every hour ticks by real time through the change.
// A wall-clock time skipped when the clock goes forward has no tick (the
// parser's rule): "30 2 * * *" in Europe/Berlin does not fire on the day
// summer time begins.
func (ts tickSpec) next(t time.Time) time.Time {
	n := ts.s.Next(t)
	for i := 0; ts.fixed && i < 1000 && !n.IsZero() && ts.repeated(n); i++ {
		n = ts.s.Next(n)
	}
	return n
}

// repeated reports whether the wall-clock time of t already came earlier,
// within the hours before t, because the clock was set back.
func (ts tickSpec) repeated(t time.Time) bool {
	_, off := t.In(ts.loc).Zone()
	_, before := t.Add(-3 * time.Hour).In(ts.loc).Zone()
	if before <= off {
		return false
	}
	u := t.Add(-time.Duration(before-off) * time.Second).In(ts.loc)
	lt := t.In(ts.loc)
	return u.Year() == lt.Year() && u.YearDay() == lt.YearDay() && u.Hour() == lt.Hour() &&
		u.Minute() == lt.Minute() && u.Second() == lt.Second()
}

// due returns the ticks due by now from d (the schedule's next tick, due),
// the latest keep of them, how many there are, and the first tick after
// now.
func (ts tickSpec) due(d, now time.Time, keep int) (ticks []time.Time, total int64, next time.Time) {
	if ts.every > 0 {
		k := int64(now.Sub(d) / ts.every)
		last := d.Add(time.Duration(k) * ts.every)
		total = k + 1
		for i := min(int64(keep), total) - 1; i >= 0; i-- {
			ticks = append(ticks, last.Add(-time.Duration(i)*ts.every))
		}
		return ticks, total, last.Add(ts.every)
	}
	t := d
	for i := 0; !t.IsZero() && !t.After(now); i++ {
		total++
		ticks = append(ticks, t)
		if len(ticks) > keep {
			ticks = ticks[1:]
		}
		if i == maxCatchUpScan {
			// too many to count: go on from now
			return ticks, total, ts.next(now)
		}
		t = ts.next(t)
	}
	return ticks, total, t
}

// jitterOf is the point within jitter ms after tick at which schedule id
// publishes it: the same in every process.
func jitterOf(id string, tick, jitter int64) int64 {
	if jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write(strconv.AppendInt(nil, tick, 10))
	return int64(h.Sum64() % uint64(jitter))
}

type redisSchedules struct {
	name string
	q    *redisQueue // the set's keyed queue: one timer per schedule
	defs string      // the defs hash
	// afterRead, when set (by tests), runs after a loop read the
	// definitions of the fires it took and before it handles them.
	afterRead func()
}

func (c *redisConnection) OpenSchedules(name string) (Schedules, error) {
	if why := validName(name); why != "" {
		return nil, argError("schedule set name", name, why)
	}
	if c.isStopped() {
		return nil, ErrorConsumingStopped
	}
	q := newQueue(c, name, queueOptions{retry: DefaultRetryPolicy})
	q.setKeys(newQueueKeys(c.opts.namespace, scheduleTag+name))
	if err := c.client.SAdd(context.Background(), c.keys.schedules, name).Err(); err != nil {
		return nil, errorf("redq: open schedules %q: %w", name, err)
	}
	return &redisSchedules{name: name, q: q, defs: q.keys.prefix + ":defs"}, nil
}

// keys is the KEYS of a schedule script.
func (s *redisSchedules) keys() []string { return s.q.keys.scriptKeys(s.defs, nil) }

// timerEnv is the keyed envelope of schedule id's timer.
func (s *redisSchedules) timerEnv(id string) []byte {
	env, _ := encodeWithID(string(s.q.conn.ids.next(make([]byte, 0, idLen), time.Now())), meta{key: id}, nil)
	return env
}

// redisNow reads Redis's clock.
func (s *redisSchedules) redisNow(ctx context.Context) (time.Time, error) {
	t, err := s.q.conn.client.Time(ctx).Result()
	if err != nil {
		return time.Time{}, errorf("redq: schedules %q: read Redis's clock: %w", s.name, err)
	}
	return t, nil
}

func (s *redisSchedules) run(ctx context.Context, verb, id string, script *redis.Script, args ...any) (int64, error) {
	v, err := s.q.conn.runScript(ctx, scriptCall{script, s.keys(), append([]any{id}, args...)})
	if err != nil {
		return 0, errorf("redq: %s schedule %q of %q: %w", verb, id, s.name, err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, errorf("redq: %s schedule %q of %q: %w %v", verb, id, s.name, errBadReply, v)
	}
	return n, nil
}

func (s *redisSchedules) Upsert(ctx context.Context, id, spec string, payload []byte, opts ...ScheduleOption) error {
	if err := checkKey(id); err != nil {
		return argError("schedule id", id, err.(*ArgumentError).Reason)
	}
	def := scheduleDef{Spec: spec, Target: s.name, Payload: payload, CatchUp: "latest", CatchUpN: 1}
	for _, opt := range opts {
		if opt == nil {
			return argError("schedule option", nil, "must not be nil")
		}
		if err := opt(&def); err != nil {
			return err
		}
	}
	ts, err := parseSpec(spec, def.Zone)
	if err != nil {
		return err
	}
	if err := checkPayloadSize("payload", len(payload), s.q.conn.opts.maxPayloadSize); err != nil {
		return err
	}
	if def.Payload == nil {
		def.Payload = []byte{}
	}
	if _, err := json.Marshal(def.Header); err != nil {
		return argError("schedule header", def.Header, err.Error())
	}
	text, err := json.Marshal(def)
	if err != nil {
		return argError("schedule", id, err.Error())
	}
	now, err := s.redisNow(ctx)
	if err != nil {
		return err
	}
	next := ts.next(now)
	if next.IsZero() {
		return argError("schedule spec", spec, "has no tick after now")
	}
	nms := next.UnixMilli()
	_, err = s.run(ctx, "upsert", id, scripts.scheduleUpsert, text, nms, nms+jitterOf(id, nms, def.JitterMs), s.timerEnv(id))
	return err
}

func (s *redisSchedules) Remove(ctx context.Context, id string) (bool, error) {
	if err := checkKey(id); err != nil {
		return false, argError("schedule id", id, err.(*ArgumentError).Reason)
	}
	n, err := s.run(ctx, "remove", id, scripts.scheduleState, "R")
	return n == 1, err
}

func (s *redisSchedules) Pause(ctx context.Context, id string) error {
	if err := checkKey(id); err != nil {
		return argError("schedule id", id, err.(*ArgumentError).Reason)
	}
	n, err := s.run(ctx, "pause", id, scripts.scheduleState, "P")
	if err == nil && n == 0 {
		err = errorf("redq: pause schedule %q of %q: %w", id, s.name, ErrorNotFound)
	}
	return err
}

func (s *redisSchedules) Resume(ctx context.Context, id string) error {
	if err := checkKey(id); err != nil {
		return argError("schedule id", id, err.(*ArgumentError).Reason)
	}
	for {
		r, err := s.read(ctx, id)
		if err != nil {
			return errorf("redq: resume schedule %q of %q: %w", id, s.name, err)
		}
		if !r.paused {
			return nil
		}
		ts, err := parseSpec(r.def.Spec, r.def.Zone)
		if err != nil {
			return errorf("redq: resume schedule %q of %q: %w: %w", id, s.name, errBadReply, err)
		}
		now, err := s.redisNow(ctx)
		if err != nil {
			return err
		}
		nms := ts.next(now).UnixMilli()
		n, err := s.run(ctx, "resume", id, scripts.scheduleState, "U", r.ver, nms, nms+jitterOf(id, nms, r.def.JitterMs), s.timerEnv(id))
		switch {
		case err != nil:
			return err
		case n == 0:
			return errorf("redq: resume schedule %q of %q: %w", id, s.name, ErrorNotFound)
		case n == 1:
			return nil
		}
		// changed meanwhile: read it again
	}
}

// read reads schedule id's record; ErrorNotFound when there is none.
func (s *redisSchedules) read(ctx context.Context, id string) (scheduleRec, error) {
	v, err := s.q.conn.client.HGet(ctx, s.defs, id).Result()
	if errors.Is(err, redis.Nil) {
		return scheduleRec{}, ErrorNotFound
	}
	if err != nil {
		return scheduleRec{}, err
	}
	r, ok := parseScheduleRec(v)
	if !ok {
		return scheduleRec{}, errorf("%w: the record does not parse", errBadReply)
	}
	return r, nil
}

func (r scheduleRec) info(id string) ScheduleInfo {
	in := ScheduleInfo{ID: id, Spec: r.def.Spec, TimeZone: r.def.Zone, Target: r.def.Target, Payload: r.def.Payload,
		Paused: r.paused, Fired: r.fired, Skipped: r.skipped, Version: r.ver,
		Jitter: time.Duration(r.def.JitterMs) * time.Millisecond, Overlap: OverlapAllow,
		CatchUp: CatchUp{mode: r.def.CatchUp, n: r.def.CatchUpN, grace: time.Duration(r.def.GraceMs) * time.Millisecond}}
	if in.CatchUp.mode == "" {
		in.CatchUp = CatchUpLatest()
	}
	if r.def.Skip {
		in.Overlap = OverlapSkip
	}
	if !r.paused {
		in.Next = time.UnixMilli(r.next)
	}
	if r.last > 0 {
		in.LastFire = time.UnixMilli(r.last)
	}
	return in
}

func (s *redisSchedules) Lookup(ctx context.Context, id string) (ScheduleInfo, error) {
	if err := checkKey(id); err != nil {
		return ScheduleInfo{}, argError("schedule id", id, err.(*ArgumentError).Reason)
	}
	r, err := s.read(ctx, id)
	if err != nil {
		return ScheduleInfo{}, errorf("redq: lookup schedule %q of %q: %w", id, s.name, err)
	}
	return r.info(id), nil
}

func (s *redisSchedules) List(ctx context.Context, cursor uint64, count int64) ([]ScheduleInfo, uint64, error) {
	if count < 0 {
		return nil, 0, argError("count", count, "must not be negative")
	}
	if count == 0 {
		count = 100
	}
	kv, next, err := s.q.conn.client.HScan(ctx, s.defs, cursor, "*", count).Result()
	if err != nil {
		return nil, 0, errorf("redq: list schedules of %q: %w", s.name, err)
	}
	out := make([]ScheduleInfo, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		r, ok := parseScheduleRec(kv[i+1])
		if !ok {
			return nil, 0, errorf("redq: list schedules of %q: %w: the record of %q does not parse", s.name, errBadReply, kv[i])
		}
		out = append(out, r.info(kv[i]))
	}
	return out, next, nil
}

func (s *redisSchedules) Run(ctx context.Context) error {
	c := s.q.conn
	if _, err := s.q.finishStaged(ctx); err != nil && ctx.Err() == nil {
		c.report(&DeliveryError{RedisErr: errorf("redq: schedules %q: finish staged ticks: %w", s.name, err), Count: 1})
	}
	errs := 0
	for {
		_, err := s.step(ctx, time.Minute)
		switch {
		case err == nil || errors.Is(err, ErrorTimeout):
			errs = 0
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrorConsumingStopped):
			return err
		}
		errs++
		c.report(&DeliveryError{RedisErr: err, Count: errs})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Duration(errs)*100*time.Millisecond, 2*time.Second)):
		}
	}
}

// step waits up to timeout for fires and handles those taken; it returns
// how many ticks it published.
func (s *redisSchedules) step(ctx context.Context, timeout time.Duration) (int, error) {
	ds, err := s.q.TakeBatch(ctx, scheduleBatch, timeout)
	if err != nil {
		return 0, err
	}
	published, err := s.handle(ctx, ds)
	if err != nil {
		// the fires stay held: a cleaner hands them back once this
		// connection is gone, or Release them now to retry
		for _, d := range ds {
			_ = d.(*redisDelivery).Release(ctx, time.Second)
		}
		return published, err
	}
	for i, e := range ds.AckContext(ctx) {
		if e != nil && !errors.Is(e, ErrorNotFound) {
			c := s.q.conn
			c.report(&DeliveryError{Delivery: ds[i], RedisErr: errorf("redq: schedules %q: ack a fire: %w", s.name, e), Count: 1})
		}
	}
	return published, nil
}

// handle handles the fires ds: for each, the schedule's due ticks are
// staged and its next tick set in one step (the steps of a batch go in
// one pipeline), then the staged deliveries are moved to their targets.
func (s *redisSchedules) handle(ctx context.Context, ds Deliveries) (int, error) {
	ids := make([]string, 0, len(ds))
	seen := map[string]bool{}
	for _, d := range ds {
		if k := d.(*redisDelivery).key; !seen[k] {
			seen[k] = true
			ids = append(ids, k)
		}
	}
	vals, err := s.q.conn.client.HMGet(ctx, s.defs, ids...).Result()
	if err != nil {
		return 0, errorf("redq: schedules %q: read definitions: %w", s.name, err)
	}
	now, err := s.redisNow(ctx)
	if err != nil {
		return 0, err
	}
	if s.afterRead != nil {
		s.afterRead()
	}
	var calls []*fireCall
	for i, id := range ids {
		str, ok := vals[i].(string)
		if !ok {
			continue // removed: its fire is dropped
		}
		r, ok := parseScheduleRec(str)
		if !ok {
			continue
		}
		fc, err := s.prepare(ctx, id, r, now)
		if err != nil {
			return 0, err
		}
		if fc != nil {
			calls = append(calls, fc)
		}
	}
	// a call that failed stages nothing (0); the first error is returned
	// once what the others staged is on its way
	outs := make([]int64, len(calls))
	var failed error
	if s.q.conn.opts.waitReplicas == 0 && len(calls) > 1 {
		scs := make([]scriptCall, len(calls))
		for i, fc := range calls {
			scs[i] = scriptCall{scripts.scheduleFire, s.keys(), fc.args}
		}
		for i, cmd := range evalBatch(ctx, s.q.conn.client, scs) {
			n, err := cmd.Int64()
			if err != nil && failed == nil {
				failed = errorf("redq: fire schedule %q of %q: %w", calls[i].id, s.name, err)
			}
			outs[i] = n
		}
	} else {
		for i, fc := range calls {
			n, err := s.run(ctx, "fire", fc.id, scripts.scheduleFire, fc.args[1:]...)
			if err != nil && failed == nil {
				failed = err
			}
			outs[i] = n
		}
	}
	var fields []string
	published := 0
	for i, fc := range calls {
		out := outs[i]
		for try := 0; out == -1 && failed == nil && try < 5; try++ {
			// changed since it was read: read it again
			str, err := s.q.conn.client.HGet(ctx, s.defs, fc.id).Result()
			if errors.Is(err, redis.Nil) {
				out = 0
				break
			}
			if err != nil {
				return published, errorf("redq: schedules %q: read definitions: %w", s.name, err)
			}
			r, ok := parseScheduleRec(str)
			if !ok {
				return published, errorf("redq: schedules %q: the record of %q: %w", s.name, fc.id, errBadReply)
			}
			if now, err = s.redisNow(ctx); err != nil {
				return published, err
			}
			out, fc.fields, fc.n, err = s.fire(ctx, fc.id, r, now)
			if err != nil {
				failed, out = err, 0
			}
		}
		if out == 1 {
			fields = append(fields, fc.fields...)
			published += fc.n
		}
	}
	if len(fields) > 0 {
		if _, err := s.q.finishMoves(ctx, fields); err != nil {
			// staged: a cleaner (or the next Run) moves them
			s.q.conn.report(&DeliveryError{RedisErr: errorf("redq: schedules %q: move ticks to their queues (a cleaner will): %w", s.name, err), Count: 1})
		}
	}
	return published, failed
}

// fireCall is the call of schedule_fire.lua that handles a schedule's
// due ticks: its arguments, and the outbox fields it stages for n ticks.
type fireCall struct {
	id     string
	args   []any
	fields []string
	n      int
}

// fire handles the due ticks of schedule id, whose record is r, at now:
// it returns schedule_fire.lua's answer, the outbox fields it staged and
// how many ticks they are.
func (s *redisSchedules) fire(ctx context.Context, id string, r scheduleRec, now time.Time) (int64, []string, int, error) {
	fc, err := s.prepare(ctx, id, r, now)
	if err != nil || fc == nil {
		return 0, nil, 0, err
	}
	out, err := s.run(ctx, "fire", id, scripts.scheduleFire, fc.args[1:]...)
	return out, fc.fields, fc.n, err
}

// prepare works out which of schedule id's ticks are due at now and to be
// published (r is its record), and the call that does it; nil when the
// schedule is paused.
func (s *redisSchedules) prepare(ctx context.Context, id string, r scheduleRec, now time.Time) (*fireCall, error) {
	if r.paused {
		return nil, nil
	}
	ts, err := parseSpec(r.def.Spec, r.def.Zone)
	if err != nil {
		return nil, errorf("redq: schedules %q: the spec of %q: %w", s.name, id, err)
	}
	d := time.UnixMilli(r.next)
	if now.UnixMilli() < r.next+jitterOf(id, r.next, r.def.JitterMs) {
		// early (the schedule changed since its timer was set): set its
		// timer again
		return &fireCall{id: id, args: []any{id, r.ver, r.next, r.next,
			r.next + jitterOf(id, r.next, r.def.JitterMs), s.timerEnv(id), 0, 0, 0, r.def.Target}}, nil
	}
	keep := 1
	if r.def.CatchUp == "all" {
		keep = r.def.CatchUpN
	}
	ticks, total, next := ts.due(d, now, keep)
	if r.def.CatchUp == "none" {
		var onTime []time.Time
		for _, t := range ticks {
			if now.Sub(t) <= time.Duration(r.def.GraceMs)*time.Millisecond {
				onTime = append(onTime, t)
			}
		}
		ticks = onTime
	}
	if r.def.Skip && len(ticks) > 0 {
		// one at a time: the keyed deliveries of one schedule would merge
		ticks = ticks[len(ticks)-1:]
		busy, err := s.busy(ctx, r.def.Target, id)
		if err != nil {
			return nil, err
		}
		if busy {
			ticks = nil
		}
	}
	if next.IsZero() {
		// the spec has no tick left: park its timer far ahead
		next = now.Add(MaxDelay)
	}
	nms := next.UnixMilli()
	fc := &fireCall{id: id, n: len(ticks)}
	fc.args = []any{id, r.ver, r.next, nms, nms + jitterOf(id, nms, r.def.JitterMs), s.timerEnv(id), 0, len(ticks), total - int64(len(ticks)), r.def.Target}
	if len(ticks) > 0 {
		fc.args[6] = ticks[len(ticks)-1].UnixMilli()
	}
	for _, t := range ticks {
		h := http.Header{}
		for k, v := range r.def.Header {
			h[k] = v
		}
		h.Set(HeaderSchedule, id)
		h.Set(HeaderScheduleTick, t.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
		m := meta{header: h}
		if r.def.Skip {
			m.key = id
		}
		env, err := encodeWithID(string(s.q.conn.ids.next(make([]byte, 0, idLen), time.Now())), m, r.def.Payload)
		if err != nil {
			return nil, errorf("redq: schedules %q: the delivery of %q: %w", s.name, id, err)
		}
		f := "schedule|" + strconv.FormatInt(t.UnixMilli(), 10) + "|" + id
		fc.fields = append(fc.fields, f)
		fc.args = append(fc.args, f, env)
	}
	return fc, nil
}

// busy reports whether the target queue still holds the schedule's
// previous delivery (OverlapSkip): pending, or taken and not settled.
func (s *redisSchedules) busy(ctx context.Context, target, id string) (bool, error) {
	q := newQueue(s.q.conn, target, queueOptions{})
	item, err := q.Lookup(ctx, id)
	if errors.Is(err, ErrorNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return item.Pending || item.Running, nil
}
