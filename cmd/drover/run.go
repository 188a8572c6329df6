package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/autoscale/runnerpool"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/custom"
	"github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/executor/dockerfleet"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/executor/kubernetes"
	"github.com/drover-ci/drover/internal/executor/parallels"
	"github.com/drover-ci/drover/internal/executor/qemu"
	"github.com/drover-ci/drover/internal/executor/shell"
	"github.com/drover-ci/drover/internal/executor/sshexec"
	"github.com/drover-ci/drover/internal/executor/virtualbox"
	"github.com/drover-ci/drover/internal/executor/vm"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/fleet/engine"
	"github.com/drover-ci/drover/internal/httpserver"
	"github.com/drover-ci/drover/internal/manager"
	"github.com/drover-ci/drover/internal/sshx"
	"github.com/drover-ci/drover/internal/web"
)

// tables are the per-runner executor settings drover run keeps in step
// with config.toml.
type tables struct {
	// runners holds the autoscaler pools of the runners with executor
	// "instance", "docker-autoscaler" or "docker+machine" (none: such a
	// runner gets no job).
	runners *instance.Runners
	// hostKeys are the autoscaled instances' host keys, shared with their
	// instance_ready_command.
	hostKeys *sshx.TOFU
	// dockers holds the [runners.docker] of the docker runners.
	dockers *docker.Runners
	// ssh holds the [runners.ssh] of the ssh runners.
	ssh *sshexec.Runners
	// custom holds the [runners.custom] of the custom runners.
	custom *custom.Runners
	// kube holds the [runners.kubernetes] of the kubernetes runners.
	kube *kubernetes.Runners
	// qemu holds the [runners.qemu] of the qemu runners.
	qemu *vm.Runners
	// vbox holds the [runners.virtualbox] of the virtualbox runners.
	vbox *vm.Runners
	// prl holds the [runners.parallels] of the parallels runners.
	prl *vm.Runners
}

// newTables returns empty tables; with dir set the host keys learnt on
// first use are kept in files there, so they survive a restart.
func newTables(dir string) *tables {
	t := &tables{runners: &instance.Runners{}, hostKeys: &sshx.TOFU{}, dockers: &docker.Runners{}, ssh: &sshexec.Runners{HostKeys: &sshx.TOFU{}}, custom: &custom.Runners{}, kube: &kubernetes.Runners{}}
	t.qemu = qemu.NewRunners(nil)
	t.qemu.HostKeys = &sshx.TOFU{}
	// The VM executors share one host key store: a base's key is the
	// base's whichever executor runs it.
	t.vbox = virtualbox.NewRunners()
	t.vbox.HostKeys = t.qemu.HostKeys
	t.prl = parallels.NewRunners()
	t.prl.HostKeys = t.qemu.HostKeys
	if dir != "" {
		t.qemu.HostKeys.Path = filepath.Join(dir, ".drover-vm-host-keys")
		t.hostKeys.Path = filepath.Join(dir, ".drover-instance-host-keys")
		t.ssh.HostKeys.Path = filepath.Join(dir, ".drover-ssh-host-keys")
	}
	return t
}

// apply reads the executor sections of cfg ([runners.docker],
// [runners.ssh], [runners.custom], ...) into t and returns their
// warnings; its errors are the configuration's (exit code 2).
func (t *tables) apply(ctx context.Context, path string, cfg *config.Config) ([]config.Warning, error) {
	var all []config.Warning
	for _, apply := range []func() ([]config.Warning, error){
		func() ([]config.Warning, error) { return t.dockers.Apply(path, cfg) },
		func() ([]config.Warning, error) { return t.ssh.Apply(path, cfg) },
		func() ([]config.Warning, error) { return t.kube.Apply(path, cfg) },
		func() ([]config.Warning, error) { return t.qemu.Apply(ctx, path, cfg) },
		func() ([]config.Warning, error) { return t.vbox.Apply(ctx, path, cfg) },
		func() ([]config.Warning, error) { return t.prl.Apply(ctx, path, cfg) },
		func() ([]config.Warning, error) { return nil, t.custom.Apply(path, cfg) },
	} {
		warns, err := apply()
		all = append(all, warns...)
		if err != nil {
			return all, err
		}
	}
	return all, nil
}

