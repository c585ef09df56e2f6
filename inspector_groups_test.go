package redq

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"
)

// byPayload returns the listed delivery with payload p.
func byPayload(t testing.TB, ds []DeliveryInfo, p string) DeliveryInfo {
	t.Helper()
	for _, d := range ds {
		if string(d.Payload) == p {
			return d
		}
	}
	t.Fatalf("%q is not listed (listed %q)", p, payloads(ds))
	return DeliveryInfo{}
}

// The Inspector lists pending grouped deliveries in ready (after the
// ready lists, with their group, paging without loss or repeats), finds
// them by id and deletes them from any place in their group's line,
// keeping the line and the ring right: the rest of the line is handed out
// in order, a line that empties leaves the ring.
func TestInspectorGroupedDeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ns := namespace()
		c := openT(t, b, "g", ns)
		q := openQueue(t, c, "ig")
		insp := newInspectorT(t, b, ns)
		if err := q.Publish("p1", "p2"); err != nil {
			t.Fatal(err)
		}
		putGroup(t, c, "ig", "a", "a1", "a2", "a3", "a4")
		putGroup(t, c, "ig", "b", "b1")

		var all []DeliveryInfo
		for _, limit := range []int{1, 2, 3, 100} {
			all = listAll(t, insp, "ig", ListOptions{State: StateReady, Limit: limit})
			got := payloads(all)
			if len(got) != 7 || got[0] != "p1" || got[1] != "p2" {
				t.Fatalf("limit %d: listed %q, want p1, p2 and then the 5 grouped", limit, got)
			}
			rest := append([]string(nil), got[2:]...)
			sort.Strings(rest)
			if strings.Join(rest, ",") != "a1,a2,a3,a4,b1" {
				t.Fatalf("limit %d: grouped listed %q", limit, rest)
			}
			for _, d := range all {
				want := ""
				if d.Payload[0] != 'p' {
					want = string(d.Payload[:1])
				}
				if d.Group != want || d.State != StateReady || d.Key != "" {
					t.Fatalf("limit %d: %q listed with group %q, state %s, key %q; want group %q", limit, d.Payload, d.Group, d.State, d.Key, want)
				}
			}
		}
		// a page fills from the ready lists into the groups (a hash scan's
		// window is shown whole)
		if p, err := insp.List(ctx, "ig", ListOptions{State: StateReady, Limit: 4}); err != nil || len(p.Items) < 4 || p.Total != 7 {
			t.Fatalf("a page of 4: %d items, total %d, %v; want 4 or more of 7", len(p.Items), p.Total, err)
		}
		if p, err := insp.List(ctx, "ig", ListOptions{State: StateReady, Search: "a3"}); err != nil || len(p.Items) != 1 || p.Items[0].Group != "a" {
			t.Fatalf("search a3: %+v, %v", p.Items, err)
		}
		a2 := byPayload(t, all, "a2")
		d, err := insp.Delivery(ctx, "ig", a2.ID)
		if err != nil || string(d.Payload) != "a2" || d.Group != "a" || d.State != StateReady {
			t.Fatalf("Delivery(a2): %+v, %v", d, err)
		}

		// from the middle of a's line, then its head; b's whole line
		for _, p := range []string{"a2", "a1", "b1", "p1"} {
			if err := insp.Delete(ctx, "ig", byPayload(t, all, p).ID); err != nil {
				t.Fatalf("delete %s: %v", p, err)
			}
		}
		if err := insp.Delete(ctx, "ig", a2.ID); !errors.Is(err, ErrorNotFound) {
			t.Fatalf("delete a2 again: %v, want ErrorNotFound", err)
		}
		if err := insp.Retry(ctx, "ig", byPayload(t, all, "a3").ID); err == nil {
			t.Fatal("retry of a pending grouped delivery: nil error")
		}
		cl := q.conn.client
		if v, err := cl.HGet(ctx, q.keys.gidx(), "a").Result(); err != nil || !strings.HasPrefix(v, "2,4,") {
			t.Fatalf("a's line: %q, %v; want head 2, tail 4", v, err)
		}
		if n, err := cl.HExists(ctx, q.keys.gidx(), "b").Result(); err != nil || n {
			t.Fatalf("b's emptied line is still indexed: %v, %v", n, err)
		}
		ring := q.keys.block[queueBlockLen-groupKeys+2]
		if gs, err := cl.LRange(ctx, ring, 0, -1).Result(); err != nil || strings.Join(gs, ",") != "a" {
			t.Fatalf("the ring: %q, %v; want a alone", gs, err)
		}
		wantCounts(t, c, "ig", 3, 0, 0)
		got := payloads(listAll(t, insp, "ig", ListOptions{State: StateReady}))
		if strings.Join(got, ",") != "p2,a3,a4" && strings.Join(got, ",") != "p2,a4,a3" {
			t.Fatalf("after the deletes listed %q, want p2, a3, a4", got)
		}

		// b comes back once; a hands out what is left, in order
		putGroup(t, c, "ig", "b", "b2")
		if gs, err := cl.LRange(ctx, ring, 0, -1).Result(); err != nil || len(gs) != 2 {
			t.Fatalf("the ring after b2: %q, %v; want a and b once each", gs, err)
		}
		var took []string
		for n := 0; n < 4; n++ {
			m := mustTake(t, q, time.Second)
			took = append(took, m.Payload())
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		var as []string
		for _, p := range took {
			if p[0] == 'a' {
				as = append(as, p)
			}
		}
		if strings.Join(as, ",") != "a3,a4" {
			t.Fatalf("took %q; want a3 before a4", took)
		}
		wantCounts(t, c, "ig", 0, 0, 0)
		groupsClean(t, q)
	})
}
