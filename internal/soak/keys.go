package soak

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// soakKey is one key left in Redis at the end of a soak, judged by the
// layout in keys.go.
type soakKey struct {
	name       string
	typ        string
	ttl        time.Duration // < 0: none
	size       int64         // elements (or bytes of a string)
	role       string        // what the key is
	deliveries int           // deliveries it holds
	bad        string        // why it fails the check; "" when it may stay
}

// wakeMarker is the element the scripts push into an empty ready list to
// wake blocked consumers (see scripts/lib.lua); it is not a delivery.
const wakeMarker = "\x00redq:wake"

// Kinds of key, by what may stay after a run.
const (
	keyDeliveries = iota // holds deliveries or references to them: must be gone
	keyRecord            // records of calls and takes: must expire
	keySmall             // a counter or a registration: may stay
)

var digits = regexp.MustCompile(`^[0-9]+$`)

// classifyKey says what a key of namespace ns and one of the queues is
// and how it may be left behind.
func classifyKey(name, ns string, queues []string) (role string, kind int) {
	g := "{" + ns + "}:"
	p := ns + ":{" + queues[0] + "}:"
	for _, q := range queues[1:] {
		if strings.HasPrefix(name, ns+":{"+q+"}:") {
			p = ns + ":{" + q + "}:"
		}
	}
	switch {
	case name == g+"queues":
		return "set of queues", keySmall
	case name == g+"connections":
		return "set of connections", keySmall
	case strings.HasPrefix(name, g+"hb:"):
		return "heartbeat", keyRecord
	case strings.HasPrefix(name, g+"stopped:"):
		return "marker of a connection that stopped cleanly", keyRecord
	case name == g+"timers", name == g+"rounds":
		return "set of timer sets or rounds", keySmall
	case !strings.HasPrefix(name, p):
		return "unknown key", keyRecord
	}
	rest := strings.TrimPrefix(name, p)
	head, _, _ := strings.Cut(rest, ":")
	switch {
	case rest == "ready":
		return "ready list", keyDeliveries
	case strings.HasPrefix(rest, "ready:") && digits.MatchString(strings.TrimPrefix(rest, "ready:")):
		return "ready list of a priority", keyDeliveries
	case rest == "delayed":
		return "delayed set", keyDeliveries
	case rest == "rejected":
		return "rejected list", keyDeliveries
	case rest == "leases":
		return "leases", keyDeliveries
	case rest == "levels":
		return "priorities in use", keyDeliveries
	case head == "unacked":
		return "unacked deliveries of a connection", keyDeliveries
	case rest == "fence":
		return "fence counter", keySmall
	case rest == "seq":
		return "id counter of foreign items", keySmall
	case rest == "meta":
		return "queue settings and expired count", keySmall
	case rest == "pub":
		return "publish counts not yet folded into meta", keySmall
	case rest == "consumers":
		return "connections registered for the queue", keySmall
	case head == "replies":
		return "replies of a connection's calls", keyRecord
	case head == "published":
		return "publish records of a connection", keyRecord
	case head == "done":
		return "receipts of a connection's releases", keyRecord
	case head == "lost":
		return "lost leases of a connection", keyRecord
	case rest == "kpend", rest == "kpark":
		return "pending keyed items", keyDeliveries
	case rest == "krun":
		return "running keyed items", keyDeliveries
	case rest == "kver":
		return "keyed stub version counter", keySmall
	}
	return "unknown key of the queue", keyRecord
}

