package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redq/redq"
)

// "redq schedules": the schedule sets (see Connection.OpenSchedules) read
// through the Inspector, and the actions on one schedule. Listing is
// read-only; pause, resume and remove each act once, atomically in Redis.

const schedulesDetails = `
Without arguments: every schedule set of the namespace with its counts
(schedules, paused ones, ticks fired and skipped) and its next due tick. A
next due tick well in the past means no process runs the set's loop.

With SET: the set's schedules, a page at a time (--cursor, --limit): spec,
time zone, target queue, paused, next tick, last tick fired, counts and
policies (catch-up, overlap, jitter).

pause SET ID, resume SET ID and remove SET ID act on one schedule as the
library's Schedules.Pause, Resume and Remove do: a paused schedule
publishes nothing until resumed, and then goes on from its first tick after
now; a tick being handled meanwhile is not published. There is no "run
now": a tick outside the spec would break the one-delivery-per-tick rule.

Examples:
  redq schedules
  redq schedules nightly --json
  redq schedules pause nightly report`

// scheduleVerbs are the actions of "redq schedules VERB SET ID".
var scheduleVerbs = []string{"pause", "resume", "remove"}

// schedulesCommand: redq schedules [--json]; redq schedules SET [--cursor C]
// [--limit 50] [--json]; redq schedules pause|resume|remove SET ID.
func schedulesCommand(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	asJSON := fs.Bool("json", false, "print the sets (or the set's schedules) as JSON")
	cursor := fs.String("cursor", "", "with SET: the page to read (the cursor printed under the previous page)")
	limit := fs.Int("limit", redq.DefaultListLimit, fmt.Sprintf("with SET: schedules per page (a hint, as SCAN's), 1 to %d", redq.MaxListLimit))
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		verb := ""
		switch {
		case len(args) == 3 && slices.Contains(scheduleVerbs, args[0]):
			verb = args[0]
		case len(args) > 0 && slices.Contains(scheduleVerbs, args[0]):
			return usagef("%s takes SET ID", args[0])
		case len(args) > 1:
			return usagef("unexpected argument %q (this command takes SET, or %s SET ID)", args[1], strings.Join(scheduleVerbs, "|"))
		}
		if len(args) != 1 && (*cursor != "" || *limit != redq.DefaultListLimit) {
			return usagef("--cursor and --limit go with SET")
		}
		if *limit < 1 || *limit > redq.MaxListLimit {
			return usagef("--limit must be from 1 to %d, is %d", redq.MaxListLimit, *limit)
		}
		if verb != "" && *asJSON {
			return usagef("--json goes with the listings, not with %s", verb)
		}
		in, closeIn, err := rf.inspector(ctx)
		if err != nil {
			return err
		}
		defer closeIn()
		switch {
		case verb != "":
			return scheduleAction(ctx, in, verb, args[1], args[2], stdout)
		case len(args) == 1:
			return listSchedules(ctx, in, args[0], *cursor, *limit, *asJSON, stdout)
		}
		sets, err := in.ScheduleSets(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, sets)
		}
		if len(sets) == 0 {
			fmt.Fprintf(stderr, "redq: no schedule sets in namespace %q\n", rf.namespace)
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "SET\tSCHEDULES\tPAUSED\tNEXT DUE\tFIRED\tSKIPPED")
		now := time.Now()
		for _, name := range sortedKeys(sets) {
			s := sets[name]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\n", name, s.Schedules, s.Paused, when(s.NextDue, now), s.Fired, s.Skipped)
		}
		return tw.Flush()
	}
}

// scheduleAction runs "redq schedules VERB SET ID".
func scheduleAction(ctx context.Context, in *redq.Inspector, verb, set, id string, stdout io.Writer) error {
	var err error
	done := ""
	switch verb {
	case "pause":
		err = in.PauseSchedule(ctx, set, id)
		done = "paused schedule %q of set %q: it publishes nothing until redq schedules resume"
	case "resume":
		err = in.ResumeSchedule(ctx, set, id)
		done = "resumed schedule %q of set %q from its next tick"
	case "remove":
		err = in.RemoveSchedule(ctx, set, id)
		done = "removed schedule %q of set %q"
	}
	if err != nil {
		return scheduleError(ctx, in, err, set, id)
	}
	fmt.Fprintf(stdout, done+"\n", id, set)
	return nil
}

