package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/helper"
	"github.com/drover-ci/drover/internal/shell"
)

// stageState is the running stage: run number N in container Container;
// its files are jobDir/<N>.{sh,log,exit,gone,claim,pid}.
type stageState struct {
	Name      executor.Stage `json:"name"`
	N         int            `json:"n"`
	Container string         `json:"container"`
	Started   time.Time      `json:"started"`
}

type stageFiles struct{ script, log, exit, gone, claim, pid string }

func filesOf(n int) stageFiles {
	base := fmt.Sprintf("%s/%03d", jobDir, n)
	return stageFiles{script: base + ".sh", log: base + ".log", exit: base + ".exit", gone: base + ".gone", claim: base + ".claim", pid: base + ".pid"}
}

// How often a follower whose stream broke (the API server, the network)
// starts again from the byte it reached before the stage counts as lost.
const followRetries = 5

// Run runs one stage script by the attach strategy: the script is stored
// in the job's emptyDir and started detached in the build container (the
// helper container for git and the cache and artifact stages), writing
// its output and exit code to files there; the helper follows the output
// file into the trace. When ctx is cancelled the stage's processes get
// SIGTERM, SIGKILL after the grace period, and Run returns ctx.Err()
// wrapped.
func (e *Executor) Run(ctx context.Context, cmd executor.Command) error {
	return e.run(ctx, cmd, 0, startFresh)
}

type runMode int

const (
	startFresh      runMode = iota // start it
	attachSaved                    // the dead manager started it: follow it
	attachIfStarted                // follow it if the dead manager started it, else start it
)

