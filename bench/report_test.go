package main

import (
	"bytes"
	"encoding/json"
	"image"
	_ "image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// syntheticReport builds a report with three workloads, metrics of both
// directions, three systems, five repetitions and one failed sample.
func syntheticReport() *report {
	r := &report{
		Machine: machine{
			Date: time.Date(2025, 11, 22, 10, 30, 0, 0, time.UTC), Command: "cd bench && go run . -n 1000",
			CPUs: 8, CPUModel: "Test CPU 3000", OS: "linux", Arch: "amd64", GoVersion: "go1.26.8",
			RedisVersion: "7.2.4", RedisAddr: "127.0.0.1:4242", PrivateRedis: true,
			N: 1000, Reps: 5, PayloadSize: 100,
		},
		Systems: []string{"redq", "asynq", "streams"},
	}
	add := func(workload, metric, unit string, better Direction, system string, values ...float64) {
		for i, v := range values {
			r.Samples = append(r.Samples, sample{Workload: workload, Metric: metric, Unit: unit, Better: better,
				System: system, Rep: i + 1, Value: v})
		}
	}
	const e2e, idle, rec = "e2e/10-consumers", "idle/pickup", "recovery/cleaner"
	// Interleaved by repetition, as the harness records them.
	add(e2e, "rate", "deliveries/s", higherIsBetter, "redq", 50000, 51000, 52000, 53000, 54000)
	add(e2e, "rate", "deliveries/s", higherIsBetter, "asynq", 10000, 10000, 10000, 10000, 10000)
	add(e2e, "rate", "deliveries/s", higherIsBetter, "streams", 100000, 102000, 104000, 106000, 108000)
	add(idle, "p50 latency", "µs", lowerIsBetter, "redq", 300, 310, 320, 330, 340)
	add(idle, "p50 latency", "µs", lowerIsBetter, "asynq", 600000, 620000, 640000, 660000, 680000)
	add(idle, "p50 latency", "µs", lowerIsBetter, "streams", 150, 155, 160, 165, 170)
	add(rec, "time", "s", lowerIsBetter, "redq", 1.0, 1.1, 1.2, 1.3, 1.4)
	add(rec, "time", "s", lowerIsBetter, "streams", 1.02, 1.12, 1.22, 1.32, 1.42)
	// streams fails the third recovery run.
	for i := range r.Samples {
		s := &r.Samples[i]
		if s.Workload == rec && s.System == "streams" && s.Rep == 3 {
			s.Value, s.Error = 0, "tally: 17 of 1000 deliveries missing\nmore detail"
		}
	}
	return r
}

// lineFor returns the first line of out after the one containing after
// whose fields include system.
func lineFor(t *testing.T, out, after, system string) string {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.Contains(l, after) {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("no line contains %q in\n%s", after, out)
	}
	for _, l := range lines[start:] {
		for _, f := range strings.Fields(l) {
			if f == system {
				return l
			}
		}
	}
	t.Fatalf("no %s line after %q in\n%s", system, after, out)
	return ""
}

func TestPrintTable(t *testing.T) {
	var buf bytes.Buffer
	printTable(&buf, syntheticReport())
	out := buf.String()
	t.Log("\n" + out)

	for _, want := range []string{
		"2025-11-22 10:30 UTC", "8 CPUs (Test CPU 3000)", "linux/amd64", "go1.26.8",
		"Redis 7.2.4 at 127.0.0.1:4242 (private)", "n=1000, 5 reps, 100 B payloads", "cd bench && go run . -n 1000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("header lacks %q", want)
		}
	}

	cases := []struct {
		after, system string
		want          []string
		not           []string
	}{
		{"e2e/10-consumers", "redq", []string{"52.0k", "50.0k", "54.0k"}, []string{"×", "better", "worse"}},
		{"e2e/10-consumers", "asynq", []string{"10.0k", "5.2× [5.0 5.1 5.2 5.3 5.4]", "redq better"}, nil},
		{"e2e/10-consumers", "streams", []string{"104k", "100k", "108k", "0.50× [0.50 0.50 0.50 0.50 0.50]", "redq worse"}, nil},
		{"idle/pickup", "redq", []string{"320µs", "300µs", "340µs"}, nil},
		{"idle/pickup", "asynq", []string{"640ms", "600ms", "680ms", "0.00050×", "redq better"}, nil},
		{"idle/pickup", "streams", []string{"160µs", "2.0× [2.0 2.0 2.0 2.0 2.0]", "redq worse"}, nil},
		{"recovery/cleaner", "redq", []string{"1.20s", "1.00s", "1.40s"}, nil},
		{"recovery/cleaner", "streams", []string{"0.98× [0.98 0.98 0.98 0.99]", "even", "FAILED (1 of 5 reps): tally: 17 of 1000 deliveries missing"}, []string{"more detail"}},
	}
	for _, c := range cases {
		l := lineFor(t, out, c.after, c.system)
		for _, w := range c.want {
			if !strings.Contains(l, w) {
				t.Errorf("%s %s line lacks %q: %s", c.after, c.system, w, l)
			}
		}
		for _, w := range c.not {
			if strings.Contains(l, w) {
				t.Errorf("%s %s line has %q: %s", c.after, c.system, w, l)
			}
		}
	}
	// asynq has no recovery samples: no line for it in that group.
	recovery := out[strings.Index(out, "recovery/cleaner"):]
	if strings.Contains(recovery, "asynq") {
		t.Errorf("recovery group shows asynq:\n%s", recovery)
	}
}

