package docker

import (
	"context"

	"github.com/docker/docker/api/types/registry"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/registryauth"
)

// authSources are the places the job's pulls look for credentials (see
// registryauth.Sources); one that does not parse is reported in the job's
// log and skipped.
func (e *Executor) authSources() []registryauth.Source {
	job := e.job
	if job == nil {
		job = &api.JobResponse{}
	}
	return registryauth.Sources(job, e.settings.Environment, func(from string, err error) {
		e.printf("\033[0;33mWARNING: %s is not a Docker configuration (%v): not used\033[0;m\n", from, err)
	})
}

// registryAuth is the X-Registry-Auth of a pull of the qualified image
// ref, and where it came from; "" when no source has credentials for its
// registry (the pull is anonymous).
func (e *Executor) registryAuth(ctx context.Context, ref string) (encoded, from string, err error) {
	c, ok, err := registryauth.Resolve(ctx, e.authSources(), ref)
	if err != nil || !ok {
		return "", "", err
	}
	enc, err := registry.EncodeAuthConfig(registry.AuthConfig{
		Username: c.Username, Password: c.Password, IdentityToken: c.IdentityToken, ServerAddress: c.Registry,
	})
	if err != nil {
		return "", "", err
	}
	return enc, c.From, nil
}
