// Package console writes a long-running command's output from many
// goroutines: log lines, and a progress line that a terminal shows in place
// (carriage return) while anything else gets one line at a time.
package console

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// Console serializes the writes of many goroutines to one writer.
type Console struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	showing bool // a progress line is on screen without a newline
}

// New returns a Console on w; progress lines are drawn in place when w is
// a terminal.
func New(w io.Writer) *Console {
	c := &Console{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			c.tty = true
		}
	}
	return c
}

const clearLine = "\r\033[K"

// Progress shows line as the current progress line.
func (c *Console) Progress(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.tty {
		fmt.Fprintln(c.w, line)
		return
	}
	fmt.Fprint(c.w, clearLine+line)
	c.showing = true
}

// Logf writes a line of its own, above the progress line.
func (c *Console) Logf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := strings.TrimRight(fmt.Sprintf(format, args...), "\n")
	if c.showing {
		fmt.Fprint(c.w, clearLine)
		c.showing = false
	}
	fmt.Fprintln(c.w, msg)
}

// Done ends a progress line that is on screen.
func (c *Console) Done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.showing {
		fmt.Fprintln(c.w)
		c.showing = false
	}
}
