package dockerimage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
)

// BuildAPI is the part of the Docker client Build uses;
// *github.com/docker/docker/client.Client implements it.
type BuildAPI interface {
	ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error)
}

// ImageAPI is the part of the Docker client Ensure uses;
// *github.com/docker/docker/client.Client implements it.
type ImageAPI interface {
	BuildAPI
	ImageInspect(ctx context.Context, ref string, opts ...dockerclient.ImageInspectOption) (image.InspectResponse, error)
}

// Build builds the image of the build context buildContext (a tar, see
// Context) as tag, with labels on top of the Dockerfile's. It drains the
// engine's JSON message stream and returns its first error, with the last
// line of output before it.
func Build(ctx context.Context, cli BuildAPI, tag string, labels map[string]string, buildContext io.Reader) error {
	resp, err := cli.ImageBuild(ctx, buildContext, build.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		Labels:      labels,
	})
	if err != nil {
		return fmt.Errorf("dockerimage: build %s: %w", tag, err)
	}
	defer resp.Body.Close()
	if err := ReadMessages(resp.Body); err != nil {
		return fmt.Errorf("dockerimage: build %s: %w", tag, err)
	}
	return nil
}

// ReadMessages drains the JSON message stream the engine answers an image
// build or pull with, and returns the first error it reports, with the last
// line of output before it.
func ReadMessages(r io.Reader) error {
	dec := json.NewDecoder(r)
	var last string
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read the engine's messages (after %q): %w", last, err)
		}
		if msg.Error == "" {
			msg.Error = msg.ErrorDetail.Message
		}
		if msg.Error != "" {
			return fmt.Errorf("%s (after %q)", strings.TrimSpace(msg.Error), last)
		}
		if s := strings.TrimSpace(msg.Stream); s != "" {
			last = s
		}
	}
}

// errBuildOver unblocks a context writer whose build has ended.
var errBuildOver = errors.New("dockerimage: build ended before its context was written")

// Ensure makes sure the engine has an image tagged tag: it inspects the tag
// first and, only when the engine has no such image, builds it from the
// context write writes (streamed to the engine as it is written; Ensure
// closes the Context). built reports whether it built the image.
func Ensure(ctx context.Context, cli ImageAPI, tag string, labels map[string]string, write func(*Context) error) (built bool, err error) {
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return false, nil
	} else if !cerrdefs.IsNotFound(err) {
		return false, fmt.Errorf("dockerimage: inspect image %s: %w", tag, err)
	}
	if err := buildContext(ctx, cli, tag, labels, write); err != nil {
		return false, err
	}
	return true, nil
}

// buildContext builds tag from the context write writes, streamed to the
// engine as it is written (the Context is closed here).
func buildContext(ctx context.Context, cli BuildAPI, tag string, labels map[string]string, write func(*Context) error) error {
	pr, pw := io.Pipe()
	var writeErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := NewContext(pw)
		writeErr = write(c)
		if err := c.Close(); writeErr == nil {
			writeErr = err
		}
		pw.CloseWithError(writeErr)
	}()
	err := Build(ctx, cli, tag, labels, pr)
	pr.CloseWithError(errBuildOver)
	<-done
	// A context that could not be written fails the build too: its own
	// error says what is missing, the build's only that the stream broke.
	if writeErr != nil && !errors.Is(writeErr, errBuildOver) {
		return fmt.Errorf("dockerimage: build context of %s: %w", tag, writeErr)
	}
	return err
}
