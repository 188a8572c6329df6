package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/drover-ci/drover/internal/httpserver"
	"github.com/drover-ci/drover/internal/metrics"
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

// daemonFlags are the flags drover coordinator and drover router share
// besides --listen and --data.
type daemonFlags struct {
	logLevel, logFormat string
	maxConnsPerClient   int
	serve               serveFlags
}

// define adds the flags to f; what is what the server serves (for
// serveFlags.define).
func (d *daemonFlags) define(f *pflag.FlagSet, what string) {
	maxConnsFlag(f, &d.maxConnsPerClient)
	d.serve.define(f, "", what)
	f.StringVar(&d.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&d.logFormat, "log-format", "text", "text or json")
}

// start is how the daemon begins: its logger (to w), counting its
// warnings and errors into errorsName, and its metrics registry
// (daemonMetrics); then --max-conns-per-client is checked.
func (d *daemonFlags) start(w io.Writer, errorsName string) (*slog.Logger, *prometheus.Registry, error) {
	logger, err := newLogger(w, d.logLevel, d.logFormat)
	if err != nil {
		return nil, nil, usageError(err)
	}
	reg := prometheus.NewRegistry()
	if logger, err = daemonMetrics(reg, logger, errorsName, false); err != nil {
		return nil, nil, err
	}
	if err := checkMaxConns(d.maxConnsPerClient); err != nil {
		return nil, nil, err
	}
	return logger, reg, nil
}

// serveFlags are the flags of a daemon's HTTP server that secure it: its
// TLS certificate and key, and the file of the bearer token /metrics
// requires. The coordinator and the router name them --tls-cert,
// --tls-key and --metrics-token-file; drover run, for its listen_address,
// --listen-tls-cert and so on (GitLab Runner's listen_address has no TLS,
// and config.toml stays GitLab Runner's).
type serveFlags struct {
	prefix                     string // of the flags' names
	tlsCert, tlsKey, tokenFile string
}

func (s *serveFlags) define(f *pflag.FlagSet, prefix, what string) {
	s.prefix = prefix
	f.StringVar(&s.tlsCert, prefix+"tls-cert", "", "serve "+what+" over HTTPS (TLS 1.2 or newer) with this PEM certificate (the chain, server's first), read again when it changes; with --"+prefix+"tls-key")
	f.StringVar(&s.tlsKey, prefix+"tls-key", "", "the PEM private key of --"+prefix+"tls-cert")
	f.StringVar(&s.tokenFile, prefix+"metrics-token-file", "", "file holding a token that /metrics then requires as Authorization: Bearer (401 without it); health endpoints stay open")
}

// absolute makes the flags' file names absolute, before drover run's
// --working-directory changes the directory they are relative to.
func (s *serveFlags) absolute() error {
	for _, p := range []*string{&s.tlsCert, &s.tlsKey, &s.tokenFile} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	return nil
}

// serveSecurity is what serveFlags load.
type serveSecurity struct {
	tls          *tls.Config // nil = plain HTTP
	metricsToken string      // "" = /metrics open
	proxies      httpserver.TrustedProxies
}

// load reads the files of the flags; what does not load is a usage error
// naming the flag.
func (s *serveFlags) load(logger *slog.Logger) (serveSecurity, error) {
	var sec serveSecurity
	cfg, err := httpserver.ServerTLS(s.tlsCert, s.tlsKey, logger)
	if err != nil {
		return sec, usageError(fmt.Errorf("--%stls-cert %q, --%stls-key %q: %w", s.prefix, s.tlsCert, s.prefix, s.tlsKey, err))
	}
	sec.tls = cfg
	if s.tokenFile != "" {
		if sec.metricsToken, err = httpserver.ReadTokenFile(s.tokenFile); err != nil {
			return sec, usageError(fmt.Errorf("--%smetrics-token-file: %w", s.prefix, err))
		}
	}
	return sec, nil
}

// handler is h behind the metrics token and the trusted proxies.
func (sec serveSecurity) handler(h http.Handler) http.Handler {
	return sec.proxies.Handler(httpserver.RequireMetricsToken(h, sec.metricsToken))
}

// apiServer is the HTTP server of a daemon's API: httpserver's timeouts,
// header cap and connection caps (perClient as --max-conns-per-client
// takes it, 0 = none), its connection metrics registered with reg as
// drover_<subsystem>_connections*, over TLS and with /metrics behind a
// token as sec says.
func apiServer(logger *slog.Logger, reg prometheus.Registerer, subsystem string, h http.Handler, perClient int, sec serveSecurity) (*httpserver.Server, error) {
	if perClient == 0 {
		perClient = httpserver.NoCap
	}
	m, err := httpserver.NewMetrics(reg, subsystem)
	if err != nil {
		return nil, err
	}
	return httpserver.New(sec.handler(h), httpserver.Options{MaxConnsPerClient: perClient, Logger: logger, Metrics: m, TLS: sec.tls}), nil
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
// apiServer with sec) until ctx is done, then shuts the server down, giving held
// long polls a moment, and waits for Run to return. attrs are logged with
// the address.
func serveRunnerAPI(ctx context.Context, logger *slog.Logger, reg prometheus.Registerer, name string, d runnerAPIDaemon, ln net.Listener, perClient int, sec serveSecurity, attrs ...any) error {
	if p := d.AdminTokenPath(); p != "" {
		logger.Info("admin token", "path", p)
	} else {
		logger.Info("admin token taken from DROVER_ADMIN_TOKEN")
	}
	srv, err := apiServer(logger, reg, name, d.Handler(), perClient, sec)
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
	logger.Info(name+" listening", append(append([]any{"addr", srv.Scheme() + "://" + ln.Addr().String(), "metrics_token", sec.metricsToken != ""}, attrs...), listenAttrs(srv)...)...)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-runDone
	logger.Info(name + " stopped")
	return nil
}

// daemonMetrics registers with reg what every daemon's /metrics carries
// besides its own families (the Go and process collectors, drover_build_info,
// and for drover run gitlab_runner_version_info), and returns logger
// counting its warnings and errors into errorsName (registered too).
func daemonMetrics(reg prometheus.Registerer, logger *slog.Logger, errorsName string, gitlab bool) (*slog.Logger, error) {
	errs := metrics.NewErrorCounter(errorsName)
	if err := reg.Register(errs); err != nil {
		return nil, err
	}
	if err := metrics.Register(reg, gitlab); err != nil {
		return nil, err
	}
	return errs.Logger(logger), nil
}
