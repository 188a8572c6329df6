package main

import (
	"bytes"
	"io"
	"os"
	"regexp"

	"github.com/spf13/cobra"
)

// logEscapes are what a job log has for terminals: colour and erase
// sequences (CSI ... letter) and GitLab's section markers
// (section_start:<time>:<name>[<options>]\r, section_end:<time>:<name>\r).
var logEscapes = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]|section_(?:start|end):[0-9]+:[^\r\n]*\r`)

// runnerTimestamps are the prefixes GitLab Runner 19 puts on every log
// line (FF_TIMESTAMPS): the time, the stream number and O or E, and + for
// a continued line.
var runnerTimestamps = regexp.MustCompile(`(?m)(^|\r)[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?Z [0-9a-f]{2}[OE][ +]`)

// plainWriter passes a job log on without what it is told to drop
// (terminal escapes and section markers; GitLab Runner's line timestamps),
// a line at a time (nothing is cut in two); Close writes the rest.
type plainWriter struct {
	w          io.Writer
	escapes    bool // drop colours, erases and section markers
	timestamps bool // drop GitLab Runner's per-line timestamps
	buf        []byte
}

func (p *plainWriter) filter(b []byte) []byte {
	if p.timestamps {
		b = runnerTimestamps.ReplaceAll(b, []byte("$1"))
	}
	if p.escapes {
		b = logEscapes.ReplaceAll(b, nil)
	}
	return b
}

func (p *plainWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	if i := bytes.LastIndexByte(p.buf, '\n'); i >= 0 {
		if _, err := p.w.Write(p.filter(p.buf[:i+1])); err != nil {
			return 0, err
		}
		p.buf = append(p.buf[:0], p.buf[i+1:]...)
	}
	return len(b), nil
}

func (p *plainWriter) Close() error {
	if len(p.buf) == 0 {
		return nil
	}
	_, err := p.w.Write(p.filter(p.buf))
	p.buf = p.buf[:0]
	return err
}

// logOutput returns where a command writes a job log: as is on a terminal,
// plain (no colours, no section markers) when stdout is a file or a pipe,
// or when --no-color or NO_COLOR asks for it; GitLab Runner's line
// timestamps are dropped unless timestamps is set. Call the close function
// at the end.
func logOutput(cmd *cobra.Command, noColor, timestamps bool) (io.Writer, func() error) {
	out := cmd.OutOrStdout()
	_, noColorEnv := os.LookupEnv("NO_COLOR")
	plain := noColorEnv || noColor || !isTerminal(out)
	if !plain && timestamps {
		return out, func() error { return nil }
	}
	p := &plainWriter{w: out, escapes: plain, timestamps: !timestamps}
	return p, p.Close
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
