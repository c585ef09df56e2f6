package redq

import "strings"

// rmq v5's layout in Redis, as MigrateFromRmq reads it. rmq keeps:
//
//	rmq::queues                                   set of queue names
//	rmq::connections                              set of connection names
//	rmq::connection::<conn>::heartbeat            string with a TTL (a minute),
//	                                              refreshed every second while
//	                                              the connection lives
//	rmq::connection::<conn>::queues               set of the queues it consumes
//	rmq::connection::<conn>::queue::[<q>]::consumers  set of its consumers
//	rmq::connection::<conn>::queue::[<q>]::unacked    list of what it took
//	rmq::queue::[<q>]::ready                      list: LPUSH to publish, the
//	                                              oldest at the right, taken
//	                                              with RPOPLPUSH into unacked
//	rmq::queue::[<q>]::rejected                   list: LPUSH to reject
//
// A program that opened its connection with rmq's OpenClusterConnection
// writes {<q>} instead of [<q>], so that every key of a queue carries the
// queue's hash tag: the same tag as redq's keys of the queue, ns:{<q>}:...,
// so each rmq key of a queue shares a Redis Cluster slot with redq's. The
// global keys and the heartbeats carry no tag in either layout.
//
// A payload that rmq published with a header (PayloadWithHeader) starts with
// rmqHeaderSignature (header.go), then the header as JSON, a newline and the payload.
const (
	rmqQueuesKey      = "rmq::queues"
	rmqConnectionsKey = "rmq::connections"
)

// rmqLayout is one of rmq's two key layouts.
type rmqLayout struct{ tagged bool }

var rmqLayouts = [2]rmqLayout{{tagged: false}, {tagged: true}}

func (l rmqLayout) String() string {
	if l.tagged {
		return "hash tags"
	}
	return "plain"
}

func (l rmqLayout) queue(q string) string {
	if l.tagged {
		return "{" + q + "}"
	}
	return "[" + q + "]"
}

func (l rmqLayout) ready(q string) string    { return "rmq::queue::" + l.queue(q) + "::ready" }
func (l rmqLayout) rejected(q string) string { return "rmq::queue::" + l.queue(q) + "::rejected" }
func (l rmqLayout) unacked(conn, q string) string {
	return "rmq::connection::" + conn + "::queue::" + l.queue(q) + "::unacked"
}

func rmqHeartbeatKey(conn string) string  { return "rmq::connection::" + conn + "::heartbeat" }
func rmqConnQueuesKey(conn string) string { return "rmq::connection::" + conn + "::queues" }

// keySlot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash tag
// (what is between the first { and the next }, if that is not empty) or of
// the whole key, modulo 16384. A script may only touch keys of one slot.
func keySlot(key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
