package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	"github.com/drover-ci/drover/internal/fleet"
	fleetdocker "github.com/drover-ci/drover/internal/fleet/docker"
	"github.com/drover-ci/drover/internal/fleet/engine"
	"github.com/drover-ci/drover/internal/fleet/fleetingdir/fleetingdirtest"
	"github.com/drover-ci/drover/internal/freeport"
	"github.com/drover-ci/drover/internal/sshx"
)

// startMirror starts distribution's registry as a pull-through cache of
// upstream (a URL; go-containerregistry's in-process registry is not
// one), listening on every address of the host so that instances reach it
// at the bridge gateway, and waits until it answers, bounded by ctx.
func startMirror(ctx context.Context, tb testing.TB, upstream string) *fleetingdirtest.Registry {
	tb.Helper()
	return fleetingdirtest.Start(ctx, tb, fleetingdirtest.Options{Listen: "0.0.0.0", Upstream: upstream})
}

// freePort returns a TCP port free on every address at the time of the
// call, for a process that cannot be handed a listener.
func freePort(tb testing.TB) string {
	tb.Helper()
	port, err := freeport.On("0.0.0.0")
	if err != nil {
		tb.Fatal(err)
	}
	return strconv.Itoa(port)
}

// blobGets returns the lines of a go-containerregistry registry log that
// are blob downloads of repo.
func blobGets(log, repo string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "GET /v2/"+repo+"/blobs/") {
			out = append(out, l)
		}
	}
	return out
}

// TestDockerAutoscalerRegistryMirror runs two jobs whose image has a
// Docker Hub name (drover-e2e/busybox:<tag>, no registry host) on a
// docker-autoscaler runner whose dind instances' engines use a registry
// mirror: distribution's registry as a pull-through cache of a registry
// holding the image. Docker Hub is out of reach, and engines ask mirrors
// only for Docker Hub names, so a job that runs at all pulled through the
// mirror. With max_use_count = 1 each job gets a fresh instance, and so
// a pull: the first fills the mirror's cache from upstream (blob
// downloads there), the second is served the blobs from the cache
// (upstream sees manifest requests only).
func TestDockerAutoscalerRegistryMirror(t *testing.T) {
	fleetingdirtest.RegistryBinary(t) // skips without it
	needDindImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const repo = "drover-e2e/busybox"
	up := startInstanceRegistry(t)
	pushed := up.push(ctx, t, dockerimage.TestImageBusybox, repo)
	img := repo + ":" + pushed[strings.LastIndexByte(pushed, ':')+1:]
	// The mirror runs on the host: it reaches upstream at loopback.
	mir := startMirror(ctx, t, "http://127.0.0.1:"+up.port)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upstream registry log:\n%s", up.log.String())
		}
	})
	upMark := len(up.log.String())

	dir := t.TempDir()
	c := startCoordinator(t, filepath.Join(dir, "coord"))
	cl := c.client()
	token := c.runnerToken(t)
	owner := api.ShortToken(token)
	cfg := fleetConfig(t, dir, c.url, token, 1, up, img, "", `    capacity_per_instance = 1
    max_instances = 1
    max_use_count = 1
    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "1m"`, "", fmt.Sprintf("      engine_registry_mirror = %q\n", "http://"+up.gw+":"+mir.Port))
	m := start(t, dir, "run", "--config", cfg)
	m.waitLog("runner manager started", 30*time.Second)

	// run runs a job in img and returns the instance it ran on.
	run := func(name string) string {
		t.Helper()
		id := submitJSON(t, c, map[string]any{"name": name, "image": img,
			"script": []string{"echo ran-$CI_JOB_ID-in-mirrored-image"}})
		j := waitJob(t, cl, id, 5*time.Minute, finished)
		log := trace(t, cl, id)
		if j.Status != "success" {
			t.Fatalf("job %s: %s (%s)\n%s", name, j.Status, j.FailureReason, log)
		}
		for _, want := range []string{"Using Docker executor with image " + img + " on instance ", fmt.Sprintf("ran-%d-in-mirrored-image", id)} {
			if !strings.Contains(log, want) {
				t.Errorf("job %s: log lacks %q:\n%s", name, want, log)
			}
		}
		mm := acquiredRx.FindStringSubmatch(log)
		if mm == nil {
			t.Fatalf("job %s: log names no instance:\n%s", name, log)
		}
		return mm[2]
	}

	first := run("through the mirror, cold")
	repoDir := filepath.Join(mir.Root, "docker/registry/v2/repositories", repo)
	if fi, err := os.Stat(repoDir); err != nil || !fi.IsDir() {
		t.Errorf("the mirror's storage has no repository %s after the first pull: %v", repo, err)
	}
	upLog := up.log.String()
	if gets := blobGets(upLog[upMark:], repo); len(gets) == 0 {
		t.Errorf("upstream served no blob of %s for the first pull:\n%s", repo, upLog[upMark:])
	} else {
		t.Logf("upstream blob downloads for the first pull:\n%s", strings.Join(gets, "\n"))
	}
	upMark, mirMark := len(upLog), len(mir.Log())

	second := run("through the mirror, cached")
	if second == first {
		t.Errorf("both jobs ran on instance %s; want a fresh instance for the second (max_use_count = 1)", first)
	}
	t.Logf("instances: %s, then %s", first, second)
	// Only the manifest may be asked upstream again (the mirror checks the
	// tag there), and /v2/ (its auth challenge check).
	again := strings.TrimSpace(up.log.String()[upMark:])
	t.Logf("upstream requests for the second pull:\n%s", again)
	for _, l := range strings.Split(again, "\n") {
		if l == "" {
			continue
		}
		ok := strings.HasPrefix(l, "registry: HEAD /v2/") || strings.HasPrefix(l, "registry: GET /v2/")
		if !ok || strings.Contains(l, "/blobs/") {
			t.Errorf("upstream served %q for the second pull; want no blob requests (they come from the mirror's cache)", l)
		}
	}
	if !strings.Contains(mir.Log()[mirMark:], "/v2/"+repo+"/blobs/sha256:") {
		t.Errorf("the mirror served no blob of %s for the second pull:\n%s", repo, mir.Log()[mirMark:])
	}

	m.signal(syscall.SIGTERM)
	if code := m.wait(2 * time.Minute); code != 0 {
		t.Fatalf("drover run exited %d", code)
	}
	if left := groupContainersE(t, owner); len(left) > 0 {
		t.Errorf("instances left after shutdown: %v", left)
	}
}

