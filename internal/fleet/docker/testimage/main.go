// Command testimage builds the sshd image the docker fleet provider's tests
// and the instance executor's tests run, from this machine's own binaries
// (no registry needed). It does nothing when the image exists.
//
//	go run ./internal/fleet/docker/testimage [-tag drover-fleet-sshd:test] [-context out.tar]
//	sudo go run ./internal/fleet/docker/testimage -dind [-tag drover-fleet-dind:test]
//
// With -context it writes the build context instead, for `docker build - < out.tar`.
//
// With -dind it builds the image of engine instances (plugin_config
// engine = true): Debian with sshd and this machine's Docker engine
// binaries. The first build runs debootstrap (it needs root, debootstrap
// and http://deb.debian.org) and caches the Debian root in
// $DROVER_CACHE_DIR (default ~/.cache/drover); later builds reuse it.
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
	dind := flag.Bool("dind", false, "build the image of engine instances (Docker engine and sshd; default tag "+docker.DefaultDindImage+")")
	flag.Parse()
	tagSet := false
	flag.Visit(func(f *flag.Flag) { tagSet = tagSet || f.Name == "tag" })
	if *dind && !tagSet {
		*tag = docker.DefaultDindImage
	}
	if *dind && *ctxOut != "" {
		return fmt.Errorf("-context writes the sshd image's context only; the dind image is built on a base image -dind imports")
	}

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
	// debootstrap downloads and installs a Debian root on a first -dind.
	timeout := 5 * time.Minute
	if *dind {
		timeout = 20 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	if *dind {
		start := time.Now()
		progress := func(msg string) { fmt.Fprintf(os.Stderr, "%6.1fs %s\n", time.Since(start).Seconds(), msg) }
		err = docker.EnsureDindImage(ctx, cli, *tag, progress)
	} else {
		err = docker.EnsureImage(ctx, cli, *tag)
	}
	if err != nil {
		return err
	}
	fmt.Println(*tag)
	return nil
}
