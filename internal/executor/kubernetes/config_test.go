package kubernetes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drover-ci/drover/internal/config"
)

// runnerHead is a [[runners]] entry without its kubernetes table; what a
// test appends starts at line 7.
const runnerHead = `concurrent = 1
[[runners]]
  name = "r"
  url = "https://gitlab.example.com"
  token = "glrt-abcdefghijklmnop"
  executor = "kubernetes"
`

// helperLine is the one key ParseConfig requires; tests that are not
// about it put it first in their table, at line 8.
const helperLine = "  helper_image = \"registry.example.com/drover-helper:1\"\n"

// loadKube writes runnerHead+body as config.toml in a directory of its own,
// loads it as drover run does, and reads the kubernetes table of its first
// runner. Messages are returned relative to the directory: they start
// with "config.toml:".
func loadKube(t *testing.T, body string) (*Config, []string, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(runnerHead+body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(path)
	if err != nil {
		t.Fatalf("config.Load() error = %v\n%s", err, body)
	}
	c, warnings, err := ParseConfig(path, &cfg.Runners[0])
	var ws []string
	for _, w := range warnings {
		if w.File != path {
			t.Errorf("warning %s: file %q, want %q", w, w.File, path)
		}
		ws = append(ws, strings.TrimPrefix(w.String(), dir+string(filepath.Separator)))
	}
	if err != nil {
		var ce *config.Error
		if !errors.As(err, &ce) || ce.File != path {
			t.Fatalf("ParseConfig() error = %T %v, want a *config.Error naming %s", err, err, path)
		}
		if c != nil {
			t.Errorf("ParseConfig() = %+v with error %v, want nil", c, err)
		}
		ce2 := *ce
		ce2.File = "config.toml"
		err = &ce2
	}
	return c, ws, err
}

// cmpConfig compares Configs: quantities by value and text, regular
// expressions by their source.
var cmpConfig = cmp.Options{
	cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 && a.String() == b.String() }),
	cmp.Comparer(func(a, b *regexp.Regexp) bool {
		if a == nil || b == nil {
			return a == b
		}
		return a.String() == b.String()
	}),
}

func qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func defaultConfig() *Config {
	return &Config{
		Namespace:    DefaultNamespace,
		HelperImage:  "registry.example.com/drover-helper:1",
		PollInterval: DefaultPollInterval,
		PollTimeout:  DefaultPollTimeout,
	}
}

func TestParseConfigDefaults(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		"[runners.kubernetes]\n" + helperLine,
		// Empty values are GitLab's way of leaving a key at its default.
		"[runners.kubernetes]\n" + helperLine + `  namespace = ""
  namespace_overwrite_allowed = ""
  cpu_limit = ""
  helper_memory_request = ""
  poll_interval = 0
  poll_timeout = 0
  pull_policy = []
`,
	} {
		c, warnings, err := loadKube(t, body)
		if err != nil || len(warnings) > 0 {
			t.Fatalf("ParseConfig() warnings %q, error %v\n%s", warnings, err, body)
		}
		if diff := cmp.Diff(defaultConfig(), c, cmpConfig); diff != "" {
			t.Errorf("ParseConfig() mismatch (-want +got):\n%s\n%s", diff, body)
		}
	}
}

