package kubernetes

import (
	"encoding/json"
	"maps"
	"math"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/shell"
)

// Values no part of the pod spec may hold.
const (
	maskedValue  = "m4sked-Secret-value"
	plainValue   = "plain-variable-value"
	fileContent  = "-----BEGIN CERTIFICATE-----\nfile-variable-content\n-----END CERTIFICATE-----\n"
	otherContent = "second file's content"
	dottedValue  = "value-of-a-dotted-name"
)

func testSettings() executor.Settings {
	return executor.Settings{RunnerName: "r", ShortToken: "abcdefghi", SystemID: "s_0123456789ab"}
}

// testJob has a masked, a plain, a raw and two file variables, one of
// them defined twice, and one whose name cannot be an environment
// variable.
func testJob() *api.JobResponse {
	return &api.JobResponse{
		ID: 42,
		Variables: api.Variables{
			{Key: "CI_JOB_ID", Value: "42", Public: true},
			{Key: "DEPLOY_TOKEN", Value: maskedValue, Masked: true},
			{Key: "PLAIN", Value: "first definition"},
			{Key: "CA_CERT", Value: fileContent, File: true},
			{Key: "RAW", Value: "$NOT_EXPANDED", Raw: true},
			{Key: "my.dotted", Value: dottedValue},
			{Key: "PLAIN", Value: plainValue},
			{Key: "KUBECONFIG_FILE", Value: otherContent, File: true},
		},
		Image: api.Image{Name: "golang:1.26"},
	}
}

// testPod builds the pod of testJob with cfg, as Prepare does.
func testPod(t *testing.T, cfg *Config, job *api.JobResponse) (*corev1.Pod, *corev1.Secret) {
	t.Helper()
	files := shell.FileVariables(job.Variables, secretsDir, nil)
	lbls := jobLabels(testSettings(), job.ID, cfg.PodLabels)
	name := podName(testSettings(), job.ID)
	spec := podSpec{name: name, ns: cfg.Namespace, labels: lbls, cfg: cfg, job: job, image: job.Image.Name,
		pull: cfg.PullPolicy, services: job.Services, fileKeys: slices.Sorted(maps.Keys(files)), helperImage: cfg.HelperImage}
	return spec.build(), jobSecret(name, cfg.Namespace, lbls, job, files)
}

func container(t *testing.T, pod *corev1.Pod, name string) corev1.Container {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("pod has no container %q: %+v", name, pod.Spec.Containers)
	return corev1.Container{}
}

// The job's variables are in its Secret only: the pod spec, which anyone
// who may list pods reads, holds none of their values.
func TestPodSpecHoldsNoValue(t *testing.T) {
	t.Parallel()
	job := testJob()
	job.Services = []api.Image{{Name: "postgres:16", Alias: "db"}}
	cfg := defaultConfig()
	pod, secret := testPod(t, cfg, job)
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{maskedValue, plainValue, fileContent, "file-variable-content", otherContent, dottedValue, "first definition", "$NOT_EXPANDED"} {
		if strings.Contains(string(b), v) {
			t.Errorf("the pod spec holds the value %q:\n%s", v, b)
		}
	}
	// The Secret holds them: environment variables by name, file
	// variables by key; a name that cannot be an environment variable is
	// left out (the scripts export it if the shell can).
	want := map[string]string{
		"env.CI_JOB_ID":        "42",
		"env.DEPLOY_TOKEN":     maskedValue,
		"env.PLAIN":            plainValue,
		"env.RAW":              "$NOT_EXPANDED",
		"file.CA_CERT":         fileContent,
		"file.KUBECONFIG_FILE": otherContent,
	}
	got := map[string]string{}
	for k, v := range secret.Data {
		got[k] = string(v)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobSecret() data mismatch (-want +got):\n%s", diff)
	}
	if secret.Name != pod.Name || secret.Namespace != DefaultNamespace || secret.Type != corev1.SecretTypeOpaque {
		t.Errorf("jobSecret() = %s/%s type %s, want %s/%s Opaque", secret.Namespace, secret.Name, secret.Type, DefaultNamespace, pod.Name)
	}
	if !maps.Equal(secret.Labels, pod.Labels) {
		t.Errorf("jobSecret() labels = %v, want the pod's %v", secret.Labels, pod.Labels)
	}
	for k := range secret.Data {
		if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
			t.Errorf("secret key %q: %s", k, errs)
		}
	}
}

