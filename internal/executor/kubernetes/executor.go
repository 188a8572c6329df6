package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/detached"
	"github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/shell"
)

// helperCommand runs drover's helper in the helper container (the image
// has drover as /usr/bin/drover).
const helperCommand = "drover helper"

// Executor runs one job in a pod of its own; see the package doc.
type Executor struct {
	// GracePeriod is the time between SIGTERM and SIGKILL when a stage is
	// cancelled; set by the provider.
	GracePeriod time.Duration

	prov *Provider

	executor.StageRecorder

	mu        sync.Mutex
	cfg       *Config
	cl        *client
	job       *api.JobResponse
	settings  executor.Settings
	trace     io.Writer
	logger    *slog.Logger
	resumable bool

	ns, pod, secret string
	regSecret       string            // the job's registry credentials, "" = none
	regFrom         map[string]string // registry host -> where its credentials came from
	podUID          types.UID
	image           string
	shell           string // bash or sh
	shellPath       string // its path in the build image
	paths           executor.Paths
	fileVars        bool                 // the job's file variables are in the Secret
	det             *detached.Runner     // the job's stages, their output in the trace
	cleaning        executor.Cleaning    // Cleanup's deletions, done in the background
	svcLogs         executor.ServiceLogs // CI_DEBUG_SERVICES
}

var (
	_ executor.Executor           = (*Executor)(nil)
	_ executor.PathsReporter      = (*Executor)(nil)
	_ executor.Stateful           = (*Executor)(nil)
	_ executor.OutputCheckpointer = (*Executor)(nil)
	_ executor.ScriptHost         = (*Executor)(nil)
	_ executor.HelperHost         = (*Executor)(nil)
	_ executor.FileOpener         = (*Executor)(nil)
	_ executor.FileVariablesHost  = (*Executor)(nil)
)

// Disposable reports true: a job's pod is made for it alone.
func (e *Executor) Disposable() bool { return true }

// ScriptHostname is the pod's host name: its name. Every stage creates
// the project directory it runs in.
func (e *Executor) ScriptHostname() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pod
}

// HelperCommand is how the cache and artifact stages, which run in the
// helper container, call drover's helper (executor.HelperHost).
func (e *Executor) HelperCommand() string { return helperCommand }

// FileVariablesDir is where the job's Secret puts its file variables.
func (e *Executor) FileVariablesDir() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.fileVars {
		return ""
	}
	return secretsDir
}

// Shell returns the shell of the job's image (after Prepare).
func (e *Executor) Shell() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.shell
}

// Paths returns the job's directories inside its pod.
func (e *Executor) Paths() executor.Paths {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.paths
}

// Finish records nothing: Cleanup does the work.
func (e *Executor) Finish(error) {}

func (e *Executor) printf(format string, args ...any) {
	e.mu.Lock()
	t := e.trace
	e.mu.Unlock()
	if t != nil {
		fmt.Fprintf(t, format, args...)
	}
}

// jobImages checks the job's image (else the runner's default) and its
// services against the runner's rules, before anything reaches the
// cluster: each must be a valid image reference (see
// docker.CheckImageReference) that allowed_images or allowed_services
// allows. It returns the image as written (for the job's log), and the
// qualified references the pod spec names: the node's runtime then never
// takes a job's string for a local image ID ("sha256:<hex>" or a prefix).
func jobImages(cfg *Config, job *api.JobResponse) (img, ref string, serviceRefs []string, err error) {
	img = job.Image.Name
	if img == "" {
		img = cfg.Image
	}
	if img == "" {
		return "", "", nil, refuse(api.RunnerConfigurationError, "the job names no image and the runner has no default image ([runners.kubernetes] image)")
	}
	check := func(what, name, option string, patterns []string) (string, error) {
		r, err := docker.CheckImageReference(name)
		if err != nil {
			return "", refuse(api.ImagePullFailure, "the %s %q is refused before any pull: %v", what, name, err)
		}
		if !docker.ImageAllowed(patterns, name) {
			return "", refuse(api.RunnerConfigurationError, "the %s %q is not allowed: it matches none of %s %q", what, name, option, patterns)
		}
		return r, nil
	}
	if ref, err = check("image", img, "allowed_images", cfg.AllowedImages); err != nil {
		return "", "", nil, err
	}
	for _, s := range job.Services {
		r, err := check("service", s.Name, "allowed_services", cfg.AllowedServices)
		if err != nil {
			return "", "", nil, err
		}
		serviceRefs = append(serviceRefs, r)
	}
	return img, ref, serviceRefs, nil
}