func TestParseConfigEveryKey(t *testing.T) {
	t.Parallel()
	body := `[runners.kubernetes]
  host = "https://k8s.example.com:6443"
  bearer_token = "token-value"
  ca_file = "/etc/k8s/ca.crt"
  cert_file = "/etc/k8s/client.crt"
  key_file = "/etc/k8s/client.key"
  context = "ci-cluster"
  namespace = "ci-jobs"
  namespace_overwrite_allowed = "^ci-[a-z]+$"
  image = "alpine:3.20"
  helper_image = "registry.example.com/drover-helper:1"
  service_account = "runner"
  pull_policy = ["if-not-present", "Always", "never"]
  cpu_request = "500m"
  cpu_limit = 2
  memory_request = "256Mi"
  memory_limit = "1Gi"
  helper_cpu_request = "100m"
  helper_cpu_limit = "0.2"
  helper_memory_request = "64Mi"
  helper_memory_limit = "128Mi"
  service_cpu_request = "250m"
  service_cpu_limit = "1"
  service_memory_request = "128Mi"
  service_memory_limit = "512M"
  image_pull_secrets = ["regcred", "mirror-cred"]
  use_service_account_image_pull_secrets = true
  poll_interval = 5
  poll_timeout = 600
  cleanup_grace_period_seconds = 0
  allowed_images = ["alpine:*", "registry.example.com/**"]
  allowed_services = ["postgres:*", "redis"]
  [runners.kubernetes.node_selector]
    "kubernetes.io/os" = "linux"
    disktype = "ssd"
  [runners.kubernetes.node_tolerations]
    "dedicated=ci" = "NoSchedule"
    "spot" = ""
    "example.com/gpu=true" = "NoExecute"
    "slow" = "PreferNoSchedule"
  [runners.kubernetes.pod_labels]
    team = "ci"
    "example.com/tier" = "build"
    empty = ""
  [runners.kubernetes.pod_annotations]
    "example.com/note" = "any text: even = signs, and spaces"
  [[runners.kubernetes.volumes.empty_dir]]
    name = "scratch"
    mount_path = "/scratch"
    medium = "Memory"
    size_limit = "1Gi"
  [[runners.kubernetes.volumes.empty_dir]]
    name = "plain"
    mount_path = "/plain"
    sub_path = "sub"
  [[runners.kubernetes.volumes.host_path]]
    name = "docker-sock"
    mount_path = "/var/run/docker.sock"
    host_path = "/run/docker.sock"
    read_only = true
  [[runners.kubernetes.volumes.host_path]]
    name = "same-path"
    mount_path = "/data"
  [[runners.kubernetes.volumes.config_map]]
    name = "settings"
    mount_path = "/etc/settings"
    sub_path = "app"
    read_only = true
    [runners.kubernetes.volumes.config_map.items]
      "app.conf" = "app/app.conf"
      "log.conf" = "log.conf"
  [[runners.kubernetes.volumes.secret]]
    name = "creds"
    mount_path = "/etc/creds"
    items = { token = "token.txt" }
  [[runners.kubernetes.volumes.pvc]]
    name = "shared-claim"
    mount_path = "/shared"
    read_only = true
  [[runners.kubernetes.volumes.pvc]]
    name = "rw-claim"
    mount_path = "/rw"
`
	c, warnings, err := loadKube(t, body)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("ParseConfig() warnings %q, error %v", warnings, err)
	}
	zero := int64(0)
	want := &Config{
		Host:               "https://k8s.example.com:6443",
		BearerToken:        "token-value",
		CAFile:             "/etc/k8s/ca.crt",
		CertFile:           "/etc/k8s/client.crt",
		KeyFile:            "/etc/k8s/client.key",
		Context:            "ci-cluster",
		Namespace:          "ci-jobs",
		NamespaceOverwrite: regexp.MustCompile("^ci-[a-z]+$"),
		Image:              "alpine:3.20",
		PullPolicy:         []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullAlways, corev1.PullNever},
		HelperImage:        "registry.example.com/drover-helper:1",
		ServiceAccount:     "runner",
		Build:              Resources{CPURequest: qty("500m"), CPULimit: qty("2"), MemoryRequest: qty("256Mi"), MemoryLimit: qty("1Gi")},
		Helper:             Resources{CPURequest: qty("100m"), CPULimit: qty("0.2"), MemoryRequest: qty("64Mi"), MemoryLimit: qty("128Mi")},
		Service:            Resources{CPURequest: qty("250m"), CPULimit: qty("1"), MemoryRequest: qty("128Mi"), MemoryLimit: qty("512M")},
		NodeSelector:       map[string]string{"kubernetes.io/os": "linux", "disktype": "ssd"},
		// In key order: the table has none of its own.
		NodeTolerations: []corev1.Toleration{
			{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ci", Effect: corev1.TaintEffectNoSchedule},
			{Key: "example.com/gpu", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoExecute},
			{Key: "slow", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectPreferNoSchedule},
			{Key: "spot", Operator: corev1.TolerationOpExists},
		},
		PodLabels:                         map[string]string{"team": "ci", "example.com/tier": "build", "empty": ""},
		PodAnnotations:                    map[string]string{"example.com/note": "any text: even = signs, and spaces"},
		ImagePullSecrets:                  []string{"regcred", "mirror-cred"},
		UseServiceAccountImagePullSecrets: true,
		PollInterval:                      5 * time.Second,
		PollTimeout:                       600 * time.Second,
		CleanupGrace:                      &zero,
		AllowedImages:                     []string{"alpine:*", "registry.example.com/**"},
		AllowedServices:                   []string{"postgres:*", "redis"},
		// By kind in name order, then in the file's order.
		Volumes: []Volume{
			{Kind: "config_map", Name: "settings", MountPath: "/etc/settings", SubPath: "app", ReadOnly: true,
				Source: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"},
					Items:                []corev1.KeyToPath{{Key: "app.conf", Path: "app/app.conf"}, {Key: "log.conf", Path: "log.conf"}},
				}}},
			{Kind: "empty_dir", Name: "scratch", MountPath: "/scratch",
				Source: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: qty("1Gi")}}},
			{Kind: "empty_dir", Name: "plain", MountPath: "/plain", SubPath: "sub",
				Source: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Kind: "host_path", Name: "docker-sock", MountPath: "/var/run/docker.sock", ReadOnly: true,
				Source: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/docker.sock"}}},
			// No host_path: the mount path on the node too, as GitLab does.
			{Kind: "host_path", Name: "same-path", MountPath: "/data",
				Source: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}},
			{Kind: "pvc", Name: "shared-claim", MountPath: "/shared", ReadOnly: true,
				Source: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "shared-claim", ReadOnly: true}}},
			{Kind: "pvc", Name: "rw-claim", MountPath: "/rw",
				Source: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "rw-claim"}}},
			{Kind: "secret", Name: "creds", MountPath: "/etc/creds",
				Source: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", Items: []corev1.KeyToPath{{Key: "token", Path: "token.txt"}}}}},
		},
	}
	if diff := cmp.Diff(want, c, cmpConfig); diff != "" {
		t.Errorf("ParseConfig() mismatch (-want +got):\n%s", diff)
	}
}

