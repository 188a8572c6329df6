package docker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor"
)

// recordingEngine is the real engine, recording the calls that pull an
// image or make a resource, in order.
type recordingEngine struct {
	Engine
	mu    sync.Mutex
	calls []string
	hosts []*container.HostConfig
}

func (r *recordingEngine) note(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
}

func (r *recordingEngine) recorded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *recordingEngine) ImageInspect(ctx context.Context, ref string, opts ...dockerclient.ImageInspectOption) (image.InspectResponse, error) {
	r.note("inspect " + ref)
	return r.Engine.ImageInspect(ctx, ref, opts...)
}

func (r *recordingEngine) ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error) {
	r.note("pull " + ref)
	return r.Engine.ImagePull(ctx, ref, opts)
}

func (r *recordingEngine) ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, net *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error) {
	r.note("create " + name)
	r.mu.Lock()
	r.hosts = append(r.hosts, host)
	r.mu.Unlock()
	return r.Engine.ContainerCreate(ctx, cfg, host, net, platform, name)
}

func (r *recordingEngine) NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error) {
	r.note("network " + name)
	return r.Engine.NetworkCreate(ctx, name, opts)
}

func (r *recordingEngine) VolumeCreate(ctx context.Context, opts volume.CreateOptions) (volume.Volume, error) {
	r.note("volume " + opts.Name)
	return r.Engine.VolumeCreate(ctx, opts)
}

type fixedDialer struct{ eng Engine }

func (d fixedDialer) Engine(*Config) (Engine, error) { return d.eng, nil }

// realEngine returns the local engine with the busybox test image, or
// skips the test.
func realEngine(t *testing.T) *dockerclient.Client {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no Docker engine: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Skipf("no Docker engine reachable: %v", err)
	}
	if _, err := dockerimage.Ensure(t.Context(), cli, dockerimage.TestImageBusybox, dockerimage.TestImageLabels(), dockerimage.WriteBusyboxContext); err != nil {
		t.Fatalf("build %s: %v", dockerimage.TestImageBusybox, err)
	}
	return cli
}

// prepareOn runs Prepare of a job on the real engine (recorded) with the
// runner's [runners.docker] cfg, and cleans up after the test.
func prepareOn(t *testing.T, rec *recordingEngine, cfg *Config, job *api.JobResponse) (string, error) {
	t.Helper()
	p, err := NewProvider(Options{
		Lookup: func(executor.Settings) (*Config, error) { return cfg, nil },
		Dialer: fixedDialer{rec},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := executor.Settings{ShortToken: "probe0001", SystemID: "s_probe", RunnerName: "probe"}
	ex := p.Create()
	var trace bytes.Buffer
	err = ex.Prepare(t.Context(), executor.PrepareOptions{Job: job, Settings: s, Trace: &trace})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()
		ex.Cleanup(ctx)
		if err := p.Wait(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return trace.String(), err
}

// TestEngineImageProbes: the image rules on the real engine. A refused
// image reaches the engine in no call at all; a job's image ID prefix is
// not resolved to a local image; a job's variables do not choose the
// engine, and the job's containers get no mount, privilege or network
// the runner's configuration does not give.
func TestEngineImageProbes(t *testing.T) {
	cli := realEngine(t)
	job := func(img string, pull ...string) *api.JobResponse {
		return &api.JobResponse{
			ID: 990001, Token: "probe-token",
			JobInfo: api.JobInfo{ProjectID: 42, ProjectFullPath: "g/p"},
			Image:   api.Image{Name: img, PullPolicy: pull},
		}
	}

	t.Run("disallowed image refused before any engine call", func(t *testing.T) {
		rec := &recordingEngine{Engine: cli}
		cfg := &Config{AllowedImages: []string{"drover-test-busybox:*"}, ServicesLimit: -1}
		for _, img := range []string{"evil.example/drover-test-busybox:1", "drover-test-busybox:1@" + digest, "drover-test-busybox:1 "} {
			_, err := prepareOn(t, rec, cfg, job(img))
			var be *executor.BuildError
			if !errors.As(err, &be) {
				t.Fatalf("Prepare(image %q) = %v, want a refusal", img, err)
			}
			if !strings.Contains(err.Error(), "allowed_images") && !strings.Contains(err.Error(), "not a valid image reference") {
				t.Errorf("Prepare(image %q) = %v, want the rule named", img, err)
			}
		}
		if calls := rec.recorded(); len(calls) != 0 {
			t.Errorf("the engine got %q for refused images, want no call", calls)
		}
	})

	t.Run("image ID prefix is not a local image", func(t *testing.T) {
		ins, err := cli.ImageInspect(t.Context(), dockerimage.TestImageBusybox)
		if err != nil {
			t.Fatal(err)
		}
		short := strings.TrimPrefix(ins.ID, "sha256:")[:12]
		rec := &recordingEngine{Engine: cli}
		cfg := &Config{AllowedImages: []string{"*"}, PullPolicy: []PullPolicy{PullNever}, ServicesLimit: -1}
		_, err = prepareOn(t, rec, cfg, job(short))
		var be *executor.BuildError
		if !errors.As(err, &be) || be.Reason != api.ImagePullFailure {
			t.Fatalf("Prepare(image %q, the busybox image's ID prefix) = %v, want image_pull_failure", short, err)
		}
		for _, c := range rec.recorded() {
			if strings.HasPrefix(c, "create ") || strings.HasPrefix(c, "network ") {
				t.Errorf("the engine got %q: the ID prefix ran a local image", c)
			}
		}
	})

	t.Run("job input adds no mount, privilege or engine", func(t *testing.T) {
		rec := &recordingEngine{Engine: cli}
		cfg := &Config{AllowedImages: []string{"drover-test-*"}, PullPolicy: []PullPolicy{PullNever}, ServicesLimit: -1}
		j := job(dockerimage.TestImageBusybox)
		j.Variables = api.Variables{
			{Key: "DOCKER_HOST", Value: "tcp://127.0.0.1:9"},
			{Key: "DOCKER_TLS_VERIFY", Value: "1"},
			{Key: "CI_BUILDS_DIR", Value: "/"},
			{Key: "GIT_CLONE_PATH", Value: "/var/run"},
		}
		j.Image.Entrypoint = []string{""}
		j.Image.ExecutorOpts = &api.ImageExecutorOpts{Docker: &api.ImageDockerOpts{User: "root", Platform: "linux/amd64"}}
		j.JobInfo.ProjectFullPath = "../../var/run/docker.sock"
		_, err := prepareOn(t, rec, cfg, j)
		if err != nil {
			t.Fatalf("Prepare = %v, want nil (the runner's engine, whatever DOCKER_HOST the job sets)", err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.hosts) == 0 {
			t.Fatal("no container created")
		}
		for _, hc := range rec.hosts {
			for _, b := range hc.Binds {
				src, _, _ := strings.Cut(b, ":")
				if strings.HasPrefix(src, "/") || strings.Contains(b, "docker.sock") {
					t.Errorf("bind %q: a host path the configuration does not name", b)
				}
			}
			if hc.Privileged || len(hc.CapAdd) > 0 || len(hc.Devices) > 0 || hc.NetworkMode.IsHost() || hc.PidMode != "" || hc.IpcMode != "" {
				t.Errorf("host config %+v: privileges the configuration does not give", hc)
			}
		}
	})
}
