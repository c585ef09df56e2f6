package redq

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// rmq v5 carried headers inside the payload: a signature, the headers as
// JSON, a newline, then the payload. redq carries headers in the envelope
// (see Header), and reads rmq's form too, so that rmq code that publishes
// with PayloadWithHeader and reads Header through WithHeader keeps working,
// and rmq data moved over keeps its headers.

// rmqHeaderSignature starts a payload that carries headers the rmq way.
const rmqHeaderSignature = "\xFF\x00\xBE\xBEJ"

// PayloadWithHeader returns payload with header attached the way rmq v5
// does; a consumer's delivery then has that header (Header) and payload
// (Payload). Without headers it returns payload unchanged. (Put with the
// Header option keeps headers apart from the payload instead.)
func PayloadWithHeader(payload string, header http.Header) string {
	return string(PayloadBytesWithHeader([]byte(payload), header))
}

// PayloadBytesWithHeader is PayloadWithHeader for bytes.
func PayloadBytesWithHeader(payload []byte, header http.Header) []byte {
	if len(header) == 0 {
		return payload
	}
	hj, _ := json.Marshal(header) // a map of string slices always marshals
	b := make([]byte, 0, len(rmqHeaderSignature)+len(hj)+1+len(payload))
	b = append(b, rmqHeaderSignature...)
	b = append(b, hj...)
	b = append(b, '\n')
	return append(b, payload...)
}

// errHeaderLine is why a payload that starts with the header signature
// cannot be read.
var errHeaderLine = errors.New("redq: payload has a header signature but no header line")

// ExtractHeaderAndPayload splits a payload made by PayloadWithHeader into
// its header and the original payload. A payload without the signature is
// returned as it is, with a nil header. A payload with the signature whose
// header cannot be read is an error (such deliveries are rejected when
// fetched, as rmq does).
func ExtractHeaderAndPayload(payload string) (http.Header, string, error) {
	if !strings.HasPrefix(payload, rmqHeaderSignature) {
		return nil, payload, nil
	}
	line, rest, ok := strings.Cut(payload[len(rmqHeaderSignature):], "\n")
	if !ok {
		return nil, "", errHeaderLine
	}
	var h http.Header
	if err := json.Unmarshal([]byte(line), &h); err != nil {
		return nil, "", errorf("redq: payload header: %w", err)
	}
	if h == nil {
		h = http.Header{}
	}
	return h, rest, nil
}
