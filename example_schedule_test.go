package redq_test

// The README's scheduling, priorities, TTL, leases, retries and Take
// sections (see example_test.go for how snippets are cut).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redq/redq"
)

// Put with Delay or At holds a delivery back until it is due by Redis's
// clock; Take waits for it.
func ExampleDelay() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	reminders, err := conn.OpenQueue("reminders")
	must(err)
	must(func() error {
		// readme:start
		err := reminders.Put(ctx, []byte("send reminder"), redq.Delay(200*time.Millisecond))
		if err != nil {
			return err
		}
		return reminders.Put(ctx, []byte("new year"), redq.At(time.Now().AddDate(1, 0, 0)))
		// readme:end
	}())
	_, err = reminders.Take(ctx, 0) // do not wait: nothing is due yet
	fmt.Println(errors.Is(err, redq.ErrorTimeout))
	d, err := reminders.Take(ctx, 5*time.Second) // returns when the first is due
	must(err)
	fmt.Println(d.Payload(), "attempt", d.Attempts())
	must(d.Ack())
	// Output:
	// true
	// send reminder attempt 1
}

// Higher priorities are taken first, and within a priority the oldest
// first. Take needs no StartConsuming.
func ExamplePriority() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	jobs, err := conn.OpenQueue("jobs")
	must(err)
	for _, p := range []struct {
		payload  string
		priority int
	}{{"weekly report", 0}, {"password reset", redq.MaxPriority}, {"invoice", 5}, {"newsletter", 0}} {
		must(jobs.Put(ctx, []byte(p.payload), redq.Priority(p.priority)))
	}
	for {
		d, err := jobs.Take(ctx, 0)
		if errors.Is(err, redq.ErrorTimeout) {
			break // nothing left
		}
		must(err)
		fmt.Println(d.Payload())
		must(d.Ack())
	}
	// Output:
	// password reset
	// invoice
	// weekly report
	// newsletter
}

// A handle's publish defaults apply to everything it publishes; the retry
// policy to its handlers; WithKeepExpired keeps deliveries whose TTL ran
// out in the rejected list.
func ExampleWithPublishDefaults() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	emails, err := func() (redq.Queue, error) {
		// readme:start
		emails, err := conn.OpenQueue("emails",
			redq.WithPublishDefaults(redq.TTR(time.Minute), redq.TTL(24*time.Hour)),
			redq.WithRetryPolicy(redq.RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Second, MaxBackoff: time.Hour, Jitter: 0.2}),
			redq.WithKeepExpired(true),
		)
		if err != nil {
			return nil, err // *ArgumentError for a bad policy or option
		}
		// readme:end
		return emails, nil
	}()
	must(err)
	must(emails.Publish("welcome"))
	fmt.Println("ok")
	// Output: ok
}

// A delivery published with a TTR has a lease: Touch renews it, and once it
// ran out the delivery went back to ready and the old handle's verbs say so.
func ExampleTTR() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	tasks, err := conn.OpenQueue("tasks")
	must(err)
	must(tasks.Put(ctx, []byte("long job"), redq.TTR(30*time.Second)))
	process := func(string) {}
	must(func() error {
		// readme:start
		d, err := tasks.Take(ctx, time.Second)
		if err != nil {
			return err
		}
		process("part 1")
		if err := d.Touch(ctx); err != nil { // a full TTR again
			return err // errors.Is(err, redq.ErrorLeaseLost): it went back to ready
		}
		process("part 2")
		if err := d.Ack(); err != nil {
			return err // ErrorLeaseLost too: another consumer may have it now
		}
		// readme:end
		fmt.Println("acked", d.Payload(), "attempt", d.Attempts())
		return nil
	}())
	// Output: acked long job attempt 1
}

// A handler returns an error to have the delivery retried with the queue's
// retry policy; after the last attempt the delivery is rejected, with the
// error and the attempts in its headers.
func ExampleQueue_AddHandler() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	policy := redq.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: time.Second}
	mails, err := conn.OpenQueue("mails", redq.WithRetryPolicy(policy))
	must(err)
	must(mails.Put(ctx, []byte("welcome mail")))
	attempts := make(chan int)
	send := func(ctx context.Context, d redq.Message) error {
		attempts <- d.Attempts()
		return errors.New("mail server down")
	}
	must(func() error {
		// readme:start
		if err := mails.StartConsuming(10, time.Second); err != nil {
			return err
		}
		_, err := mails.AddHandler("sender", func(ctx context.Context, d redq.Message) error {
			return send(ctx, d) // nil acks; an error retries with backoff, then rejects
		})
		// readme:end
		return err
	}())
	for range policy.MaxAttempts {
		fmt.Println("attempt", <-attempts, "failed")
	}
	for { // until the last failure is settled
		stats, err := conn.CollectStats([]string{"mails"})
		must(err)
		if stats.QueueStats["mails"].RejectedCount == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	<-mails.StopConsuming()

	// An operator returns it and reads why it failed.
	_, err = mails.ReturnRejected(1)
	must(err)
	inspect, err := conn.OpenQueue("mails")
	must(err)
	d, err := inspect.Take(ctx, time.Second)
	must(err)
	fmt.Println(d.Payload()+":", d.Header().Get(redq.HeaderError), "after", d.Header().Get(redq.HeaderAttempts), "attempts")
	must(d.Ack())
	// Output:
	// attempt 1 failed
	// attempt 2 failed
	// attempt 3 failed
	// welcome mail: mail server down after 3 attempts
}

// Take pulls deliveries without StartConsuming or a consumer.
func ExampleQueue_Take() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	tasks, err := conn.OpenQueue("tasks")
	must(err)
	must(tasks.Publish("one", "two", "three"))
	work := func(p string) { fmt.Println("work on", p) }
	must(func() error {
		// readme:start
		d, err := tasks.Take(ctx, 5*time.Second) // wait up to 5 s; 0: do not wait
		if errors.Is(err, redq.ErrorTimeout) {
			return nil // nothing became ready in time
		} else if err != nil {
			return err
		}
		work(d.Payload())
		return d.Ack()
		// readme:end
	}())
	must(func() error {
		batch, err := tasks.TakeBatch(ctx, 100, time.Second) // whatever is ready, up to 100
		if err != nil {
			return err
		}
		for _, p := range batch.Payloads() {
			work(p)
		}
		if errs := batch.Ack(); len(errs) > 0 { // one Redis call
			return fmt.Errorf("ack %d of the batch: %v", len(errs), errs)
		}
		return nil
	}())
	// Output:
	// work on one
	// work on two
	// work on three
}
