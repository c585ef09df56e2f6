package redqprom_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redq/redq/redqprom"
)

// The Grafana dashboard in docs/ is valid JSON and every metric its
// queries name is one that the Collector or the Observer reports.
func TestGrafanaDashboardNamesRealMetrics(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-redq.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-redq.json: %v", err)
	}
	known := map[string]bool{}
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		redqprom.NewCollector(&fakeSource{}).Describe(ch)
		redqprom.NewObserver().Describe(ch)
		close(ch)
	}()
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		known[name.FindStringSubmatch(d.String())[1]] = true
	}
	used := regexp.MustCompile(`redq_[a-z_]+`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range used.FindAllString(tg.Expr, -1) {
				n++
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
				if !known[base] {
					t.Errorf("panel %q queries %s, which nothing reports", p.Title, m)
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d metric references in the dashboard", n)
	}
}
