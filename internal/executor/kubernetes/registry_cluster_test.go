package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
	"github.com/drover-ci/drover/internal/fleet/fleetingdir/fleetingdirtest"
	"github.com/drover-ci/drover/internal/registryauth"
)

// privateRegistry starts distribution's registry with htpasswd
// authentication, makes the test cluster's containerd reach it over plain
// HTTP (a hosts.toml in its certs.d, which up.sh writes for the cluster's
// own registry and containerd reads at each pull), and copies the test
// busybox there under a tag of the test's own. It returns the registry and
// the image's reference.
func privateRegistry(t *testing.T, c *testCluster, user, password string) (*fleetingdirtest.Registry, string) {
	t.Helper()
	reg := fleetingdirtest.Start(t.Context(), t, fleetingdirtest.Options{Username: user, Password: password})
	dir := filepath.Join(c.env.StateDir, "containerd", "certs.d", reg.Host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+reg.Host, "http://"+reg.Host)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}

	var b [6]byte
	_, _ = rand.Read(b[:])
	ref := reg.Host + "/private/busybox:" + hex.EncodeToString(b[:])
	src, err := name.ParseReference(c.busybox, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(src, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("read %s: %v", c.busybox, err)
	}
	if err := remote.Write(dst, img, remote.WithContext(t.Context()),
		remote.WithAuth(&authn.Basic{Username: user, Password: password})); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	// Without credentials the registry refuses the image: the test below
	// proves something only if so.
	if _, err := remote.Head(dst, remote.WithContext(t.Context())); err == nil {
		t.Fatalf("the registry at %s serves %s without credentials", reg.Host, ref)
	}
	return reg, ref
}

// TestRegistryCredentialsPull runs jobs whose image is in a registry that
// demands a login (distribution's, htpasswd). Without credentials the
// kubelet cannot pull it: the job fails with image_pull_failure, saying
// that drover had no credentials for the registry. With the job payload's
// registry credentials (what GitLab sends) the job's registry Secret lets
// the kubelet pull it and the job runs; the Secret carries the job's
// labels and is gone after Cleanup. DOCKER_AUTH_CONFIG works the same,
// and the sweep deletes the Secret of a job it does not keep.
func TestRegistryCredentialsPull(t *testing.T) {
	c := cluster(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // the manager has no Docker login
	const user, password = "drover-ci", "s3cret-pull-password"
	reg, ref := privateRegistry(t, c, user, password)
	host := registryauth.Host(ref)
	p, s := c.provider(t)

	t.Run("without credentials", func(t *testing.T) {
		job := clusterJob(31)
		job.Image = api.Image{Name: ref}
		e := p.Create().(*Executor)
		tr := &executortest.Trace{}
		err := e.Prepare(t.Context(), executor.PrepareOptions{Job: job, Settings: s, Trace: tr})
		e.Cleanup(context.Background())
		<-e.Cleaned()
		var be *executor.BuildError
		if !errors.As(err, &be) || be.Reason != api.ImagePullFailure {
			t.Fatalf("Prepare = %v, want an image_pull_failure\n%s", err, tr.String())
		}
		// The registry's refusal, as the kubelet reports it.
		for _, want := range []string{"cannot be pulled", "401 Unauthorized", "drover found no credentials for " + host} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Prepare = %v\nwant it to say %q", err, want)
			}
		}
		if e.regSecret != "" {
			t.Errorf("a registry secret %q was made without credentials", e.regSecret)
		}
	})

	t.Run("with the job's credentials", func(t *testing.T) {
		job := clusterJob(32)
		job.Image = api.Image{Name: ref}
		job.Credentials = []api.Credentials{{Type: "registry", URL: host, Username: user, Password: password}}
		e := p.Create().(*Executor)
		tr := &executortest.Trace{}
		if err := e.Prepare(t.Context(), executor.PrepareOptions{Job: job, Settings: s, Trace: tr}); err != nil {
			e.Cleanup(context.Background())
			t.Fatalf("Prepare: %v\n%s", err, tr.String())
		}
		cleaned := false
		t.Cleanup(func() {
			if !cleaned {
				e.Cleanup(context.Background())
			}
		})
		if want := "Authenticating with credentials from " + registryauth.FromPayload + " for " + host + "\n"; !strings.Contains(tr.String(), want) {
			t.Errorf("the job's log lacks %q:\n%s", want, tr.String())
		}
		if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "echo ran-the-private-image"}); err != nil {
			t.Fatalf("Run: %v\n%s", err, tr.String())
		}
		if !strings.Contains(tr.String(), "ran-the-private-image\n") {
			t.Errorf("the stage's output is not in the trace:\n%s", tr.String())
		}

		sec, err := c.cs.CoreV1().Secrets(c.ns).Get(t.Context(), e.regSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the job's registry secret %q: %v", e.regSecret, err)
		}
		if sec.Type != corev1.SecretTypeDockerConfigJson || sec.Labels[LabelJob] != "32" || sec.Labels[LabelSystemID] != labelValue(s.SystemID) {
			t.Errorf("registry secret: type %q labels %v", sec.Type, sec.Labels)
		}
		pod, err := c.cs.CoreV1().Pods(c.ns).Get(t.Context(), e.pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := pod.Spec.ImagePullSecrets; len(got) != 1 || got[0].Name != e.regSecret {
			t.Errorf("the pod's imagePullSecrets = %v, want the job's %s", got, e.regSecret)
		}
		// containerd asks for the manifest (GET, or HEAD when it has the
		// content from an earlier run) as the job's user.
		if reg.Count(`msg="response completed" auth.user.name=`+user, "/v2/private/busybox/manifests/", "http.response.status=200") == 0 {
			t.Errorf("the registry served no manifest to %s:\n%s", user, reg.Log())
		}

		e.Cleanup(context.Background())
		cleaned = true
		<-e.Cleaned()
		if _, err := c.cs.CoreV1().Secrets(c.ns).Get(t.Context(), e.regSecret, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the job's registry secret after Cleanup: %v, want not found", err)
		}
	})

	// DOCKER_AUTH_CONFIG as a job variable; the registry Secret of a job
	// the manager will not resume goes with the sweep of its pod.
	t.Run("DOCKER_AUTH_CONFIG, swept", func(t *testing.T) {
		job := clusterJob(33)
		job.Image = api.Image{Name: ref}
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
		job.Variables = append(job.Variables, api.Variable{Key: "DOCKER_AUTH_CONFIG", Value: `{"auths": {"http://` + host + `": {"auth": "` + auth + `"}}}`})
		e := p.Create().(*Executor)
		tr := &executortest.Trace{}
		err := e.Prepare(t.Context(), executor.PrepareOptions{Job: job, Settings: s, Trace: tr})
		t.Cleanup(func() { e.Cleanup(context.Background()) })
		if err != nil {
			t.Fatalf("Prepare: %v\n%s", err, tr.String())
		}
		if want := "Authenticating with credentials from " + registryauth.FromVariable + " for " + host + "\n"; !strings.Contains(tr.String(), want) {
			t.Errorf("the job's log lacks %q:\n%s", want, tr.String())
		}
		removed, err := p.Sweep(t.Context(), s.SystemID, func(id int64) bool { return id != 33 })
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("secret %s/%s (job 33)", c.ns, e.regSecret)
		if !slices.Contains(removed, want) {
			t.Errorf("Sweep removed %q, want %q among them", removed, want)
		}
	})
}