// A single pull policy is a string, as in GitLab Runner.
func TestParseConfigPullPolicyString(t *testing.T) {
	t.Parallel()
	c, warnings, err := loadKube(t, "[runners.kubernetes]\n"+helperLine+"  pull_policy = \"if-not-present\"\n  cleanup_grace_period_seconds = 45\n")
	if err != nil || len(warnings) > 0 {
		t.Fatalf("ParseConfig() warnings %q, error %v", warnings, err)
	}
	if !slices.Equal(c.PullPolicy, []corev1.PullPolicy{corev1.PullIfNotPresent}) {
		t.Errorf("PullPolicy = %q, want [IfNotPresent]", c.PullPolicy)
	}
	if c.CleanupGrace == nil || *c.CleanupGrace != 45 {
		t.Errorf("CleanupGrace = %v, want 45", c.CleanupGrace)
	}
}

// TestParseConfigErrors: a wrong value is an error naming the file, the
// line and the key's full path. ParseConfig returns the first problem.
func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	const k = "config.toml:9: runners[0].kubernetes."
	lbl := func(errs []string) string { return strings.Join(errs, "; ") }
	tests := []struct {
		name, body, want string
	}{
		{"host not a string", "  host = 1\n", k + "host: must be a string, not an integer"},
		{"bearer_token not a string", "  bearer_token = true\n", k + "bearer_token: must be a string, not a boolean"},
		{"bad namespace", "  namespace = \"CI_Jobs\"\n",
			k + `namespace: "CI_Jobs" is not a namespace name: ` + lbl(validation.IsDNS1123Label("CI_Jobs"))},
		{"bad namespace_overwrite_allowed", "  namespace_overwrite_allowed = \"ci-(\"\n",
			k + "namespace_overwrite_allowed: not a regular expression: error parsing regexp: missing closing ): `ci-(`"},
		{"bad pull_policy string", "  pull_policy = \"sometimes\"\n",
			k + `pull_policy: "sometimes" is not a pull policy (want always, if-not-present or never)`},
		{"bad pull_policy element", "  pull_policy = [1, \"never\", \"sometimes\"]\n", k + "pull_policy[0]: must be a string, not an integer"},
		{"bad pull_policy element after a good one", "  pull_policy = [\"never\", \"sometimes\"]\n",
			k + `pull_policy[1]: "sometimes" is not a pull policy (want always, if-not-present or never)`},
		{"pull_policy wrong type", "  pull_policy = 1\n", k + "pull_policy: must be a pull policy or an array of them, not an integer"},
		{"bad quantity", "  cpu_limit = \"lots\"\n", k + `cpu_limit: "lots" is not a quantity (want e.g. "500m", "2", "512Mi")`},
		{"bad helper quantity", "  helper_memory_limit = \"1 GB\"\n", k + `helper_memory_limit: "1 GB" is not a quantity (want e.g. "500m", "2", "512Mi")`},
		{"bad service quantity", "  service_cpu_request = \"2 cores\"\n", k + `service_cpu_request: "2 cores" is not a quantity (want e.g. "500m", "2", "512Mi")`},
		{"negative quantity", "  helper_cpu_limit = \"-1\"\n", k + `helper_cpu_limit: "-1" is negative`},
		{"request above limit", "  cpu_limit = \"500m\"\n  cpu_request = \"1\"\n", "config.toml:10: runners[0].kubernetes.cpu_request: 1 is more than cpu_limit (500m)"},
		{"service request above limit", "  service_memory_request = \"1Gi\"\n  service_memory_limit = \"512Mi\"\n",
			k + "service_memory_request: 1Gi is more than service_memory_limit (512Mi)"},
		{"quantity of the wrong type", "  memory_request = 1.5\n", k + `memory_request: must be a quantity string such as "500m" or "1Gi", not a float`},
		{"node_selector not a table", "  node_selector = \"os=linux\"\n", k + "node_selector: must be a table of strings, not a string"},
		{"node_selector bad name", "  node_selector = { \"bad key!\" = \"v\" }\n",
			k + `node_selector."bad key!": "bad key!" is not a label name: ` + lbl(validation.IsQualifiedName("bad key!"))},
		{"node_selector bad value", "  node_selector = { os = \"not a value\" }\n",
			k + `node_selector.os: "not a value" is not a label value: ` + lbl(validation.IsValidLabelValue("not a value"))},
		{"node_selector value not a string", "  node_selector = { os = 1 }\n", k + "node_selector.os: must be a string, not an integer"},
		{"bad taint effect", "  node_tolerations = { \"a=b\" = \"Sometimes\" }\n",
			k + `node_tolerations."a=b": "Sometimes" is not a taint effect (want NoSchedule, PreferNoSchedule, NoExecute or "")`},
		{"toleration value without key", "  node_tolerations = { \"=b\" = \"NoSchedule\" }\n",
			k + `node_tolerations."=b": a toleration with a value needs a key ("key=value")`},
		{"bad toleration key", "  node_tolerations = { \"a b=c\" = \"\" }\n",
			k + `node_tolerations."a b=c": "a b" is not a taint key: ` + lbl(validation.IsQualifiedName("a b"))},
		{"bad toleration value", "  node_tolerations = { \"a=b c\" = \"\" }\n",
			k + `node_tolerations."a=b c": "b c" is not a taint value: ` + lbl(validation.IsValidLabelValue("b c"))},
		{"pod_labels with drover's prefix", "  pod_labels = { \"drover.io/job\" = \"1\" }\n",
			k + `pod_labels: label "drover.io/job": the drover.io/ prefix is drover's own`},
		{"pod_labels bad value", "  pod_labels = { team = \"-x\" }\n",
			k + `pod_labels.team: "-x" is not a label value: ` + lbl(validation.IsValidLabelValue("-x"))},
		{"pod_annotations value not a string", "  pod_annotations = { a = 1 }\n", k + "pod_annotations.a: must be a string, not an integer"},
		{"pod_annotations not a table", "  pod_annotations = []\n", k + "pod_annotations: must be a table of strings, not an array"},
		{"image_pull_secrets not a list", "  image_pull_secrets = \"regcred\"\n", k + "image_pull_secrets: must be an array of strings, not a string"},
		{"allowed_images element", "  allowed_images = [\"a\", 1]\n", k + "allowed_images[1]: must be a string, not an integer"},
		{"allowed_services not a list", "  allowed_services = 1\n", k + "allowed_services: must be an array of strings, not an integer"},
		{"poll_interval a string", "  poll_interval = \"3s\"\n", k + "poll_interval: must be an integer, not a string"},
		{"poll_timeout negative", "  poll_timeout = -1\n", k + "poll_timeout: must not be negative (got -1)"},
		{"poll_timeout too large", "  poll_timeout = 9999999999\n", k + "poll_timeout: 9999999999 is too large"},
		{"cleanup_grace_period_seconds negative", "  cleanup_grace_period_seconds = -5\n", k + "cleanup_grace_period_seconds: must not be negative (got -5)"},
		{"cleanup_grace_period_seconds a string", "  cleanup_grace_period_seconds = \"30s\"\n", k + "cleanup_grace_period_seconds: must be an integer, not a string"},
		{"volumes not a table", "  volumes = 1\n", k + "volumes: must be a table of volume kinds, not an integer"},
		{"volume kind not an array", "  volumes = { empty_dir = { name = \"a\" } }\n",
			k + "volumes.empty_dir: must be an array of tables ([[runners.kubernetes.volumes.empty_dir]]), not a table"},
		{"volume kind an array of strings", "  volumes = { pvc = [\"a\"] }\n",
			k + "volumes.pvc: must be an array of tables ([[runners.kubernetes.volumes.pvc]]), not an array"},
		{"volume without a name", "  [[runners.kubernetes.volumes.empty_dir]]\n    mount_path = \"/x\"\n", k + "volumes.empty_dir[0].name: required"},
		{"volume name not a string", "  [[runners.kubernetes.volumes.pvc]]\n    name = 1\n    mount_path = \"/x\"\n",
			"config.toml:10: runners[0].kubernetes.volumes.pvc[0].name: must be a string, not an integer"},
		{"bad volume name", "  [[runners.kubernetes.volumes.secret]]\n    name = \"My_Secret\"\n    mount_path = \"/x\"\n",
			`config.toml:10: runners[0].kubernetes.volumes.secret[0].name: "My_Secret" is not a volume name: ` + lbl(validation.IsDNS1123Label("My_Secret"))},
		{"volume without mount_path", "  [[runners.kubernetes.volumes.config_map]]\n    name = \"cm\"\n",
			k + `volumes.config_map[0].mount_path: required, an absolute path (got "")`},
		{"relative mount_path", "  [[runners.kubernetes.volumes.host_path]]\n    name = \"hp\"\n    mount_path = \"data\"\n",
			`config.toml:11: runners[0].kubernetes.volumes.host_path[0].mount_path: required, an absolute path (got "data")`},
		{"read_only not a boolean", "  [[runners.kubernetes.volumes.pvc]]\n    name = \"c\"\n    mount_path = \"/c\"\n    read_only = \"yes\"\n",
			"config.toml:12: runners[0].kubernetes.volumes.pvc[0].read_only: must be a boolean, not a string"},
		{"bad medium", "  [[runners.kubernetes.volumes.empty_dir]]\n    name = \"e\"\n    mount_path = \"/e\"\n    medium = \"Disk\"\n",
			`config.toml:12: runners[0].kubernetes.volumes.empty_dir[0].medium: "Disk" is not a medium (want "" or "Memory")`},
		{"bad size_limit", "  [[runners.kubernetes.volumes.empty_dir]]\n    name = \"e\"\n    mount_path = \"/e\"\n    size_limit = \"big\"\n",
			`config.toml:12: runners[0].kubernetes.volumes.empty_dir[0].size_limit: "big" is not a quantity`},
		{"negative size_limit", "  [[runners.kubernetes.volumes.empty_dir]]\n    name = \"e\"\n    mount_path = \"/e\"\n    size_limit = \"-1Gi\"\n",
			`config.toml:12: runners[0].kubernetes.volumes.empty_dir[0].size_limit: "-1Gi" is negative`},
		{"mount_path of drover's", "  [[runners.kubernetes.volumes.empty_dir]]\n    name = \"e\"\n    mount_path = \"/drover/\"\n",
			`config.toml:11: runners[0].kubernetes.volumes.empty_dir[0].mount_path: /drover is drover's own directory in the pod`},
		{"mount_path twice", "  [[runners.kubernetes.volumes.pvc]]\n    name = \"a\"\n    mount_path = \"/data\"\n" +
			"  [[runners.kubernetes.volumes.pvc]]\n    name = \"b\"\n    mount_path = \"/data/./\"\n",
			`config.toml:14: runners[0].kubernetes.volumes.pvc[1].mount_path: volume "a" is mounted at /data already`},
		{"bad annotation name", "  pod_annotations = { \"a b\" = \"c\" }\n",
			k + `pod_annotations."a b": "a b" is not an annotation name: ` + lbl(validation.IsQualifiedName("a b"))},
		{"items not a table", "  [[runners.kubernetes.volumes.secret]]\n    name = \"s\"\n    mount_path = \"/s\"\n    items = [\"a\"]\n",
			"config.toml:12: runners[0].kubernetes.volumes.secret[0].items: must be a table of strings, not an array"},
		{"duplicate volume name", "  [[runners.kubernetes.volumes.pvc]]\n    name = \"data\"\n    mount_path = \"/a\"\n" +
			"  [[runners.kubernetes.volumes.pvc]]\n    name = \"data\"\n    mount_path = \"/b\"\n",
			`config.toml:13: runners[0].kubernetes.volumes.pvc[1].name: volume name "data" is used twice (or is one of drover's own: drover-builds, drover-cache, drover-job, drover-secrets)`},
		{"duplicate volume name across kinds", "  [[runners.kubernetes.volumes.secret]]\n    name = \"data\"\n    mount_path = \"/a\"\n" +
			"  [[runners.kubernetes.volumes.empty_dir]]\n    name = \"data\"\n    mount_path = \"/b\"\n",
			// empty_dir is read first: the secret is the second "data".
			`config.toml:10: runners[0].kubernetes.volumes.secret[0].name: volume name "data" is used twice (or is one of drover's own: drover-builds, drover-cache, drover-job, drover-secrets)`},
		{"drover's own volume name", "  [[runners.kubernetes.volumes.empty_dir]]\n    name = \"drover-secrets\"\n    mount_path = \"/s\"\n",
			`config.toml:10: runners[0].kubernetes.volumes.empty_dir[0].name: volume name "drover-secrets" is used twice (or is one of drover's own: drover-builds, drover-cache, drover-job, drover-secrets)`},
		{"cert_file without key_file", "  cert_file = \"/c.crt\"\n", k + "cert_file: needs key_file: cert_file and key_file go together"},
		{"key_file without cert_file", "  key_file = \"/c.key\"\n", k + "key_file: needs cert_file: cert_file and key_file go together"},
		{"the first problem by line", "  poll_timeout = \"x\"\n  namespace = \"A\"\n", k + "poll_timeout: must be an integer, not a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := loadKube(t, "[runners.kubernetes]\n"+helperLine+tt.body)
			if err == nil || err.Error() != tt.want {
				t.Errorf("ParseConfig() error = %v\nwant %s", err, tt.want)
			}
		})
	}
}

