package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// evenBand is how far a median ratio may be from 1 and still count as
// "even": within ±5%.
const evenBand = 0.05

// maxErrorLen bounds how much of a failure message a table line shows.
const maxErrorLen = 160

// group holds the samples of one (workload, metric), by system.
type group struct {
	workload string
	metric   string
	unit     string
	better   Direction
	samples  map[string][]sample // by system, in the order appended
}

// row is one table line: the statistics of one system for one group.
type row struct {
	system   string
	values   []float64 // successful values, in repetition order
	failed   int       // samples that failed
	total    int       // all samples
	firstErr string    // the first failure, by repetition
	peer     bool      // a peer of the reference: ratios apply
	ratios   []float64 // reference/peer per repetition where both succeeded
}

// reference returns the system every other one is compared with: the
// first column, which is redq.
func reference(r *report) string {
	if len(r.Systems) > 0 {
		return r.Systems[0]
	}
	return "redq"
}

// isPeer reports whether name is compared with ref: every system except
// ref itself and its variants (such as "redq (poll 30s)" for "redq").
func isPeer(ref, name string) bool {
	return name != ref && !strings.HasPrefix(name, ref+" ")
}

// ok reports whether s is a successful measurement with a usable value.
func ok(s sample) bool {
	return s.Error == "" && !math.IsNaN(s.Value) && !math.IsInf(s.Value, 0)
}

// failure returns why s is not ok.
func failure(s sample) string {
	if s.Error != "" {
		return s.Error
	}
	return "invalid value " + strconv.FormatFloat(s.Value, 'g', -1, 64)
}

// groupSamples splits the samples by (workload, metric), in the order
// each pair is first seen.
func groupSamples(r *report) []*group {
	type key struct{ workload, metric string }
	var out []*group
	index := map[key]*group{}
	for _, s := range r.Samples {
		k := key{s.Workload, s.Metric}
		g := index[k]
		if g == nil {
			g = &group{workload: s.Workload, metric: s.Metric, unit: s.Unit, better: s.Better, samples: map[string][]sample{}}
			index[k] = g
			out = append(out, g)
		}
		g.samples[s.System] = append(g.samples[s.System], s)
	}
	return out
}

// systemOrder returns r.Systems followed by any system that has samples
// but is missing from r.Systems, in the order first seen.
func systemOrder(r *report) []string {
	order := slices.Clone(r.Systems)
	for _, s := range r.Samples {
		if !slices.Contains(order, s.System) {
			order = append(order, s.System)
		}
	}
	return order
}

// rows returns one row per system in order that has samples in g.
func (g *group) rows(order []string, ref string) []row {
	var out []row
	for _, name := range order {
		ss := byRep(g.samples[name])
		if len(ss) == 0 {
			continue
		}
		rw := row{system: name, total: len(ss), peer: isPeer(ref, name)}
		for _, s := range ss {
			if ok(s) {
				rw.values = append(rw.values, s.Value)
				continue
			}
			if rw.failed == 0 {
				rw.firstErr = failure(s)
			}
			rw.failed++
		}
		if rw.peer {
			rw.ratios = repRatios(g.samples[ref], ss)
		}
		out = append(out, rw)
	}
	return out
}

// byRep returns a copy of ss sorted by repetition.
func byRep(ss []sample) []sample {
	out := slices.Clone(ss)
	slices.SortStableFunc(out, func(a, b sample) int { return a.Rep - b.Rep })
	return out
}

// repRatios returns ref/peer for every repetition in which both
// succeeded with a positive value, in repetition order.
func repRatios(ref, peer []sample) []float64 {
	refByRep := map[int]float64{}
	for _, s := range ref {
		if _, seen := refByRep[s.Rep]; !seen && ok(s) {
			refByRep[s.Rep] = s.Value
		}
	}
	var out []float64
	done := map[int]bool{}
	for _, s := range byRep(peer) {
		rv, found := refByRep[s.Rep]
		if !found || done[s.Rep] || !ok(s) || s.Value <= 0 || rv <= 0 {
			continue
		}
		done[s.Rep] = true
		out = append(out, rv/s.Value)
	}
	return out
}

// advantages orients ratios (redq/peer) so that above 1 always means redq
// is better: unchanged when higher is better, inverted when lower is.
func advantages(ratios []float64, better Direction) []float64 {
	out := make([]float64, len(ratios))
	for i, x := range ratios {
		if better == lowerIsBetter {
			x = 1 / x
		}
		out[i] = x
	}
	return out
}

