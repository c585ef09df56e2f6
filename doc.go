// Package redq provides reliable work queues on Redis, with the API of rmq
// (github.com/adjust/rmq) at its core: a program written for rmq v5 moves
// over by changing its import.
//
// A [Connection] announces itself with a heartbeat and opens [Queue]s. A
// producer publishes payloads to a queue; a consumer takes them, works on
// them and acks them; a [Cleaner] hands the deliveries of connections that
// died back to the queue.
//
// # Guarantees
//
//   - From the moment Publish returns nil until it is acked, a delivery is in
//     exactly one place in Redis: ready, delayed, one connection's unacked
//     store, or rejected. Every move between places is one atomic Redis step.
//   - Ack, Reject and Push act on exactly that delivery, and a nil Ack means
//     it is gone from Redis. An answer is what happened in Redis, whatever
//     happened to the reply: a call is resent under a token and runs once.
//   - A consumer that dies or stalls loses nothing: its deliveries go back
//     to ready when a cleaner sees its heartbeat gone (or its lease ends),
//     and the connection itself pauses and resumes as Redis comes and goes.
//
// # Producer
//
//	conn, err := redq.OpenConnection("api", "tcp", "localhost:6379", 0, errChan)
//	if err != nil {
//		return err
//	}
//	tasks, err := conn.OpenQueue("tasks")
//	if err != nil {
//		return err
//	}
//	err = tasks.Publish("resize image 1")
//
// [Open] takes any go-redis client instead: a single node, a failover
// (Sentinel) client or a cluster client.
//
// # Consumer
//
//	if err := tasks.StartConsuming(10, time.Second); err != nil {
//		return err
//	}
//	_, err = tasks.AddHandler("resizer", func(ctx context.Context, d redq.Message) error {
//		return resize(ctx, d.Payload()) // nil acks; an error retries with backoff
//	})
//
// rmq's [Queue.AddConsumer], [Queue.AddConsumerFunc] and
// [Queue.AddBatchConsumer] work as in rmq; [Queue.Take] pulls one delivery
// without a consumer. The runnable version is the package [Example].
//
// # Features
//
//   - Scheduling and priorities: [Queue.Put] with [Delay], [At], [Priority],
//     [TTL] (time to live) and [TTR] (a lease, renewed by Message.Touch).
//   - Retries with backoff: [Queue.AddHandler] and [WithRetryPolicy]; a
//     delivery that fails every attempt is rejected with its reason in the
//     [HeaderError] header, and [Queue.ReturnRejected] brings it back.
//   - Rate limits: [WithRateLimit] hands out at most n deliveries of a
//     queue in any window, across every process, by Redis's clock.
//   - Groups (per-tenant concurrency, fair across tenants): [Group] puts a
//     delivery in a group; [WithGroupConcurrency] runs at most K of a group
//     at a time, the groups take turns, and [WithGroupRateLimit] caps each
//     group's rate.
//   - Keyed deliveries (debounce, throttle, dedupe): [Queue.Upsert],
//     [Queue.Lookup], [Queue.RunNow], [Queue.Cancel].
//   - Timers: [Connection.OpenTimers]. Cron schedules, each tick published
//     once across processes: [Connection.OpenSchedules]. Round queues (hand
//     each item out again every period): [Connection.OpenRound].
//   - Stats and a stats page: [Connection.CollectStats], [NewHandler].
//   - Operating: [Queue.Pause] and [Queue.Resume]; an [Inspector] that
//     lists deliveries by state (dead letters with their reject reason),
//     retries, deletes and purges them, without a connection of its own;
//     the dashboard in package github.com/redq/redq/dashboard; logs through
//     [WithLogger] and [RedisLogger]; metrics through [WithObserver] and the
//     Prometheus module github.com/redq/redq/redqprom.
//   - Tests without Redis: [NewTestConnection], [NewTestDeliveryString];
//     with an embedded Redis: [OpenConnectionWithTestRedisClient].
//   - Moving a live rmq deployment's data: [MigrateFromRmq].
//
// # Errors
//
// Every error matches one of the Error… values with errors.Is, or one of
// the *…Error types with errors.As; its text starts with "redq: ". Bad
// input gets an [*ArgumentError] and changes nothing. Background errors
// (heartbeats, fetches, retried settles) go to the error channel given at
// open as [*HeartbeatError], [*ConsumeError] and [*DeliveryError].
//
// # Where to go next
//
// The README is the user's guide: a tour, each feature with an example,
// what each error means and what to do, and a production checklist. The
// docs directory holds the details (the Redis layout, Cluster and Sentinel,
// durability, performance, moving over from rmq). The command in cmd/redq
// runs a demo (go run ./cmd/redq demo), the dashboard, the cleaner, and
// inspects and acts on queues and deliveries (redq help lists it all).
package redq
