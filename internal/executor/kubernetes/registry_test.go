package kubernetes

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
	"github.com/drover-ci/drover/internal/registryauth"
)

// The pod names the runner's image_pull_secrets, then the job's registry
// Secret; with use_service_account_image_pull_secrets, none (the service
// account's apply), as GitLab Runner does.
func TestPodSpecImagePullSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		configured []string
		registry   string
		useSA      bool
		want       []corev1.LocalObjectReference
	}{
		{"none", nil, "", false, nil},
		{"configured", []string{"regcred"}, "", false, []corev1.LocalObjectReference{{Name: "regcred"}}},
		{"the job's", nil, "job-registry", false, []corev1.LocalObjectReference{{Name: "job-registry"}}},
		{"both", []string{"regcred", "mirror"}, "job-registry", false,
			[]corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}, {Name: "job-registry"}}},
		{"service account's", []string{"regcred"}, "job-registry", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig()
			cfg.ImagePullSecrets, cfg.UseServiceAccountImagePullSecrets = tc.configured, tc.useSA
			job := testJob()
			spec := podSpec{name: "p", ns: "ci", cfg: cfg, job: job, image: job.Image.Name, registrySecret: tc.registry}
			if diff := cmp.Diff(tc.want, spec.build().Spec.ImagePullSecrets); diff != "" {
				t.Errorf("imagePullSecrets (-want +got):\n%s", diff)
			}
		})
	}
}

// registryCreds finds credentials for the registries of the job's images
// once per registry, says in the job's log where each came from, and
// leaves out (with a warning) an identity token, which the kubelet cannot
// use; the Secret made of them is a dockerconfigjson with the job's
// labels.
func TestRegistryCreds(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no config.json of the manager
	job := &api.JobResponse{
		Variables: api.Variables{{Key: "DOCKER_AUTH_CONFIG", Value: `{"auths": {
			"var.example.com": {"username": "var-user", "password": "var-pass"},
			"token.example.com": {"identitytoken": "refresh"}}}`}},
		Credentials: []api.Credentials{{Type: "registry", URL: "gitlab.example.com:5050", Username: "gitlab-ci-token", Password: "job-token"}},
	}
	tr := &executortest.Trace{}
	e := &Executor{trace: tr}
	refs := []string{
		"gitlab.example.com:5050/g/p/build:1", "var.example.com/svc:1", "gitlab.example.com:5050/g/p/other:2",
		"docker.io/library/postgres:16", "token.example.com/svc:1",
	}
	creds, err := e.registryCreds(t.Context(), job, nil, refs)
	if err != nil {
		t.Fatal(err)
	}
	want := []registryauth.Credentials{
		{Registry: "gitlab.example.com:5050", Username: "gitlab-ci-token", Password: "job-token", From: registryauth.FromPayload},
		{Registry: "var.example.com", Username: "var-user", Password: "var-pass", From: registryauth.FromVariable},
	}
	if diff := cmp.Diff(want, creds); diff != "" {
		t.Errorf("registryCreds (-want +got):\n%s", diff)
	}
	log := tr.String()
	for _, line := range []string{
		"Authenticating with credentials from job payload (GitLab Registry) for gitlab.example.com:5050\n",
		"Authenticating with credentials from $DOCKER_AUTH_CONFIG for var.example.com\n",
		"the credentials for token.example.com from $DOCKER_AUTH_CONFIG are an identity token",
	} {
		if strings.Count(log, line) != 1 {
			t.Errorf("the job's log has %q %d times, want once:\n%s", line, strings.Count(log, line), log)
		}
	}

	lbls := jobLabels(testSettings(), 42, nil)
	sec, err := registrySecret("drover-x-job-42-abc-registry", "ci", lbls, creds)
	if err != nil {
		t.Fatal(err)
	}
	if sec.Type != corev1.SecretTypeDockerConfigJson || len(sec.Data) != 1 || sec.Labels[LabelJob] != "42" || sec.Labels[LabelManaged] != "1" {
		t.Errorf("registry secret = type %q, keys %d, labels %v", sec.Type, len(sec.Data), sec.Labels)
	}
	var cfg registryauth.Config
	if err := json.Unmarshal(sec.Data[corev1.DockerConfigJsonKey], &cfg); err != nil || len(cfg.Auths) != 2 {
		t.Fatalf("registry secret's %s = %s, %v; want two auths", corev1.DockerConfigJsonKey, sec.Data[corev1.DockerConfigJsonKey], err)
	}
	if c, ok, err := cfg.Lookup(t.Context(), "gitlab.example.com:5050"); err != nil || !ok || c.Password != "job-token" {
		t.Errorf("the secret's credentials for gitlab.example.com:5050 = %+v, %v, %v", c, ok, err)
	}

	// A job without any source asks nothing and logs nothing.
	tr2 := &executortest.Trace{}
	e2 := &Executor{trace: tr2}
	if creds, err := e2.registryCreds(t.Context(), &api.JobResponse{}, nil, refs); err != nil || creds != nil || tr2.String() != "" {
		t.Errorf("registryCreds without sources = %v, %v; log %q", creds, err, tr2.String())
	}
	// A broken entry fails the job as an image pull failure.
	bad := &api.JobResponse{Variables: api.Variables{{Key: "DOCKER_AUTH_CONFIG", Value: `{"auths": {"var.example.com": {"auth": "%%%"}}}`}}}
	_, err = e2.registryCreds(t.Context(), bad, nil, refs)
	var be *executor.BuildError
	if !errors.As(err, &be) || be.Reason != api.ImagePullFailure {
		t.Errorf("registryCreds with a broken auth = %v, want an image_pull_failure", err)
	}
}

