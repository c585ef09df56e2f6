package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/redq/redq"
)

// actions are the names of the action endpoint, in the order a 400 lists
// them.
var actions = []string{"pause", "resume", "purge", "retry", "delete", "run-now", "cancel"}

// serveAction carries out one action and redirects back with a message,
// or answers with a page saying why nothing was changed.
func (h *handler) serveAction(w http.ResponseWriter, r *http.Request) {
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
	queue, action := r.PathValue("queue"), r.PathValue("action")
	id, key := r.PostFormValue("id"), r.PostFormValue("key")
	back := h.safeBack(r.PostFormValue("back"))
	if !slices.Contains(actions, action) {
		h.failMsg(w, r, http.StatusBadRequest, message{Heading: "Invalid action", Text: fmt.Sprintf("There is no action %q.", action), Valid: actions, ValidOf: "Actions", Back: back})
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	var err error
	var done string
	switch action {
	case "pause":
		err = h.src.Pause(ctx, queue)
		done = fmt.Sprintf("Queue %s is paused: no consumer takes from it until it is resumed.", queue)
	case "resume":
		err = h.src.Resume(ctx, queue)
		done = fmt.Sprintf("Queue %s is resumed.", queue)
	case "purge":
		state := redq.DeliveryState(r.PostFormValue("state"))
		if !slices.Contains([]redq.DeliveryState{redq.StateReady, redq.StateDelayed, redq.StateRejected}, state) {
			h.failMsg(w, r, http.StatusBadRequest, message{Heading: "Invalid state", Text: fmt.Sprintf("Only ready, delayed and rejected deliveries can be purged, not %q. Nothing was changed.", state), Valid: []string{"ready", "delayed", "rejected"}, ValidOf: "States that can be purged", Back: back})
			return
		}
		var n int64
		n, err = h.src.Purge(ctx, queue, state)
		done = fmt.Sprintf("Purged %d %s deliveries of queue %s.", n, state, queue)
	case "retry":
		err = h.src.Retry(ctx, queue, id)
		done = fmt.Sprintf("Delivery %s is back in ready.", id)
	case "delete":
		err = h.src.Delete(ctx, queue, id)
		done = fmt.Sprintf("Delivery %s is deleted.", id)
	case "run-now":
		err = h.src.RunNow(ctx, queue, key)
		done = fmt.Sprintf("Key %s is due now.", key)
	case "cancel":
		err = h.src.Cancel(ctx, queue, key)
		done = fmt.Sprintf("Key %s is cancelled.", key)
	}
	if err != nil {
		h.opts.Logger.Warn("dashboard: action failed", "action", action, "queue", queue, "id", id, "key", key, "err", err)
		h.actionFailed(w, r, action, queue, id, key, back, err)
		return
	}
	h.opts.Logger.Info("dashboard: action", "action", action, "queue", queue, "id", id, "key", key)
	h.overview.invalidate()
	h.setFlash(w, flash{Text: done})
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// movedTo tells whether err says the delivery is no longer in a state the
// action applies to (a consumer took it, or it was retried meanwhile), and
// where it is now if known.
func movedTo(err error) (string, bool) {
	if errors.Is(err, redq.ErrorHeld) {
		return string(redq.StateUnacked), true
	}
	var ae *redq.ArgumentError
	if errors.As(err, &ae) && ae.Arg == "delivery state" {
		return fmt.Sprint(ae.Value), true
	}
	return "", false
}

func (h *handler) actionFailed(w http.ResponseWriter, r *http.Request, action, queue, id, key, back string, err error) {
	if now, ok := movedTo(err); ok {
		text := fmt.Sprintf("Delivery %s moved meanwhile: it is %s now, and %s does not apply there (a consumer took it, or someone acted on it first). Nothing was changed.", id, now, action)
		h.failMsg(w, r, http.StatusConflict, message{Heading: "It moved meanwhile", Text: text, Back: back})
		return
	}
	switch kindOf(err) {
	case errBadInput:
		m := message{Heading: "Invalid request", Text: argMessage(err) + " Nothing was changed.", Back: back}
		h.failMsg(w, r, http.StatusBadRequest, m)
	case errNotFound:
		// The Inspector answers ErrorNotFound both for a queue that is not
		// open and for a delivery or key that moved: ask which.
		if !h.queueOpen(r, queue) {
			h.queueNotFound(w, r, queue, err)
			return
		}
		what := "Delivery " + id
		if key != "" {
			what = "Key " + key
		}
		if id == "" && key == "" {
			what = "Queue " + queue
		}
		text := fmt.Sprintf("%s is not where this page showed it any more: it was taken, acked, retried or deleted meanwhile (%s). Nothing was changed.", what, argMessage(err))
		h.failMsg(w, r, http.StatusConflict, message{Heading: "It moved meanwhile", Text: text, Back: back})
	default:
		text := fmt.Sprintf("Redis did not carry out %s: %s.", action, argMessage(err))
		if errors.Is(err, redq.ErrorOutcomeUnknown) {
			text += " Reload the page to see whether it happened."
		} else {
			text += " Nothing was changed."
		}
		p := h.newPage(w, r, "Action failed", "")
		p.Down = downText(err)
		p.Body = message{Heading: "Action failed", Text: text, Back: back}
		h.render(w, r, http.StatusServiceUnavailable, "message", p)
	}
}

// queueOpen reports whether queue is open. Only a definite "not found" is
// false: when Redis cannot say, the queue is taken to be there.
func (h *handler) queueOpen(r *http.Request, queue string) bool {
	ctx, cancel := h.ctx(r)
	defer cancel()
	_, err := h.src.Queue(ctx, queue)
	return err == nil || kindOf(err) != errNotFound
}

// safeBack returns back when it is a path inside the dashboard, else the
// overview: a redirect never leaves the dashboard. back must be a bare
// path (no scheme, host or user) under PathPrefix+"/", not starting with
// "//", without backslashes, control bytes (browsers strip tabs and line
// breaks, so "/\t/evil.example" would become "//evil.example") or dot
// segments that climb out of the prefix.
func (h *handler) safeBack(back string) string {
	root := h.opts.PathPrefix + "/"
	if safePath(back, root) {
		return back
	}
	return root
}

func safePath(back, root string) bool {
	if !strings.HasPrefix(back, root) || strings.HasPrefix(back, "//") || strings.Contains(back, "\\") {
		return false
	}
	for i := 0; i < len(back); i++ {
		if back[i] < 0x20 || back[i] == 0x7f {
			return false
		}
	}
	u, err := url.Parse(back)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return false
	}
	// Dot segments (also as %2e) would climb out of the prefix.
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return strings.HasPrefix(u.Path, root) && !strings.HasPrefix(u.Path, "//")
}
