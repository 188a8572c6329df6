// Command testimage builds the sshd image the docker fleet provider's tests
// and the instance executor's tests run, from this machine's own binaries
// (no registry needed). It does nothing when the image exists.
//
//	go run ./internal/fleet/docker/testimage [-tag drover-fleet-sshd:test] [-context out.tar]
//
// With -context it writes the build context instead, for `docker build - < out.tar`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/fleet/docker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testimage:", err)
		os.Exit(1)
	}
}

func run() error {
	tag := flag.String("tag", docker.DefaultImage, "image tag to build")
	ctxOut := flag.String("context", "", "write the build context tar to this file instead of building")
	flag.Parse()

	if *ctxOut != "" {
		f, err := os.Create(*ctxOut)
		if err != nil {
			return err
		}
		if err := docker.WriteBuildContext(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	if err := docker.EnsureImage(ctx, cli, *tag); err != nil {
		return err
	}
	fmt.Println(*tag)
	return nil
}