// refuse is a job the runner will not run as it is.
func refuse(reason api.FailureReason, format string, args ...any) error {
	return &executor.BuildError{Reason: reason, Inner: fmt.Errorf(format, args...)}
}

// namespaceOverwrite is the job variable that picks the namespace.
const namespaceOverwrite = "KUBERNETES_NAMESPACE_OVERWRITE"

// Prepare checks the job against the runner's rules, creates the job's
// Secret and pod, waits until every container of the pod runs (up to
// poll_timeout) and detects the build image's shell.
func (e *Executor) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	trace, logger := executor.Sinks(opts)
	e.mu.Lock()
	e.trace, e.logger, e.job, e.settings = trace, logger, opts.Job, opts.Settings
	e.resumable = opts.Settings.Resumable
	e.det = e.runner(trace, logger)
	e.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	cfg, err := e.prov.o.Lookup(opts.Settings)
	if err != nil {
		return fmt.Errorf("kubernetes executor: %w", err)
	}
	cl, err := e.prov.client(cfg)
	if err != nil {
		return err
	}
	job := opts.Job
	executor.PrepareHeader(trace, Name)
	img, ref, serviceRefs, err := jobImages(cfg, job)
	if err != nil {
		return err
	}
	ns := cfg.Namespace
	if want := job.Variables.Get(namespaceOverwrite); want != "" && want != ns {
		if cfg.NamespaceOverwrite == nil || !cfg.NamespaceOverwrite.MatchString(want) {
			return refuse(api.RunnerConfigurationError, "the job asks for namespace %q (%s), which namespace_overwrite_allowed does not allow", want, namespaceOverwrite)
		}
		ns = want
	}
	pull := cfg.PullPolicy
	if len(job.Image.PullPolicy) > 0 {
		pull = nil
		for _, s := range job.Image.PullPolicy {
			p, ok := pullPolicy(s)
			if !ok {
				return refuse(api.RunnerConfigurationError, "the image's pull_policy %q is not one of always, if-not-present, never", s)
			}
			pull = append(pull, p)
		}
	}
	paths, err := opts.JobPaths(executor.Paths{BuildsDir: buildsDir, CacheDir: cacheDir, ProjectDir: path.Join(buildsDir, executor.ProjectPath(job))})
	if err != nil {
		return err
	}
	var files map[string]string
	if opts.Variables != nil {
		files = shell.FileVariables(opts.Variables(paths), secretsDir, os.LookupEnv)
	}
	name := podName(opts.Settings, job.ID)
	e.mu.Lock()
	e.cfg, e.cl, e.image, e.paths, e.ns = cfg, cl, img, paths, ns
	e.fileVars = len(files) > 0
	e.mu.Unlock()
	fmt.Fprintf(trace, "Using Kubernetes executor with image %s ...\n", img)
	fmt.Fprintf(trace, "Using Kubernetes namespace: %s\n", ns)

	lbls := jobLabels(opts.Settings, job.ID, cfg.PodLabels)
	sec, err := cl.cs.CoreV1().Secrets(ns).Create(ctx, jobSecret(name, ns, lbls, job, files), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the job's secret in namespace %s: %w", ns, err)
	}
	e.mu.Lock()
	e.secret = sec.Name
	e.mu.Unlock()
	pulled := append([]string{ref}, serviceRefs...)
	if cfg.HelperImage != "" {
		pulled = append(pulled, cfg.HelperImage) // as the docker executor pulls it
	}
	regSecret, err := e.createRegistrySecret(ctx, name, lbls, pulled)
	if err != nil {
		return err
	}
	spec := podSpec{name: name, ns: ns, labels: lbls, cfg: cfg, job: job, image: ref, pull: pull,
		services: job.Services, serviceRefs: serviceRefs, fileKeys: slices.Sorted(mapKeys(files)), helperImage: cfg.HelperImage,
		registrySecret: regSecret}
	pod, err := cl.cs.CoreV1().Pods(ns).Create(ctx, spec.build(), metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return refuse(api.RunnerConfigurationError, "the cluster refused the job's pod: %v", err)
		}
		return fmt.Errorf("create the job's pod in namespace %s: %w", ns, err)
	}
	e.mu.Lock()
	e.pod, e.podUID = pod.Name, pod.UID
	e.mu.Unlock()
	e.ownSecrets(ctx, pod)
	fmt.Fprintf(trace, "Waiting for pod %s/%s to be running ...\n", ns, pod.Name)
	if err := e.waitRunning(ctx, pod); err != nil {
		return err
	}
	if opts.Settings.DebugServices {
		e.followServiceLogs(ctx, job.Services)
	}
	return e.detectShell(ctx)
}

