package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/redq/redq"
)

// The read-only commands: each reads through an Inspector, which registers
// no connection and writes nothing (TestReadOnlyCommands compares every key
// before and after).

// previewRunes is how much of a payload a table shows.
const previewRunes = 40

const inspectDetails = `
States: ready, delayed, rejected, unacked (held by a connection: --connection
narrows it to one) and keyed (items pending under a key; their KEY column is
what run-now and cancel take). Ready lists pending grouped deliveries last,
with their GROUP. A page is a snapshot; --cursor takes the
value printed under the table (or "next" in --json) to read the next one.
--search keeps the entries whose payload contains the text or whose id
starts with it; it examines a bounded number of entries per page and says
how many.

Examples:
  redq inspect jobs --state rejected
  redq inspect jobs --state rejected --search timeout --json
  redq inspect jobs --state unacked --connection worker-1a2b`

// queuesCommand: redq queues [--json]
func queuesCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	asJSON := fs.Bool("json", false, "print the queues as JSON")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		in, closeIn, err := rf.inspector(ctx)
		if err != nil {
			return err
		}
		defer closeIn()
		queues, err := in.Queues(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			if queues == nil {
				queues = []redq.QueueInfo{}
			}
			return writeJSON(stdout, queues)
		}
		if len(queues) == 0 {
			fmt.Fprintf(stderr, "redq: no open queues in namespace %q\n", rf.namespace)
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "QUEUE\tREADY\tDELAYED\tUNACKED\tREJECTED\tKEYED\tPAUSED\tRATE\tGROUPS\tCONSUMERS\tCONNECTIONS\tPUBLISHED\tACKED\tREJECTS\tRETRIED")
		for _, q := range queues {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", q.Name, q.Ready, q.Delayed, q.Unacked, q.Rejected,
				q.KeyedPending, yesNo(q.Paused), rateText(q.RateLimit), groupsText(q), q.Consumers, q.Connections, q.Published, q.Acked, q.Rejects, q.Retried)
		}
		return tw.Flush()
	}
}