// File variables are expanded as the scripts expand them.
func TestJobSecretFileVariablesExpanded(t *testing.T) {
	t.Parallel()
	job := &api.JobResponse{ID: 1, Variables: api.Variables{
		{Key: "HOST", Value: "db.example.com"},
		{Key: "CONF", Value: "host=$HOST", File: true},
		{Key: "RAWCONF", Value: "host=$HOST", File: true, Raw: true},
	}}
	s := jobSecret("n", "ns", nil, job, shell.FileVariables(job.Variables, secretsDir, nil))
	if got := string(s.Data["file.CONF"]); got != "host=db.example.com" {
		t.Errorf("file.CONF = %q, want host=db.example.com", got)
	}
	if got := string(s.Data["file.RAWCONF"]); got != "host=$HOST" {
		t.Errorf("file.RAWCONF = %q, want host=$HOST", got)
	}
	if _, ok := s.Data["env.CONF"]; ok {
		t.Errorf("a file variable is in the secret as an environment variable: %v", s.Data)
	}
}

// The build and service containers read each variable by reference to
// the Secret, in the job's order, each name once with its last value.
func TestPodSpecEnv(t *testing.T) {
	t.Parallel()
	job := testJob()
	job.Services = []api.Image{{Name: "postgres:16", Variables: api.Variables{
		{Key: "POSTGRES_DB", Value: "test"},
		{Key: "PGDATA", Value: "/var/lib/$(NOT_EXPANDED)/$HOME"},
	}}}
	pod, _ := testPod(t, defaultConfig(), job)
	ref := func(name string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: pod.Name}, Key: "env." + name,
		}}}
	}
	want := []corev1.EnvVar{ref("CI_JOB_ID"), ref("DEPLOY_TOKEN"), ref("PLAIN"), ref("RAW")}
	if diff := cmp.Diff(want, container(t, pod, containerBuild).Env); diff != "" {
		t.Errorf("build container env mismatch (-want +got):\n%s", diff)
	}
	// A service's own variables follow, as values, escaped so that the
	// kubelet does not expand $(NAME) in them.
	wantSvc := append(slices.Clone(want),
		corev1.EnvVar{Name: "POSTGRES_DB", Value: "test"},
		corev1.EnvVar{Name: "PGDATA", Value: "/var/lib/$$(NOT_EXPANDED)/$$HOME"})
	if diff := cmp.Diff(wantSvc, container(t, pod, servicePrefix+"0").Env); diff != "" {
		t.Errorf("service container env mismatch (-want +got):\n%s", diff)
	}
	if env := container(t, pod, containerHelper).Env; len(env) > 0 {
		t.Errorf("helper container env = %v, want none: it runs drover's helper, not the job", env)
	}
	if got := secretEnv("s", &api.JobResponse{}); got != nil {
		t.Errorf("secretEnv(no variables) = %v, want nil", got)
	}
}

