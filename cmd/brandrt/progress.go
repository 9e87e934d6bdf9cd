package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress reports the advance of long work: a bar redrawn in place on a
// terminal, a plain line every ten seconds otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	label string
	start time.Time
	last  time.Time
	every time.Duration
}

// newProgress reports to w, redrawing in place when w is a terminal.
func newProgress(w io.Writer, label string) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		fi, err := f.Stat()
		tty = err == nil && fi.Mode()&os.ModeCharDevice != 0
	}
	every := 10 * time.Second
	if tty {
		every = 100 * time.Millisecond
	}
	now := time.Now()
	p := &progress{w: w, tty: tty, label: label, start: now, every: every}
	if !tty {
		p.last = now // plain lines: the first after one interval, not at once
	}
	return p
}

// update reports done of total, each shown by show (comma or ibytes) and
// followed by unit, then extra; it draws at most every refresh interval,
// and always when done == total.
func (p *progress) update(done, total int64, show func(int64) string, unit, extra string) {
	now := time.Now()
	if now.Sub(p.last) < p.every && done < total {
		return
	}
	p.last = now
	frac := 0.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	rate := float64(done) / max(now.Sub(p.start).Seconds(), 1e-9)
	eta := "--"
	if done > 0 && done < total {
		eta = time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	if unit != "" {
		unit = " " + unit
	}
	text := fmt.Sprintf("%s %s/%s%s (%s%s/s, ETA %s)%s", p.label, show(done), show(total), unit, show(int64(rate)), unit, eta, extra)
	if !p.tty {
		fmt.Fprintf(p.w, "%s %5.1f%%\n", text, 100*frac)
		return
	}
	const width = 30
	n := int(frac * width)
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %5.1f%% %s", strings.Repeat("=", n), strings.Repeat(" ", width-n), 100*frac, text)
	if done >= total {
		fmt.Fprintln(p.w)
	}
}