func (e *Executor) run(ctx context.Context, cmd executor.Command, from int64, mode runMode) error {
	e.mu.Lock()
	if e.cl == nil || e.shell == "" {
		e.mu.Unlock()
		return errNotPrepared
	}
	n := e.runs + 1
	ctr := e.stageContainer(cmd.Stage)
	if mode == attachSaved && e.resume != nil {
		ctr = e.resume.Container
	}
	e.mu.Unlock()
	if err := ctx.Err(); err != nil && mode == startFresh {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	f := filesOf(n)
	switch mode {
	case startFresh:
		if from != 0 {
			return fmt.Errorf("%s: output offset %d for a stage not started", cmd.Stage, from)
		}
		e.setRunning(cmd.Stage, n, ctr, 0)
		err := e.start(ctx, ctr, cmd.Script, f, false)
		if err != nil {
			e.setEnded()
			return fmt.Errorf("%s: %w", cmd.Stage, err)
		}
	case attachIfStarted:
		// The dead manager may have started this stage after its last
		// checkpoint: follow it if so, else claim it and start it here.
		e.setRunning(cmd.Stage, n, ctr, 0)
		_, _, notStarted, err := e.followOnce(ctx, f, 0, true, true, io.Discard)
		if err != nil {
			e.setEnded()
			return fmt.Errorf("%s: %w", cmd.Stage, err)
		}
		if notStarted {
			e.logger.Info("the resumed stage had not started; running it", "stage", cmd.Stage)
			if err := e.start(ctx, ctr, cmd.Script, f, true); err != nil {
				e.setEnded()
				return fmt.Errorf("%s: %w", cmd.Stage, err)
			}
		}
	}
	return e.followToEnd(ctx, cmd.Stage, n, ctr, f, from)
}

// stageContainer is the container a stage runs in (e.mu held): git and
// the transfers in the helper, which has drover's helper and git.
func (e *Executor) stageContainer(stage executor.Stage) string {
	switch stage {
	case executor.StageRestoreCache, executor.StageDownloadArtifacts,
		executor.StageArchiveCache, executor.StageArchiveCacheFail,
		executor.StageUploadArtifacts, executor.StageUploadArtifactsFail:
		return containerHelper
	case executor.StageGetSources:
		job := e.job
		if !shell.SkipsSources(shell.Info{Job: job, Variables: job.Variables, ProjectDir: e.paths.ProjectDir,
			LookupEnv: func(string) (string, bool) { return "", false }}) {
			return containerHelper
		}
	}
	return containerBuild
}

// start stores the stage's script in the job's emptyDir and starts it in
// the background of container ctr, so that it outlives this exec (and the
// manager). Unless claimed (by a follower that found the stage not
// started), the stage first claims its run: a stage starts at most once,
// even when a dead manager and its successor both try.
func (e *Executor) start(ctx context.Context, ctr, script string, f stageFiles, claimed bool) error {
	e.mu.Lock()
	pd, shellPath := quote(e.paths.ProjectDir), e.shellPath
	e.mu.Unlock()
	if ctr == containerHelper {
		shellPath = "sh"
	}
	// The pid file is written whole (as the exit file): a kill that reads
	// it half-written would take it for a bad pid and stop nothing.
	wrapper := fmt.Sprintf(`echo $$ > %[1]s.tmp && mv %[1]s.tmp %[1]s
if { [ -d %[2]s ] || mkdir -p %[2]s; } && cd %[2]s; then
	%[3]s %[4]s </dev/null
	rc=$?
else
	echo "cannot enter the project directory "%[2]s
	rc=1
fi
echo $rc > %[5]s.tmp && mv %[5]s.tmp %[5]s
`, quote(f.pid), pd, quote(shellPath), quote(f.script), quote(f.exit))
	claim := fmt.Sprintf("mkdir %s 2>/dev/null || exit 0\n", quote(f.claim))
	if claimed {
		claim = ""
	}
	starter := claim + fmt.Sprintf(`cat > %[1]s.tmp && mv %[1]s.tmp %[1]s || exit 1
: >> %[2]s
sh -c %[3]s </dev/null >> %[2]s 2>&1 &
`, quote(f.script), quote(f.log), quote(wrapper))
	var errb bytes.Buffer
	code, err := e.exec(ctx, ctr, []string{"sh", "-c", starter}, strings.NewReader(script), io.Discard, &errb)
	if err != nil {
		return fmt.Errorf("start the stage in container %s: %w", ctr, err)
	}
	if code != 0 {
		return fmt.Errorf("start the stage in container %s: exit code %d: %s", ctr, code, strings.TrimSpace(errb.String()))
	}
	return nil
}

// followToEnd follows a detached stage from byte from to its end and
// returns its result. A stream that breaks is followed again from the
// byte it reached, a few times; a pod or container that is gone makes the
// stage vanished (runner_system_failure).
func (e *Executor) followToEnd(ctx context.Context, stage executor.Stage, n int, ctr string, f stageFiles, from int64) error {
	e.setRunning(stage, n, ctr, from)
	defer e.setEnded()
	// Cancelling ctx stops the stage's processes; the follower goes on
	// until the stage's wrapper wrote their exit code.
	fctx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
			return
		}
		e.kill(f)
		// The follower ends when the wrapper writes the exit code; if the
		// pod cannot say so any more, it is abandoned.
		select {
		case <-stopped:
		case <-time.After(e.GracePeriod + 30*time.Second):
			stopFollow()
		}
	}()
	// Watch the stage's container: when it ends (OOM, the node) the stage
	// can write no more, and the follower is told so.
	go e.watchContainer(fctx, ctr, f)
	var lastErr error
	for attempt := 0; ; attempt++ {
		off := e.out.off.Load()
		code, vanished, _, err := e.followOnce(fctx, f, off, false, false, e.outputWriter())
		switch {
		case err == nil && vanished:
			return fmt.Errorf("%s: %w (%s)", stage, executor.ErrStageVanished, e.containerGone(context.WithoutCancel(ctx), ctr))
		case err == nil:
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w", stage, ctx.Err())
			}
			if code != 0 {
				return &executor.BuildError{ExitCode: code}
			}
			return nil
		}
		if ctx.Err() != nil && fctx.Err() != nil {
			return fmt.Errorf("%s: %w", stage, ctx.Err())
		}
		if why := e.containerGone(fctx, ctr); why != "" {
			return fmt.Errorf("%s: %w (%s)", stage, executor.ErrStageVanished, why)
		}
		lastErr = err
		if attempt == followRetries {
			break
		}
		e.logger.Warn("following the stage's output failed; following again", "stage", stage, "from", e.out.off.Load(), "err", err)
		select {
		case <-time.After(time.Duration(attempt+1) * time.Second):
		case <-fctx.Done():
		}
	}
	return fmt.Errorf("%s: the stage's output could not be followed: %w: %w", stage, lastErr, executor.ErrStageVanished)
}

