package dashboard

import (
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redq/redq"
)

// queueRow is one queue on the overview.
type queueRow struct {
	redq.QueueInfo
	// Rates are published, acked and rejected per second; HaveRates is
	// false until they are known.
	Rates     [3]float64
	HaveRates bool
	Chart     template.HTML
}

type timerRow struct {
	Name string
	redq.TimerStat
}

type roundRow struct {
	Name string
	redq.RoundStat
}

// overviewBody is the overview's content.
type overviewBody struct {
	Queues      []queueRow
	Total       queueRow
	QueueCount  int // queues matching the filter
	AllCount    int // queues in the namespace
	Filter      string
	PageNo      int
	Pages       int
	Timers      []timerRow
	Rounds      []roundRow
	ChartFailed bool
	NoData      bool // Redis has not been read yet
}

func (h *handler) serveOverview(w http.ResponseWriter, r *http.Request) {
	p := h.newPage(w, r, "Queues", "overview")
	p.Live = true
	filter := strings.TrimSpace(r.URL.Query().Get("filter"))
	pageNo := 1
	if s := r.URL.Query().Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			h.failMsg(w, r, http.StatusBadRequest, message{Heading: "Invalid page", Text: fmt.Sprintf("The page number must be a whole number from 1, is %q.", s)})
			return
		}
		pageNo = n
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	d, err := h.overview.get(ctx, h.src, h.opts.Refresh/2)
	status := http.StatusOK
	if err != nil {
		p.Down = downText(err)
		status = http.StatusServiceUnavailable
		if d == nil {
			p.Body = overviewBody{NoData: true}
			p.Stale = true
			h.render(w, r, status, "overview", p)
			return
		}
		p.Stale = true
		p.Updated = d.At
	}
	body := overviewBody{Filter: filter, PageNo: pageNo, AllCount: len(d.Queues)}
	var shown []redq.QueueInfo
	for _, q := range d.Queues {
		if filter == "" || strings.Contains(strings.ToLower(q.Name), strings.ToLower(filter)) {
			shown = append(shown, q)
		}
		body.Total.Ready += q.Ready
		body.Total.Delayed += q.Delayed
		body.Total.Unacked += q.Unacked
		body.Total.Rejected += q.Rejected
		body.Total.Consumers += q.Consumers
	}
	body.QueueCount = len(shown)
	body.Pages = max(1, (len(shown)+QueuesPerPage-1)/QueuesPerPage)
	if pageNo > body.Pages {
		pageNo = body.Pages
		body.PageNo = pageNo
	}
	shown = shown[(pageNo-1)*QueuesPerPage : min(len(shown), pageNo*QueuesPerPage)]
	names := make([]string, len(shown))
	for i, q := range shown {
		names[i] = q.Name
	}
	hist, herr := h.history.histories(ctx, h.src, names)
	if herr != nil && err == nil {
		body.ChartFailed = true
		h.opts.Logger.Warn("dashboard: history", "err", herr)
	}
	rates, haveRates := h.overview.rates()
	body.Total.HaveRates = true
	for _, q := range shown {
		row := queueRow{QueueInfo: q}
		pts := hist[q.Name]
		if rr, ok := rates[q.Name]; ok && haveRates {
			row.Rates, row.HaveRates = rr, true
		} else if rr, ok := lastMinuteRates(pts, d.At); ok {
			row.Rates, row.HaveRates = rr, true
		}
		if !row.HaveRates {
			body.Total.HaveRates = false
		}
		for i := range row.Rates {
			body.Total.Rates[i] += row.Rates[i]
		}
		row.Chart = sparkline(pts, d.At)
		body.Queues = append(body.Queues, row)
	}
	for name, t := range d.Timers {
		body.Timers = append(body.Timers, timerRow{name, t})
	}
	sort.Slice(body.Timers, func(i, j int) bool { return body.Timers[i].Name < body.Timers[j].Name })
	for name, rs := range d.Rounds {
		body.Rounds = append(body.Rounds, roundRow{name, rs})
	}
	sort.Slice(body.Rounds, func(i, j int) bool { return body.Rounds[i].Name < body.Rounds[j].Name })
	p.Body = body
	h.render(w, r, status, "overview", p)
}

