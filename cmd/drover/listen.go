package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/drover-ci/drover/internal/httpserver"
)

// maxConnsFlag adds --max-conns-per-client to f, for the daemons that
// serve runners (coordinator, router).
func maxConnsFlag(f *pflag.FlagSet, p *int) {
	f.IntVar(p, "max-conns-per-client", httpserver.DefaultMaxConnsPerClient,
		"connections one client address (an IPv4 address, an IPv6 /64) may hold open at once; more are answered 429 and closed "+
			"without reading them. Behind a load balancer every client has the balancer's address, and a router's runners all have the router's: "+
			"raise this past what it may open, or set 0 (no cap). "+
			"Connections in all are capped at 3/4 of the process's open-file limit (ulimit -Hn), more answered 503")
}

// checkMaxConns refuses a --max-conns-per-client below 0, before the
// daemon starts anything.
func checkMaxConns(perClient int) error {
	if perClient < 0 {
		return usageError(fmt.Errorf("--max-conns-per-client %d: want 0 (no cap) or more", perClient))
	}
	return nil
}

// apiServer is the HTTP server of a daemon's API: httpserver's timeouts,
// header cap and connection caps (perClient as --max-conns-per-client
// takes it, 0 = none), its connection metrics registered with reg as
// drover_<subsystem>_connections*.
func apiServer(logger *slog.Logger, reg prometheus.Registerer, subsystem string, h http.Handler, perClient int) (*httpserver.Server, error) {
	if perClient == 0 {
		perClient = httpserver.NoCap
	}
	m, err := httpserver.NewMetrics(reg, subsystem)
	if err != nil {
		return nil, err
	}
	return httpserver.New(h, httpserver.Options{MaxConnsPerClient: perClient, Logger: logger, Metrics: m}), nil
}

// listenAttrs are the log attributes of a server's connection caps.
func listenAttrs(srv *httpserver.Server) []any {
	perClient, total := srv.Limits()
	return []any{"max_conns_per_client", perClient, "max_conns", total}
}

// runnerAPIDaemon is a daemon serving the runner API: the coordinator or
// the router.
type runnerAPIDaemon interface {
	Handler() http.Handler
	Run(ctx context.Context) error
	AdminTokenPath() string
}

// serveRunnerAPI runs d (its Run loop and its API on ln, through
// apiServer) until ctx is done, then shuts the server down, giving held
// long polls a moment, and waits for Run to return. attrs are logged with
// the address.
func serveRunnerAPI(ctx context.Context, logger *slog.Logger, reg prometheus.Registerer, name string, d runnerAPIDaemon, ln net.Listener, perClient int, attrs ...any) error {
	if p := d.AdminTokenPath(); p != "" {
		logger.Info("admin token", "path", p)
	} else {
		logger.Info("admin token taken from DROVER_ADMIN_TOKEN")
	}
	srv, err := apiServer(logger, reg, name, d.Handler(), perClient)
	if err != nil {
		return err
	}
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = d.Run(ctx) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info(name+" listening", append(append([]any{"addr", "http://" + ln.Addr().String()}, attrs...), listenAttrs(srv)...)...)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-runDone
	logger.Info(name + " stopped")
	return nil
}
