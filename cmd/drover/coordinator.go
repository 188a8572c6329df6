package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/coordinator"
	"github.com/drover-ci/drover/internal/httpserver"
	"github.com/drover-ci/drover/internal/secretbox"
	"github.com/drover-ci/drover/internal/store"
	"github.com/drover-ci/drover/internal/store/postgres"
)

// openPostgres opens the PostgreSQL store; a URL that does not parse, a
// server that cannot be reached or refuses the login, and a schema newer
// than this binary are usage errors (exit code 2) naming the host.
func openPostgres(ctx context.Context, logger *slog.Logger, url string) (store.Store, error) {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := postgres.Open(octx, url, postgres.WithLogger(logger))
	if err != nil {
		return nil, usageError(fmt.Errorf("--database-url (%s): %w", postgres.Redact(url), err))
	}
	logger.Info("job store: PostgreSQL", "database", postgres.Redact(url))
	return st, nil
}

// envSecretKey returns the key in environment variable name, or nil when it
// is unset or empty; a value that is not a key is a usage error naming the
// variable (and never quoting it).
func envSecretKey(name string) (*secretbox.Key, error) {
	v := os.Getenv(name)
	if v == "" {
		return nil, nil
	}
	k, err := secretbox.ParseKey(v)
	if err != nil {
		return nil, usageError(fmt.Errorf("%s: %w", name, err))
	}
	return k, nil
}

