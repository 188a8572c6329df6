package docker

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/drover-ci/drover/internal/dockerimage"
)

// Engine is the part of the Docker engine API the executor uses. The
// engine is a parameter of every job (a runner's `host`), never a global:
// a later executor points it at an engine on an autoscaled instance.
type Engine interface {
	Ping(ctx context.Context) (types.Ping, error)
	// ClientVersion is the API version the client speaks to the engine
	// (negotiated by the first call).
	ClientVersion() string

	ImageInspect(ctx context.Context, ref string, opts ...dockerclient.ImageInspectOption) (image.InspectResponse, error)
	ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error)

	ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, net *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerStop(ctx context.Context, id string, opts container.StopOptions) error
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error)
	ContainerWait(ctx context.Context, id string, cond container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	CopyToContainer(ctx context.Context, id, dst string, content io.Reader, opts container.CopyToContainerOptions) error
	CopyFromContainer(ctx context.Context, id, src string) (io.ReadCloser, container.PathStat, error)

	ContainerAttach(ctx context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error)

	ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecStart(ctx context.Context, execID string, opts container.ExecStartOptions) error
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)

	NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error)
	NetworkRemove(ctx context.Context, id string) error
	NetworkList(ctx context.Context, opts network.ListOptions) ([]network.Summary, error)
	NetworkInspect(ctx context.Context, id string, opts network.InspectOptions) (network.Inspect, error)
	NetworkConnect(ctx context.Context, id, container string, cfg *network.EndpointSettings) error
	NetworkDisconnect(ctx context.Context, id, container string, force bool) error

	VolumeCreate(ctx context.Context, opts volume.CreateOptions) (volume.Volume, error)
	VolumeRemove(ctx context.Context, id string, force bool) error
	VolumeList(ctx context.Context, opts volume.ListOptions) (volume.ListResponse, error)

	Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error)

	// The dockerimage package builds the helper image through it.
	dockerimage.BuildAPI
}

// Dialer returns the engine of a runner's [runners.docker] (its host and
// TLS settings). Engines are shared: one client per distinct endpoint.
type Dialer interface {
	Engine(c *Config) (Engine, error)
}

// Clients is the default Dialer: Docker API clients by endpoint, made
// once and kept. The zero value is ready.
type Clients struct {
	mu sync.Mutex
	m  map[string]*dockerclient.Client
}

// Engine returns the client of c's endpoint: host (else DOCKER_HOST, else
// the local socket), with TLS from tls_cert_path (ca.pem, cert.pem,
// key.pem) when tls_verify is set.
func (cs *Clients) Engine(c *Config) (Engine, error) {
	key := fmt.Sprintf("%s|%t|%s", c.Host, c.TLSVerify, c.TLSCertPath)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cli, ok := cs.m[key]; ok {
		return cli, nil
	}
	opts := []dockerclient.Opt{dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation()}
	if c.Host != "" {
		opts = append(opts, dockerclient.WithHost(c.Host))
	}
	if c.TLSVerify || c.TLSCertPath != "" {
		dir := c.TLSCertPath
		if dir == "" {
			dir = os.Getenv("DOCKER_CERT_PATH")
		}
		if dir == "" {
			return nil, fmt.Errorf("docker host %s: tls_verify needs tls_cert_path (a directory with ca.pem, cert.pem and key.pem)", hostName(c))
		}
		opts = append(opts, dockerclient.WithTLSClientConfig(
			filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")))
	}
	cli, err := dockerclient.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker host %s: %w", hostName(c), err)
	}
	if cs.m == nil {
		cs.m = map[string]*dockerclient.Client{}
	}
	cs.m[key] = cli
	return cli, nil
}

// Close closes every client.
func (cs *Clients) Close() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for k, cli := range cs.m {
		_ = cli.Close()
		delete(cs.m, k)
	}
	return nil
}

// hostName names the engine of c in messages.
func hostName(c *Config) string {
	if c.Host != "" {
		return c.Host
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h + " (DOCKER_HOST)"
	}
	return dockerclient.DefaultDockerHost
}

// pingTimeout bounds the check that an engine answers.
const pingTimeout = 10 * time.Second

// Ping checks that the engine of c answers; the error names its host.
func Ping(ctx context.Context, d Dialer, c *Config) error {
	eng, err := d.Engine(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := eng.Ping(ctx); err != nil {
		return fmt.Errorf("docker host %s does not answer: %w", hostName(c), err)
	}
	return nil
}

// labelFilter selects what carries every label of kv ("k=v" or "k").
func labelFilter(kv ...string) filters.Args {
	f := filters.NewArgs()
	for _, l := range kv {
		f.Add("label", l)
	}
	return f
}
