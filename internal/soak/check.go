package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// The soak's checker reads what the soak recorded (the outcome of every
// publish) and what the workers logged (see log.go), and judges the
// run against the reliability contract. Its bookkeeping is one small
// record per payload number in slices, not maps of strings, so that a run
// of millions of deliveries fits in a few tens of megabytes.

// soakFate is what the soak did to one worker process.
type soakFate struct {
	name       string // for the report, e.g. "worker 3 (pid 1234)"
	killed     bool   // SIGKILLed (a fault, or at the end because it would not stop)
	sigstopped bool   // paused past its heartbeat TTL by a fault
}

// Causes of a redelivery: what ended the take before it.
const (
	causeKill    = iota // its process was SIGKILLed
	causeZombie         // its process was SIGSTOPped and declared dead
	causeRestart        // its process was declared dead without a SIGSTOP (its heartbeat lapsed while Redis was down, or it stalled)
	causeLease          // its lease (TTR) ran out
	causeUnknown        // its Ack's outcome was unknown, and it was not done
	causeOther          // anything else (an Ack refused or unavailable, a stopped connection)
	numCauses
)

var causeNames = [numCauses]string{"kill", "zombie", "restart", "lease", "unknown-ack", "other"}

// idState is what the logs say about one delivery id.
type idState struct {
	id    deliveryID
	set   bool
	takes uint16 // got lines
	acked uint16 // acked lines
	// atKill counts acks that were under way (an acking line, no outcome)
	// when their process was SIGKILLed: each may or may not have been done.
	atKill uint16
	// unknown counts acks that failed with ErrorOutcomeUnknown.
	unknown uint16
	// claimedNotDone counts acks that failed saying they did nothing (see
	// ackClaimsNotDone).
	claimedNotDone uint16
}

func (s *idState) inc(p *uint16) {
	if *p < ^uint16(0) {
		*p++
	}
}

// presumedDone reports whether some take of the delivery removed it: an
// acked line, or an ack whose outcome is not known.
func (s *idState) presumedDone() bool { return s.acked+s.atKill+s.unknown > 0 }

// soakLogInfo is what one worker log says about its process's life.
type soakLogInfo struct {
	conn      string
	lostAt    time.Time   // zero: never learnt it was declared dead
	lost      []time.Time // each time it learnt it and went on under a fresh name
	stopped   string      // how it stopped (stoppedAsked...), "" if it never said
	stoppedAt time.Time
	lines     int
}

// soakChecker accumulates the logs of one run.
type soakChecker struct {
	n       int
	pub     []pubOutcome // by payload number; the publishers fill it
	primary []idState    // by payload number: the first id seen with it
	extra   map[uint32][]idState
	causes  [numCauses]int
	anomaly exampleSet // log lines that make no sense: the soak's or the library's fault
	suspect []uint32   // payloads that failed checks name, for evidence
}

// newSoakChecker returns a checker for payloads 0..n-1 whose publish
// outcomes are in pub (len n).
func newSoakChecker(pub []pubOutcome) *soakChecker {
	return &soakChecker{n: len(pub), pub: pub, primary: make([]idState, len(pub)), extra: map[uint32][]idState{}}
}

// exampleSet counts occurrences of a problem and keeps the first few.
type exampleSet struct {
	count    int
	examples []string
}

const maxExamples = 8

func (e *exampleSet) add(format string, args ...any) {
	e.count++
	if len(e.examples) < maxExamples {
		e.examples = append(e.examples, fmt.Sprintf(format, args...))
	}
}

// state returns the record of payload p under id, creating it.
func (c *soakChecker) state(p uint32, id deliveryID) *idState {
	s := &c.primary[p]
	if !s.set {
		s.id, s.set = id, true
		return s
	}
	if s.id == id {
		return s
	}
	xs := c.extra[p]
	for i := range xs {
		if xs[i].id == id {
			return &xs[i]
		}
	}
	c.extra[p] = append(xs, idState{id: id, set: true})
	return &c.extra[p][len(c.extra[p])-1]
}

// states returns every id seen with payload p.
func (c *soakChecker) states(p uint32) []*idState {
	if !c.primary[p].set {
		return nil
	}
	out := []*idState{&c.primary[p]}
	for i := range c.extra[p] {
		out = append(out, &c.extra[p][i])
	}
	return out
}

// takeKey names one take: a delivery id and its attempt number.
type takeKey struct {
	id      deliveryID
	attempt uint32
}

// openTake is a take whose outcome the log has not told yet.
type openTake struct {
	payload uint32
	acking  bool
}