// followServiceLogs writes what each of the pod's service containers
// prints into the job log as it comes, for CI_DEBUG_SERVICES
// (executor.ServiceLogs), each line after "[service:<image name>-<its
// aliases>] " with the cluster's timestamp, as GitLab Runner writes it,
// until Cleanup or the container's end.
func (e *Executor) followServiceLogs(ctx context.Context, services []api.Image) {
	e.mu.Lock()
	cs, ns, pod, trace, resumable, logger := e.cl.cs, e.ns, e.pod, e.trace, e.resumable, e.logger
	e.mu.Unlock()
	if !executor.Followable(trace, len(services), resumable) {
		return
	}
	for i, s := range services {
		image, _, _ := strings.Cut(s.Name, ":")
		names := append([]string{image}, docker.SplitAliases(s.Alias)...)
		container := servicePrefix + strconv.Itoa(i)
		e.svcLogs.Follow(ctx, trace, names, logger, func(ctx context.Context) (io.ReadCloser, error) {
			return cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true, Timestamps: true}).Stream(ctx)
		}, func(w io.Writer, r io.Reader) error {
			_, err := io.Copy(w, r)
			return err
		})
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// createRegistrySecret creates the job's registry Secret from the
// credentials found for the registries of refs (see registryCreds) and
// returns its name: "" when there are none, or when the pod is to use its
// service account's imagePullSecrets (GitLab Runner leaves every
// imagePullSecret out of the pod then, so a Secret would be of no use).
func (e *Executor) createRegistrySecret(ctx context.Context, name string, lbls map[string]string, refs []string) (string, error) {
	e.mu.Lock()
	cfg, cl, ns, job, env := e.cfg, e.cl, e.ns, e.job, e.settings.Environment
	e.mu.Unlock()
	if cfg.UseServiceAccountImagePullSecrets {
		return "", nil
	}
	creds, err := e.registryCreds(ctx, job, env, refs)
	if err != nil || len(creds) == 0 {
		return "", err
	}
	sec, err := registrySecret(name+registrySecretSuffix, ns, lbls, creds)
	if err != nil {
		return "", err
	}
	if sec, err = cl.cs.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create the job's registry secret in namespace %s: %w", ns, err)
	}
	from := map[string]string{}
	for _, c := range creds {
		from[c.Registry] = c.From
	}
	e.mu.Lock()
	e.regSecret, e.regFrom = sec.Name, from
	e.mu.Unlock()
	return sec.Name, nil
}