// lastMinuteRates estimates the published, acked and rejected per second
// over the 60 seconds before now from per-minute points: the current
// minute so far plus the share of the minute before that falls in the
// window. ok is false without points.
func lastMinuteRates(pts []redq.RatePoint, now time.Time) ([3]float64, bool) {
	var r [3]float64
	if len(pts) == 0 {
		return r, false
	}
	cur := now.Truncate(time.Minute)
	prevShare := 1 - now.Sub(cur).Seconds()/60
	for _, p := range pts {
		var w float64
		switch m := p.Minute.Truncate(time.Minute); {
		case m.Equal(cur):
			w = 1
		case m.Equal(cur.Add(-time.Minute)):
			w = prevShare
		default:
			continue
		}
		r[0] += w * float64(p.Published) / 60
		r[1] += w * float64(p.Acked) / 60
		r[2] += w * float64(p.Rejected) / 60
	}
	return r, true
}

// downText is the banner's text for an error reading Redis.
func downText(err error) string {
	return "Redis cannot be read: " + strings.TrimPrefix(err.Error(), "redq: ") + ". The numbers shown are the last ones read; the page keeps trying."
}

// overviewJSON is the overview for machines.
type overviewJSON struct {
	Namespace string                    `json:"namespace"`
	Updated   time.Time                 `json:"updated"`
	Error     string                    `json:"error,omitempty"`
	Queues    []redq.QueueInfo          `json:"queues"`
	Timers    map[string]redq.TimerStat `json:"timers"`
	Rounds    map[string]redq.RoundStat `json:"rounds"`
}

func (h *handler) serveOverviewJSON(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	d, err := h.overview.get(ctx, h.src, h.opts.Refresh/2)
	out := overviewJSON{Namespace: h.ns}
	status := http.StatusOK
	if err != nil {
		out.Error = err.Error()
		status = http.StatusServiceUnavailable
	}
	if d != nil {
		out.Updated, out.Queues, out.Timers, out.Rounds = d.At, d.Queues, d.Timers, d.Rounds
	}
	writeJSON(w, status, out)
}

// connectionsBody is the connections page's content.
type connectionsBody struct {
	Connections []redq.ConnectionInfo
	Counts      map[string]int
}

func (h *handler) serveConnections(w http.ResponseWriter, r *http.Request) {
	p := h.newPage(w, r, "Connections", "connections")
	p.Live = true
	ctx, cancel := h.ctx(r)
	defer cancel()
	conns, err := h.src.Connections(ctx)
	key := "connections"
	status := http.StatusOK
	if err != nil {
		h.staleOr(p, key, err, connectionsBody{})
		h.render(w, r, http.StatusServiceUnavailable, "connections", p)
		return
	}
	sort.Slice(conns, func(i, j int) bool { return conns[i].Name < conns[j].Name })
	body := connectionsBody{Connections: conns, Counts: map[string]int{}}
	for _, c := range conns {
		body.Counts[c.State]++
	}
	h.last.put(key, body)
	p.Body = body
	h.render(w, r, status, "connections", p)
}

// staleOr fills p for a failed read: the last good body under key, greyed,
// or empty when there is none.
func (h *handler) staleOr(p *page, key string, err error, empty any) {
	h.opts.Logger.Warn("dashboard: Redis read failed", "page", key, "err", err)
	p.Down = downText(err)
	p.Stale = true
	if b, at, ok := h.last.get(key); ok {
		p.Body, p.Updated = b, at
		return
	}
	p.Body = empty
}

// queueBody is a queue page's content.
type queueBody struct {
	Queue      redq.QueueInfo
	State      redq.DeliveryState
	States     []stateTab
	Page       redq.Page
	Search     string
	Cursor     string
	Connection string
	Chart      template.HTML
	Back       string // this page's URL, where actions come back to
	Purgeable  bool
}

type stateTab struct {
	State redq.DeliveryState
	Count int64
}

// validStates is the list of states for a 400.
func validStates() []string {
	var s []string
	for _, st := range redq.DeliveryStates() {
		s = append(s, string(st))
	}
	return s
}

