package docker

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/dockerimage"
)

// pull makes img present on the engine as the pull policies (the job's,
// where allowed_pull_policies allows them, else the runner's) say, trying
// them in order, and returns the image as the engine inspects it (its
// id, its configuration). A failure is the job's: image_pull_failure,
// with the engine's message.
func (e *Executor) pull(ctx context.Context, img string, requested []string) (image.InspectResponse, error) {
	policies, err := e.cfg.AllowedPull(requested)
	if err != nil {
		return image.InspectResponse{}, refuse(api.RunnerConfigurationError, "image %s: %v", img, err)
	}
	// The engine is asked for the qualified name, never the job's string:
	// see CheckImageReference.
	ref, err := CheckImageReference(img)
	if err != nil {
		return image.InspectResponse{}, refuse(api.ImagePullFailure, "image %q: %v", img, err)
	}
	var errs []string
	for i, p := range policies {
		ins, err := e.pullOnce(ctx, img, ref, p)
		if err == nil {
			return ins, nil
		}
		if ctx.Err() != nil {
			return image.InspectResponse{}, ctx.Err()
		}
		errs = append(errs, err.Error())
		if i < len(policies)-1 {
			e.printf("\033[0;33mWARNING: %v; trying the next pull policy\033[0;m\n", err)
		}
	}
	return image.InspectResponse{}, refuse(api.ImagePullFailure, "image %s: %s", img, strings.Join(errs, "; "))
}

// pullOnce applies one pull policy to the image ref, named img in the
// job's log, and returns it as the engine inspects it.
func (e *Executor) pullOnce(ctx context.Context, img, ref string, p PullPolicy) (image.InspectResponse, error) {
	var none image.InspectResponse
	if p != PullAlways {
		ins, err := e.eng.ImageInspect(ctx, ref)
		if err == nil {
			e.printf("Using locally found image %s (%s)\n", img, shortID(ins.ID))
			return ins, nil
		}
		if !cerrdefs.IsNotFound(err) {
			return none, fmt.Errorf("inspect image: %w", err)
		}
		if p == PullNever {
			return none, fmt.Errorf("not present on the engine, and pull_policy is never")
		}
	}
	auth, from, err := e.registryAuth(ctx, ref)
	if err != nil {
		return none, fmt.Errorf("pull (policy %s): %w", p, err)
	}
	if from != "" {
		e.printf("Authenticating with credentials from %s\n", from)
	}
	e.printf("Pulling docker image %s ...\n", img)
	rc, err := e.eng.ImagePull(ctx, ref, image.PullOptions{RegistryAuth: auth})
	if err != nil {
		return none, fmt.Errorf("pull (policy %s): %w", p, err)
	}
	err = dockerimage.ReadMessages(rc)
	rc.Close()
	if err != nil {
		return none, fmt.Errorf("pull (policy %s): %w", p, err)
	}
	ins, err := e.eng.ImageInspect(ctx, ref)
	if err != nil {
		return none, fmt.Errorf("inspect the pulled image: %w", err)
	}
	e.printf("Using docker image %s (%s)\n", img, shortID(ins.ID))
	return ins, nil
}

// pullHelper makes the helper image present: drover's own was built by
// the provider; a configured helper_image is pulled when missing.
func (e *Executor) pullHelper(ctx context.Context, tag string) (image.InspectResponse, error) {
	ins, err := e.pullOnce(ctx, tag, tag, PullIfNotPresent)
	if err != nil {
		return ins, fmt.Errorf("helper image %s: %w", tag, err)
	}
	return ins, nil
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}

// Warm readies an engine before its first job (an autoscaled instance
// before it counts as ready): drover's helper image is built there (or
// helper_image pulled) and every image of images that is missing is
// pulled. progress gets a line per step; nil = none.
func (p *Provider) Warm(ctx context.Context, eng Engine, c *Config, images []string, progress func(string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	tag, err := p.helperTag(ctx, eng, c, progress)
	if err != nil {
		return fmt.Errorf("helper image: %w", err)
	}
	if _, err := ensureImage(ctx, eng, tag); err != nil {
		return fmt.Errorf("helper image %s: %w", tag, err)
	}
	for _, img := range images {
		pulled, err := ensureImage(ctx, eng, img)
		if err != nil {
			return fmt.Errorf("pre-pull image %s: %w", img, err)
		}
		if pulled {
			progress("pulled " + img)
		}
	}
	return nil
}

// ensureImage pulls img unless the engine has it; pulled tells which.
func ensureImage(ctx context.Context, eng Engine, img string) (pulled bool, err error) {
	if _, err := eng.ImageInspect(ctx, img); err == nil {
		return false, nil
	} else if !cerrdefs.IsNotFound(err) {
		return false, fmt.Errorf("inspect: %w", err)
	}
	rc, err := eng.ImagePull(ctx, img, image.PullOptions{})
	if err != nil {
		return false, fmt.Errorf("pull: %w", err)
	}
	err = dockerimage.ReadMessages(rc)
	rc.Close()
	if err != nil {
		return false, fmt.Errorf("pull: %w", err)
	}
	return true, nil
}