// ownSecrets makes the pod the owner of the job's secrets: the cluster's
// garbage collector deletes them with the pod, whoever deletes the pod.
func (e *Executor) ownSecrets(ctx context.Context, pod *corev1.Pod) {
	patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q,"uid":%q}]}}`, pod.Name, pod.UID)
	for _, name := range []string{e.secret, e.regSecret} {
		if name == "" {
			continue
		}
		_, err := e.cl.cs.CoreV1().Secrets(pod.Namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			e.logger.Warn("cannot make the job's pod own its secret (it is deleted with the job all the same)", "secret", name, "err", err)
		}
	}
}

// imagePullReasons are the waiting reasons of a container whose image
// cannot be had.
var imagePullReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"}

// waitRunning waits until every container of the pod runs. An image that
// cannot be pulled fails the job with image_pull_failure at once; a pod
// not running after poll_timeout (unschedulable: the scheduler's reason)
// fails it as a system failure.
func (e *Executor) waitRunning(ctx context.Context, pod *corev1.Pod) error {
	cfg, cs := e.cfg, e.cl.cs
	ctx, cancel := context.WithTimeout(ctx, cfg.PollTimeout)
	defer cancel()
	pods := cs.CoreV1().Pods(pod.Namespace)
	said := map[string]bool{}
	say := func(msg string) {
		if !said[msg] {
			said[msg] = true
			e.printf("%s\n", msg)
		}
	}
	rv := pod.ResourceVersion
	var why string
	for {
		done, reason, err := e.podState(ctx, pod, say)
		if done || err != nil {
			return err
		}
		if reason != "" {
			why = reason
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: rv})
		if err == nil {
			func() {
				defer w.Stop()
				tick := time.NewTimer(cfg.PollInterval)
				defer tick.Stop()
				for {
					select {
					case ev, ok := <-w.ResultChan():
						if !ok {
							return
						}
						if p, isPod := ev.Object.(*corev1.Pod); isPod {
							pod, rv = p, p.ResourceVersion
							return
						}
						rv = ""
						return
					case <-tick.C:
						return
					case <-ctx.Done():
						return
					}
				}
			}()
		}
		if ctx.Err() != nil {
			break
		}
		if p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
			pod, rv = p, p.ResourceVersion
		} else if apierrors.IsNotFound(err) {
			return fmt.Errorf("the job's pod %s/%s was deleted while it started", pod.Namespace, pod.Name)
		}
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := fmt.Sprintf("the job's pod %s/%s did not run within poll_timeout (%s)", pod.Namespace, pod.Name, cfg.PollTimeout)
	if why != "" {
		msg += ": " + why
	}
	// Failed here, not handed back: another runner of the same cluster
	// would fare no better.
	return refuse(api.RunnerSystemFailure, "%s", msg)
}

// podState reads a starting pod: done when every container runs; a
// reason it does not yet (the scheduler's); an error that ends the wait.
func (e *Executor) podState(ctx context.Context, pod *corev1.Pod, say func(string)) (done bool, reason string, err error) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			reason = "the pod cannot be scheduled: " + c.Message
			say("WARNING: " + reason)
		}
	}
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	running := 0
	for _, st := range statuses {
		switch {
		case st.State.Waiting != nil:
			w := st.State.Waiting
			if slices.Contains(imagePullReasons, w.Reason) {
				evs := e.warnings(ctx, pod)
				e.mu.Lock()
				own := e.regSecret
				e.mu.Unlock()
				if secretLate(evs, own) {
					// The kubelet pulls again after its back-off, with
					// the secret by then: poll_timeout bounds the wait.
					reason = fmt.Sprintf("the kubelet pulled the image %s of container %q before it could read the job's registry secret %s; it pulls again", st.Image, st.Name, own)
					say("Waiting: " + reason)
					continue
				}
				msg := fmt.Sprintf("the image %s of container %q cannot be pulled: %s: %s (%s)", st.Image, st.Name, w.Reason, w.Message, e.pullCredentialsNote(st.Image))
				if ev := tellingLines(evs); ev != "" {
					msg += "\n" + ev
				}
				return false, "", refuse(api.ImagePullFailure, "%s", msg)
			}
			if w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
				reason = fmt.Sprintf("container %q is waiting: %s %s", st.Name, w.Reason, w.Message)
				say("Waiting: " + reason)
			}
		case st.State.Terminated != nil:
			t := st.State.Terminated
			msg := fmt.Sprintf("container %q of the job's pod exited with code %d (%s) before the job could start", st.Name, t.ExitCode, t.Reason)
			if t.Message != "" {
				msg += ": " + t.Message
			}
			if st.Name == containerBuild {
				return false, "", refuse(api.RunnerConfigurationError, "%s (is the image's entrypoint one that runs its command? set the job's image entrypoint to [\"\"] if not)", msg)
			}
			return false, "", errors.New(msg)
		case st.State.Running != nil:
			running++
		}
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, "", fmt.Errorf("the job's pod ended (%s) before the job could start: %s %s", pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
	case corev1.PodRunning:
		if running == len(pod.Spec.Containers) {
			return true, "", nil
		}
	}
	return false, reason, nil
}

// telling are the reasons of the warning events that explain a pod that
// does not start.
var telling = []string{"Failed", "FailedScheduling", "InspectFailed", "ErrImageNeverPull", "FailedMount", "FailedCreatePodSandBox", "BackOff", reasonSecretLate}

// reasonSecretLate is the kubelet's warning that it pulls a pod's image
// without an image pull secret it could not read (since Kubernetes 1.28).
const reasonSecretLate = "FailedToRetrieveImagePullSecret"

// warnings returns the cluster's warning events about the pod (none if
// they cannot be read).
func (e *Executor) warnings(ctx context.Context, pod *corev1.Pod) []corev1.Event {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", pod.Name), fields.OneTermEqualSelector("type", corev1.EventTypeWarning))
	evs, err := e.cl.cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return nil
	}
	return evs.Items
}

// tellingLines are the events of evs that say why a pod does not start,
// one per line (the kubelet's pull errors, the scheduler's reasons).
func tellingLines(evs []corev1.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if !slices.Contains(telling, ev.Reason) {
			continue // MissingClusterDNS and such: not why the pod fails
		}
		fmt.Fprintf(&b, "%s %s: %s\n", ev.Source.Component, ev.Reason, ev.Message)
	}
	return strings.TrimSpace(b.String())
}

// secretLate reports whether the pod's last failed pull ran without the
// job's registry secret own, which drover made before the pod: the
// kubelet gives a secret's cache a second to fill before it pulls without
// it (a busy node), says so (reasonSecretLate, naming the secret) and
// pulls again after a back-off of 10 s or more, by when it has it. The
// kubelet's events carry whole seconds: the last pull failed without the
// secret when the last such warning is at most 2 s older than the last
// pull failure; a pull with the secret comes a back-off after the last
// warning. A secret of the runner's image_pull_secrets is not own: the
// kubelet that cannot read one of those (one that does not exist) fails
// the job at once, as without drover's secret.
func secretLate(evs []corev1.Event, own string) bool {
	if own == "" {
		return false
	}
	var late, failed time.Time
	for _, ev := range evs {
		t := ev.LastTimestamp.Time
		if t.IsZero() {
			t = ev.EventTime.Time
		}
		switch {
		case ev.Reason == reasonSecretLate && namesSecret(ev.Message, own):
			late = maxTime(late, t)
		case ev.Reason == "Failed":
			failed = maxTime(failed, t)
		}
	}
	return !late.IsZero() && !late.Before(failed.Add(-2*time.Second))
}

// namesSecret reports whether the kubelet's message lists secret name:
// "Unable to retrieve some image pull secrets (a, b); attempting ...".
func namesSecret(msg, name string) bool {
	_, list, ok := strings.Cut(msg, "(")
	if !ok {
		return false
	}
	list, _, _ = strings.Cut(list, ")")
	for n := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// detectScript prints the path of bash when the build image has it, else
// of sh.
const detectScript = `for b in /usr/local/bin/bash /usr/bin/bash /bin/bash; do
	if [ -x "$b" ]; then echo "$b"; exit 0; fi
