package redq

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// keyCheckPrelude goes in front of every script while the tests run (see
// useKeyCheck): it shadows redis.call and redis.pcall with versions that
// raise an error when a command names a key that is not in KEYS, or is a
// command this table does not know. Redis Cluster routes a script by its
// declared keys only, so a script that touches any other key works on one
// node and fails during a resharding.
const keyCheckPrelude = `local redis = (function(r)
  local declared = {}
  for _, k in ipairs(KEYS) do
    declared[k] = true
  end
  -- command -> 'all' (every argument is a key), 1 (the first one is) or
  -- 0 (none is)
  local spec = {
    DEL = 'all', EXISTS = 'all', TIME = 0, TYPE = 1,
    GET = 1, SET = 1, INCR = 1, PEXPIRE = 1,
    HDEL = 1, HEXISTS = 1, HGET = 1, HINCRBY = 1, HLEN = 1, HMGET = 1, HSCAN = 1, HSET = 1,
    HGETALL = 1, HVALS = 1, LINDEX = 1, LLEN = 1, LPOP = 1, LPUSH = 1, LRANGE = 1, LREM = 1, LTRIM = 1, RPOP = 1,
    RPUSH = 1, SADD = 1, SISMEMBER = 1, SREM = 1, ZADD = 1, ZCARD = 1, ZCOUNT = 1, ZRANGE = 1,
    ZRANGEBYSCORE = 1, ZREM = 1, ZREMRANGEBYRANK = 1, ZREMRANGEBYSCORE = 1, ZREVRANGE = 1,
    ZSCORE = 1,
  }
  local function refuse(cmd, k)
    if not declared[k] then
      error('keycheck: ' .. cmd .. ' on undeclared key ' .. tostring(k))
    end
  end
  -- Only the first argument is passed on to the check: miniredis's Lua
  -- has a small stack, and a call with a thousand arguments copied once
  -- more would overflow it.
  local function check(cmd, a1)
    cmd = string.upper(cmd)
    local s = spec[cmd]
    if s == nil then
      error('keycheck: command ' .. cmd .. ' is not in the key table')
    end
    if s ~= 0 then
      refuse(cmd, a1)
    end
    return s == 'all'
  end
  local function wrap(f)
    return function(cmd, a1, ...)
      if check(cmd, a1) then
        for _, k in ipairs({...}) do
          refuse(cmd, k)
        end
      end
      if a1 == nil then
        return f(cmd)
      end
      return f(cmd, a1, ...)
    end
  end
  return setmetatable({call = wrap(r.call), pcall = wrap(r.pcall)}, {__index = r})
end)(redis)
`

// useKeyCheck puts the key checker in front of every script for the whole
// test binary (TestMain), unless benchmarks run (they measure the scripts
// as shipped) or REDQ_KEYCHECK=0.
func useKeyCheck() {
	if os.Getenv("REDQ_KEYCHECK") == "0" {
		return
	}
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		return
	}
	testPrelude = keyCheckPrelude
	scripts = newScriptSet(testPrelude)
}

// testPrelude is the prelude the scripts of this test binary carry ("" or
// keyCheckPrelude), for tests that recognise a script by its text.
var testPrelude string

// The checker refuses what it must: a script that touches a key it was not
// given fails, on miniredis and on a real Redis, and one that touches only
// its keys runs. (Without this, the tests that run under the checker would
// prove nothing.)
func TestKeyCheckRefusesUndeclaredKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ok := redis.NewScript(keyCheckPrelude + `redis.call('SET', KEYS[1], 'x') return redis.call('GET', KEYS[1])`)
		if v, err := ok.Run(ctx, b.client, []string{"{kc}:a"}).Text(); err != nil || v != "x" {
			t.Fatalf("declared key: %q, %v", v, err)
		}
		for name, src := range map[string]string{
			"derived":       `redis.call('SET', KEYS[1] .. ':b', 'x') return 1`,
			"multi-key DEL": `redis.call('DEL', KEYS[1], '{kc}:c') return 1`,
			"unknown":       `redis.call('SUNIONSTORE', KEYS[1], KEYS[1]) return 1`,
			"pcall":         `local r = redis.pcall('GET', '{kc}:d') return 1`,
		} {
			bad := redis.NewScript(keyCheckPrelude + src)
			err := bad.Run(ctx, b.client, []string{"{kc}:a"}).Err()
			if err == nil || !strings.Contains(err.Error(), "keycheck") {
				t.Errorf("%s: got %v, want a keycheck error", name, err)
			}
		}
		if b.mini != nil {
			if b.mini.Exists("{kc}:a:b") || b.mini.Exists("{kc}:c") {
				t.Fatal("an undeclared key was written")
			}
		}
	})
}

// The queue scripts as they were before every key was declared (a prefix
// in ARGV, keys built in Lua) fail under the checker: a publish with a
// priority built its ready list's name from the prefix.
func TestKeyCheckCatchesPrefixDerivedKeys(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	old := redis.NewScript(keyCheckPrelude + `local P = ARGV[1]
redis.call('LPUSH', P .. ':ready:' .. ARGV[2], 'e')
redis.call('ZADD', P .. ':levels', ARGV[2], ARGV[2])
return 1`)
	err := old.Run(context.Background(), c, []string{"ns:{q}:ready"}, "ns:{q}", 3).Err()
	if err == nil || !strings.Contains(err.Error(), "undeclared key ns:{q}:ready:3") {
		t.Fatalf("got %v, want the derived level list refused", err)
	}
}

// Every script in the set runs under the checker in this test binary.
func TestKeyCheckIsOn(t *testing.T) {
	if os.Getenv("REDQ_KEYCHECK") == "0" {
		t.Skip("REDQ_KEYCHECK=0")
	}
	checked := newScriptSet(keyCheckPrelude)
	for _, p := range [][2]*redis.Script{{scripts.fetch, checked.fetch}, {scripts.settle, checked.settle}, {scripts.ack, checked.ack}, {scripts.fireAck, checked.fireAck},
		{scripts.maintain, checked.maintain}, {scripts.register, checked.register},
		{scripts.roundNext, checked.roundNext}, {scripts.migrateRmq, checked.migrateRmq}} {
		if p[0].Hash() != p[1].Hash() {
			t.Fatal("the scripts run without the key checker")
		}
	}
}
