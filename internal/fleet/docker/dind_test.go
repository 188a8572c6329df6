package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	"github.com/drover-ci/drover/internal/fleet"
)

func TestParseConfigEngine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        map[string]any
		wantImage string
		wantArgs  []string
		wantErr   []string // substrings of the error; nil: no error
	}{
		{
			name:      "engine picks the dind image",
			in:        map[string]any{"engine": true},
			wantImage: DefaultDindImage,
		},
		{
			name:      "image overrides the default",
			in:        map[string]any{"engine": true, "image": "mine:1"},
			wantImage: "mine:1",
		},
		{
			name:      "no engine keeps the sshd image",
			in:        map[string]any{"engine": false},
			wantImage: DefaultImage,
		},
		{
			name: "one mirror as a string",
			in:   map[string]any{"engine": true, "engine_registry_mirror": "http://127.0.0.1:5999"},
			wantArgs: []string{
				"--registry-mirror=http://127.0.0.1:5999",
			},
			wantImage: DefaultDindImage,
		},
		{
			name: "lists, in mirror, insecure, opt order",
			in: map[string]any{
				"engine":                   true,
				"engine_opt":               []any{"max-concurrent-downloads=3", "--debug"},
				"engine_insecure_registry": []any{"10.0.0.0/8", "registry.local:5000"},
				"engine_registry_mirror":   []string{"https://mirror.example/"},
			},
			wantArgs: []string{
				"--registry-mirror=https://mirror.example/",
				"--insecure-registry=10.0.0.0/8",
				"--insecure-registry=registry.local:5000",
				"--max-concurrent-downloads=3",
				"--debug",
			},
			wantImage: DefaultDindImage,
		},
		{
			name: "docker-machine spellings",
			in: map[string]any{
				"engine":                   true,
				"engine-registry-mirror":   "http://m:5000",
				"engine-insecure-registry": "m:5000",
				"engine-opt":               "log-level=warn",
			},
			wantArgs:  []string{"--registry-mirror=http://m:5000", "--insecure-registry=m:5000", "--log-level=warn"},
			wantImage: DefaultDindImage,
		},
		{
			name: "both spellings add up",
			in: map[string]any{
				"engine":                 true,
				"engine_registry_mirror": "http://a",
				"engine-registry-mirror": "http://b",
			},
			wantArgs:  []string{"--registry-mirror=http://a", "--registry-mirror=http://b"},
			wantImage: DefaultDindImage,
		},
		{
			name:    "engine must be a bool",
			in:      map[string]any{"engine": "yes"},
			wantErr: []string{"engine: want true or false"},
		},
		{
			name:    "engine keys need engine",
			in:      map[string]any{"engine_registry_mirror": "http://a", "engine-opt": "debug"},
			wantErr: []string{"engine_registry_mirror: needs engine = true", "engine-opt: needs engine = true"},
		},
		{
			name:    "engine false refuses them too",
			in:      map[string]any{"engine": false, "engine_insecure_registry": "a:1"},
			wantErr: []string{"engine_insecure_registry: needs engine = true"},
		},
		{
			name:    "mirror needs http or https",
			in:      map[string]any{"engine": true, "engine_registry_mirror": "ftp://a"},
			wantErr: []string{"engine_registry_mirror: ", "http:// or https://"},
		},
		{
			name:    "mirror has no path",
			in:      map[string]any{"engine": true, "engine-registry-mirror": []any{"http://a", "http://b/v2"}},
			wantErr: []string{"engine-registry-mirror[1]: ", "no path"},
		},
		{
			name:    "insecure registry has no scheme",
			in:      map[string]any{"engine": true, "engine_insecure_registry": "http://a:5000"},
			wantErr: []string{"engine_insecure_registry: ", "without a scheme"},
		},
		{
			name:    "list items are strings",
			in:      map[string]any{"engine": true, "engine_opt": []any{"debug", int64(3)}},
			wantErr: []string{"engine_opt[1]: want a string, got int64"},
		},
		{
			name:    "not a list",
			in:      map[string]any{"engine": true, "engine_opt": int64(3)},
			wantErr: []string{"engine_opt: want a string or a list of strings"},
		},
		{
			name:    "empty opt",
			in:      map[string]any{"engine": true, "engine_opt": ""},
			wantErr: []string{"engine_opt: must not be empty"},
		},
		{
			name:    "opt is one line",
			in:      map[string]any{"engine": true, "engine_opt": "label=a\nlabel=b"},
			wantErr: []string{"engine_opt: must be one line"},
		},
		{
			name:    "opt without a flag",
			in:      map[string]any{"engine": true, "engine_opt": "=3"},
			wantErr: []string{"engine_opt: ", "want flag=value"},
		},
		{
			name:    "unknown engine key",
			in:      map[string]any{"engine": true, "engine_storage_driver": "vfs"},
			wantErr: []string{"engine_storage_driver: unknown key"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseConfig(tt.in)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("parseConfig(%v) = %+v, nil; want an error with %q", tt.in, c, tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("parseConfig(%v) = %v; want it to contain %q", tt.in, err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig(%v) = %v, want nil", tt.in, err)
			}
			if c.Image != tt.wantImage {
				t.Errorf("parseConfig(%v).Image = %q, want %q", tt.in, c.Image, tt.wantImage)
			}
			if diff := cmp.Diff(tt.wantArgs, c.DockerdArgs); diff != "" {
				t.Errorf("parseConfig(%v).DockerdArgs (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestValidCgroupParent(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"drover-fleet/drover-fleet-x-0a1b": true,
		"drover-fleet/":                    false,
		"drover-fleet/..":                  false,
		"drover-fleet/a/b":                 false,
		"drover-fleet/a/../../etc":         false,
		"/drover-fleet/a":                  false,
		"other/a":                          false,
		"":                                 false,
	} {
		if got := validCgroupParent(dindCgroupTop, in); got != want {
			t.Errorf("validCgroupParent(%q) = %v, want %v", in, got, want)
		}
	}
}

// testLogWriter sends a logger's lines to t.Log.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// testMirror is a registry mirror the inner engine is configured with;
// nothing needs to listen there.
const testMirror = "http://127.0.0.1:5999"

// TestEngineInstance starts an engine instance, reaches its inner engine
// through SSH, runs two containers on a user network there (one resolves
// the other's alias), removes the instance and checks that its container,
// volume and cgroups are gone.
func TestEngineInstance(t *testing.T) {
	cli := dockertest.Engine(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()

	start := time.Now()
	err := EnsureDindImage(ctx, cli, DefaultDindImage, func(msg string) { t.Logf("dind image: %s", msg) })
	if errors.Is(err, ErrNoDebootstrap) {
		t.Skipf("cannot build the dind image: %v", err)
	}
	if err != nil {
		t.Fatalf("EnsureDindImage = %v", err)
	}
	t.Logf("EnsureDindImage took %s", time.Since(start).Round(time.Millisecond))
	if _, err := dockerimage.Ensure(ctx, cli, dockerimage.TestImageBusybox, dockerimage.TestImageLabels(), dockerimage.WriteBusyboxContext); err != nil {
		t.Fatalf("build %s: %v", dockerimage.TestImageBusybox, err)
	}
	sweepDind(ctx, cli)

	owner := fmt.Sprintf("test-dind-%d", time.Now().UnixNano())
	t.Cleanup(func() { removeDindOwner(t, cli, owner) })
	p := New(slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})), cli)
	if _, err := p.Init(ctx, fleet.Settings{Name: owner, Config: map[string]any{
		"engine": true, "engine_registry_mirror": testMirror,
	}}); err != nil {
		t.Fatalf("Init = %v", err)
	}

	increased := time.Now()
	if n, err := p.Increase(ctx, 1); n != 1 || err != nil {
		t.Fatalf("Increase(1) = %d, %v; want 1, nil", n, err)
	}
	var id string
	if err := p.Update(ctx, func(got string, st fleet.State) {
		if st == fleet.StateRunning {
			id = got
		}
	}); err != nil || id == "" {
		t.Fatalf("Update = %v, running instance %q; want one", err, id)
	}
	ci, err := p.ConnectInfo(ctx, id)
	if err != nil {
		t.Fatalf("ConnectInfo(%s) = %v", id, err)
	}
	sshc, err := dialSSHContext(ctx, ci)
	if err != nil {
		t.Fatalf("ssh to %s as %s: %v", ci.Addr(false), ci.Username, err)
	}
	defer sshc.Close()
	inner, err := dockerclient.NewClientWithOpts(
		dockerclient.WithHost("http://docker"),
		dockerclient.WithDialContext(func(ctx context.Context, _, _ string) (net.Conn, error) {
			return sshc.DialContext(ctx, "unix", "/var/run/docker.sock")
		}),
		dockerclient.WithAPIVersionNegotiation(),
	)
	if err != nil {
		t.Fatalf("inner docker client: %v", err)
	}
	defer inner.Close()
	if err := waitPing(ctx, inner); err != nil {
		t.Fatalf("inner engine of %s: %v (log: %s)", id, err, instanceFile(ctx, sshc, "/var/log/dockerd.log"))
	}
	t.Logf("inner engine answered %s after Increase", time.Since(increased).Round(time.Millisecond))
	if err := p.Heartbeat(ctx, id); err != nil {
		t.Errorf("Heartbeat(%s) = %v", id, err)
	}

	info, err := inner.Info(ctx)
	if err != nil {
		t.Fatalf("inner Info = %v", err)
	}
	var mirrors []string
	if info.RegistryConfig != nil {
		for _, m := range info.RegistryConfig.Mirrors {
			mirrors = append(mirrors, strings.TrimSuffix(m, "/"))
		}
	}
	if !slices.Contains(mirrors, testMirror) {
		t.Errorf("inner engine's registry mirrors = %q, want %q among them", mirrors, testMirror)
	}
	if info.Driver != "overlay2" {
		t.Errorf("inner engine's storage driver = %q, want overlay2", info.Driver)
	}

	copyImage(ctx, t, cli, inner, dockerimage.TestImageBusybox)
	resolveAlias(ctx, t, inner)

	parent := dindCgroupTop + "/" + id
	c, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatalf("ContainerInspect(%s) = %v", id, err)
	}
	if got := c.Config.Labels[LabelCgroupParent]; got != parent {
		t.Errorf("label %s = %q, want %q", LabelCgroupParent, got, parent)
	}
	cgroups := cgroupDirs(cgroupRoot, parent, processCgroups(c.State.Pid))
	t.Logf("cgroups of the inner engine: %q", cgroups)
	if len(cgroups) == 0 {
		t.Errorf("no cgroup %s on this host after the inner engine ran containers", parent)
	}
	if vols := instanceVolumes(ctx, t, cli, id); len(vols) != 1 {
		t.Errorf("volumes of %s = %q, want one", id, vols)
	}

	removed, err := p.Decrease(ctx, []string{id})
	if err != nil || !slices.Equal(removed, []string{id}) {
		t.Fatalf("Decrease(%s) = %q, %v; want it removed", id, removed, err)
	}
	if _, err := cli.ContainerInspect(ctx, id); !cerrdefs.IsNotFound(err) {
		t.Errorf("ContainerInspect(%s) after Decrease = %v, want not found", id, err)
	}
	if vols := instanceVolumes(ctx, t, cli, id); len(vols) != 0 {
		t.Errorf("volumes of %s after Decrease = %q, want none", id, vols)
	}
	for _, d := range cgroups {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s after Decrease: stat = %v, want it gone", d, err)
		}
	}
}