// File variables are the Secret's file.KEY items, mounted read-only at
// secretsDir (as secretsDir/KEY) in the build and helper containers.
func TestPodSpecFileVariables(t *testing.T) {
	t.Parallel()
	pod, _ := testPod(t, defaultConfig(), testJob())
	mode := int32(0o444)
	wantVol := corev1.Volume{Name: volSecrets, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: pod.Name,
		Items: []corev1.KeyToPath{
			{Key: "file.CA_CERT", Path: "CA_CERT"},
			{Key: "file.KUBECONFIG_FILE", Path: "KUBECONFIG_FILE"},
		},
		DefaultMode: &mode,
	}}}
	i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == volSecrets })
	if i < 0 {
		t.Fatalf("no %s volume in %+v", volSecrets, pod.Spec.Volumes)
	}
	if diff := cmp.Diff(wantVol, pod.Spec.Volumes[i]); diff != "" {
		t.Errorf("secrets volume mismatch (-want +got):\n%s", diff)
	}
	wantMount := corev1.VolumeMount{Name: volSecrets, MountPath: secretsDir, ReadOnly: true}
	for _, name := range []string{containerBuild, containerHelper} {
		if !slices.Contains(container(t, pod, name).VolumeMounts, wantMount) {
			t.Errorf("container %s mounts = %+v, want %+v among them", name, container(t, pod, name).VolumeMounts, wantMount)
		}
	}

	// Without file variables there is no such volume.
	job := testJob()
	job.Variables = slices.DeleteFunc(job.Variables, func(v api.Variable) bool { return v.File })
	pod, _ = testPod(t, defaultConfig(), job)
	for _, v := range pod.Spec.Volumes {
		if v.Name == volSecrets {
			t.Errorf("a job without file variables has volume %+v", v)
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == volSecrets {
				t.Errorf("a job without file variables: container %s mounts %+v", c.Name, m)
			}
		}
	}
}

