package redq

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Calls that change Redis (publishes, settles, releases) carry a token that
// Redis remembers with their outcome, so the same call sent again after a
// lost reply is answered with the outcome of the first instead of being
// applied twice or reported as "not found". That makes resending safe, and
// redq resends such a call, under the same token, for as long as Redis is
// unreachable or refuses writes for a moment, up to the connection's retry
// timeout (WithRetryTimeout) or the caller's context. sends tracks the
// tries of one call and turns them into the call's final error.
type sends struct {
	count     int
	ambiguous bool // a try may have run in Redis without its reply reaching us
	last      error
	kind      failure // of the last try
}

// errBadReply marks a reply redq cannot read: a resend would get it again.
var errBadReply = errors.New("redq: unexpected reply")

// failure says what a failed try tells about the call.
type failure int

const (
	// failAnswered: Redis answered with an error that a resend would get
	// again (a wrong type, a script error): final.
	failAnswered failure = iota
	// failOOM: Redis is out of memory and refused the call: it did
	// nothing. Final: memory does not come back by waiting a second.
	failOOM
	// failRefused: Redis refused the call for now (a replica during a
	// failover, loading its data, a long script, a cluster slot moving):
	// it did nothing; resend.
	failRefused
	// failUnreached: the call never left this process (no connection could
	// be made or taken from the pool): it did nothing; resend.
	failUnreached
	// failUnknown: the call may have been sent, and no answer came (a
	// timeout, a connection closed by Redis shutting down, the caller's
	// context ending): it may have run; resend to find out.
	failUnknown
)

// classify says what err, the error of one try, tells about the call.
func classify(err error) failure {
	var opErr *net.OpError
	var redisErr redis.Error
	switch {
	case errors.Is(err, errNotFenced):
		// (the call was not sent; an earlier send may still run)
		return failUnknown
	case errors.Is(err, errBadReply), errors.Is(err, ErrorNotReplicated):
		// (a resend of a call that ran could not wait for its write)
		return failAnswered
	case errors.As(err, &opErr) && opErr.Op == "dial", errors.Is(err, redis.ErrPoolTimeout):
		return failUnreached
	case errors.As(err, &redisErr):
		msg := redisErr.Error()
		switch {
		case strings.HasPrefix(msg, "OOM "):
			return failOOM
		case strings.HasPrefix(msg, "READONLY "), strings.HasPrefix(msg, "LOADING "), strings.HasPrefix(msg, "BUSY "),
			strings.HasPrefix(msg, "MASTERDOWN "), strings.HasPrefix(msg, "TRYAGAIN "), strings.HasPrefix(msg, "CLUSTERDOWN "),
			strings.HasPrefix(msg, "NOREPLICAS "), msg == "ERR max number of clients reached",
			// redirections go-redis gave up following, or from a cluster
			// node redq sent to itself (see nodeFor)
			strings.HasPrefix(msg, "MOVED "), strings.HasPrefix(msg, "ASK "):
			return failRefused
		}
		return failAnswered
	}
	return failUnknown
}

// failed records a failed try and reports whether to send the call again
// (the caller also stops at its deadline).
func (s *sends) failed(err error) bool {
	s.count++
	s.last = err
	s.kind = classify(err)
	if s.kind == failUnknown {
		s.ambiguous = true
	}
	return s.kind == failRefused || s.kind == failUnreached || s.kind == failUnknown
}

// err is the call's final error once no more tries will be made.
func (s *sends) err() error {
	switch {
	case s.ambiguous:
		return errorf("%w (after %d tries: %w)", ErrorOutcomeUnknown, s.count, s.last)
	case s.kind == failOOM || s.kind == failRefused:
		return errorf("%w: %w", ErrorWritesRefused, s.last)
	case s.kind == failUnreached:
		return errorf("%w (after %d tries: %w)", ErrorUnavailable, s.count, s.last)
	}
	return s.last
}

// Bounds of WithRetryTimeout. The records that answer a repeated call live
// for replyKeep (REPLY_KEEP in scripts/lib.lua) after the call, or after a
// cleaner declared the connection dead, so a call is never sent again after
// its record is gone.
const (
	DefaultRetryTimeout = time.Minute
	MaxRetryTimeout     = 30 * time.Minute
	replyKeep           = time.Hour
)

