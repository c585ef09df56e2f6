package redq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The test doubles of rmq v5 under their rmq names, so that rmq users'
// tests move over with the import.

// TestRedisClient is an rmq RedisClient on an embedded Redis (miniredis)
// that lives as long as the process. Unlike rmq's in-memory one, a
// connection can run on it: OpenConnectionWithRmqRedisClient(tag,
// NewTestRedisClient(), errChan) gives a working connection for tests.
// Its methods answer as rmq's TestRedisClient does, so that tests written
// against rmq's keep passing; where that differs from Redis (Get, SAdd,
// LPush of several values), the method says so.
type TestRedisClient struct {
	RedisWrapper
	client *redis.Client
}

// NewTestRedisClient starts an embedded Redis and returns a client of it.
// It panics if the embedded Redis cannot start (it listens on a free
// loopback port).
func NewTestRedisClient() *TestRedisClient {
	m, err := miniredis.Run()
	if err != nil {
		panic(fmt.Sprintf("redq: start embedded redis: %v", err))
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return &TestRedisClient{RedisWrapper: RedisWrapper{rawClient: c}, client: c}
}

// Get returns the value of key; as rmq's TestRedisClient, the string "nil"
// and no error when the key does not exist or does not hold a string.
func (c *TestRedisClient) Get(key string) (string, error) {
	v, err := c.client.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) || (err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")) {
		return "nil", nil
	}
	return v, err
}

// SAdd adds value to the set at key and returns, as rmq's TestRedisClient
// does, the set's size afterwards (Redis's SADD answers how many members it
// added).
func (c *TestRedisClient) SAdd(key, value string) (int64, error) {
	ctx := context.Background()
	var card *redis.IntCmd
	_, err := c.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, key, value)
		card = p.SCard(ctx, key)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return card.Val(), nil
}

// LPush puts values at the head of the list at key in the order given, as
// rmq's TestRedisClient does: after LPush(k, "1", "2", "3") the list reads
// 1, 2, 3 from the head and RPop returns "3". (Redis's LPUSH pushes them
// one after the other, so that "3" ends at the head.) It returns the
// list's length.
func (c *TestRedisClient) LPush(key string, value ...string) (int64, error) {
	args := make([]any, len(value))
	for i, v := range value {
		args[len(value)-1-i] = v
	}
	return c.client.LPush(context.Background(), key, args...).Result()
}

// TestConsumer is a Consumer for tests (rmq's): it records every delivery
// (Last, Deliveries), acks it when AutoAck is set, sleeps SleepDuration,
// and, unless AutoFinish is set, blocks in Consume until Finish or
// FinishAll is called.
type TestConsumer struct {
	name          string
	AutoAck       bool
	AutoFinish    bool
	SleepDuration time.Duration

	mu sync.Mutex
	// LastDelivery is the last delivery consumed.
	//
	// Deprecated: use Last, which is safe while consuming (as in rmq).
	LastDelivery Delivery
	// LastDeliveries are the deliveries consumed, oldest first.
	//
	// Deprecated: use Deliveries, which is safe while consuming.
	LastDeliveries []Delivery
	finish         chan int
}

// NewTestConsumer returns a TestConsumer named name (its String) that
// records each delivery and, by default, acks it and returns at once (set
// AutoAck or AutoFinish to false to settle or finish by hand). It cannot
// fail; any name is taken. For example:
//
//	c := redq.NewTestConsumer("c")
//	_, err := queue.AddConsumer("c", c)
func NewTestConsumer(name string) *TestConsumer {
	return &TestConsumer{name: name, AutoAck: true, AutoFinish: true, finish: make(chan int)}
}

// String returns the consumer's name.
func (c *TestConsumer) String() string { return c.name }

// Last returns the last delivery consumed, or nil.
func (c *TestConsumer) Last() Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.LastDelivery
}

// Deliveries returns the deliveries consumed so far, oldest first.
func (c *TestConsumer) Deliveries() []Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Delivery(nil), c.LastDeliveries...)
}

