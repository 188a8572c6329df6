package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/detached"
	"github.com/drover-ci/drover/internal/shell"
)

// How often a follower whose stream broke (the API server, the network)
// starts again from the byte it reached before the stage counts as lost.
const followRetries = 5

// Run runs one stage script by the attach strategy (package detached):
// the script is stored in the job's emptyDir and started detached in the
// build container (the helper container for git and the cache and
// artifact stages), writing its output and exit code to files there; the
// helper follows the output file into the trace. When ctx is cancelled
// the stage's processes get SIGTERM, SIGKILL after the grace period, and
// Run returns ctx.Err() wrapped.
func (e *Executor) Run(ctx context.Context, cmd executor.Command) error {
	e.mu.Lock()
	if e.cl == nil || e.shell == "" {
		e.mu.Unlock()
		return errNotPrepared
	}
	ctr := e.stageContainer(cmd.Stage)
	e.mu.Unlock()
	return e.run(ctx, cmd, ctr, detached.StartFresh, 0)
}

// run runs (or re-attaches to) a stage in container ctr as mode says.
func (e *Executor) run(ctx context.Context, cmd executor.Command, ctr string, mode detached.Mode, from int64) error {
	e.mu.Lock()
	det, pd, shellPath := e.det, e.paths.ProjectDir, e.shellPath
	e.mu.Unlock()
	if ctr == containerHelper {
		shellPath = "sh"
	}
	s := detached.Stage{Name: cmd.Stage, Script: cmd.Script, Where: ctr, Shell: shellPath, Dir: pd}
	return det.Run(ctx, &podTarget{e: e, ctr: ctr}, s, mode, from)
}

// stageContainer is the container a stage runs in (e.mu held): git and
// the transfers in the helper, which has drover's helper and git.
func (e *Executor) stageContainer(stage executor.Stage) string {
	switch stage {
	case executor.StageRestoreCache, executor.StageDownloadArtifacts,
		executor.StageArchiveCache, executor.StageArchiveCacheFail,
		executor.StageUploadArtifacts, executor.StageUploadArtifactsFail:
		return containerHelper
	case executor.StageGetSources, executor.StageClearWorktree:
		job := e.job
		if !shell.SkipsSources(shell.Info{Job: job, Variables: job.Variables, ProjectDir: e.paths.ProjectDir,
			LookupEnv: func(string) (string, bool) { return "", false }}) {
			return containerHelper
		}
	}
	return containerBuild
}

// podTarget is where a stage runs (detached.Target): container ctr of the
// job's pod. The stage's files are in the pod's emptyDir, which the helper
// container, where drover's helper follows and stops stages, shares, as
// it shares the pod's process namespace.
type podTarget struct {
	e   *Executor
	ctr string
}

var (
	_ detached.WriteStarter = (*podTarget)(nil)
	_ detached.Watcher      = (*podTarget)(nil)
	_ detached.Explainer    = (*podTarget)(nil)
)

// WriteFile stores data as name, by an exec in the stage's container.
func (t *podTarget) WriteFile(ctx context.Context, name string, data []byte) error {
	return t.sh(ctx, "store a file", `cat > "$1.tmp.$$" && mv -f "$1.tmp.$$" "$1"`, data, name)
}

// Start runs the script in the background of the stage's container, so
// that it outlives the exec (and the manager).
func (t *podTarget) Start(ctx context.Context, script string) error {
	return t.sh(ctx, "start the stage", `sh -c "$1" </dev/null >/dev/null 2>&1 &`, nil, script)
}

// WriteStart stores the script and starts the wrapper by one exec (every
// exec is a round trip through the API server), once all of the script
// arrived (detached.StoreStart).
func (t *podTarget) WriteStart(ctx context.Context, name string, data []byte, script string) error {
	return t.sh(ctx, "start the stage", detached.StoreStart(`"$1"`, len(data), `sh -c "$2" </dev/null >/dev/null 2>&1 &`), data, name, script)
}

// sh runs `sh -c script args...` in the stage's container with data on
// its stdin (none if nil).
func (t *podTarget) sh(ctx context.Context, what, script string, data []byte, args ...string) error {
	var stdin io.Reader
	if data != nil {
		stdin = bytes.NewReader(data)
	}
	var errb bytes.Buffer
	code, err := t.e.exec(ctx, t.ctr, append([]string{"sh", "-c", script, "sh"}, args...), stdin, io.Discard, &errb)
	if err != nil {
		return fmt.Errorf("%s in container %s: %w", what, t.ctr, err)
	}
	if code != 0 {
		return fmt.Errorf("%s in container %s: exit code %d: %s", what, t.ctr, code, strings.TrimSpace(errb.String()))
	}
	return nil
}

// Exec runs argv in the helper container.
func (t *podTarget) Exec(ctx context.Context, argv []string, stdout, stderr io.Writer) (int, error) {
	return t.e.exec(ctx, containerHelper, argv, nil, stdout, stderr)
}