// inspectCommand: redq inspect QUEUE [--state ready] [--connection C]
// [--limit 50] [--cursor C] [--search S] [--max-payload 1024] [--json]
func inspectCommand(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	state := fs.String("state", string(redq.StateReady), "state to list: "+statesList(redq.DeliveryStates()))
	conn := fs.String("connection", "", "with --state unacked: only the deliveries this connection holds")
	limit := fs.Int("limit", redq.DefaultListLimit, fmt.Sprintf("entries per page, 1 to %d", redq.MaxListLimit))
	cursor := fs.String("cursor", "", "the page to read: the cursor printed under the previous page (default: the first page)")
	search := fs.String("search", "", "keep entries whose payload contains this text or whose id starts with it")
	maxPayload := fs.Int("max-payload", redq.DefaultMaxPayload, "with --json: payload bytes per entry (-1: whole payloads)")
	asJSON := fs.Bool("json", false, "print the page as JSON")
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		queue := args[0]
		st, err := parseState(*state, redq.DeliveryStates())
		if err != nil {
			return err
		}
		if *limit < 1 || *limit > redq.MaxListLimit {
			return usagef("--limit must be from 1 to %d, is %d", redq.MaxListLimit, *limit)
		}
		if *maxPayload < -1 {
			return usagef("--max-payload must be -1 (whole payloads) or more, is %d", *maxPayload)
		}
		if *conn != "" && st != redq.StateUnacked {
			return usagef("--connection goes with --state unacked, not %s", st)
		}
		in, closeIn, err := rf.inspector(ctx)
		if err != nil {
			return err
		}
		defer closeIn()
		mp := *maxPayload
		switch {
		case !*asJSON:
			mp = 4 * previewRunes // a table shows a few words of each
		case mp == 0:
			mp = 1 // ListOptions reads 0 as its default
		}
		page, err := in.List(ctx, queue, redq.ListOptions{State: st, Connection: *conn, Cursor: *cursor, Limit: *limit, MaxPayload: mp, Search: *search})
		if err != nil {
			return queueError(ctx, in, err, queue, queue, queueSubject(queue))
		}
		if *asJSON {
			items := make([]deliveryJSON, len(page.Items))
			for i, d := range page.Items {
				items[i] = newDeliveryJSON(d)
			}
			return writeJSON(stdout, pageJSON{Items: items, Next: page.Next, Total: page.Total, Scanned: page.Scanned})
		}
		tw := newTable(stdout)
		switch st {
		case redq.StateKeyed:
			fmt.Fprintln(tw, "KEY\tID\tDUE\tRETRIED\tSIZE\tPAYLOAD")
		case redq.StateUnacked:
			fmt.Fprintln(tw, "ID\tCONNECTION\tRETRIED\tPUBLISHED\tSIZE\tPAYLOAD")
		case redq.StateDelayed:
			fmt.Fprintln(tw, "ID\tDUE\tRETRIED\tPRIORITY\tSIZE\tPAYLOAD")
		case redq.StateRejected:
			fmt.Fprintln(tw, "ID\tRETRIED\tPUBLISHED\tREASON\tSIZE\tPAYLOAD")
		default:
			fmt.Fprintln(tw, "ID\tPRIORITY\tGROUP\tRETRIED\tPUBLISHED\tSIZE\tPAYLOAD")
		}
		now := time.Now()
		for _, d := range page.Items {
			p := preview(d.Payload, d.Truncated, previewRunes)
			switch st {
			case redq.StateKeyed:
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", cell(d.Key), d.ID, when(d.DueAt, now), d.Attempts, d.PayloadSize, p)
			case redq.StateUnacked:
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", d.ID, cell(d.Connection), d.Attempts, when(d.PublishedAt, now), d.PayloadSize, p)
			case redq.StateDelayed:
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", d.ID, when(d.DueAt, now), d.Attempts, d.Priority, d.PayloadSize, p)
			case redq.StateRejected:
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", d.ID, d.Attempts, when(d.PublishedAt, now), cell(shorten(d.Reason, previewRunes)), d.PayloadSize, p)
			default:
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%s\n", d.ID, d.Priority, cell(d.Group), d.Attempts, when(d.PublishedAt, now), d.PayloadSize, p)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		what := fmt.Sprintf("%d of %d %s", len(page.Items), page.Total, st)
		if *search != "" {
			what += fmt.Sprintf(" matching %q (%d examined)", *search, page.Scanned)
		}
		fmt.Fprintf(stdout, "\n%s in queue %q", what, queue)
		if page.Next != "" {
			fmt.Fprintf(stdout, "; next page: --cursor %s\n", page.Next)
		} else {
			fmt.Fprintln(stdout, "; no further page")
		}
		return nil
	}
}

// deliveryCommand: redq delivery QUEUE ID [--json] [--payload-out FILE]
func deliveryCommand(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	asJSON := fs.Bool("json", false, "print the delivery as JSON (payload cut at 1024 bytes unless --payload-out)")
	out := fs.String("payload-out", "", `write the whole payload to this file ("-": standard output, alone)`)
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		queue, id := args[0], args[1]
		in, closeIn, err := rf.inspector(ctx)
		if err != nil {
			return err
		}
		defer closeIn()
		d, err := in.Delivery(ctx, queue, id)
		if err != nil {
			return queueError(ctx, in, err, queue, id, deliverySubject(queue, id))
		}
		if *out != "" {
			payload, err := in.Payload(ctx, queue, id)
			if err != nil {
				return queueError(ctx, in, err, queue, id, deliverySubject(queue, id))
			}
			if *out == "-" {
				_, err := stdout.Write(payload)
				return err
			}
			if err := os.WriteFile(*out, payload, 0o600); err != nil {
				return fmt.Errorf("write the payload: %w", err)
			}
			fmt.Fprintf(stderr, "redq: wrote %d bytes of payload to %s\n", len(payload), *out)
		}
		if *asJSON {
			return writeJSON(stdout, newDeliveryJSON(d))
		}
		return writeDelivery(stdout, d, time.Now())
	}
}

