package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	registrytypes "github.com/docker/docker/api/types/registry"
	dockerclient "github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	"github.com/drover-ci/drover/internal/fleet/fleetingdir/fleetingdirtest"
	"github.com/drover-ci/drover/internal/lockedbuf"
)

// TestDockerPullAlwaysRegistry pulls a job's image from a real registry
// on loopback (go-containerregistry's, in this process) with pull_policy
// always: the image is pushed there and its local tag removed, so the
// job only runs if the executor pulled it. Then, with the registry
// stopped, always alone fails the job with image_pull_failure and the
// engine's error, while [always, if-not-present] falls back to the image
// now present, with a warning.
func TestDockerPullAlwaysRegistry(t *testing.T) {
	needDockerImages(t)
	cli := dockertest.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The registry. Docker treats 127.0.0.0/8 as insecure: plain HTTP.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	regLog := &lockedbuf.Buffer{}
	srv := &http.Server{Handler: registry.New(registry.Logger(stdlog.New(regLog, "registry: ", 0)))}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		// Close (not Shutdown): the listener and the engine's idle
		// connections go at once, so the engine cannot reach it any more.
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("registry: Serve: %v", err)
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("registry log:\n%s", regLog.String())
		}
	})

	var b [6]byte
	_, _ = rand.Read(b[:])
	ref := ln.Addr().String() + "/drover-e2e/busybox:" + hex.EncodeToString(b[:])
	pushImage(ctx, t, cli, dockerimage.TestImageBusybox, ref)
	pushed := len(regLog.String())

	c, cl := startDockerManager(t, 2)

	run := func(name string, policy any) (status, reason, log string) {
		t.Helper()
		id := submitJSON(t, c, map[string]any{"name": name, "timeout": 120,
			"image":  map[string]any{"name": ref, "pull_policy": policy},
			"script": []string{"echo ran-in-pulled-image"}})
		j := waitJob(t, cl, id, 3*time.Minute, finished)
		log = trace(t, cl, id)
		waitNoResources(t, id)
		return j.Status, j.FailureReason, log
	}

	t.Run("pulled from the registry", func(t *testing.T) {
		status, reason, log := run("pull always", "always")
		if status != "success" {
			t.Fatalf("job = %s %q, want success\nlog:\n%s", status, reason, log)
		}
		for _, s := range []string{"Pulling docker image " + ref, "Using docker image " + ref, "ran-in-pulled-image"} {
			if !strings.Contains(log, s) {
				t.Errorf("log lacks %q:\n%s", s, log)
			}
		}
		if _, err := cli.ImageInspect(ctx, ref); err != nil {
			t.Errorf("the pulled image is not present afterwards: %v", err)
		}
		// The engine asked the registry for the tag (HEAD or GET, as it
		// likes) after the push.
		manifest := " /v2/drover-e2e/busybox/manifests/" + ref[strings.LastIndexByte(ref, ':')+1:]
		if !strings.Contains(strings.ReplaceAll(regLog.String()[pushed:], "PUT"+manifest, ""), manifest) {
			t.Errorf("the registry was not asked for %s after the push:\n%s", manifest, regLog.String())
		}
	})
	if t.Failed() {
		return
	}

	stop()
	t.Run("registry down, always", func(t *testing.T) {
		status, reason, log := run("pull always, registry down", "always")
		if status != "failed" || reason != "image_pull_failure" {
			t.Fatalf("job = %s %q, want failed image_pull_failure\nlog:\n%s", status, reason, log)
		}
		// The engine's own words: it could not connect to the registry.
		for _, s := range []string{"Pulling docker image " + ref, "Error response from daemon", ln.Addr().String(), "connection refused"} {
			if !strings.Contains(log, s) {
				t.Errorf("log lacks %q:\n%s", s, log)
			}
		}
		if strings.Contains(log, "ran-in-pulled-image") {
			t.Errorf("the script ran:\n%s", log)
		}
	})
	t.Run("registry down, always then if-not-present", func(t *testing.T) {
		status, reason, log := run("pull always or local", []string{"always", "if-not-present"})
		if status != "success" {
			t.Fatalf("job = %s %q, want success\nlog:\n%s", status, reason, log)
		}
		for _, s := range []string{"Pulling docker image " + ref, "Using locally found image " + ref, "ran-in-pulled-image"} {
			if !strings.Contains(log, s) {
				t.Errorf("log lacks %q:\n%s", s, log)
			}
		}
		warned := false
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "WARNING:") && strings.Contains(l, "connection refused") && strings.Contains(l, "trying the next pull policy") {
				warned = true
			}
		}
		if !warned {
			t.Errorf("log lacks a WARNING line about falling back to the next pull policy:\n%s", log)
		}
	})
}

