package redq

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// rmq v5's names that have no other home in redq: a program moves over
// from rmq by changing its import. See the README's "Moving over from
// rmq" for what differs.

// HeartbeatErrorLimit is rmq's name for DefaultHeartbeatErrorLimit: after
// this many failed heartbeats in a row a connection stops consuming.
const HeartbeatErrorLimit = DefaultHeartbeatErrorLimit

// OpenClusterConnection opens a connection on a Redis Cluster client (or
// any client). redq puts every key of a queue under one hash tag on every
// client, so this is OpenConnectionWithRedisClient, and fails as it does;
// it exists under rmq's name.
func OpenClusterConnection(tag string, redisClient redis.Cmdable, errChan chan<- error, opts ...Option) (Connection, error) {
	return OpenConnectionWithRedisClient(tag, redisClient, errChan, opts...)
}

// RedisClient is rmq's interface of the Redis commands rmq used. redq runs
// Lua scripts, which it does not cover, so OpenConnectionWithRmqRedisClient
// accepts only the implementations that reach a real Redis underneath:
// RedisWrapper and TestRedisClient.
type RedisClient interface {
	Set(key string, value string, expiration time.Duration) error
	Del(key string) (affected int64, err error)
	TTL(key string) (ttl time.Duration, err error)
	LPush(key string, value ...string) (total int64, err error)
	LLen(key string) (affected int64, err error)
	LRem(key string, count int64, value string) (affected int64, err error)
	LTrim(key string, start, stop int64) error
	RPopLPush(source, destination string) (value string, err error)
	RPop(key string) (value string, err error)
	SAdd(key, value string) (total int64, err error)
	SMembers(key string) (members []string, err error)
	SRem(key, value string) (affected int64, err error)
	FlushDb() error
}

// RedisWrapper is a RedisClient on a go-redis client (rmq's type). Its
// commands use context.Background.
type RedisWrapper struct {
	rawClient redis.Cmdable
}

// NewRedisWrapper wraps a go-redis client as an rmq RedisClient (for
// OpenConnectionWithRmqRedisClient). It cannot fail.
func NewRedisWrapper(client redis.Cmdable) RedisWrapper { return RedisWrapper{rawClient: client} }

// Set sets key to value with an expiration (0: none).
func (w RedisWrapper) Set(key string, value string, expiration time.Duration) error {
	return w.rawClient.Set(context.Background(), key, value, expiration).Err()
}

// Del deletes key.
func (w RedisWrapper) Del(key string) (int64, error) {
	return w.rawClient.Del(context.Background(), key).Result()
}

// TTL returns key's time to live.
func (w RedisWrapper) TTL(key string) (time.Duration, error) {
	return w.rawClient.TTL(context.Background(), key).Result()
}

// LPush pushes values to the head of a list.
func (w RedisWrapper) LPush(key string, value ...string) (int64, error) {
	args := make([]any, len(value))
	for i, v := range value {
		args[i] = v
	}
	return w.rawClient.LPush(context.Background(), key, args...).Result()
}

// LLen returns a list's length.
func (w RedisWrapper) LLen(key string) (int64, error) {
	return w.rawClient.LLen(context.Background(), key).Result()
}

// LRem removes count elements equal to value from a list.
func (w RedisWrapper) LRem(key string, count int64, value string) (int64, error) {
	return w.rawClient.LRem(context.Background(), key, count, value).Result()
}

// LTrim trims a list to the range start..stop.
func (w RedisWrapper) LTrim(key string, start, stop int64) error {
	return w.rawClient.LTrim(context.Background(), key, start, stop).Err()
}

// RPopLPush moves the tail of source to the head of destination;
// ErrorNotFound when source is empty.
func (w RedisWrapper) RPopLPush(source, destination string) (string, error) {
	v, err := w.rawClient.LMove(context.Background(), source, destination, "RIGHT", "LEFT").Result()
	if errors.Is(err, redis.Nil) {
		return v, ErrorNotFound
	}
	return v, err
}

// RPop pops the tail of a list; redis.Nil when it is empty (as rmq's: only
// RPopLPush turns that into ErrorNotFound).
func (w RedisWrapper) RPop(key string) (string, error) {
	return w.rawClient.RPop(context.Background(), key).Result()
}

// SAdd adds value to a set.
func (w RedisWrapper) SAdd(key, value string) (int64, error) {
	return w.rawClient.SAdd(context.Background(), key, value).Result()
}

// SMembers lists a set.
func (w RedisWrapper) SMembers(key string) ([]string, error) {
	return w.rawClient.SMembers(context.Background(), key).Result()
}

// SRem removes value from a set.
func (w RedisWrapper) SRem(key, value string) (int64, error) {
	return w.rawClient.SRem(context.Background(), key, value).Result()
}

// FlushDb deletes every key of the database. Never use it on a Redis that
// holds anything but tests.
func (w RedisWrapper) FlushDb() error {
	return w.rawClient.FlushDB(context.Background()).Err()
}