// writeDelivery prints one delivery as "field: value" lines, its headers,
// and its payload last.
func writeDelivery(w io.Writer, d redq.DeliveryInfo, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("id", d.ID)
	row("queue", d.Queue)
	row("state", string(d.State))
	row("key", d.Key)
	row("group", d.Group)
	row("connection", d.Connection)
	row("retried", strconv.Itoa(d.Attempts))
	row("priority", strconv.Itoa(d.Priority))
	row("published", at(d.PublishedAt, now))
	row("due", at(d.DueAt, now))
	row("expires", at(d.ExpireAt, now))
	row("reason", d.Reason)
	size := strconv.Itoa(d.PayloadSize) + " bytes"
	if d.Truncated {
		size += fmt.Sprintf(" (%d shown: --payload-out FILE writes it all)", len(d.Payload))
	}
	row("size", size)
	keys := make([]string, 0, len(d.Header))
	for k := range d.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range d.Header[k] {
			row("header "+k, v)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "payload:")
	if utf8.Valid(d.Payload) {
		_, err := fmt.Fprintf(w, "%s\n", d.Payload)
		return err
	}
	_, err := fmt.Fprintf(w, "(binary; base64) %s\n", base64.StdEncoding.EncodeToString(d.Payload))
	return err
}

// connectionsCommand: redq connections [--json]
func connectionsCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	asJSON := fs.Bool("json", false, "print the connections as JSON")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		in, closeIn, err := rf.inspector(ctx)
		if err != nil {
			return err
		}
		defer closeIn()
		conns, err := in.Connections(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			out := make([]connectionJSON, len(conns))
			for i, c := range conns {
				out[i] = connectionJSON{Name: c.Name, State: c.State, HeartbeatAgeMs: -1, Unacked: c.Unacked, Consumers: c.Consumers}
				if c.HeartbeatAge >= 0 {
					out[i].HeartbeatAgeMs = c.HeartbeatAge.Milliseconds()
				}
			}
			return writeJSON(stdout, out)
		}
		if len(conns) == 0 {
			fmt.Fprintf(stderr, "redq: no connections in namespace %q\n", rf.namespace)
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "CONNECTION\tSTATE\tHEARTBEAT\tQUEUE\tUNACKED\tCONSUMERS")
		for _, c := range conns {
			hb := "none"
			if c.HeartbeatAge >= 0 {
				hb = c.HeartbeatAge.Round(time.Millisecond).String() + " ago"
			}
			queues := make([]string, 0, len(c.Consumers)+len(c.Unacked))
			for q := range c.Consumers {
				queues = append(queues, q)
			}
			for q := range c.Unacked {
				if _, ok := c.Consumers[q]; !ok {
					queues = append(queues, q)
				}
			}
			slices.Sort(queues)
			if len(queues) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\n", c.Name, c.State, hb)
			}
			for i, q := range queues {
				name, state, age := c.Name, c.State, hb
				if i > 0 {
					name, state, age = "", "", ""
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", name, state, age, q, c.Unacked[q], c.Consumers[q])
			}
		}
		return tw.Flush()
	}
}

// timersCommand: redq timers [--json]
func timersCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	asJSON := fs.Bool("json", false, "print the timer sets as JSON")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		in, closeIn, err := rf.inspector(ctx)
		if err != nil {
			return err
		}
		defer closeIn()
		timers, err := in.Timers(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			if timers == nil {
				timers = map[string]redq.TimerStat{}
			}
			return writeJSON(stdout, timers)
		}
		if len(timers) == 0 {
			fmt.Fprintf(stderr, "redq: no timer sets in namespace %q\n", rf.namespace)
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "TIMERS\tPENDING\tFIRING")
		for _, name := range sortedKeys(timers) {
			t := timers[name]
			fmt.Fprintf(tw, "%s\t%d\t%d\n", name, t.Pending, t.Firing)
		}
		return tw.Flush()
	}
}

