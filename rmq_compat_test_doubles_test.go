package redq

import (
	"fmt"
	"reflect"
	"testing"
)

// Ports of rmq v5's test_connection_test.go and test_delivery_test.go (see
// rmq_compat_helpers_test.go).

// rmq's TestTestConnection. GetDelivery's message names the package, as
// rmq's does: "redq.TestConnection: delivery not found: things[0]" where
// rmq says "rmq.TestConnection: …", which is what a test moved over by
// renaming rmq. to redq. throughout expects.
func TestRmqTestConnection(t *testing.T) {
	connection := NewTestConnection()
	var _ Connection = connection // it implements the interface
	notFound := func(i int) string { return fmt.Sprintf("redq.TestConnection: delivery not found: things[%d]", i) }
	want := func(got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("GetDelivery = %q, want %q", got, want)
		}
	}
	want(connection.GetDelivery("things", 0), notFound(0))

	queue, err := connection.OpenQueue("things")
	mustNil(t, err)
	want(connection.GetDelivery("things", -1), notFound(-1))
	want(connection.GetDelivery("things", 0), notFound(0))
	want(connection.GetDelivery("things", 1), notFound(1))

	mustNil(t, queue.Publish("bar"))
	want(connection.GetDelivery("things", 0), "bar")
	want(connection.GetDelivery("things", 1), notFound(1))
	want(connection.GetDelivery("things", 2), notFound(2))

	mustNil(t, queue.Publish("foo"))
	want(connection.GetDelivery("things", 0), "bar")
	want(connection.GetDelivery("things", 1), "foo")
	want(connection.GetDelivery("things", 2), notFound(2))

	connection.Reset()
	want(connection.GetDelivery("things", 0), notFound(0))

	mustNil(t, queue.Publish("blab"))
	want(connection.GetDelivery("things", 0), "blab")
	want(connection.GetDelivery("things", 1), notFound(1))
}

// What rmq's test doubles hold when nothing was published: empty slices,
// not nil, so that a test comparing with []string{} (reflect.DeepEqual, as
// testify's Equal does) passes. Not one of rmq's tests.
func TestRmqTestQueueEmpty(t *testing.T) {
	empty := func(what string, got []string) {
		t.Helper()
		if !reflect.DeepEqual(got, []string{}) {
			t.Fatalf("%s = %#v, want []string{}", what, got)
		}
	}
	empty("NewTestQueue's LastDeliveries", NewTestQueue("q").LastDeliveries)
	connection := NewTestConnection()
	empty("GetDeliveries of a queue never opened", connection.GetDeliveries("things"))
	queue, err := connection.OpenQueue("things")
	mustNil(t, err)
	empty("GetDeliveries of a new queue", connection.GetDeliveries("things"))
	mustNil(t, queue.Publish("a"))
	connection.Reset()
	empty("GetDeliveries after Reset", connection.GetDeliveries("things"))
	empty("LastDeliveries after Reset", queue.(*TestQueue).LastDeliveries)
}

// rmq's State prints as its constant's name (rmq's is made by stringer).
// Not one of rmq's tests.
func TestRmqStateString(t *testing.T) {
	for s, want := range map[State]string{Unacked: "Unacked", Acked: "Acked", Rejected: "Rejected", Pushed: "Pushed", Released: "Released", State(9): "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

// rmq's TestDeliveryPayload.
func TestRmqDeliveryPayload(t *testing.T) {
	var delivery Delivery = NewTestDelivery("p23")
	mustNil(t, delivery.Ack())
	if p := delivery.Payload(); p != "p23" {
		t.Fatalf("payload = %q", p)
	}
}

func wantState(t *testing.T, d *TestDelivery, want State) {
	t.Helper()
	if d.State != want {
		t.Fatalf("state = %v, want %v", d.State, want)
	}
}

// rmq's TestDeliveryAck.
func TestRmqDeliveryAck(t *testing.T) {
	delivery := NewTestDelivery("p")
	wantState(t, delivery, Unacked)
	mustNil(t, delivery.Ack())
	wantState(t, delivery, Acked)

	wantErr(t, "second Ack", delivery.Ack(), ErrorNotFound)
	wantErr(t, "Reject after Ack", delivery.Reject(), ErrorNotFound)
	wantState(t, delivery, Acked)
}

// rmq's TestDeliveryReject.
func TestRmqDeliveryReject(t *testing.T) {
	delivery := NewTestDelivery("p")
	wantState(t, delivery, Unacked)
	mustNil(t, delivery.Reject())
	wantState(t, delivery, Rejected)

	wantErr(t, "second Reject", delivery.Reject(), ErrorNotFound)
	wantErr(t, "Ack after Reject", delivery.Ack(), ErrorNotFound)
	wantState(t, delivery, Rejected)
}

// rmq's TestDeliveryPush.
func TestRmqDeliveryPush(t *testing.T) {
	delivery := NewTestDelivery("p")
	wantState(t, delivery, Unacked)
	mustNil(t, delivery.Push())
	wantState(t, delivery, Pushed)

	wantErr(t, "second Push", delivery.Push(), ErrorNotFound)
	wantErr(t, "Reject after Push", delivery.Reject(), ErrorNotFound)
	wantErr(t, "Ack after Push", delivery.Ack(), ErrorNotFound)
	wantState(t, delivery, Pushed)
}
