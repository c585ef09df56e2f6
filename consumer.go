package redq

// Consumer handles deliveries one at a time. Consume must Ack, Reject or
// Push the delivery (now or later); until then the delivery stays in this
// connection's unacked storage.
type Consumer interface {
	Consume(delivery Delivery)
}

// ConsumerFunc is a function that is a Consumer.
type ConsumerFunc func(Delivery)

// Consume calls f(delivery).
func (f ConsumerFunc) Consume(delivery Delivery) { f(delivery) }
