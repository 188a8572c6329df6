package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/router"
)

func newRouterCmd() *cobra.Command {
	var (
		upstream, upstreamToken, listen, data string
		ackTimeout, longPoll, noRunner        time.Duration
		prefetch                              int
		daemon                                daemonFlags
		upstreamTLS                           api.TLSFiles
	)
	cmd := &cobra.Command{
		Use:   "router",
		Short: "Run a smart router between a coordinator (or GitLab) and many runners",
		Long: `Runs drover's smart router. To its upstream (drover's coordinator, or GitLab)
it is one runner manager using the runner token --upstream-token; to its own
runners it is a coordinator with the same runner API v4: point a runner's url
at the router and give it a token the router issued; nothing else changes.

One upstream long poll serves every runner: the router asks the upstream for
a job only while one of its runners waits for one. With an upstream that
supports the two-phase job start, a job it holds stays waiting_for_runner_ack
upstream (the router keeps it alive) until a runner accepts it; a runner that
declines or goes silent gives it back to the router's queue for another
runner. If the router dies, the upstream's deadlines return its jobs to the
upstream queue; restarted on the same --data it serves on, no manual steps.

Its queue is fair across projects and namespaces (round robin), and runner
managers that declined or went silent lately are tried last. By default it
pulls a job only for a runner that is waiting (no job is pulled that nobody
can run), so the upstream's order decides (drover's coordinator serves
projects round robin); --prefetch N lets it hold up to N jobs more, kept
alive upstream while a runner manager of its own is alive, so its own fair
share can reorder a burst from an upstream whose order is not fair.

Runner tokens for its runners: POST /api/v1/runners with the admin token
(DATA/admin-token, created on first start; DROVER_ADMIN_TOKEN overrides), the
same admin API as the coordinator's:

  curl -H "Authorization: Bearer $(cat DATA/admin-token)" \
       -d '{"description":"r1","tag_list":["linux"]}' http://ROUTER/api/v1/runners

Metrics: /metrics (drover_router_*); health: /health/live, /health/ready.
With --tls-cert and --tls-key it serves HTTPS only; with --metrics-token-file
/metrics needs that token as Authorization: Bearer. An upstream with a
private CA is verified with --upstream-tls-ca-file (trusted besides the
system's CAs), and --upstream-tls-cert-file with --upstream-tls-key-file
show it a client certificate: a runner's tls-ca-file, tls-cert-file and
tls-key-file.

Connections: as the coordinator's, a request must arrive whole within 60 s;
a client address may hold --max-conns-per-client connections at once and
all clients together three quarters of the open-file limit (429 or 503
beyond, drover_router_connections_rejected_total).`,
		Example: `  drover router --upstream https://gitlab.example.com --upstream-token glrt-xxxx \
    --listen 0.0.0.0:8090 --data /var/lib/drover-router`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, reg, err := daemon.start(cmd.ErrOrStderr(), "drover_router_errors_total")
			if err != nil {
				return err
			}
			if upstreamToken == "" {
				upstreamToken = os.Getenv("DROVER_UPSTREAM_TOKEN")
			}
			if upstream == "" || upstreamToken == "" {
				return usageError(errors.New("--upstream and --upstream-token are required"))
			}
			sec, err := daemon.serve.load(logger)
			if err != nil {
				return err
			}
			upTLS, err := api.ClientTLS(upstreamTLS)
			if err != nil {
				return usageError(fmt.Errorf("--upstream-tls-*: %w", err))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			r, err := router.New(ctx, logger, router.Config{
				Upstream:        upstream,
				UpstreamToken:   upstreamToken,
				UpstreamTLS:     upTLS,
				DataDir:         data,
				AdminToken:      os.Getenv("DROVER_ADMIN_TOKEN"),
				AckTimeout:      ackTimeout,
				LongPollTimeout: longPoll,
				NoRunnerTimeout: noRunner,
				Prefetch:        prefetch,
				Version:         version,
				Registerer:      reg,
			})
			if err != nil {
				return usageError(err)
			}
			defer r.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usageError(err)
			}
			defer ln.Close()
			return serveRunnerAPI(ctx, logger, reg, "router", r, ln, daemon.maxConnsPerClient, sec, "upstream", upstream, "data", data)
		},
	}
	f := cmd.Flags()
	f.StringVar(&upstream, "upstream", "", "URL of the upstream coordinator or GitLab instance (required)")
	f.StringVar(&upstreamToken, "upstream-token", "", "the router's runner token at the upstream, glrt-… (required; or DROVER_UPSTREAM_TOKEN)")
	f.StringVar(&upstreamTLS.CAFile, "upstream-tls-ca-file", "", "PEM CA certificates the upstream is verified with, besides the system's (a runner's tls-ca-file)")
	f.StringVar(&upstreamTLS.CertFile, "upstream-tls-cert-file", "", "PEM client certificate shown to the upstream, with --upstream-tls-key-file (a runner's tls-cert-file)")
	f.StringVar(&upstreamTLS.KeyFile, "upstream-tls-key-file", "", "the PEM key of --upstream-tls-cert-file (a runner's tls-key-file)")
	f.StringVar(&listen, "listen", "127.0.0.1:8090", "address to listen on (host:port)")
	f.StringVar(&data, "data", "./.drover-router", "data directory (runner tokens, admin token, system id)")
	f.DurationVar(&ackTimeout, "ack-timeout", router.DefaultAckTimeout, "acknowledgement timeout given to the router's two-phase runners: an offered job whose runner stays silent this long goes to another runner")
	f.DurationVar(&longPoll, "long-poll-timeout", router.DefaultLongPollTimeout, "how long a runner's jobs/request is held waiting for a job")
	f.DurationVar(&noRunner, "no-runner-timeout", router.DefaultNoRunnerTimeout, "decline a held job upstream when no runner behind the router could take it for this long")
	f.IntVar(&prefetch, "prefetch", 0, "jobs the router may hold beyond its waiting runners (two-phase upstreams only, kept alive upstream), so its own fair share can reorder bursts; 0 = pull only for a waiting runner")
	daemon.define(f, "the runner API")
	return cmd
}
