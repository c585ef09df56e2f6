package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redq/redq"
)

// pollHeader marks the browser's refresh requests: they get the page's
// live part as JSON instead of the whole page.
const pollHeader = "X-Redq-Poll"

// handler is the dashboard.
type handler struct {
	src    source
	opts   Options
	ns     string
	mux    *http.ServeMux
	pages  *pageTemplates
	secret []byte // keys the CSRF tokens
	cop    *http.CrossOriginProtection

	overview overviewCache
	history  historyCache
	last     lastGood
}

func newHandler(src source, opts Options) (*handler, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	h := &handler{
		src:    src,
		opts:   opts,
		ns:     src.Namespace(),
		mux:    http.NewServeMux(),
		pages:  pages,
		secret: make([]byte, 32),
		cop:    http.NewCrossOriginProtection(),
	}
	h.history.ttl = 15 * time.Second
	h.last.max = 256
	if opts.Secret != nil {
		h.secret = slices.Clone(opts.Secret) // the caller's slice may change
	} else {
		rand.Read(h.secret) // never fails (see crypto/rand)
	}
	h.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "Cross-origin request refused", "This action came from another site. Nothing was changed.")
	}))
	h.routes()
	return h, nil
}

func (h *handler) routes() {
	m := h.mux
	m.HandleFunc("GET /{$}", h.serveOverview)
	m.HandleFunc("GET /connections", h.serveConnections)
	m.HandleFunc("GET /queues/{queue}", h.serveQueue)
	m.HandleFunc("GET /queues/{queue}/deliveries/{id}", h.serveDelivery)
	m.HandleFunc("GET /queues/{queue}/deliveries/{id}/payload", h.servePayload)
	m.HandleFunc("GET /rounds/{round}", h.serveRound)
	m.HandleFunc("GET /schedules", h.serveSchedules)
	m.HandleFunc("GET /schedules/{set}", h.serveScheduleSet)
	m.HandleFunc("GET /api/overview", h.serveOverviewJSON)
	m.HandleFunc("GET /assets/{file}", serveAsset)
	m.Handle("POST /queues/{queue}/actions/{action}", h.cop.Handler(http.HandlerFunc(h.serveAction)))
	m.Handle("POST /schedules/{set}/actions/{action}", h.cop.Handler(http.HandlerFunc(h.serveScheduleAction)))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.fail(w, r, http.StatusMethodNotAllowed, "Method not allowed", "Pages are read with GET; actions are POST requests from the dashboard's own buttons.")
			return
		}
		h.fail(w, r, http.StatusNotFound, "Page not found", "There is no such page. Start from the overview.")
	})
}

// ServeHTTP strips the prefix and dispatches.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := h.opts.PathPrefix
	if p != "" {
		if r.URL.Path == p {
			http.Redirect(w, r, p+"/", http.StatusMovedPermanently)
			return
		}
		if !strings.HasPrefix(r.URL.Path, p+"/") {
			http.NotFound(w, r)
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path = strings.TrimPrefix(r.URL.Path, p)
		if r.URL.RawPath != "" {
			u.RawPath = strings.TrimPrefix(r.URL.RawPath, p)
		}
		r2.URL = &u
		r = r2
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	h.mux.ServeHTTP(w, r)
}

// ctx bounds a request's work on Redis.
func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.opts.Timeout)
}

// errKind sorts an Inspector error into what the page says about it.
type errKind int

const (
	errRedis    errKind = iota // Redis could not be reached or failed
	errBadInput                // *redq.ArgumentError: 400
	errNotFound                // the queue, delivery or key is not there: 404 (409 for actions)
)

func kindOf(err error) errKind {
	switch {
	case errors.Is(err, redq.ErrorInvalidArgument):
		return errBadInput
	case errors.Is(err, redq.ErrorNotFound):
		return errNotFound
	}
	return errRedis
}

// argMessage is an error's text without the library's prefix, for pages.
func argMessage(err error) string {
	var ae *redq.ArgumentError
	if errors.As(err, &ae) {
		return fmt.Sprintf("Invalid %s %q: %s.", ae.Arg, fmt.Sprint(ae.Value), ae.Reason)
	}
	return strings.TrimPrefix(err.Error(), "redq: ")
}

// isPoll reports whether r is the browser's refresh of a page.
func isPoll(r *http.Request) bool { return r.Header.Get(pollHeader) == "1" }

// pollReply is the JSON answer to a refresh.
type pollReply struct {
	// Down is the banner's text while Redis cannot be read, "" otherwise.
	Down string `json:"down"`
	// Stale is true when HTML shows the last numbers read, not fresh ones.
	Stale bool `json:"stale"`
	// Updated is when the numbers shown were read.
	Updated time.Time `json:"updated"`
	// HTML is the page's live part, rendered on the server.
	HTML string `json:"html"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}