// OpenConnectionWithRmqRedisClient opens a connection through an rmq
// RedisClient. redq needs Lua scripts, so the client must reach a real
// Redis: a RedisWrapper or a TestRedisClient; any other RedisClient gets
// an error that matches ErrorNotRedis. Otherwise it fails as Open does.
func OpenConnectionWithRmqRedisClient(tag string, redisClient RedisClient, errChan chan<- error, opts ...Option) (Connection, error) {
	switch c := redisClient.(type) {
	case RedisWrapper:
		return OpenConnectionWithRedisClient(tag, c.rawClient, errChan, opts...)
	case *RedisWrapper:
		return OpenConnectionWithRedisClient(tag, c.rawClient, errChan, opts...)
	case *TestRedisClient:
		return OpenConnectionWithRedisClient(tag, c.client, errChan, opts...)
	}
	return nil, errorf("%w: redq runs Lua scripts, which a %T cannot; pass a go-redis client to OpenConnectionWithRedisClient", ErrorNotRedis, redisClient)
}

// CollectStats reads the stats of queueList through mainConnection (rmq's
// function; it is Connection.CollectStats).
func CollectStats(queueList []string, mainConnection Connection) (Stats, error) {
	return mainConnection.CollectStats(queueList)
}

// NewStats returns empty stats, with no queues and no other connections,
// ready to be filled in (rmq's constructor; a test builds the Stats a
// stats handler or a check should see). It cannot fail. For example:
//
//	s := redq.NewStats()
//	s.QueueStats["jobs"] = redq.NewQueueStat(3, 0)
func NewStats() Stats {
	return Stats{QueueStats: QueueStats{}, OtherConnections: map[string]bool{}}
}

// NewQueueStat returns the stat of a queue with these ready and rejected
// counts and no connections (rmq's constructor). It cannot fail, and it
// takes the counts as given: negative counts are not checked. For example:
//
//	st := redq.NewQueueStat(10, 2) // 10 ready, 2 rejected
func NewQueueStat(readyCount, rejectedCount int64) QueueStat {
	return QueueStat{ReadyCount: readyCount, RejectedCount: rejectedCount, Connections: ConnectionStats{}}
}

// ActiveSign is the sign rmq's stats page shows for an active (✓) or an
// inactive (✗) connection.
func ActiveSign(active bool) string {
	if active {
		return "✓"
	}
	return "✗"
}

// randomLetters are the bytes of RandomString.
const randomLetters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// RandomString returns n random letters and digits (rmq's helper; not for
// secrets).
func RandomString(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = randomLetters[rand.IntN(len(randomLetters))]
	}
	return string(b)
}

// universal makes a go-redis Cmdable usable as the client of a connection.
// A UniversalClient (a client, a cluster, failover or ring client) is used
// as it is. Anything else gets what a Cmdable lacks stubbed: its idle waits
// can only end on whole seconds (no sub-second BLMOVE, no CLIENT UNBLOCK
// of a dedicated connection), so due deliveries may be up to a second late
// to an idle consumer.
func universal(c redis.Cmdable) redis.UniversalClient {
	if u, ok := c.(redis.UniversalClient); ok {
		return u
	}
	return cmdableClient{c}
}

// cmdableClient is a bare redis.Cmdable dressed as a UniversalClient.
type cmdableClient struct{ redis.Cmdable }

// errBareCmdable is what the stubbed methods of cmdableClient return.
var errBareCmdable = errors.New("redq: not supported on a bare redis.Cmdable")

func (cmdableClient) AddHook(redis.Hook) {}
func (cmdableClient) Watch(context.Context, func(*redis.Tx) error, ...string) error {
	return errBareCmdable
}
func (cmdableClient) Do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetErr(errBareCmdable)
	return cmd
}
func (cmdableClient) Process(context.Context, redis.Cmder) error { return errBareCmdable }
func (cmdableClient) AutoPipeline() (*redis.AutoPipeliner, error) {
	return nil, errBareCmdable
}
func (cmdableClient) AutoPipelineWithOptions(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error) {
	return nil, errBareCmdable
}
func (cmdableClient) AsyncAutoPipeline() (*redis.AutoPipeliner, error) {
	return nil, errBareCmdable
}
func (cmdableClient) AsyncAutoPipelineWithOptions(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error) {
	return nil, errBareCmdable
}
func (cmdableClient) Subscribe(context.Context, ...string) *redis.PubSub  { return nil }
func (cmdableClient) PSubscribe(context.Context, ...string) *redis.PubSub { return nil }
func (cmdableClient) SSubscribe(context.Context, ...string) *redis.PubSub { return nil }
func (cmdableClient) Close() error                                        { return nil }
func (cmdableClient) PoolStats() *redis.PoolStats                         { return &redis.PoolStats{} }