// TestRegistrySecretLate: the kubelet pulls a pod's image before it can
// read the job's registry Secret (here: the Secret is made only once the
// kubelet has said so and its pull has failed, as when a busy kubelet's
// cache of it is not filled within its second). waitRunning does not
// fail the job on that pull: it says why it waits, and the pod runs
// after the kubelet's next pull, with the Secret. A secret the kubelet
// cannot read that is not the job's own fails the job at once, the
// kubelet's warning in its log. The pods are made here, as Prepare
// makes them; what decides is the executor's own wait, against the real
// kubelet's events.
func TestRegistrySecretLate(t *testing.T) {
	c := cluster(t)
	const user, password = "drover-ci", "s3cret-late-password"
	_, ref := privateRegistry(t, c, user, password)
	p, s := c.provider(t)
	cfg, err := p.o.Lookup(s)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := p.client(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pods := c.cs.CoreV1().Pods(c.ns)
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	start := func(t *testing.T, name, secret, own string) (*Executor, *executortest.Trace, chan error) {
		t.Helper()
		zero := int64(0)
		pod, err := pods.Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + suffix, Namespace: c.ns},
			Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: &zero,
				ImagePullSecrets:              []corev1.LocalObjectReference{{Name: secret}},
				// Always: the node has the image after the first pod.
				Containers: []corev1.Container{{Name: containerBuild, Image: ref, ImagePullPolicy: corev1.PullAlways, Command: []string{"sleep", "300"}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
		e := p.Create().(*Executor)
		tr := &executortest.Trace{}
		e.cfg, e.cl, e.trace, e.regSecret = cfg, cl, tr, own
		done := make(chan error, 1)
		go func() { done <- e.waitRunning(t.Context(), pod) }()
		return e, tr, done
	}
	events := func(t *testing.T, pod string) []corev1.Event {
		t.Helper()
		evs, err := c.cs.CoreV1().Events(c.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			t.Fatal(err)
		}
		return evs.Items
	}
	has := func(evs []corev1.Event, reason, text string) bool {
		return slices.ContainsFunc(evs, func(ev corev1.Event) bool {
			return ev.Reason == reason && strings.Contains(ev.Message, text)
		})
	}

	t.Run("the job's own secret, read late", func(t *testing.T) {
		secret := "late-reg-" + suffix
		_, tr, done := start(t, "late", secret, secret)
		// The kubelet's warning and its failed pull, then the wait
		// says why it goes on (the test's timeout bounds the waits).
		for {
			evs := events(t, "late-"+suffix)
			if has(evs, reasonSecretLate, secret) && has(evs, "Failed", "401 Unauthorized") && strings.Contains(tr.String(), "before it could read the job's registry secret "+secret) {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("waitRunning ended before the secret was there: %v\n%s", err, tr.String())
			case <-time.After(200 * time.Millisecond):
			}
		}
		sec, err := registrySecret(secret, c.ns, nil, []registryauth.Credentials{{Registry: registryauth.Host(ref), Username: user, Password: password}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.cs.CoreV1().Secrets(c.ns).Create(t.Context(), sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.cs.CoreV1().Secrets(c.ns).Delete(context.Background(), secret, metav1.DeleteOptions{}) })
		if err := <-done; err != nil {
			t.Fatalf("waitRunning = %v, want the pod running after the kubelet's next pull\n%s", err, tr.String())
		}
	})

	t.Run("a secret not the job's", func(t *testing.T) {
		secret := "missing-" + suffix
		_, tr, done := start(t, "missing", secret, "")
		err := <-done
		var be *executor.BuildError
		if !errors.As(err, &be) || be.Reason != api.ImagePullFailure {
			t.Fatalf("waitRunning = %v, want an image_pull_failure\n%s", err, tr.String())
		}
		if !strings.Contains(err.Error(), "401 Unauthorized") {
			t.Errorf("waitRunning = %v\nwant the registry's refusal", err)
		}
	})
}
