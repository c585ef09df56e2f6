package redq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// bareNanoseconds finds a duration printed as a raw nanosecond count: a
// number of ten or more digits (over a second) outside quotes.
var bareNanoseconds = regexp.MustCompile(`(^|[^0-9"])[0-9]{10,}($|[^0-9"])`)

// checkErrorText fails when text does not start with exactly one "redq: "
// prefix, repeats it anywhere, or prints a duration as bare nanoseconds.
func checkErrorText(t *testing.T, name, text string) {
	t.Helper()
	if !strings.HasPrefix(text, "redq: ") {
		t.Errorf("%s: %q does not start with \"redq: \"", name, text)
	}
	if n := strings.Count(text, "redq: "); n != 1 {
		t.Errorf("%s: %q has %d \"redq: \" prefixes, want 1", name, text, n)
	}
	if bareNanoseconds.MatchString(text) {
		t.Errorf("%s: %q prints a duration as nanoseconds", name, text)
	}
}

// Every error constructor and Error method gives a readable text: one
// "redq: " prefix however the errors are wrapped, and durations as
// time.Duration strings.
func TestErrorTexts(t *testing.T) {
	inner := errorf("lookup %q on %q: %w", "k", "q", ErrorNotFound)
	cases := map[string]error{
		"argument duration":      argError("round period", time.Hour, "must be from 1ms to "+MaxRoundPeriod.String()),
		"argument long string":   argError("key", strings.Repeat("k", 2000), "must be at most 1024 bytes"),
		"argument time":          argError("at", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), "too far ahead"),
		"argument nil":           argError("consumer", nil, "must not be nil"),
		"argument func":          argError("handler", func() {}, "must not be nil"),
		"argument header":        argError("header", http.Header{"A": {"b"}}, "bad"),
		"payload too large":      checkPayloadSize("payload 3", 10, 5),
		"unsupported client":     unsupportedClient("WithWaitReplicas", 42, "it does not replicate"),
		"wrapped twice":          errorf("outer: %w", errorf("middle: %w", inner)),
		"wrapped in parentheses": errorf("%w (%w)", ErrorNotFound, ErrorLeaseLost),
		"wrapped after tries":    errorf("%w (after %d tries: %w)", ErrorOutcomeUnknown, 3, ErrorUnavailable),
		"no prefix given":        errorf("unexpected reply %v", 7),
		"open unavailable":       openError(context.DeadlineExceeded),
		"replication":            &ReplicationError{Want: 2, Got: 1},
		"replication wrapped":    &ReplicationError{Want: 2, Err: inner},
		"connection lost":        &ConnectionLostError{OldName: "a-1", NewName: "a-2"},
		"heartbeat":              &HeartbeatError{RedisErr: inner, Count: 3},
		"consume":                &ConsumeError{Queue: "q", RedisErr: errorf("return buffered deliveries: %w", inner), Count: 1},
		"delivery":               &DeliveryError{RedisErr: inner, Count: 2},
		"clean global":           &CleanError{Global: inner},
		"clean queues":           &CleanError{Queues: map[string]error{"q": inner, "r": ErrorUnavailable}, Nodes: map[string]string{"q": "n1:7000"}},
		"eviction":               &EvictionWarning{Addr: "n1:7000", Policy: "allkeys-lru"},
		"migration refused":      &MigrationRefusedError{Problems: []MigrationProblem{{Queue: "q", Reason: "busy"}}},
	}
	for _, s := range []error{ErrorNotFound, ErrorAlreadyConsuming, ErrorNotConsuming, ErrorConsumingStopped,
		ErrorConnectionLost, ErrorLeaseLost, ErrorTimeout, ErrorInvalidArgument, ErrorPayloadTooLarge,
		ErrorOutcomeUnknown, ErrorUnavailable, ErrorWritesRefused, ErrorNotRedis, ErrorHeld, ErrorCrossSlot,
		ErrorConfiguration, ErrorUnsupportedClient, ErrorNotReplicated, ErrorEvictionPolicy,
		ErrorNoRmqData, ErrorMigrationRefused} {
		cases["sentinel "+s.Error()] = s
		cases["wrapped sentinel "+s.Error()] = errorf("verb %q: %w", "q", s)
	}
	for name, err := range cases {
		checkErrorText(t, name, err.Error())
	}

	if got, want := cases["argument duration"].Error(), "redq: invalid round period 1h0m0s: must be from 1ms to "+MaxRoundPeriod.String(); got != want {
		t.Errorf("duration argument: got %q, want %q", got, want)
	}
	if got, want := cases["payload too large"].Error(), `redq: payload too large: invalid payload 3 "10 bytes": must be at most 5 bytes (see WithMaxPayloadSize)`; got != want {
		t.Errorf("payload too large: got %q, want %q", got, want)
	}
	// The text changes; what errors.Is and errors.As see does not.
	if err := cases["wrapped twice"]; !errors.Is(err, ErrorNotFound) {
		t.Errorf("%v does not match ErrorNotFound", err)
	}
	var arg *ArgumentError
	if err := cases["payload too large"]; !errors.Is(err, ErrorPayloadTooLarge) || !errors.As(err, &arg) || arg.Arg != "payload 3" {
		t.Errorf("%v does not match ErrorPayloadTooLarge and *ArgumentError", err)
	}
	// Quoted text is left alone: a key may hold anything.
	if got := errorf("lookup %q: %w", "redq: x", ErrorNotFound).Error(); got != `redq: lookup "redq: x": entity not found` {
		t.Errorf("quoted prefix: got %q", got)
	}
}

// The errors the API returns for bad input read the same way end to end.
func TestErrorTextsFromTheAPI(t *testing.T) {
	ctx := context.Background()
	conn, err := OpenConnectionWithTestRedisClient("texts", nil, WithMaxPayloadSize(4))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { <-conn.StopAllConsuming() }()
	q, err := conn.OpenQueue("texts")
	if err != nil {
		t.Fatal(err)
	}
	_, roundErr := conn.OpenRound("texts", 400*24*time.Hour)
	_, takeErr := q.TakeBatch(ctx, 0, time.Second)
	errs := map[string]error{
		"round period":  roundErr,
		"payload":       q.Publish("too long"),
		"put payload":   q.Put(ctx, []byte("too long")),
		"delay":         q.Put(ctx, []byte("x"), Delay(-time.Minute)),
		"take max":      takeErr,
		"release delay": fmt.Errorf("%w", argError("release delay", -time.Second, "x")),
	}
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		checkErrorText(t, name, err.Error())
	}
	if got := roundErr.Error(); !strings.Contains(got, "9600h0m0s") {
		t.Errorf("round period error %q does not print the period as a duration", got)
	}
}
