package main

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/drover-ci/drover/internal/autoscale/runnerpool"
	"github.com/drover-ci/drover/internal/manager"
	"github.com/drover-ci/drover/internal/web"
)

// listenHandler is what drover run's listen_address serves: the
// manager's /metrics, health and debug endpoints, and the read-only fleet
// page of its autoscaled runners (/fleet; / leads there). Like /metrics
// it has no authentication: listen_address belongs on localhost or a
// private network.
func listenHandler(logger *slog.Logger, m *manager.Manager, pools *runnerpool.Set) (http.Handler, error) {
	page, err := web.NewFleetPage(logger.With("component", "fleet page"), web.FleetConfig{Fleet: pools})
	if err != nil {
		return nil, fmt.Errorf("fleet page: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", m.Handler())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/fleet", http.StatusSeeOther)
	})
	page.Mount(mux)
	return mux, nil
}
