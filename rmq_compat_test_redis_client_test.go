package redq

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Port of rmq v5's test_redis_client_test.go (see
// rmq_compat_helpers_test.go). redq's TestRedisClient is an embedded Redis
// (miniredis) behind rmq's RedisClient methods, and answers them as rmq's
// in-memory TestRedisClient does.

func wantInt(t *testing.T, what string, got int64, err error, want int64) {
	t.Helper()
	mustNil(t, err)
	if got != want {
		t.Fatalf("%s = %d, want %d", what, got, want)
	}
}

// rmq's TestTestRedisClient_Set.
func TestRmqTestRedisClientSet(t *testing.T) {
	client := NewTestRedisClient()
	mustNil(t, client.Set("somekey", "somevalue", 0))

	v, err := client.Get("somekey")
	mustNil(t, err)
	if v != "somevalue" {
		t.Fatalf("Get = %q", v)
	}

	affected, err := client.Del("somekey")
	wantInt(t, "Del", affected, err, 1)
	affected, err = client.Del("somekey")
	wantInt(t, "second Del", affected, err, 0)
}

// rmq's TestTestRedisClient_SAdd.
func TestRmqTestRedisClientSAdd(t *testing.T) {
	client := NewTestRedisClient()
	total, err := client.SAdd("somekey", "somevalue")
	wantInt(t, "SAdd", total, err, 1)
	// rmq's TestRedisClient answers with the set's size, not with how many
	// members were added.
	total, err = client.SAdd("somekey", "somevalue")
	wantInt(t, "second SAdd", total, err, 1)

	members, err := client.SMembers("somekey")
	mustNil(t, err)
	if !reflect.DeepEqual(members, []string{"somevalue"}) {
		t.Fatalf("SMembers = %q", members)
	}

	count, err := client.SRem("somekey", "somevalue")
	wantInt(t, "SRem", count, err, 1)
}

// rmq's TestTestRedisClient_LPush.
func TestRmqTestRedisClientLPush(t *testing.T) {
	client := NewTestRedisClient()
	total, err := client.LPush("somekey", "somevalue")
	wantInt(t, "LPush", total, err, 1)

	count, err := client.LLen("somekey")
	wantInt(t, "LLen", count, err, 1)
	count, err = client.LLen("somekeynonsense")
	wantInt(t, "LLen of a missing key", count, err, 0)

	count, err = client.LRem("somekey", 100, "somevalue")
	wantInt(t, "LRem", count, err, 1)
	count, err = client.LLen("somekey")
	wantInt(t, "LLen", count, err, 0)
}

// rmq's TestTestRedisClient_LPush_Len.
func TestRmqTestRedisClientLPushLen(t *testing.T) {
	client := NewTestRedisClient()
	total, err := client.LPush("list-key", "1", "2", "3")
	wantInt(t, "LPush", total, err, 3)
	total, err = client.LPush("list-key", "4", "5", "6")
	wantInt(t, "LPush", total, err, 6)
}

// rmq's TestTestRedisClient_RPop.
func TestRmqTestRedisClientRPop(t *testing.T) {
	client := NewTestRedisClient()
	total, err := client.LPush("list-key", "1", "2", "3")
	wantInt(t, "LPush", total, err, 3)

	// rmq's TestRedisClient puts the values at the head in the order given
	// (Redis's LPUSH puts the last given at the head), so "3" is the tail.
	value, err := client.RPop("list-key")
	mustNil(t, err)
	if value != "3" {
		t.Fatalf("RPop = %q, want \"3\"", value)
	}

	total, err = client.LLen("list-key")
	wantInt(t, "LLen", total, err, 2)
}

// What rmq's TestRedisClient answers that its tests do not check, and a
// connection on a TestRedisClient. Not one of rmq's tests.
func TestRmqTestRedisClientMore(t *testing.T) {
	client := NewTestRedisClient()
	// Get of a missing key: "nil" and no error, as rmq's.
	v, err := client.Get("missing")
	if v != "nil" || err != nil {
		t.Fatalf("Get of a missing key = %q, %v, want \"nil\", nil", v, err)
	}
	// RPop of an empty list: redis.Nil, as rmq's (and rmq's RedisWrapper).
	if _, err := client.RPop("missing"); !errors.Is(err, redis.Nil) {
		t.Fatalf("RPop of an empty list: err = %v, want redis.Nil", err)
	}
	// RPopLPush of an empty list: ErrorNotFound.
	if _, err := client.RPopLPush("missing", "other"); err != ErrorNotFound {
		t.Fatalf("RPopLPush of an empty list: err = %v, want ErrorNotFound", err)
	}

	// A connection runs on it.
	conn, err := OpenConnectionWithRmqRedisClient("trc", client, nil)
	mustNil(t, err)
	rmqStopAtEnd(t, conn)
	q, err := conn.OpenQueue("things")
	mustNil(t, err)
	mustNil(t, q.Publish("a", "b"))
	mustNil(t, q.StartConsuming(10, time.Millisecond))
	consumer := NewTestConsumer("c")
	_, err = q.AddConsumer("c", consumer)
	mustNil(t, err)
	consumedN(t, consumer, 2)
	wantPayload(t, consumer.Deliveries()[0], "a")
	wantPayload(t, consumer.Deliveries()[1], "b")
}
