package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/helper"
	"github.com/drover-ci/drover/internal/shell"
)

// helperCommand runs drover's helper in the helper container (the image
// has drover as /usr/bin/drover).
const helperCommand = "drover helper"

// How long a stopped stage's output stream may take to end after its
// container was stopped, before it is abandoned.
const drainTimeout = 10 * time.Second

// stageState is the running stage of a resumable job: run number N in
// container Container; its files are jobDir/<N>.{sh,log,exit,gone,claim}.
type stageState struct {
	Name      executor.Stage `json:"name"`
	N         int            `json:"n"`
	Container string         `json:"container"`
	Started   time.Time      `json:"started"`
}

// stageFiles are the files of run n in the job's volume.
type stageFiles struct{ script, log, exit, gone, claim string }

func filesOf(n int) stageFiles {
	base := fmt.Sprintf("%s/%03d", jobDir, n)
	return stageFiles{script: base + ".sh", log: base + ".log", exit: base + ".exit", gone: base + ".gone", claim: base + ".claim"}
}

// Run runs one stage script by exec in the job's container: get_sources
// in the helper container (git), every other stage in the build
// container, which is started anew when a cancel or timeout stopped the
// previous one. Its output goes to the trace. A non-zero exit is a
// *executor.BuildError. When ctx is cancelled the stage's container gets
// SIGTERM, then SIGKILL after the grace period (docker stop), and Run
// returns ctx.Err() wrapped.
func (e *Executor) Run(ctx context.Context, cmd executor.Command) error {
	return e.run(ctx, cmd, 0, false)
}