// median returns the median of xs (the mean of the middle two for an even
// count), or NaN when xs is empty. xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// verdict says whether a median ratio redq/peer favours redq, given which
// way the metric improves.
func verdict(ratio float64, better Direction) string {
	switch {
	case math.IsNaN(ratio):
		return ""
	case math.Abs(ratio-1) <= evenBand:
		return "even"
	case (ratio > 1) == (better != lowerIsBetter):
		return "redq better"
	default:
		return "redq worse"
	}
}

// step is one scale for formatScaled: values of at least size are shown
// divided by it, followed by suffix.
type step struct {
	size   float64
	suffix string
}

var (
	countSteps    = []step{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}}
	byteSteps     = []step{{1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}, {1, "B"}}
	durationSteps = []step{{1e6, "s"}, {1e3, "ms"}, {1, "µs"}, {1e-3, "ns"}} // in µs
)

// formatValue formats v, measured in unit, with three significant digits
// and a suffix fitting the unit: "51.1k" for deliveries/s, "344µs" for µs
// or s, "1.23kB" for B.
func formatValue(v float64, unit string) string {
	base, _, _ := strings.Cut(unit, "/")
	switch base {
	case "ns":
		return formatScaled(v/1e3, durationSteps)
	case "µs", "us":
		return formatScaled(v, durationSteps)
	case "ms":
		return formatScaled(v*1e3, durationSteps)
	case "s":
		return formatScaled(v*1e6, durationSteps)
	case "B":
		return formatScaled(v, byteSteps)
	default:
		return formatScaled(v, countSteps)
	}
}

// formatScaled formats v with three significant digits in the largest of
// steps (largest first) in which it is at least 1; values below the last
// step use the last.
func formatScaled(v float64, steps []step) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	st := steps[len(steps)-1]
	for _, s := range steps {
		if math.Abs(round3(v/s.size)) >= 1 {
			st = s
			break
		}
	}
	return sig3(v/st.size) + st.suffix
}

// round3 rounds x to three significant digits.
func round3(x float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 3, 64), 64)
	return r
}

// sig3 formats x with three significant digits and no exponent
// (more digits for numbers of 1000 and above).
func sig3(x float64) string {
	r := round3(x)
	if r == 0 {
		return "0"
	}
	dec := max(2-int(math.Floor(math.Log10(math.Abs(r)))), 0)
	return strconv.FormatFloat(r, 'f', dec, 64)
}

// formatRatio formats a ratio with two significant digits (at least one
// decimal below 10): "57", "5.6", "0.85", "0.052".
func formatRatio(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0) || x <= 0:
		return strconv.FormatFloat(x, 'g', 2, 64)
	case x >= 9.95:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 0.995:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 2, 64), 64)
	dec := 1 - int(math.Floor(math.Log10(r)))
	return strconv.FormatFloat(r, 'f', dec, 64)
}

// ratioText is the ratio column of a peer row: the median ratio and each
// repetition's, e.g. "5.6× [5.2 5.4 5.6 5.8 6.0]"; "–" when no
// repetition has both values.
func (rw row) ratioText() string {
	if len(rw.ratios) == 0 {
		return "–"
	}
	each := make([]string, len(rw.ratios))
	for i, x := range rw.ratios {
		each[i] = formatRatio(x)
	}
	return formatRatio(median(rw.ratios)) + "× [" + strings.Join(each, " ") + "]"
}

// verdict is the verdict column of a row ("" for the reference).
func (rw row) verdict(better Direction) string {
	if !rw.peer {
		return ""
	}
	return verdict(median(rw.ratios), better)
}

// stats returns the formatted median, min and max of the successful
// values, or "–" for each when there are none.
func (rw row) stats(unit string) (med, lo, hi string) {
	if len(rw.values) == 0 {
		return "–", "–", "–"
	}
	return formatValue(median(rw.values), unit),
		formatValue(slices.Min(rw.values), unit),
		formatValue(slices.Max(rw.values), unit)
}

// failureText is "FAILED (n of m reps): first error", or "" when no
// repetition failed.
func (rw row) failureText() string {
	if rw.failed == 0 {
		return ""
	}
	msg, _, _ := strings.Cut(rw.firstErr, "\n")
	if r := []rune(msg); len(r) > maxErrorLen {
		msg = string(r[:maxErrorLen]) + "…"
	}
	return fmt.Sprintf("FAILED (%d of %d reps): %s", rw.failed, rw.total, msg)
}

// cpuText describes the CPUs: "16 CPUs (AMD EPYC 7763)".
func cpuText(m machine) string {
	s := fmt.Sprintf("%d CPUs", m.CPUs)
	if m.CPUModel != "" {
		s += " (" + m.CPUModel + ")"
	}
	return s
}