func TestPodSpecLabels(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.PodLabels = map[string]string{"team": "ci", "example.com/tier": "build"}
	cfg.PodAnnotations = map[string]string{"example.com/note": "hello"}
	pod, _ := testPod(t, cfg, testJob())
	want := map[string]string{
		LabelManaged:       "1",
		LabelJob:           "42",
		LabelRunner:        "abcdefghi",
		LabelSystemID:      "s_0123456789ab",
		"team":             "ci",
		"example.com/tier": "build",
	}
	if diff := cmp.Diff(want, pod.Labels); diff != "" {
		t.Errorf("pod labels mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(cfg.PodAnnotations, pod.Annotations); diff != "" {
		t.Errorf("pod annotations mismatch (-want +got):\n%s", diff)
	}
	if pod.Namespace != DefaultNamespace {
		t.Errorf("pod namespace = %q, want %q", pod.Namespace, DefaultNamespace)
	}
	// drover's labels win over pod_labels (which ParseConfig refuses
	// with drover's prefix anyway), and the configuration is not changed.
	extra := map[string]string{LabelJob: "7", "x": "y"}
	l := jobLabels(testSettings(), 42, extra)
	if l[LabelJob] != "42" || l["x"] != "y" || extra[LabelJob] != "7" || len(extra) != 2 {
		t.Errorf("jobLabels() = %v (pod_labels now %v), want job 42 and x=y, pod_labels unchanged", l, extra)
	}
}

// Services are reachable by their aliases and by the names derived from
// their images, on the pod's loopback address.
func TestPodSpecHostAliases(t *testing.T) {
	t.Parallel()
	job := testJob()
	job.Services = []api.Image{
		{Name: "postgres:16", Alias: "db, pg"},
		{Name: "registry.example.com:5000/group/redis:7"},
		{Name: "mysql", Alias: "db  Bad_Alias"},
	}
	pod, _ := testPod(t, defaultConfig(), job)
	want := []corev1.HostAlias{{IP: "127.0.0.1", Hostnames: []string{
		"db", "pg", "postgres",
		// registry.example.com__group__redis is not a DNS name.
		"registry.example.com-group-redis",
		"mysql",
	}}}
	if diff := cmp.Diff(want, pod.Spec.HostAliases); diff != "" {
		t.Errorf("host aliases mismatch (-want +got):\n%s", diff)
	}
	for i, s := range job.Services {
		c := container(t, pod, servicePrefix+string(rune('0'+i)))
		if c.Image != s.Name {
			t.Errorf("service %d image = %q, want %q", i, c.Image, s.Name)
		}
	}

	pod, _ = testPod(t, defaultConfig(), testJob())
	if pod.Spec.HostAliases != nil {
		t.Errorf("host aliases without services = %+v, want none", pod.Spec.HostAliases)
	}
	if n := len(pod.Spec.Containers); n != 2 {
		t.Errorf("%d containers without services, want build and helper", n)
	}
}

func TestPodSpecResources(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Build = Resources{CPURequest: qty("500m"), CPULimit: qty("2"), MemoryRequest: qty("256Mi"), MemoryLimit: qty("1Gi")}
	cfg.Helper = Resources{CPURequest: qty("100m"), MemoryLimit: qty("128Mi")}
	cfg.Service = Resources{MemoryRequest: qty("64Mi")}
	job := testJob()
	job.Services = []api.Image{{Name: "redis"}, {Name: "postgres"}}
	pod, _ := testPod(t, cfg, job)
	want := map[string]corev1.ResourceRequirements{
		containerBuild: {
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
		containerHelper: {
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		servicePrefix + "0": {Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
		servicePrefix + "1": {Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
	}
	got := map[string]corev1.ResourceRequirements{}
	for _, c := range pod.Spec.Containers {
		got[c.Name] = c.Resources
	}
	if diff := cmp.Diff(want, got, cmpConfig); diff != "" {
		t.Errorf("resources mismatch (-want +got):\n%s", diff)
	}
	// None configured: none asked for.
	pod, _ = testPod(t, defaultConfig(), job)
	for _, c := range pod.Spec.Containers {
		if c.Resources.Requests != nil || c.Resources.Limits != nil {
			t.Errorf("container %s resources = %+v, want none", c.Name, c.Resources)
		}
	}
}

// The build container idles in a shell reading its open standard input,
// started by the image's entrypoint, none, or the job's.
func TestPodSpecEntrypoint(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		entrypoint    []string
		command, args []string
	}{
		{"the image's", nil, nil, []string{"sh"}},
		{"the image's (empty list)", []string{}, nil, []string{"sh"}},
		{"none", []string{""}, []string{"sh"}, nil},
		{"the job's", []string{"/bin/tini", "--"}, []string{"/bin/tini", "--"}, []string{"sh"}},
	} {
		job := testJob()
		job.Image.Entrypoint = tt.entrypoint
		pod, _ := testPod(t, defaultConfig(), job)
		b := container(t, pod, containerBuild)
		if !slices.Equal(b.Command, tt.command) || !slices.Equal(b.Args, tt.args) || !b.Stdin || b.TTY {
			t.Errorf("%s: build container command %q args %q stdin %v tty %v, want %q %q stdin true tty false",
				tt.name, b.Command, b.Args, b.Stdin, b.TTY, tt.command, tt.args)
		}
	}
	pod, _ := testPod(t, defaultConfig(), testJob())
	h := container(t, pod, containerHelper)
	if !slices.Equal(h.Command, []string{"sh"}) || h.Args != nil || !h.Stdin || h.Image != defaultConfig().HelperImage {
		t.Errorf("helper container = command %q args %q stdin %v image %q, want sh, open stdin, the helper image", h.Command, h.Args, h.Stdin, h.Image)
	}
	job := testJob()
	job.Services = []api.Image{{Name: "pg", Entrypoint: []string{"docker-entrypoint.sh"}, Command: []string{"postgres", "-c", "fsync=off"}}}
	pod, _ = testPod(t, defaultConfig(), job)
	s := container(t, pod, servicePrefix+"0")
	if !slices.Equal(s.Command, job.Services[0].Entrypoint) || !slices.Equal(s.Args, job.Services[0].Command) || s.Stdin {
		t.Errorf("service container = command %q args %q stdin %v, want its entrypoint and command", s.Command, s.Args, s.Stdin)
	}
}

// TestPodSpecShape covers the rest of the spec: the pod is not restarted,
// its containers share their process namespace (the helper stops a
// cancelled stage's processes), and the runner's settings are applied.
func TestPodSpecShape(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Namespace = "ci"
	cfg.ServiceAccount = "runner"
	cfg.ImagePullSecrets = []string{"regcred", "mirror"}
	cfg.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
	cfg.NodeTolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ci", Effect: corev1.TaintEffectNoSchedule}}
	cfg.PullPolicy = []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullAlways}
	grace := int64(5)
	cfg.CleanupGrace = &grace
	cfg.Volumes = []Volume{
		{Kind: "pvc", Name: "data", MountPath: "/data", SubPath: "x", ReadOnly: true,
			Source: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: true}}},
		{Kind: "empty_dir", Name: "scratch", MountPath: "/scratch", Source: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	job := testJob()
	job.Services = []api.Image{{Name: "redis", PullPolicy: []string{"bogus", "never"}}, {Name: "pg"}}
	pod, _ := testPod(t, cfg, job)
	sp := pod.Spec
	if sp.RestartPolicy != corev1.RestartPolicyNever || sp.ShareProcessNamespace == nil || !*sp.ShareProcessNamespace {
		t.Errorf("restartPolicy %q shareProcessNamespace %v, want Never and true", sp.RestartPolicy, sp.ShareProcessNamespace)
	}
	if sp.ServiceAccountName != "runner" || pod.Namespace != "ci" {
		t.Errorf("service account %q namespace %q, want runner and ci", sp.ServiceAccountName, pod.Namespace)
	}
	if diff := cmp.Diff([]corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}}, sp.ImagePullSecrets); diff != "" {
		t.Errorf("image pull secrets mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(cfg.NodeSelector, sp.NodeSelector); diff != "" {
		t.Errorf("node selector mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(cfg.NodeTolerations, sp.Tolerations); diff != "" {
		t.Errorf("tolerations mismatch (-want +got):\n%s", diff)
	}
	if sp.TerminationGracePeriodSeconds == nil || *sp.TerminationGracePeriodSeconds != 5 || sp.TerminationGracePeriodSeconds == cfg.CleanupGrace {
		t.Errorf("terminationGracePeriodSeconds = %v, want a copy of 5", sp.TerminationGracePeriodSeconds)
	}
	wantVols := []corev1.Volume{
		{Name: volJob, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: volBuilds, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: volCache, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "data", VolumeSource: cfg.Volumes[0].Source},
		{Name: "scratch", VolumeSource: cfg.Volumes[1].Source},
	}
	if diff := cmp.Diff(wantVols, sp.Volumes[:len(wantVols)]); diff != "" {
		t.Errorf("volumes mismatch (-want +got):\n%s", diff)
	}
	wantMounts := []corev1.VolumeMount{
		{Name: volJob, MountPath: jobDir},
		{Name: volBuilds, MountPath: buildsDir},
		{Name: volCache, MountPath: cacheDir},
		{Name: "data", MountPath: "/data", SubPath: "x", ReadOnly: true},
		{Name: "scratch", MountPath: "/scratch"},
		{Name: volSecrets, MountPath: secretsDir, ReadOnly: true},
	}
	for _, name := range []string{containerBuild, containerHelper} {
		if diff := cmp.Diff(wantMounts, container(t, pod, name).VolumeMounts); diff != "" {
			t.Errorf("container %s mounts mismatch (-want +got):\n%s", name, diff)
		}
	}
	// Pull policies: the job's first for the build container (Prepare
	// puts the job's or the runner's in pull), the runner's first for the
	// helper, a service's own first valid one, else the runner's.
	for name, want := range map[string]corev1.PullPolicy{
		containerBuild: corev1.PullIfNotPresent, containerHelper: corev1.PullIfNotPresent,
		servicePrefix + "0": corev1.PullNever, servicePrefix + "1": corev1.PullIfNotPresent,
	} {
		if got := container(t, pod, name).ImagePullPolicy; got != want {
			t.Errorf("container %s pull policy = %q, want %q", name, got, want)
		}
	}
	for _, c := range pod.Spec.Containers[2:] {
		if len(c.VolumeMounts) > 0 {
			t.Errorf("service container %s mounts %+v, want none", c.Name, c.VolumeMounts)
		}
	}
	checkPod(t, pod)

	// Without those settings the pod leaves them to the cluster.
	pod, _ = testPod(t, defaultConfig(), &api.JobResponse{ID: 1, Image: api.Image{Name: "alpine"}})
	sp = pod.Spec
	if sp.TerminationGracePeriodSeconds != nil || sp.ImagePullSecrets != nil || sp.NodeSelector != nil ||
		sp.Tolerations != nil || sp.ServiceAccountName != "" || pod.Annotations != nil {
		t.Errorf("pod spec of the default configuration sets %+v", sp)
	}
	for _, c := range sp.Containers {
		if c.ImagePullPolicy != "" {
			t.Errorf("container %s pull policy = %q, want the cluster's default", c.Name, c.ImagePullPolicy)
		}
	}
	checkPod(t, pod)
}

// A volume of the runner at the builds or cache directory replaces
// drover's emptyDir there: a container cannot mount two volumes at one
// path.
func TestPodSpecVolumeReplacesOwnDirectory(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Volumes = []Volume{{Kind: "pvc", Name: "cache-claim", MountPath: "/cache/",
		Source: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "cache-claim"}}}}
	pod, _ := testPod(t, cfg, testJob())
	for _, v := range pod.Spec.Volumes {
		if v.Name == volCache {
			t.Errorf("drover's cache volume is still there: %+v", pod.Spec.Volumes)
		}
	}
	var builds bool
	for _, m := range container(t, pod, containerBuild).VolumeMounts {
		builds = builds || m.Name == volBuilds
	}
	if !builds {
		t.Errorf("drover's builds volume is gone: %+v", pod.Spec.Volumes)
	}
	checkPod(t, pod)
}

// checkPod checks what the API server would refuse of a pod that
// apimachinery can tell: names, labels, annotations, volumes and their
// mounts, environment variable names, tolerations.
func checkPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	check := func(what string, errs []string) {
		t.Helper()
		if len(errs) > 0 {
			t.Errorf("%s: %s", what, strings.Join(errs, "; "))
		}
	}
	check("pod name "+pod.Name, validation.IsDNS1123Subdomain(pod.Name))
	if len(pod.Name) > validation.DNS1123LabelMaxLength {
		t.Errorf("pod name %q: longer than a host name", pod.Name)
	}
	check("namespace "+pod.Namespace, validation.IsDNS1123Label(pod.Namespace))
	for k, v := range pod.Labels {
		check("label name "+k, validation.IsQualifiedName(k))
		check("label value "+v, validation.IsValidLabelValue(v))
	}
	for k := range pod.Annotations {
		check("annotation "+k, validation.IsQualifiedName(strings.ToLower(k)))
	}
	for k, v := range pod.Spec.NodeSelector {
		check("node selector "+k, validation.IsQualifiedName(k))
		check("node selector value "+v, validation.IsValidLabelValue(v))
	}
	for _, tol := range pod.Spec.Tolerations {
		if tol.Key != "" {
			check("toleration key "+tol.Key, validation.IsQualifiedName(tol.Key))
		} else if tol.Operator != corev1.TolerationOpExists {
			t.Errorf("toleration %+v: an empty key needs operator Exists", tol)
		}
		check("toleration value "+tol.Value, validation.IsValidLabelValue(tol.Value))
	}
	vols := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		check("volume name "+v.Name, validation.IsDNS1123Label(v.Name))
		if vols[v.Name] {
			t.Errorf("volume %q twice", v.Name)
		}
		vols[v.Name] = true
	}
	names := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		check("container name "+c.Name, validation.IsDNS1123Label(c.Name))
		if names[c.Name] {
			t.Errorf("container %q twice", c.Name)
		}
		names[c.Name] = true
		paths := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				t.Errorf("container %s mounts %q, which is not a volume of the pod", c.Name, m.Name)
			}
			if !path.IsAbs(m.MountPath) {
				t.Errorf("container %s mounts %q at %q, not an absolute path", c.Name, m.Name, m.MountPath)
			}
			if p := path.Clean(m.MountPath); paths[p] {
				t.Errorf("container %s mounts two volumes at %s", c.Name, p)
			} else {
				paths[p] = true
			}
		}
		for _, e := range c.Env {
			check("env "+e.Name, validation.IsEnvVarName(e.Name))
		}
	}
	for _, h := range pod.Spec.HostAliases {
		for _, n := range h.Hostnames {
			check("host alias "+n, validation.IsDNS1123Subdomain(n))
		}
	}
}

