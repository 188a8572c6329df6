package kubernetes

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drover-ci/drover/internal/config"
)

// Name is the executor's name in config.toml.
const Name = "kubernetes"

// Defaults of [runners.kubernetes], as GitLab Runner has them.
const (
	DefaultNamespace    = "default"
	DefaultPollInterval = 3 * time.Second
	DefaultPollTimeout  = 180 * time.Second
)

// Config is [runners.kubernetes], with GitLab Runner's defaults filled in.
type Config struct {
	// ShortToken is the runner's short token (set by Runners.Apply).
	ShortToken string

	// How to reach the API server: Host (with BearerToken, CAFile, or a
	// client certificate), else the in-cluster configuration, else the
	// kubeconfig (KUBECONFIG, ~/.kube/config; Context picks a context).
	Host, BearerToken, CAFile, CertFile, KeyFile, Context string

	Namespace string
	// NamespaceOverwrite, when set, lets a job choose its namespace with
	// KUBERNETES_NAMESPACE_OVERWRITE when the name matches.
	NamespaceOverwrite *regexp.Regexp
	Image              string
	PullPolicy         []corev1.PullPolicy // empty: the cluster's default
	HelperImage        string
	ServiceAccount     string
	// AutomountServiceAccountToken mounts the service account's API token
	// in the job's pod (automount_service_account_token); nil = not
	// mounted, where GitLab Runner leaves the cluster's default (mounted).
	AutomountServiceAccountToken *bool

	Build, Helper, Service Resources

	NodeSelector     map[string]string
	NodeTolerations  []corev1.Toleration
	PodLabels        map[string]string
	PodAnnotations   map[string]string
	ImagePullSecrets []string
	// UseServiceAccountImagePullSecrets leaves imagePullSecrets out of the
	// job's pod (use_service_account_image_pull_secrets): the cluster
	// takes the service account's. Neither image_pull_secrets nor the
	// job's registry credentials are used then.
	UseServiceAccountImagePullSecrets bool
	PollInterval                      time.Duration
	PollTimeout                       time.Duration
	// CleanupGrace is the pods' termination grace period when a job's pod
	// is deleted (cleanup_grace_period_seconds); nil = the pod's own.
	CleanupGrace *int64

	AllowedImages, AllowedServices []string
	Volumes                        []Volume
}

// Resources are the requests and limits of one kind of container.
type Resources struct {
	CPURequest, CPULimit, MemoryRequest, MemoryLimit *resource.Quantity
}

// requirements returns r as a container's resource requirements.
func (r Resources) requirements() corev1.ResourceRequirements {
	var rr corev1.ResourceRequirements
	set := func(l *corev1.ResourceList, name corev1.ResourceName, q *resource.Quantity) {
		if q == nil {
			return
		}
		if *l == nil {
			*l = corev1.ResourceList{}
		}
		(*l)[name] = *q
	}
	set(&rr.Requests, corev1.ResourceCPU, r.CPURequest)
	set(&rr.Requests, corev1.ResourceMemory, r.MemoryRequest)
	set(&rr.Limits, corev1.ResourceCPU, r.CPULimit)
	set(&rr.Limits, corev1.ResourceMemory, r.MemoryLimit)
	return rr
}

// Volume is one of [[runners.kubernetes.volumes.*]]: its pod volume and
// where the build and helper containers mount it.
type Volume struct {
	Kind      string // empty_dir, host_path, config_map, secret, pvc
	Name      string
	MountPath string
	SubPath   string
	ReadOnly  bool
	Source    corev1.VolumeSource
}

