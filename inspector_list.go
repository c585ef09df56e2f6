package redq

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// listWindow is how many entries one read of a list, sorted set or hash
// scan asks for while searching or looking up an id.
const listWindow = 1000

// raw is one stored entry as a list read finds it.
type raw struct {
	env   string // the envelope (a keyed item's stub in ready and delayed)
	score int64  // delayed: the due time (Redis ms)
	conn  string // unacked: the connection holding it
	level int    // ready: the priority list it is in
	key   string // keyed: the key
	field string // ready, grouped: its field group\0seq in gitems
}

// listPos is where a listing stands: the cursor, decoded. For ready, level
// is the priority list (MaxPriority down to 0) and off the index from the
// list's tail (the next to be taken first), then level -1 for the pending
// grouped deliveries, with scan the HSCAN cursor of gitems; for delayed and rejected, off
// is the index (delayed by due time, rejected newest first); for unacked,
// conn is the connection and scan its HSCAN cursor; for keyed, scan is
// the HSCAN cursor of the pending items.
type listPos struct {
	level int
	off   int64
	conn  string
	scan  uint64
}

func encodeCursor(s DeliveryState, p listPos) string {
	return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("%s|%d|%d|%d|%s", s, p.level, p.off, p.scan, p.conn)))
}

func decodeCursor(s DeliveryState, c string) (listPos, error) {
	if c == "" {
		return listPos{level: MaxPriority}, nil
	}
	bad := argError("cursor", c, "is not a cursor of this listing (use Page.Next)")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return listPos{}, bad
	}
	f := strings.SplitN(string(b), "|", 5)
	if len(f) != 5 || f[0] != string(s) {
		return listPos{}, bad
	}
	var p listPos
	var e1, e2, e3 error
	p.level, e1 = strconv.Atoi(f[1])
	p.off, e2 = strconv.ParseInt(f[2], 10, 64)
	p.scan, e3 = strconv.ParseUint(f[3], 10, 64)
	p.conn = f[4]
	low := 0
	if s == StateReady {
		low = -1 // the pending grouped deliveries
	}
	if e1 != nil || e2 != nil || e3 != nil || p.level < low || p.level > MaxPriority || p.off < 0 {
		return listPos{}, bad
	}
	return p, nil
}

// reader reads one state of one queue window by window.
type reader struct {
	i     *Inspector
	k     queueKeys
	state DeliveryState
	conn  string   // unacked: only this connection ("": all)
	conns []string // unacked: the connections, sorted
	lens  []int64  // ready: the length of each priority list
	glen  int64    // ready: how many pending grouped deliveries
}

// open reads what a listing of the state needs up front and returns the
// total count.
func (r *reader) open(ctx context.Context) (int64, error) {
	c := r.i.client
	switch r.state {
	case StateReady:
		pipe := c.Pipeline()
		cmds := make([]*redis.IntCmd, MaxPriority+1)
		for p := 0; p <= MaxPriority; p++ {
			cmds[p] = pipe.LLen(ctx, r.readyKey(p))
		}
		glen := pipe.HLen(ctx, r.k.gitems())
		cnt := scripts.counts.EvalSha(ctx, pipe, r.k.block0())
		if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) {
			return 0, err
		}
		r.lens = make([]int64, MaxPriority+1)
		for p, cmd := range cmds {
			r.lens[p] = cmd.Val()
		}
		r.glen = glen.Val()
		n, err := countsOf(ctx, c, cnt, r.k)
		if err != nil {
			return 0, err
		}
		return n[0], nil
	case StateDelayed:
		return c.ZCard(ctx, r.k.block[2]).Result()
	case StateRejected:
		return c.LLen(ctx, r.k.rejected).Result()
	case StateKeyed:
		return c.HLen(ctx, r.k.block[9]).Result()
	}
	// unacked
	if r.conn != "" {
		r.conns = []string{r.conn}
	} else {
		names, err := c.HKeys(ctx, r.k.consumers).Result()
		if err != nil {
			return 0, err
		}
		sort.Strings(names)
		r.conns = names
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.IntCmd, len(r.conns))
	for n, conn := range r.conns {
		cmds[n] = pipe.HLen(ctx, r.k.unacked(conn))
	}
	var total int64
	if len(cmds) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
		for _, cmd := range cmds {
			total += cmd.Val()
		}
	}
	return total, nil
}