// retryDeadline is when a call made now with ctx stops being sent again:
// the connection's retry timeout, or ctx's deadline when that is sooner.
func (c *redisConnection) retryDeadline(ctx context.Context) time.Time {
	limit := time.Now().Add(c.opts.retryTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(limit) {
		return d
	}
	return limit
}

// resend runs call until it succeeds or fails for good: Redis answers, the
// deadline passes (see retryDeadline) or ctx ends. Each failed try is
// passed to report with its count. call must be safe to repeat: it sends
// the same token every time.
//
// A try runs under ctx alone, bounded by the client's own timeouts (dial,
// read, write, its retries), and the deadline is looked at between tries:
// a try cut short by a deadline of ours would end with a context error
// that hides whether the call left the process, and the final error could
// not tell "unavailable" from "unknown". So a call may end up to one try
// after its deadline.
//
// A try that ctx cut short ends with ctx's bare error, which does not say
// whether Redis got the call: go-redis resends a call refused with
// READONLY or LOADING by itself, and when ctx ends while it waits to, it
// returns ctx's error and not Redis's refusal. When that try is the only
// one that may have run, resend asks once more (see clarify), so that a
// call every send of which was refused ends in ErrorWritesRefused and not
// in ErrorOutcomeUnknown.
func (c *redisConnection) resend(ctx context.Context, call func(context.Context) error, report func(err error, count int)) error {
	deadline := c.retryDeadline(ctx)
	var s sends
	for {
		err := call(ctx)
		if err == nil {
			return nil
		}
		c.topologyChanged(err)
		wasAmbiguous := s.ambiguous
		again := s.failed(err)
		if ctx.Err() != nil && !wasAmbiguous && s.kind == failUnknown && isContextError(err) {
			return c.clarify(ctx, call, &s)
		}
		if !again || ctx.Err() != nil || !time.Now().Before(deadline) {
			return s.err()
		}
		if report != nil {
			report(err, s.count)
		}
		select {
		case <-ctx.Done():
			return s.err()
		case <-time.After(min(backoff(s.count, time.Second), time.Until(deadline))):
		}
	}
}

// answerGrace bounds how long a call whose caller's context ended waits
// for the answer to the send under way (see clarify and await). It covers
// go-redis's own resends of a refused call with its default backoff.
const answerGrace = 500 * time.Millisecond

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// clarify makes one last send of call, under the same token, after ctx cut
// the previous one short and no earlier send may have run. The call runs
// at most once however often it is sent, so an answer of Redis is the
// truth about it: done (nil), refused (nothing was done), or an error.
// When this send is not answered within answerGrace either, the outcome
// stays unknown. The send runs in a goroutine of its own, so that a client
// that does not cut its reads at a context's deadline (go-redis's default)
// cannot hold the caller longer; it finishes on its own.
func (c *redisConnection) clarify(ctx context.Context, call func(context.Context) error, s *sends) error {
	answer := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), answerGrace)
		defer cancel()
		answer <- call(cctx)
	}()
	grace := time.NewTimer(answerGrace)
	defer grace.Stop()
	var err error
	select {
	case err = <-answer:
	case <-grace.C:
		return s.err()
	}
	if err == nil {
		return nil
	}
	if k := classify(err); k != failUnknown && k != failUnreached && c.clarifies(err) {
		// Redis answered: what it said stands for every send before.
		s.count++
		s.ambiguous, s.last, s.kind = false, err, k
	}
	return s.err()
}

// clarifies reports whether err, the answer to a clarifying send, tells
// what became of the sends before it. A refusal does only when it came
// from the server those sends went to: on a cluster client the slot map
// may have been reloaded in between (the send cut short may have run on
// another node), and a redirection or a cluster-wide refusal says nothing
// of what another node did.
func (c *redisConnection) clarifies(err error) bool {
	var redisErr redis.Error
	if !errors.As(err, &redisErr) || classify(err) != failRefused && classify(err) != failOOM {
		return true // done, or an answer a resend would get again
	}
	if _, ok := c.client.(*redis.ClusterClient); ok {
		return false
	}
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN ", "CLUSTERDOWN "} {
		if strings.HasPrefix(redisErr.Error(), p) {
			return false
		}
	}
	return true
}

