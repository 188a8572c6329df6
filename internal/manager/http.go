package manager

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the manager's listen_address: /metrics, /health/ready,
// /health/live and /debug/jobs/list.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.opts.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, _ *http.Request) {
		if m.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /debug/jobs/list", func(w http.ResponseWriter, _ *http.Request) {
		type item struct {
			ID       int64   `json:"id"`
			Runner   string  `json:"runner"`
			Stage    string  `json:"stage"`
			Duration float64 `json:"duration_s"`
		}
		m.mu.Lock()
		out := make([]item, 0, len(m.jobs))
		for _, j := range m.jobs {
			out = append(out, item{ID: j.id, Runner: j.runner, Stage: string(j.stage()), Duration: time.Since(j.started).Seconds()})
		}
		m.mu.Unlock()
		sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}