// notHonoured are the [runners.kubernetes] keys of GitLab Runner that
// drover accepts but does not apply yet.
var notHonoured = []string{
	"affinity", "allow_privilege_escalation", "allowed_groups", "allowed_pull_policies", "allowed_users",
	"autoscaler",
	"bearer_token_overwrite_allowed", "build_container_security_context", "cap_add", "cap_drop",
	"cleanup_resources_timeout", "container_lifecycle",
	"cpu_limit_overwrite_max_allowed", "cpu_request_overwrite_max_allowed", "dns_config", "dns_policy",
	"ephemeral_storage_limit", "ephemeral_storage_limit_overwrite_max_allowed", "ephemeral_storage_request",
	"ephemeral_storage_request_overwrite_max_allowed", "helper_container_security_context",
	"helper_cpu_limit_overwrite_max_allowed", "helper_cpu_request_overwrite_max_allowed",
	"helper_ephemeral_storage_limit", "helper_ephemeral_storage_limit_overwrite_max_allowed",
	"helper_ephemeral_storage_request", "helper_ephemeral_storage_request_overwrite_max_allowed",
	"helper_image_autoset_arch_and_os",
	"helper_image_flavor", "helper_memory_limit_overwrite_max_allowed", "helper_memory_request_overwrite_max_allowed",
	"host_aliases", "init_permissions_container_security_context", "logs_base_dir",
	"memory_limit_overwrite_max_allowed", "memory_request_overwrite_max_allowed", "namespace_per_job",
	"node_selector_overwrite_allowed", "node_tolerations_overwrite_allowed",
	"pod_annotations_overwrite_allowed", "pod_cpu_limit", "pod_cpu_limit_overwrite_max_allowed",
	"pod_cpu_request", "pod_cpu_request_overwrite_max_allowed", "pod_disruption_budget",
	"pod_labels_overwrite_allowed", "pod_memory_limit", "pod_memory_limit_overwrite_max_allowed",
	"pod_memory_request", "pod_memory_request_overwrite_max_allowed", "pod_security_context", "pod_spec",
	"pod_termination_grace_period_seconds", "priority_class_name", "print_pod_warning_events", "privileged",
	"resource_availability_check_max_attempts", "retry_backoff_max", "retry_limit", "retry_limits",
	"runtime_class_name", "scheduler_name", "scripts_base_dir", "service_account_overwrite_allowed",
	"service_container_security_context", "service_cpu_limit_overwrite_max_allowed",
	"service_cpu_request_overwrite_max_allowed", "service_ephemeral_storage_limit",
	"service_ephemeral_storage_limit_overwrite_max_allowed", "service_ephemeral_storage_request",
	"service_ephemeral_storage_request_overwrite_max_allowed", "service_memory_limit_overwrite_max_allowed",
	"service_memory_request_overwrite_max_allowed", "services", "suspend_pvc_size", "suspend_pvc_storage_class",
	"terminationGracePeriodSeconds",
}

const notHonouredMsg = "GitLab Runner key read but not honoured by drover yet: it has no effect"

// reader reads the raw table, collecting errors and warnings.
type reader struct{ config.RawReader }