func newCoordinatorCmd() *cobra.Command {
	var (
		listen, data, publicURL                    string
		databaseURL, secretKeyFile                 string
		longPoll, stale, grace, ack                time.Duration
		maxProvisioning                            int
		maxArtifactSize, maxTraceSize, minFreeDisk int64
		daemon                                     daemonFlags
		trustedProxies                             []string
	)
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run the job coordinator (GitLab runner API v4 + drover API v1)",
		Long: `Runs drover's coordinator: the job queue, GitLab's runner API v4 under /api/v4
(so GitLab Runner and drover managers can take jobs from it) and drover's
admin API under /api/v1 (submit and inspect jobs, create runner tokens).

State lives in an SQLite database under --data, with job logs as files
beside it. With --database-url postgres://user@host/db (also
DROVER_DATABASE_URL) the queue, job logs and tokens live in PostgreSQL
instead, and several coordinators on one database serve the same runners
behind one address (any HTTP load balancer): a job is handed out once, a
job submitted on one wakes a runner long-polling on another, and while the
database is unreachable requests are answered 503 with Retry-After. The
schema is created or migrated at start.

On first start an admin token is written to DATA/admin-token (mode 0600;
with PostgreSQL it is the database's, the same for every coordinator);
DROVER_ADMIN_TOKEN overrides it. Metrics: /metrics (with PostgreSQL also
pool use and query latency); health: /health/live, /health/ready (which
checks the database and names it).

Connections: a request must arrive whole within 60 s and its headers
within 10 s (64 KiB at most); a held long poll's answer may take longer.
A client address may hold --max-conns-per-client connections at once and
all clients together three quarters of the open-file limit; connections
over a cap are answered 429 or 503 at once and closed, logged once a minute
per address and counted in drover_coordinator_connections_rejected_total.

Job variables are sealed (AES-256-GCM) before they are stored, so a copy
of the database reveals none of them. The key is DROVER_SECRET_KEY (32
bytes as base64 or hex), else the file --secret-key-file (default
DATA/secret-key, created with a random key, mode 0600, on first start).
The database records the key's id: a coordinator with another key refuses
to start, so coordinators sharing a PostgreSQL database need the same key.
To change keys, start with the new key and the old one as
DROVER_SECRET_KEY_OLD (or in the key file's name + ".old"): values sealed
with the old key still open, new ones are sealed with the new key.

Artifacts that jobs upload (POST /api/v4/jobs/:id/artifacts) are kept in
DATA/artifacts, up to --max-artifact-size each (larger uploads are answered
413), until their expire_in passes (30 days unless the job says otherwise);
download them with drover artifacts JOB_ID. Coordinators sharing a
PostgreSQL database need DATA/artifacts on a shared file system.

A job's log may grow to --max-trace-size bytes (100 MiB, as GitLab's
limit); the PATCH that would take it past is refused as GitLab refuses it
(403), and the job fails with trace_size_exceeded and a last line in its
log saying so. A runner's own output_limit (4 MiB by default) usually cuts
the log first.

While the data directory's disk has less than --min-free-disk bytes free
(1 GiB by default; 0 turns the guard off), artifact uploads and, with
SQLite, trace PATCHes are answered 507 Insufficient Storage (runners send
them again later) and /health/ready is 503 saying how much is free: the
database and the files already taken keep the room they need.

The web UI is served at / on the same address: the jobs, filtered by
status and project, and each job's log as it runs, its timeline, cancel
and downloads. Sign in with the admin token (the form at /login, or a link
/login?token=ADMIN_TOKEN&next=/jobs); scripts may send it as
Authorization: Bearer. DATA/viewer-token (or DROVER_VIEWER_TOKEN) signs in
read-only: every page, no cancel, retry, pause or delete.

TLS: with --tls-cert and --tls-key (PEM files, read again when they
change) every API and the web UI are served over HTTPS only, TLS 1.2 or
newer, and the session cookie is Secure. Behind a proxy that terminates
TLS, name it in --trusted-proxies: its X-Forwarded-Proto: https then makes
the cookie Secure and job URLs https (from anyone else the header is
ignored). --metrics-token-file makes /metrics require that token as
Authorization: Bearer; the health endpoints stay open.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, reg, err := daemon.start(cmd.ErrOrStderr(), "drover_coordinator_errors_total")
			if err != nil {
				return err
			}
			if maxArtifactSize <= 0 {
				return usageError(fmt.Errorf("--max-artifact-size %d: want a positive number of bytes", maxArtifactSize))
			}
			if maxTraceSize <= 0 {
				return usageError(fmt.Errorf("--max-trace-size %d: want a positive number of bytes", maxTraceSize))
			}
			if minFreeDisk < 0 {
				return usageError(fmt.Errorf("--min-free-disk %d: want a number of bytes, or 0 for no guard", minFreeDisk))
			}
			if minFreeDisk == 0 {
				minFreeDisk = -1 // Config's "no guard"
			}
			sec, err := daemon.serve.load(logger)
			if err != nil {
				return err
			}
			if sec.proxies, err = httpserver.ParseTrustedProxies(trustedProxies); err != nil {
				return usageError(fmt.Errorf("--trusted-proxies: %w", err))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if databaseURL == "" {
				databaseURL = os.Getenv("DROVER_DATABASE_URL")
			}
			// Bind first: a taken port is an error before anything else
			// happens (and before anything says it is ready).
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usageError(fmt.Errorf("--listen %s: %w", listen, err))
			}
			defer ln.Close()
			key, err := envSecretKey("DROVER_SECRET_KEY")
			if err != nil {
				return err
			}
			oldKey, err := envSecretKey("DROVER_SECRET_KEY_OLD")
			if err != nil {
				return err
			}
			var oldKeys []*secretbox.Key
			if oldKey != nil {
				oldKeys = []*secretbox.Key{oldKey}
			}
			var st store.Store
			if databaseURL != "" {
				pg, err := openPostgres(ctx, logger, databaseURL)
				if err != nil {
					return err
				}
				st = pg
			}
			c, err := coordinator.New(ctx, logger, coordinator.Config{
				Store:                  st,
				DataDir:                data,
				AdminToken:             os.Getenv("DROVER_ADMIN_TOKEN"),
				ViewerToken:            os.Getenv("DROVER_VIEWER_TOKEN"),
				LongPollTimeout:        longPoll,
				StaleTimeout:           stale,
				TimeoutGrace:           grace,
				PublicURL:              publicURL,
				AckTimeout:             ack,
				MaxProvisioningRetries: maxProvisioning,
				Registerer:             reg,
				SecretKey:              key,
				SecretKeyFile:          secretKeyFile,
				OldSecretKeys:          oldKeys,
				MaxArtifactSize:        maxArtifactSize,
				MaxTraceSize:           maxTraceSize,
				MinFreeDisk:            minFreeDisk,
			})
			if errors.Is(err, store.ErrSchemaTooNew) {
				// As for PostgreSQL: nothing to retry, the wrong binary.
				return usageError(err)
			}
			if err != nil {
				return err
			}
			defer c.Close()
			scheme := "http"
			if sec.tls != nil {
				scheme = "https"
			}
			logger.Info("web UI", "url", scheme+"://"+ln.Addr().String()+"/", "sign_in", "with the admin token, or open /login?token=ADMIN_TOKEN")
			return serveRunnerAPI(ctx, logger, reg, "coordinator", c, ln, daemon.maxConnsPerClient, sec, "data", data)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "address to listen on (host:port)")
	f.StringVar(&data, "data", "./.drover", "data directory (SQLite database, job logs, admin token)")
	f.StringVar(&databaseURL, "database-url", "", "PostgreSQL URL (postgres://user:pass@host:5432/db) to keep the queue in instead of SQLite; default $DROVER_DATABASE_URL")
	f.StringVar(&secretKeyFile, "secret-key-file", "", "file holding the key that seals job variables at rest, created on first start (default DATA/secret-key); $DROVER_SECRET_KEY overrides it")
	f.StringVar(&publicURL, "public-url", "", "URL runners and users reach this coordinator at (default: taken from each request's Host)")
	f.DurationVar(&longPoll, "long-poll-timeout", 50*time.Second, "how long a jobs/request with a current last_update is held waiting for a job")
	f.DurationVar(&stale, "stale-timeout", 10*time.Minute, "a running job whose runner has been silent this long fails with runner_system_failure")
	f.DurationVar(&grace, "timeout-grace", 5*time.Minute, "extra time past a job's timeout before the coordinator fails it itself")
	f.DurationVar(&ack, "ack-timeout", 60*time.Second, "two-phase start: a job handed to a runner that announces two_phase_job_commit goes back to the queue when the runner sends no keep-alive or accept for this long")
	f.IntVar(&maxProvisioning, "max-provisioning-retries", 3, "two-phase start: after this many declines or expired deadlines a job fails with runner_provisioning_timeout")
	f.Int64Var(&maxArtifactSize, "max-artifact-size", coordinator.DefaultMaxArtifactSize, "largest artifact a job may upload, in bytes (GitLab's default: 100 MiB); larger uploads are answered 413")
	f.Int64Var(&maxTraceSize, "max-trace-size", coordinator.DefaultMaxTraceSize, "largest log a job may have, in bytes (GitLab's default: 100 MiB); the PATCH that would pass it is answered 403 and the job fails with trace_size_exceeded")
	f.Int64Var(&minFreeDisk, "min-free-disk", coordinator.DefaultMinFreeDisk, "free space, in bytes, kept on the data directory's disk: under it trace PATCHes and artifact uploads are answered 507 and /health/ready is 503; 0: no guard")
	daemon.define(f, "the APIs and the web UI")
	f.StringSliceVar(&trustedProxies, "trusted-proxies", nil, "addresses or CIDR prefixes of reverse proxies whose X-Forwarded-Proto is believed (the session cookie is Secure, job URLs https, when it says https); from other clients it is ignored")
	return cmd
}