// redisText describes the Redis under test: "Redis 7.2.4 at addr (private)".
func redisText(m machine) string {
	s := fmt.Sprintf("Redis %s at %s", m.RedisVersion, m.RedisAddr)
	if m.PrivateRedis {
		s += " (private)"
	}
	return s
}

// sizeText describes the run's sizes.
func sizeText(m machine) string {
	return fmt.Sprintf("n=%d, %d reps, %d B payloads", m.N, m.Reps, m.PayloadSize)
}

// dateText is the measurement date in UTC.
func dateText(m machine) string {
	return m.Date.UTC().Format("2006-01-02 15:04 UTC")
}

// printTable writes the results as a plain-text table: a header saying
// where and how they were measured, then one line per system for every
// (workload, metric) with the median, min and max over repetitions and,
// for peers, the median ratio redq/peer with each repetition's.
func printTable(w io.Writer, r *report) {
	m := r.Machine
	ref := reference(r)
	fmt.Fprintf(w, "date     %s\n", dateText(m))
	fmt.Fprintf(w, "machine  %s, %s/%s, %s\n", cpuText(m), m.OS, m.Arch, m.GoVersion)
	fmt.Fprintf(w, "redis    %s\n", redisText(m))
	fmt.Fprintf(w, "sizes    %s\n", sizeText(m))
	fmt.Fprintf(w, "command  %s\n", m.Command)
	fmt.Fprintf(w, "ratios   %s/peer: median over reps of %s's value / the peer's (each rep in brackets); even: within ±%.0f%%\n\n",
		ref, ref, evenBand*100)

	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "workload\tmetric\tunit\tsystem\tmedian\tmin\tmax\t%s/peer (per rep)\tverdict\t\n", ref)
	order := systemOrder(r)
	for _, g := range groupSamples(r) {
		for i, rw := range g.rows(order, ref) {
			wl, metric, unit := g.workload, g.metric, g.unit
			if i > 0 {
				wl, metric, unit = "", "", ""
			}
			med, lo, hi := rw.stats(g.unit)
			ratio := ""
			if rw.peer {
				ratio = rw.ratioText()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				wl, metric, unit, rw.system, med, lo, hi, ratio, rw.verdict(g.better), rw.failureText())
		}
	}
	_ = tw.Flush()
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		if l != "" {
			fmt.Fprintln(w, strings.TrimRight(l, " \n"))
		}
	}
}

// printMarkdown writes the same results as printTable as a Markdown
// paragraph and table, for the README.
func printMarkdown(w io.Writer, r *report) {
	m := r.Machine
	ref := reference(r)
	fmt.Fprintf(w, "Measured %s on %s, %s/%s, %s; %s; %s.\n", dateText(m), cpuText(m), m.OS, m.Arch, m.GoVersion, redisText(m), sizeText(m))
	fmt.Fprintf(w, "Command: `%s`. %s/peer is the median over repetitions of %s's value divided by the peer's (each repetition in brackets); \"even\" means within ±%.0f%%.\n\n",
		m.Command, ref, ref, evenBand*100)

	fmt.Fprintf(w, "| workload | metric | system | median | min–max | %s/peer (per rep) | |\n", ref)
	fmt.Fprintln(w, "|---|---|---|--:|--:|---|---|")
	order := systemOrder(r)
	for _, g := range groupSamples(r) {
		for i, rw := range g.rows(order, ref) {
			wl, metric := g.workload, g.metric+" ("+g.unit+")"
			if i > 0 {
				wl, metric = "", ""
			}
			med, lo, hi := rw.stats(g.unit)
			span := lo + "–" + hi
			if len(rw.values) == 0 {
				span = "–"
			}
			ratio := ""
			if rw.peer {
				ratio = rw.ratioText()
			}
			note := rw.verdict(g.better)
			if f := rw.failureText(); f != "" {
				note = strings.TrimPrefix(note+"; "+f, "; ")
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n",
				mdCell(wl), mdCell(metric), mdCell(rw.system), med, span, ratio, mdCell(note))
		}
	}
}

// mdCell makes s safe inside a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

// writeJSON writes r, indented, to dir/results.json, creating dir if
// needed. Values JSON cannot hold (NaN, ±Inf) are written as failures.
func writeJSON(dir string, r *report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create results directory: %w", err)
	}
	out := *r
	out.Samples = slices.Clone(r.Samples)
	for i, s := range out.Samples {
		if s.Error == "" && !ok(s) {
			out.Samples[i].Error = failure(s)
			out.Samples[i].Value = 0
		}
	}
	b, err := json.MarshalIndent(&out, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results.json: %w", err)
	}
	b = append(b, '\n')
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return fmt.Errorf("write results.json: %w", err)
	}
	return nil
}