// followOnce runs the helper's follower once: it copies the stage's output
// from byte from to w until the stage ends, and returns its exit code, or
// that it vanished, or (with claim) that it never started and is now
// claimed, or (with probe) nothing once it started.
func (e *Executor) followOnce(ctx context.Context, f stageFiles, from int64, claim, probe bool, w io.Writer) (code int, vanished, notStarted bool, err error) {
	args := []string{"drover", "helper", "follow", "--log", f.log, "--exit", f.exit, "--gone", f.gone, "--from", strconv.FormatInt(from, 10)}
	if claim {
		args = append(args, "--claim", f.claim)
	}
	if probe {
		args = append(args, "--probe")
	}
	var status bytes.Buffer
	c, err := e.exec(ctx, containerHelper, args, nil, w, &status)
	if err != nil {
		return 0, false, false, fmt.Errorf("follow the stage's output: %w", err)
	}
	code, vanished, notStarted, perr := helper.ParseStatus(status.String())
	if perr != nil {
		return 0, false, false, fmt.Errorf("follow the stage's output (helper exit %d): %w", c, perr)
	}
	return code, vanished, notStarted, nil
}

// kill stops the running stage's processes from the helper container,
// which shares the pod's process namespace.
func (e *Executor) kill(f stageFiles) {
	ctx, cancel := context.WithTimeout(context.Background(), e.GracePeriod+30*time.Second)
	defer cancel()
	var out syncBuffer
	args := []string{"drover", "helper", "kill", "--pid-file", f.pid, "--grace", e.GracePeriod.String()}
	code, err := e.exec(ctx, containerHelper, args, nil, &out, &out)
	if err != nil || code != 0 {
		e.logger.Warn("cannot stop the stage's processes", "exit", code, "err", err, "output", strings.TrimSpace(out.String()))
		return
	}
	e.logger.Info("stopped the stage", "output", strings.TrimSpace(out.String()))
}

// watchContainer marks the stage gone (for its follower) when the
// container it runs in ends.
func (e *Executor) watchContainer(ctx context.Context, ctr string, f stageFiles) {
	e.mu.Lock()
	cs, ns, pod := e.cl.cs, e.ns, e.pod
	e.mu.Unlock()
	for ctx.Err() == nil {
		w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.SingleObject(metav1.ObjectMeta{Name: pod}))
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
				continue
			}
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !containerEnded(p, ctr) {
				continue
			}
			w.Stop()
			if ctr != containerHelper {
				var out syncBuffer
				if _, err := e.exec(ctx, containerHelper, []string{"sh", "-c", "touch " + quote(f.gone)}, nil, &out, &out); err != nil && ctx.Err() == nil {
					e.logger.Warn("cannot mark a stopped stage", "err", err)
				}
			}
			return
		}
		w.Stop()
	}
}

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

// startOutput marks stage's output as flowing into the trace from byte
// from, and returns the writer it goes through.
func (e *Executor) outputWriter() io.Writer { return (*outputWriter)(e) }

type outputWriter Executor

func (w *outputWriter) Write(p []byte) (int, error) {
	e := (*Executor)(w)
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	t := e.trace
	e.mu.Unlock()
	_, _ = t.Write(p)
	e.out.off.Add(int64(len(p)))
	return len(p), nil
}

func (e *Executor) setRunning(stage executor.Stage, n int, ctr string, from int64) {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = n
	e.running = &stageState{Name: stage, N: n, Container: ctr, Started: time.Now().UTC()}
	e.out.stage = stage
	e.out.off.Store(from)
}

func (e *Executor) setEnded() {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running = nil
	e.out.stage = ""
	e.out.off.Store(0)
}

// syncBuffer collects an exec's stdout and stderr together: the two
// streams are copied by goroutines of their own.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// quote returns s as one single-quoted sh word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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
