package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// hclogRoot is the name of the hclog logger handed to go-plugin. Its own
// lines carry this @module; the plugin's lines, which go-plugin reads
// from the plugin's stderr and logs again, carry "fleeting.<binary>".
const hclogRoot = "fleeting"

// procSink turns go-plugin's hclog output (JSON, one object a line) into
// slog records on the provider's logger, and learns the plugin process's
// pid and exit from go-plugin's own lines ("plugin started" with pid,
// "plugin process exited"): go-plugin exposes neither through the
// fleeting module's host side. One sink serves one plugin process.
type procSink struct {
	log *slog.Logger

	mu     sync.Mutex
	buf    []byte
	pid    int
	exited bool
}

func newProcSink(log *slog.Logger) *procSink { return &procSink{log: log} }

// logger is the hclog.Logger go-plugin logs into. Debug, so that the
// "plugin started" line with the pid arrives; the slog handler decides
// what is shown.
func (s *procSink) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       hclogRoot,
		Level:      hclog.Debug,
		Output:     s,
		JSONFormat: true,
	})
}

// Write logs each complete line written to it.
func (s *procSink) Write(b []byte) (int, error) {
	s.mu.Lock()
	s.buf = append(s.buf, b...)
	var lines [][]byte
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, bytes.Clone(s.buf[:i]))
		s.buf = s.buf[i+1:]
	}
	s.mu.Unlock()
	for _, l := range lines {
		s.line(l)
	}
	return len(b), nil
}

func (s *procSink) line(raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		s.log.Info(string(raw))
		return
	}
	msg, _ := m["@message"].(string)
	module, _ := m["@module"].(string)
	lvl := levelOf(m["@level"])
	own := module == hclogRoot
	if own {
		switch msg {
		case "plugin started":
			if pid, ok := m["pid"].(float64); ok {
				s.mu.Lock()
				s.pid = int(pid)
				s.mu.Unlock()
			}
		case "plugin process exited":
			s.mu.Lock()
			s.exited = true
			s.mu.Unlock()
		}
		// go-plugin's own bookkeeping is for debugging drover, not for
		// the operator, except its errors and the exit.
		if lvl < slog.LevelWarn && msg != "plugin process exited" {
			lvl = slog.LevelDebug
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if strings.HasPrefix(k, "@") || k == "timestamp" || (own && k == "plugin") {
			// go-plugin's own "plugin" (the path) would repeat the
			// provider logger's.
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys)+1)
	if !own {
		attrs = append(attrs, slog.String("from", "plugin"))
	}
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, m[k]))
	}
	s.log.LogAttrs(context.Background(), lvl, msg, attrs...)
}

func levelOf(v any) slog.Level {
	switch v, _ := v.(string); v {
	case "trace", "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// state returns the pid of the process (0 before it started) and
// whether it has exited.
func (s *procSink) state() (pid int, exited bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid, s.exited
}
