package kubernetes

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/registryauth"
)

// registrySecretSuffix makes the name of a job's registry Secret from its
// pod's.
const registrySecretSuffix = "-registry"

// registryCreds resolves the registry credentials of the job's images
// (the references refs: the build image, the services, the helper), as
// the docker executor does for its pulls (registryauth). It returns the
// credentials the kubelet can use, one per registry, and writes to the
// job's log where each came from. An identity token is reported and left
// out: the kubelet only logs in with a user name and password.
func (e *Executor) registryCreds(ctx context.Context, job *api.JobResponse, env []string, refs []string) ([]registryauth.Credentials, error) {
	sources := registryauth.Sources(job, env, func(from string, err error) {
		e.printf("\033[0;33mWARNING: %s is not a Docker configuration (%v): not used\033[0;m\n", from, err)
	})
	if len(sources) == 0 {
		return nil, nil
	}
	var out []registryauth.Credentials
	var seen []string
	for _, ref := range refs {
		host := registryauth.Host(ref)
		if slices.Contains(seen, host) {
			continue
		}
		seen = append(seen, host)
		c, ok, err := registryauth.Resolve(ctx, sources, ref)
		if err != nil {
			return nil, refuse(api.ImagePullFailure, "image %s: %v", ref, err)
		}
		if !ok {
			continue
		}
		if c.Username == "" {
			e.printf("\033[0;33mWARNING: the credentials for %s from %s are an identity token, which the kubelet cannot log in with: its images are pulled without credentials\033[0;m\n", host, c.From)
			continue
		}
		e.printf("Authenticating with credentials from %s for %s\n", c.From, host)
		out = append(out, c)
	}
	return out, nil
}

// registrySecret is the job's Secret of type kubernetes.io/dockerconfigjson
// holding creds, which the pod names in its imagePullSecrets. It carries
// the job's labels like its other Secret: the sweep of a restarted
// manager and the cleanup of a resumed job find it by them.
func registrySecret(name, ns string, lbls map[string]string, creds []registryauth.Credentials) (*corev1.Secret, error) {
	data, err := registryauth.DockerConfigJSON(creds)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: data},
	}, nil
}

// pullCredentialsNote says, for an image the kubelet cannot pull, which
// credentials it was given for the image's registry, if any.
func (e *Executor) pullCredentialsNote(image string) string {
	e.mu.Lock()
	from, ok := e.regFrom[registryauth.Host(image)]
	useSA := e.cfg != nil && e.cfg.UseServiceAccountImagePullSecrets
	e.mu.Unlock()
	switch {
	case useSA:
		return "the pod uses its service account's imagePullSecrets (use_service_account_image_pull_secrets)"
	case ok:
		return fmt.Sprintf("the kubelet was given the credentials from %s for %s", from, registryauth.Host(image))
	default:
		return fmt.Sprintf("drover found no credentials for %s (job payload, DOCKER_AUTH_CONFIG, the manager's Docker configuration)", registryauth.Host(image))
	}
}