// providers lists the executors this build offers, over t (nil: empty
// tables); engines dials the engines of docker runners, fleetEngines
// those of autoscaled instances (nil: one of its own).
func providers(logger *slog.Logger, t *tables, engines docker.Dialer, fleetEngines *engine.Pool) map[string]executor.Provider {
	if t == nil {
		t = newTables("")
	}
	runners, hostKeys, dockers := t.runners, t.hostKeys, t.dockers
	if fleetEngines == nil {
		fleetEngines = engine.New(hostKeys, nil, logger)
	}
	inst, err := instance.NewProvider(instance.Options{Lookup: runners.Lookup, HostKeys: hostKeys})
	if err != nil {
		panic(err) // only for a nil Lookup
	}
	dock, err := docker.NewProvider(docker.Options{Lookup: dockers.Lookup, Configs: dockers.All, Dialer: engines, Logger: logger})
	if err != nil {
		panic(err) // only for a nil Lookup
	}
	cust, err := custom.NewProvider(custom.Options{Lookup: t.custom.Lookup})
	if err != nil {
		panic(err) // only for a nil Lookup
	}
	kube, err := kubernetes.NewProvider(kubernetes.Options{Lookup: t.kube.Lookup, Configs: t.kube.All, Logger: logger})
	if err != nil {
		panic(err) // only for a nil Lookup
	}
	provs := map[string]executor.Provider{
		kubernetes.Name: kube,
		custom.Name:     cust,
		"shell":         shell.NewProvider(),
		instance.Name:   inst,
		docker.Name:     dock,
		sshexec.Name:    sshexec.NewProvider(t.ssh),
		qemu.Name:       vm.NewProvider(t.qemu),
		virtualbox.Name: vm.NewProvider(t.vbox),
		parallels.Name:  vm.NewProvider(t.prl),
	}
	for _, name := range []string{docker.NameAutoscaler, docker.NameMachine} {
		p, err := dockerfleet.NewProvider(name, dockerfleet.Options{
			Docker: dock, Runners: runners.Lookup, Configs: dockers.Lookup, Engines: fleetEngines, Logger: logger,
		})
		if err != nil {
			panic(err) // only for missing options
		}
		provs[name] = p
	}
	return provs
}

// fleetHooks are the pools' hooks of the executors stacked on autoscaled
// instances: the engine check and warm-up of a new instance, and
// forgetting the engine connection of one that is gone.
func fleetHooks(o *runnerpool.Options, provs map[string]executor.Provider) {
	stacked := func(exec string) *dockerfleet.Provider {
		p, _ := provs[exec].(*dockerfleet.Provider)
		return p
	}
	o.InstanceCheck = func(sp *runnerpool.Spec) func(context.Context, fleet.ConnectInfo) error {
		if p := stacked(sp.Executor); p != nil {
			return p.ReadyCheck(sp.ShortToken, sp.Connector)
		}
		return nil
	}
	o.InstanceGone = func(shortToken, id string) {
		for _, name := range []string{docker.NameAutoscaler, docker.NameMachine} {
			if p := stacked(name); p != nil {
				p.Forget(shortToken, id)
			}
		}
	}
}

// providerNames lists the executors this build offers, sorted.
func providerNames() string {
	names := slices.Sorted(maps.Keys(providers(nil, nil, nil, nil)))
	return strings.Join(names, ", ")
}

// loadConfig loads path, logs its warnings and turns its errors into
// exit code 2.
func loadConfig(logger *slog.Logger, path string) (*config.Config, error) {
	cfg, warns, err := config.Load(path)
	logWarnings(logger, warns)
	if err != nil {
		return nil, usageError(err)
	}
	return cfg, nil
}

// logWarnings logs config warnings, or prints them to stderr when there is
// no logger yet.
func logWarnings(logger *slog.Logger, warns []config.Warning) {
	for _, w := range warns {
		if logger != nil {
			logger.Warn(w.String())
		} else {
			fmt.Fprintln(os.Stderr, "warning:", w.String())
		}
	}
}