// Consume records the delivery and acks and finishes as configured. It
// panics when its automatic Ack fails, as rmq's does.
func (c *TestConsumer) Consume(d Delivery) {
	c.mu.Lock()
	c.LastDelivery = d
	c.LastDeliveries = append(c.LastDeliveries, d)
	c.mu.Unlock()
	if c.SleepDuration > 0 {
		time.Sleep(c.SleepDuration)
	}
	if c.AutoAck {
		if err := d.Ack(); err != nil {
			panic(err)
		}
	}
	if !c.AutoFinish {
		<-c.finish
	}
}

// Finish lets one blocked Consume return.
func (c *TestConsumer) Finish() { c.finish <- 1 }

// FinishAll lets every Consume return, now and later.
func (c *TestConsumer) FinishAll() { close(c.finish) }

// TestBatchConsumer is a BatchConsumer for tests (rmq's): it records the
// last batch (Last) and how many deliveries it consumed (Consumed); with
// AutoFinish it acks each batch, otherwise it blocks in Consume until
// Finish, which also clears the last batch.
type TestBatchConsumer struct {
	AutoFinish bool

	mu sync.Mutex
	// LastBatch is the last batch consumed (nil after Finish).
	//
	// Deprecated: use Last, which is safe while consuming (as in rmq).
	LastBatch Deliveries
	// ConsumedCount is how many deliveries were consumed.
	//
	// Deprecated: use Consumed, which is safe while consuming.
	ConsumedCount int64
	finish        chan int
}

// NewTestBatchConsumer returns a TestBatchConsumer that records each batch
// and then waits, without settling it, until Finish is called. It cannot
// fail. For example:
//
//	c := redq.NewTestBatchConsumer()
//	_, err := queue.AddBatchConsumer("b", 10, time.Second, c)
func NewTestBatchConsumer() *TestBatchConsumer {
	return &TestBatchConsumer{finish: make(chan int)}
}

// Last returns the last batch, or nil after Finish.
func (c *TestBatchConsumer) Last() Deliveries {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.LastBatch
}

// Consumed returns how many deliveries it consumed.
func (c *TestBatchConsumer) Consumed() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ConsumedCount
}

// Consume records the batch, then acks it (AutoFinish) or waits for
// Finish.
func (c *TestBatchConsumer) Consume(batch Deliveries) {
	c.mu.Lock()
	c.LastBatch = batch
	c.ConsumedCount += int64(len(batch))
	c.mu.Unlock()
	if c.AutoFinish {
		batch.Ack()
		return
	}
	<-c.finish
}

// Finish clears the last batch and lets a blocked Consume return.
func (c *TestBatchConsumer) Finish() {
	c.mu.Lock()
	c.LastBatch = nil
	c.mu.Unlock()
	c.finish <- 1
}

// NewTestQueue returns a TestQueue of that name (see TestConnection), with
// an empty LastDeliveries, as rmq's. It cannot fail, and it does not check
// the name (TestConnection.OpenQueue does, as the real connection does).
// For example:
//
//	q := redq.NewTestQueue("jobs")
func NewTestQueue(name string) *TestQueue { return &TestQueue{name: name, LastDeliveries: []string{}} }

// GetDelivery returns the payload published to the queue at index, or a
// message saying there is none (as rmq's does).
func (c TestConnection) GetDelivery(queueName string, index int) string {
	ds := c.GetDeliveries(queueName)
	if index < 0 || index >= len(ds) {
		return fmt.Sprintf("redq.TestConnection: delivery not found: %s[%d]", queueName, index)
	}
	return ds[index]
}

var (
	_ RedisClient   = RedisWrapper{}
	_ RedisClient   = (*TestRedisClient)(nil)
	_ Consumer      = (*TestConsumer)(nil)
	_ BatchConsumer = (*TestBatchConsumer)(nil)
)
