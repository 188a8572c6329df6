// Package dockertest helps tests that need the local Docker engine.
package dockertest

import (
	"context"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"
)

// Engine returns a client of the engine DOCKER_HOST (else the default
// socket) names, closed when the test ends, or skips the test with
// "no Docker engine: ..." when the engine does not answer a ping.
func Engine(t testing.TB) *dockerclient.Client {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Skipf("no Docker engine: %v", err)
	}
	return cli
}
