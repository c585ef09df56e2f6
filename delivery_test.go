package redq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestDuplicatePayloadsAreDistinctDeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "dup", namespace())
		q := openQueue(t, c, "dup")
		if err := q.Publish("same", "same", "same", "same"); err != nil {
			t.Fatal(err)
		}
		ds := hold(t, q, 10, 4)
		wantCounts(t, c, "dup", 0, 0, 4)
		if err := ds[1].Ack(); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "dup", 0, 0, 3)
		if err := ds[1].Ack(); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("second ack of the same delivery: got %v, want ErrorNotFound", err)
		}
		if errors.Is(ds[1].Ack(), ErrorConnectionLost) {
			t.Fatal("a double ack must not claim the connection was lost")
		}
		wantCounts(t, c, "dup", 0, 0, 3)
		if err := ds[2].Reject(); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "dup", 0, 1, 2)
		if err := ds[2].Ack(); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("ack after reject: got %v, want ErrorNotFound", err)
		}
		if err := ds[0].AckContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := ds[3].Ack(); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "dup", 0, 1, 0)
	})
}

func TestRejectPushAndReturnRejected(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "rp", namespace())
		q := openQueue(t, c, "work")
		failed := openQueue(t, c, "failed")
		if err := q.Publish("1", "2", "3", "4"); err != nil {
			t.Fatal(err)
		}
		ds := hold(t, q, 10, 4)
		// Push without a push queue rejects.
		if err := ds[0].Push(); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "work", 0, 1, 3)
		q.SetPushQueue(failed)
		if err := ds[1].PushContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "work", 0, 1, 2)
		wantCounts(t, c, "failed", 1, 0, 0)
		if got, _ := failed.Drain(10); len(got) != 1 || got[0] != "2" {
			t.Fatalf("push queue holds %v, want [2]", got)
		}
		if err := ds[2].RejectContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := ds[3].Reject(); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, c, "work", 0, 3, 0)
		<-q.StopConsuming() // so returned deliveries stay ready
		n, err := q.ReturnRejected(2)
		if err != nil || n != 2 {
			t.Fatalf("ReturnRejected(2) = %d, %v", n, err)
		}
		wantCounts(t, c, "work", 2, 1, 0)
		n, err = q.ReturnRejected(100)
		if err != nil || n != 1 {
			t.Fatalf("ReturnRejected(100) = %d, %v", n, err)
		}
		// Rejected come back oldest rejection first.
		got, err := q.Drain(10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0] != "1" || got[1] != "3" || got[2] != "4" {
			t.Fatalf("returned order %v, want [1 3 4]", got)
		}
	})
}

func TestHeadersReachTheConsumer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "hdr", namespace())
		q := openQueue(t, c, "hdr")
		h := http.Header{"Trace-Id": {"abc"}, "X-Many": {"1", "2"}}
		if err := q.Put(context.Background(), []byte("with"), Header(h)); err != nil {
			t.Fatal(err)
		}
		if err := q.Publish("without"); err != nil {
			t.Fatal(err)
		}
		ds := hold(t, q, 10, 2)
		if ds[0].Payload() != "with" || ds[0].Header().Get("Trace-Id") != "abc" || len(ds[0].Header()["X-Many"]) != 2 {
			t.Fatalf("got %q %v", ds[0].Payload(), ds[0].Header())
		}
		if ds[1].Payload() != "without" || ds[1].Header() != nil {
			t.Fatalf("got %q %v", ds[1].Payload(), ds[1].Header())
		}
		for _, d := range ds {
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Items that another program pushed into a ready list without an envelope
// (a queue moved over from rmq, say) are delivered whole and can be acked
// one by one, even when they are byte-identical, or look like the stub of
// a keyed item; the cleaner leaves them alone.
func TestForeignItemsAreDelivered(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "foreign", namespace())
		q := openQueue(t, c, "legacy")
		raw := []string{"\x0512:looks like a stub", "x", "x", "a plain rmq payload that is long", "\x01short", "", "\x05x"}
		for _, r := range raw {
			if err := b.client.LPush(context.Background(), q.keys.ready, r).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := NewCleaner(c).Clean(); err != nil {
			t.Fatalf("the cleaner on a queue holding foreign items: %v", err)
		}
		wantCounts(t, c, "legacy", int64(len(raw)), 0, 0)
		ds := hold(t, q, 10, len(raw))
		for i, d := range ds {
			if d.Payload() != raw[i] {
				t.Errorf("delivery %d: payload %q, want %q", i, d.Payload(), raw[i])
			}
		}
		wantCounts(t, c, "legacy", 0, 0, int64(len(raw)))
		for _, d := range ds {
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		wantCounts(t, c, "legacy", 0, 0, 0)
	})
}

func TestManyConsumersAckEveryDeliveryOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "many", namespace())
		q := openQueue(t, c, "many")
		const n = 3000
		payloads := make([]string, n)
		for i := range payloads {
			payloads[i] = "p"
		}
		if err := q.Publish(payloads...); err != nil {
			t.Fatal(err)
		}
		if err := q.StartConsuming(100, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		acked := make(chan error, n)
		for i := 0; i < 10; i++ {
			if _, err := q.AddConsumerFunc("w", func(dd Delivery) { d := dd.(Message); acked <- d.Ack() }); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < n; i++ {
			if err := <-acked; err != nil {
				t.Fatal(err)
			}
		}
		wantCounts(t, c, "many", 0, 0, 0)
	})
}