// scheduleError is queueError for schedule sets: an unknown set is a
// usage error that names the sets there are; an unknown schedule names
// itself.
func scheduleError(ctx context.Context, in *redq.Inspector, err error, set, id string) error {
	if errors.Is(err, redq.ErrorNotFound) && !errors.Is(err, redq.ErrorInvalidArgument) {
		if sets, serr := in.ScheduleSets(ctx); serr == nil {
			if _, ok := sets[set]; !ok {
				return unknownScheduleSet(set, in.Namespace(), sortedKeys(sets))
			}
		}
	}
	subject := fmt.Sprintf("schedule set %q", set)
	if id != "" {
		subject = fmt.Sprintf("schedule %q of set %q", id, set)
	}
	return inspectorError(err, id, subject)
}

// unknownScheduleSet is the usage error for a schedule set that is not in
// namespace ns, naming the sets there are.
func unknownScheduleSet(set, ns string, sets []string) error {
	if len(sets) == 0 {
		return usagef("no schedule set %q in namespace %q: it has none", set, ns)
	}
	list := strings.Join(sets[:min(len(sets), maxListedQueues)], ", ")
	if len(sets) > maxListedQueues {
		list += fmt.Sprintf(" and %d more", len(sets)-maxListedQueues)
	}
	return usagef("no schedule set %q in namespace %q; schedule sets: %s", set, ns, list)
}

// listSchedules prints a page of a set's schedules.
func listSchedules(ctx context.Context, in *redq.Inspector, set, cursor string, limit int, asJSON bool, stdout io.Writer) error {
	page, err := in.ListSchedules(ctx, set, cursor, limit)
	if err != nil {
		return scheduleError(ctx, in, err, set, "")
	}
	if asJSON {
		items := make([]scheduleJSON, len(page.Items))
		for i, s := range page.Items {
			items[i] = newScheduleJSON(s)
		}
		return writeJSON(stdout, schedulePageJSON{Items: items, Next: page.Next, Total: page.Total})
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "ID\tSPEC\tZONE\tTARGET\tPAUSED\tNEXT\tLAST FIRE\tFIRED\tSKIPPED\tCATCH-UP\tOVERLAP\tJITTER")
	now := time.Now()
	for _, s := range page.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", cell(s.ID), cell(s.Spec), cell(s.TimeZone), s.Target,
			yesNo(s.Paused), when(s.Next, now), when(s.LastFire, now), s.Fired, s.Skipped, s.CatchUp, overlapText(s.Overlap), s.Jitter)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%d of %d schedules of set %q", len(page.Items), page.Total, set)
	if page.Next != "" {
		fmt.Fprintf(stdout, "; next page: --cursor %s\n", page.Next)
	} else {
		fmt.Fprintln(stdout, "; no further page")
	}
	return nil
}

// overlapText is an overlap policy in a table or JSON: "allow" or "skip".
func overlapText(o redq.Overlap) string {
	if o == redq.OverlapSkip {
		return "skip"
	}
	return "allow"
}

// schedulePageJSON is a page of "redq schedules SET --json".
type schedulePageJSON struct {
	Items []scheduleJSON `json:"items"`
	Next  string         `json:"next"`
	Total int64          `json:"total"`
}

// scheduleJSON is a schedule in JSON: the payload as deliveryJSON's; times
// in RFC 3339, omitted when not set.
type scheduleJSON struct {
	ID            string     `json:"id"`
	Spec          string     `json:"spec"`
	TimeZone      string     `json:"timeZone,omitempty"`
	Target        string     `json:"target"`
	Paused        bool       `json:"paused"`
	Next          *time.Time `json:"next,omitempty"`
	LastFire      *time.Time `json:"lastFire,omitempty"`
	Fired         int64      `json:"fired"`
	Skipped       int64      `json:"skipped"`
	Version       int64      `json:"version"`
	CatchUp       string     `json:"catchUp"`
	Overlap       string     `json:"overlap"`
	JitterMs      int64      `json:"jitterMs"`
	Payload       *string    `json:"payload,omitempty"`
	PayloadBase64 *string    `json:"payloadBase64,omitempty"`
}

func newScheduleJSON(s redq.ScheduleInfo) scheduleJSON {
	j := scheduleJSON{ID: s.ID, Spec: s.Spec, TimeZone: s.TimeZone, Target: s.Target, Paused: s.Paused,
		Next: timePtr(s.Next), LastFire: timePtr(s.LastFire), Fired: s.Fired, Skipped: s.Skipped, Version: s.Version,
		CatchUp: s.CatchUp.String(), Overlap: overlapText(s.Overlap), JitterMs: s.Jitter.Milliseconds()}
	if utf8.Valid(s.Payload) {
		p := string(s.Payload)
		j.Payload = &p
	} else {
		p := base64.StdEncoding.EncodeToString(s.Payload)
		j.PayloadBase64 = &p
	}
	return j
}
