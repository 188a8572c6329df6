package kubetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
)

// PushImage pushes localTag, an image of the local Docker engine (DOCKER_HOST,
// else the default socket), to the cluster's registry as
// Registry/<name>:<tag> and returns that reference, the one the node
// pulls. The name is localTag's without its registry host and with
// Docker's library/ prefix left out: "drover-test-busybox:1" becomes
// "127.0.0.1:5100/drover-test-busybox:1".
//
// A push whose image the registry already has under that tag is skipped.
// Whether it has is asked of the registry (the config digest of the tag's
// manifest against the image's ID in the engine), so the answer holds
// across test processes and after the registry was emptied, and no cache
// lives in the process. Pushes of all processes are serialized by a flock
// in the state dir, because each adds the registry tag to the shared
// engine and removes it again after the push.
//
// Tags are expected to name fixed content (as the test images' ":1"
// does): the node keeps what it pulled once.
func (e *Env) PushImage(t testing.TB, localTag string) string {
	t.Helper()
	ref, err := e.pushImage(t.Context(), t.Logf, localTag)
	if err != nil {
		t.Fatalf("kubetest: push %s to the cluster's registry %s: %v", localTag, e.Registry, err)
	}
	return ref
}

func (e *Env) pushImage(ctx context.Context, logf func(string, ...any), localTag string) (string, error) {
	named, err := reference.ParseNormalizedNamed(localTag)
	if err != nil {
		return "", err
	}
	if _, ok := named.(reference.Canonical); ok {
		return "", errors.New("a digest reference cannot be pushed: name a tag")
	}
	tagged, ok := reference.TagNameOnly(named).(reference.NamedTagged)
	if !ok {
		return "", fmt.Errorf("no tag in %s", localTag)
	}
	path := reference.Path(named)
	if reference.Domain(named) == "docker.io" {
		path = reference.FamiliarName(named)
	}
	remote := e.Registry + "/" + path + ":" + tagged.Tag()
	if reference.Domain(named) == e.Registry {
		remote = reference.FamiliarString(tagged)
	}

	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return "", fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	inspect, err := cli.ImageInspect(ctx, localTag)
	if err != nil {
		return "", fmt.Errorf("inspect %s in the Docker engine: %w", localTag, err)
	}

	unlock, err := lockFile(ctx, filepath.Join(e.StateDir, "push.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()

	if config, err := e.pushedConfig(ctx, path, tagged.Tag()); err == nil && config == inspect.ID {
		return remote, nil
	}
	if remote != localTag {
		if err := cli.ImageTag(ctx, localTag, remote); err != nil {
			return "", fmt.Errorf("tag %s as %s: %w", localTag, remote, err)
		}
		// The registry tag was only the push's handle: untag (the image
		// keeps localTag, so this removes nothing else).
		defer func() {
			_, err := cli.ImageRemove(context.WithoutCancel(ctx), remote, image.RemoveOptions{})
			if err != nil && !cerrdefs.IsNotFound(err) {
				logf("kubetest: untag %s: %v", remote, err)
			}
		}()
	}
	body, err := cli.ImagePush(ctx, remote, image.PushOptions{
		// No credentials: "{}" (older engines reject an empty header).
		RegistryAuth: base64.URLEncoding.EncodeToString([]byte("{}")),
	})
	if err != nil {
		return "", fmt.Errorf("push %s: %w", remote, err)
	}
	defer body.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(body, io.Discard, 0, false, nil); err != nil {
		return "", fmt.Errorf("push %s: %w", remote, err)
	}
	return remote, nil
}

// pushedConfig returns the digest of the image config of the manifest the
// registry has for path:tag. For an image the Docker engine pushed, that is
// the image's ID in the engine.
func (e *Env) pushedConfig(ctx context.Context, path, tag string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.Registry+"/v2/"+path+"/manifests/"+tag, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	var m struct {
		Config struct {
			Digest string `json:"digest"`
		} `json:"config"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil {
		return "", fmt.Errorf("GET %s: %w", req.URL, err)
	}
	if m.Config.Digest == "" {
		return "", fmt.Errorf("GET %s: not an image manifest", req.URL)
	}
	return m.Config.Digest, nil
}

// lockFile takes an exclusive flock on path (created if need be), waiting
// for it as long as ctx allows, and returns its release.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the lock %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