// BenchmarkDockerFleetMirrorPull measures how long a fresh dind
// instance's engine takes to pull a ~50 MB image (busybox plus one layer
// of random bytes) from a registry on the host: straight from it
// (registry, by <gateway>:<port>/repo:tag, an insecure registry of the
// inner engine) and through a pull-through mirror whose cache is warm
// (mirror, by a Docker Hub name: mirrors serve nothing else). Every
// iteration removes the image from the inner engine first (untimed).
func BenchmarkDockerFleetMirrorPull(b *testing.B) {
	fleetingdirtest.RegistryBinary(b) // skips without it
	skipWithoutDind(b)
	cli := dockertest.Engine(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	gw := bridgeGateway(b)

	upPort := startInstanceRegistry(b).port
	tag := randomHex(4)
	const repo = "drover-e2e/big"
	local := "drover-e2e-bench/big:" + tag
	b.Cleanup(func() { removeTag(b, cli, local) })
	if _, err := dockerimage.Ensure(ctx, cli, local, map[string]string{testLabel: testName(b)}, writeBigImageContext); err != nil {
		b.Fatal(err)
	}
	if ins, err := cli.ImageInspect(ctx, local); err == nil {
		b.Logf("image %s: %.1f MB", local, float64(ins.Size)/1e6)
	}
	pushImage(ctx, b, cli, local, "127.0.0.1:"+upPort+"/"+repo+":"+tag)
	mir := startMirror(ctx, b, "http://127.0.0.1:"+upPort)

	inner := engineInstance(ctx, b, cli, map[string]any{
		"engine":                   true,
		"name_prefix":              "drover-e2e-bench",
		"engine_registry_mirror":   "http://" + gw + ":" + mir.Port,
		"engine_insecure_registry": gw + ":" + upPort,
	})
	direct, mirrored := gw+":"+upPort+"/"+repo+":"+tag, repo+":"+tag
	// The layers are shared by both names: each pull starts with neither.
	reset := func(b *testing.B) {
		for _, ref := range []string{direct, mirrored} {
			if _, err := inner.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
				b.Fatalf("remove %s from the instance's engine: %v", ref, err)
			}
		}
	}
	// Warm the mirror's cache.
	if err := pull(ctx, inner, mirrored); err != nil {
		b.Fatalf("pull %s through the mirror: %v\nmirror log:\n%s", mirrored, err, mir.Log())
	}
	if _, err := os.Stat(filepath.Join(mir.Root, "docker/registry/v2/repositories", repo)); err != nil {
		b.Fatalf("the mirror did not cache %s: %v", repo, err)
	}

	for _, bc := range []struct{ name, ref string }{{"registry", direct}, {"mirror", mirrored}} {
		b.Run(bc.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				reset(b)
				b.StartTimer()
				start := time.Now()
				if err := pull(ctx, inner, bc.ref); err != nil {
					b.Fatalf("pull %s: %v", bc.ref, err)
				}
				total += time.Since(start)
			}
			b.StopTimer()
			b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms/pull")
		})
	}
}

