package kubetest

import (
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/dockerimage"
)

// EngineWithTestImages returns a client of the local Docker engine, which
// has the test images (built first when it lacks them), closed when the
// test ends. Only the package's tests have it (kubetest_test's too).
func EngineWithTestImages(t *testing.T) *dockerclient.Client {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := dockerimage.EnsureTestImages(t.Context(), cli); err != nil {
		t.Fatalf("EnsureTestImages: %v", err)
	}
	return cli
}

// TestPushImage: the pushed image is in the registry under the returned
// reference, the engine keeps no registry tag, and a second push of the
// same image finds it there.
func TestPushImage(t *testing.T) {
	env := Cluster(t)
	cli := EngineWithTestImages(t)
	img, err := cli.ImageInspect(t.Context(), dockerimage.TestImageBusybox)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ref := env.PushImage(t, dockerimage.TestImageBusybox)
		if want := env.Registry + "/drover-test-busybox:1"; ref != want {
			t.Errorf("PushImage = %q, want %q", ref, want)
		}
		config, err := env.pushedConfig(t.Context(), "drover-test-busybox", "1")
		if err != nil || config != img.ID {
			t.Errorf("registry's drover-test-busybox:1 has config %s (%v), want the image's ID %s", config, err, img.ID)
		}
		if _, err := cli.ImageInspect(t.Context(), ref); !cerrdefs.IsNotFound(err) {
			t.Errorf("ImageInspect(%s) = %v, want not found: the registry tag left in the engine", ref, err)
		}
	}
}
