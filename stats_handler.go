package redq

import (
	"bytes"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// Limits of the refresh query option, in seconds.
const (
	minRefreshSeconds = 1
	maxRefreshSeconds = 3600
)

// NewHandler returns an HTTP handler that shows the stats of every open
// queue of connection's namespace: per queue its ready, rejected, delayed,
// expired and unacked deliveries, its consumers and connections, and below
// each queue the connections registered for it (dead ones marked, and
// those that stopped cleanly and wait for a cleaner marked stopped), followed
// by the connections that consume none of the queues. The JSON form is
// Stats as encoded by encoding/json, so it carries "delayed" and "expired"
// per queue too.
//
// Keyed items (Upsert) add a cell per queue with the keys pending, running
// and parked, and the JSON carries keyedPending, keyedRunning and
// keyedParked; timer sets (OpenTimers) get a table of their own, with
// pending and firing ("timers" in the JSON).
//
// Ready counts every priority; delayed counts deliveries waiting for their
// due time (Delay, At, Release with a delay); expired counts deliveries
// dropped because their time to live ran out, since the queue was created
// or destroyed (they are in rejected as well when the queue keeps them, see
// WithKeepExpired).
//
// Below the queues, a table lists every round of the namespace (see
// OpenRound), when there are any: its period and TTL, its items, how many
// are due now, the oldest lag (how long the most overdue item has been
// due; marked when it exceeds the period, which means the workers do not
// keep up), the hand-outs per second over the last complete 10-second window, the
// hand-outs in all and the items removed because their TTL ran out. The
// JSON form carries them under "rounds" (see RoundStat.MarshalJSON).
//
// Query options, as in rmq:
//
//	refresh=N         reload the page every N seconds (1 to 3600)
//	layout=condensed  one row per queue, no connection rows
//	format=json       the Stats as JSON instead of HTML ("html" is the default)
//
// Invalid options get 400 Bad Request; a Redis error gets 500 with the
// error's text. Only GET and HEAD are allowed. Every request reads Redis
// afresh, in the request's context. NewHandler itself cannot fail. For
// example:
//
//	http.Handle("/queues", redq.NewHandler(conn))
func NewHandler(connection Connection) http.Handler {
	return &statsHandler{conn: connection}
}

type statsHandler struct {
	conn Connection
}

// statsQuery holds the validated query options of one request.
type statsQuery struct {
	refresh   int // seconds; 0 means no refresh
	condensed bool
	json      bool
}

func parseStatsQuery(q url.Values) (statsQuery, error) {
	var sq statsQuery
	if s := q.Get("refresh"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < minRefreshSeconds || n > maxRefreshSeconds {
			return sq, errorf("redq: invalid refresh %q: must be a whole number of seconds from %d to %d", s, minRefreshSeconds, maxRefreshSeconds)
		}
		sq.refresh = n
	}
	switch l := q.Get("layout"); l {
	case "":
	case "condensed":
		sq.condensed = true
	default:
		return sq, errorf("redq: invalid layout %q: use \"condensed\" or leave it out", l)
	}
	switch f := q.Get("format"); f {
	case "", "html":
	case "json":
		sq.json = true
	default:
		return sq, errorf("redq: invalid format %q: use \"html\" or \"json\"", f)
	}
	return sq, nil
}

func (h *statsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "redq: method "+r.Method+" not allowed; use GET", http.StatusMethodNotAllowed)
		return
	}
	sq, err := parseStatsQuery(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	queues, err := h.conn.GetOpenQueuesContext(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	sort.Strings(queues)
	stats, err := h.conn.CollectStatsContext(ctx, queues)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}

	// Render into a buffer first, so that a failure is still a clean 500
	// rather than half a page.
	var buf bytes.Buffer
	contentType := "text/html; charset=utf-8"
	if sq.json {
		contentType = "application/json"
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		err = enc.Encode(stats)
	} else {
		err = statsTemplate.Execute(&buf, newStatsPage(stats, sq, time.Now()))
	}
	if err != nil {
		http.Error(w, "redq: render stats: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}

// statsPage is what the template renders: everything sorted and added up.
type statsPage struct {
	Refresh      int
	Condensed    bool
	Generated    string
	FullURL      string
	CondensedURL string
	JSONURL      string
	Queues       []statsQueueRow
	Others       []statsConnRow
	OthersDead   int
	Timers       []statsTimerRow
	Rounds       []statsRoundRow
	Schedules    []statsScheduleRow
}

type statsScheduleRow struct {
	Name                              string
	Schedules, Paused, Fired, Skipped int64
	NextDue                           string
	Late                              bool
}

type statsTimerRow struct {
	Name            string
	Pending, Firing int64
}

type statsRoundRow struct {
	Name                        string
	Period, TTL, OldestLag      string
	Items, Due, Issued, Expired int64
	IssuedPerSecond             string
	Lagging                     bool
}

type statsQueueRow struct {
	Name                              string
	Paused                            bool
	RateLimit                         RateLimit
	GroupsPending, GroupsRunning      int64
	GroupConcurrency                  int
	GroupRateLimit                    RateLimit
	Ready, Rejected, Delayed, Expired int64
	KeyedPending, KeyedRunning        int64
	KeyedParked                       int64
	Unacked, Consumers, Connections   int64
	DeadConnections                   int
	Conns                             []statsConnRow
}

type statsConnRow struct {
	Name               string
	Active, Stopped    bool
	Unacked, Consumers int64
}

// State is the connection's state word: active, stopped or dead.
func (r statsConnRow) State() string { return stateWord(r.Active, r.Stopped) }

func newStatsPage(s Stats, sq statsQuery, now time.Time) statsPage {
	p := statsPage{
		Refresh:   sq.refresh,
		Condensed: sq.condensed,
		Generated: now.UTC().Format("2006-01-02 15:04:05 UTC"),
	}
	link := func(v url.Values) string {
		if sq.refresh > 0 {
			v.Set("refresh", strconv.Itoa(sq.refresh))
		}
		return "?" + v.Encode()
	}
	p.FullURL = link(url.Values{})
	p.CondensedURL = link(url.Values{"layout": {"condensed"}})
	p.JSONURL = "?format=json"

	for _, name := range s.Names() {
		qs := s.QueueStats[name]
		row := statsQueueRow{
			Name:             name,
			Paused:           qs.Paused,
			RateLimit:        qs.RateLimit,
			GroupsPending:    qs.GroupsPending,
			GroupsRunning:    qs.GroupsRunning,
			GroupConcurrency: qs.GroupConcurrency,
			GroupRateLimit:   qs.GroupRateLimit,
			Ready:            qs.ReadyCount,
			Rejected:         qs.RejectedCount,
			Delayed:          qs.DelayedCount,
			Expired:          qs.ExpiredCount,
			KeyedPending:     qs.KeyedPending,
			KeyedRunning:     qs.KeyedRunning,
			KeyedParked:      qs.KeyedParked,
			Unacked:          qs.UnackedCount(),
			Consumers:        qs.ConsumerCount(),
			Connections:      qs.ConnectionCount(),
		}
		for _, conn := range sortedStatsKeys(qs.Connections) {
			cs := qs.Connections[conn]
			if !cs.Active && !cs.Stopped {
				row.DeadConnections++
			}
			row.Conns = append(row.Conns, statsConnRow{Name: conn, Active: cs.Active, Stopped: cs.Stopped, Unacked: cs.UnackedCount, Consumers: cs.ConsumerCount})
		}
		p.Queues = append(p.Queues, row)
	}
	for _, name := range sortedStatsKeys(s.TimerStats) {
		ts := s.TimerStats[name]
		p.Timers = append(p.Timers, statsTimerRow{Name: name, Pending: ts.Pending, Firing: ts.Firing})
	}
	for _, name := range s.RoundNames() {
		rs := s.RoundStats[name]
		ttl := "none"
		if rs.TTL > 0 {
			ttl = rs.TTL.String()
		}
		p.Rounds = append(p.Rounds, statsRoundRow{
			Name: name, Period: rs.Period.String(), TTL: ttl, OldestLag: rs.OldestLag.String(),
			Items: rs.ItemCount, Due: rs.DueCount, Issued: rs.IssuedCount, Expired: rs.ExpiredCount,
			IssuedPerSecond: strconv.FormatFloat(rs.IssuedPerSecond, 'f', 1, 64), Lagging: rs.OldestLag > rs.Period,
		})
	}
	for _, name := range s.ScheduleNames() {
		st := s.ScheduleStats[name]
		row := statsScheduleRow{Name: name, Schedules: st.Schedules, Paused: st.Paused, Fired: st.Fired, Skipped: st.Skipped, NextDue: "-"}
		if !st.NextDue.IsZero() {
			row.NextDue = st.NextDue.UTC().Format("2006-01-02 15:04:05 UTC")
			// a tick a minute overdue: no process runs the set's loop
			row.Late = now.Sub(st.NextDue) > time.Minute
		}
		p.Schedules = append(p.Schedules, row)
	}
	for _, conn := range sortedStatsKeys(s.OtherConnections) {
		active := s.OtherConnections[conn]
		if !active && !s.StoppedConnections[conn] {
			p.OthersDead++
		}
		p.Others = append(p.Others, statsConnRow{Name: conn, Active: active, Stopped: s.StoppedConnections[conn]})
	}
	return p
}

func sortedStatsKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// statsTemplate is an html/template, so every name coming from Redis is
// escaped for the context it appears in (text or attribute).
var statsTemplate = template.Must(template.New("stats").Parse(statsHTML))

// Table cells carry data-field and rows data-queue / data-connection /
// data-other, so that scripts and tests can read the numbers reliably.
const statsHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{{- if .Refresh}}
<meta http-equiv="refresh" content="{{.Refresh}}">
{{- end}}
<title>redq</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; margin: 2rem; }
h1 { font-size: 1.5rem; margin: 0 0 .25rem; }
h2 { font-size: 1.1rem; margin: 2rem 0 .5rem; }
p.meta { color: #656d76; margin: 0 0 1.25rem; }
p.meta a { color: #0969da; }
table { border-collapse: collapse; min-width: 56rem; }
th, td { padding: .3rem .8rem; text-align: right; border-bottom: 1px solid #d0d7de; font-variant-numeric: tabular-nums; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f6f8fa; font-weight: 600; }
tr.queue th { font-weight: 600; }
tr.queue td.nonzero-rejected, tr.queue td.nonzero-expired, tr.round td.lagging { color: #9a6700; font-weight: 600; }
tr.connection { color: #57606a; }
tr.connection td.name { padding-left: 2rem; font-family: ui-monospace, monospace; font-size: .9em; }
tr.dead { background: #ffebe9; }
.status { display: inline-block; padding: 0 .45rem; border-radius: 1rem; font-size: .8em; font-weight: 600; }
.status.active { background: #dafbe1; color: #1a7f37; }
.status.dead { background: #cf222e; color: #fff; }
.status.stopped { background: #eaeef2; color: #57606a; }
.status.rate { background: #e0f2fe; color: #075985; }
.status.groups { background: #ede9fe; color: #5b21b6; }
.empty { color: #656d76; font-style: italic; }
</style>
</head>
<body>
<h1>redq</h1>
<p class="meta">{{len .Queues}} queue{{if ne (len .Queues) 1}}s{{end}} &middot; generated {{.Generated}}
{{- if .Refresh}} &middot; refreshing every {{.Refresh}}s{{end}}
&middot; {{if .Condensed}}<a href="{{.FullURL}}">full layout</a>{{else}}<a href="{{.CondensedURL}}">condensed layout</a>{{end}}
&middot; <a href="{{.JSONURL}}">JSON</a></p>
<table id="queues">
<thead>
<tr><th scope="col">queue{{if not .Condensed}} / connection{{end}}</th><th scope="col">ready</th><th scope="col">rejected</th><th scope="col" title="waiting for their due time">delayed</th><th scope="col" title="dropped because their time to live ran out">expired</th><th scope="col">unacked</th><th scope="col">consumers</th><th scope="col">connections</th><th scope="col" title="keys with a pending item, keys running, successors parked behind a running key">keyed</th></tr>
</thead>
{{- range .Queues}}
<tbody>
<tr class="queue" data-queue="{{.Name}}">
<th scope="row">{{.Name}}{{if .Paused}} <span class="status paused" data-field="paused" title="no connection fetches from it until it is resumed">paused</span>{{end}}{{if not .RateLimit.IsZero}} <span class="status rate" data-field="rate-limit" title="rate limit: at most this many hand-outs in any window of this length">{{.RateLimit}}</span>{{end}}{{if or .GroupsPending .GroupsRunning}} <span class="status groups" data-field="groups" title="groups with pending deliveries / groups with deliveries in flight; K: at most this many of a group in flight">groups {{.GroupsPending}}/{{.GroupsRunning}} K={{.GroupConcurrency}}{{if not .GroupRateLimit.IsZero}} {{.GroupRateLimit}}{{end}}</span>{{end}}</th>
<td data-field="ready">{{.Ready}}</td>
<td data-field="rejected"{{if .Rejected}} class="nonzero-rejected"{{end}}>{{.Rejected}}</td>
<td data-field="delayed">{{.Delayed}}</td>
<td data-field="expired"{{if .Expired}} class="nonzero-expired"{{end}}>{{.Expired}}</td>
<td data-field="unacked">{{.Unacked}}</td>
<td data-field="consumers">{{.Consumers}}</td>
<td data-field="connections">{{.Connections}}{{if .DeadConnections}} <span class="status dead" title="dead connections still holding unacked deliveries until a cleaner runs">{{.DeadConnections}} dead</span>{{end}}</td>
<td class="keyed">{{if or .KeyedPending .KeyedRunning .KeyedParked}}<span data-field="keyed-pending">{{.KeyedPending}}</span> pending &middot; <span data-field="keyed-running">{{.KeyedRunning}}</span> running &middot; <span data-field="keyed-parked">{{.KeyedParked}}</span> parked{{end}}</td>
</tr>
{{- if not $.Condensed}}
{{- $queue := .Name}}
{{- range .Conns}}
<tr class="connection {{.State}}" data-queue="{{$queue}}" data-connection="{{.Name}}">
<td class="name">{{.Name}}</td>
<td></td>
<td></td>
<td></td>
<td></td>
<td data-field="unacked">{{.Unacked}}</td>
<td data-field="consumers">{{.Consumers}}</td>
<td data-field="status"><span class="status {{.State}}">{{.State}}</span></td>
<td></td>
</tr>
{{- end}}
{{- end}}
</tbody>
{{- else}}
<tbody><tr><td class="empty" colspan="9">No queues have been opened in this namespace yet.</td></tr></tbody>
{{- end}}
</table>
{{- if .Timers}}
<h2>Timers</h2>
<table id="timers">
<thead><tr><th scope="col">timer set</th><th scope="col" title="timers waiting to fire">pending</th><th scope="col" title="fires taken and not yet acked">firing</th></tr></thead>
<tbody>
{{- range .Timers}}
<tr data-timers="{{.Name}}"><th scope="row">{{.Name}}</th><td data-field="pending">{{.Pending}}</td><td data-field="firing">{{.Firing}}</td></tr>
{{- end}}
</tbody>
</table>
{{- end}}
{{- if .Rounds}}
<h2>Rounds</h2>
<table id="rounds">
<thead>
<tr><th scope="col">round</th><th scope="col" title="the least time between two hand-outs of one item">period</th><th scope="col" title="items not renewed within it are removed">ttl</th><th scope="col">items</th><th scope="col" title="handed out a period ago or more, or never">due</th><th scope="col" title="how long the most overdue item has been due">oldest lag</th><th scope="col" title="over the last complete 10 seconds">issued/s</th><th scope="col">issued</th><th scope="col" title="removed because their time to live ran out">expired</th></tr>
</thead>
<tbody>
{{- range .Rounds}}
<tr class="round" data-round="{{.Name}}">
<th scope="row">{{.Name}}</th>
<td data-field="period">{{.Period}}</td>
<td data-field="ttl">{{.TTL}}</td>
<td data-field="items">{{.Items}}</td>
<td data-field="due">{{.Due}}</td>
<td data-field="oldestLag"{{if .Lagging}} class="lagging" title="longer than the period: the workers do not keep up"{{end}}>{{.OldestLag}}</td>
<td data-field="issuedPerSecond">{{.IssuedPerSecond}}</td>
<td data-field="issued">{{.Issued}}</td>
<td data-field="expired">{{.Expired}}</td>
</tr>
{{- end}}
</tbody>
</table>
{{- end}}
{{- if .Schedules}}
<h2>Schedules</h2>
<table id="schedules">
<thead>
<tr><th scope="col">schedule set</th><th scope="col">schedules</th><th scope="col">paused</th><th scope="col" title="ticks published">fired</th><th scope="col" title="ticks left out by a catch-up or overlap policy">skipped</th><th scope="col" title="the earliest next tick of a schedule that is not paused">next due</th></tr>
</thead>
<tbody>
{{- range .Schedules}}
<tr class="schedules" data-schedules="{{.Name}}">
<th scope="row">{{.Name}}</th>
<td data-field="schedules">{{.Schedules}}</td>
<td data-field="paused">{{.Paused}}</td>
<td data-field="fired">{{.Fired}}</td>
<td data-field="skipped">{{.Skipped}}</td>
<td data-field="nextDue"{{if .Late}} class="lagging" title="over a minute overdue: no process runs this set's loop (Schedules.Run)"{{end}}>{{.NextDue}}</td>
</tr>
{{- end}}
</tbody>
</table>
{{- end}}
{{- if .Condensed}}
<p class="meta">{{len .Others}} other connection{{if ne (len .Others) 1}}s{{end}}{{if .OthersDead}} ({{.OthersDead}} dead){{end}}</p>
{{- else}}
<h2>Other connections</h2>
<table id="other-connections">
<thead><tr><th scope="col">connection</th><th scope="col">status</th></tr></thead>
<tbody>
{{- range .Others}}
<tr class="connection {{.State}}" data-other="{{.Name}}">
<td class="name">{{.Name}}</td>
<td data-field="status"><span class="status {{.State}}">{{.State}}</span></td>
</tr>
{{- else}}
<tr><td class="empty" colspan="2">No other connections.</td></tr>
{{- end}}
</tbody>
</table>
{{- end}}
</body>
</html>
`