func TestPrintMarkdown(t *testing.T) {
	var buf bytes.Buffer
	printMarkdown(&buf, syntheticReport())
	out := buf.String()
	t.Log("\n" + out)

	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| workload ") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 8 { // 3 + 3 + 2 system lines
		t.Fatalf("got %d table rows, want 8:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if n := strings.Count(r, " | ") + 2; n != 8 { // 7 cells
			t.Errorf("row has %d separators, want 8: %s", n, r)
		}
	}
	for _, want := range []string{
		"8 CPUs (Test CPU 3000)", "Redis 7.2.4 at 127.0.0.1:4242 (private)", "`cd bench && go run . -n 1000`",
		"| e2e/10-consumers | rate (deliveries/s) | redq | 52.0k | 50.0k–54.0k |",
		"| asynq | 10.0k | 10.0k–10.0k | 5.2× [5.0 5.1 5.2 5.3 5.4] | redq better |",
		"even; FAILED (1 of 5 reps)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results")
	want := syntheticReport()
	if err := writeJSON(dir, want); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got report
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("round trip differs:\ngot  %+v\nwant %+v", got, *want)
	}
	if !bytes.Contains(b, []byte("\n  \"machine\"")) {
		t.Errorf("results.json is not indented")
	}
}

func TestWriteJSONInvalidValue(t *testing.T) {
	dir := t.TempDir()
	r := syntheticReport()
	r.Samples[0].Value = math.Inf(1)
	if err := writeJSON(dir, r); err != nil {
		t.Fatal(err)
	}
	if !math.IsInf(r.Samples[0].Value, 1) {
		t.Errorf("writeJSON modified the report")
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got report
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Samples[0].Error == "" {
		t.Errorf("infinite value not written as a failure: %+v", got.Samples[0])
	}
}

func TestWriteChart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	r := syntheticReport()
	if err := writeChart(dir, r); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "chart.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg, []byte("<?xml")) && !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("chart.svg starts with %q", svg[:min(len(svg), 20)])
	}
	f, err := os.Open(filepath.Join(dir, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, format, err := image.Decode(f)
	if err != nil {
		t.Fatalf("decode chart.png: %v", err)
	}
	if format != "png" || img.Bounds().Dx() < 100 || img.Bounds().Dy() < 100 {
		t.Errorf("chart.png: format %s, size %v", format, img.Bounds())
	}

	bars := chartBars(r)
	if len(bars) != 5 {
		t.Fatalf("got %d bars, want 5: %+v", len(bars), bars)
	}
	if b := bars[0]; b.label != "e2e/10-consumers rate vs asynq" || math.Abs(b.value-5.2) > 1e-9 {
		t.Errorf("first bar %+v", b)
	}
	// Lower is better: the bar is peer/redq, so redq's faster pickup is > 1.
	if b := bars[2]; b.label != "idle/pickup p50 latency vs asynq" || math.Abs(b.value-2000) > 1e-9 {
		t.Errorf("third bar %+v", b)
	}
}

func TestWriteChartNoRatios(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	r := syntheticReport()
	r.Systems = []string{"redq"}
	var only []sample
	for _, s := range r.Samples {
		if s.System == "redq" {
			only = append(only, s)
		}
	}
	r.Samples = only
	if err := writeChart(dir, r); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("writeChart wrote something without ratios: %v", err)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Errorf("median(nil) is not NaN")
	}
	in := []float64{3, 1, 2}
	median(in)
	if !reflect.DeepEqual(in, []float64{3, 1, 2}) {
		t.Errorf("median sorted its input: %v", in)
	}
}