// Stop stops the stage's processes from the helper container, which
// shares the pod's process namespace (drover helper kill).
func (t *podTarget) Stop(ctx context.Context, f detached.Files) error {
	// One writer each: read once the command ended.
	var out, errb bytes.Buffer
	code, err := t.Exec(ctx, helperTool().Stop(f, t.e.GracePeriod), &out, &errb)
	switch {
	case err != nil:
		return err
	case code != 0:
		return fmt.Errorf("exit code %d: %s", code, strings.TrimSpace(errb.String()))
	}
	t.e.logger.Info("stopped the stage", "output", strings.TrimSpace(out.String()))
	return nil
}

// WaitStopped waits for the stage's container to end (OOM, the node):
// the stage can write no more. A stage in the helper container has no
// one to tell: its follower ends with it.
func (t *podTarget) WaitStopped(ctx context.Context) bool {
	if t.ctr == containerHelper {
		<-ctx.Done()
		return false
	}
	e := t.e
	e.mu.Lock()
	cs, ns, pod := e.cl.cs, e.ns, e.pod
	e.mu.Unlock()
	for ctx.Err() == nil {
		w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.SingleObject(metav1.ObjectMeta{Name: pod}))
		if err != nil {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(2 * time.Second):
				continue
			}
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && containerEnded(p, t.ctr) {
				w.Stop()
				return true
			}
		}
		w.Stop()
	}
	return false
}

// Gone explains a pod or stage container that is gone.
func (t *podTarget) Gone(ctx context.Context) string { return t.e.containerGone(ctx, t.ctr) }

func containerEnded(p *corev1.Pod, ctr string) bool {
	if p.DeletionTimestamp != nil && ctr == containerHelper {
		return false
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == ctr && st.State.Terminated != nil {
			return true
		}
	}
	return false
}

// containerGone explains a pod or container that is gone: "" while the
// container runs.
func (e *Executor) containerGone(ctx context.Context, ctr string) string {
	e.mu.Lock()
	cs, ns, pod := e.cl.cs, e.ns, e.pod
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the job's pod %s/%s was deleted", ns, pod)
	case err != nil:
		return ""
	case p.DeletionTimestamp != nil:
		return fmt.Sprintf("the job's pod %s/%s is being deleted", ns, pod)
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == ctr && st.State.Terminated != nil {
			t := st.State.Terminated
			return fmt.Sprintf("container %q exited with code %d (%s %s)", ctr, t.ExitCode, t.Reason, t.Message)
		}
	}
	return ""
}

// exec runs cmd in a container of the job's pod and copies its output; it
// returns the command's exit code. The stream is a WebSocket, or SPDY when
// the API server does not upgrade to WebSocket.
func (e *Executor) exec(ctx context.Context, ctr string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	e.mu.Lock()
	cl, ns, pod := e.cl, e.ns, e.pod
	e.mu.Unlock()
	return podExec(ctx, cl, ns, pod, ctr, cmd, stdin, stdout, stderr)
}

func podExec(ctx context.Context, cl *client, ns, pod, ctr string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	req := cl.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: ctr, Command: cmd, Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cl.cfg, "GET", req.URL().String())
	if err != nil {
		return -1, fmt.Errorf("exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(cl.cfg, "POST", req.URL())
	if err != nil {
		return -1, fmt.Errorf("exec: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, fmt.Errorf("exec: %w", err)
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	var ee utilexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitStatus(), nil
	}
	if err != nil {
		return -1, fmt.Errorf("exec in %s/%s container %s: %w", ns, pod, ctr, err)
	}
	return 0, nil
}

// OpenProjectFile streams a file of the project directory out of the
// helper container: no stage script runs (executor.FileOpener).
func (e *Executor) OpenProjectFile(ctx context.Context, name string) (io.ReadCloser, error) {
	e.mu.Lock()
	cl, pd := e.cl, e.paths.ProjectDir
	e.mu.Unlock()
	if cl == nil {
		return nil, errNotPrepared
	}
	p := path.Join(pd, name)
	var errb bytes.Buffer
	code, err := e.exec(ctx, containerHelper, []string{"sh", "-c", `[ -f "$1" ] || exit 3`, "-", p}, nil, io.Discard, &errb)
	if err != nil {
		return nil, fmt.Errorf("read %s in the job's pod: %w", name, err)
	}
	if code == 3 {
		return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	pr, pw := io.Pipe()
	go func() {
		var errb bytes.Buffer
		code, err := e.exec(ctx, containerHelper, []string{"cat", "--", p}, nil, pw, &errb)
		if err == nil && code != 0 {
			err = fmt.Errorf("cat %s: exit code %d: %s", name, code, strings.TrimSpace(errb.String()))
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}