// fuzzPod is the pod of a job with variables and a service under c.
func fuzzPod(c *Config) *corev1.Pod {
	job := testJob()
	job.Services = []api.Image{{Name: "postgres:16", Alias: "db"}}
	files := shell.FileVariables(job.Variables, secretsDir, nil)
	s := executor.Settings{ShortToken: "abcdefghi", SystemID: "s_1"}
	return podSpec{name: podName(s, job.ID), ns: c.Namespace, labels: jobLabels(s, job.ID, c.PodLabels), cfg: c, job: job,
		image: "alpine", pull: c.PullPolicy, services: job.Services, fileKeys: slices.Sorted(maps.Keys(files)), helperImage: c.HelperImage}.build()
}

// oddTokens are short tokens and system ids that labels and pod names
// must survive.
var oddTokens = []string{
	"", "a", "-", "_", ".", "--x--", "_a_", ".a.", "ABCdef123", "glrt-abcd", "a b/c:d", "x.y-z_",
	"ünïcödé", "日本", "\x00\xff", strings.Repeat("a", 100), strings.Repeat("-", 100),
	strings.Repeat("a", 62) + "-b", strings.Repeat("a", 63) + "-", strings.Repeat("ab-", 30),
}

func TestLabelValue(t *testing.T) {
	t.Parallel()
	for _, s := range oddTokens {
		v := labelValue(s)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("labelValue(%q) = %q: %s", s, v, strings.Join(errs, "; "))
		}
	}
	for _, s := range []string{"abcdefghi", "s_0123456789ab", "A.b-C_d"} {
		if got := labelValue(s); got != s {
			t.Errorf("labelValue(%q) = %q, want it unchanged", s, got)
		}
	}
}