// pushImage tags src as ref, pushes ref and removes the local tag again
// (not src). The tag is removed when the test ends too, wherever it came
// from by then.
func pushImage(ctx context.Context, t testing.TB, cli *dockerclient.Client, src, ref string) {
	t.Helper()
	pushImageAuth(ctx, t, cli, src, ref, "e30=") // base64 of {}
}

// pushImageAuth is pushImage with the X-Registry-Auth auth.
func pushImageAuth(ctx context.Context, t testing.TB, cli *dockerclient.Client, src, ref, auth string) {
	t.Helper()
	if err := cli.ImageTag(ctx, src, ref); err != nil {
		t.Fatalf("ImageTag %s %s: %v", src, ref, err)
	}
	t.Cleanup(func() { removeTag(t, cli, ref) })
	rc, err := cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: auth})
	if err != nil {
		t.Fatalf("ImagePush %s: %v", ref, err)
	}
	err = dockerimage.ReadMessages(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	removeTag(t, cli, ref)
	if _, err := cli.ImageInspect(ctx, ref); !cerrdefs.IsNotFound(err) {
		t.Fatalf("%s is still present after its removal (inspect: %v)", ref, err)
	}
	if _, err := cli.ImageInspect(ctx, src); err != nil {
		t.Fatalf("removing %s took %s with it: %v", ref, src, err)
	}
}

// removeTag removes one reference (never by id, so an image that has
// other tags only loses this one).
func removeTag(t testing.TB, cli *dockerclient.Client, ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		t.Errorf("ImageRemove %s: %v", ref, err)
	}
}

// TestDockerPrivateRegistry pulls a job's image from distribution's
// registry with htpasswd authentication (real, on loopback): without
// credentials the pull fails (image_pull_failure, the registry's "no basic
// auth credentials"); with the job variable DOCKER_AUTH_CONFIG, as GitLab
// documents it, the executor logs in and the job runs in the image.
func TestDockerPrivateRegistry(t *testing.T) {
	needDockerImages(t)
	cli := dockertest.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg := fleetingdirtest.Start(ctx, t, fleetingdirtest.Options{Username: "ci-user", Password: "s3cret pass"})

	var b [6]byte
	_, _ = rand.Read(b[:])
	ref := reg.Host + "/private/busybox:" + hex.EncodeToString(b[:])
	auth, err := registrytypes.EncodeAuthConfig(registrytypes.AuthConfig{Username: "ci-user", Password: "s3cret pass", ServerAddress: reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	pushImageAuth(ctx, t, cli, dockerimage.TestImageBusybox, ref, auth)

	c, cl := startDockerManager(t, 1)
	run := func(name string, vars []map[string]any) (status, reason, log string) {
		t.Helper()
		id := submitJSON(t, c, map[string]any{"name": name, "timeout": 120, "variables": vars,
			"image":  map[string]any{"name": ref, "pull_policy": "always"},
			"script": []string{"echo ran-in-private-image"}})
		j := waitJob(t, cl, id, 3*time.Minute, finished)
		log = trace(t, cl, id)
		waitNoResources(t, id)
		return j.Status, j.FailureReason, log
	}

	status, reason, log := run("no credentials", nil)
	if status != "failed" || reason != "image_pull_failure" || strings.Contains(log, "ran-in-private-image") {
		t.Errorf("job without credentials = %s %q, want failed image_pull_failure\nlog:\n%s", status, reason, log)
	}

	authJSON := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, "http://"+reg.Host, base64.StdEncoding.EncodeToString([]byte("ci-user:s3cret pass")))
	status, reason, log = run("DOCKER_AUTH_CONFIG", []map[string]any{{"key": "DOCKER_AUTH_CONFIG", "value": authJSON, "masked": true}})
	if status != "success" {
		t.Fatalf("job with DOCKER_AUTH_CONFIG = %s %q, want success\nlog:\n%s", status, reason, log)
	}
	for _, w := range []string{"Authenticating with credentials from $DOCKER_AUTH_CONFIG", "Pulling docker image " + ref, "ran-in-private-image"} {
		if !strings.Contains(log, w) {
			t.Errorf("log lacks %q:\n%s", w, log)
		}
	}
	if strings.Contains(log, "s3cret") {
		t.Errorf("the password is in the log:\n%s", log)
	}
}
