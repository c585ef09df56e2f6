package dashboard

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/redq/redq"
)

// minutes spreads points over the 60 minutes up to now (oldest first);
// minutes without a point are zero. Series: published, acked, rejected,
// retried.
func minutes(pts []redq.RatePoint, now time.Time) [4][60]int64 {
	var s [4][60]int64
	end := now.Truncate(time.Minute)
	for _, p := range pts {
		i := 59 - int(end.Sub(p.Minute.Truncate(time.Minute))/time.Minute)
		if i < 0 || i > 59 {
			continue
		}
		s[0][i] += p.Published
		s[1][i] += p.Acked
		s[2][i] += p.Rejected
		s[3][i] += p.Retried
	}
	return s
}

func peak(series ...[60]int64) int64 {
	var m int64
	for _, s := range series {
		for _, v := range s {
			m = max(m, v)
		}
	}
	return m
}

// polyline draws s in a w×h box scaled to top, with coordinates in tenths
// of a unit (the SVG's viewBox is scaled to match).
func polyline(b *strings.Builder, s [60]int64, top int64, x0, w, y0, h float64, class string) {
	b.WriteString(`<polyline class="`)
	b.WriteString(class)
	b.WriteString(`" points="`)
	var num [24]byte
	for i, v := range s {
		y := y0 + h
		if top > 0 {
			y = y0 + h - float64(v)/float64(top)*h
		}
		b.Write(strconv.AppendInt(num[:0], int64((x0+float64(i)*w/59)*10+0.5), 10))
		b.WriteByte(',')
		b.Write(strconv.AppendInt(num[:0], int64(y*10+0.5), 10))
		b.WriteByte(' ')
	}
	b.WriteString(`"/>`)
}

// sparkline is the overview's chart of a queue's last hour: published and
// acked per minute.
func sparkline(pts []redq.RatePoint, now time.Time) template.HTML {
	s := minutes(pts, now)
	top := peak(s[0], s[1], s[2])
	var b strings.Builder
	var sum [3]int64
	for i := range 60 {
		sum[0] += s[0][i]
		sum[1] += s[1][i]
		sum[2] += s[2][i]
	}
	fmt.Fprintf(&b, `<svg class="spark" viewBox="0 0 1200 280" width="120" height="28" role="img" aria-label="last hour"><title>last hour: %d published, %d acked, %d rejected (peak %d a minute)</title>`, sum[0], sum[1], sum[2], top)
	// Rejected first, so that on quiet minutes the baseline is not red.
	if sum[2] > 0 {
		polyline(&b, s[2], top, 1, 118, 2, 24, "s-rej")
	}
	polyline(&b, s[1], top, 1, 118, 2, 24, "s-ack")
	polyline(&b, s[0], top, 1, 118, 2, 24, "s-pub")
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// hourChart is a queue page's chart of its last hour, with a scale and a
// legend.
func hourChart(pts []redq.RatePoint, now time.Time) template.HTML {
	s := minutes(pts, now)
	top := peak(s[0], s[1], s[2], s[3])
	const W, H, left, bottom = 640.0, 150.0, 44.0, 18.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="deliveries per minute, last hour">`, W*10, H*10)
	b.WriteString(`<g transform="scale(10)">`)
	for i := range 5 {
		y := 6 + (H-bottom-6)*float64(i)/4
		fmt.Fprintf(&b, `<line class="grid" x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f"/>`, left, W-4, y, y)
		v := float64(top) * float64(4-i) / 4
		fmt.Fprintf(&b, `<text class="axis" x="%.0f" y="%.1f" text-anchor="end">%s</text>`, left-6, y+4, formatRate(v))
	}
	for i, label := range []string{"-60 min", "-45", "-30", "-15", "now"} {
		x := left + (W-4-left)*float64(i)/4
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case 4:
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%.0f" text-anchor="%s">%s</text>`, x, H-3, anchor, label)
	}
	// One invisible column per minute carries its numbers as a tooltip.
	colW := (W - 4 - left) / 59
	end := now.Truncate(time.Minute)
	for i := range 60 {
		m := end.Add(time.Duration(i-59) * time.Minute)
		fmt.Fprintf(&b, `<rect class="hit" x="%.1f" y="0" width="%.1f" height="%.0f"><title>%s UTC: %d published, %d acked, %d rejected, %d retried</title></rect>`,
			left+float64(i)*colW-colW/2, colW, H-bottom, m.UTC().Format("15:04"), s[0][i], s[1][i], s[2][i], s[3][i])
	}
	b.WriteString(`</g>`)
	for _, i := range []int{3, 2, 1, 0} { // published on top
		polyline(&b, s[i], top, left, W-4-left, 6, H-bottom-6, []string{"s-pub", "s-ack", "s-rej", "s-retry"}[i])
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
