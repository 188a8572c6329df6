package jobrun

import (
	"bytes"
	"io"

	"github.com/drover-ci/drover/internal/clock"
)

// Streams of a job log with timestamps: the lines the build writes itself
// (headers, sections, the result) and the output of the stages (the
// executors give stdout and stderr as one stream: drover marks both O).
const (
	streamRunner = 0
	streamStage  = 1
)

// stampMaxHeld is the most of an unfinished line a stream holds; a longer
// one is written in parts, each a continuation of the one before.
const stampMaxHeld = 8 << 10

// stamper writes a job log with a prefix on every line (FF_TIMESTAMPS),
// in GitLab Runner 19's format: "2025-07-04T10:08:01.123456Z 01O " is the
// time of the line's first byte (UTC, to the microsecond), a space, the
// stream's number in two hex digits, O, and a space, or a + instead of it
// when the line continues the one before it in the stream. Each stream
// holds a line until its newline; a write that holds a carriage return
// but no newline (a progress bar) is written at once and ended with a
// newline, and the rest of its line comes as a continuation, as GitLab
// Runner does it so that live logs show progress.
type stamper struct {
	w       io.Writer
	clk     clock.Clock
	streams [2]stampStream
}

type stampStream struct {
	held []byte // the line being held, its prefix included
	cont bool   // the next prefix marks a continuation
}

// write writes p to stream i: every complete line, with its prefix; it
// reports len(p) and the error of the log sink.
func (s *stamper) write(i int, p []byte) (int, error) {
	st := &s.streams[i]
	n := len(p)
	var out []byte
	// begin starts a line to write now: the held part, or a prefix.
	begin := func() {
		if len(st.held) > 0 {
			out = append(out, st.held...)
			st.held = st.held[:0]
		} else {
			out = s.prefix(out, i)
		}
	}
	for {
		j := bytes.IndexByte(p, '\n')
		if j < 0 {
			break
		}
		begin()
		out = append(out, p[:j+1]...)
		p = p[j+1:]
	}
	switch {
	case len(p) == 0:
	case bytes.IndexByte(p, '\r') >= 0 || len(st.held)+len(p) > stampMaxHeld:
		begin()
		out = append(out, p...)
		out = append(out, '\n')
		st.cont = true
	default:
		if len(st.held) == 0 {
			st.held = s.prefix(st.held, i)
		}
		st.held = append(st.held, p...)
	}
	if len(out) == 0 {
		return n, nil
	}
	_, err := s.w.Write(out)
	return n, err
}

// flush ends the line stream i holds, if any, with a newline.
func (s *stamper) flush(i int) error {
	st := &s.streams[i]
	if len(st.held) == 0 {
		return nil
	}
	out := append(st.held, '\n')
	st.held = nil
	_, err := s.w.Write(out)
	return err
}

// prefix appends the prefix of the next line of stream i to b.
func (s *stamper) prefix(b []byte, i int) []byte {
	st := &s.streams[i]
	b = s.clk.Now().UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z ")
	const hex = "0123456789abcdef"
	b = append(b, hex[i>>4], hex[i&0xf], 'O')
	if st.cont {
		b = append(b, '+')
	} else {
		b = append(b, ' ')
	}
	st.cont = false
	return b
}