func newRunCmd() *cobra.Command {
	var cfgPath, logLevel, logFormat, workDir, onSigterm string
	var serve serveFlags
	var fleetf fleetFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the runner manager: take jobs from coordinators and run them",
		Long: `Runs the runner manager described by a GitLab-Runner-compatible config.toml.

Each [[runners]] entry polls its coordinator (url) with its token; at most
'concurrent' jobs run at once, at most 'limit' per runner, with at most
'request_concurrency' job requests in flight per runner.

Signals: SIGQUIT stops asking for jobs and waits for running ones (drain);
SIGTERM/SIGINT abort running jobs (reported as runner_interrupted) and exit,
a second one exits at once; with --on-sigterm=leave, when every running job
is kept in a job store ([runners.store]), SIGTERM/SIGINT exit at once instead
and leave the jobs running, for the next start of the manager (or another
manager on the same Redis store) to resume: what a manager in a Kubernetes
StatefulSet wants when its pod is deleted or rescheduled; SIGHUP reloads config.toml (it is also reloaded
when its modification time changes).

--working-directory makes drover run change to that directory before it
starts: relative builds_dir and cache_dir, and their defaults builds and
cache, are then there. A relative --config is still found from where drover
run started.

listen_address (config.toml) serves /metrics, the health endpoints and the
fleet page over plain HTTP, as GitLab Runner's does. --listen-tls-cert and
--listen-tls-key serve it over HTTPS instead (TLS 1.2 or newer, the files
read again when they change); --listen-metrics-token-file makes /metrics
require that token as Authorization: Bearer.

The fleet page (/fleet) and /debug/ take a sign-in: the token of
--listen-token-file (Authorization: Bearer, or the form at /fleet/login),
or, with --listen-url, the coordinator's: drover run reports that URL with
its requests and drover's coordinator links the fleet page from its
runners page, with a short-lived ticket signed with the runner's token.
With neither, the pages are open while listen_address is a loopback
address (127.0.0.1, localhost, ::1) and refused (403) on any other; the
health endpoints are always open. These are flags, not config.toml keys,
so that the file stays GitLab Runner's.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			// Files named relative to where drover run started, as --config.
			if err := serve.absolute(); err != nil {
				return err
			}
			if err := fleetf.absolute(); err != nil {
				return err
			}
			return enterWorkingDirectory(cmd, workDir)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The warnings wait for the logger, which the file configures.
			// Each is logged once per key per version of the file: warned
			// remembers them across reloads.
			warned := &config.WarnOnce{}
			cfg, warns, err := config.Load(cfgPath)
			if err != nil {
				logWarnings(nil, warns)
				return usageError(err)
			}
			if logLevel == "" {
				logLevel = cfg.LogLevel
			}
			if logFormat == "" {
				logFormat = cfg.LogFormat
			}
			logger, err := newLogger(cmd.ErrOrStderr(), logLevel, logFormat)
			if err != nil {
				logWarnings(nil, warns)
				return usageError(err)
			}
			reg := prometheus.NewRegistry()
			if logger, err = daemonMetrics(reg, logger, "gitlab_runner_errors_total", true); err != nil {
				return err
			}
			logWarnings(logger, warned.New(cfg, warns))
			systemID, err := systemIDFor(cfgPath)
			if err != nil {
				return err
			}
			sec, err := serve.load(logger)
			if err != nil {
				return err
			}
			access, err := fleetf.load()
			if err != nil {
				return err
			}
			connMetrics, err := httpserver.NewMetrics(reg, "manager")
			if err != nil {
				return err
			}
			t := newTables(filepath.Dir(cfgPath))
			dockers, engines := t.dockers, &docker.Clients{}
			defer engines.Close()
			warns, err = t.apply(cmd.Context(), cfgPath, cfg)
			logWarnings(logger, warned.New(cfg, warns))
			if err != nil {
				return usageError(err)
			}
			// A runner whose Docker engine does not answer is not started.
			if err := docker.Check(cmd.Context(), engines, cfgPath, cfg, dockers); err != nil {
				return err
			}
			// Nor one whose Kubernetes API server does not.
			if err := kubernetes.Check(cmd.Context(), cfgPath, cfg, t.kube); err != nil {
				return err
			}
			if err := dockerfleet.Check(cfgPath, cfg, dockers); err != nil {
				return usageError(err)
			}
			runners, hostKeys := t.runners, t.hostKeys
			fleetEngines := engine.New(hostKeys, nil, logger)
			defer fleetEngines.Close()
			provs := providers(logger, t, engines, fleetEngines)
			if dp, ok := provs[docker.Name].(*docker.Provider); ok {
				if err := reg.Register(dp.Collector()); err != nil {
					return err
				}
			}
			po := runnerpool.Options{
				ConfigPath: cfgPath, Logger: logger, Registerer: reg, Runners: runners, HostKeys: hostKeys,
				SystemID: systemID, Warned: warned,
			}
			fleetHooks(&po, provs)
			pools, err := runnerpool.New(po)
			if err != nil {
				return err
			}
			for _, name := range []string{docker.NameAutoscaler, docker.NameMachine} {
				if fp, ok := provs[name].(*dockerfleet.Provider); ok {
					fp.SetKeepHeld(pools.KeepHeld)
				}
			}
			if ip, ok := provs[instance.Name].(*instance.Provider); ok {
				ip.SetKeepHeld(pools.KeepHeld)
			}
			m, err := manager.New(logger, manager.Options{
				Config:     cfg,
				ConfigPath: cfgPath,
				Providers:  provs,
				SystemID:   systemID,
				Version:    version,
				FleetURL:   access.url,
				// The cache and artifact stages of the shell executor run
				// this very binary's helper.
				HelperCommand: helperCommand(),
				Registry:      reg,
				Warned:        warned,
			})
			if err != nil {
				return usageError(err)
			}
			if err := pools.Apply(cmd.Context(), cfg); err != nil {
				return usageError(err)
			}
			if onSigterm != "abort" && onSigterm != "leave" {
				return usageError(fmt.Errorf("--on-sigterm %q: want abort or leave", onSigterm))
			}
			err = runManager(cmd.Context(), logger, m, connMetrics, sec, access.signIn, systemID, pools, t, cfgPath, cfg, onSigterm == "leave")
			ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), m.Config().ShutdownTimeoutDuration())
			defer cancel()
			// Jobs' containers first: those on autoscaled instances need
			// the instances, which the pools may delete.
			if dp, ok := provs[docker.Name].(*docker.Provider); ok {
				if werr := dp.Wait(ctx); werr != nil {
					logger.Warn("containers of finished jobs not all removed; the next start removes them", "err", werr)
				}
				dp.RemoveStandbys(ctx)
			}
			if kp, ok := provs[kubernetes.Name].(*kubernetes.Provider); ok {
				if werr := kp.Wait(ctx); werr != nil {
					logger.Warn("pods of finished jobs not all deleted; the next start deletes them", "err", werr)
				}
			}
			for _, name := range []string{docker.NameAutoscaler, docker.NameMachine} {
				if fp, ok := provs[name].(*dockerfleet.Provider); ok {
					if werr := fp.Wait(ctx); werr != nil {
						logger.Warn("slots of finished jobs not all given back", "executor", name, "err", werr)
					}
				}
			}
			if perr := pools.Shutdown(ctx); perr != nil {
				logger.Error("autoscaler pools not shut down cleanly", "err", perr)
			}
			return err
		},
	}
	f := cmd.Flags()
	configFlag(f, &cfgPath, "config file")
	f.StringVarP(&workDir, "working-directory", "d", "", "change to this directory first: relative builds_dir and cache_dir are there")
	f.StringVar(&logLevel, "log-level", "", "debug, info, warn or error (default: log_level of config.toml)")
	f.StringVar(&onSigterm, "on-sigterm", "abort", "abort: SIGTERM/SIGINT abort running jobs; leave: exit at once and leave them to be resumed, when a job store keeps every one")
	f.StringVar(&logFormat, "log-format", "", "runner, text or json (default: log_format of config.toml)")
	serve.define(f, "listen-", "listen_address")
	fleetf.define(f)
	return cmd
}

// runManager runs m with signal handling, config reloads and the
// listen_address server.
func runManager(parent context.Context, logger *slog.Logger, m *manager.Manager, connMetrics *httpserver.Metrics, sec serveSecurity,
	signIn func(*manager.Manager, string, func() bool) web.FleetSignIn, systemID string,
	pools *runnerpool.Set, t *tables, cfgPath string, cfg *config.Config, leave bool) error {
	ctx, abort := context.WithCancel(parent)
	defer abort()

	ms := &metricsServer{log: logger, metrics: connMetrics, tls: sec.tls}
	si := signIn(m, systemID, ms.loopback.Load)
	ms.signIn = si.Token != "" || si.TicketKeys != nil
	handler, err := listenHandler(logger, m, pools, si)
	if err != nil {
		return err
	}
	ms.handler = sec.handler(handler)
	if err := ms.apply(cfg.ListenAddress); err != nil {
		return usageError(fmt.Errorf("%s: listen_address: %w", cfgPath, err))
	}
	defer ms.close()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// Reloads: on SIGHUP and when the file changes. The pools and
	// executor settings first: a new runner must have them before the
	// manager asks for its jobs; listen_address last.
	hup := make(chan struct{}, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	defer func() { stopWatch(); <-watched }() // before ms.close: no reload moves it after
	go func() {
		defer close(watched)
		m.WatchConfig(watchCtx, manager.ConfigWatch{
			Reload: hup,
			Prepare: func(ctx context.Context, next *config.Config) ([]config.Warning, error) {
				warns, err := t.apply(ctx, cfgPath, next)
				if err != nil {
					return warns, err
				}
				return warns, pools.Apply(ctx, next)
			},
			Applied: func(next *config.Config) {
				if err := ms.apply(next.ListenAddress); err != nil {
					logger.Error("listen_address not changed; still listening where it was", "listen_address", next.ListenAddress, "addr", ms.addr, "err", err)
				}
			},
		})
	}()
	go func() {
		aborting := false
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-sigs:
				switch s {
				case syscall.SIGHUP:
					select {
					case hup <- struct{}{}:
					default: // one is pending already
					}
				case syscall.SIGQUIT:
					m.Drain()
				default:
					if aborting {
						logger.Error("second stop signal: exiting now")
						os.Exit(1)
					}
					if leave && m.UnresumableJobs() == 0 {
						// As if killed: the job store has every running
						// job, and the jobs' environments outlive this
						// process. The next manager resumes them.
						logger.Warn("stop signal: exiting and leaving the running jobs to be resumed from the job store", "signal", s.String(), "running", m.RunningJobs())
						os.Exit(0)
					}
					aborting = true
					logger.Warn("stop signal: aborting running jobs", "signal", s.String(), "running", m.RunningJobs(), "not_resumable", m.UnresumableJobs())
					abort()
				}
			}
		}
	}()
	err = m.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Connection caps of the manager's listen_address: what reaches it is a
// Prometheus scraper, health probes and someone with curl, a few
// connections each; the manager's file descriptors are for its jobs.
const (
	listenMaxConnsPerClient = 32
	listenMaxConns          = 256
)

// metricsServer serves the manager's listen_address (/metrics, health),
// moved to a new address on reload.
type metricsServer struct {
	log     *slog.Logger
	handler http.Handler
	// signIn is set when the fleet page has a way to sign in; without
	// one it is open only while loopback is set (see listenHandler).
	signIn   bool
	loopback atomic.Bool
	metrics  *httpserver.Metrics // shared by the servers that follow one another
	tls      *tls.Config         // nil = plain HTTP
	addr     string              // as configured; "" = not serving
	bound    net.Addr            // where it serves
	srv      *httpserver.Server
}

// apply serves on addr ("" = nowhere) if that is not where it serves now:
// the new address is bound before the old one is let go, so a bad new
// address leaves the old one serving.
func (ms *metricsServer) apply(addr string) error {
	if addr == ms.addr {
		return nil
	}
	var (
		next  *httpserver.Server
		bound net.Addr
	)
	if addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		next = httpserver.New(ms.handler, httpserver.Options{
			MaxConnsPerClient: listenMaxConnsPerClient, MaxConns: listenMaxConns,
			Logger: ms.log, Metrics: ms.metrics, TLS: ms.tls,
		})
		bound = ln.Addr()
		// Before the new address serves: until the old one closes, it
		// may be told it is not on loopback (refused), never the reverse.
		ms.loopback.Store(isLoopback(bound))
		go func() { _ = next.Serve(ln) }()
		ms.log.Info("metrics and health listening", append([]any{"addr", bound.String(), "scheme", next.Scheme(), "fleet_sign_in", ms.signIn}, listenAttrs(next)...)...)
		if !ms.signIn && !isLoopback(bound) {
			ms.log.Warn("listen_address is not a loopback address and the fleet page has no sign-in: /fleet and /debug/ answer 403; "+
				"start drover run with --listen-token-file or --listen-url to serve them", "addr", bound.String())
		}
	}
	if ms.srv != nil {
		ms.srv.Close()
		ms.log.Info("metrics and health: stopped listening", "addr", ms.addr)
	}
	ms.addr, ms.bound, ms.srv = addr, bound, next
	return nil
}

func (ms *metricsServer) close() {
	if ms.srv != nil {
		ms.srv.Close()
	}
}

// helperCommand is the shell words that run this binary's `drover
// helper`, or "" when its path is unknown.
func helperCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return "'" + strings.ReplaceAll(exe, "'", `'\''`) + "' helper"
}