func TestPodName(t *testing.T) {
	t.Parallel()
	for _, s := range oddTokens {
		for _, id := range []int64{0, 1, 42, math.MaxInt64} {
			n := podName(executor.Settings{ShortToken: s}, id)
			if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
				t.Errorf("podName(%q, %d) = %q: %s", s, id, n, strings.Join(errs, "; "))
			}
		}
	}
	s := executor.Settings{ShortToken: "AbC_dEf.9"}
	a, b := podName(s, 7), podName(s, 7)
	if a == b {
		t.Errorf("podName() = %q twice, want a new name for each try", a)
	}
	if !strings.HasPrefix(a, "drover-abc-def-9-job-7-") {
		t.Errorf("podName() = %q, want drover-abc-def-9-job-7-<random>", a)
	}
}

func FuzzPodName(f *testing.F) {
	for _, s := range oddTokens {
		f.Add(s, int64(1))
	}
	f.Fuzz(func(t *testing.T, tok string, id int64) {
		if id < 0 {
			return // job ids are positive
		}
		if v := labelValue(tok); len(validation.IsValidLabelValue(v)) > 0 {
			t.Fatalf("labelValue(%q) = %q: not a label value", tok, v)
		}
		if n := podName(executor.Settings{ShortToken: tok}, id); len(validation.IsDNS1123Label(n)) > 0 {
			t.Fatalf("podName(%q, %d) = %q: not a DNS label", tok, id, n)
		}
	})
}
