package redq_test

// The README's schedules section (see example_test.go for how snippets
// are cut).

import (
	"context"
	"fmt"
	"time"

	"github.com/redq/redq"
)

// A nightly report at 02:00 in Berlin, published once a night on the
// "reports" queue however many processes run the schedules' loop; a
// second schedule ticks every second to show a tick arriving.
func ExampleConnection_OpenSchedules() {
	conn := exampleConnection()
	defer func() { <-conn.StopAllConsuming() }()
	ctx := context.Background()
	reports, err := conn.OpenQueue("reports")
	must(err)
	must(func() error {
		// readme:start
		schedules, err := conn.OpenSchedules("reports") // ticks go to the queue "reports"
		if err != nil {
			return err
		}
		err = schedules.Upsert(ctx, "nightly-sales", "0 2 * * *", []byte(`{"report":"sales"}`),
			redq.ScheduleTimeZone("Europe/Berlin"),
			redq.ScheduleCatchUp(redq.CatchUpLatest()), // after downtime: the latest missed night only
			redq.ScheduleOverlap(redq.OverlapSkip))     // not while last night's report still runs
		if err != nil {
			return err // *ArgumentError for a bad spec, zone or option
		}
		err = schedules.Upsert(ctx, "ping", "@every 1s", []byte("ping"))
		if err != nil {
			return err
		}
		// the loop, in any number of processes: each tick is published once
		go func() { _ = schedules.Run(ctx) }() // until ctx ends or conn stops
		// readme:end
		info, err := schedules.Lookup(ctx, "nightly-sales")
		if err != nil {
			return err
		}
		berlin, _ := time.LoadLocation("Europe/Berlin")
		fmt.Println("nightly-sales next at", info.Next.In(berlin).Format("15:04"), "Berlin time")
		return nil
	}())
	d, err := reports.Take(ctx, 5*time.Second)
	must(err)
	fmt.Println(d.Payload(), "from schedule", d.Header().Get(redq.HeaderSchedule))
	must(d.Ack())
	// Output:
	// nightly-sales next at 02:00 Berlin time
	// ping from schedule ping
}