// helper_image is required: drover's helper is not GitLab's. Its error
// points at the kubernetes table, or at the runner without one.
func TestParseConfigHelperImageRequired(t *testing.T) {
	t.Parallel()
	const msg = "runners[0].kubernetes.helper_image: required: the image of drover's helper, as the cluster's nodes pull it " +
		"(build and push it with `drover helper-image --tag REGISTRY/drover-helper:TAG --push`)"
	for _, tt := range []struct{ body, want string }{
		{"", "config.toml:2: " + msg},
		{"[runners.kubernetes]\n  image = \"alpine\"\n", "config.toml:7: " + msg},
		{"[runners.kubernetes]\n  image = \"alpine\"\n  helper_image = \"\"\n", "config.toml:9: " + msg},
		// Another problem is reported instead.
		{"[runners.kubernetes]\n  poll_interval = -1\n", "config.toml:8: runners[0].kubernetes.poll_interval: must not be negative (got -1)"},
	} {
		_, _, err := loadKube(t, tt.body)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: ParseConfig() error = %v\nwant %s", tt.body, err, tt.want)
		}
	}
}

// TestParseConfigWarnings: GitLab Runner keys drover does not apply yet,
// and keys it does not know, are warnings in line order.
func TestParseConfigWarnings(t *testing.T) {
	t.Parallel()
	body := `[runners.kubernetes]
  privileged = true
  helper_image = "registry.example.com/drover-helper:1"
  namesapce = "typo"
  cap_add = ["NET_ADMIN"]
  pod_cpu_limit = "2"
  [runners.kubernetes.affinity]
    [runners.kubernetes.affinity.node_affinity]
  [[runners.kubernetes.services]]
    name = "postgres"
  [[runners.kubernetes.volumes.csi]]
    name = "c"
  [[runners.kubernetes.volumes.nfs]]
    name = "n"
  [[runners.kubernetes.volumes.gluster]]
    name = "g"
  [[runners.kubernetes.volumes.host_path]]
    name = "hp"
    mount_path = "/hp"
    mount_propagation = "HostToContainer"
    color = "blue"
  [runners.kubernetes.pod_security_context]
    run_as_user = 1000
`
	c, warnings, err := loadKube(t, body)
	if err != nil {
		t.Fatalf("ParseConfig() error = %v", err)
	}
	if len(c.Volumes) != 1 || c.Volumes[0].Name != "hp" {
		t.Errorf("ParseConfig() volumes = %+v, want hp alone", c.Volumes)
	}
	const (
		ignored = "GitLab Runner key read but not honoured by drover yet: it has no effect"
		unknown = "unknown key, ignored"
		kp      = "runners[0].kubernetes."
	)
	want := []string{
		"config.toml:8: " + kp + "privileged: " + ignored,
		"config.toml:10: " + kp + "namesapce: " + unknown,
		"config.toml:11: " + kp + "cap_add: " + ignored,
		"config.toml:12: " + kp + "pod_cpu_limit: " + ignored,
		"config.toml:13: " + kp + "affinity: " + ignored,
		"config.toml:15: " + kp + "services: " + ignored,
		"config.toml:17: " + kp + "volumes.csi: " + ignored,
		"config.toml:19: " + kp + "volumes.nfs: " + ignored,
		"config.toml:21: " + kp + "volumes.gluster: unknown volume kind, ignored (want empty_dir, host_path, config_map, secret or pvc)",
		"config.toml:26: " + kp + "volumes.host_path[0].mount_propagation: " + ignored,
		"config.toml:27: " + kp + "volumes.host_path[0].color: " + unknown,
		"config.toml:28: " + kp + "pod_security_context: " + ignored,
	}
	if diff := cmp.Diff(want, warnings); diff != "" {
		t.Errorf("warnings mismatch (-want +got):\n%s", diff)
	}
}

