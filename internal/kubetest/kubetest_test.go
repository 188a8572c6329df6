package kubetest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/kubetest"
)

// busybox pushes the busybox test image (built first if the engine lacks
// it) to the cluster's registry and returns the reference the node pulls.
func busybox(t *testing.T, env *kubetest.Env) string {
	t.Helper()
	kubetest.EngineWithTestImages(t)
	return env.PushImage(t, dockerimage.TestImageBusybox)
}

// waitPod polls the pod until done says so, failing the test with the
// pod's last status after timeout.
func waitPod(t *testing.T, cs kubernetes.Interface, ns, name string, timeout time.Duration, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var last *corev1.Pod
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			if done(p) {
				return p
			}
		}
		select {
		case <-ctx.Done():
			status, _ := json.MarshalIndent(last, "", "  ")
			t.Fatalf("pod %s/%s: not there after %v (last error %v), last seen:\n%s", ns, name, timeout, err, status)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func allReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return true
}

// executor returns the exec executor of one transport: "websocket",
// "spdy", or "fallback" (WebSocket, falling back to SPDY when the
// apiserver refuses the upgrade, as kubectl does).
func executor(t *testing.T, cfg *rest.Config, req *rest.Request, transport string) remotecommand.Executor {
	t.Helper()
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		t.Fatalf("NewWebSocketExecutor: %v", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		t.Fatalf("NewSPDYExecutor: %v", err)
	}
	switch transport {
	case "websocket":
		return ws
	case "spdy":
		return spdy
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		t.Fatalf("NewFallbackExecutor: %v", err)
	}
	return ex
}

type execResult struct {
	stdout, stderr string
	err            error
}

func execIn(t *testing.T, env *kubetest.Env, cs kubernetes.Interface, ns, pod, container, transport, stdin string, cmd ...string) execResult {
	t.Helper()
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   cmd,
			Stdin:     stdin != "",
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}
	if stdin != "" {
		opts.Stdin = strings.NewReader(stdin)
	}
	err := executor(t, env.RESTConfig(), req, transport).StreamWithContext(ctx, opts)
	return execResult{stdout.String(), stderr.String(), err}
}

// TestPodExecSharedEmptyDir runs a pod of two containers of the busybox
// test image sharing an emptyDir, and execs into both over each transport:
// stdin, stdout, stderr and the exit code come through, and a file one
// container writes the other reads.
func TestPodExecSharedEmptyDir(t *testing.T) {
	t.Parallel()
	env := kubetest.Cluster(t)
	cs := env.Client(t)
	img := busybox(t, env)
	ns := kubetest.Namespace(t, cs)

	mounts := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "two"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Volumes:                       []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{
				{Name: "a", Image: img, Command: []string{"sh", "-c", "echo from-a >/shared/a.txt && exec sleep 3600"}, VolumeMounts: mounts},
				{Name: "b", Image: img, Command: []string{"sleep", "3600"}, VolumeMounts: mounts},
			},
		},
	}
	start := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	waitPod(t, cs, ns, pod.Name, 2*time.Minute, allReady)
	t.Logf("pod of two containers running in %v", time.Since(start).Round(time.Millisecond))

	for _, transport := range []string{"websocket", "spdy", "fallback"} {
		t.Run(transport, func(t *testing.T) {
			// a writes a.txt as it starts: wait for it (up to 10 s).
			got := execIn(t, env, cs, ns, "two", "b", transport, "hi\n", "sh", "-c", `
				i=0; while [ ! -f /shared/a.txt ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
				cat /shared/a.txt
				read line; echo "got $line"
				echo to-stderr >&2
				echo from-b-$0 >/shared/b-$0.txt
				exit 3`, transport)
			var exitErr utilexec.ExitError
			if !errors.As(got.err, &exitErr) || exitErr.ExitStatus() != 3 {
				t.Errorf("exec in b: error %v, want exit status 3", got.err)
			}
			if want := "from-a\ngot hi\n"; got.stdout != want {
				t.Errorf("exec in b: stdout %q, want %q", got.stdout, want)
			}
			if want := "to-stderr\n"; got.stderr != want {
				t.Errorf("exec in b: stderr %q, want %q", got.stderr, want)
			}

			got = execIn(t, env, cs, ns, "two", "a", transport, "", "cat", "/shared/b-"+transport+".txt")
			if got.err != nil {
				t.Fatalf("exec in a: %v (stderr %q)", got.err, got.stderr)
			}
			if want := "from-b-" + transport + "\n"; got.stdout != want {
				t.Errorf("exec in a: stdout %q, want %q", got.stdout, want)
			}
		})
	}
}

// TestImagePullError: a pod whose image the registry does not have ends up
// waiting with ErrImagePull or ImagePullBackOff.
func TestImagePullError(t *testing.T) {
	t.Parallel()
	env := kubetest.Cluster(t)
	cs := env.Client(t)
	ns := kubetest.Namespace(t, cs)
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "missing-image"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "c", Image: env.Registry + "/drover-kubetest-does-not-exist:1"}},
		},
	}
	start := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	var reason string
	waitPod(t, cs, ns, pod.Name, time.Minute, func(p *corev1.Pod) bool {
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				reason = w.Reason + ": " + w.Message
				return true
			}
		}
		return false
	})
	t.Logf("after %v: %s", time.Since(start).Round(time.Millisecond), reason)
}

// TestInClusterAPI: a pod gets a ServiceAccount token that the apiserver
// takes, with the CA, and reaches the apiserver at the kubernetes
// service's address (KUBERNETES_SERVICE_HOST; no kube-proxy: up.sh's DNAT
// rule). The busybox image has no working TLS client, so the pod connects
// and the test presents the pod's token.
func TestInClusterAPI(t *testing.T) {
	t.Parallel()
	env := kubetest.Cluster(t)
	cs := env.Client(t)
	img := busybox(t, env)
	ns := kubetest.Namespace(t, cs)
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "in-cluster"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "c", Image: img, Command: []string{"sleep", "3600"}}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	waitPod(t, cs, ns, pod.Name, 2*time.Minute, allReady)

	got := execIn(t, env, cs, ns, pod.Name, "c", "fallback", "", "sh", "-c",
		`echo | nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" >/dev/null && echo "reachable $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"`)
	if got.err != nil || !strings.HasPrefix(got.stdout, "reachable ") {
		t.Errorf("connect to the kubernetes service from the pod: %v, stdout %q, stderr %q", got.err, got.stdout, got.stderr)
	}
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	ca := execIn(t, env, cs, ns, pod.Name, "c", "fallback", "", "cat", sa+"/ca.crt")
	if ca.err != nil || !strings.Contains(ca.stdout, "BEGIN CERTIFICATE") {
		t.Errorf("cat %s/ca.crt: %v, stdout %q", sa, ca.err, ca.stdout)
	}
	token := execIn(t, env, cs, ns, pod.Name, "c", "fallback", "", "cat", sa+"/token")
	if token.err != nil || token.stdout == "" {
		t.Fatalf("cat %s/token: %v, stdout %q", sa, token.err, token.stdout)
	}

	cfg := env.RESTConfig()
	cfg.BearerToken = token.stdout
	podClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := podClient.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the pod's token: %v", err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:"+ns+":default"; got != want {
		t.Errorf("the pod's token is %q, want %q", got, want)
	}
}
