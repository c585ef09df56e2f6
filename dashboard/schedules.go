package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"

	"github.com/redq/redq"
)

// The schedules pages: the schedule sets of the namespace with their
// counts, a set's schedules with their next and last tick, and the
// actions on one schedule (pause, resume, remove). There is no "run now":
// a tick outside the spec would break the one-delivery-per-tick rule.

// scheduleActions are the names of a schedule's action endpoint.
var scheduleActions = []string{"pause", "resume", "remove"}

// scheduleSetRow is one schedule set on the schedules page.
type scheduleSetRow struct {
	Name string
	Stat redq.ScheduleSetStat
}

// schedulesBody is the schedules page's content.
type schedulesBody struct {
	Sets []scheduleSetRow
}

// scheduleSetBody is a schedule set page's content.
type scheduleSetBody struct {
	Name   string
	Stat   redq.ScheduleSetStat
	Page   redq.SchedulePage
	Cursor string
	Back   string // this page's URL, where actions come back to
}

func (h *handler) scheduleSetURL(set string) string {
	return h.opts.PathPrefix + "/schedules/" + url.PathEscape(set)
}

func (h *handler) serveSchedules(w http.ResponseWriter, r *http.Request) {
	p := h.newPage(w, r, "Schedules", "schedules")
	p.Live = true
	ctx, cancel := h.ctx(r)
	defer cancel()
	sets, err := h.src.ScheduleSets(ctx)
	key := "schedules"
	if err != nil {
		h.staleOr(p, key, err, schedulesBody{})
		h.render(w, r, http.StatusServiceUnavailable, "schedules", p)
		return
	}
	body := schedulesBody{}
	for name, st := range sets {
		body.Sets = append(body.Sets, scheduleSetRow{Name: name, Stat: st})
	}
	sort.Slice(body.Sets, func(i, j int) bool { return body.Sets[i].Name < body.Sets[j].Name })
	h.last.put(key, body)
	p.Body = body
	h.render(w, r, http.StatusOK, "schedules", p)
}

func (h *handler) serveScheduleSet(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("set")
	cursor := r.URL.Query().Get("cursor")
	p := h.newPage(w, r, "Schedule set "+name, "schedules")
	p.Live = true
	ctx, cancel := h.ctx(r)
	defer cancel()
	key := "schedules " + r.URL.String()
	back := h.scheduleSetURL(name)
	if cursor != "" {
		back += "?cursor=" + url.QueryEscape(cursor)
	}
	page, err := h.src.ListSchedules(ctx, name, cursor, h.opts.PageSize)
	var st redq.ScheduleSetStat
	if err == nil {
		st, err = h.src.ScheduleSet(ctx, name)
	}
	switch kindOf(err) {
	case errBadInput:
		h.badInput(w, r, err)
		return
	case errNotFound:
		h.scheduleSetNotFound(w, r, name)
		return
	}
	if err != nil {
		h.staleOr(p, key, err, scheduleSetBody{Name: name, Cursor: cursor, Back: back})
		h.render(w, r, http.StatusServiceUnavailable, "schedule_set", p)
		return
	}
	body := scheduleSetBody{Name: name, Stat: st, Page: page, Cursor: cursor, Back: back}
	h.last.put(key, body)
	p.Body = body
	h.render(w, r, http.StatusOK, "schedule_set", p)
}

func (h *handler) scheduleSetNotFound(w http.ResponseWriter, r *http.Request, name string) {
	h.failMsg(w, r, http.StatusNotFound, message{Heading: "No such schedule set",
		Text: fmt.Sprintf("There is no schedule set %q in namespace %q.", name, h.ns), Back: h.opts.PathPrefix + "/schedules"})
}

// serveScheduleAction pauses, resumes or removes one schedule and
// redirects back with a message, or answers with a page saying why
// nothing was changed.
func (h *handler) serveScheduleAction(w http.ResponseWriter, r *http.Request) {
	if !h.opts.EnableActions {
		h.fail(w, r, http.StatusForbidden, "Actions are disabled", "This dashboard is read-only: it was started without actions enabled. Nothing was changed.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "Invalid form", "The form could not be read. Nothing was changed.")
		return
	}
	if !h.csrfOK(r) {
		h.fail(w, r, http.StatusForbidden, "Missing or invalid CSRF token", "The action did not carry this dashboard's token (an old page, cookies blocked, or a request from elsewhere). Reload the page and try again. Nothing was changed.")
		return
	}
	set, action, id := r.PathValue("set"), r.PathValue("action"), r.PostFormValue("id")
	back := r.PostFormValue("back")
	if !safePath(back, h.opts.PathPrefix+"/") {
		back = h.scheduleSetURL(set)
	}
	if !slices.Contains(scheduleActions, action) {
		h.failMsg(w, r, http.StatusBadRequest, message{Heading: "Invalid action", Text: fmt.Sprintf("There is no schedule action %q.", action), Valid: scheduleActions, ValidOf: "Actions", Back: back})
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	var err error
	var done string
	switch action {
	case "pause":
		err = h.src.PauseSchedule(ctx, set, id)
		done = fmt.Sprintf("Schedule %s is paused: it publishes nothing until it is resumed.", id)
	case "resume":
		err = h.src.ResumeSchedule(ctx, set, id)
		done = fmt.Sprintf("Schedule %s is resumed from its next tick.", id)
	case "remove":
		err = h.src.RemoveSchedule(ctx, set, id)
		done = fmt.Sprintf("Schedule %s is removed.", id)
	}
	if err != nil {
		h.opts.Logger.Warn("dashboard: schedule action failed", "action", action, "set", set, "id", id, "err", err)
		switch kindOf(err) {
		case errBadInput:
			h.failMsg(w, r, http.StatusBadRequest, message{Heading: "Invalid request", Text: argMessage(err) + " Nothing was changed.", Back: back})
		case errNotFound:
			if _, serr := h.src.ScheduleSet(ctx, set); kindOf(serr) == errNotFound {
				h.scheduleSetNotFound(w, r, set)
				return
			}
			h.failMsg(w, r, http.StatusConflict, message{Heading: "It is gone",
				Text: fmt.Sprintf("Schedule %s is not in set %s any more: it was removed meanwhile. Nothing was changed.", id, set), Back: back})
		default:
			p := h.newPage(w, r, "Action failed", "")
			p.Down = downText(err)
			p.Body = message{Heading: "Action failed", Text: fmt.Sprintf("Redis did not carry out %s: %s. Nothing was changed.", action, argMessage(err)), Back: back}
			h.render(w, r, http.StatusServiceUnavailable, "message", p)
		}
		return
	}
	h.opts.Logger.Info("dashboard: schedule action", "action", action, "set", set, "id", id)
	h.setFlash(w, flash{Text: done})
	http.Redirect(w, r, back, http.StatusSeeOther)
}