func (r *reader) readyKey(p int) string {
	if p == 0 {
		return r.k.ready
	}
	return r.k.level(strconv.Itoa(p))
}

// next reads up to n entries from p on; it returns them, the position
// after them and whether the state has no more entries.
func (r *reader) next(ctx context.Context, p listPos, n int) ([]raw, listPos, bool, error) {
	c := r.i.client
	switch r.state {
	case StateReady:
		for p.level >= 0 && p.off >= r.lens[p.level] {
			p.level, p.off = p.level-1, 0
		}
		if p.level < 0 {
			if r.glen == 0 {
				return nil, p, true, nil
			}
			return r.nextGrouped(ctx, p, n)
		}
		vals, err := c.LRange(ctx, r.readyKey(p.level), -(p.off + int64(n)), -(p.off + 1)).Result()
		if err != nil {
			return nil, p, false, err
		}
		out := make([]raw, 0, len(vals))
		for j := len(vals) - 1; j >= 0; j-- {
			out = append(out, raw{env: vals[j], level: p.level})
		}
		p.off += int64(len(vals))
		if len(vals) < n {
			// the list ended (or shrank): go on with the next level
			p.level, p.off, p.scan = p.level-1, 0, 0
		}
		return out, p, p.level < 0 && r.glen == 0, nil
	case StateDelayed:
		zs, err := c.ZRangeWithScores(ctx, r.k.block[2], p.off, p.off+int64(n)-1).Result()
		if err != nil {
			return nil, p, false, err
		}
		out := make([]raw, len(zs))
		for j, z := range zs {
			out[j] = raw{env: z.Member.(string), score: int64(z.Score)}
		}
		p.off += int64(len(zs))
		return out, p, len(zs) < n, nil
	case StateRejected:
		vals, err := c.LRange(ctx, r.k.rejected, p.off, p.off+int64(n)-1).Result()
		if err != nil {
			return nil, p, false, err
		}
		out := make([]raw, len(vals))
		for j, v := range vals {
			out[j] = raw{env: v}
		}
		p.off += int64(len(vals))
		return out, p, len(vals) < n, nil
	case StateKeyed:
		kv, cur, err := c.HScan(ctx, r.k.block[9], p.scan, "", int64(n)).Result()
		if err != nil {
			return nil, p, false, err
		}
		out := make([]raw, 0, len(kv)/2)
		for j := 0; j+1 < len(kv); j += 2 {
			if _, e, ok := parseKeyedRecord(kv[j+1]); ok {
				out = append(out, raw{env: e, key: kv[j]})
			}
		}
		p.scan = cur
		return out, p, cur == 0, nil
	}
	// unacked: connection by connection
	at := sort.SearchStrings(r.conns, p.conn)
	if p.conn == "" {
		at = 0
	}
	if at >= len(r.conns) {
		return nil, p, true, nil
	}
	conn := r.conns[at]
	if conn != p.conn {
		p.scan = 0 // the connection went away: the next one from its start
	}
	kv, cur, err := c.HScan(ctx, r.k.unacked(conn), p.scan, "", int64(n)).Result()
	if err != nil {
		return nil, p, false, err
	}
	out := make([]raw, 0, len(kv)/2)
	for j := 0; j+1 < len(kv); j += 2 {
		out = append(out, raw{env: kv[j+1], conn: conn})
	}
	if cur != 0 {
		p.conn, p.scan = conn, cur
		return out, p, false, nil
	}
	if at+1 < len(r.conns) {
		p.conn, p.scan = r.conns[at+1], 0
		return out, p, false, nil
	}
	return out, p, true, nil
}