// skipWithoutDind is needDindImage for benchmarks: a machine that cannot
// build the dind image (no debootstrap, or not root) skips rather than
// fails.
func skipWithoutDind(tb testing.TB) {
	tb.Helper()
	needDockerImages(tb)
	cli := dockertest.Engine(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dindOnce.Do(func() {
		dindErr = fleetdocker.EnsureDindImage(ctx, cli, fleetdocker.DefaultDindImage, func(s string) { tb.Log(s) })
	})
	if errors.Is(dindErr, fleetdocker.ErrNoDebootstrap) {
		tb.Skipf("cannot build the dind image: %v", dindErr)
	}
	needDindImage(tb)
}

// writeBigImageContext writes a build context FROM the busybox test image
// adding one layer of 50 MB of random (incompressible) bytes.
func writeBigImageContext(c *dockerimage.Context) error {
	data := make([]byte, 50<<20)
	_, _ = rand.Read(data)
	c.File("Dockerfile", 0o644, []byte("FROM "+dockerimage.TestImageBusybox+"\nCOPY data /data\n"))
	return c.File("data", 0o644, data)
}

// pull pulls ref into cli's engine.
func pull(ctx context.Context, cli *dockerclient.Client, ref string) error {
	rc, err := cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	return dockerimage.ReadMessages(rc)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// engineInstance starts one instance of the docker fleet provider with
// plugin configuration cfg (engine = true) and returns a client of its
// engine, reached over SSH, once that answers. The instance is removed
// when the test ends.
func engineInstance(ctx context.Context, tb testing.TB, cli *dockerclient.Client, cfg map[string]any) *dockerclient.Client {
	tb.Helper()
	owner := "drover-e2e-bench-" + randomHex(4)
	tb.Cleanup(func() { removeFleet(tb, owner) })
	p := fleetdocker.New(slog.New(slog.DiscardHandler), cli)
	if _, err := p.Init(ctx, fleet.Settings{Name: owner, Config: cfg}); err != nil {
		tb.Fatalf("Init = %v", err)
	}
	if n, err := p.Increase(ctx, 1); n != 1 || err != nil {
		tb.Fatalf("Increase(1) = %d, %v; want 1, nil", n, err)
	}
	var id string
	if err := p.Update(ctx, func(got string, st fleet.State) {
		if st == fleet.StateRunning {
			id = got
		}
	}); err != nil || id == "" {
		tb.Fatalf("Update = %v, running instance %q; want one", err, id)
	}
	pool := engine.New(nil, nil, nil)
	tb.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := p.Decrease(ctx, []string{id}); err != nil {
			tb.Errorf("Decrease(%s) = %v", id, err)
		}
		_ = p.Shutdown(ctx)
	})
	ci, err := p.ConnectInfo(ctx, id)
	if err != nil {
		tb.Fatalf("ConnectInfo(%s) = %v", id, err)
	}
	conn, err := pool.Get(engine.Target{Key: id, ID: id, SSH: sshx.Config{
		Addr: ci.Addr(false), User: ci.Username, Password: ci.Password, Key: ci.Key, Timeout: 5 * time.Second,
	}})
	if err != nil {
		tb.Fatal(err)
	}
	// sshd and then the inner engine start after the container does.
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := conn.Ping(pctx)
		cancel()
		if err == nil {
			return conn.Client()
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("the engine of instance %s did not answer: %v", id, err)
		case <-poll.C:
		}
	}
}
