package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
	"github.com/drover-ci/drover/internal/kubetest"
)

// droverBin is drover built for the helper image of these tests.
var droverBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "drover-kube-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	droverBin = filepath.Join(dir, "drover")
	build := exec.Command("go", "build", "-o", droverBin, "../../../cmd/drover")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building drover:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testCluster is the test cluster with a namespace of the test's own and
// the images pushed.
type testCluster struct {
	env             *kubetest.Env
	cs              k8s.Interface
	ns              string
	busybox, helper string
}

var (
	imagesOnce sync.Once
	images     [2]string
	imagesErr  error
)

func cluster(t testing.TB) *testCluster {
	t.Helper()
	env := kubetest.Cluster(t)
	imagesOnce.Do(func() {
		cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
		if err != nil {
			imagesErr = err
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if imagesErr = dockerimage.EnsureTestImages(ctx, cli); imagesErr != nil {
			return
		}
		tag, _, err := dockerimage.EnsureHelper(ctx, cli, droverBin, "")
		if err != nil {
			imagesErr = err
			return
		}
		images[0] = env.PushImage(t, dockerimage.TestImageBusybox)
		images[1] = env.PushImage(t, tag)
	})
	if imagesErr != nil {
		t.Fatalf("test images: %v", imagesErr)
	}
	cs := env.Client(t)
	return &testCluster{env: env, cs: cs, ns: kubetest.Namespace(t, cs), busybox: images[0], helper: images[1]}
}

// provider returns a provider whose one runner uses the test's namespace.
func (c *testCluster) provider(t testing.TB) (*Provider, executor.Settings) {
	t.Helper()
	cfg := &Config{Host: c.env.Host, BearerToken: c.env.Token, CAFile: c.env.CAFile, Namespace: c.ns,
		Image: c.busybox, HelperImage: c.helper, PollInterval: time.Second, PollTimeout: 2 * time.Minute}
	g := int64(1)
	cfg.CleanupGrace = &g
	p, err := NewProvider(Options{
		Lookup:      func(executor.Settings) (*Config, error) { return cfg, nil },
		Configs:     func() []*Config { return []*Config{cfg} },
		GracePeriod: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Wait(context.Background()) })
	return p, executor.Settings{RunnerName: "t", ShortToken: "tok123456", SystemID: "s_test", Resumable: true}
}

func clusterJob(id int64) *api.JobResponse {
	return &api.JobResponse{ID: id, Token: "job-token",
		JobInfo:   api.JobInfo{Name: "t", ProjectID: 1},
		Variables: api.Variables{{Key: "CI_PROJECT_PATH", Value: "g/p"}, {Key: "GREETING", Value: "hello"}}}
}

// prepared returns an executor prepared for a job, with its trace.
func (c *testCluster) prepared(t *testing.T, p *Provider, s executor.Settings, id int64) (*Executor, *executortest.Trace) {
	t.Helper()
	e := p.Create().(*Executor)
	tr := &executortest.Trace{}
	if err := e.Prepare(t.Context(), executor.PrepareOptions{Job: clusterJob(id), Settings: s, Trace: tr}); err != nil {
		t.Fatalf("Prepare: %v\n%s", err, tr.String())
	}
	t.Cleanup(func() { e.Cleanup(context.Background()) })
	return e, tr
}

// TestStageExitCodesAndEnvironment: stages run in the pod with the job's
// variables from its Secret, and their exit codes come back.
func TestStageExitCodesAndEnvironment(t *testing.T) {
	c := cluster(t)
	p, s := c.provider(t)
	e, tr := c.prepared(t, p, s, 1)
	if err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "echo greeting=$GREETING; pwd"}); err != nil {
		t.Fatalf("Run: %v\n%s", err, tr.String())
	}
	err := e.Run(t.Context(), executor.Command{Stage: "step_script", Script: "echo failing; exit 7"})
	var be *executor.BuildError
	if !errors.As(err, &be) || be.ExitCode != 7 {
		t.Fatalf("Run of exit 7 = %v, want a BuildError with exit code 7", err)
	}
	out := tr.String()
	for _, want := range []string{"greeting=hello\n", e.Paths().ProjectDir + "\n", "failing\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
}

