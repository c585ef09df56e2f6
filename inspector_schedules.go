package redq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScheduleSetStat holds the counts of one schedule set (see
// Connection.OpenSchedules), as Inspector.ScheduleSets and Stats read
// them.
type ScheduleSetStat struct {
	// Schedules counts the set's schedules; Paused those of them paused.
	Schedules int64 `json:"schedules"`
	Paused    int64 `json:"paused"`
	// Fired and Skipped add up the ticks the set's schedules published and
	// left out (see ScheduleInfo).
	Fired   int64 `json:"fired"`
	Skipped int64 `json:"skipped"`
	// NextDue is the earliest next tick of a schedule that is not paused;
	// zero when there is none. A NextDue well in the past means no
	// process runs the set's loop (Schedules.Run).
	NextDue time.Time `json:"nextDue,omitzero"`
}

// SchedulePage is one page of Inspector.ListSchedules.
type SchedulePage struct {
	// Items are the schedules of the page, sorted by id.
	Items []ScheduleInfo
	// Next is the cursor of the next page; "" when there is none.
	Next string
	// Total is how many schedules the set holds.
	Total int64
}

// scheduleSet is the storage of schedule set name: its keyed queue (one
// timer per schedule) and its defs hash.
type scheduleSet struct {
	name string
	keys queueKeys
	defs string
}

// scriptKeys is the KEYS of a schedule script.
func (s scheduleSet) scriptKeys() []string { return s.keys.scriptKeys(s.defs, nil) }

// checkScheduleSet validates a set name and reports ErrorNotFound for a
// set that was never opened in the namespace.
func (i *Inspector) checkScheduleSet(ctx context.Context, name string) (scheduleSet, error) {
	if why := validName(name); why != "" {
		return scheduleSet{}, argError("schedule set name", name, why)
	}
	ok, err := i.client.SIsMember(ctx, i.keys.schedules, name).Result()
	if err != nil {
		return scheduleSet{}, errorf("redq: schedule set %q: %w", name, err)
	}
	if !ok {
		return scheduleSet{}, errorf("%w: no schedule set %q is open in namespace %q", ErrorNotFound, name, i.opts.namespace)
	}
	return scheduleSetKeys(i.opts.namespace, name), nil
}

// checkScheduleID validates a schedule id as Schedules.Upsert does.
func checkScheduleID(id string) error {
	if err := checkKey(id); err != nil {
		var ae *ArgumentError
		if errors.As(err, &ae) {
			return argError("schedule id", id, ae.Reason)
		}
		return err
	}
	return nil
}

// ScheduleSets returns the counts of every schedule set of the namespace
// (empty, not nil, when there is none): two round trips, the second
// reading every schedule's record in one script per set, O(schedules) in
// Redis.
func (i *Inspector) ScheduleSets(ctx context.Context) (map[string]ScheduleSetStat, error) {
	names, err := i.client.SMembers(ctx, i.keys.schedules).Result()
	if err != nil {
		return nil, errorf("redq: list schedule sets: %w", err)
	}
	out, err := scheduleSetStats(ctx, i.client, i.opts.namespace, names)
	if err != nil {
		return nil, errorf("redq: list schedule sets: %w", err)
	}
	return out, nil
}

// ScheduleSet returns the counts of one schedule set; an error matching
// ErrorNotFound when no set of that name was opened, an *ArgumentError for
// a bad name.
func (i *Inspector) ScheduleSet(ctx context.Context, set string) (ScheduleSetStat, error) {
	if _, err := i.checkScheduleSet(ctx, set); err != nil {
		return ScheduleSetStat{}, err
	}
	out, err := scheduleSetStats(ctx, i.client, i.opts.namespace, []string{set})
	if err != nil {
		return ScheduleSetStat{}, errorf("redq: schedule set %q: %w", set, err)
	}
	return out[set], nil
}

// scheduleSetStats counts the schedule sets names in one pipeline.
func scheduleSetStats(ctx context.Context, client redis.UniversalClient, ns string, names []string) (map[string]ScheduleSetStat, error) {
	out := make(map[string]ScheduleSetStat, len(names))
	if len(names) == 0 {
		return out, nil
	}
	pipe := client.Pipeline()
	cmds := make([]*redis.Cmd, len(names))
	for n, name := range names {
		cmds[n] = scripts.scheduleCounts.EvalSha(ctx, pipe, scheduleSetKeys(ns, name).scriptKeys())
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	for n, name := range names {
		st, err := scheduleSetStatOf(ctx, client, cmds[n], scheduleSetKeys(ns, name))
		if err != nil {
			return nil, errorf("schedule set %q: %w", name, err)
		}
		out[name] = st
	}
	return out, nil
}

// scheduleSetKeys is the storage of schedule set name in namespace ns.
func scheduleSetKeys(ns, name string) scheduleSet {
	k := newQueueKeys(ns, scheduleTag+name)
	return scheduleSet{name: name, keys: k, defs: k.prefix + ":defs"}
}

// scheduleSetStatOf reads the reply of schedule_counts.lua, running the
// script again when Redis's script cache did not hold it.
func scheduleSetStatOf(ctx context.Context, client redis.Cmdable, cmd *redis.Cmd, s scheduleSet) (ScheduleSetStat, error) {
	v, err := cmd.Result()
	if isNoScript(err) {
		v, err = scripts.scheduleCounts.Run(ctx, client, s.scriptKeys()).Result()
	}
	if err != nil {
		return ScheduleSetStat{}, err
	}
	n, err := int64s(v)
	if err == nil && len(n) != 5 {
		err = errorf("%w %v", errBadReply, v)
	}
	if err != nil {
		return ScheduleSetStat{}, err
	}
	st := ScheduleSetStat{Schedules: n[0], Paused: n[1], Fired: n[2], Skipped: n[3]}
	if n[4] > 0 {
		st.NextDue = time.UnixMilli(n[4])
	}
	return st, nil
}

// ListSchedules returns one page of a schedule set's schedules, each page
// sorted by id (the pages come in no order, as HSCAN gives them); cursor
// "" is the first page, SchedulePage.Next the next one. limit is a hint of
// the page size, as SCAN's COUNT: Default: 50 (DefaultListLimit); at most
// 1000 (MaxListLimit). A schedule upserted or removed meanwhile may be
// missed or listed twice. An unknown set returns an error matching
// ErrorNotFound; a bad name, cursor or limit an *ArgumentError.
func (i *Inspector) ListSchedules(ctx context.Context, set, cursor string, limit int) (SchedulePage, error) {
	if why := validName(set); why != "" {
		return SchedulePage{}, argError("schedule set name", set, why)
	}
	if limit < 0 || limit > MaxListLimit {
		return SchedulePage{}, argError("limit", limit, fmt.Sprintf("must be 0 (default %d) to %d", DefaultListLimit, MaxListLimit))
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	var pos uint64
	if cursor != "" {
		var err error
		if pos, err = strconv.ParseUint(cursor, 10, 64); err != nil || pos == 0 {
			return SchedulePage{}, argError("cursor", cursor, "must be \"\" or the Next of a page")
		}
	}
	s, err := i.checkScheduleSet(ctx, set)
	if err != nil {
		return SchedulePage{}, err
	}
	pipe := i.client.Pipeline()
	scan := pipe.HScan(ctx, s.defs, pos, "*", int64(limit))
	total := pipe.HLen(ctx, s.defs)
	if _, err := pipe.Exec(ctx); err != nil {
		return SchedulePage{}, errorf("redq: list schedules of %q: %w", set, err)
	}
	kv, next := scan.Val()
	page := SchedulePage{Items: make([]ScheduleInfo, 0, len(kv)/2), Total: total.Val()}
	for n := 0; n+1 < len(kv); n += 2 {
		r, ok := parseScheduleRec(kv[n+1])
		if !ok {
			return SchedulePage{}, errorf("redq: list schedules of %q: %w: the record of %q does not parse", set, errBadReply, kv[n])
		}
		page.Items = append(page.Items, r.info(kv[n]))
	}
	sort.Slice(page.Items, func(a, b int) bool { return page.Items[a].ID < page.Items[b].ID })
	if next != 0 {
		page.Next = strconv.FormatUint(next, 10)
	}
	return page, nil
}

// Schedule returns schedule id of a set, as Schedules.Lookup does; an
// error matching ErrorNotFound when the set or the schedule is not there.
func (i *Inspector) Schedule(ctx context.Context, set, id string) (ScheduleInfo, error) {
	_, r, err := i.readSchedule(ctx, "look up", set, id)
	if err != nil {
		return ScheduleInfo{}, err
	}
	return r.info(id), nil
}

// readSchedule checks set and id and reads the schedule's record.
func (i *Inspector) readSchedule(ctx context.Context, verb, set, id string) (scheduleSet, scheduleRec, error) {
	if err := checkScheduleID(id); err != nil {
		return scheduleSet{}, scheduleRec{}, err
	}
	s, err := i.checkScheduleSet(ctx, set)
	if err != nil {
		return scheduleSet{}, scheduleRec{}, err
	}
	v, err := i.client.HGet(ctx, s.defs, id).Result()
	if errors.Is(err, redis.Nil) {
		return s, scheduleRec{}, errorf("redq: %s schedule %q of %q: %w", verb, id, set, ErrorNotFound)
	}
	if err != nil {
		return s, scheduleRec{}, errorf("redq: %s schedule %q of %q: %w", verb, id, set, err)
	}
	r, ok := parseScheduleRec(v)
	if !ok {
		return s, scheduleRec{}, errorf("redq: %s schedule %q of %q: %w: the record does not parse", verb, id, set, errBadReply)
	}
	return s, r, nil
}

// scheduleState runs schedule_state.lua (remove 'R', pause 'P', resume
// 'U') on schedule id of set s.
func (i *Inspector) scheduleState(ctx context.Context, verb string, s scheduleSet, id string, args ...any) (int64, error) {
	n, err := scripts.scheduleState.Run(ctx, i.client, s.scriptKeys(), append([]any{id}, args...)...).Int64()
	if err != nil {
		return 0, errorf("redq: %s schedule %q of %q: %w", verb, id, s.name, err)
	}
	return n, nil
}

// PauseSchedule pauses schedule id of a set, as Schedules.Pause does: no
// tick is published until ResumeSchedule, and a tick being handled
// meanwhile publishes nothing. Pausing a paused schedule does nothing. An
// error matching ErrorNotFound when the set or the schedule is not there.
func (i *Inspector) PauseSchedule(ctx context.Context, set, id string) error {
	if err := checkScheduleID(id); err != nil {
		return err
	}
	s, err := i.checkScheduleSet(ctx, set)
	if err != nil {
		return err
	}
	n, err := i.scheduleState(ctx, "pause", s, id, "P")
	if err == nil && n == 0 {
		err = errorf("redq: pause schedule %q of %q: %w", id, set, ErrorNotFound)
	}
	return err
}

// ResumeSchedule starts a paused schedule of a set again from its first
// tick after now, by Redis's clock, as Schedules.Resume does (the ticks
// missed while paused are not published). Resuming a running schedule
// does nothing. An error matching ErrorNotFound when the set or the
// schedule is not there.
func (i *Inspector) ResumeSchedule(ctx context.Context, set, id string) error {
	ids := newIDSource()
	for {
		s, r, err := i.readSchedule(ctx, "resume", set, id)
		if err != nil {
			return err
		}
		if !r.paused {
			return nil
		}
		ts, err := parseSpec(r.def.Spec, r.def.Zone)
		if err != nil {
			return errorf("redq: resume schedule %q of %q: %w: %w", id, set, errBadReply, err)
		}
		now, err := i.client.Time(ctx).Result()
		if err != nil {
			return errorf("redq: resume schedule %q of %q: read Redis's clock: %w", id, set, err)
		}
		nms := ts.next(now).UnixMilli()
		env, err := encodeWithID(string(ids.next(make([]byte, 0, idLen), time.Now())), meta{key: id}, nil)
		if err != nil {
			return errorf("redq: resume schedule %q of %q: %w", id, set, err)
		}
		n, err := i.scheduleState(ctx, "resume", s, id, "U", r.ver, nms, nms+jitterOf(id, nms, r.def.JitterMs), env)
		switch {
		case err != nil:
			return err
		case n == 0:
			return errorf("redq: resume schedule %q of %q: %w", id, set, ErrorNotFound)
		case n == 1:
			return nil
		}
		// changed meanwhile: read it again
	}
}

// RemoveSchedule removes schedule id of a set, as Schedules.Remove does:
// a tick being handled meanwhile publishes nothing. An error matching
// ErrorNotFound when the set or the schedule is not there.
func (i *Inspector) RemoveSchedule(ctx context.Context, set, id string) error {
	if err := checkScheduleID(id); err != nil {
		return err
	}
	s, err := i.checkScheduleSet(ctx, set)
	if err != nil {
		return err
	}
	n, err := i.scheduleState(ctx, "remove", s, id, "R")
	if err == nil && n == 0 {
		err = errorf("redq: remove schedule %q of %q: %w", id, set, ErrorNotFound)
	}
	return err
}