// ParseConfig reads r.Kubernetes, the raw [runners.kubernetes] table of a
// runner parsed from file (named in messages). A wrong value is a
// *config.Error naming file, line and key; GitLab keys drover does not
// apply yet, and unknown keys, are warnings in line order.
func ParseConfig(file string, r *config.RunnerConfig) (*Config, []config.Warning, error) {
	rd := &reader{config.RawReader{File: file, Lines: r.KeyLine}}
	c := &Config{Namespace: DefaultNamespace, PollInterval: DefaultPollInterval, PollTimeout: DefaultPollTimeout}
	for _, k := range config.SortedKeys(r.Kubernetes) {
		v, key := r.Kubernetes[k], config.SubKey("kubernetes", k)
		switch k {
		case "host":
			c.Host = rd.Str(key, v)
		case "bearer_token":
			c.BearerToken = rd.Str(key, v)
		case "ca_file":
			c.CAFile = rd.Str(key, v)
		case "cert_file":
			c.CertFile = rd.Str(key, v)
		case "key_file":
			c.KeyFile = rd.Str(key, v)
		case "context":
			c.Context = rd.Str(key, v)
		case "namespace":
			if s := rd.Str(key, v); s != "" {
				if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
					rd.Fail(key, "%q is not a namespace name: %s", s, strings.Join(errs, "; "))
				}
				c.Namespace = s
			}
		case "namespace_overwrite_allowed":
			if s := rd.Str(key, v); s != "" {
				re, err := regexp.Compile(s)
				if err != nil {
					rd.Fail(key, "not a regular expression: %v", err)
				}
				c.NamespaceOverwrite = re
			}
		case "image":
			c.Image = rd.Str(key, v)
		case "helper_image":
			c.HelperImage = rd.Str(key, v)
		case "service_account":
			c.ServiceAccount = rd.Str(key, v)
		case "automount_service_account_token":
			b := rd.Bool(key, v)
			c.AutomountServiceAccountToken = &b
		case "pull_policy":
			c.PullPolicy = rd.pullPolicies(key, v)
		case "cpu_request", "cpu_limit", "memory_request", "memory_limit",
			"helper_cpu_request", "helper_cpu_limit", "helper_memory_request", "helper_memory_limit",
			"service_cpu_request", "service_cpu_limit", "service_memory_request", "service_memory_limit":
			rd.resource(c, k, key, v)
		case "node_selector":
			c.NodeSelector = rd.labelMap(key, v)
		case "node_tolerations":
			c.NodeTolerations = rd.tolerations(key, v)
		case "pod_labels":
			c.PodLabels = rd.labelMap(key, v)
			for l := range c.PodLabels {
				if strings.HasPrefix(l, labelPrefix) {
					rd.Fail(key, "label %q: the %s prefix is drover's own", l, labelPrefix)
				}
			}
		case "pod_annotations":
			c.PodAnnotations = rd.strMap(key, v)
			for _, a := range config.SortedKeys(c.PodAnnotations) {
				// As the API server checks annotation names.
				if errs := validation.IsQualifiedName(strings.ToLower(a)); len(errs) > 0 {
					rd.Fail(config.SubKey(key, a), "%q is not an annotation name: %s", a, strings.Join(errs, "; "))
				}
			}
		case "image_pull_secrets":
			c.ImagePullSecrets = rd.StrList(key, v)
		case "use_service_account_image_pull_secrets":
			c.UseServiceAccountImagePullSecrets = rd.Bool(key, v)
		case "poll_interval":
			if n := rd.Count(key, v); n > 0 {
				c.PollInterval = time.Duration(n) * time.Second
			}
		case "poll_timeout":
			if n := rd.Count(key, v); n > 0 {
				c.PollTimeout = time.Duration(n) * time.Second
			}
		case "cleanup_grace_period_seconds":
			if n, ok := v.(int64); ok && n >= 0 {
				c.CleanupGrace = &n
			} else {
				rd.Count(key, v)
			}
		case "allowed_images":
			c.AllowedImages = rd.StrList(key, v)
		case "allowed_services":
			c.AllowedServices = rd.StrList(key, v)
		case "volumes":
			c.Volumes = rd.volumes(key, v)
		default:
			if slices.Contains(notHonoured, k) {
				rd.Warn(key, notHonouredMsg)
			} else {
				rd.Warn(key, "unknown key, ignored")
			}
		}
	}
	for _, kind := range []struct {
		prefix string
		res    Resources
	}{{"", c.Build}, {"helper_", c.Helper}, {"service_", c.Service}} {
		// The API server refuses a container that asks for more than its
		// limit: say so here, not when a job's pod is created.
		for _, rl := range []struct {
			name     string
			req, lim *resource.Quantity
		}{{"cpu", kind.res.CPURequest, kind.res.CPULimit}, {"memory", kind.res.MemoryRequest, kind.res.MemoryLimit}} {
			if rl.req != nil && rl.lim != nil && rl.req.Cmp(*rl.lim) > 0 {
				rd.Fail(config.SubKey("kubernetes", kind.prefix+rl.name+"_request"), "%s is more than %s%s_limit (%s)",
					rl.req.String(), kind.prefix, rl.name, rl.lim.String())
			}
		}
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		rd.Fail(config.SubKey("kubernetes", "cert_file"), "needs key_file: cert_file and key_file go together")
	case c.CertFile == "" && c.KeyFile != "":
		rd.Fail(config.SubKey("kubernetes", "key_file"), "needs cert_file: cert_file and key_file go together")
	}
	if c.HelperImage == "" && rd.OK() {
		rd.Fail(config.SubKey("kubernetes", "helper_image"),
			"required: the image of drover's helper, as the cluster's nodes pull it (build and push it with `drover helper-image --tag REGISTRY/drover-helper:TAG --push`)")
	}
	slices.SortStableFunc(rd.Warnings, func(a, b config.Warning) int { return a.Line - b.Line })
	if err := rd.Err(); err != nil {
		return nil, rd.Warnings, err
	}
	return c, rd.Warnings, nil
}

