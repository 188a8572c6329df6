package kubernetes

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/docker"
)

// Labels on every pod and secret the executor makes. A restarted manager
// finds its own by LabelSystemID, and a job's by LabelJob.
const (
	labelPrefix   = "drover.io/"
	LabelManaged  = labelPrefix + "managed"   // "1"
	LabelJob      = labelPrefix + "job"       // the job id
	LabelRunner   = labelPrefix + "runner"    // the runner's short token
	LabelSystemID = labelPrefix + "system-id" // the manager's system_id
)

// Containers of a job's pod; services are svc-0, svc-1, ...
const (
	containerBuild  = "build"
	containerHelper = "helper"
	servicePrefix   = "svc-"
)

// Pod volumes drover makes, and where they are mounted.
const (
	volJob     = "drover-job" // emptyDir: stage scripts, their output and exit files
	volBuilds  = "drover-builds"
	volCache   = "drover-cache"
	volSecrets = "drover-secrets" // the job's Secret: file variables

	jobDir     = "/drover"
	buildsDir  = "/builds"
	cacheDir   = "/cache"
	secretsDir = "/drover-secrets"
)

// Keys of the job's Secret: an environment variable's value is under
// envKeyPrefix+name, a file variable's content under fileKeyPrefix+name.
const (
	envKeyPrefix  = "env."
	fileKeyPrefix = "file."
)

// jobLabels returns the labels of the job's pod and secret.
func jobLabels(s executor.Settings, jobID int64, extra map[string]string) map[string]string {
	l := make(map[string]string, len(extra)+4)
	for k, v := range extra {
		l[k] = v
	}
	l[LabelManaged] = "1"
	l[LabelRunner] = labelValue(s.ShortToken)
	l[LabelSystemID] = labelValue(s.SystemID)
	l[LabelJob] = strconv.FormatInt(jobID, 10)
	return l
}

// labelValue makes s a valid label value: at most 63 characters of
// [A-Za-z0-9_.-], starting and ending with a letter or digit.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	s = string(b)
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Trim(s, "-_.")
}

// podName is the name of a job's pod (and its secret): drover-<runner>-
// job-<id>-<random>, unique across managers and retries of a job.
func podName(s executor.Settings, jobID int64) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	tok := strings.ToLower(labelValue(s.ShortToken))
	tok = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, tok)
	tok = strings.Trim(tok, "-")
	if tok == "" {
		tok = "runner"
	}
	if len(tok) > 20 {
		tok = tok[:20]
	}
	return fmt.Sprintf("drover-%s-job-%d-%s", tok, jobID, hex.EncodeToString(b[:]))
}

// envName reports whether a variable can be an environment variable of
// the pod's containers.
func envName(k string) bool {
	return len(validation.IsEnvVarName(k)) == 0 && !strings.ContainsAny(k, ".-")
}

// jobSecret is the job's Secret: the values of its environment variables
// (the containers read them by reference: no value is in the pod spec) and
// the content of its file variables (mounted at secretsDir).
func jobSecret(name, ns string, lbls map[string]string, job *api.JobResponse, files map[string]string) *corev1.Secret {
	data := map[string][]byte{}
	for _, v := range job.Variables {
		if !v.File && envName(v.Key) {
			data[envKeyPrefix+v.Key] = []byte(v.Value)
		}
	}
	for k, v := range files {
		data[fileKeyPrefix+k] = []byte(v)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

// secretEnv is the environment of the build and service containers: each
// of the job's variables (not file variables) by reference to the Secret,
// in the job's order, a later definition of a name replacing an earlier.
func secretEnv(secret string, job *api.JobResponse) []corev1.EnvVar {
	var env []corev1.EnvVar
	at := map[string]int{}
	for _, v := range job.Variables {
		if v.File || !envName(v.Key) {
			continue
		}
		ev := corev1.EnvVar{Name: v.Key, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: envKeyPrefix + v.Key,
		}}}
		if i, ok := at[v.Key]; ok {
			env[i] = ev
			continue
		}
		at[v.Key] = len(env)
		env = append(env, ev)
	}
	return env
}

// podSpec is what Prepare asks the cluster for.
type podSpec struct {
	name, ns    string
	labels      map[string]string
	cfg         *Config
	job         *api.JobResponse
	image       string
	pull        []corev1.PullPolicy
	services    []api.Image
	serviceRefs []string // the services' qualified images; nil = as written
	fileKeys    []string // file variables in the Secret
	helperImage string
	// registrySecret is the job's Secret of registry credentials, named
	// in imagePullSecrets after image_pull_secrets; "" = none.
	registrySecret string
}

