package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// queueURL is the path of a queue's page, with state if not "".
func (h *handler) queueURL(queue, state string) string {
	u := h.opts.PathPrefix + "/queues/" + url.PathEscape(queue)
	if state != "" {
		u += "?state=" + url.QueryEscape(state)
	}
	return u
}

var funcs = template.FuncMap{
	"pathEscape":  url.PathEscape,
	"queryEscape": url.QueryEscape,
	"num":         formatNum,
	"rate":        formatRate,
	"size":        formatSize,
	"ago":         formatAgo,
	"when":        formatWhen,
	"dur":         formatDur,
	"preview":     previewPayload,
	"headers":     sortedHeaders,
	"rowHeaders":  rowHeaders,
	"isZero":      func(t time.Time) bool { return t.IsZero() },
	"upper":       strings.ToUpper,
	"add":         func(a, b int) int { return a + b },
	"stateNote":   stateNote,
	"dict":        dict,
	// scheduleButtons are the actions a schedule's row offers.
	"scheduleButtons": func(paused bool) []string {
		if paused {
			return []string{"resume", "remove"}
		}
		return []string{"pause", "remove"}
	},
}

// dict builds the argument map of a sub-template from key, value pairs.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict: odd number of arguments")
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// formatNum writes an integer with commas between thousands.
func formatNum(v any) string {
	s := fmt.Sprint(v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func formatRate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r < 0.1:
		return "<0.1"
	case r < 10:
		return fmt.Sprintf("%.1f", r)
	}
	return formatNum(int64(r + 0.5))
}

func formatSize(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// formatDur prints a duration rounded for people.
func formatDur(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		s := d.Round(time.Second).String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		return s
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

// formatAgo prints how long ago (or in how long) t is.
func formatAgo(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := time.Until(t)
	if d >= 0 {
		return "in " + formatDur(d)
	}
	return formatDur(-d) + " ago"
}

// formatWhen prints t in UTC, for a title attribute.
func formatWhen(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// previewPayload is a one-line view of a payload's start.
func previewPayload(b []byte) string {
	if !utf8.Valid(b) && !utf8.Valid(trimPartialRune(b)) {
		n := min(len(b), 24)
		return fmt.Sprintf("binary: % x…", b[:n])
	}
	b = trimPartialRune(b)
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, string(b))
}

// trimPartialRune drops a rune cut in half at the end of a truncated
// payload.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if utf8.Valid(b) {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

// formatPayload returns the payload for the delivery page: indented when
// it is whole JSON, as text when it is text, else as a hex dump.
func formatPayload(b []byte, whole bool) (string, bool) {
	t := trimPartialRune(b)
	if utf8.Valid(t) {
		if whole && json.Valid(t) {
			var out bytes.Buffer
			if err := json.Indent(&out, t, "", "  "); err == nil {
				return out.String(), false
			}
		}
		return string(t), false
	}
	var out strings.Builder
	for off := 0; off < len(b); off += 16 {
		row := b[off:min(off+16, len(b))]
		fmt.Fprintf(&out, "%08x  % -47x  ", off, row)
		for _, c := range row {
			if c >= 0x20 && c < 0x7f {
				out.WriteByte(c)
			} else {
				out.WriteByte('.')
			}
		}
		out.WriteByte('\n')
	}
	return out.String(), true
}

// header is one header line for display.
type header struct{ Name, Value string }

func sortedHeaders(h http.Header) []header {
	var out []header
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, header{k, v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// rowHeaders are the headers a list row shows: on the rejected tab the
// error header is left out, since the reason column shows it.
func rowHeaders(h http.Header, state string) []header {
	all := sortedHeaders(h)
	if state != "rejected" {
		return all
	}
	out := all[:0]
	for _, x := range all {
		if x.Name != "Redq-Error" {
			out = append(out, x)
		}
	}
	return out
}

// stateNote explains a state under its tab.
func stateNote(s string) string {
	switch s {
	case "ready":
		return "Waiting for a consumer, in the order they will be taken."
	case "delayed":
		return "Waiting for their due time (delay, schedule or retry backoff)."
	case "rejected":
		return "Rejected by a consumer or out of retries: the dead letters. Retry sends one back to ready."
	case "unacked":
		return "Taken by a live consumer. Read-only: a consumer holds them."
	case "keyed":
		return "Pending keyed items (Upsert), one per key: run now or cancel by key."
	}
	return ""
}
