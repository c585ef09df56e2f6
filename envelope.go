package redq

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// A delivery is stored in Redis as an envelope: one format byte, a 16-byte
// delivery id, then either the payload (a plain delivery) or a short text of
// metadata, the headers as JSON and the payload:
//
//	0x01 | id[16] | payload
//	0x03 | id[16] | "attempts,priority,ttr,ttl,expireAt,headerLen;" | headers JSON | payload
//	0x04 | id[16] | "attempts,priority,ttr,ttl,expireAt,headerLen,keyLen,due;" | key | headers JSON | payload
//	0x06 | id[16] | "attempts,priority,ttr,ttl,expireAt,headerLen,groupLen,0;" | group | headers JSON | payload
//
// The numbers are decimal: attempts counts how often the delivery went back
// to ready after it was taken (released, lease lost, connection dead);
// priority is its level; ttr and ttl are in milliseconds (0: none);
// expireAt is the Redis time in ms after which it is dropped unless taken
// (0: never), set by the scripts when the delivery becomes ready. Plain
// Publish writes format 1; anything with options writes format 3, and the
// scripts rewrite a format-1 envelope into format 3 when they count an
// attempt. A keyed item (Upsert) is format 4: it also carries its key and
// its due time (Redis ms), which the scripts set. While a keyed item waits
// in the delayed set or a ready list, it is represented there by a stub
// (0x05, see scripts/lib.lua), never by its envelope. A delivery of a
// group (see Group) is format 6, laid out as format 4 with the group in
// place of the key (its due field is unused, 0).
//
// The id makes deliveries with byte-identical payloads distinct, so Ack,
// Reject and Push act on exactly one of them. Its first 6 bytes are the
// publisher's clock in milliseconds (PublishedAt), then 6 random bytes per
// connection and a 4-byte counter. The scripts read the id as bytes 2..17.
// An item that some other program pushed into a ready list without an
// envelope is wrapped into one by the fetch script, so it is delivered with
// its bytes as the payload.
const (
	envPlain    byte = 0x01
	envMeta     byte = 0x03
	envKeyed    byte = 0x04
	envGrouped  byte = 0x06
	idLen            = 16
	envFixedLen      = 1 + idLen
)

// idSource makes delivery ids that are unique without a round trip.
type idSource struct {
	prefix  [6]byte
	counter atomic.Uint32
}

func newIDSource() *idSource {
	var s idSource
	var b [10]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	copy(s.prefix[:], b[:6])
	s.counter.Store(binary.BigEndian.Uint32(b[6:]))
	return &s
}

func (s *idSource) next(dst []byte, now time.Time) []byte {
	ms := uint64(now.UnixMilli())
	dst = append(dst, byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms))
	dst = append(dst, s.prefix[:]...)
	return binary.BigEndian.AppendUint32(dst, s.counter.Add(1))
}

// meta is what a format-3 envelope carries besides the id and payload.
type meta struct {
	attempts int
	priority int
	ttr, ttl time.Duration
	expireAt int64 // Redis time, ms
	header   http.Header
	key      string // a keyed item's key (format 4); "" for others
	due      int64  // a keyed item's due time, Redis ms (format 4)
	group    string // the group of a grouped delivery (format 6); "" for others
}

// plain reports whether m needs no metadata at all (format 1).
func (m meta) plain() bool {
	return m.attempts == 0 && m.priority == 0 && m.ttr == 0 && m.ttl == 0 && m.expireAt == 0 && len(m.header) == 0 && m.key == "" && m.group == ""
}

// encodeEnvelope builds the stored form of one delivery.
func encodeEnvelope(ids *idSource, now time.Time, m meta, payload []byte) ([]byte, error) {
	args, err := encodeEnvelopes(ids, now, m, [][]byte{payload})
	if err != nil {
		return nil, err
	}
	return args[0].(*envArg).b, nil
}

// envArg is an envelope as a command argument. A publish boxes a pointer
// to it, which costs no allocation, where boxing the byte slice itself
// would cost one per envelope; go-redis writes it through MarshalBinary.
type envArg struct{ b []byte }

// MarshalBinary returns the envelope's bytes.
func (e *envArg) MarshalBinary() ([]byte, error) { return e.b, nil }

// encodeEnvelopes builds the stored forms of payloads, all with meta m, in
// one buffer, and returns them as command arguments (each an *envArg).
// One allocation for all of them: a publish of 100 payloads spent a tenth
// of its client time allocating their envelopes one by one.
func encodeEnvelopes(ids *idSource, now time.Time, m meta, payloads [][]byte) ([]any, error) {
	plain := m.plain()
	var hj []byte
	per := envFixedLen
	if !plain {
		if len(m.header) > 0 {
			var err error
			if hj, err = json.Marshal(m.header); err != nil {
				return nil, err
			}
		}
		per += 60 + len(m.key) + len(m.group) + len(hj) // 60: the metadata text, nearly always enough
	}
	total := 0
	for _, p := range payloads {
		total += per + len(p)
	}
	buf := make([]byte, 0, total)
	refs := make([]envArg, len(payloads))
	args := make([]any, len(payloads))
	var id [idLen]byte // the id of a metadata envelope, before its format byte goes in
	for i, p := range payloads {
		start := len(buf)
		if plain {
			buf = append(buf, envPlain)
			buf = ids.next(buf, now)
		} else {
			buf = appendMetaEnvelope(buf, ids.next(id[:0], now), m, hj)
		}
		buf = append(buf, p...)
		// capped, so that nothing appended later can write into it (a
		// buffer that grows leaves it in the old array, which stays valid)
		refs[i].b = buf[start:len(buf):len(buf)]
		args[i] = &refs[i]
	}
	return args, nil
}