// When the reply of a fetch is lost (a network break, or the client sending
// the script again), the call repeated with the same token returns the same
// deliveries instead of leaving them in the connection's storage unseen.
func TestRepeatedFetchReturnsTheSameDeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "refetch", namespace())
		q := openQueue(t, c, "q")
		if err := q.Publish("1", "2", "3", "4", "5"); err != nil {
			t.Fatal(err)
		}
		first := take(t, q, 2)
		q.fetchToken-- // as if the reply had been lost
		again := take(t, q, 2)
		if first[0].Payload() != again[0].Payload() || first[1].Payload() != again[1].Payload() {
			t.Fatalf("repeated fetch got %q %q, first %q %q", again[0].Payload(), again[1].Payload(), first[0].Payload(), first[1].Payload())
		}
		// One of them acked meanwhile: a repeat returns only the other.
		if err := first[0].Ack(); err != nil {
			t.Fatal(err)
		}
		q.fetchToken--
		if got, _, err := q.fetch(context.Background(), q.conn.registration(), 2); err != nil || got != 1 || (<-q.buf).Payload() != first[1].Payload() {
			t.Fatalf("repeat after an ack: %d, %v", got, err)
		}
		// The next token takes new deliveries.
		next := take(t, q, 3)
		if next[0].Payload() != "3" {
			t.Fatalf("next fetch started at %q", next[0].Payload())
		}
		wantCounts(t, c, "q", 0, 0, 4)
	})
}

// Copies of one envelope taken together (a list copied by hand) stay
// distinct deliveries: each is stored under an id of its own, can be acked
// on its own, and a cleaner would return each of them.
func TestRepeatedEnvelopesStayDistinct(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		c := openT(t, b, "copies", namespace())
		q := openQueue(t, c, "q")
		if err := q.Publish("original"); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		env, err := b.client.LIndex(ctx, q.keys.ready, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.client.LPush(ctx, q.keys.ready, env, env).Err(); err != nil {
			t.Fatal(err)
		}
		ds := take(t, q, 3)
		wantCounts(t, c, "q", 0, 0, 3)
		for i, d := range ds {
			if d.Payload() != "original" {
				t.Fatalf("copy %d: payload %q", i, d.Payload())
			}
		}
		for _, d := range ds {
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		wantCounts(t, c, "q", 0, 0, 0)
	})
}

// The short ack script answers per take as settle.lua does: a take named
// twice in one call is acked once, a take that is not there is not found,
// the same call sent again gets the first answer, a later send of an older
// call does nothing, and after a cleaner unregistered the connection
// nothing is acked and the answer says it is not registered.
func TestAckCallAnswersPerTake(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "ack", namespace())
		q := openQueue(t, c, "jobs")
		for _, p := range []string{"a", "b", "c"} {
			if err := q.Publish(p); err != nil {
				t.Fatal(err)
			}
		}
		ds := take(t, q, 3)
		reg := c.registration()
		ref := func(i int) string { return ds[i].(*redisDelivery).ref() }
		call := func(field, token string, ids ...string) []int64 {
			t.Helper()
			args := []any{reg.name, field, token}
			for _, id := range ids {
				args = append(args, id)
			}
			v, err := scripts.ack.Run(ctx, b.client, q.keys.ackKeys(reg.name), args...).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		want := func(got []int64, want ...int64) {
			t.Helper()
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
		missing := ref(2) + "0" // the same id under a fence never drawn
		want(call("s1", "10", ref(0), ref(0), missing, ref(1)), 1, 1, 0, 0, 1)
		want(call("s1", "10", ref(0), ref(0), missing, ref(1)), 1, 1, 0, 0, 1) // sent again
		want(call("s1", "9", ref(2)), 1, 0)                                    // an older call of the slot
		wantCounts(t, c, "jobs", 0, 0, 1)
		if n, err := q.returnUnacked(ctx, reg.name, 0, true); err != nil || n != 1 {
			t.Fatalf("returned %d, %v; want 1", n, err)
		}
		want(call("s2", "11", ref(2)), 0, 0)
		wantCounts(t, c, "jobs", 1, 0, 0)
	})
}

// The short ack script answers 2 for a take whose lease ran out (it went
// back to ready), and ends the lease of each take it acks.
func TestAckCallAnswersALostLeaseAndEndsLeases(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		c := openT(t, b, "ack", namespace())
		q := openQueue(t, c, "jobs")
		clock := &redisClock{b: b}
		ttr := 100 * time.Millisecond
		if b.mini != nil {
			ttr = time.Minute
			clock.freeze()
		}
		mustPut(t, q, "held", TTR(time.Hour))
		mustPut(t, q, "lapsed", TTR(ttr))
		ds := take(t, q, 2)
		reg := c.registration()
		refs := map[string]string{}
		for _, d := range ds {
			refs[d.Payload()] = d.(*redisDelivery).ref()
		}
		lease := func(payload string) bool {
			t.Helper()
			_, err := b.client.ZScore(ctx, q.keys.block[3], refs[payload]+":"+reg.name).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			return err == nil
		}
		if !lease("held") || !lease("lapsed") {
			t.Fatal("a take has no lease")
		}
		clock.advance(ttr + time.Second)
		if _, err := NewCleaner(c).Clean(); err != nil { // ends the lapsed lease
			t.Fatal(err)
		}
		wantCounts(t, c, "jobs", 1, 0, 1)
		v, err := scripts.ack.Run(ctx, b.client, q.keys.ackKeys(reg.name), reg.name, "s1", "1", refs["held"], refs["lapsed"]).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(v) != "[1 1 2]" {
			t.Fatalf("got %v, want [1 1 2]", v)
		}
		if lease("held") || lease("lapsed") {
			t.Fatal("a lease is left after the ack")
		}
		wantCounts(t, c, "jobs", 1, 0, 0)
	})
}