func (e *Executor) run(ctx context.Context, cmd executor.Command, from int64, mustAttach bool) error {
	e.mu.Lock()
	if e.eng == nil || e.shell == "" {
		e.mu.Unlock()
		return errNotPrepared
	}
	n, resumable := e.runs+1, e.resumable
	e.mu.Unlock()
	if err := ctx.Err(); err != nil && !mustAttach {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	if !resumable {
		if mustAttach {
			return fmt.Errorf("%s: a stage of a job not prepared resumable cannot be re-attached", cmd.Stage)
		}
		cid, shellPath, user, err := e.stageContainer(ctx, cmd.Stage)
		if err != nil {
			return fmt.Errorf("%s: %w", cmd.Stage, err)
		}
		e.mu.Lock()
		e.runs = n
		e.mu.Unlock()
		return e.runAttached(ctx, cmd, cid, shellPath, user, n)
	}
	mode := startFresh
	if mustAttach {
		mode = attachSaved
	}
	return e.runDetached(ctx, cmd, n, from, mode)
}

// stageContainer returns the container a stage runs in, with the shell
// and user to run it as.
func (e *Executor) stageContainer(ctx context.Context, stage executor.Stage) (id, shellPath, user string, err error) {
	if stage == executor.StageGetSources && e.needsGit() || transferStage(stage) {
		id, err := e.ensureHelper(ctx)
		return id, "sh", "", err
	}
	e.mu.Lock()
	id, shellPath, user = e.build, e.shellPath, e.user
	e.mu.Unlock()
	if id == "" {
		// Stopped by a cancel or timeout: after_script gets a fresh one.
		if err := e.startBuild(ctx, stage); err != nil {
			return "", "", "", err
		}
		e.mu.Lock()
		id = e.build
		e.mu.Unlock()
	}
	return id, shellPath, user, nil
}

// transferStage reports whether stage moves caches or artifacts: it runs
// in the helper container, which has drover's helper (see HelperCommand).
func transferStage(stage executor.Stage) bool {
	switch stage {
	case executor.StageRestoreCache, executor.StageDownloadArtifacts,
		executor.StageArchiveCache, executor.StageArchiveCacheFail,
		executor.StageUploadArtifacts, executor.StageUploadArtifactsFail:
		return true
	}
	return false
}

// HelperCommand is how the cache and artifact stages, which run in the
// helper container, call drover's helper (executor.HelperHost).
func (e *Executor) HelperCommand() string { return helperCommand }

// needsGit reports whether get_sources has a repository to fetch: then it
// runs in the helper container, which has git; else in the build
// container, saving the helper's start.
func (e *Executor) needsGit() bool {
	e.mu.Lock()
	job := e.job
	e.mu.Unlock()
	return !shell.SkipsSources(shell.Info{Job: job, Variables: job.Variables, ProjectDir: e.paths.ProjectDir,
		LookupEnv: func(string) (string, bool) { return "", false }})
}

// wrapper runs a stage's script file in the project directory.
func (e *Executor) wrapper(cid string) string {
	e.mu.Lock()
	pd, umask := quote(e.paths.ProjectDir), ""
	if e.nonRoot && cid == e.helper {
		// Files git writes must be the build container's user's too.
		umask = "umask 0000\n"
	}
	e.mu.Unlock()
	return umask + fmt.Sprintf(`{ [ -d %[1]s ] || mkdir -p %[1]s; } && cd %[1]s || { echo "cannot enter the project directory %[1]s" >&2; exit 1; }
`, pd)
}

// runAttached runs a stage of a job that is not resumable: its script goes
// to the exec's stdin (stored to a file first, so that commands reading
// stdin do not eat it), its output comes back on the exec's streams.
func (e *Executor) runAttached(ctx context.Context, cmd executor.Command, cid, shellPath, user string, n int) error {
	f := filesOf(n)
	script := e.wrapper(cid) + fmt.Sprintf("cat > %[1]s && exec %[2]s %[1]s </dev/null 2>&1\n", quote(f.script), quote(shellPath))
	w := e.startOutput(cmd.Stage, 0)
	defer e.endOutput()
	started := time.Now()
	code, err := e.execAttached(ctx, cid, user, []string{"sh", "-c", script}, strings.NewReader(cmd.Script), w, w)
	return e.stageResult(ctx, cmd.Stage, cid, code, err, started)
}

// stageResult turns an exec's end into Run's result.
func (e *Executor) stageResult(ctx context.Context, stage executor.Stage, cid string, code int, err error, started time.Time) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", stage, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", stage, err)
	}
	if code == 0 {
		return nil
	}
	if code == 137 && e.oomKilled(ctx, cid, started) {
		e.printf("\n\033[31;1mERROR: the stage was killed for lack of memory (out of memory; [runners.docker] memory = %d bytes)\033[0;m\n", e.cfg.Memory)
	}
	if why := e.containerDied(ctx, cid); why != "" {
		return fmt.Errorf("%s: the container stopped %s: %w", stage, why, executor.ErrStageVanished)
	}
	return &executor.BuildError{ExitCode: code}
}

