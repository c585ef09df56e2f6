package redq

import (
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	ids := newIDSource()
	now := time.UnixMilli(1_790_000_000_123)
	for _, tc := range []struct {
		meta    meta
		payload string
	}{
		{meta{}, ""},
		{meta{}, "hello"},
		{meta{header: http.Header{}}, "empty header is no header"},
		{meta{header: http.Header{"A": {"1", "2"}, "B": {""}}}, "with headers"},
		{meta{header: http.Header{"X": {"y"}}}, string([]byte{0, 1, 2, 255})},
		{meta{attempts: 3, priority: 9, ttr: time.Minute, ttl: 1500 * time.Millisecond, expireAt: 1_790_000_001_000}, "all of it"},
		{meta{priority: 1, header: http.Header{"K": {";,"}}}, "1,2,3;"},
	} {
		b, err := encodeEnvelope(ids, now, tc.meta, []byte(tc.payload))
		if err != nil {
			t.Fatal(err)
		}
		env, ok := decodeEnvelope(string(b))
		if !ok || env.payload != tc.payload || len(env.id) != idLen {
			t.Fatalf("%q: decoded %+v ok=%v", tc.payload, env, ok)
		}
		want := tc.meta
		if len(want.header) == 0 {
			want.header = nil
		}
		if !reflect.DeepEqual(env.meta, want) {
			t.Fatalf("%q: meta %+v, want %+v", tc.payload, env.meta, want)
		}
		if (b[0] == envPlain) != tc.meta.plain() {
			t.Fatalf("%q: format %d for meta %+v", tc.payload, b[0], tc.meta)
		}
		// The scripts read the id as bytes 2..17.
		if string(b[1:17]) != env.id {
			t.Fatal("id is not at bytes 2..17")
		}
		if !publishedAt(env.id).Equal(now) {
			t.Fatalf("published at %v, want %v", publishedAt(env.id), now)
		}
	}
}

func TestIDsAreUnique(t *testing.T) {
	seen := map[string]bool{}
	a, b := newIDSource(), newIDSource()
	now := time.Now() // one millisecond for all: the counter alone keeps them apart
	for i := 0; i < 10000; i++ {
		for _, s := range []*idSource{a, b} {
			id := string(s.next(nil, now))
			if seen[id] {
				t.Fatalf("id %x repeated", id)
			}
			seen[id] = true
		}
	}
	// Two sources differ in their random part.
	if x, y := a.next(nil, now), b.next(nil, now); bytes.Equal(x[6:12], y[6:12]) {
		t.Fatal("two sources share their random part")
	}
}

// FuzzDecodeEnvelope feeds arbitrary stored bytes (anything may sit in a
// ready list) to the decoder: it must never panic, must keep every byte of
// a malformed item as the payload, and must round-trip what encode makes.
func FuzzDecodeEnvelope(f *testing.F) {
	ids := newIDSource()
	for _, seed := range []string{"", "x", "\x01", "\x03abcdefghijklmnop0,0,0,0,0,5;{\"a\"", "\x03abcdefghijklmnop1,2,3,4,5,99999999999999999999;z", "\x03abcdefghijklmnop-1,0,0,0,0,0;"} {
		f.Add([]byte(seed), "")
	}
	b, _ := encodeEnvelope(ids, time.Now(), meta{header: http.Header{"K": {"v"}}}, []byte("payload"))
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
		enc, err := encodeEnvelope(ids, time.Now(), meta{header: h, ttl: time.Duration(len(raw)) * time.Millisecond}, raw)
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

// A publish encodes its envelopes into one buffer: each must decode to its
// own payload and id, and none may reach into the next (an append to one
// must not write over another).
func TestEncodeEnvelopesShareOneBuffer(t *testing.T) {
	ids := newIDSource()
	payloads := [][]byte{[]byte("first"), {}, []byte(strings.Repeat("x", 300)), []byte("last")}
	for _, m := range []meta{{}, {priority: 2, header: http.Header{"K": {"v"}}}, {group: "g", key: ""}} {
		args, err := encodeEnvelopes(ids, time.Now(), m, payloads)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i, a := range args {
			b, err := a.(*envArg).MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if cap(b) != len(b) {
				t.Fatalf("envelope %d has room for %d more bytes: an append would write into the next", i, cap(b)-len(b))
			}
			env, ok := decodeEnvelope(string(b))
			if !ok || env.payload != string(payloads[i]) || seen[env.id] {
				t.Fatalf("envelope %d of %+v: decoded %+v ok=%v (ids so far %d)", i, m, env, ok, len(seen))
			}
			seen[env.id] = true
			if env.priority != m.priority || env.group != m.group {
				t.Fatalf("envelope %d: meta %+v, want %+v", i, env.meta, m)
			}
		}
	}
}