// remembered is one script call that Redis remembers by a field and a
// token (see sends): its args carry them. A field serves one call at a
// time, and the tokens of the calls that use it grow, so the scripts also
// refuse a send whose token is older than the one they recorded: a send of
// a finished call that reaches Redis late (it waited in a socket while
// Redis was paused) does nothing.
type remembered struct {
	scriptCall                        // the call, or:
	push       *pushCall              // a plain publish; the calls sent together are all of one kind
	deadline   time.Time              // send it again until then
	report     func(err error, n int) // told each failed try that is sent again; nil: nobody
	// done is given the answer, or the final error, once. With
	// WithWaitReplicas, a call carried out whose write fewer replicas
	// confirmed is given its answer and a *ReplicationError.
	done  func(v any, err error)
	sends sends
	// fence, set when a first send without Lua got no answer, names its
	// connection, which is killed before the call is sent again; fenced
	// once that kill succeeded (see fence.go).
	fence  *fence
	fenced bool
}

// sendAll sends calls once in one pipeline (one round trip) and leaves
// those that need sending again to a goroutine, so that the caller (a
// group commit's flush) is free at once. Each call's done is called once:
// from this goroutine for the calls answered now, from the other for the
// rest. first, when not nil, makes the first try instead of the usual
// send, or returns nil to leave it to that (see fastPath.send).
func (c *redisConnection) sendAll(calls []*remembered, first func([]*remembered) []*redis.Cmd) {
	if again := c.sendOnce(calls, 1, first); len(again) > 0 {
		go func() {
			for try := 2; len(again) > 0; try++ {
				// Wait for the backoff, and give each call whose deadline
				// comes first its final error then: a caller whose context
				// ends at that deadline gets it (see await).
				resendAt := time.Now().Add(backoff(try-1, time.Second))
				for {
					again = expire(again)
					if len(again) == 0 || !time.Now().Before(resendAt) {
						break
					}
					wake := resendAt
					for _, call := range again {
						if call.deadline.Before(wake) {
							wake = call.deadline
						}
					}
					time.Sleep(time.Until(wake))
				}
				if len(again) == 0 {
					return
				}
				again = c.sendOnce(again, try, nil)
			}
		}()
	}
}

// expire gives the calls whose deadline passed their final error and
// returns the others.
func expire(calls []*remembered) []*remembered {
	live := calls[:0]
	for _, call := range calls {
		if time.Now().Before(call.deadline) {
			live = append(live, call)
		} else {
			call.done(nil, call.sends.err())
		}
	}
	return live
}

// sendOnce makes one try of calls in one pipeline and returns those to
// send again. The try is bounded by the client's own timeouts (see
// resend). first is sendAll's.
func (c *redisConnection) sendOnce(calls []*remembered, try int, first func([]*remembered) []*redis.Cmd) []*remembered {
	var cmds []*redis.Cmd
	var waits []error // per call, with WithWaitReplicas: replicas missing
	if first != nil {
		cmds = first(calls)
	}
	switch {
	case cmds != nil:
	case c.opts.waitReplicas > 0:
		cmds, waits = c.sendReplicated(context.Background(), calls)
	case needsFence(calls):
		cmds = c.sendFenced(context.Background(), calls)
	default:
		cmds = sendBatch(context.Background(), c.client, calls)
	}
	var again []*remembered
	for i, call := range calls {
		v, err := cmds[i].Result()
		c.topologyChanged(err)
		if err != nil && call.sends.failed(err) && time.Now().Before(call.deadline) {
			if call.report != nil {
				call.report(err, try)
			}
			again = append(again, call)
			continue
		}
		if err != nil {
			err = call.sends.err()
		} else if waits != nil && waits[i] != nil {
			err = waits[i]
		}
		call.done(v, err)
	}
	return again
}

// sendBatch sends calls, all plain publishes or all script calls, in one
// round trip on s.
func sendBatch(ctx context.Context, s sender, calls []*remembered) []*redis.Cmd {
	if calls[0].push != nil {
		pc := make([]*pushCall, len(calls))
		for i, call := range calls {
			pc[i] = call.push
		}
		return pushBatch(ctx, s, pc)
	}
	sc := make([]scriptCall, len(calls))
	for i, call := range calls {
		sc[i] = call.scriptCall
	}
	return evalBatch(ctx, s, sc)
}
