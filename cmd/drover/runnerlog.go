package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// runnerHandler writes logs in GitLab Runner's own format (its default,
// "runner"): no timestamp, a level prefix for warnings and errors, the
// message padded to a column, then the attributes as key=value, in the
// order they were given (the logger's own first), as the text format has
// them.
type runnerHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	level slog.Leveler
	attrs []slog.Attr
	group string
}

func newRunnerHandler(w io.Writer, level slog.Leveler) *runnerHandler {
	return &runnerHandler{mu: &sync.Mutex{}, w: w, level: level}
}

func (h *runnerHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// runnerMessageWidth is the column the attributes start at.
const runnerMessageWidth = 40

func (h *runnerHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("ERROR: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("WARNING: ")
	case r.Level < slog.LevelInfo:
		b.WriteString("DEBUG: ")
	}
	b.WriteString(r.Message)
	var kv []string
	var add func(prefix string, a slog.Attr)
	add = func(prefix string, a slog.Attr) {
		a.Value = a.Value.Resolve()
		if a.Equal(slog.Attr{}) {
			return
		}
		if a.Value.Kind() == slog.KindGroup {
			p := prefix
			if a.Key != "" {
				p += a.Key + "."
			}
			for _, g := range a.Value.Group() {
				add(p, g)
			}
			return
		}
		kv = append(kv, prefix+a.Key+"="+runnerValue(a.Value))
	}
	for _, a := range h.attrs {
		add("", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		add(h.group, a)
		return true
	})
	if len(kv) > 0 {
		if pad := runnerMessageWidth - b.Len(); pad > 0 {
			b.WriteString(strings.Repeat(" ", pad))
		} else {
			b.WriteByte(' ')
		}
		b.WriteString(strings.Join(kv, " "))
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

// runnerValue quotes a value that has spaces, quotes or nothing in it.
func runnerValue(v slog.Value) string {
	s := v.String()
	if v.Kind() == slog.KindAny {
		if err, ok := v.Any().(error); ok {
			s = err.Error()
		} else {
			s = fmt.Sprint(v.Any())
		}
	}
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		return strconv.Quote(s)
	}
	return s
}

func (h *runnerHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = slices.Clone(h.attrs)
	for _, a := range as {
		if h.group != "" {
			a.Key = h.group + a.Key
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *runnerHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}