// dialSSHContext logs in with ci's key, retrying while sshd starts, until
// ctx ends.
func dialSSHContext(ctx context.Context, ci fleet.ConnectInfo) (*ssh.Client, error) {
	signer, err := ssh.ParsePrivateKey(ci.Key)
	if err != nil {
		return nil, fmt.Errorf("parse ConnectInfo.Key: %w", err)
	}
	cfg := &ssh.ClientConfig{
		User:            ci.Username,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		Timeout:         5 * time.Second,
	}
	addr := ci.Addr(false)
	var (
		client  *ssh.Client
		lastErr error
	)
	err = retry(ctx, func() error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			lastErr = err
			return err
		}
		c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
		if err != nil {
			conn.Close()
			lastErr = err
			return err
		}
		client = ssh.NewClient(c, chans, reqs)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w (last: %v)", err, lastErr)
	}
	return client, nil
}

// retry calls fn until it returns nil, with backoff from 20 ms to 1 s,
// and returns ctx's error when ctx ends first.
func retry(ctx context.Context, fn func() error) error {
	wait := 20 * time.Millisecond
	for {
		if fn() == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// waitPing pings the inner engine until it answers or ctx ends.
func waitPing(ctx context.Context, inner *dockerclient.Client) error {
	var lastErr error
	err := retry(ctx, func() error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, lastErr = inner.Ping(pctx)
		return lastErr
	})
	if err != nil {
		return fmt.Errorf("ping: %w (last: %v)", err, lastErr)
	}
	return nil
}

// instanceFile returns a file of the instance read over SSH, for a
// failure message.
func instanceFile(ctx context.Context, c *ssh.Client, name string) string {
	sess, err := c.NewSession()
	if err != nil {
		return err.Error()
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	out, err := sess.CombinedOutput("tail -n 30 " + name)
	if err != nil {
		return fmt.Sprintf("%v: %s", err, out)
	}
	return string(out)
}

// copyImage saves tag from the host engine and loads it into inner.
func copyImage(ctx context.Context, t *testing.T, host, inner *dockerclient.Client, tag string) {
	t.Helper()
	rc, err := host.ImageSave(ctx, []string{tag})
	if err != nil {
		t.Fatalf("save %s from the host engine: %v", tag, err)
	}
	defer rc.Close()
	resp, err := inner.ImageLoad(ctx, rc, dockerclient.ImageLoadWithQuiet(true))
	if err != nil {
		t.Fatalf("load %s into the inner engine: %v", tag, err)
	}
	defer resp.Body.Close()
	if err := dockerimage.ReadMessages(resp.Body); err != nil {
		t.Fatalf("load %s into the inner engine: %v", tag, err)
	}
}

// resolveAlias runs a server and a client on a user network of the inner
// engine; the client pings the server by its alias.
func resolveAlias(ctx context.Context, t *testing.T, inner *dockerclient.Client) {
	t.Helper()
	const netName, alias = "drover-test-net", "svc"
	if _, err := inner.NetworkCreate(ctx, netName, network.CreateOptions{}); err != nil {
		t.Fatalf("inner NetworkCreate = %v", err)
	}
	run := func(name string, cmd []string, aliases []string) string {
		t.Helper()
		resp, err := inner.ContainerCreate(ctx,
			&container.Config{Image: dockerimage.TestImageBusybox, Cmd: cmd},
			&container.HostConfig{},
			&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {Aliases: aliases}}},
			nil, name)
		if err != nil {
			t.Fatalf("inner ContainerCreate %s = %v", name, err)
		}
		if err := inner.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
			t.Fatalf("inner ContainerStart %s = %v", name, err)
		}
		return resp.ID
	}
	run("server", []string{"sleep", "600"}, []string{alias})
	client := run("client", []string{"ping", "-c", "1", "-W", "5", alias}, nil)
	waitC, errC := inner.ContainerWait(ctx, client, container.WaitConditionNotRunning)
	select {
	case err := <-errC:
		t.Fatalf("inner ContainerWait = %v", err)
	case res := <-waitC:
		if res.StatusCode != 0 {
			t.Errorf("ping %s in the inner engine exited %d; output:\n%s", alias, res.StatusCode, containerLogs(ctx, inner, client))
		}
	}
}