// gitlabKeys are the keys of GitLab Runner's [runners.kubernetes]
// (common.KubernetesConfig) that ParseConfig reads.
var gitlabKeysRead = []string{
	"host", "context", "cert_file", "key_file", "ca_file", "bearer_token", "image", "namespace",
	"namespace_overwrite_allowed", "cpu_limit", "cpu_request", "memory_limit", "memory_request",
	"service_cpu_limit", "service_cpu_request", "service_memory_limit", "service_memory_request",
	"helper_cpu_limit", "helper_cpu_request", "helper_memory_limit", "helper_memory_request",
	"allowed_images", "allowed_services", "pull_policy", "node_selector", "node_tolerations",
	"image_pull_secrets", "helper_image", "cleanup_grace_period_seconds", "poll_interval", "poll_timeout",
	"pod_labels", "service_account", "pod_annotations", "volumes", "automount_service_account_token",
	"use_service_account_image_pull_secrets",
}

// gitlabKeysNotRead are the other keys of GitLab Runner's
// [runners.kubernetes].
var gitlabKeysNotRead = []string{
	"bearer_token_overwrite_allowed", "namespace_per_job", "privileged", "runtime_class_name",
	"allow_privilege_escalation", "cpu_limit_overwrite_max_allowed", "cpu_request_overwrite_max_allowed",
	"memory_limit_overwrite_max_allowed", "memory_request_overwrite_max_allowed", "ephemeral_storage_limit",
	"ephemeral_storage_limit_overwrite_max_allowed", "ephemeral_storage_request",
	"ephemeral_storage_request_overwrite_max_allowed", "service_cpu_limit_overwrite_max_allowed",
	"service_cpu_request_overwrite_max_allowed", "service_memory_limit_overwrite_max_allowed",
	"service_memory_request_overwrite_max_allowed", "service_ephemeral_storage_limit",
	"service_ephemeral_storage_limit_overwrite_max_allowed", "service_ephemeral_storage_request",
	"service_ephemeral_storage_request_overwrite_max_allowed", "helper_cpu_limit_overwrite_max_allowed",
	"helper_cpu_request_overwrite_max_allowed", "helper_memory_limit_overwrite_max_allowed",
	"helper_memory_request_overwrite_max_allowed", "helper_ephemeral_storage_limit",
	"helper_ephemeral_storage_limit_overwrite_max_allowed", "helper_ephemeral_storage_request",
	"helper_ephemeral_storage_request_overwrite_max_allowed", "pod_cpu_limit", "pod_cpu_limit_overwrite_max_allowed",
	"pod_cpu_request", "pod_cpu_request_overwrite_max_allowed", "pod_memory_limit",
	"pod_memory_limit_overwrite_max_allowed", "pod_memory_request", "pod_memory_request_overwrite_max_allowed",
	"allowed_pull_policies", "allowed_users", "allowed_groups", "node_selector_overwrite_allowed",
	"node_tolerations_overwrite_allowed", "affinity",
	"helper_image_flavor", "helper_image_autoset_arch_and_os", "pod_termination_grace_period_seconds",
	"cleanup_resources_timeout", "resource_availability_check_max_attempts", "retry_limit",
	"retry_backoff_max", "retry_limits", "pod_labels_overwrite_allowed", "scheduler_name",
	"service_account_overwrite_allowed", "pod_annotations_overwrite_allowed",
	"pod_security_context", "init_permissions_container_security_context", "build_container_security_context",
	"helper_container_security_context", "service_container_security_context", "host_aliases", "services",
	"cap_add", "cap_drop", "suspend_pvc_size", "suspend_pvc_storage_class", "dns_policy", "dns_config",
	"container_lifecycle", "priority_class_name", "pod_spec", "logs_base_dir", "scripts_base_dir",
	"print_pod_warning_events", "pod_disruption_budget", "autoscaler",
}

