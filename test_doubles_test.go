package redq

import (
	"errors"
	"testing"
)

// A consumer under test, as a user would write one.
type countingConsumer struct{ seen []string }

func (c *countingConsumer) Consume(d Delivery) {
	c.seen = append(c.seen, d.Payload())
	if d.Payload() == "bad" {
		_ = d.Reject()
		return
	}
	_ = d.Ack()
}

func TestTestDoubles(t *testing.T) {
	conn := NewTestConnection()
	q, err := conn.OpenQueue("q")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.OpenQueue("bad name"); !errors.Is(err, ErrorInvalidArgument) {
		t.Fatalf("test connection accepted a bad name: %v", err)
	}
	if err := q.Publish("a", "b"); err != nil {
		t.Fatal(err)
	}
	if got := conn.GetDeliveries("q"); len(got) != 2 || got[1] != "b" {
		t.Fatalf("GetDeliveries = %v", got)
	}
	if n := mustStats(t, conn, "q").QueueStats["q"].ReadyCount; n != 2 {
		t.Fatalf("ready %d", n)
	}
	conn.Reset()
	if got := conn.GetDeliveries("q"); len(got) != 0 {
		t.Fatalf("after Reset: %v", got)
	}

	c := &countingConsumer{}
	good, bad := NewTestDeliveryString("good"), NewTestDeliveryString("bad")
	c.Consume(good)
	c.Consume(bad)
	if good.GetState() != Acked || bad.GetState() != Rejected {
		t.Fatalf("states %v %v", good.State, bad.State)
	}
	if err := good.Ack(); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("double ack of a test delivery: %v", err)
	}
	if d := NewTestDelivery(map[string]int{"n": 1}); d.Payload() != `{"n":1}` {
		t.Fatalf("JSON payload %q", d.Payload())
	}
	if NewTestDeliveryString("x").WithHeader(map[string][]string{"A": {"b"}}).Header().Get("A") != "b" {
		t.Fatal("header")
	}
	if Pushed.String() != "pushed" {
		t.Fatal(Pushed.String())
	}
}
