package docker

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
)

// Names of the spans that are not one engine call, in the trace of a
// job's engine work (tracedEngine).
const (
	// spanExec is a whole exec: create, attach, the command's run and its
	// exit code (the calls it is made of are traced too).
	spanExec = "exec"
	// spanBoot is a build container's start up to its boot line.
	spanBoot = "boot"
	// spanStandby is a job taking its slot's standby build container
	// instead of booting one (standby.go): a count, its duration zero.
	spanStandby = "standby"
	// spanStandbyHelper is a job taking its standby's helper container
	// instead of starting one: a count, its duration zero.
	spanStandbyHelper = "standby-helper"
	// spanSession is a stage run by a container's idle shell (see
	// shellSession): the command written to it, to the stage's end line.
	spanSession = "session"
)

// newEngineCalls is the histogram of the engine calls of every job:
// drover_docker_engine_call_duration_seconds by call (the Engine method,
// or spanExec, spanSession, spanBoot).
func newEngineCalls() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "drover_docker_engine_call_duration_seconds",
		Help: "Duration of the docker executor's calls to the Docker engine, by call: the engine API's (ContainerCreate, NetworkCreate...), " +
			"exec (a whole exec, to its exit code), session (a stage run by a container's idle shell, to its end) and boot (a build container's start to its first output line).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"call"})
}

// Collector returns the provider's metrics, for the manager's registry:
// drover_docker_engine_call_duration_seconds.
func (p *Provider) Collector() prometheus.Collector { return p.calls }

// tracedEngine is the Engine of one job: each call the job's work makes
// is timed, written to the job's log at debug level and observed in the
// provider's histogram. Calls that return a stream or channels (logs,
// attach, wait, events) are timed up to their return, not their end.
type tracedEngine struct {
	Engine
	logger *slog.Logger
	calls  *prometheus.HistogramVec
}

// traced wraps eng for a job logging to logger.
func (p *Provider) traced(eng Engine, logger *slog.Logger) Engine {
	if t, ok := eng.(*tracedEngine); ok {
		eng = t.Engine
	}
	return &tracedEngine{Engine: eng, logger: logger, calls: p.calls}
}

// untraced returns the engine below a job's trace: the key of what the
// provider keeps per engine.
func untraced(eng Engine) Engine {
	if t, ok := eng.(*tracedEngine); ok {
		return t.Engine
	}
	return eng
}

// span records a call named call that began at start and ended with err.
func (t *tracedEngine) span(call string, start time.Time, err error) {
	d := time.Since(start)
	t.calls.WithLabelValues(call).Observe(d.Seconds())
	if err != nil {
		t.logger.Debug("engine call", "call", call, "duration", d, "err", err)
		return
	}
	t.logger.Debug("engine call", "call", call, "duration", d)
}

// spanOf records span call of eng if it is a job's traced engine.
func spanOf(eng Engine, call string, start time.Time, err error) {
	if t, ok := eng.(*tracedEngine); ok {
		t.span(call, start, err)
	}
}

func (t *tracedEngine) ImageInspect(ctx context.Context, ref string, opts ...dockerclient.ImageInspectOption) (r image.InspectResponse, err error) {
	defer func(start time.Time) { t.span("ImageInspect", start, err) }(time.Now())
	return t.Engine.ImageInspect(ctx, ref, opts...)
}

func (t *tracedEngine) ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, net *network.NetworkingConfig, platform *ocispec.Platform, name string) (r container.CreateResponse, err error) {
	defer func(start time.Time) { t.span("ContainerCreate", start, err) }(time.Now())
	return t.Engine.ContainerCreate(ctx, cfg, host, net, platform, name)
}

func (t *tracedEngine) ContainerStart(ctx context.Context, id string, opts container.StartOptions) (err error) {
	defer func(start time.Time) { t.span("ContainerStart", start, err) }(time.Now())
	return t.Engine.ContainerStart(ctx, id, opts)
}

func (t *tracedEngine) ContainerStop(ctx context.Context, id string, opts container.StopOptions) (err error) {
	defer func(start time.Time) { t.span("ContainerStop", start, err) }(time.Now())
	return t.Engine.ContainerStop(ctx, id, opts)
}

func (t *tracedEngine) ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) (err error) {
	defer func(start time.Time) { t.span("ContainerRemove", start, err) }(time.Now())
	return t.Engine.ContainerRemove(ctx, id, opts)
}

func (t *tracedEngine) ContainerInspect(ctx context.Context, id string) (r container.InspectResponse, err error) {
	defer func(start time.Time) { t.span("ContainerInspect", start, err) }(time.Now())
	return t.Engine.ContainerInspect(ctx, id)
}

func (t *tracedEngine) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (r io.ReadCloser, err error) {
	defer func(start time.Time) { t.span("ContainerLogs", start, err) }(time.Now())
	return t.Engine.ContainerLogs(ctx, id, opts)
}