// TestParseConfigEveryGitLabKey checks that every key of GitLab Runner's
// [runners.kubernetes] is accepted: read, or warned about as not
// honoured, on its own line, never reported as unknown.
func TestParseConfigEveryGitLabKey(t *testing.T) {
	t.Parallel()
	all := slices.Concat(gitlabKeysRead, gitlabKeysNotRead)
	var b strings.Builder
	b.WriteString("[runners.kubernetes]\n")
	for _, k := range all {
		fmt.Fprintf(&b, "  %s = 1\n", k)
	}
	_, warnings, _ := loadKube(t, b.String())
	var want []string
	for i, k := range all {
		if i >= len(gitlabKeysRead) {
			want = append(want, fmt.Sprintf("config.toml:%d: runners[0].kubernetes.%s: %s", 8+i, k, notHonouredMsg))
		}
	}
	if diff := cmp.Diff(want, warnings); diff != "" {
		t.Errorf("warnings mismatch (-want +got):\n%s", diff)
	}
}

// FuzzParseConfig checks that ParseConfig never panics on what config.Load
// accepts, that its errors and warnings are located in the runner's
// kubernetes table, and that a configuration it returns makes a valid
// pod.
func FuzzParseConfig(f *testing.F) {
	seeds := []string{
		"",
		"[runners.kubernetes]\n",
		"[runners.kubernetes]\n" + helperLine,
		"[runners.kubernetes]\n" + helperLine + "  cpu_limit = 2\n  memory_limit = \"99999999999999999999999Pi\"\n  helper_cpu_request = \"-1\"\n",
		"[runners.kubernetes]\n" + helperLine + "  pull_policy = [\"never\", 1]\n  namespace = \"\"\n  namespace_overwrite_allowed = \"(\"\n",
		"[runners.kubernetes]\n" + helperLine + "  node_selector = { a = \"b\", \"c/d\" = 1 }\n  node_tolerations = { \"=\" = \"\", \"x=y\" = \"NoSchedule\" }\n",
		"[runners.kubernetes]\n" + helperLine + "  pod_labels = { \"drover.io/x\" = \"\" }\n  pod_annotations = { a = \"\" }\n",
		"[runners.kubernetes]\n" + helperLine + "  poll_interval = -9223372036854775808\n  poll_timeout = 9223372036854775807\n  cleanup_grace_period_seconds = 9223372036854775807\n",
		"[runners.kubernetes]\n" + helperLine + "  volumes = { empty_dir = [{ name = \"a\", mount_path = \"/a\", size_limit = \"1Gi\" }, { name = \"a\" }], pvc = [1] }\n",
		"[runners.kubernetes]\n" + helperLine + "  [[runners.kubernetes.volumes.secret]]\n    name = \"s\"\n    mount_path = \"/s\"\n    items = { a = \"b\", c = 1 }\n",
		"[runners.kubernetes]\n  cert_file = \"c\"\n  privileged = true\n  bogus = 1\n",
		"kubernetes = { helper_image = \"h\", volumes = { host_path = [{ name = \"h\", mount_path = \"/\" }] } }\n",
	}
	for _, s := range seeds {
		f.Add(runnerHead + s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		path := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := config.Load(path)
		if err != nil {
			return
		}
		for i := range cfg.Runners {
			c, warnings, err := ParseConfig(path, &cfg.Runners[i])
			prefix := fmt.Sprintf("runners[%d]", i)
			for j, w := range warnings {
				if w.File != path || w.Line < 0 || !strings.HasPrefix(w.Key, prefix) || w.Msg == "" {
					t.Errorf("warning %+v: bad position or empty message", w)
				}
				if j > 0 && w.Line < warnings[j-1].Line {
					t.Errorf("warnings %v: not in line order", warnings)
				}
			}
			if err != nil {
				var ce *config.Error
				if !errors.As(err, &ce) {
					t.Fatalf("ParseConfig() error = %T %v, want *config.Error", err, err)
				}
				if ce.File != path || ce.Line < 0 || ce.Msg == "" || !strings.HasPrefix(ce.Key, prefix+".kubernetes") {
					t.Fatalf("ParseConfig() error %+v: bad position or empty message", ce)
				}
				if c != nil {
					t.Fatalf("ParseConfig() = %+v with error %v", c, err)
				}
				continue
			}
			if c.HelperImage == "" || c.Namespace == "" || c.PollInterval <= 0 || c.PollTimeout <= 0 ||
				(c.CleanupGrace != nil && *c.CleanupGrace < 0) || (c.CertFile == "") != (c.KeyFile == "") {
				t.Fatalf("ParseConfig() = %+v: not valid", c)
			}
			checkPod(t, fuzzPod(c))
		}
	})
}