// TestSecretLate: a failed pull is the kubelet's early one, without the
// job's registry secret, when its last warning that it could not read
// that secret is no older than the last pull failure (whole seconds); a
// failure a back-off later, or a secret the job did not bring, fails the
// job.
func TestSecretLate(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	ev := func(reason, msg string, at time.Duration) corev1.Event {
		return corev1.Event{Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(t0.Add(at))}
	}
	late := func(names string, at time.Duration) corev1.Event {
		return ev(reasonSecretLate, "Unable to retrieve some image pull secrets ("+names+"); attempting to pull the image may not succeed.", at)
	}
	failed := func(at time.Duration) corev1.Event {
		return ev("Failed", `Failed to pull image "reg:5000/private/busybox:x": 401 Unauthorized`, at)
	}
	cases := []struct {
		name string
		evs  []corev1.Event
		own  string
		want bool
	}{
		{"the pull right after the warning", []corev1.Event{late("job-reg", 0), failed(0)}, "job-reg", true},
		{"the pull a second after it", []corev1.Event{failed(1 * time.Second), late("job-reg", 0)}, "job-reg", true},
		{"the warning repeated in the back-off", []corev1.Event{late("job-reg", 8*time.Second), failed(1 * time.Second)}, "job-reg", true},
		{"one of several secrets", []corev1.Event{late("other, job-reg", 0), failed(0)}, "job-reg", true},
		{"the pull a back-off later, with the secret", []corev1.Event{late("job-reg", 0), failed(11 * time.Second)}, "job-reg", false},
		{"another secret could not be read", []corev1.Event{late("configured", 0), failed(0)}, "job-reg", false},
		{"a name the listed one only starts with", []corev1.Event{late("job-reg-2", 0), failed(0)}, "job-reg", false},
		{"no warning", []corev1.Event{failed(0)}, "job-reg", false},
		{"the job brought no secret", []corev1.Event{late("job-reg", 0), failed(0)}, "", false},
		{"no event yet of the pull", []corev1.Event{late("job-reg", 0)}, "job-reg", true},
		{"an event with only its event time", []corev1.Event{
			{Reason: reasonSecretLate, Message: "Unable to retrieve some image pull secrets (job-reg); x", EventTime: metav1.NewMicroTime(t0)}, failed(0)}, "job-reg", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := secretLate(tc.evs, tc.own); got != tc.want {
				t.Errorf("secretLate = %v, want %v", got, tc.want)
			}
		})
	}
}