// oomKilled reports whether the kernel's OOM killer struck in the
// container since the stage started.
func (e *Executor) oomKilled(ctx context.Context, cid string, since time.Time) bool {
	if ins, err := e.eng.ContainerInspect(ctx, cid); err == nil && ins.State != nil && ins.State.OOMKilled {
		return true
	}
	f := filters.NewArgs(filters.Arg("container", cid), filters.Arg("event", "oom"))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msgs, errs := e.eng.Events(ctx, events.ListOptions{
		Since:   strconv.FormatInt(since.Add(-time.Second).Unix(), 10),
		Until:   strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10),
		Filters: f,
	})
	for {
		select {
		case <-msgs:
			return true
		case <-errs:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// execAttached runs cmd in container cid and copies its output; it
// returns the exit code. When ctx ends, the container is stopped (which
// ends the exec) and ctx.Err() is returned.
func (e *Executor) execAttached(ctx context.Context, cid, user string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	resp, err := e.eng.ContainerExecCreate(ctx, cid, container.ExecOptions{
		User: user, AttachStdin: stdin != nil, AttachStdout: true, AttachStderr: true, Cmd: cmd,
	})
	if err != nil {
		return -1, fmt.Errorf("exec: %w", err)
	}
	hj, err := e.eng.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, fmt.Errorf("exec attach: %w", err)
	}
	defer hj.Close()
	if stdin != nil {
		go func() {
			_, _ = io.Copy(hj.Conn, stdin)
			_ = hj.CloseWrite()
		}()
	}
	done := make(chan error, 1)
	go func() {
		_, err := demux(stdout, stderr, hj.Reader)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		e.stopContainer(cid)
		select {
		case <-done:
		case <-time.After(drainTimeout):
			hj.Close()
			<-done
		}
		return -1, ctx.Err()
	}
	if err != nil && ctx.Err() == nil {
		return -1, fmt.Errorf("exec output: %w", err)
	}
	// The stream ends as the process does; the engine may record the exit
	// a moment later.
	for i := 0; ; i++ {
		ins, err := e.eng.ContainerExecInspect(context.WithoutCancel(ctx), resp.ID)
		if err != nil {
			return -1, fmt.Errorf("exec inspect: %w", err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if i == 200 {
			return -1, errors.New("exec: output ended but the process still runs")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopContainer stops a job container (SIGTERM, the grace period, SIGKILL)
// on a context of its own: the stage's is over. A build or helper
// container that was stopped is not used again.
func (e *Executor) stopContainer(cid string) {
	e.mu.Lock()
	eng, grace, logger := e.eng, e.GracePeriod, e.logger
	if e.build == cid {
		e.build = ""
	}
	if e.helper == cid {
		e.helper = ""
	}
	e.mu.Unlock()
	secs := int(grace / time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	if err := eng.ContainerStop(ctx, cid, container.StopOptions{Timeout: &secs}); err != nil {
		logger.Warn("cannot stop a job container", "container", cid, "err", err)
	}
}

// runDetached runs a stage of a resumable job so that it survives the
// manager: the stage's shell is started by a detached exec and writes its
// output and exit code to files in the job's volume; the helper container
// follows the output file for the trace (see package helper). With
// mustAttach (a resumed stage) nothing is started: the stage that the
// dead manager started is followed from byte from.
func (e *Executor) runDetached(ctx context.Context, cmd executor.Command, n int, from int64, mode runMode) error {
	f := filesOf(n)
	var cid string
	if mode == attachSaved {
		e.mu.Lock()
		if e.resume != nil {
			cid = e.resume.Container
		}
		e.mu.Unlock()
	} else {
		var shellPath, user string
		var err error
		if cid, shellPath, user, err = e.stageContainer(ctx, cmd.Stage); err != nil {
			return fmt.Errorf("%s: %w", cmd.Stage, err)
		}
		if from != 0 {
			return fmt.Errorf("%s: output offset %d for a stage not started", cmd.Stage, from)
		}
		if mode == attachIfStarted {
			// The dead manager may have started this stage after its last
			// checkpoint: follow it if so, else claim it and start it here.
			e.setRunning(cmd.Stage, n, cid, 0)
			_, _, notStarted, err := e.follow(ctx, cmd.Stage, cid, f, 0, true, true)
			if err != nil {
				e.setEnded()
				return fmt.Errorf("%s: %w", cmd.Stage, err)
			}
			if !notStarted {
				e.setEnded()
				return e.followToEnd(ctx, cmd.Stage, n, cid, f, 0)
			}
			e.logger.Info("the resumed stage had not started; running it", "stage", cmd.Stage)
			if err := e.startDetached(ctx, cid, shellPath, user, cmd.Script, f, true); err != nil {
				e.setEnded()
				return fmt.Errorf("%s: %w", cmd.Stage, err)
			}
			e.setEnded()
		} else {
			e.setRunning(cmd.Stage, n, cid, 0)
			err := e.startDetached(ctx, cid, shellPath, user, cmd.Script, f, false)
			e.setEnded()
			if err != nil {
				return fmt.Errorf("%s: %w", cmd.Stage, err)
			}
		}
	}
	return e.followToEnd(ctx, cmd.Stage, n, cid, f, from)
}

// runMode says how runDetached treats a stage.
type runMode int

const (
	startFresh      runMode = iota // start it
	attachSaved                    // the dead manager started it: follow it
	attachIfStarted                // follow it if the dead manager started it, else start it
)

// followToEnd follows a detached stage from byte from to its end and
// returns its result.
func (e *Executor) followToEnd(ctx context.Context, stage executor.Stage, n int, cid string, f stageFiles, from int64) error {
	e.setRunning(stage, n, cid, from)
	defer e.setEnded()
	started := time.Now()
	code, vanished, _, err := e.follow(ctx, stage, cid, f, from, false, false)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", stage, ctx.Err())
	case err != nil:
		return fmt.Errorf("%s: %w", stage, err)
	case vanished:
		why := e.containerDied(ctx, cid)
		return fmt.Errorf("%s: %w %s", stage, executor.ErrStageVanished, why)
	}
	return e.stageResult(ctx, stage, cid, code, nil, started)
}

// startDetached stores the stage's script in the job's volume and starts
// it with a detached exec. Unless claimed (by a follower that found the
// stage not started), the stage first claims its run: a stage is started
// at most once, even when a dead manager and its successor both try.
func (e *Executor) startDetached(ctx context.Context, cid, shellPath, user, script string, f stageFiles, claimed bool) error {
	tarball, err := dockerimage.FileTar(strings.TrimPrefix(f.script, jobDir+"/"), 0o644, []byte(script))
	if err != nil {
		return err
	}
	if err := e.eng.CopyToContainer(ctx, cid, jobDir, tarball, container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("store the stage script: %w", err)
	}
	claim := fmt.Sprintf("mkdir %s 2>/dev/null || exit 0\n", quote(f.claim))
	if claimed {
		claim = ""
	}
	w := claim + fmt.Sprintf(": >> %[1]s\n", quote(f.log)) + e.wrapper(cid) +
		fmt.Sprintf("%[1]s %[2]s </dev/null >> %[3]s 2>&1\necho $? > %[4]s.tmp && mv %[4]s.tmp %[4]s\n",
			quote(shellPath), quote(f.script), quote(f.log), quote(f.exit))
	// The wrapper's own failures (no project directory) go to the log too.
	w = "exec >> " + quote(f.log) + " 2>&1\n" + w
	resp, err := e.eng.ContainerExecCreate(ctx, cid, container.ExecOptions{User: user, Cmd: []string{"sh", "-c", w}})
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if err := e.eng.ContainerExecStart(ctx, resp.ID, container.ExecStartOptions{Detach: true}); err != nil {
		return fmt.Errorf("exec start: %w", err)
	}
	return nil
}

// follow copies a detached stage's output from byte from to the trace
// through the helper container until it ends, and returns its exit code,
// or that it vanished (its container stopped first) or, with claim, that
// it never started (and is now claimed).
func (e *Executor) follow(ctx context.Context, stage executor.Stage, cid string, f stageFiles, from int64, claim, quiet bool) (code int, vanished, notStarted bool, err error) {
	hid, err := e.ensureHelper(ctx)
	if err != nil {
		return 0, false, false, err
	}
	// Watch the stage's container: when it stops (a cancel, an OOM, the
	// engine) the stage can write no more, and the follower is told so.
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	go func() {
		waitC, errC := e.eng.ContainerWait(wctx, cid, container.WaitConditionNotRunning)
		select {
		case <-waitC:
		case <-errC:
		case <-wctx.Done():
			return
		}
		if wctx.Err() != nil {
			return
		}
		tb, err := dockerimage.FileTar(strings.TrimPrefix(f.gone, jobDir+"/"), 0o644, nil)
		if err == nil {
			err = e.eng.CopyToContainer(wctx, hid, jobDir, tb, container.CopyToContainerOptions{})
		}
		if err != nil && wctx.Err() == nil {
			e.logger.Warn("cannot mark a stopped stage", "stage", stage, "err", err)
		}
	}()
	args := []string{"drover", "helper", "follow", "--log", f.log, "--exit", f.exit, "--gone", f.gone, "--from", strconv.FormatInt(from, 10)}
	if claim {
		args = append(args, "--claim", f.claim)
	}
	var status bytes.Buffer
	w := e.outputWriter()
	if quiet {
		// Only asking whether the stage started: when it did, the output
		// is copied by the next follow.
		args = append(args, "--probe")
		w = io.Discard
	}
	// The follower is stopped with the stage: ctx here only cancels
	// copying, which ends when the stage's container stops.
	fctx := context.WithoutCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			e.stopContainer(cid)
		case <-stopped:
		}
	}()
	c, err := e.execAttached(fctx, hid, "", args, nil, w, &status)
	close(stopped)
	if err != nil {
		return 0, false, false, fmt.Errorf("follow the stage's output: %w", err)
	}
	code, vanished, notStarted, perr := helper.ParseStatus(status.String())
	if perr != nil {
		if why := e.containerDied(ctx, hid); why != "" {
			return 0, true, false, nil
		}
		return 0, false, false, fmt.Errorf("follow the stage's output (helper exit %d): %w", c, perr)
	}
	return code, vanished, notStarted, nil
}

// startOutput marks stage's output as flowing into the trace from byte
// from, and returns the writer it goes through.
func (e *Executor) startOutput(stage executor.Stage, from int64) io.Writer {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.out.stage = stage
	e.out.off.Store(from)
	return e.outputWriter()
}

func (e *Executor) endOutput() {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.out.stage = ""
	e.out.off.Store(0)
}

// outputWriter writes stage output to the trace, counting it, with out.mu
// held (so that a checkpoint sees the trace and the count agree).
func (e *Executor) outputWriter() io.Writer { return (*outputWriter)(e) }

type outputWriter Executor

func (w *outputWriter) Write(p []byte) (int, error) {
	e := (*Executor)(w)
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	t := e.trace
	e.mu.Unlock()
	// Errors of the log sink are the trace uploader's business.
	_, _ = t.Write(p)
	e.out.off.Add(int64(len(p)))
	return len(p), nil
}

// setRunning records that run n of stage runs in container cid, its
// output in the trace from byte from on.
func (e *Executor) setRunning(stage executor.Stage, n int, cid string, from int64) {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = n
	e.running = &stageState{Name: stage, N: n, Container: cid, Started: time.Now().UTC()}
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

// demux splits the engine's multiplexed stream (an 8-byte header per
// frame: stream, 3 zero bytes, big-endian length) into stdout and stderr.
func demux(stdout, stderr io.Writer, r io.Reader) (int64, error) {
	var hdr [8]byte
	var total int64
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return total, nil
			}
			return total, err
		}
		w := stdout
		if hdr[0] == 2 {
			w = stderr
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		for n > 0 {
			k, err := io.ReadFull(r, buf[:min(n, int64(len(buf)))])
			if k > 0 {
				if _, werr := w.Write(buf[:k]); werr != nil {
					return total, werr
				}
				total += int64(k)
				n -= int64(k)
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF // a frame cut short
				}
				return total, err
			}
		}
	}
}

// quote returns s as one single-quoted sh word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// OpenProjectFile opens a file of the project directory, in the job's
// builds volume, by copying it out of the build (or helper) container: no
// script runs (executor.FileOpener).
func (e *Executor) OpenProjectFile(ctx context.Context, name string) (io.ReadCloser, error) {
	e.mu.Lock()
	cid, pd := e.build, e.paths.ProjectDir
	if cid == "" {
		cid = e.helper
	}
	eng := e.eng
	e.mu.Unlock()
	if eng == nil || cid == "" {
		return nil, errNotPrepared
	}
	rc, st, err := eng.CopyFromContainer(ctx, cid, path.Join(pd, name))
	if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("copy %s out of the container: %w", name, err)
	}
	if !st.Mode.IsRegular() {
		rc.Close()
		return nil, fmt.Errorf("%s: not a regular file (%v)", name, st.Mode)
	}
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		rc.Close()
		return nil, fmt.Errorf("copy %s out of the container: %w", name, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{tr, rc}, nil
}
