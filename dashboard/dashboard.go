// Package dashboard serves a web dashboard for the queues of one redq
// namespace, built on a [redq.Inspector].
//
// The overview shows every open queue with its ready, delayed, unacked and
// rejected deliveries, whether it is paused, its consumers, its rates
// (published, acked and rejected per second) and a chart of its last hour,
// followed by the timer sets and rounds of the namespace. A queue page
// browses the deliveries of one state (ready, delayed, rejected, unacked,
// keyed) a page at a time, with search by id and payload substring, and a
// delivery page shows one delivery whole, with a download link for its
// payload. A connections page shows every connection's state, heartbeat age
// and unacked deliveries per queue.
//
// Pages refresh themselves: the browser polls the page's JSON form and
// re-renders it. When Redis cannot be reached the page says so in a banner,
// keeps the last numbers it had (greyed), and goes on polling until Redis
// is back.
//
// Actions (retry, delete, run now, cancel, purge, pause and resume) are off
// unless [Options.EnableActions] is set. They are POST requests carrying a
// CSRF token keyed by a per-handler secret ([Options.Secret] shares one
// across replicas); without it, or in read-only mode, they are
// answered 403 Forbidden and change nothing. The dashboard has no login of
// its own: mount it behind the authentication middleware of your server.
//
// Every asset (CSS, JavaScript, charts drawn as inline SVG) is embedded;
// nothing is loaded from elsewhere.
package dashboard

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/redq/redq"
)

// Defaults and bounds of the options.
const (
	// DefaultRefresh is the default page refresh interval.
	DefaultRefresh = 2 * time.Second
	// MinRefresh and MaxRefresh bound Options.Refresh.
	MinRefresh = 250 * time.Millisecond
	MaxRefresh = time.Hour
	// DefaultPageSize is the default number of deliveries on a page.
	DefaultPageSize = 50
	// MaxPageSize bounds Options.PageSize and the limit query parameter.
	MaxPageSize = 1000
	// DefaultMaxPayload is the default number of payload bytes a delivery
	// page shows before it truncates (the download link has them all).
	DefaultMaxPayload = 64 << 10
	// DefaultTimeout is the default time one request may spend on Redis.
	DefaultTimeout = 5 * time.Second
	// QueuesPerPage is how many queues the overview shows on one page.
	QueuesPerPage = 100
	// listPayload is how many payload bytes a list row shows.
	listPayload = 200
)

// Options configure the dashboard. The zero value is a read-only dashboard
// at the root path, refreshing every 2 seconds.
type Options struct {
	// EnableActions turns on retry, delete, run now, cancel, purge and
	// pause/resume. Off by default: the dashboard is read-only and every
	// action request is answered 403. Default: false.
	EnableActions bool
	// Refresh is the page refresh interval, between MinRefresh and
	// MaxRefresh. Default: 2s.
	Refresh time.Duration
	// PathPrefix is the path the dashboard is mounted at, e.g. "/redq",
	// without a trailing slash. The handler expects the full request path
	// (do not strip the prefix before it). Default: "" (the root).
	PathPrefix string
	// PageSize is how many deliveries a queue page lists, 1 to
	// MaxPageSize. Default: 50.
	PageSize int
	// MaxPayload is how many payload bytes a delivery page shows before it
	// truncates; the download link always has the whole payload. At least
	// 1. Default: 64 KiB.
	MaxPayload int
	// Timeout bounds the time one request spends on Redis. Default: 5s.
	Timeout time.Duration
	// Logger receives one line per action carried out and per Redis error.
	// Default: nil (nothing is logged).
	Logger *slog.Logger
	// Secret keys the CSRF tokens of the action forms, at least
	// MinSecretLen bytes. Give every replica of a dashboard behind one
	// load balancer the same Secret so that a form drawn by one replica
	// is accepted by another, and tokens survive a restart. Keep it as
	// secret as a session key. Default: nil, a random secret made when
	// the handler is created, known to this process only.
	Secret []byte
}

// MinSecretLen is the shortest Options.Secret accepted.
const MinSecretLen = 32

// ErrInvalidOptions is matched by the error New returns for bad Options.
var ErrInvalidOptions = errors.New("dashboard: invalid options")

// New returns the dashboard of insp's namespace as an http.Handler. It
// returns an error matching ErrInvalidOptions when an option is out of its
// range. The handler reads Redis only through insp, in each request's
// context bounded by Options.Timeout.
func New(insp *redq.Inspector, opts Options) (http.Handler, error) {
	if insp == nil {
		return nil, fmt.Errorf("%w: nil inspector", ErrInvalidOptions)
	}
	return newHandler(insp, opts)
}

func (o *Options) normalize() error {
	if o.Refresh == 0 {
		o.Refresh = DefaultRefresh
	}
	if o.Refresh < MinRefresh || o.Refresh > MaxRefresh {
		return fmt.Errorf("%w: Refresh must be between %v and %v, is %v", ErrInvalidOptions, MinRefresh, MaxRefresh, o.Refresh)
	}
	if o.PageSize == 0 {
		o.PageSize = DefaultPageSize
	}
	if o.PageSize < 1 || o.PageSize > MaxPageSize {
		return fmt.Errorf("%w: PageSize must be between 1 and %d, is %d", ErrInvalidOptions, MaxPageSize, o.PageSize)
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.MaxPayload < 1 {
		return fmt.Errorf("%w: MaxPayload must be at least 1, is %d", ErrInvalidOptions, o.MaxPayload)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < 0 {
		return fmt.Errorf("%w: Timeout must not be negative, is %v", ErrInvalidOptions, o.Timeout)
	}
	p := o.PathPrefix
	if p != "" && (!strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.ContainsAny(p, "?#{} ")) {
		return fmt.Errorf("%w: PathPrefix must start with / and not end with one (e.g. \"/redq\"), is %q", ErrInvalidOptions, p)
	}
	if o.Secret != nil && len(o.Secret) < MinSecretLen {
		return fmt.Errorf("%w: Secret must be at least %d bytes, is %d", ErrInvalidOptions, MinSecretLen, len(o.Secret))
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}
