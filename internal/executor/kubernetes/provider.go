package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor"
)

// DefaultGracePeriod is how long a cancelled or timed-out stage's
// processes get between SIGTERM and SIGKILL: short, so that a cancel ends
// the job within about a second even when the job ignores SIGTERM (as the
// docker executor's).
const DefaultGracePeriod = time.Second

// Options configure the provider.
type Options struct {
	// Lookup returns the [runners.kubernetes] of a runner; Runners.Lookup
	// is the usual one. Required.
	Lookup func(executor.Settings) (*Config, error)
	// Configs lists every kubernetes runner's configuration, for Sweep;
	// Runners.All is the usual one. nil: Sweep does nothing.
	Configs func() []*Config
	// GracePeriod: between SIGTERM and SIGKILL; 0 = DefaultGracePeriod.
	GracePeriod time.Duration
	Logger      *slog.Logger
}

// Provider creates kubernetes executors. It reserves no capacity of its
// own: the manager's concurrent and limit bound the jobs, the cluster's
// scheduler the pods.
type Provider struct {
	o Options

	mu      sync.Mutex
	clients map[clientKey]*client

	cleanups sync.WaitGroup
}

// client is the API connection of one cluster configuration.
type client struct {
	cfg *rest.Config
	cs  kubernetes.Interface
}

// clientKey identifies a connection: the settings that make it.
type clientKey struct{ host, token, ca, cert, key, context string }

var (
	_ executor.Provider = (*Provider)(nil)
	_ executor.Sweeper  = (*Provider)(nil)
)

// NewProvider returns the kubernetes executor's provider.
func NewProvider(o Options) (*Provider, error) {
	if o.Lookup == nil {
		return nil, errors.New("kubernetes executor: no runner lookup")
	}
	if o.GracePeriod <= 0 {
		o.GracePeriod = DefaultGracePeriod
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{o: o, clients: map[clientKey]*client{}}, nil
}

// CanCreate reports true: whether a runner's cluster answers is checked at
// start (Check) and per job.
func (p *Provider) CanCreate() bool { return true }

// Create returns a new, unprepared executor.
func (p *Provider) Create() executor.Executor {
	return &Executor{prov: p, GracePeriod: p.o.GracePeriod}
}

// Acquire reserves nothing.
func (p *Provider) Acquire(context.Context, executor.Settings) (executor.Data, error) {
	return nil, nil
}

// Release gives back nothing.
func (p *Provider) Release(context.Context, executor.Settings, executor.Data) {}

// Features sets what the kubernetes executor and drover's scripts support.
func (p *Provider) Features(f *api.FeaturesInfo) {
	executor.ScriptFeatures(f)
	f.Image = true
	f.Services = true
	f.ServiceVariables = true
	f.ServiceMultipleAliases = true
}

// ConfigInfo returns nil.
func (p *Provider) ConfigInfo(executor.Settings) map[string]any { return nil }

// DefaultShell is "": the shell is detected in the job's image.
func (p *Provider) DefaultShell() string { return "" }

// Wait waits until the pods of finished jobs are deleted, or ctx ends.
func (p *Provider) Wait(ctx context.Context) error {
	if err := executor.WaitGroup(ctx, &p.cleanups); err != nil {
		return fmt.Errorf("deleting the pods of finished jobs: %w", err)
	}
	return nil
}

// client returns the API connection of c, made the first time.
func (p *Provider) client(c *Config) (*client, error) {
	k := clientKey{c.Host, c.BearerToken, c.CAFile, c.CertFile, c.KeyFile, c.Context}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cl, ok := p.clients[k]; ok {
		return cl, nil
	}
	rc, err := RESTConfig(c)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	cl := &client{cfg: rc, cs: cs}
	p.clients[k] = cl
	return cl, nil
}

// RESTConfig is how the executor reaches the API server: host with a
// bearer token, a CA and maybe a client certificate; else the in-cluster
// configuration (a manager in a pod); else the kubeconfig (KUBECONFIG or
// ~/.kube/config, at context when set).
func RESTConfig(c *Config) (*rest.Config, error) {
	var rc *rest.Config
	switch {
	case c.Host != "":
		rc = &rest.Config{Host: c.Host, BearerToken: c.BearerToken}
		rc.TLSClientConfig = rest.TLSClientConfig{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "" && c.Context == "":
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("kubernetes in-cluster configuration: %w", err)
		}
	default:
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.Context})
		var err error
		if rc, err = cc.ClientConfig(); err != nil {
			return nil, fmt.Errorf("kubernetes: no host set and no usable kubeconfig: %w", err)
		}
	}
	rc.UserAgent = "drover"
	// Stage output streams and watches are long; the API calls of a job
	// are few: the defaults (5 QPS) would slow many jobs at once.
	rc.QPS, rc.Burst = 50, 100
	return rc, nil
}

// Ping asks the API server of c for its version.
func Ping(ctx context.Context, c *Config) error {
	rc, err := RESTConfig(c)
	if err != nil {
		return err
	}
	rc.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("kubernetes API server %s does not answer: %w", rc.Host, err)
	}
	return ctx.Err()
}

// Check reports whether the API server of every kubernetes runner of cfg
// answers: a runner whose cluster is unreachable is not started. The error
// names the runner's file, line and host key.
func Check(ctx context.Context, file string, cfg *config.Config, rs *Runners) error {
	return executor.CheckRunners(file, cfg, Name, rs.Lookup, func(c *Config) error { return Ping(ctx, c) })
}

// Runners holds the [runners.kubernetes] of every kubernetes runner, kept
// in step with config.toml.
type Runners struct {
	t executor.RunnerTable[*Config]
}

// ErrUnknownRunner is returned (wrapped) by Runners.Lookup for a runner
// that has no kubernetes configuration.
var ErrUnknownRunner = errors.New("no [runners.kubernetes] for this runner")

// Apply parses the [runners.kubernetes] of every kubernetes runner of cfg
// and, when all are right, makes them the table's.
func (rs *Runners) Apply(file string, cfg *config.Config) ([]config.Warning, error) {
	return rs.t.Load(cfg, func(r *config.RunnerConfig) (*Config, []config.Warning, error) {
		c, w, err := ParseConfig(file, r)
		if err != nil {
			return nil, w, err
		}
		c.ShortToken = api.ShortToken(r.Token)
		return c, w, nil
	}, Name)
}

// Lookup returns the configuration of the runner of s.
func (rs *Runners) Lookup(s executor.Settings) (*Config, error) {
	c, ok := rs.t.Get(s.ShortToken)
	if !ok {
		return nil, fmt.Errorf("runner %s: %w", s.RunnerName, ErrUnknownRunner)
	}
	return c, nil
}

// All returns every kubernetes runner's configuration.
func (rs *Runners) All() []*Config { return rs.t.All() }
