package redq

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/google/uuid"
)

// A delivery is stored in Redis as an envelope: one format byte, a 12-byte
// delivery id, then (only when the publisher attached headers) a 4-byte
// big-endian length and the headers as JSON, then the payload bytes.
//
//	0x01 | id[12] | payload
//	0x02 | id[12] | len[4] | headers JSON | payload
//
// The id makes deliveries with byte-identical payloads distinct, so Ack,
// Reject and Push act on exactly one of them. The scripts read the id as
// bytes 2..13 and never look further. An item that some other program pushed
// into a ready list without an envelope is wrapped into one by the fetch
// script, so it is delivered with its bytes as the payload.
const (
	envPlain    byte = 0x01
	envHeaders  byte = 0x02
	idLen            = 12
	envFixedLen      = 1 + idLen
)

// idSource makes delivery ids that are unique without a round trip: 8 random
// bytes per connection, mixed with the high half of a counter, and the low
// 32 bits of that counter.
type idSource struct {
	prefix  uint64
	counter atomic.Uint64
}

func newIDSource() *idSource {
	u := uuid.New() // random (version 4)
	var s idSource
	s.prefix = binary.BigEndian.Uint64(u[:8]) ^ binary.BigEndian.Uint64(u[8:])
	var b [8]byte
	if _, err := rand.Read(b[:]); err == nil {
		s.counter.Store(uint64(binary.BigEndian.Uint32(b[:4]))) // start anywhere in the first generation
	}
	return &s
}

func (s *idSource) next(dst []byte) []byte {
	c := s.counter.Add(1)
	gen := c >> 32
	dst = binary.BigEndian.AppendUint64(dst, s.prefix^(gen*0x9E3779B97F4A7C15))
	return binary.BigEndian.AppendUint32(dst, uint32(c))
}

// encodeEnvelope builds the stored form of one delivery.
func encodeEnvelope(ids *idSource, header http.Header, payload []byte) ([]byte, error) {
	var hj []byte
	if len(header) > 0 {
		var err error
		if hj, err = json.Marshal(header); err != nil {
			return nil, err
		}
	}
	n := envFixedLen + len(payload)
	if hj != nil {
		n += 4 + len(hj)
	}
	b := make([]byte, 0, n)
	if hj == nil {
		b = append(b, envPlain)
		b = ids.next(b)
	} else {
		b = append(b, envHeaders)
		b = ids.next(b)
		b = binary.BigEndian.AppendUint32(b, uint32(len(hj)))
		b = append(b, hj...)
	}
	return append(b, payload...), nil
}

// envelope is a decoded stored delivery. Payload shares memory with the
// stored string; no copy is made.
type envelope struct {
	id      string
	header  http.Header
	payload string
}

// decodeEnvelope never fails: bytes that are not a well-formed envelope are
// taken whole as the payload (the id is then what the scripts used, bytes
// 2..13), so that nothing fetched is ever dropped for its form. ok reports
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
	case envHeaders:
		rest := s[envFixedLen:]
		if len(rest) >= 4 {
			n := binary.BigEndian.Uint32([]byte(rest[:4]))
			if uint64(n) <= uint64(len(rest)-4) {
				var h http.Header
				if err := json.Unmarshal([]byte(rest[4:4+n]), &h); err == nil {
					env.header = h
					env.payload = rest[4+n:]
					return env, true
				}
			}
		}
	}
	env.payload = s
	return env, false
}