func (t *tracedEngine) CopyToContainer(ctx context.Context, id, dst string, content io.Reader, opts container.CopyToContainerOptions) (err error) {
	defer func(start time.Time) { t.span("CopyToContainer", start, err) }(time.Now())
	return t.Engine.CopyToContainer(ctx, id, dst, content, opts)
}

func (t *tracedEngine) ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (r container.ExecCreateResponse, err error) {
	defer func(start time.Time) { t.span("ContainerExecCreate", start, err) }(time.Now())
	return t.Engine.ContainerExecCreate(ctx, id, opts)
}

func (t *tracedEngine) ContainerAttach(ctx context.Context, id string, opts container.AttachOptions) (r types.HijackedResponse, err error) {
	defer func(start time.Time) { t.span("ContainerAttach", start, err) }(time.Now())
	return t.Engine.ContainerAttach(ctx, id, opts)
}

func (t *tracedEngine) ContainerExecAttach(ctx context.Context, execID string, opts container.ExecAttachOptions) (r types.HijackedResponse, err error) {
	defer func(start time.Time) { t.span("ContainerExecAttach", start, err) }(time.Now())
	return t.Engine.ContainerExecAttach(ctx, execID, opts)
}

func (t *tracedEngine) ContainerExecStart(ctx context.Context, execID string, opts container.ExecStartOptions) (err error) {
	defer func(start time.Time) { t.span("ContainerExecStart", start, err) }(time.Now())
	return t.Engine.ContainerExecStart(ctx, execID, opts)
}

func (t *tracedEngine) ContainerExecInspect(ctx context.Context, execID string) (r container.ExecInspect, err error) {
	defer func(start time.Time) { t.span("ContainerExecInspect", start, err) }(time.Now())
	return t.Engine.ContainerExecInspect(ctx, execID)
}

func (t *tracedEngine) NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (r network.CreateResponse, err error) {
	defer func(start time.Time) { t.span("NetworkCreate", start, err) }(time.Now())
	return t.Engine.NetworkCreate(ctx, name, opts)
}

func (t *tracedEngine) NetworkRemove(ctx context.Context, id string) (err error) {
	defer func(start time.Time) { t.span("NetworkRemove", start, err) }(time.Now())
	return t.Engine.NetworkRemove(ctx, id)
}

func (t *tracedEngine) VolumeCreate(ctx context.Context, opts volume.CreateOptions) (r volume.Volume, err error) {
	defer func(start time.Time) { t.span("VolumeCreate", start, err) }(time.Now())
	return t.Engine.VolumeCreate(ctx, opts)
}

func (t *tracedEngine) VolumeRemove(ctx context.Context, id string, force bool) (err error) {
	defer func(start time.Time) { t.span("VolumeRemove", start, err) }(time.Now())
	return t.Engine.VolumeRemove(ctx, id, force)
}

func (t *tracedEngine) Ping(ctx context.Context) (r types.Ping, err error) {
	defer func(start time.Time) { t.span("Ping", start, err) }(time.Now())
	return t.Engine.Ping(ctx)
}

func (t *tracedEngine) ImagePull(ctx context.Context, ref string, opts image.PullOptions) (r io.ReadCloser, err error) {
	defer func(start time.Time) { t.span("ImagePull", start, err) }(time.Now())
	return t.Engine.ImagePull(ctx, ref, opts)
}

func (t *tracedEngine) CopyFromContainer(ctx context.Context, id, src string) (r io.ReadCloser, st container.PathStat, err error) {
	defer func(start time.Time) { t.span("CopyFromContainer", start, err) }(time.Now())
	return t.Engine.CopyFromContainer(ctx, id, src)
}

func (t *tracedEngine) NetworkList(ctx context.Context, opts network.ListOptions) (r []network.Summary, err error) {
	defer func(start time.Time) { t.span("NetworkList", start, err) }(time.Now())
	return t.Engine.NetworkList(ctx, opts)
}

func (t *tracedEngine) NetworkInspect(ctx context.Context, id string, opts network.InspectOptions) (r network.Inspect, err error) {
	defer func(start time.Time) { t.span("NetworkInspect", start, err) }(time.Now())
	return t.Engine.NetworkInspect(ctx, id, opts)
}

func (t *tracedEngine) NetworkConnect(ctx context.Context, id, ctr string, cfg *network.EndpointSettings) (err error) {
	defer func(start time.Time) { t.span("NetworkConnect", start, err) }(time.Now())
	return t.Engine.NetworkConnect(ctx, id, ctr, cfg)
}

func (t *tracedEngine) NetworkDisconnect(ctx context.Context, id, ctr string, force bool) (err error) {
	defer func(start time.Time) { t.span("NetworkDisconnect", start, err) }(time.Now())
	return t.Engine.NetworkDisconnect(ctx, id, ctr, force)
}
