package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chartTitle is the title of the ratio chart.
const chartTitle = "redq advantage (median ratio, >1 means redq better)"

// Bar colours by verdict.
var (
	betterColor = color.RGBA{R: 46, G: 139, B: 87, A: 255}
	worseColor  = color.RGBA{R: 205, G: 92, B: 92, A: 255}
	evenColor   = color.RGBA{R: 150, G: 150, B: 150, A: 255}
)

// advantageBar is one bar of the chart: redq against one peer on one
// metric of one workload.
type advantageBar struct {
	label   string  // "e2e/10-consumers rate vs asynq"
	value   float64 // median ratio oriented so >1 means redq is better
	verdict string  // as in the table, for the colour
}

// chartBars returns one bar per (workload metric, peer) with at least one
// repetition in which both redq and the peer succeeded, in table order.
func chartBars(r *report) []advantageBar {
	var bars []advantageBar
	ref := reference(r)
	order := systemOrder(r)
	for _, g := range groupSamples(r) {
		for _, rw := range g.rows(order, ref) {
			if !rw.peer || len(rw.ratios) == 0 {
				continue
			}
			bars = append(bars, advantageBar{
				label:   fmt.Sprintf("%s %s vs %s", g.workload, g.metric, rw.system),
				value:   median(advantages(rw.ratios, g.better)),
				verdict: rw.verdict(g.better),
			})
		}
	}
	return bars
}

// writeChart draws the median advantage of redq over every peer as a
// horizontal bar chart on a log scale and saves it as dir/chart.svg and
// dir/chart.png. It writes nothing when no ratio could be computed.
func writeChart(dir string, r *report) error {
	bars := chartBars(r)
	if len(bars) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create chart directory: %w", err)
	}
	p := newChart(bars)
	height := max(3*vg.Inch, 1.2*vg.Inch+vg.Length(len(bars))*0.25*vg.Inch)
	for _, name := range []string{"chart.svg", "chart.png"} {
		if err := p.Save(9*vg.Inch, height, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("save %s: %w", name, err)
		}
	}
	return nil
}

// newChart lays out the plot: bars from top to bottom in table order.
func newChart(bars []advantageBar) *plot.Plot {
	p := plot.New()
	p.Title.Text = chartTitle
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text = "median over repetitions of the per-repetition ratio (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.TickerFunc(ratioTicks)

	labels := make([]string, len(bars))
	for i, b := range bars {
		labels[len(bars)-1-i] = b.label // the Y axis counts upwards
	}
	p.NominalY(labels...)

	bp := &barsPlotter{bars: bars, label: p.Y.Tick.Label}
	bp.label.YAlign = draw.YCenter
	p.Add(bp)
	return p
}

// barsPlotter draws advantage bars from 1 to their value, each with its
// value written at its end, and a reference line at 1.
type barsPlotter struct {
	bars  []advantageBar
	label text.Style
}

// labelGap is the space between a bar's end and its value label.
const labelGap = vg.Length(3)

// pos is the Y coordinate of bar i: the first bar is at the top.
func (b *barsPlotter) pos(i int) float64 { return float64(len(b.bars) - 1 - i) }

// valueLabel is the text written at the end of a bar.
func valueLabel(v float64) string { return formatRatio(v) + "×" }

// Plot implements plot.Plotter.
func (b *barsPlotter) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	x1 := trX(1)
	half := 0.35 * vg.Length(math.Abs(float64(trY(1)-trY(0))))
	for i, bar := range b.bars {
		y, x := trY(b.pos(i)), trX(bar.value)
		rect := []vg.Point{{X: x1, Y: y - half}, {X: x1, Y: y + half}, {X: x, Y: y + half}, {X: x, Y: y - half}}
		c.FillPolygon(barColor(bar.verdict), c.ClipPolygonXY(rect))

		sty := b.label
		at := vg.Point{X: x + labelGap, Y: y}
		sty.XAlign = draw.XLeft
		if bar.value < 1 {
			at.X = x - labelGap
			sty.XAlign = draw.XRight
		}
		c.FillText(sty, at, valueLabel(bar.value))
	}
	ref := draw.LineStyle{Color: color.Black, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
	c.StrokeLine2(ref, x1, c.Min.Y, x1, c.Max.Y)
}

// DataRange implements plot.DataRanger: the values and 1, with room on a
// log scale, at least 0.5 to 2.
func (b *barsPlotter) DataRange() (xmin, xmax, ymin, ymax float64) {
	vals := make([]float64, 0, len(b.bars)+1)
	vals = append(vals, 1)
	for _, bar := range b.bars {
		vals = append(vals, bar.value)
	}
	xmin = math.Min(slices.Min(vals)/1.3, 0.5)
	xmax = math.Max(slices.Max(vals)*1.3, 2)
	return xmin, xmax, -0.5, float64(len(b.bars)) - 0.5
}

// GlyphBoxes implements plot.GlyphBoxer so that the value labels fit.
func (b *barsPlotter) GlyphBoxes(plt *plot.Plot) []plot.GlyphBox {
	boxes := make([]plot.GlyphBox, len(b.bars))
	h := b.label.Height("0")
	for i, bar := range b.bars {
		w := b.label.Width(valueLabel(bar.value))
		boxes[i].X = plt.X.Norm(bar.value)
		boxes[i].Y = plt.Y.Norm(b.pos(i))
		boxes[i].Rectangle = vg.Rectangle{
			Min: vg.Point{X: labelGap, Y: -h / 2},
			Max: vg.Point{X: labelGap + w, Y: h / 2},
		}
		if bar.value < 1 {
			boxes[i].Min.X, boxes[i].Max.X = -labelGap-w, -labelGap
		}
	}
	return boxes
}

// barColor is the colour of a bar with the given verdict.
func barColor(verdict string) color.Color {
	switch verdict {
	case "redq better":
		return betterColor
	case "redq worse":
		return worseColor
	default:
		return evenColor
	}
}

// ratioTicks marks 1, 2 and 5 times each power of ten within [lo, hi],
// labelling all of them over a narrow range and only the powers of ten
// over a wide one.
func ratioTicks(lo, hi float64) []plot.Tick {
	first := int(math.Floor(math.Log10(lo)))
	last := int(math.Ceil(math.Log10(hi)))
	labelAll := last-first <= 3
	var ticks []plot.Tick
	for e := first; e <= last; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := round3(m * math.Pow(10, float64(e)))
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || labelAll {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64) + "×"
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
