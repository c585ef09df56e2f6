package dashboard

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"net/http"
	"net/url"
	"time"
)

//go:embed assets/templates/*.html
var templateFS embed.FS

// pageTemplates holds one template set per page, each the layout plus the
// page's content.
type pageTemplates struct {
	sets map[string]*template.Template
}

func parseTemplates() (*pageTemplates, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "assets/templates/layout.html", "assets/templates/parts.html")
	if err != nil {
		return nil, err
	}
	pt := &pageTemplates{sets: map[string]*template.Template{}}
	for _, name := range []string{"overview", "queue", "delivery", "connections", "round", "schedules", "schedule_set", "message"} {
		t, err := base.Clone()
		if err != nil {
			return nil, err
		}
		if _, err := t.ParseFS(templateFS, "assets/templates/"+name+".html"); err != nil {
			return nil, err
		}
		pt.sets[name] = t
	}
	return pt, nil
}

// page is what every page's template gets.
type page struct {
	Title     string
	Nav       string // which tab of the navigation is current
	Prefix    string // the mount path, "" for the root
	Namespace string
	Actions   bool
	CSRF      string
	RefreshMS int64
	Live      bool   // the page polls for fresh numbers
	Down      string // the banner's text while Redis cannot be read
	Stale     bool   // the numbers shown are the last ones read, not fresh
	Updated   time.Time
	Flash     *flash
	Body      any
}

// flash is a one-time message shown after an action.
type flash struct {
	Error bool
	Text  string
}

const (
	csrfCookie  = "redq_csrf"
	flashCookie = "redq_flash"
	csrfField   = "csrf"
)

// newPage fills the parts every page shares, and sets the CSRF cookie when
// the browser has none yet.
func (h *handler) newPage(w http.ResponseWriter, r *http.Request, title, nav string) *page {
	p := &page{
		Title:     title,
		Nav:       nav,
		Prefix:    h.opts.PathPrefix,
		Namespace: h.ns,
		Actions:   h.opts.EnableActions,
		RefreshMS: h.opts.Refresh.Milliseconds(),
		Updated:   time.Now(),
	}
	if h.opts.EnableActions {
		p.CSRF = h.csrfToken(w, r)
	}
	if !isPoll(r) {
		p.Flash = h.takeFlash(w, r)
	}
	return p
}

func (h *handler) cookiePath() string {
	if h.opts.PathPrefix == "" {
		return "/"
	}
	return h.opts.PathPrefix + "/"
}

// csrfToken returns the token for this browser's CSRF cookie, setting a
// new cookie first when there is none. The token is an HMAC of the
// cookie's random value under the handler's secret, so a page of another
// site can neither read nor forge it.
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	id := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 32 {
		if _, err := hex.DecodeString(c.Value); err == nil {
			id = c.Value
		}
	}
	if id == "" {
		b := make([]byte, 16)
		rand.Read(b)
		id = hex.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: id, Path: h.cookiePath(), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	return h.sign(id)
}

func (h *handler) sign(id string) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// csrfOK reports whether the form's token matches the request's cookie.
func (h *handler) csrfOK(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	got, err := hex.DecodeString(r.PostFormValue(csrfField))
	if err != nil {
		return false
	}
	want, _ := hex.DecodeString(h.sign(c.Value))
	return hmac.Equal(got, want)
}

func (h *handler) setFlash(w http.ResponseWriter, f flash) {
	v := "ok:"
	if f.Error {
		v = "err:"
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(v + f.Text), Path: h.cookiePath(), HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: 60})
}

func (h *handler) takeFlash(w http.ResponseWriter, r *http.Request) *flash {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: h.cookiePath(), MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	v, err := url.QueryUnescape(c.Value)
	if err != nil || len(v) < 3 {
		return nil
	}
	switch {
	case len(v) > 3 && v[:3] == "ok:":
		return &flash{Text: v[3:]}
	case len(v) > 4 && v[:4] == "err:":
		return &flash{Error: true, Text: v[4:]}
	}
	return nil
}

// render writes the page, or for a refresh its live part as JSON.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, tmpl string, p *page) {
	t := h.pages.sets[tmpl]
	if isPoll(r) {
		var b bytes.Buffer
		if err := t.ExecuteTemplate(&b, "live", p); err != nil {
			h.opts.Logger.Error("dashboard: render", "page", tmpl, "err", err)
			writeJSON(w, http.StatusInternalServerError, pollReply{Down: "The dashboard could not render this page: " + err.Error()})
			return
		}
		writeJSON(w, status, pollReply{Down: p.Down, Stale: p.Stale, Updated: p.Updated, HTML: b.String()})
		return
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout.html", p); err != nil {
		h.opts.Logger.Error("dashboard: render", "page", tmpl, "err", err)
		http.Error(w, "The dashboard could not render this page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes()) // a client that went away cannot be told
}

// message is the body of a page that only says something: an error, a
// refusal, or the outcome of an action that did not go through.
type message struct {
	Heading string
	Text    string
	Valid   []string // the valid values, for a 400
	ValidOf string   // what they are values of
	Back    string   // a link back, "" for the overview
}

// fail renders a message page with status.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, heading, text string) {
	h.failMsg(w, r, status, message{Heading: heading, Text: text})
}

func (h *handler) failMsg(w http.ResponseWriter, r *http.Request, status int, m message) {
	p := h.newPage(w, r, m.Heading, "")
	p.Body = m
	h.render(w, r, status, "message", p)
}