// nextGrouped reads the pending grouped deliveries of a ready listing
// (level -1), a window of an HSCAN of gitems from p.scan on: they come
// after the ready lists, in no particular order.
func (r *reader) nextGrouped(ctx context.Context, p listPos, n int) ([]raw, listPos, bool, error) {
	kv, cur, err := r.i.client.HScan(ctx, r.k.gitems(), p.scan, "", int64(n)).Result()
	if err != nil {
		return nil, p, false, err
	}
	out := make([]raw, 0, len(kv)/2)
	for j := 0; j+1 < len(kv); j += 2 {
		out = append(out, raw{env: kv[j+1], level: -1, field: kv[j]})
	}
	p.scan = cur
	return out, p, cur == 0, nil
}

// parseKeyedRecord splits a pending record "ver,first,limit,updates,mode;"
// + envelope (see scripts/lib.lua) into its version and envelope.
func parseKeyedRecord(r string) (int64, string, bool) {
	semi := strings.IndexByte(r, ';')
	comma := strings.IndexByte(r, ',')
	if semi < 0 || comma < 0 || comma > semi {
		return 0, "", false
	}
	v, err := strconv.ParseInt(r[:comma], 10, 64)
	return v, r[semi+1:], err == nil
}

// wakeMarker is the element scripts push into an empty ready list to wake
// blocked consumers (MARKER in scripts/lib.lua); it is no delivery.
const wakeMarker = "\x00redq:wake"

