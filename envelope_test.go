package redq

import (
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	ids := newIDSource()
	for _, tc := range []struct {
		header  http.Header
		payload string
	}{
		{nil, ""},
		{nil, "hello"},
		{http.Header{}, "empty header is no header"},
		{http.Header{"A": {"1", "2"}, "B": {""}}, "with headers"},
		{http.Header{"X": {"y"}}, string([]byte{0, 1, 2, 255})},
	} {
		b, err := encodeEnvelope(ids, tc.header, []byte(tc.payload))
		if err != nil {
			t.Fatal(err)
		}
		env, ok := decodeEnvelope(string(b))
		if !ok || env.payload != tc.payload || len(env.id) != idLen {
			t.Fatalf("%q: decoded %+v ok=%v", tc.payload, env, ok)
		}
		if len(tc.header) == 0 && env.header != nil || len(tc.header) > 0 && !reflect.DeepEqual(env.header, tc.header) {
			t.Fatalf("%q: header %v, want %v", tc.payload, env.header, tc.header)
		}
		// The scripts read the id as bytes 2..13.
		if string(b[1:13]) != env.id {
			t.Fatal("id is not at bytes 2..13")
		}
	}
}

func TestIDsAreUnique(t *testing.T) {
	seen := map[string]bool{}
	a, b := newIDSource(), newIDSource()
	for i := 0; i < 10000; i++ {
		for _, s := range []*idSource{a, b} {
			id := string(s.next(nil))
			if seen[id] {
				t.Fatalf("id %x repeated", id)
			}
			seen[id] = true
		}
	}
	// Crossing into the next counter generation changes the prefix.
	a.counter.Store(1<<32 - 2)
	x, y := a.next(nil), a.next(nil)
	if bytes.Equal(x[:8], y[:8]) {
		t.Fatal("prefix did not change with the counter generation")
	}
}

// FuzzDecodeEnvelope feeds arbitrary stored bytes (anything may sit in a
// ready list) to the decoder: it must never panic, must keep every byte of
// a malformed item as the payload, and must round-trip what encode makes.
func FuzzDecodeEnvelope(f *testing.F) {
	ids := newIDSource()
	for _, seed := range []string{"", "x", "\x01", "\x02abcdefghijkl\x00\x00\x00\x05{\"a\"", "\x02abcdefghijkl\xff\xff\xff\xffz"} {
		f.Add([]byte(seed), "")
	}
	b, _ := encodeEnvelope(ids, http.Header{"K": {"v"}}, []byte("payload"))
	f.Add(b, "K")
	f.Fuzz(func(t *testing.T, raw []byte, headerKey string) {
		env, ok := decodeEnvelope(string(raw))
		if !ok && env.payload != string(raw) {
			t.Fatalf("malformed item not kept whole: %q -> %q", raw, env.payload)
		}
		if ok && !strings.HasSuffix(string(raw), env.payload) {
			t.Fatalf("payload %q is not the tail of %q", env.payload, raw)
		}
		var h http.Header
		if headerKey != "" {
			h = http.Header{headerKey: {string(raw)}}
		}
		enc, err := encodeEnvelope(ids, h, raw)
		if err != nil {
			return // header not encodable as JSON: Put reports it
		}
		back, ok := decodeEnvelope(string(enc))
		if !ok || back.payload != string(raw) {
			t.Fatalf("round trip of %q failed: %+v", raw, back)
		}
	})
}

// FuzzValidName checks that a valid name can never carry the characters
// that would let it reach into another queue's keys or hash slot.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"jobs", "a:b", "{x}", "", "emails.high-priority/v2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if validName(name) != "" {
			return
		}
		if strings.ContainsAny(name, "{}: \t\r\n*?[]") || len(name) == 0 || len(name) > maxNameLength {
			t.Fatalf("%q was accepted", name)
		}
		k := newQueueKeys("ns", name)
		if !strings.HasPrefix(k.ready, "ns:{"+name+"}:") || strings.Count(k.unacked("c-1"), "{") != 1 {
			t.Fatalf("keys of %q: %+v", name, k)
		}
	})
}