// roundsCommand: redq rounds [--json], or redq rounds --round NAME
// [--cursor C] [--limit 50] [--json] for a round's items.
func roundsCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	rf := addRedisFlags(fs)
	asJSON := fs.Bool("json", false, "print the rounds (or the round's items) as JSON")
	round := fs.String("round", "", "list this round's items, a page at a time, in the order they are handed out")
	cursor := fs.String("cursor", "", "with --round: the page to read (the cursor printed under the previous page)")
	limit := fs.Int("limit", redq.DefaultListLimit, fmt.Sprintf("with --round: items per page, 1 to %d", redq.MaxListLimit))
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		if *round == "" && (*cursor != "" || *limit != redq.DefaultListLimit) {
			return usagef("--cursor and --limit go with --round NAME")
		}
		if *limit < 1 || *limit > redq.MaxListLimit {
			return usagef("--limit must be from 1 to %d, is %d", redq.MaxListLimit, *limit)
		}
		in, closeIn, err := rf.inspector(ctx)
		if err != nil {
			return err
		}
		defer closeIn()
		if *round != "" {
			return listRound(ctx, in, *round, *cursor, *limit, *asJSON, stdout)
		}
		rounds, err := in.Rounds(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			if rounds == nil {
				rounds = map[string]redq.RoundStat{}
			}
			return writeJSON(stdout, rounds)
		}
		if len(rounds) == 0 {
			fmt.Fprintf(stderr, "redq: no rounds in namespace %q\n", rf.namespace)
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "ROUND\tPERIOD\tTTL\tITEMS\tDUE\tOLDEST LAG\tISSUED\tISSUED/S\tEXPIRED")
		for _, name := range sortedKeys(rounds) {
			r := rounds[name]
			ttl := "none"
			if r.TTL > 0 {
				ttl = r.TTL.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%.1f\t%d\n", name, r.Period, ttl, r.ItemCount, r.DueCount,
				r.OldestLag.Round(time.Millisecond), r.IssuedCount, r.IssuedPerSecond, r.ExpiredCount)
		}
		return tw.Flush()
	}
}