// pullPolicies reads pull_policy: one policy, or an array of them. A
// wrong element is named by its index in the array.
func (rd *reader) pullPolicies(key string, v any) []corev1.PullPolicy {
	var elems []any
	elemKey := func(i int) string { return config.IndexKey(key, i) }
	switch v := v.(type) {
	case string:
		elems = []any{v}
		elemKey = func(int) string { return key } // there is no [0] in the file
	case []any:
		elems = v
	default:
		rd.Fail(key, "must be a pull policy or an array of them, not %s", config.TypeName(v))
		return nil
	}
	var out []corev1.PullPolicy
	for i, e := range elems {
		s, ok := e.(string)
		if !ok {
			rd.Fail(elemKey(i), "must be a string, not %s", config.TypeName(e))
			continue
		}
		p, ok := pullPolicy(s)
		if !ok {
			rd.Fail(elemKey(i), "%q is not a pull policy (want always, if-not-present or never)", s)
			continue
		}
		out = append(out, p)
	}
	return out
}

// pullPolicy maps GitLab's pull policy names to Kubernetes'.
func pullPolicy(s string) (corev1.PullPolicy, bool) {
	switch s {
	case "always", "Always":
		return corev1.PullAlways, true
	case "if-not-present", "IfNotPresent":
		return corev1.PullIfNotPresent, true
	case "never", "Never":
		return corev1.PullNever, true
	}
	return "", false
}

func (rd *reader) resource(c *Config, k, key string, v any) {
	s, ok := v.(string)
	if !ok {
		if n, isInt := v.(int64); isInt {
			s = fmt.Sprint(n)
		} else {
			rd.Fail(key, "must be a quantity string such as \"500m\" or \"1Gi\", not %s", config.TypeName(v))
			return
		}
	}
	if s == "" {
		return
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		rd.Fail(key, "%q is not a quantity (want e.g. \"500m\", \"2\", \"512Mi\")", s)
		return
	}
	if q.Sign() < 0 {
		rd.Fail(key, "%q is negative", s)
		return
	}
	r := &c.Build
	name := k
	if rest, ok := strings.CutPrefix(k, "helper_"); ok {
		r, name = &c.Helper, rest
	} else if rest, ok := strings.CutPrefix(k, "service_"); ok {
		r, name = &c.Service, rest
	}
	switch name {
	case "cpu_request":
		r.CPURequest = &q
	case "cpu_limit":
		r.CPULimit = &q
	case "memory_request":
		r.MemoryRequest = &q
	case "memory_limit":
		r.MemoryLimit = &q
	}
}

func (rd *reader) strMap(key string, v any) map[string]string {
	t, ok := v.(map[string]any)
	if !ok {
		rd.Fail(key, "must be a table of strings, not %s", config.TypeName(v))
		return nil
	}
	m := make(map[string]string, len(t))
	for k, e := range t {
		s, ok := e.(string)
		if !ok {
			rd.Fail(config.SubKey(key, k), "must be a string, not %s", config.TypeName(e))
			continue
		}
		m[k] = s
	}
	return m
}