func appendMeta(b []byte, m meta, headerLen int) []byte {
	b = strconv.AppendInt(b, int64(m.attempts), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(m.priority), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, m.ttr.Milliseconds(), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, m.ttl.Milliseconds(), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, m.expireAt, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(headerLen), 10)
	if m.key != "" {
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(len(m.key)), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, m.due, 10)
		b = append(b, ';')
		return append(b, m.key...)
	}
	if m.group != "" {
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(len(m.group)), 10)
		b = append(b, ",0;"...)
		return append(b, m.group...)
	}
	return append(b, ';')
}

// envelope is a decoded stored delivery. Payload shares memory with the
// stored string; no copy is made.
type envelope struct {
	id      string
	payload string
	meta
}

// decodeEnvelope never fails: bytes that are not a well-formed envelope are
// taken whole as the payload (the id is then what the scripts used, bytes
// 2..17), so that nothing fetched is ever dropped for its form. ok reports
// whether the bytes were a well-formed envelope.
func decodeEnvelope(s string) (env envelope, ok bool) {
	if len(s) < envFixedLen {
		return envelope{id: s, payload: s}, false
	}
	env.id = s[1:envFixedLen]
	switch s[0] {
	case envPlain:
		env.payload = s[envFixedLen:]
		return env, true
	case envMeta, envKeyed, envGrouped:
		if m, rest, ok := parseMeta(s[envFixedLen:], s[0] != envMeta); ok {
			if s[0] == envGrouped {
				m.group, m.key, m.due = m.key, "", 0
			}
			env.meta = m
			env.payload = rest
			return env, true
		}
	}
	env.payload = s
	return env, false
}

// parseMeta reads "a,p,ttr,ttl,exp,hl;" + headers from the front of s, or
// with keyed "a,p,ttr,ttl,exp,hl,kl,due;" + key + headers, and returns the
// rest (the payload).
func parseMeta(s string, keyed bool) (meta, string, bool) {
	end := strings.IndexByte(s, ';')
	if end < 0 || end > 160 {
		return meta{}, "", false
	}
	var all [8]int64
	n := all[:6]
	if keyed {
		n = all[:]
	}
	fields := s[:end]
	for i := range n {
		f := fields
		if i < len(n)-1 {
			c := strings.IndexByte(fields, ',')
			if c < 0 {
				return meta{}, "", false
			}
			f, fields = fields[:c], fields[c+1:]
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 0 {
			return meta{}, "", false
		}
		n[i] = v
	}
	rest := s[end+1:]
	m := meta{attempts: int(n[0]), priority: int(n[1]), ttr: time.Duration(n[2]) * time.Millisecond,
		ttl: time.Duration(n[3]) * time.Millisecond, expireAt: n[4]}
	if keyed {
		if n[6] < 1 || n[6] > int64(len(rest)) {
			return meta{}, "", false
		}
		m.key, m.due, rest = rest[:n[6]], n[7], rest[n[6]:]
	}
	if n[5] > int64(len(rest)) {
		return meta{}, "", false
	}
	if n[5] > 0 {
		if err := json.Unmarshal([]byte(rest[:n[5]]), &m.header); err != nil {
			return meta{}, "", false
		}
	}
	return m, rest[n[5]:], true
}

// publishedAt reads the publisher's clock from an id (zero for the ids the
// fetch script gives foreign items).
func publishedAt(id string) time.Time {
	if len(id) != idLen || id[0] == '~' {
		return time.Time{}
	}
	var ms int64
	for i := 0; i < 6; i++ {
		ms = ms<<8 | int64(id[i])
	}
	return time.UnixMilli(ms)
}

// encodeWithID builds the stored form of a delivery that keeps its id (a
// rewrite, such as a rejection that records its reason).
func encodeWithID(id string, m meta, payload []byte) ([]byte, error) {
	var hj []byte
	if len(m.header) > 0 {
		var err error
		if hj, err = json.Marshal(m.header); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, envFixedLen+60+len(m.key)+len(m.group)+len(hj)+len(payload))
	b = appendMetaEnvelope(b, id, m, hj)
	return append(b, payload...), nil
}

// appendMetaEnvelope appends to b what comes before the payload in an
// envelope with metadata: its format, id, the metadata and the headers as
// JSON (hj).
func appendMetaEnvelope[ID string | []byte](b []byte, id ID, m meta, hj []byte) []byte {
	switch {
	case m.key != "":
		b = append(b, envKeyed)
	case m.group != "":
		b = append(b, envGrouped)
	default:
		b = append(b, envMeta)
	}
	b = append(b, id...)
	b = appendMeta(b, m, len(hj))
	return append(b, hj...)
}