// scanSoakKeys lists every key of the (private) Redis, of every master of
// a cluster, judges each and returns the payload numbers still held in
// delivery keys.
func scanSoakKeys(ctx context.Context, client redis.UniversalClient, ns string, queues []string) ([]soakKey, map[uint32]int, error) {
	var names []string
	var mu sync.Mutex
	scan := func(ctx context.Context, node redis.Cmdable) error {
		var cursor uint64
		for {
			batch, next, err := node.Scan(ctx, cursor, "*", 1000).Result()
			if err != nil {
				return fmt.Errorf("scan keys: %w", err)
			}
			mu.Lock()
			names = append(names, batch...)
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, client)
	}
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	leftover := map[uint32]int{}
	var keys []soakKey
	for _, name := range names {
		k := soakKey{name: name}
		var err error
		if k.typ, err = client.Type(ctx, name).Result(); err != nil {
			return nil, nil, fmt.Errorf("type of %q: %w", name, err)
		}
		if k.typ == "none" {
			continue // it expired since the scan
		}
		if k.ttl, err = client.PTTL(ctx, name).Result(); err != nil {
			return nil, nil, fmt.Errorf("ttl of %q: %w", name, err)
		}
		role, kind := classifyKey(name, ns, queues)
		k.role = role
		envs, size, err := keyContents(ctx, client, name, k.typ, kind == keyDeliveries)
		if err != nil {
			return nil, nil, err
		}
		k.size = size
		for _, e := range envs {
			if e == wakeMarker {
				continue
			}
			k.deliveries++
			if pl, ok := envelopePayload(e); ok {
				if n, err := strconv.ParseUint(pl, 10, 32); err == nil {
					leftover[uint32(n)]++
				}
			}
		}
		switch kind {
		case keyDeliveries:
			switch {
			case k.deliveries > 0:
				k.bad = fmt.Sprintf("holds %d deliveries", k.deliveries)
			case role == "leases" || role == "priorities in use":
				k.bad = "refers to deliveries that are gone"
			case k.ttl < 0:
				k.bad = "left behind without deliveries and without a TTL"
			}
		case keyRecord:
			if k.ttl < 0 {
				k.bad = "has no TTL"
			}
		}
		keys = append(keys, k)
	}
	return keys, leftover, nil
}

// keyContents returns the elements of a key that may hold envelopes (when
// withEnvelopes) and its size.
func keyContents(ctx context.Context, client redis.UniversalClient, name, typ string, withEnvelopes bool) ([]string, int64, error) {
	const chunk = 1000
	var envs []string
	var size int64
	var err error
	switch typ {
	case "list":
		if size, err = client.LLen(ctx, name).Result(); err == nil && withEnvelopes {
			for start := int64(0); start < size && err == nil; start += chunk {
				var part []string
				part, err = client.LRange(ctx, name, start, start+chunk-1).Result()
				envs = append(envs, part...)
			}
		}
	case "hash":
		if size, err = client.HLen(ctx, name).Result(); err == nil && withEnvelopes {
			envs, err = client.HVals(ctx, name).Result()
		}
	case "zset":
		if size, err = client.ZCard(ctx, name).Result(); err == nil && withEnvelopes && !strings.HasSuffix(name, ":leases") && !strings.HasSuffix(name, ":levels") {
			envs, err = client.ZRange(ctx, name, 0, -1).Result()
		}
	case "set":
		size, err = client.SCard(ctx, name).Result()
	case "string":
		size, err = client.StrLen(ctx, name).Result()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read %q: %w", name, err)
	}
	return envs, size, nil
}

// envelopePayload returns the payload of a stored delivery (the envelope
// format of envelope.go: a format byte, a 16-byte id, then the payload, or
// for format 3 "attempts,priority,ttr,ttl,expireAt,headerLen;", the
// headers and the payload).
func envelopePayload(e string) (string, bool) {
	const fixed = 17
	if len(e) < fixed {
		return "", false
	}
	switch e[0] {
	case 1:
		return e[fixed:], true
	case 3:
		rest := e[fixed:]
		semi := strings.IndexByte(rest, ';')
		if semi < 0 {
			return "", false
		}
		fields := strings.Split(rest[:semi], ",")
		if len(fields) != 6 {
			return "", false
		}
		h, err := strconv.Atoi(fields[5])
		if err != nil || h < 0 || semi+1+h > len(rest) {
			return "", false
		}
		return rest[semi+1+h:], true
	}
	return "", false
}

// keysCheck judges the keys left in Redis.
func keysCheck(keys []soakKey) soakCheck {
	var bad exampleSet
	var list []string
	for _, k := range keys {
		ttl := "no TTL"
		if k.ttl >= 0 {
			ttl = "TTL " + k.ttl.Round(time.Second).String()
		}
		line := fmt.Sprintf("%s (%s, %s, size %d, %s)", k.name, k.role, k.typ, k.size, ttl)
		if k.bad != "" {
			line += ": " + k.bad
			bad.add("%s", line)
		}
		list = append(list, line)
	}
	return soakCheck{
		name:     "nothing left in Redis but counters, registrations and records that expire",
		ok:       bad.count == 0,
		detail:   fmt.Sprintf("%d keys left, %d of them wrongly", len(keys), bad.count),
		examples: list,
		always:   true,
	}
}
