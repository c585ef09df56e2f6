package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redq/redq"
	"github.com/redq/redq/internal/console"
)

// failingQueue is a queue whose publishes fail with err after some of
// them: the first failures publishes fail, and those with landed set do
// land, as a publish whose reply Redis never sent does (ErrorOutcomeUnknown
// on a loaded machine).
type failingQueue struct {
	redq.Queue
	err      error
	landed   bool
	failures int
}

func (q *failingQueue) PublishContext(ctx context.Context, payload ...string) error {
	if q.failures == 0 {
		return q.Queue.PublishContext(ctx, payload...)
	}
	q.failures--
	if q.landed {
		if err := q.Queue.PublishContext(ctx, payload...); err != nil {
			return err
		}
	}
	return fmt.Errorf("redq: publish to \"demo\": %w", q.err)
}

// TestProduceFailedPublish checks the demo's producer against publishes
// that fail: a job is never published twice, none is skipped when Redis
// said nothing was done, and what it counts as published and as of
// unknown outcome brackets what the queue holds.
func TestProduceFailedPublish(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		landed bool
	}{
		{"unknown outcome, landed", redq.ErrorOutcomeUnknown, true},
		{"unknown outcome, not landed", redq.ErrorOutcomeUnknown, false},
		{"nothing done", redq.ErrorUnavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := redq.NewTestConnection()
			tq, err := conn.OpenQueue("demo")
			if err != nil {
				t.Fatal(err)
			}
			q := &failingQueue{Queue: tq, err: tc.err, landed: tc.landed, failures: 2}
			var n demoCounters
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			produce(ctx, q, 1000, &n, console.New(io.Discard))

			jobRe := regexp.MustCompile(`^\{"job":(\d+)\}$`)
			seen := map[int]bool{}
			top, twice := -1, 0
			for _, p := range tq.(*redq.TestQueue).Deliveries() {
				m := jobRe.FindStringSubmatch(p)
				if m == nil {
					t.Fatalf("payload %q", p)
				}
				job, _ := strconv.Atoi(m[1])
				if seen[job] {
					twice++
				}
				seen[job] = true
				top = max(top, job)
			}
			if twice > 0 {
				t.Errorf("%d jobs published more than once", twice)
			}
			held := int64(len(seen))
			published, unknown := n.published.Load(), n.unknown.Load()
			if published == 0 {
				t.Fatal("nothing published")
			}
			if held < published || held > published+unknown {
				t.Errorf("the queue holds %d jobs; counted published %d, of unknown outcome %d", held, published, unknown)
			}
			switch {
			case tc.err == redq.ErrorOutcomeUnknown && unknown == 0:
				t.Errorf("two publishes of unknown outcome, counted as unknown: 0")
			case tc.err != redq.ErrorOutcomeUnknown && unknown != 0:
				t.Errorf("publishes that did nothing counted %d as of unknown outcome", unknown)
			}
			if !tc.landed && tc.err != redq.ErrorOutcomeUnknown && int64(top+1) != held {
				t.Errorf("jobs up to %d, %d of them in the queue: jobs were skipped", top, held)
			}
		})
	}
}
