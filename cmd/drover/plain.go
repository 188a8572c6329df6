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

// plainWriter passes a job log on without escapes and section markers,
// a line at a time (an escape is never cut in two); Close writes the rest.
type plainWriter struct {
	w   io.Writer
	buf []byte
}

func (p *plainWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	if i := bytes.LastIndexByte(p.buf, '\n'); i >= 0 {
		if _, err := p.w.Write(logEscapes.ReplaceAll(p.buf[:i+1], nil)); err != nil {
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
	_, err := p.w.Write(logEscapes.ReplaceAll(p.buf, nil))
	p.buf = p.buf[:0]
	return err
}

// logOutput returns where a command writes a job log: as is on a terminal,
// plain (no colours, no section markers) when stdout is a file or a pipe,
// or when --no-color or NO_COLOR asks for it. Call the close function at
// the end.
func logOutput(cmd *cobra.Command, noColor bool) (io.Writer, func() error) {
	out := cmd.OutOrStdout()
	if _, set := os.LookupEnv("NO_COLOR"); !set && !noColor && isTerminal(out) {
		return out, func() error { return nil }
	}
	p := &plainWriter{w: out}
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