func (h *handler) queueNotFound(w http.ResponseWriter, r *http.Request, name string, err error) {
	m := message{Heading: "No such queue", Text: fmt.Sprintf("There is no open queue %q in namespace %q.", name, h.ns), ValidOf: "Open queues"}
	if d, _ := h.overview.get(r.Context(), h.src, h.opts.Refresh/2); d != nil {
		for _, q := range d.Queues {
			m.Valid = append(m.Valid, q.Name)
			if len(m.Valid) == 50 {
				m.Valid = append(m.Valid, "…")
				break
			}
		}
	}
	h.failMsg(w, r, http.StatusNotFound, m)
}

// badInput answers 400 for an Inspector's *ArgumentError.
func (h *handler) badInput(w http.ResponseWriter, r *http.Request, err error) {
	h.failMsg(w, r, http.StatusBadRequest, message{Heading: "Invalid request", Text: argMessage(err)})
}

func (h *handler) serveQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("queue")
	q := r.URL.Query()
	state := redq.DeliveryState(q.Get("state"))
	if state == "" {
		state = redq.StateReady
	}
	if !slices.Contains(redq.DeliveryStates(), state) {
		h.failMsg(w, r, http.StatusBadRequest, message{Heading: "Invalid state", Text: fmt.Sprintf("There is no delivery state %q.", state), Valid: validStates(), ValidOf: "Valid states", Back: h.queueURL(name, "")})
		return
	}
	limit := h.opts.PageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			h.failMsg(w, r, http.StatusBadRequest, message{Heading: "Invalid limit", Text: fmt.Sprintf("The limit must be a whole number from 1 to %d, is %q.", MaxPageSize, s), Back: h.queueURL(name, "")})
			return
		}
		limit = n
	}
	p := h.newPage(w, r, name, "overview")
	p.Live = true
	ctx, cancel := h.ctx(r)
	defer cancel()
	key := "queue " + r.URL.String()
	info, err := h.src.Queue(ctx, name)
	var page redq.Page
	if err == nil {
		page, err = h.src.List(ctx, name, redq.ListOptions{
			State: state, Connection: q.Get("connection"), Cursor: q.Get("cursor"),
			Limit: limit, MaxPayload: listPayload, Search: q.Get("q"),
		})
	}
	switch kindOf(err) {
	case errBadInput:
		h.badInput(w, r, err)
		return
	case errNotFound:
		h.queueNotFound(w, r, name, err)
		return
	}
	if err != nil {
		h.staleOr(p, key, err, queueBody{Queue: redq.QueueInfo{Name: name}, State: state, States: tabs(redq.QueueInfo{})})
		h.render(w, r, http.StatusServiceUnavailable, "queue", p)
		return
	}
	hist, herr := h.history.histories(ctx, h.src, []string{name})
	if herr != nil {
		h.opts.Logger.Warn("dashboard: history", "queue", name, "err", herr)
	}
	body := queueBody{
		Queue: info, State: state, States: tabs(info), Page: page,
		Search: q.Get("q"), Cursor: q.Get("cursor"), Connection: q.Get("connection"),
		Chart: hourChart(hist[name], time.Now()), Back: r.URL.RequestURI(),
		Purgeable: state == redq.StateReady || state == redq.StateDelayed || state == redq.StateRejected,
	}
	if h.opts.PathPrefix != "" {
		body.Back = h.opts.PathPrefix + body.Back
	}
	h.last.put(key, body)
	p.Body = body
	h.render(w, r, http.StatusOK, "queue", p)
}

func tabs(q redq.QueueInfo) []stateTab {
	return []stateTab{
		{redq.StateReady, q.Ready}, {redq.StateDelayed, q.Delayed}, {redq.StateRejected, q.Rejected},
		{redq.StateUnacked, q.Unacked}, {redq.StateKeyed, q.KeyedPending},
	}
}

// deliveryBody is a delivery page's content.
type deliveryBody struct {
	D         redq.DeliveryInfo
	Pretty    string // the payload, indented when it is JSON
	Binary    bool
	Truncated bool
	Shown     int
}

