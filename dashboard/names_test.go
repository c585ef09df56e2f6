package dashboard

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/redq/redq"
)

func TestQueueNameWithSlash(t *testing.T) {
	f := newFakeSource()
	f.add("billing/invoices", redq.DeliveryInfo{ID: "cc01", State: redq.StateRejected, Payload: []byte("inv")})
	for _, prefix := range []string{"", "/redq"} {
		b := newBrowser(t, mustHandler(t, f, Options{EnableActions: true, PathPrefix: prefix}), prefix)
		_, body := b.get("/")
		if !strings.Contains(body, `href="`+prefix+`/queues/billing%2Finvoices"`) {
			t.Fatalf("overview link to billing/invoices missing:\n%s", body)
		}
		for _, path := range []string{"/queues/billing%2Finvoices?state=rejected", "/queues/billing%2Finvoices/deliveries/cc01"} {
			code, body := b.get(path)
			if code != http.StatusOK || !strings.Contains(body, "inv") {
				t.Errorf("%s GET %s: %d", prefix, path, code)
			}
		}
		tok := b.token("/queues/billing%2Finvoices?state=rejected")
		code, _ := b.post("/queues/billing%2Finvoices/actions/pause", map[string][]string{"csrf": {tok}})
		if code != http.StatusSeeOther {
			t.Errorf("%s pause billing/invoices: %d", prefix, code)
		}
	}
	if calls := f.actions(); len(calls) != 2 || calls[0] != "paused=true billing/invoices" {
		t.Errorf("actions %v", calls)
	}
}

func TestPagerKeepsSearch(t *testing.T) {
	f := newFakeSource()
	for _, id := range []string{"d1", "d2", "d3"} {
		f.add("jobs", redq.DeliveryInfo{ID: id, State: redq.StateRejected, Payload: []byte("x a b+c/d " + id)})
	}
	b := newBrowser(t, mustHandler(t, f, Options{PageSize: 1}), "")
	_, body := b.get("/queues/jobs?state=rejected&q=" + url.QueryEscape("a b+c/d"))
	m := regexp.MustCompile(`data-field="next" href="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no next link:\n%s", body)
	}
	next := html.UnescapeString(m[1])
	u, err := url.Parse(next)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Query().Get("q"); got != "a b+c/d" {
		t.Errorf("next link %s searches %q", next, got)
	}
	code, body := b.get(next)
	if code != http.StatusOK || !strings.Contains(body, `data-id="d2"`) || strings.Contains(body, `data-id="d1"`) {
		t.Errorf("GET %s: %d, not the second page", next, code)
	}
}