// labelMap reads a table of Kubernetes labels (or node selector terms).
func (rd *reader) labelMap(key string, v any) map[string]string {
	m := rd.strMap(key, v)
	for _, k := range config.SortedKeys(m) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			rd.Fail(config.SubKey(key, k), "%q is not a label name: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(m[k]); len(errs) > 0 {
			rd.Fail(config.SubKey(key, k), "%q is not a label value: %s", m[k], strings.Join(errs, "; "))
		}
	}
	return m
}

// tolerations reads node_tolerations in GitLab's form: a table of
// "key=value" (or "key") to effect ("" for any effect).
func (rd *reader) tolerations(key string, v any) []corev1.Toleration {
	m := rd.strMap(key, v)
	var out []corev1.Toleration
	for _, k := range config.SortedKeys(m) {
		t := corev1.Toleration{Operator: corev1.TolerationOpExists}
		name, val, hasVal := strings.Cut(k, "=")
		t.Key = name
		if hasVal {
			t.Operator, t.Value = corev1.TolerationOpEqual, val
		}
		// The API server refuses a pod with such a toleration: say so
		// here, not when a job's pod is created.
		switch {
		case name == "" && hasVal:
			rd.Fail(config.SubKey(key, k), "a toleration with a value needs a key (\"key=value\")")
		case name != "" && len(validation.IsQualifiedName(name)) > 0:
			rd.Fail(config.SubKey(key, k), "%q is not a taint key: %s", name, strings.Join(validation.IsQualifiedName(name), "; "))
		case len(validation.IsValidLabelValue(val)) > 0:
			rd.Fail(config.SubKey(key, k), "%q is not a taint value: %s", val, strings.Join(validation.IsValidLabelValue(val), "; "))
		}
		switch eff := corev1.TaintEffect(m[k]); eff {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			t.Effect = eff
		default:
			rd.Fail(config.SubKey(key, k), "%q is not a taint effect (want NoSchedule, PreferNoSchedule, NoExecute or \"\")", m[k])
		}
		out = append(out, t)
	}
	return out
}

// volumes reads [runners.kubernetes.volumes]: arrays of tables per kind.
func (rd *reader) volumes(key string, v any) []Volume {
	t, ok := v.(map[string]any)
	if !ok {
		rd.Fail(key, "must be a table of volume kinds, not %s", config.TypeName(v))
		return nil
	}
	var out []Volume
	names := map[string]bool{}
	mountedAt := map[string]string{} // clean mount path: volume name
	for _, kind := range config.SortedKeys(t) {
		kkey := config.SubKey(key, kind)
		switch kind {
		case "empty_dir", "host_path", "config_map", "secret", "pvc":
		case "csi", "nfs", "projected":
			rd.Warn(kkey, notHonouredMsg)
			continue
		default:
			rd.Warn(kkey, "unknown volume kind, ignored (want empty_dir, host_path, config_map, secret or pvc)")
			continue
		}
		list, ok := t[kind].([]map[string]any)
		if !ok {
			if a, isArr := t[kind].([]any); isArr {
				for _, e := range a {
					if m, isMap := e.(map[string]any); isMap {
						list = append(list, m)
					}
				}
				ok = len(list) == len(a)
			}
		}
		if !ok {
			rd.Fail(kkey, "must be an array of tables ([[runners.kubernetes.volumes.%s]]), not %s", kind, config.TypeName(t[kind]))
			continue
		}
		for i, m := range list {
			vk := config.IndexKey(kkey, i)
			vol := rd.volume(vk, kind, m)
			if vol.Name == "" {
				continue
			}
			if names[vol.Name] || reservedVolumes[vol.Name] {
				rd.Fail(config.SubKey(vk, "name"), "volume name %q is used twice (or is one of drover's own: %s)", vol.Name, strings.Join(config.SortedKeys(reservedVolumes), ", "))
				continue
			}
			mp := path.Clean(vol.MountPath)
			if reservedDirs[mp] {
				rd.Fail(config.SubKey(vk, "mount_path"), "%s is drover's own directory in the pod", mp)
				continue
			}
			if other, ok := mountedAt[mp]; ok {
				rd.Fail(config.SubKey(vk, "mount_path"), "volume %q is mounted at %s already", other, mp)
				continue
			}
			names[vol.Name], mountedAt[mp] = true, vol.Name
			out = append(out, vol)
		}
	}
	return out
}

