package soak

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/redq/redq"
)

// The soak's consumer processes (redq soak-worker) each append one line per
// event to a log file of their own, with one write call per line and no
// buffering, so that a SIGKILL leaves every line it did not interrupt
// whole:
//
//	start <pid> <connection> <unix ns>        the connection is open
//	got <id> <payload> <attempt>              a consumer was handed a delivery
//	acking <id> <payload> <attempt>           just before its Ack
//	acked <id> <payload> <attempt>            the Ack returned nil
//	ackerr <id> <payload> <kind> <attempt>    the Ack failed (see ackErrKind)
//	lost <unix ns> <old> <new>                ErrorConnectionLost reached the error channel: the
//	                                          connection goes on under the fresh name new
//	stopped <how> <unix ns>                   the process is about to exit (see workerExit)
//	bgerr <text>                              a background error (rate-limited)
//
// id is the delivery's ID (32 hex digits), payload the soak's sequence
// number, attempt Delivery.Attempts(): two takes of one delivery never
// share it, so a line names one take.
const (
	lineStart   = "start"
	lineGot     = "got"
	lineAcking  = "acking"
	lineAcked   = "acked"
	lineAckErr  = "ackerr"
	lineLost    = "lost"
	lineStopped = "stopped"
	lineBgErr   = "bgerr"
)

// Kinds of a failed Ack, as ackerr lines name them.
const (
	ackNotFound    = "notfound"    // ErrorNotFound: not this take's any more
	ackConnLost    = "connlost"    // ErrorNotFound with ErrorConnectionLost: declared dead
	ackLeaseLost   = "leaselost"   // ErrorNotFound with ErrorLeaseLost: its TTR ran out
	ackUnknown     = "unknown"     // ErrorOutcomeUnknown: it may or may not have been done
	ackUnavailable = "unavailable" // ErrorUnavailable: nothing was done
	ackRefused     = "refused"     // ErrorWritesRefused: nothing was done
	ackStopped     = "stopped"     // ErrorConsumingStopped: nothing was done
	ackOther       = "other"       // anything else: not one of the typed answers
)

// ackErrKind names the typed answer err carries.
func ackErrKind(err error) string {
	switch {
	case errors.Is(err, redq.ErrorConnectionLost):
		return ackConnLost
	case errors.Is(err, redq.ErrorLeaseLost):
		return ackLeaseLost
	case errors.Is(err, redq.ErrorNotFound):
		return ackNotFound
	case errors.Is(err, redq.ErrorOutcomeUnknown):
		return ackUnknown
	case errors.Is(err, redq.ErrorUnavailable):
		return ackUnavailable
	case errors.Is(err, redq.ErrorWritesRefused):
		return ackRefused
	case errors.Is(err, redq.ErrorConsumingStopped):
		return ackStopped
	}
	return ackOther
}

// ackClaimsNotDone reports whether an Ack that failed with kind says the
// delivery was not removed by it: then another take must ack it later, or
// the answer was false.
func ackClaimsNotDone(kind string) bool {
	switch kind {
	case ackNotFound, ackConnLost, ackLeaseLost, ackUnavailable, ackRefused, ackStopped:
		return true
	}
	return false
}

// Exit statuses of a soak worker.
const (
	workerExitAsked      = 0 // asked to stop (SIGTERM): stopped consuming and exited
	workerExitFailed     = 1 // could not start (Redis down too long, bad flags)
	workerExitLost       = 3 // (no longer used: a connection declared dead goes on under a fresh name)
	workerExitHBErrors   = 4 // its connection stopped itself after too many failed heartbeats
	workerExitGaveUp     = 5 // an Ack failed in a way that leaves the delivery held; stopped
	workerExitNotStopped = 6 // declared dead, but its connection did not stop by itself
)

// Ways a worker stopped, as stopped lines name them.
const (
	stoppedAsked   = "asked"
	stoppedSelf    = "self"
	stoppedHB      = "hberrors"
	stoppedGaveUp  = "gaveup"
	stoppedNotSelf = "notself"
)

// pubOutcome is what Publish (or Put) returned for a payload.
type pubOutcome uint8

const (
	pubNone        pubOutcome = iota // not published (the run was cut short)
	pubOK                            // nil
	pubUnknown                       // ErrorOutcomeUnknown
	pubUnavailable                   // ErrorUnavailable: nothing was done
	pubRefused                       // ErrorWritesRefused: nothing was done
	pubNotSent                       // the context ended before it was sent, or the connection stopped: nothing was done
	pubOther                         // any other error
)

// classifyPublish names the typed answer a publish call gave.
func classifyPublish(err error) pubOutcome {
	switch {
	case err == nil:
		return pubOK
	case errors.Is(err, redq.ErrorOutcomeUnknown):
		return pubUnknown
	case errors.Is(err, redq.ErrorUnavailable):
		return pubUnavailable
	case errors.Is(err, redq.ErrorWritesRefused):
		return pubRefused
	case errors.Is(err, redq.ErrorConsumingStopped),
		// A bare context error (not wrapped in ErrorOutcomeUnknown, matched
		// above) means the call was withdrawn before it was sent.
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return pubNotSent
	}
	return pubOther
}

// nothingDone reports whether the outcome says the payload was never
// stored: such a payload must never be delivered.
func (o pubOutcome) nothingDone() bool {
	return o == pubUnavailable || o == pubRefused || o == pubNotSent
}

func (o pubOutcome) String() string {
	switch o {
	case pubNone:
		return "not published"
	case pubOK:
		return "nil"
	case pubUnknown:
		return "ErrorOutcomeUnknown"
	case pubUnavailable:
		return "ErrorUnavailable"
	case pubRefused:
		return "ErrorWritesRefused"
	case pubNotSent:
		return "not sent"
	}
	return "other error"
}

// deliveryID is a delivery's id as bytes (Delivery.ID is its hex form).
type deliveryID [16]byte

func parseDeliveryID(s []byte) (deliveryID, error) {
	var id deliveryID
	if len(s) != 2*len(id) {
		return id, fmt.Errorf("delivery id %q: want %d hex digits", s, 2*len(id))
	}
	if _, err := hex.Decode(id[:], s); err != nil {
		return id, fmt.Errorf("delivery id %q: %w", s, err)
	}
	return id, nil
}

func (id deliveryID) String() string { return hex.EncodeToString(id[:]) }

// formatPayload is the payload of sequence number seq.
func formatPayload(seq int) string { return strconv.Itoa(seq) }
