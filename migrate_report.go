package redq

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// MigrateProgress tells how far a migration is.
type MigrateProgress struct {
	Queue   string        // the queue the last chunk belonged to
	Moved   int64         // deliveries moved so far in this run
	Total   int64         // deliveries the run found to move
	Elapsed time.Duration // since the run started moving
}

// MigrateReport is what MigrateFromRmq found and moved.
type MigrateReport struct {
	// Namespace is the redq namespace moved into.
	Namespace string
	// DryRun is true when nothing moved: a dry run, or a run refused with
	// a *MigrationRefusedError. The counts are then what would move.
	DryRun bool
	// Queues has one entry per queue looked at, by name. In a dry run the
	// counts are what would move.
	Queues []MigrateQueueReport
	// Dead lists the unacked lists of dead rmq connections (no heartbeat)
	// whose deliveries moved to ready (or would, in a dry run).
	Dead []RmqHolding
	// Live lists rmq connections that are alive (their heartbeat exists)
	// and hold unacked deliveries: those were not touched. Stop the
	// connection (or wait until its heartbeat expires) and migrate again.
	Live []RmqHolding
	// Elapsed is how long the moving took (0 in a dry run).
	Elapsed time.Duration
}

// MigrateQueueReport is what moved for one queue.
type MigrateQueueReport struct {
	Name string
	// Layouts lists the rmq key layouts that held the queue's deliveries
	// ("plain", "hash tags"), or is empty when neither did.
	Layouts []string
	// Ready moved from rmq's ready list(s) to the back of redq's ready list.
	Ready int64
	// Rejected moved from rmq's rejected list(s) to redq's rejected list.
	Rejected int64
	// Unacked moved from dead rmq connections' unacked lists to the front
	// of redq's ready list, each with one attempt counted.
	Unacked int64
	// Headers counts the moved deliveries that carried an rmq header, which
	// became the redq delivery's header (Delivery.Header).
	Headers int64
	// UnreadableHeaders counts the moved deliveries that began with rmq's
	// header signature but had no header line that rmq could read (rmq would
	// have rejected them when consuming): they moved with their bytes whole
	// as the payload.
	UnreadableHeaders int64
	// Left counts the deliveries still in rmq's ready and rejected lists of
	// the queue after the run: published or rejected there by rmq programs
	// while it ran. Migrate again to move them.
	Left int64
	// Note says why the queue was passed over, if it was.
	Note string
}

// Moved returns how many deliveries moved for the queue (or would).
func (q MigrateQueueReport) Moved() int64 { return q.Ready + q.Rejected + q.Unacked }

// RmqHolding is an rmq connection's unacked list of one queue.
type RmqHolding struct {
	Connection string
	Queue      string
	Count      int64
}

// Moved returns how many deliveries moved (or, in a dry run, would).
func (r MigrateReport) Moved() int64 {
	var n int64
	for _, q := range r.Queues {
		n += q.Moved()
	}
	return n
}

// Rate returns the deliveries moved per second (0 in a dry run).
func (r MigrateReport) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Moved()) / r.Elapsed.Seconds()
}

// String returns the report as a table with a summary and the rmq
// connections left alone.
func (r MigrateReport) String() string {
	var b strings.Builder
	verb := "moved"
	if r.DryRun {
		verb = "would move"
	}
	fmt.Fprintf(&b, "rmq -> redq namespace %q", r.Namespace)
	if r.DryRun {
		b.WriteString(" (dry run: nothing changed)")
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	// A tabwriter over a strings.Builder: writes cannot fail, and the
	// Builder never fails a Flush either.
	_, _ = fmt.Fprintf(tw, "queue\tready\trejected\tunacked of dead\theaders\tleft in rmq\trmq layout\t\n")
	var total MigrateQueueReport
	for _, q := range r.Queues {
		layouts := strings.Join(q.Layouts, "+")
		if layouts == "" {
			layouts = "-"
		}
		left := strconv.FormatInt(q.Left, 10)
		headers := strconv.FormatInt(q.Headers, 10)
		if r.DryRun {
			left, headers = "-", "-"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t\n", q.Name, q.Ready, q.Rejected, q.Unacked, headers, left, layouts)
		total.Ready += q.Ready
		total.Rejected += q.Rejected
		total.Unacked += q.Unacked
		total.Headers += q.Headers
		total.Left += q.Left
	}
	_ = tw.Flush()
	for _, q := range r.Queues {
		if q.Note != "" {
			fmt.Fprintf(&b, "queue %s: %s\n", q.Name, q.Note)
		}
		if q.UnreadableHeaders > 0 {
			fmt.Fprintf(&b, "queue %s: %d deliveries began with rmq's header signature but had no readable header line (rmq would have rejected them): they moved with their bytes whole as the payload\n",
				q.Name, q.UnreadableHeaders)
		}
	}
	for _, d := range r.Dead {
		fmt.Fprintf(&b, "dead rmq connection %s: %d unacked deliveries of queue %s %s to the front of ready\n", d.Connection, d.Count, d.Queue, verb)
	}
	fmt.Fprintf(&b, "%s %d deliveries (ready %d, rejected %d, unacked of dead connections %d) of %d queues",
		verb, total.Moved(), total.Ready, total.Rejected, total.Unacked, len(r.Queues))
	if !r.DryRun {
		fmt.Fprintf(&b, " in %v (%.0f/s)", r.Elapsed.Round(time.Millisecond), r.Rate())
		if total.Left > 0 {
			fmt.Fprintf(&b, "; %d arrived in rmq meanwhile: migrate again to move them", total.Left)
		}
	}
	b.WriteString("\n")
	for _, l := range r.Live {
		fmt.Fprintf(&b, "NOT MOVED: rmq connection %s is alive holding %d deliveries of queue %s; stop it or run rmq's cleaner, then migrate again\n",
			l.Connection, l.Count, l.Queue)
	}
	return b.String()
}