// build returns the pod: the build container in the job's image idling in
// a shell that reads its (open, empty) standard input, the helper
// container likewise in drover's helper image, and the services; all
// share the job's emptyDir, and the process namespace (the helper stops
// a cancelled stage's processes).
func (p podSpec) build() *corev1.Pod {
	c := p.cfg
	vols := []corev1.Volume{{Name: volJob, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mounts := []corev1.VolumeMount{{Name: volJob, MountPath: jobDir}}
	// A volume of the runner's mounted at the builds or the cache
	// directory (a PVC at /cache, as GitLab Runner users have) takes the
	// place of drover's emptyDir there: a container cannot mount two
	// volumes at one path.
	for _, own := range []struct{ name, dir string }{{volBuilds, buildsDir}, {volCache, cacheDir}} {
		if !slices.ContainsFunc(c.Volumes, func(v Volume) bool { return path.Clean(v.MountPath) == own.dir }) {
			vols = append(vols, corev1.Volume{Name: own.name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			mounts = append(mounts, corev1.VolumeMount{Name: own.name, MountPath: own.dir})
		}
	}
	for _, v := range c.Volumes {
		vols = append(vols, corev1.Volume{Name: v.Name, VolumeSource: v.Source})
		mounts = append(mounts, corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath, SubPath: v.SubPath, ReadOnly: v.ReadOnly})
	}
	if len(p.fileKeys) > 0 {
		var items []corev1.KeyToPath
		for _, k := range p.fileKeys {
			items = append(items, corev1.KeyToPath{Key: fileKeyPrefix + k, Path: k})
		}
		mode := int32(0o444)
		vols = append(vols, corev1.Volume{Name: volSecrets, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: p.name, Items: items, DefaultMode: &mode,
		}}})
		// In the helper too: the stages it runs (get_sources, the cache
		// and the artifacts) export the file variables as paths there
		// like every stage, and git or a job's hooks may read them.
		mounts = append(mounts, corev1.VolumeMount{Name: volSecrets, MountPath: secretsDir, ReadOnly: true})
	}
	env := secretEnv(p.name, p.job)

	build := corev1.Container{
		Name:         containerBuild,
		Image:        p.image,
		Stdin:        true,
		Env:          env,
		VolumeMounts: slices.Clone(mounts),
		Resources:    c.Build.requirements(),
	}
	if len(p.pull) > 0 {
		build.ImagePullPolicy = p.pull[0]
	}
	switch ep := p.job.Image.Entrypoint; {
	case len(ep) == 0:
		build.Args = []string{"sh"} // after the image's entrypoint, if any
	case len(ep) == 1 && ep[0] == "":
		build.Command = []string{"sh"} // no entrypoint
	default:
		build.Command, build.Args = ep, []string{"sh"}
	}
	helper := corev1.Container{
		Name:         containerHelper,
		Image:        p.helperImage,
		Command:      []string{"sh"},
		Stdin:        true,
		VolumeMounts: mounts,
		Resources:    c.Helper.requirements(),
	}
	if len(c.PullPolicy) > 0 {
		helper.ImagePullPolicy = c.PullPolicy[0]
	}
	containers := []corev1.Container{build, helper}
	var aliases []string
	for i, s := range p.services {
		image := s.Name
		if i < len(p.serviceRefs) {
			image = p.serviceRefs[i]
		}
		sc := corev1.Container{
			Name:      servicePrefix + strconv.Itoa(i),
			Image:     image,
			Command:   s.Entrypoint,
			Args:      s.Command,
			Env:       slices.Clone(env),
			Resources: c.Service.requirements(),
		}
		if pp := servicePull(c, s); pp != "" {
			sc.ImagePullPolicy = pp
		}
		for _, v := range s.Variables {
			if len(validation.IsEnvVarName(v.Key)) > 0 {
				continue // the API server would refuse the whole pod
			}
			// "$$" keeps the kubelet from expanding $(NAME) in the value,
			// as GitLab Runner does.
			sc.Env = append(sc.Env, corev1.EnvVar{Name: v.Key, Value: strings.ReplaceAll(v.Value, "$", "$$")})
		}
		containers = append(containers, sc)
		for _, n := range append(docker.SplitAliases(s.Alias), docker.ServiceNames(s.Name)...) {
			if !slices.Contains(aliases, n) && len(validation.IsDNS1123Subdomain(n)) == 0 {
				aliases = append(aliases, n)
			}
		}
	}
	share := true
	// No API token in the job's containers unless the runner asks for it:
	// with one, a job could use its service account's rights (maybe read
	// the namespace's Secrets, other jobs' included). GitLab Runner leaves
	// the cluster's default (mounted) when the key is unset.
	automount := c.AutomountServiceAccountToken != nil && *c.AutomountServiceAccountToken
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns, Labels: p.labels, Annotations: c.PodAnnotations},
		Spec: corev1.PodSpec{
			RestartPolicy:         corev1.RestartPolicyNever,
			ShareProcessNamespace: &share,
			Containers:            containers,
			Volumes:               vols,
			NodeSelector:          c.NodeSelector,
			Tolerations:           c.NodeTolerations,
			ServiceAccountName:    c.ServiceAccount,

			AutomountServiceAccountToken: &automount,
		},
	}
	if c.CleanupGrace != nil {
		g := *c.CleanupGrace
		pod.Spec.TerminationGracePeriodSeconds = &g
	}
	if len(aliases) > 0 {
		pod.Spec.HostAliases = []corev1.HostAlias{{IP: "127.0.0.1", Hostnames: aliases}}
	}
	// With use_service_account_image_pull_secrets, none: the service
	// account's apply (the API server adds them only to a pod that names
	// none), as in GitLab Runner.
	if !c.UseServiceAccountImagePullSecrets {
		for _, s := range c.ImagePullSecrets {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
		}
		if p.registrySecret != "" {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: p.registrySecret})
		}
	}
	return pod
}

// servicePull is a service's pull policy: its own first choice, else the
// runner's.
func servicePull(c *Config, s api.Image) corev1.PullPolicy {
	for _, p := range s.PullPolicy {
		if pp, ok := pullPolicy(p); ok {
			return pp
		}
	}
	if len(c.PullPolicy) > 0 {
		return c.PullPolicy[0]
	}
	return ""
}