done
command -v sh || echo /bin/sh`

// detectShell finds the shell of the build image.
func (e *Executor) detectShell(ctx context.Context) error {
	var out, errb bytes.Buffer
	code, err := e.exec(ctx, containerBuild, []string{"sh", "-c", detectScript}, nil, &out, &errb)
	if err != nil || code != 0 {
		return refuse(api.RunnerConfigurationError, "the build container of image %s has no working sh: exit %d %v %s", e.image, code, err, strings.TrimSpace(errb.String()))
	}
	p := strings.TrimSpace(out.String())
	if i := strings.LastIndexByte(p, '\n'); i >= 0 {
		p = p[i+1:]
	}
	sh := "sh"
	if path.Base(p) == "bash" {
		sh = "bash"
	}
	if want := e.settings.Shell; want != "" && want != sh {
		if want == "bash" {
			return refuse(api.RunnerConfigurationError, "the runner's shell is bash, but the image %s has none", e.image)
		}
		sh, p = want, "sh"
	}
	e.mu.Lock()
	e.shell, e.shellPath = sh, p
	e.mu.Unlock()
	e.logger.Debug("job pod ready", "pod", e.pod, "shell", p)
	return nil
}

// Cleanup deletes the job's pod and secrets (also after failures and
// cancels); it is safe after a failed Prepare and more than once. The
// deletion runs in the background (Provider.Wait waits for it).
func (e *Executor) Cleanup(ctx context.Context) {
	e.svcLogs.Stop()
	e.mu.Lock()
	cleaned := e.cleaning.Start(e.cl != nil)
	if cleaned == nil {
		e.mu.Unlock()
		return
	}
	cs, ns, pod, logger, cfg := e.cl.cs, e.ns, e.pod, e.logger, e.cfg
	secrets := []string{e.secret, e.regSecret}
	resumable, s, jobID := e.resumable, e.settings, e.job.ID
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	e.prov.cleanups.Go(func() {
		defer cancel()
		defer close(cleaned)
		opts := metav1.DeleteOptions{GracePeriodSeconds: cfg.CleanupGrace}
		if pod != "" {
			if err := cs.CoreV1().Pods(ns).Delete(ctx, pod, opts); err != nil && !apierrors.IsNotFound(err) {
				logger.Warn("cannot delete the job's pod", "pod", ns+"/"+pod, "err", err)
			}
		}
		for _, secret := range secrets {
			if secret == "" {
				continue
			}
			if err := cs.CoreV1().Secrets(ns).Delete(ctx, secret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				logger.Warn("cannot delete the job's secret", "secret", ns+"/"+secret, "err", err)
			}
		}
		if resumable {
			// A manager that died between creating something and saving
			// the job's state left it unrecorded: it has the job's labels.
			sel := labels.Set{LabelJob: fmt.Sprint(jobID), LabelRunner: labelValue(s.ShortToken)}.AsSelector().String()
			if _, err := deleteLabelled(ctx, cs, ns, sel, nil, opts); err != nil {
				logger.Warn("cannot look for unrecorded job resources", "err", err)
			}
		}
	})
}

// Cleaned is closed when what Cleanup deletes in the background is
// deleted (or its deletion failed and was logged).
func (e *Executor) Cleaned() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cleaning.Done()
}

const cleanupTimeout = 2 * time.Minute

var errNotPrepared = errors.New("kubernetes executor: Run before Prepare")

// helperTool is drover's helper in the helper container.
func helperTool() detached.Tool { return detached.Helper{Command: strings.Fields(helperCommand)} }

// runner is the job's detached.Runner: stage files in the pod's
// emptyDir, followed by drover's helper in the helper container, again
// from the byte reached when the stream through the API server breaks.
func (e *Executor) runner(trace io.Writer, logger *slog.Logger) *detached.Runner {
	return detached.New(detached.Config{Dir: jobDir, Tool: helperTool(), Retries: followRetries,
		Grace: e.GracePeriod, Trace: trace, Logger: logger})
}