// listRound prints a page of a round's items.
func listRound(ctx context.Context, in *redq.Inspector, round, cursor string, limit int, asJSON bool, stdout io.Writer) error {
	page, err := in.ListRound(ctx, round, cursor, limit)
	if err != nil {
		return inspectorError(err, round, fmt.Sprintf("round %q", round))
	}
	if asJSON {
		items := make([]roundItemJSON, len(page.Items))
		for i, it := range page.Items {
			items[i] = roundItemJSON{ID: it.ID, Issued: it.Issued, Added: timePtr(it.Added), LastIssued: timePtr(it.LastIssued),
				NextDue: timePtr(it.NextDue), ExpireAt: timePtr(it.ExpireAt)}
			if utf8.Valid(it.Data) {
				s := string(it.Data)
				items[i].Data = &s
			} else {
				s := base64.StdEncoding.EncodeToString(it.Data)
				items[i].DataBase64 = &s
			}
		}
		return writeJSON(stdout, roundPageJSON{Items: items, Next: page.Next, Total: page.Total})
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "ID\tISSUED\tLAST ISSUED\tNEXT DUE\tADDED\tDATA")
	now := time.Now()
	for _, it := range page.Items {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", cell(it.ID), it.Issued, when(it.LastIssued, now), when(it.NextDue, now),
			when(it.Added, now), preview(it.Data, false, previewRunes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%d of %d items of round %q", len(page.Items), page.Total, round)
	if page.Next != "" {
		fmt.Fprintf(stdout, "; next page: --cursor %s\n", page.Next)
	} else {
		fmt.Fprintln(stdout, "; no further page")
	}
	return nil
}

// roundPageJSON is a page of "redq rounds --round NAME --json".
type roundPageJSON struct {
	Items []roundItemJSON `json:"items"`
	Next  string          `json:"next"`
	Total int64           `json:"total"`
}

// roundItemJSON is a round's item in JSON, its data as deliveryJSON's
// payload.
type roundItemJSON struct {
	ID         string     `json:"id"`
	Data       *string    `json:"data,omitempty"`
	DataBase64 *string    `json:"dataBase64,omitempty"`
	Issued     int64      `json:"issued"`
	Added      *time.Time `json:"added,omitempty"`
	LastIssued *time.Time `json:"lastIssued,omitempty"`
	NextDue    *time.Time `json:"nextDue,omitempty"`
	ExpireAt   *time.Time `json:"expireAt,omitempty"`
}

// pageJSON is a page of "redq inspect --json".
type pageJSON struct {
	Items   []deliveryJSON `json:"items"`
	Next    string         `json:"next"`
	Total   int64          `json:"total"`
	Scanned int            `json:"scanned"`
}

// deliveryJSON is a delivery in JSON: the payload as text when it is
// UTF-8, else in base64 (payloadBase64); times in RFC 3339, omitted when
// not set.
type deliveryJSON struct {
	ID            string      `json:"id"`
	Queue         string      `json:"queue"`
	State         string      `json:"state"`
	Connection    string      `json:"connection,omitempty"`
	Key           string      `json:"key,omitempty"`
	Group         string      `json:"group,omitempty"`
	Payload       *string     `json:"payload,omitempty"`
	PayloadBase64 *string     `json:"payloadBase64,omitempty"`
	PayloadSize   int         `json:"payloadSize"`
	Truncated     bool        `json:"truncated"`
	Header        http.Header `json:"header,omitempty"`
	Attempts      int         `json:"attempts"`
	Priority      int         `json:"priority"`
	DueAt         *time.Time  `json:"dueAt,omitempty"`
	PublishedAt   *time.Time  `json:"publishedAt,omitempty"`
	ExpireAt      *time.Time  `json:"expireAt,omitempty"`
	Reason        string      `json:"reason,omitempty"`
}

func newDeliveryJSON(d redq.DeliveryInfo) deliveryJSON {
	j := deliveryJSON{ID: d.ID, Queue: d.Queue, State: string(d.State), Connection: d.Connection, Key: d.Key, Group: d.Group,
		PayloadSize: d.PayloadSize, Truncated: d.Truncated, Header: d.Header, Attempts: d.Attempts,
		Priority: d.Priority, DueAt: timePtr(d.DueAt), PublishedAt: timePtr(d.PublishedAt), ExpireAt: timePtr(d.ExpireAt), Reason: d.Reason}
	// A payload cut in the middle of a character is still text.
	if p := d.Payload; utf8.Valid(p) || (d.Truncated && utf8.Valid(trimPartialRune(p))) {
		s := string(p)
		if !utf8.Valid(p) {
			s = string(trimPartialRune(p))
		}
		j.Payload = &s
	} else {
		s := base64.StdEncoding.EncodeToString(p)
		j.PayloadBase64 = &s
	}
	return j
}

// connectionJSON is a connection in JSON.
type connectionJSON struct {
	Name           string           `json:"name"`
	State          string           `json:"state"`
	HeartbeatAgeMs int64            `json:"heartbeatAgeMs"` // -1: no heartbeat
	Unacked        map[string]int64 `json:"unacked"`
	Consumers      map[string]int64 `json:"consumers"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of p.
func trimPartialRune(p []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(p) > 0; i++ {
		if r, _ := utf8.DecodeLastRune(p); r != utf8.RuneError {
			return p
		}
		p = p[:len(p)-1]
	}
	return p
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// parseState returns the state named s if it is one of valid, or a usage
// error listing them.
func parseState(s string, valid []redq.DeliveryState) (redq.DeliveryState, error) {
	for _, v := range valid {
		if string(v) == s {
			return v, nil
		}
	}
	return "", usagef("--state must be one of %s, is %q", statesList(valid), s)
}

func statesList(states []redq.DeliveryState) string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// inspectorError turns the Inspector's bad-input errors into usage errors
// (exit status 2), and names what was not found (subject, such as
// `delivery 0a1b… of queue "jobs"`) unless the error does already.
func inspectorError(err error, name, subject string) error {
	var ae *redq.ArgumentError
	switch {
	case errors.As(err, &ae) && ae.Arg == "delivery state":
		// The delivery is there, in a state the action does not apply
		// to: what Redis holds, not what the user typed.
		return err
	case errors.Is(err, redq.ErrorInvalidArgument):
		return usageError{err}
	case errors.Is(err, redq.ErrorNotFound) && !strings.Contains(err.Error(), name):
		return fmt.Errorf("%s: %w", subject, err)
	}
	return err
}

// queueError is inspectorError for a command on queue: when what was not
// found is the queue itself (it is not open in the namespace), a usage
// error that names the open queues, so that a mistyped name is answered
// with the right one.
func queueError(ctx context.Context, in *redq.Inspector, err error, queue, name, subject string) error {
	if errors.Is(err, redq.ErrorNotFound) {
		queues, qerr := in.Queues(ctx)
		if qerr == nil {
			names := make([]string, len(queues))
			for i, q := range queues {
				names[i] = q.Name
			}
			if !slices.Contains(names, queue) {
				return unknownQueue(queue, in.Namespace(), names)
			}
		}
	}
	return inspectorError(err, name, subject)
}

// maxListedQueues is how many open queues an unknown-queue error names.
const maxListedQueues = 20

// unknownQueue is the usage error for a queue that is not open in
// namespace ns, naming the open ones.
func unknownQueue(queue, ns string, open []string) error {
	if len(open) == 0 {
		return usagef("no queue %q is open in namespace %q: no queues are open", queue, ns)
	}
	open = slices.Sorted(slices.Values(open))
	list := strings.Join(open[:min(len(open), maxListedQueues)], ", ")
	if len(open) > maxListedQueues {
		list += fmt.Sprintf(" and %d more", len(open)-maxListedQueues)
	}
	return usagef("no queue %q is open in namespace %q; open queues: %s", queue, ns, list)
}

func queueSubject(queue string) string { return fmt.Sprintf("queue %q", queue) }

func deliverySubject(queue, id string) string {
	return fmt.Sprintf("delivery %s of queue %q", id, queue)
}

// preview shows a payload in one table cell: text with control characters
// escaped, cut at n runes with "…"; binary data as its size.
func preview(p []byte, truncated bool, n int) string {
	if !utf8.Valid(p) {
		if !truncated || !utf8.Valid(trimPartialRune(p)) {
			return "(binary)"
		}
		p = trimPartialRune(p)
	}
	s := shorten(string(p), n)
	if truncated && !strings.HasSuffix(s, "…") {
		s += "…"
	}
	return cell(s)
}

// shorten cuts s at n runes, marking the cut with "…".
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// cell escapes what would break a table row (tabs, newlines, other
// control characters) and shows an empty value as "-".
func cell(s string) string {
	if s == "" {
		return "-"
	}
	if strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) < 0 {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// when shows t relative to now, to the second: "3m20s ago", "in 1h0m0s".
func when(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	if d >= 0 {
		return d.String() + " ago"
	}
	return "in " + (-d).String()
}

// at shows t in UTC with its distance from now.
func at(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano) + " (" + when(t, now) + ")"
}

// rateText is a queue's rate limit in a table: "100/1s", or "-" for none.
func rateText(l redq.RateLimit) string {
	if l.IsZero() {
		return "-"
	}
	return l.String()
}

// groupsText is a queue's grouped work in a table (see redq.Group): the
// groups with pending deliveries / with deliveries in flight, the in-flight
// limit per group and the per-group rate limit, as "3/1 K=2 10/1s"; "-"
// when no group has pending or running deliveries.
func groupsText(q redq.QueueInfo) string {
	if q.GroupsPending == 0 && q.GroupsRunning == 0 {
		return "-"
	}
	s := fmt.Sprintf("%d/%d K=%d", q.GroupsPending, q.GroupsRunning, q.GroupConcurrency)
	if !q.GroupRateLimit.IsZero() {
		s += " " + q.GroupRateLimit.String()
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
