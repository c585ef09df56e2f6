package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/redq/redq"
)

func TestServe(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		deadHolder(t, tg, "jobs", 2)
		before := keysOf(t, tg)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := start(ctx, tg.args("serve", "--addr", "127.0.0.1:0")...)
		base := waitFor(t, r.stderr, regexp.MustCompile(`on (http://\S+)`))
		if !strings.Contains(r.stderr.String(), "read-only") {
			t.Errorf("serve does not say it is read-only: %q", r.stderr.String())
		}

		for _, path := range []string{"", "connections", "queues/jobs", "queues/jobs?state=unacked", "assets/app.css", "assets/app.js"} {
			code, body := httpGet(t, http.DefaultClient, base+path)
			if code != http.StatusOK {
				t.Errorf("GET /%s: %d\n%s", path, code, body)
			}
			if path == "" && !strings.Contains(body, `data-queue="jobs"`) {
				t.Errorf("overview without the queue jobs:\n%s", body)
			}
		}
		if code, _ := httpGet(t, http.DefaultClient, base+"favicon.ico"); code != http.StatusNotFound {
			t.Errorf("/favicon.ico: %d, want 404", code)
		}
		if code, _ := httpGet(t, http.DefaultClient, base+"queues/jobs?state=lost"); code != http.StatusBadRequest {
			t.Errorf("?state=lost: %d, want 400", code)
		}
		res, err := http.PostForm(base+"queues/jobs/actions/pause", url.Values{})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("pause on a read-only dashboard: %d, want 403", res.StatusCode)
		}
		// Reading registers nothing and writes nothing.
		if after := keysOf(t, tg); !slices.Equal(before, after) {
			t.Errorf("keys changed by a read-only dashboard:\nbefore %v\nafter  %v", before, after)
		}

		cancel()
		if code := r.wait(t); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, r.stderr)
		}
	})
}

func TestServeActionsUnderPrefix(t *testing.T) {
	forBackends(t, func(t *testing.T, tg target) {
		deadHolder(t, tg, "jobs", 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := start(ctx, tg.args("serve", "--addr", "127.0.0.1:0", "--actions", "--prefix", "/ops/redq")...)
		base := waitFor(t, r.stderr, regexp.MustCompile(`on (http://\S+)`))
		if !strings.HasSuffix(base, "/ops/redq/") {
			t.Fatalf("URL %s is not under the prefix", base)
		}
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		code, body := httpGet(t, c, base+"queues/jobs")
		m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
		if code != http.StatusOK || m == nil {
			t.Fatalf("queue page: %d, no CSRF token\n%s", code, body)
		}
		res, err := c.PostForm(base+"queues/jobs/actions/pause", url.Values{"csrf": {m[1]}})
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(out), "is paused") {
			t.Errorf("pause: %d\n%s", res.StatusCode, out)
		}
		insp, err := redq.NewInspector(tg.client, redq.WithNamespace(tg.ns))
		if err != nil {
			t.Fatal(err)
		}
		if q, err := insp.Queue(context.Background(), "jobs"); err != nil || !q.Paused {
			t.Errorf("after pause: %+v, %v; want paused in Redis", q, err)
		}
		if code, _ := httpGet(t, c, base[:len(base)-len("ops/redq/")]); code != http.StatusNotFound {
			t.Errorf("the root outside the prefix: %d, want 404", code)
		}
		cancel()
		if code := r.wait(t); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, r.stderr)
		}
	})
}

func TestServeAddressInUse(t *testing.T) {
	m := miniredis.RunT(t)
	// miniredis listens on its address, so serving there must fail.
	code, _, stderr := redqRun(t, "serve", "--redis", "redis://"+m.Addr(), "--addr", m.Addr())
	if code != 1 || !strings.Contains(stderr, "address already in use") {
		t.Errorf("exit %d, stderr %q; want 1 and the listen error", code, stderr)
	}
	code, _, stderr = redqRun(t, "serve", "--redis", "redis://"+m.Addr(), "--prefix", "redq/")
	if code != 2 || !strings.Contains(stderr, "PathPrefix") {
		t.Errorf("bad --prefix: exit %d, stderr %q; want 2", code, stderr)
	}
}

func httpGet(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// keysOf lists the keys of the target with their types.
func keysOf(t *testing.T, tg target) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := tg.client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		typ, _ := tg.client.Type(ctx, k).Result()
		out = append(out, k+":"+typ)
	}
	slices.Sort(out)
	return out
}