// TestResumeFromOffset: a second executor restored from a checkpoint of
// the first, taken mid-stage, follows the same stage from the checkpoint's
// offset: the first's trace up to the offset and the second's trace make
// the stage's whole output, with nothing lost or doubled.
func TestResumeFromOffset(t *testing.T) {
	c := cluster(t)
	p, s := c.provider(t)
	e, tr := c.prepared(t, p, s, 2)
	const n = 150
	cmd := executor.Command{Stage: "step_script", Script: fmt.Sprintf(`for i in $(seq 1 %d); do echo "line $i"; sleep 0.02; done`, n)}
	firstDone := make(chan error, 1)
	go func() { firstDone <- e.Run(context.WithoutCancel(t.Context()), cmd) }()
	// Wait for some output, then checkpoint.
	for !strings.Contains(tr.String(), "line 20\n") {
		select {
		case err := <-firstDone:
			t.Fatalf("the stage ended before the checkpoint: %v\n%s", err, tr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	var state json.RawMessage
	var stage executor.Stage
	var off int64
	var head string
	if err := e.OutputCheckpoint(func(st json.RawMessage, sg executor.Stage, o int64) {
		state, stage, off = st, sg, o
		head = tr.String()
	}); err != nil {
		t.Fatal(err)
	}
	if stage != cmd.Stage || off <= 0 {
		t.Fatalf("checkpoint = stage %q offset %d, want %s and a positive offset", stage, off, cmd.Stage)
	}
	second := p.Create().(*Executor)
	tr2 := &executortest.Trace{}
	if err := second.Restore(t.Context(), executor.PrepareOptions{Job: clusterJob(2), Settings: s, Trace: tr2}, state); err != nil {
		t.Fatal(err)
	}
	if err := second.Resume(t.Context(), cmd, off); err != nil {
		t.Fatalf("Resume: %v\n%s", err, tr2.String())
	}
	if err := <-firstDone; err != nil {
		t.Fatalf("first Run: %v", err)
	}
	// The stage's output starts where the executor's own lines end.
	i := strings.Index(head, "line 1\n")
	if i < 0 {
		t.Fatalf("no stage output in the first trace:\n%s", head)
	}
	got := head[i:] + tr2.String()
	var want strings.Builder
	for k := 1; k <= n; k++ {
		fmt.Fprintf(&want, "line %d\n", k)
	}
	if got != want.String() {
		t.Errorf("first trace up to the checkpoint + resumed trace =\n%s\nwant lines 1..%d exactly once", got, n)
	}
	if full := tr.String(); !strings.HasSuffix(full, want.String()) {
		t.Errorf("the first executor's own trace is not the whole output:\n%s", full)
	}
}

// TestCancelStopsStage: cancelling Run stops the stage's processes (an
// after_script then runs in the same pod), and Cleanup deletes the pod and
// its secret.
func TestCancelStopsStage(t *testing.T) {
	c := cluster(t)
	p, s := c.provider(t)
	e, tr := c.prepared(t, p, s, 3)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, executor.Command{Stage: "step_script", Script: "echo started; trap '' TERM; sleep 300 & sleep 301; echo not-reached"})
	}()
	for !strings.Contains(tr.String(), "started\n") {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Run = %v, want context.Canceled", err)
	}
	var out executortest.Trace
	if code, err := e.exec(t.Context(), containerBuild, []string{"sh", "-c", "ps -o args | grep -c '[s]leep 30' || true"}, nil, &out, &out); err != nil || code != 0 {
		t.Fatalf("ps: %d %v", code, err)
	}
	if n := strings.TrimSpace(out.String()); n != "0" {
		t.Errorf("%s sleep processes of the cancelled stage still run", n)
	}
	if err := e.Run(t.Context(), executor.Command{Stage: executor.StageAfterScript, Script: "echo after-ran"}); err != nil {
		t.Fatalf("after_script: %v", err)
	}
	if strings.Contains(tr.String(), "not-reached") || !strings.Contains(tr.String(), "after-ran") {
		t.Errorf("trace:\n%s", tr.String())
	}
	pod, secret := e.pod, e.secret
	e.Cleanup(context.Background())
	<-e.Cleaned()
	waitDeleted(t, c, pod, secret)
}

// waitDeleted waits until the pod and secret are gone.
func waitDeleted(t *testing.T, c *testCluster, pod, secret string) {
	t.Helper()
	w, err := c.cs.CoreV1().Pods(c.ns).Watch(t.Context(), metav1.SingleObject(metav1.ObjectMeta{Name: pod}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		if _, err := c.cs.CoreV1().Pods(c.ns).Get(t.Context(), pod, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		select {
		case <-w.ResultChan():
		case <-time.After(time.Second):
		case <-t.Context().Done():
			t.Fatal("pod not deleted")
		}
	}
	if _, err := c.cs.CoreV1().Secrets(c.ns).Get(t.Context(), secret, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("secret %s: %v, want not found", secret, err)
	}
}

// TestSweep: the pods and secrets of this manager's jobs that it will not
// resume are deleted; those it keeps stay.
func TestSweep(t *testing.T) {
	c := cluster(t)
	p, s := c.provider(t)
	kept, _ := c.prepared(t, p, s, 41)
	gone, _ := c.prepared(t, p, s, 42)
	removed, err := p.Sweep(t.Context(), s.SystemID, func(id int64) bool { return id == 41 })
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 || !strings.Contains(strings.Join(removed, " "), gone.pod) {
		t.Errorf("Sweep removed %q, want the pod and secret of job 42 (%s)", removed, gone.pod)
	}
	if _, err := c.cs.CoreV1().Pods(c.ns).Get(t.Context(), kept.pod, metav1.GetOptions{}); err != nil {
		t.Errorf("the kept job's pod: %v", err)
	}
	waitDeleted(t, c, gone.pod, gone.secret)
}

// firstLine records when the first byte of a stage's output arrives.
type firstLine struct {
	mu sync.Mutex
	at time.Time
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() {
		f.at = time.Now()
	}
	return len(p), nil
}

// BenchmarkPodStartToFirstLine measures, per job, the time from the
// start of Prepare (the job's Secret and pod created) to the first byte
// of its first script stage's output: pod scheduling, the containers'
// start (images on the node), the shell's detection and the stage's
// start and follower.
func BenchmarkPodStartToFirstLine(b *testing.B) {
	c := cluster(b)
	p, s := c.provider(b)
	var lat []time.Duration
	id := int64(1000)
	for b.Loop() {
		id++
		e := p.Create().(*Executor)
		fl := &firstLine{}
		t0 := time.Now()
		if err := e.Prepare(b.Context(), executor.PrepareOptions{Job: clusterJob(id), Settings: s, Trace: io.Discard}); err != nil {
			b.Fatal(err)
		}
		e.mu.Lock()
		e.trace = fl
		e.mu.Unlock()
		if err := e.Run(b.Context(), executor.Command{Stage: "step_script", Script: "echo first"}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, fl.at.Sub(t0))
		b.StopTimer()
		e.Cleanup(context.Background())
		<-e.Cleaned()
		b.StartTimer()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
}
