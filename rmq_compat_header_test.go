package redq_test

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redq/redq"
)

// Port of rmq v5's header_test.go, which like this file is an external
// test package (see rmq_compat_helpers_test.go).

// rmq's TestPayloadWithHeader.
func TestRmqPayloadWithHeader(t *testing.T) {
	p := `{"foo":"bar"}`

	h := make(http.Header)
	ph := redq.PayloadWithHeader(p, h)
	if ph != p {
		t.Fatalf("an empty header changed the payload: %q", ph)
	}
	h2, p2, err := redq.ExtractHeaderAndPayload(ph)
	if err != nil {
		t.Fatal(err)
	}
	if h2 != nil || p2 != p {
		t.Fatalf("ExtractHeaderAndPayload = %v, %q", h2, p2)
	}

	h.Set("X-Foo", "Bar")
	ph = redq.PayloadWithHeader(p, h)
	if ph == p {
		t.Fatal("a header did not change the payload")
	}
	h2, p2, err = redq.ExtractHeaderAndPayload(ph)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h2, h) || p2 != p {
		t.Fatalf("ExtractHeaderAndPayload = %v, %q, want %v, %q", h2, p2, h, p)
	}
}

// rmq's TestPayloadBytesWithHeader.
func TestRmqPayloadBytesWithHeader(t *testing.T) {
	p := `{"foo":"bar"}`

	h := make(http.Header)
	ph := redq.PayloadBytesWithHeader([]byte(p), h)
	if string(ph) != p {
		t.Fatalf("an empty header changed the payload: %q", ph)
	}
	h2, p2, err := redq.ExtractHeaderAndPayload(string(ph))
	if err != nil {
		t.Fatal(err)
	}
	if h2 != nil || p2 != p {
		t.Fatalf("ExtractHeaderAndPayload = %v, %q", h2, p2)
	}

	h.Set("X-Foo", "Bar")
	ph = redq.PayloadBytesWithHeader([]byte(p), h)
	if string(ph) == p {
		t.Fatal("a header did not change the payload")
	}
	h2, p2, err = redq.ExtractHeaderAndPayload(string(ph))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h2, h) || p2 != p {
		t.Fatalf("ExtractHeaderAndPayload = %v, %q, want %v, %q", h2, p2, h, p)
	}
}

// rmq's TestExtractHeaderAndPayload.
func TestRmqExtractHeaderAndPayload(t *testing.T) {
	bad := func(t *testing.T, ph string) {
		t.Helper()
		h, p, err := redq.ExtractHeaderAndPayload(ph)
		if err == nil {
			t.Fatalf("no error for %q", ph)
		}
		if h != nil || p != "" {
			t.Fatalf("ExtractHeaderAndPayload(%q) = %v, %q with the error, want nil, \"\"", ph, h, p)
		}
	}
	good := func(t *testing.T, ph string, wantH http.Header, wantP string) {
		t.Helper()
		h, p, err := redq.ExtractHeaderAndPayload(ph)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(h, wantH) || p != wantP {
			t.Fatalf("ExtractHeaderAndPayload = %v, %q, want %v, %q", h, p, wantH, wantP)
		}
	}

	t.Run("missing_line_separator", func(t *testing.T) {
		ph := redq.PayloadWithHeader("foo", http.Header{"foo": []string{"bar"}})
		bad(t, ph[0:7]) // truncated
	})
	t.Run("invalid_json", func(t *testing.T) {
		ph := redq.PayloadWithHeader("foo", http.Header{"foo": []string{"bar"}})
		bad(t, strings.Replace(ph, `"`, `'`, 1)) // corrupted JSON
	})
	t.Run("ok", func(t *testing.T) {
		ph := redq.PayloadWithHeader("foo", http.Header{"foo": []string{"bar"}})
		good(t, ph, http.Header{"foo": []string{"bar"}}, "foo")
	})
	t.Run("ok_line_breaks", func(t *testing.T) {
		ph := redq.PayloadWithHeader("foo", http.Header{"foo": []string{"bar1\nbar2\nbar3"}})
		good(t, ph, http.Header{"foo": []string{"bar1\nbar2\nbar3"}}, "foo")
	})
}

// rmq's ExamplePayloadWithHeader, which rmq's godoc shows but never runs;
// this one runs, on an embedded Redis.
func ExamplePayloadWithHeader() {
	conn, err := redq.OpenConnectionWithTestRedisClient("example", nil)
	if err != nil {
		panic(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	queue, err := conn.OpenQueue("tasks")
	if err != nil {
		panic(err)
	}

	h := make(http.Header)
	h.Set("X-Baz", "quux")

	// You can add a header to your payload when you publish.
	if err := queue.Publish(redq.PayloadWithHeader(`{"foo":"bar"}`, h)); err != nil {
		panic(err)
	}

	done := make(chan struct{})
	if err := queue.StartConsuming(10, time.Second); err != nil {
		panic(err)
	}
	if _, err := queue.AddConsumerFunc("tag", func(delivery redq.Delivery) {
		// And receive the header back in the consumer.
		fmt.Println(delivery.(redq.WithHeader).Header().Get("X-Baz"), delivery.Payload())
		if err := delivery.Ack(); err != nil {
			panic(err)
		}
		close(done)
	}); err != nil {
		panic(err)
	}
	<-done
	// Output: quux {"foo":"bar"}
}
