package dashboard

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redq/redq"
)

// A pending grouped delivery shows on the queue's ready tab and on its own
// page with its group, and can be deleted from there.
func TestGroupedOnRedis(t *testing.T) {
	onBackends(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		conn, err := redq.Open(ctx, "grouper", be.client, nil, redq.WithNamespace("dash"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { <-conn.StopAllConsuming() })
		q, err := conn.OpenQueue("mail")
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Put(ctx, []byte("for tenant 42"), redq.Group("tenant-42")); err != nil {
			t.Fatal(err)
		}
		p, err := be.insp.List(ctx, "mail", redq.ListOptions{State: redq.StateReady})
		if err != nil || len(p.Items) != 1 {
			t.Fatalf("list: %+v, %v", p, err)
		}
		id := p.Items[0].ID
		h := mustHandler(t, be.insp, Options{EnableActions: true})
		b := newBrowser(t, h, "")
		_, body := b.get("/queues/mail")
		row := regexp.MustCompile(`(?s)<tr data-id="` + id + `">.*?</tr>`).FindString(body)
		if !strings.Contains(row, `data-field="group"`) || !strings.Contains(row, "group tenant-42") {
			t.Fatalf("the ready row does not show the group\n%s", body)
		}
		if got := rowActions(t, body, id); !slices.Equal(got, []string{"delete"}) {
			t.Errorf("actions %v, want delete", got)
		}
		if code, body := b.get("/queues/mail/deliveries/" + id); code != http.StatusOK || !strings.Contains(body, `data-field="group">tenant-42<`) {
			t.Errorf("the delivery's page: %d, no group\n%s", code, body)
		}
	})
}