func TestRepRatios(t *testing.T) {
	mk := func(sys string, vals ...float64) []sample {
		var ss []sample
		for i, v := range vals {
			ss = append(ss, sample{System: sys, Rep: i + 1, Value: v})
		}
		return ss
	}
	ref := mk("redq", 10, 20, 30, 40)
	peer := mk("asynq", 5, 10, 0, 20)
	ref[1].Error = "boom" // rep 2: redq failed
	// Out of order, as a peer's samples may be stored.
	peer[0], peer[3] = peer[3], peer[0]
	got := repRatios(ref, peer)
	// Rep 2 has no redq value, rep 3 a zero peer value.
	if want := []float64{2, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("repRatios = %v, want %v", got, want)
	}
	if adv := advantages([]float64{2, 0.5}, lowerIsBetter); !reflect.DeepEqual(adv, []float64{0.5, 2}) {
		t.Errorf("advantages lower-better = %v", adv)
	}
	if adv := advantages([]float64{2, 0.5}, higherIsBetter); !reflect.DeepEqual(adv, []float64{2, 0.5}) {
		t.Errorf("advantages higher-better = %v", adv)
	}
}

func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		ratio  float64
		better Direction
		want   string
	}{
		{2, higherIsBetter, "redq better"},
		{0.5, higherIsBetter, "redq worse"},
		{0.5, lowerIsBetter, "redq better"},
		{2, lowerIsBetter, "redq worse"},
		{1.04, higherIsBetter, "even"},
		{0.96, lowerIsBetter, "even"},
		{1.06, lowerIsBetter, "redq worse"},
		{math.NaN(), higherIsBetter, ""},
	} {
		if got := verdict(c.ratio, c.better); got != c.want {
			t.Errorf("verdict(%v, %s) = %q, want %q", c.ratio, c.better, got, c.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{51123, "deliveries/s", "51.1k"},
		{1234567, "deliveries/s", "1.23M"},
		{999.7, "deliveries/s", "1.00k"},
		{512, "deliveries/s", "512"},
		{7.5, "deliveries/s", "7.50"},
		{0, "deliveries/s", "0"},
		{344.2, "µs", "344µs"},
		{3.456, "µs/delivery", "3.46µs"},
		{12345, "µs", "12.3ms"},
		{0.25, "µs", "250ns"},
		{1.234, "s", "1.23s"},
		{0.0456, "s", "45.6ms"},
		{180.4, "B/delivery", "180B"},
		{65536, "B", "65.5kB"},
	} {
		if got := formatValue(c.v, c.unit); got != c.want {
			t.Errorf("formatValue(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
	for _, c := range []struct {
		x    float64
		want string
	}{
		{57.3, "57"}, {5.63, "5.6"}, {1, "1.0"}, {0.853, "0.85"}, {0.0523, "0.052"}, {9.97, "10"}, {0.9996, "1.0"}, {0.0996, "0.10"}, {0.1004, "0.10"},
	} {
		if got := formatRatio(c.x); got != c.want {
			t.Errorf("formatRatio(%v) = %q, want %q", c.x, got, c.want)
		}
	}
}
