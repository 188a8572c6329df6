package kubernetes

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
)

// TestPodAutomountsNoToken: the job's pod gets no service account API
// token unless automount_service_account_token asks for it, so a job
// cannot use its service account's rights (another job's Secret in the
// namespace included).
func TestPodAutomountsNoToken(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name string
		set  *bool
		want bool
	}{{"unset", nil, false}, {"false", &no, false}, {"true", &yes, true}} {
		t.Run(tc.name, func(t *testing.T) {
			pod, _ := testPod(t, &Config{Namespace: "ci", ServiceAccount: "runner", AutomountServiceAccountToken: tc.set}, testJob())
			got := pod.Spec.AutomountServiceAccountToken
			if got == nil || *got != tc.want {
				t.Fatalf("AutomountServiceAccountToken = %v, want %v", got, tc.want)
			}
		})
	}
	c, warnings, err := loadKube(t, "[runners.kubernetes]\n"+helperLine+"  automount_service_account_token = true\n")
	if err != nil || len(warnings) > 0 {
		t.Fatalf("ParseConfig: %v, warnings %q", err, warnings)
	}
	if c.AutomountServiceAccountToken == nil || !*c.AutomountServiceAccountToken {
		t.Errorf("automount_service_account_token = true read as %v", c.AutomountServiceAccountToken)
	}
}

// TestPodSecretOwnPodOnly: the job's Secret is referenced by its own pod
// only, under a name with a random part.
func TestPodSecretOwnPodOnly(t *testing.T) {
	job := testJob()
	pod, sec := testPod(t, &Config{Namespace: "ci"}, job)
	if sec.Name != pod.Name {
		t.Fatalf("secret %q, pod %q: want one name", sec.Name, pod.Name)
	}
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != pod.Name {
				t.Errorf("container %s reads Secret %q", c.Name, e.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName != pod.Name {
			t.Errorf("volume %s mounts Secret %q", v.Name, v.Secret.SecretName)
		}
	}
	if again := podName(testSettings(), job.ID); again == pod.Name {
		t.Errorf("podName gave %q twice for one job: the name is guessable", again)
	}
}

// TestJobImagesProbes: the job's image and services as the pod spec gets
// them: checked against the allow lists and as references before the
// cluster sees them, qualified so that the node never resolves them as
// local image IDs.
func TestJobImagesProbes(t *testing.T) {
	sha := strings.Repeat("a", 64)
	cfg := &Config{AllowedImages: []string{"alpine:*", "sha256:*"}, AllowedServices: []string{"postgres:*"}}
	cases := []struct {
		name     string
		image    string
		services []string
		ref      string
		svc      []string
		refused  string
	}{
		{"plain", "alpine:3", nil, "docker.io/library/alpine:3", nil, ""},
		{"service", "alpine:3", []string{"postgres:16"}, "docker.io/library/alpine:3", []string{"docker.io/library/postgres:16"}, ""},
		{"image ID as digest", "sha256:" + sha, nil, "docker.io/library/sha256:" + sha, nil, ""},
		{"bare image ID", sha, nil, "", nil, "not a valid image reference"},
		{"tag with another digest", "alpine:3@sha256:" + sha, nil, "", nil, "allowed_images"},
		{"trailing space", "alpine:3 ", nil, "", nil, "not a valid image reference"},
		{"control character", "alpine:3\x1b", nil, "", nil, "not a valid image reference"},
		{"upper case", "Alpine:3", nil, "", nil, "not a valid image reference"},
		{"dot-dot", "x/../alpine:3", nil, "", nil, "not a valid image reference"},
		{"service not allowed", "alpine:3", []string{"evil.example/postgres:16"}, "", nil, "allowed_services"},
		{"service not a reference", "alpine:3", []string{"postgres:16\n"}, "", nil, "not a valid image reference"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := &api.JobResponse{Image: api.Image{Name: tc.image}}
			for _, s := range tc.services {
				job.Services = append(job.Services, api.Image{Name: s})
			}
			img, ref, svc, err := jobImages(cfg, job)
			if tc.refused != "" {
				var be *executor.BuildError
				if !errors.As(err, &be) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("jobImages = %q, %v, want a refusal naming %q", ref, err, tc.refused)
				}
				return
			}
			if err != nil || img != tc.image || ref != tc.ref || strings.Join(svc, ",") != strings.Join(tc.svc, ",") {
				t.Fatalf("jobImages = %q, %q, %q, %v; want %q, %q, %q", img, ref, svc, err, tc.image, tc.ref, tc.svc)
			}
		})
	}
}

// TestPodSpecJobInputProbes: job input that reaches the pod spec (service
// aliases, names derived from service images, variable names) is valid
// there or left out, so a job cannot shape the spec beyond its fields.
func TestPodSpecJobInputProbes(t *testing.T) {
	job := testJob()
	job.Variables = append(job.Variables,
		api.Variable{Key: "BAD NAME", Value: "x"},
		api.Variable{Key: "A=B", Value: "x"},
		api.Variable{Key: "", Value: "x"},
		api.Variable{Key: "$(HOSTNAME)", Value: "x"},
	)
	job.Services = []api.Image{{
		Name:  "postgres:16",
		Alias: "db,Evil_Alias,kubernetes.default.svc,../x,a b,x\ny," + strings.Repeat("a", 300),
		Variables: api.Variables{
			{Key: "POSTGRES_PASSWORD", Value: "$(DEPLOY_TOKEN)"},
			{Key: "BAD NAME", Value: "x"},
			{Key: "", Value: "x"},
			{Key: "X=Y", Value: "x"},
		},
	}}
	pod, _ := testPod(t, &Config{Namespace: "ci"}, job)
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if errs := validation.IsEnvVarName(e.Name); len(errs) > 0 {
				t.Errorf("container %s: env %q: %v", c.Name, e.Name, errs)
			}
			if e.ValueFrom == nil && strings.Contains(e.Value, "$(") && !strings.Contains(e.Value, "$$(") {
				t.Errorf("container %s: env %s=%q: the kubelet would expand it", c.Name, e.Name, e.Value)
			}
		}
	}
	for _, ha := range pod.Spec.HostAliases {
		for _, h := range ha.Hostnames {
			if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
				t.Errorf("host alias %q: %v", h, errs)
			}
		}
	}
	for k, v := range pod.Labels {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q: %v", k, v, errs)
		}
	}
	if errs := validation.IsDNS1123Subdomain(pod.Name); len(errs) > 0 {
		t.Errorf("pod name %q: %v", pod.Name, errs)
	}
}

// TestPodLabelsFromHostileSettings: the runner's token and system id are
// made valid label values and names whatever they hold.
func TestPodLabelsFromHostileSettings(t *testing.T) {
	for _, s := range []executor.Settings{
		{ShortToken: "../..//", SystemID: strings.Repeat("x", 100) + "\n"},
		{ShortToken: "-_.", SystemID: "ü$`\x00"},
		{ShortToken: "", SystemID: ""},
		{ShortToken: "UPPER.lower_9", SystemID: "s_0123"},
	} {
		l := jobLabels(s, 1, nil)
		for k, v := range l {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("settings %+v: label %s=%q: %v", s, k, v, errs)
			}
		}
		if n := podName(s, 1); len(validation.IsDNS1123Subdomain(n)) > 0 {
			t.Errorf("settings %+v: pod name %q is not a DNS-1123 name", s, n)
		}
	}
}