// resolveStubs replaces keyed stubs (format 5) among es by the envelopes of
// the items they stand for, read in one round trip; stale stubs (their
// item moved on) become entries with no envelope, which are skipped.
func (r *reader) resolveStubs(ctx context.Context, es []raw) ([]raw, error) {
	var keys []string
	for _, e := range es {
		if _, key, ok := parseStub(e.env); ok {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return es, nil
	}
	recs, err := r.i.client.HMGet(ctx, r.k.block[9], keys...).Result()
	if err != nil {
		return nil, err
	}
	byKey := map[string]string{}
	for j, key := range keys {
		if s, ok := recs[j].(string); ok {
			byKey[key] = s
		}
	}
	for n, e := range es {
		ver, key, ok := parseStub(e.env)
		if !ok {
			continue
		}
		v, env, ok := parseKeyedRecord(byKey[key])
		if !ok || v != ver {
			env = "" // stale: its item moved on
		}
		es[n].env, es[n].key = env, key
	}
	return es, nil
}

// parseStub reads a keyed item's stub: 0x05, the priority digit, the
// version, ':' and the key.
func parseStub(s string) (int64, string, bool) {
	if len(s) < 4 || s[0] != 5 || s[1] < '0' || s[1] > '9' {
		return 0, "", false
	}
	colon := strings.IndexByte(s, ':')
	if colon < 3 {
		return 0, "", false
	}
	v, err := strconv.ParseInt(s[2:colon], 10, 64)
	return v, s[colon+1:], err == nil
}

// info decodes one entry.
func (r *reader) info(queue string, e raw, maxPayload int) DeliveryInfo {
	env, _ := decodeEnvelope(e.env)
	d := DeliveryInfo{
		ID: hex.EncodeToString([]byte(env.id)), Queue: queue, State: r.state, Connection: e.conn, Key: e.key, Group: env.group,
		PayloadSize: len(env.payload), Header: env.header, Attempts: env.attempts, Priority: env.priority,
		PublishedAt: publishedAt(env.id),
	}
	if e.key == "" {
		d.Key = env.key
	}
	if env.expireAt > 0 {
		d.ExpireAt = time.UnixMilli(env.expireAt)
	}
	switch {
	case r.state == StateDelayed:
		d.DueAt = time.UnixMilli(e.score)
	case env.key != "" && env.due > 0 && r.state != StateRejected && r.state != StateUnacked:
		d.DueAt = time.UnixMilli(env.due)
	}
	if r.state == StateReady && e.level >= 0 {
		d.Priority = e.level
	}
	if env.header != nil {
		d.Reason = env.header.Get(HeaderError)
	}
	p := env.payload
	if maxPayload >= 0 && len(p) > maxPayload {
		p, d.Truncated = p[:maxPayload], true
	}
	d.Payload = []byte(p)
	return d
}

// matches reports whether an entry passes a search: its payload contains
// it, or its id (hex) starts with it.
func matches(e raw, search string) bool {
	env, _ := decodeEnvelope(e.env)
	return strings.Contains(env.payload, search) || strings.HasPrefix(hex.EncodeToString([]byte(env.id)), strings.ToLower(search))
}

// List returns one page of a queue's deliveries in the state o.State:
// ready (highest priority first, each priority in the order consumers
// take them), delayed (by due time), rejected (the latest rejection
// first), unacked (connection by connection, in no particular order
// within one) or keyed (pending keyed items, in no particular order).
// Keyed items waiting in ready or delayed show as their item (with Key
// set). Pending grouped deliveries (see Group) come last in ready, with
// Group set and Priority 0, in no particular order (a hash scan: as for
// keyed and unacked, a page that reaches them shows a scan's window
// whole, so it may hold more than Limit entries). A page is read by index windows (LRANGE, ZRANGE) or a hash scan,
// so a page costs the same at any depth of a list of millions; entries
// that move between two pages may be skipped or shown twice. A search
// examines at most MaxSearchScan entries per call and says how many in
// Page.Scanned; Page.Next goes on from there. An unknown queue returns an
// error matching ErrorNotFound; bad options an *ArgumentError.
func (i *Inspector) List(ctx context.Context, queue string, o ListOptions) (Page, error) {
	if !o.State.valid() {
		return Page{}, argError("state", string(o.State), fmt.Sprintf("must be one of %v", DeliveryStates()))
	}
	if o.Limit < 0 || o.Limit > MaxListLimit {
		return Page{}, argError("limit", o.Limit, fmt.Sprintf("must be 0 (default %d) to %d", DefaultListLimit, MaxListLimit))
	}
	if o.MaxPayload < -1 {
		return Page{}, argError("max payload", o.MaxPayload, "must be -1 (whole), 0 (default 1024) or more")
	}
	if o.Connection != "" {
		if o.State != StateUnacked {
			return Page{}, argError("connection", o.Connection, "applies to the unacked state only")
		}
		if why := validName(o.Connection); why != "" {
			return Page{}, argError("connection", o.Connection, why)
		}
	}
	pos, err := decodeCursor(o.State, o.Cursor)
	if err != nil {
		return Page{}, err
	}
	if err := i.checkQueue(ctx, queue); err != nil {
		return Page{}, err
	}
	limit := o.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	maxPayload := o.MaxPayload
	if maxPayload == 0 {
		maxPayload = DefaultMaxPayload
	}
	r := &reader{i: i, k: newQueueKeys(i.opts.namespace, queue), state: o.State, conn: o.Connection}
	total, err := r.open(ctx)
	if err != nil {
		return Page{}, errorf("redq: list %s of %q: %w", o.State, queue, err)
	}
	page := Page{Total: total, Items: []DeliveryInfo{}}
	for {
		want := limit - len(page.Items)
		if o.Search != "" {
			want = min(listWindow, MaxSearchScan-page.Scanned)
		}
		es, next, done, err := r.next(ctx, pos, want)
		if err != nil {
			return Page{}, errorf("redq: list %s of %q: %w", o.State, queue, err)
		}
		page.Scanned += len(es)
		if es, err = r.resolveStubs(ctx, es); err != nil {
			return Page{}, errorf("redq: list %s of %q: %w", o.State, queue, err)
		}
		for n, e := range es {
			if e.env == "" || e.env == wakeMarker || (o.Search != "" && !matches(e, o.Search)) {
				continue
			}
			if len(page.Items) == limit {
				// the page filled within a search window: the next page
				// starts right after the last entry shown (a hash scan
				// cannot stop within a window: the page takes the rest)
				if at, ok := r.within(pos, n); ok {
					next, done = at, false
					page.Scanned -= len(es) - n
					break
				}
			}
			page.Items = append(page.Items, r.info(queue, e, maxPayload))
		}
		pos = next
		if done {
			return page, nil
		}
		if len(page.Items) >= limit || page.Scanned >= MaxSearchScan || (o.Search == "" && o.State != StateReady) {
			// (a page of ready goes on into the next priority, and the
			// grouped deliveries, until it is full)
			page.Next = encodeCursor(o.State, pos)
			return page, nil
		}
	}
}

// within returns the position of the n-th entry of the window that next
// read from p, for the states read by index; false for hash scans.
func (r *reader) within(p listPos, n int) (listPos, bool) {
	switch r.state {
	case StateReady:
		for p.level >= 0 && p.off >= r.lens[p.level] {
			p.level, p.off = p.level-1, 0
		}
		if p.level < 0 {
			return p, false // the grouped ones: a hash scan
		}
		p.off += int64(n)
		return p, true
	case StateDelayed, StateRejected:
		p.off += int64(n)
		return p, true
	}
	return p, false
}

// errInspect wraps an Inspector error with what was asked.
func errInspect(what, queue string, err error) error {
	return errorf("redq: %s in %q: %w", what, queue, err)
}

// parseID reads a delivery id as Delivery.ID prints it (32 hex digits).
func parseID(id string) (string, error) {
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != idLen {
		return "", argError("id", id, "must be 32 hex digits, as Delivery.ID returns")
	}
	return string(b), nil
}

// found is where a lookup by id found a delivery.
type found struct {
	state DeliveryState
	e     raw
}

// find looks a delivery up by id (bytes) in every state, window by window.
func (i *Inspector) find(ctx context.Context, queue, id string) (found, *reader, error) {
	k := newQueueKeys(i.opts.namespace, queue)
	for _, s := range []DeliveryState{StateRejected, StateDelayed, StateReady, StateKeyed, StateUnacked} {
		r := &reader{i: i, k: k, state: s}
		if _, err := r.open(ctx); err != nil {
			return found{}, nil, err
		}
		pos, _ := decodeCursor(s, "")
		for {
			if err := ctx.Err(); err != nil {
				return found{}, nil, err
			}
			es, next, done, err := r.next(ctx, pos, listWindow)
			if err != nil {
				return found{}, nil, err
			}
			for _, e := range es {
				if len(e.env) >= envFixedLen && e.env[0] != 5 && e.env[1:envFixedLen] == id {
					return found{state: s, e: e}, r, nil
				}
			}
			pos = next
			if done {
				break
			}
		}
	}
	return found{}, nil, errorf("%w: no delivery %x in queue %q (it may have been acked or deleted)", ErrorNotFound, id, queue)
}

// Delivery returns the delivery with that id (hex, as Delivery.ID), with
// its whole payload, wherever it is; an error matching ErrorNotFound when
// the queue has none. It reads the states window by window (a lookup deep
// in a list of millions takes a round trip per thousand entries).
func (i *Inspector) Delivery(ctx context.Context, queue, id string) (DeliveryInfo, error) {
	raw, err := parseID(id)
	if err != nil {
		return DeliveryInfo{}, err
	}
	if err := i.checkQueue(ctx, queue); err != nil {
		return DeliveryInfo{}, err
	}
	f, r, err := i.find(ctx, queue, raw)
	if err != nil {
		return DeliveryInfo{}, errInspect("delivery "+id, queue, err)
	}
	d := r.info(queue, f.e, -1)
	if f.state == StateKeyed {
		// a keyed item: say where its stub waits
		d.State = StateKeyed
	}
	return d, nil
}

// Payload returns the whole payload of the delivery with that id (for a
// download); errors as Delivery.
func (i *Inspector) Payload(ctx context.Context, queue, id string) ([]byte, error) {
	d, err := i.Delivery(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	return d.Payload, nil
}