// readLog reads one worker's log. fate says what the soak did to the
// process, which decides what an unfinished take means.
func (c *soakChecker) readLog(r io.Reader, fate soakFate) (soakLogInfo, error) {
	var info soakLogInfo
	open := map[takeKey]openTake{}
	var failed [numCauses]int // takes that ended without being done, by cause, before the process's fate is known
	var leaseLost int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		f := bytes.Fields(line)
		if len(f) == 0 {
			c.anomaly.add("%s line %d: empty line", fate.name, lineNo)
			continue
		}
		kind := string(f[0])
		switch kind {
		case lineGot, lineAcking, lineAcked, lineAckErr:
		case lineStart:
			if len(f) >= 3 {
				info.conn = string(f[2])
			}
			continue
		case lineLost:
			if len(f) >= 2 {
				at := parseUnixNano(f[1])
				if info.lostAt.IsZero() {
					info.lostAt = at
				}
				info.lost = append(info.lost, at)
			}
			continue
		case lineStopped:
			if len(f) >= 3 {
				info.stopped, info.stoppedAt = string(f[1]), parseUnixNano(f[2])
			}
			continue
		case lineBgErr:
			continue
		default:
			c.anomaly.add("%s line %d: unknown line %q", fate.name, lineNo, line)
			continue
		}
		want := 4
		if kind == lineAckErr {
			want = 5
		}
		if len(f) != want {
			c.anomaly.add("%s line %d: malformed line %q", fate.name, lineNo, line)
			continue
		}
		id, err := parseDeliveryID(f[1])
		if err != nil {
			c.anomaly.add("%s line %d: %v", fate.name, lineNo, err)
			continue
		}
		p, err := strconv.ParseUint(string(f[2]), 10, 32)
		if err != nil || p >= uint64(c.n) {
			c.anomaly.add("%s line %d: payload %q is no number the soak published", fate.name, lineNo, f[2])
			continue
		}
		attempt, err := strconv.ParseUint(string(f[len(f)-1]), 10, 32)
		if err != nil {
			c.anomaly.add("%s line %d: attempt %q is no number", fate.name, lineNo, f[len(f)-1])
			continue
		}
		k := takeKey{id, uint32(attempt)}
		payload := uint32(p)
		s := c.state(payload, id)
		info.lines++
		switch kind {
		case lineGot:
			s.inc(&s.takes)
			if _, dup := open[k]; dup {
				c.anomaly.add("%s line %d: delivery %s (payload %d, attempt %d) handed out twice in one take", fate.name, lineNo, id, payload, attempt)
			}
			open[k] = openTake{payload: payload}
			continue
		}
		t, ok := open[k]
		if !ok {
			c.anomaly.add("%s line %d: %s of delivery %s (payload %d, attempt %d) that this process was never handed", fate.name, lineNo, kind, id, payload, attempt)
			continue
		}
		if t.payload != payload {
			c.anomaly.add("%s line %d: delivery %s was handed out with payload %d, %s with %d", fate.name, lineNo, id, t.payload, kind, payload)
		}
		switch kind {
		case lineAcking:
			t.acking = true
			open[k] = t
		case lineAcked:
			if !t.acking {
				c.anomaly.add("%s line %d: acked without acking: %s", fate.name, lineNo, id)
			}
			delete(open, k)
			s.inc(&s.acked)
		case lineAckErr:
			delete(open, k)
			switch ak := string(f[3]); {
			case ak == ackUnknown:
				s.inc(&s.unknown)
			case ackClaimsNotDone(ak):
				s.inc(&s.claimedNotDone)
				if ak == ackLeaseLost {
					leaseLost++
				} else {
					failed[causeOther]++ // the process's fate decides below
				}
			default:
				c.anomaly.add("%s line %d: Ack of %s (payload %d) failed with an untyped error (%s)", fate.name, lineNo, id, payload, ak)
				s.inc(&s.claimedNotDone)
				failed[causeOther]++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return info, fmt.Errorf("read log of %s: %w", fate.name, err)
	}
	// Takes the log leaves open ended with the process.
	for k, t := range open {
		s := c.state(t.payload, k.id)
		switch {
		case fate.killed && t.acking:
			s.inc(&s.atKill)
		case fate.killed:
			failed[causeOther]++
		default:
			c.anomaly.add("%s: delivery %s (payload %d) was handed out and never settled, yet the process was not killed", fate.name, k.id, t.payload)
			failed[causeOther]++
		}
	}
	// Failed takes of this process take its fate as their cause.
	n := failed[causeOther]
	switch {
	case fate.killed:
		c.causes[causeKill] += n
	case fate.sigstopped:
		c.causes[causeZombie] += n
	case !info.lostAt.IsZero():
		c.causes[causeRestart] += n
	default:
		c.causes[causeOther] += n
	}
	c.causes[causeLease] += leaseLost
	return info, nil
}

func parseUnixNano(b []byte) time.Time {
	ns, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// readLogFile is readLog on a file.
func (c *soakChecker) readLogFile(path string, fate soakFate) (soakLogInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return soakLogInfo{}, fmt.Errorf("open log of %s: %w", fate.name, err)
	}
	defer func() { _ = f.Close() }() // read only: closing loses nothing
	return c.readLog(f, fate)
}

// soakCheck is the result of one check.
type soakCheck struct {
	name     string
	ok       bool
	detail   string
	examples []string
	always   bool // print the examples even when the check passed
}

// soakTally is what the checker counted.
type soakTally struct {
	attempted, published         int // payloads given to Publish; those it returned nil for
	acked                        int // published payloads with an acked line
	ackedAtKill, ackedUnknown    int // published payloads acked only by an ack at a SIGKILL / of unknown outcome
	lost                         int // published payloads never acked
	dupIDs                       int // ids with two acked lines
	doubleLanded                 int // payloads delivered under two ids
	redelivered                  int // takes beyond the first of each id
	causes                       [numCauses]int
	ackErrors, falseAckErrors    int // acks that said "not done"; those whose delivery no other take acked
	outcomeUnknown               int // publishes that returned ErrorOutcomeUnknown
	unknownLanded, unknownAbsent int
	nothingDone, phantom         int // publishes that did nothing; of those, payloads delivered anyway
	pubOther                     int
	anomalies                    int
}

// verdict judges the run. leftover holds the payloads still in Redis (see
// scanSoakKeys), by payload number.
func (c *soakChecker) verdict(leftover map[uint32]int) (soakTally, []soakCheck) {
	var t soakTally
	var lost, dupIDs, doubleLanded, falseAck, phantom, untyped, atKillLeft exampleSet
	t.causes = c.causes
	for p := 0; p < c.n; p++ {
		pub := c.pub[p]
		if pub != pubNone {
			t.attempted++
		}
		states := c.states(uint32(p))
		if len(states) > 1 {
			ids := make([]string, len(states))
			for i, s := range states {
				ids[i] = s.id.String()
			}
			c.blame(&doubleLanded, p, "payload %d delivered under ids %s", p, strings.Join(ids, ", "))
		}
		var acked, atKill, unknown, takes, denied int
		for _, s := range states {
			takes += int(s.takes)
			denied += int(s.claimedNotDone)
			acked += int(s.acked)
			atKill += int(s.atKill)
			unknown += int(s.unknown)
			if s.takes > 1 {
				t.redelivered += int(s.takes) - 1
			}
			if s.acked > 1 {
				c.blame(&dupIDs, p, "delivery %s (payload %d) acked %d times", s.id, p, s.acked)
			}
			if s.claimedNotDone > 0 {
				t.ackErrors += int(s.claimedNotDone)
				if !s.presumedDone() {
					t.falseAckErrors += int(s.claimedNotDone)
					c.blame(&falseAck, p, "delivery %s (payload %d): %d ack(s) failed saying they did nothing, and no other take acked it", s.id, p, s.claimedNotDone)
				}
			}
			// Acks of unknown outcome beyond the one presumed done were
			// not done: the delivery came back.
			switch {
			case s.acked > 0:
				t.causes[causeKill] += int(s.atKill)
				t.causes[causeUnknown] += int(s.unknown)
			case s.atKill > 0:
				t.causes[causeKill] += int(s.atKill) - 1
				t.causes[causeUnknown] += int(s.unknown)
			case s.unknown > 0:
				t.causes[causeUnknown] += int(s.unknown) - 1
			}
		}
		switch {
		case pub == pubOK:
			t.published++
			switch {
			case acked > 0:
				t.acked++
			case atKill > 0 || unknown > 0:
				if atKill > 0 {
					t.ackedAtKill++
				} else {
					t.ackedUnknown++
				}
				if leftover[uint32(p)] > 0 {
					c.blame(&atKillLeft, p, "payload %d: its only ack was under way at a SIGKILL or of unknown outcome, and it is still in Redis", p)
				}
			case denied > 0 && leftover[uint32(p)] == 0:
				// Gone, and its only acks said they did nothing: counted
				// as false ack errors above, not as lost.
			default:
				where := "gone from Redis"
				if leftover[uint32(p)] > 0 {
					where = "still in Redis"
				}
				c.blame(&lost, p, "payload %d (delivered %d times, %s)", p, takes, where)
			}
		case pub == pubUnknown:
			t.outcomeUnknown++
			if acked+atKill+unknown > 0 {
				t.unknownLanded++
			} else {
				t.unknownAbsent++
			}
		case pub.nothingDone():
			t.nothingDone++
			if takes > 0 || leftover[uint32(p)] > 0 {
				c.blame(&phantom, p, "payload %d: Publish returned %v (nothing was done), yet it was delivered %d times", p, pub, takes)
			}
		case pub == pubOther:
			c.blame(&untyped, p, "payload %d: Publish returned an untyped error", p)
		case pub == pubNone && takes > 0:
			c.anomaly.add("payload %d was delivered but never published", p)
		}
	}
	t.lost, t.dupIDs, t.doubleLanded, t.phantom, t.pubOther = lost.count, dupIDs.count, doubleLanded.count, phantom.count, untyped.count
	t.anomalies = c.anomaly.count

	checks := []soakCheck{
		{name: "every payload whose Publish returned nil was acked", ok: lost.count == 0 && atKillLeft.count == 0,
			detail: fmt.Sprintf("%d published: %d acked, %d acked only at a SIGKILL (unconfirmed), %d acked only with an unknown outcome, %d lost",
				t.published, t.acked, t.ackedAtKill, t.ackedUnknown, t.lost),
			examples: append(lost.examples, atKillLeft.examples...)},
		{name: "no delivery id acked twice", ok: dupIDs.count == 0,
			detail: fmt.Sprintf("%d ids acked twice", dupIDs.count), examples: dupIDs.examples},
		{name: "no payload landed twice (delivered under two ids)", ok: doubleLanded.count == 0,
			detail: fmt.Sprintf("%d payloads under more than one id", doubleLanded.count), examples: doubleLanded.examples},
		{name: "every failed ack really failed (another take acked the delivery)", ok: falseAck.count == 0,
			detail: fmt.Sprintf("%d ack errors saying nothing was done, %d of them false", t.ackErrors, t.falseAckErrors), examples: falseAck.examples},
		{name: "publishes that did nothing were never delivered", ok: phantom.count == 0,
			detail: fmt.Sprintf("%d publishes did nothing (unavailable, refused or not sent), %d delivered anyway; %d of unknown outcome (%d landed, %d absent)",
				t.nothingDone, phantom.count, t.outcomeUnknown, t.unknownLanded, t.unknownAbsent), examples: phantom.examples},
		{name: "every publish got a typed answer", ok: untyped.count == 0,
			detail: fmt.Sprintf("%d untyped publish errors", untyped.count), examples: untyped.examples},
		{name: "the worker logs make sense", ok: c.anomaly.count == 0,
			detail: fmt.Sprintf("%d anomalies", c.anomaly.count), examples: c.anomaly.examples},
	}
	return t, checks
}

// blame records payload p as an example of a failed check, when e still
// takes examples.
func (c *soakChecker) blame(e *exampleSet, p int, format string, args ...any) {
	if e.count < maxExamples {
		c.suspect = append(c.suspect, uint32(p))
	}
	e.add(format, args...)
}

// suspects returns the payload numbers (as strings) that the failed
// checks name, for evidence.
func (c *soakChecker) suspects() map[string]bool {
	out := map[string]bool{}
	for _, p := range c.suspect {
		out[strconv.FormatUint(uint64(p), 10)] = true
	}
	return out
}

// causesString renders the redelivery causes that occurred, e.g.
// "kill 20, zombie 12, restart 5".
func causesString(causes [numCauses]int) string {
	var parts []string
	for i, n := range causes {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", causeNames[i], n))
		}
	}
	return strings.Join(parts, ", ")
}

// evidence returns the log lines about the given payloads, file by file in
// the order they were written, for a report that lets a reader follow what
// went wrong.
func evidence(logs []string, payloads map[string]bool, maxLines int) []string {
	var out []string
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() && len(out) < maxLines {
			fs := strings.Fields(sc.Text())
			if len(fs) >= 3 && payloads[fs[2]] {
				out = append(out, path+": "+sc.Text())
			}
		}
		_ = f.Close() // read only: closing loses nothing
	}
	return out
}