func containerLogs(ctx context.Context, cli *dockerclient.Client, id string) string {
	rc, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, rc)
	return b.String()
}

// instanceVolumes lists the volumes labelled with instance id.
func instanceVolumes(ctx context.Context, t *testing.T, cli *dockerclient.Client, id string) []string {
	t.Helper()
	resp, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+id))})
	if err != nil {
		t.Fatalf("VolumeList = %v", err)
	}
	var names []string
	for _, v := range resp.Volumes {
		names = append(names, v.Name)
	}
	return names
}

// removeDindOwner removes, at cleanup, the containers of owner with their
// volumes and cgroups, and volumes of owner left without a container.
func removeDindOwner(t *testing.T, cli *dockerclient.Client, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := cli.ContainerList(ctx, container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", LabelOwner+"="+owner)),
	})
	if err != nil {
		t.Errorf("cleanup: ContainerList = %v", err)
	}
	for _, c := range list {
		var bases []string
		if ic, err := cli.ContainerInspect(ctx, c.ID); err == nil && ic.State != nil && ic.State.Pid > 0 {
			bases = processCgroups(ic.State.Pid)
		}
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: remove %s: %v", c.ID, err)
		}
		if parent := c.Labels[LabelCgroupParent]; validCgroupParent(dindCgroupTop, parent) {
			if err := removeCgroupDirs(ctx, cgroupDirs(cgroupRoot, parent, bases)); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	}
	vols, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelOwner+"="+owner))})
	if err != nil {
		t.Errorf("cleanup: VolumeList = %v", err)
		return
	}
	for _, v := range vols.Volumes {
		if err := cli.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: remove volume %s: %v", v.Name, err)
		}
	}
}

// sweepDind removes the engine-instance containers and volumes that an
// earlier, killed run of TestEngineInstance left (its cleanup never ran).
// Only owners "test-dind-<unix nanoseconds>" older than an hour are
// touched, so that a run in parallel keeps its own.
func sweepDind(ctx context.Context, cli *dockerclient.Client) {
	stale := func(owner string) bool {
		rest, ok := strings.CutPrefix(owner, "test-dind-")
		var ns int64
		if _, err := fmt.Sscan(rest, &ns); !ok || err != nil {
			return false
		}
		return time.Since(time.Unix(0, ns)) > time.Hour
	}
	args := filters.NewArgs(filters.Arg("label", LabelCgroupParent))
	if list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args}); err == nil {
		for _, c := range list {
			if stale(c.Labels[LabelOwner]) {
				_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			}
		}
	}
	if vols, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelInstance))}); err == nil {
		for _, v := range vols.Volumes {
			if stale(v.Labels[LabelOwner]) {
				_ = cli.VolumeRemove(ctx, v.Name, true)
			}
		}
	}
}