func (h *handler) serveDelivery(w http.ResponseWriter, r *http.Request) {
	name, id := r.PathValue("queue"), r.PathValue("id")
	p := h.newPage(w, r, "Delivery "+id, "overview")
	ctx, cancel := h.ctx(r)
	defer cancel()
	d, err := h.src.Delivery(ctx, name, id)
	switch kindOf(err) {
	case errBadInput:
		h.badInput(w, r, err)
		return
	case errNotFound:
		h.deliveryNotFound(w, r, name, id)
		return
	}
	if err != nil {
		h.staleOr(p, "delivery "+name+" "+id, err, deliveryBody{D: redq.DeliveryInfo{ID: id, Queue: name}})
		h.render(w, r, http.StatusServiceUnavailable, "delivery", p)
		return
	}
	body := deliveryBody{D: d}
	if d.Truncated || len(d.Payload) < d.PayloadSize {
		// The inspector cut it to its default; read the page's share.
		if full, err := h.src.Payload(ctx, name, id); err == nil {
			d.Payload = full
			body.D.Payload = full
		}
	}
	pl := d.Payload
	if len(pl) > h.opts.MaxPayload {
		pl = pl[:h.opts.MaxPayload]
		body.Truncated = true
	}
	body.Shown = len(pl)
	body.Pretty, body.Binary = formatPayload(pl, !body.Truncated)
	h.last.put("delivery "+name+" "+id, body)
	p.Body = body
	h.render(w, r, http.StatusOK, "delivery", p)
}

func (h *handler) servePayload(w http.ResponseWriter, r *http.Request) {
	name, id := r.PathValue("queue"), r.PathValue("id")
	ctx, cancel := h.ctx(r)
	defer cancel()
	b, err := h.src.Payload(ctx, name, id)
	switch kindOf(err) {
	case errBadInput:
		h.badInput(w, r, err)
		return
	case errNotFound:
		h.deliveryNotFound(w, r, name, id)
		return
	}
	if err != nil {
		p := h.newPage(w, r, "Redis unavailable", "")
		p.Down = downText(err)
		p.Body = message{Heading: "Payload not available", Text: "Redis cannot be read right now; try again when the banner is gone.", Back: h.queueURL(name, "")}
		h.render(w, r, http.StatusServiceUnavailable, "message", p)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", safeFileName(name)+"-"+safeFileName(id)+".bin"))
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b) // a client that went away cannot be told
}

// safeFileName keeps letters, digits, - and _.
func safeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// roundBody is a round page's content.
type roundBody struct {
	Name   string
	Stat   redq.RoundStat
	Known  bool // Stat was read
	Page   redq.RoundPage
	Cursor string
}

func (h *handler) serveRound(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("round")
	cursor := r.URL.Query().Get("cursor")
	p := h.newPage(w, r, "Round "+name, "overview")
	p.Live = true
	ctx, cancel := h.ctx(r)
	defer cancel()
	key := "round " + r.URL.String()
	page, err := h.src.ListRound(ctx, name, cursor, h.opts.PageSize)
	switch kindOf(err) {
	case errBadInput:
		h.badInput(w, r, err)
		return
	case errNotFound:
		h.failMsg(w, r, http.StatusNotFound, message{Heading: "No such round", Text: fmt.Sprintf("There is no round %q in namespace %q.", name, h.ns)})
		return
	}
	if err != nil {
		h.staleOr(p, key, err, roundBody{Name: name, Cursor: cursor})
		h.render(w, r, http.StatusServiceUnavailable, "round", p)
		return
	}
	body := roundBody{Name: name, Page: page, Cursor: cursor}
	if d, _ := h.overview.get(ctx, h.src, h.opts.Refresh/2); d != nil {
		body.Stat, body.Known = d.Rounds[name]
	}
	h.last.put(key, body)
	p.Body = body
	h.render(w, r, http.StatusOK, "round", p)
}

// deliveryNotFound answers 404 for a delivery id that is not in the queue.
func (h *handler) deliveryNotFound(w http.ResponseWriter, r *http.Request, name, id string) {
	h.failMsg(w, r, http.StatusNotFound, message{Heading: "Delivery not found", Text: fmt.Sprintf("Queue %q has no delivery %s: it was acked, deleted or never existed.", name, id), Back: h.queueURL(name, "")})
}