// reservedVolumes are the pod volumes drover makes itself.
var reservedVolumes = map[string]bool{volJob: true, volBuilds: true, volCache: true, volSecrets: true}

// reservedDirs are where drover mounts volumes of its own that a volume of
// the runner cannot replace (it can replace buildsDir and cacheDir).
var reservedDirs = map[string]bool{jobDir: true, secretsDir: true}

func (rd *reader) volume(key, kind string, m map[string]any) Volume {
	vol := Volume{Kind: kind}
	str := func(k string) string {
		if v, ok := m[k]; ok {
			return rd.Str(config.SubKey(key, k), v)
		}
		return ""
	}
	vol.Name = str("name")
	vol.MountPath = str("mount_path")
	vol.SubPath = str("sub_path")
	if v, ok := m["read_only"]; ok {
		vol.ReadOnly = rd.Bool(config.SubKey(key, "read_only"), v)
	}
	if vol.Name == "" {
		rd.Fail(config.SubKey(key, "name"), "required")
		return Volume{}
	}
	if errs := validation.IsDNS1123Label(vol.Name); len(errs) > 0 {
		rd.Fail(config.SubKey(key, "name"), "%q is not a volume name: %s", vol.Name, strings.Join(errs, "; "))
		return Volume{}
	}
	if !strings.HasPrefix(vol.MountPath, "/") {
		rd.Fail(config.SubKey(key, "mount_path"), "required, an absolute path (got %q)", vol.MountPath)
		return Volume{}
	}
	known := map[string]bool{"name": true, "mount_path": true, "sub_path": true, "read_only": true}
	switch kind {
	case "empty_dir":
		known["medium"], known["size_limit"] = true, true
		ed := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMedium(str("medium"))}
		if ed.Medium != "" && ed.Medium != corev1.StorageMediumMemory {
			rd.Fail(config.SubKey(key, "medium"), "%q is not a medium (want \"\" or \"Memory\")", ed.Medium)
		}
		if s := str("size_limit"); s != "" {
			q, err := resource.ParseQuantity(s)
			if err != nil {
				rd.Fail(config.SubKey(key, "size_limit"), "%q is not a quantity", s)
			} else if q.Sign() < 0 {
				rd.Fail(config.SubKey(key, "size_limit"), "%q is negative", s)
			}
			ed.SizeLimit = &q
		}
		vol.Source.EmptyDir = ed
	case "host_path":
		known["host_path"] = true
		hp := str("host_path")
		if hp == "" {
			hp = vol.MountPath
		}
		vol.Source.HostPath = &corev1.HostPathVolumeSource{Path: hp}
	case "config_map", "secret":
		known["items"] = true
		var items []corev1.KeyToPath
		if v, ok := m["items"]; ok {
			im := rd.strMap(config.SubKey(key, "items"), v)
			for _, k := range config.SortedKeys(im) {
				items = append(items, corev1.KeyToPath{Key: k, Path: im[k]})
			}
		}
		if kind == "config_map" {
			vol.Source.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: vol.Name}, Items: items}
		} else {
			vol.Source.Secret = &corev1.SecretVolumeSource{SecretName: vol.Name, Items: items}
		}
	case "pvc":
		vol.Source.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: vol.Name, ReadOnly: vol.ReadOnly}
	}
	for _, k := range config.SortedKeys(m) {
		switch {
		case known[k]:
		case k == "mount_propagation":
			rd.Warn(config.SubKey(key, k), notHonouredMsg)
		default:
			rd.Warn(config.SubKey(key, k), "unknown key, ignored")
		}
	}
	return vol
}
