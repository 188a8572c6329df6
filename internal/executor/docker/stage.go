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
	"github.com/drover-ci/drover/internal/executor/detached"
	"github.com/drover-ci/drover/internal/shell"
)

// helperCommand runs drover's helper in the helper container (the image
// has drover as /usr/bin/drover).
const helperCommand = "drover helper"

// How long a stopped stage's output stream may take to end after its
// container was stopped, before it is abandoned.
const drainTimeout = 10 * time.Second

// Run runs one stage script by exec in the job's container: get_sources
// in the helper container (git), every other stage in the build
// container, which is started anew when a cancel or timeout stopped the
// previous one. Its output goes to the trace. A non-zero exit is a
// *executor.BuildError. When ctx is cancelled the stage's processes get
// SIGTERM, then SIGKILL after the grace period (stopStage), its container
// is stopped, and Run returns ctx.Err() wrapped. A resumable job's stages
// run detached (see package detached), followed by drover's helper in the
// helper container.
func (e *Executor) Run(ctx context.Context, cmd executor.Command) error {
	e.mu.Lock()
	if e.eng == nil || e.shell == "" {
		e.mu.Unlock()
		return errNotPrepared
	}
	resumable := e.resumable
	e.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	cid, shellPath, user, err := e.stageContainer(ctx, cmd.Stage)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	if err := e.ownStage(ctx, cid); err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	if !resumable {
		err = e.runAttached(ctx, cmd, cid, shellPath, user)
	} else {
		err = e.runDetached(ctx, cmd, cid, shellPath, user, detached.StartFresh, 0)
	}
	return e.lostContainer(ctx, cmd.Stage, cid, err)
}

// lostContainer is the result of a stage in container cid that ended
// with err: when the container is gone (removed under the job), an error
// wrapping executor.ErrEnvironmentLost, and the container is forgotten, so
// the next Run (the same stage again, EXECUTOR_JOB_SECTION_ATTEMPTS) gets
// a new one, as GitLab Runner's docker executor does; else err.
func (e *Executor) lostContainer(ctx context.Context, stage executor.Stage, cid string, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	ins, ierr := e.eng.ContainerInspect(context.WithoutCancel(ctx), cid)
	if !containerGone(ins, ierr, errors.Is(err, executor.ErrStageVanished)) {
		return err
	}
	e.mu.Lock()
	if e.build == cid {
		e.build = ""
	}
	if e.helper == cid {
		e.helper = ""
	}
	e.mu.Unlock()
	return fmt.Errorf("%s: container %q not found or removed (%v): %w", stage, shortID(cid), err, executor.ErrEnvironmentLost)
}

// containerGone reports whether a container, as inspected (ins, err),
// can run nothing more: not found, being removed or dead; or, when the
// stage's processes vanished with it (vanished), stopped. A "docker rm
// -f" under the job is seen in any of these, depending on how far the
// engine got when it is inspected.
func containerGone(ins container.InspectResponse, err error, vanished bool) bool {
	if err != nil {
		return cerrdefs.IsNotFound(err)
	}
	if ins.ContainerJSONBase == nil || ins.State == nil {
		return false
	}
	switch {
	case ins.State.Status == container.StateRemoving, ins.State.Status == container.StateDead, ins.State.Dead:
		return true
	case vanished && !ins.State.Running:
		return true
	}
	return false
}

// stageContainer returns the container a stage runs in, with the shell
// and user to run it as.
func (e *Executor) stageContainer(ctx context.Context, stage executor.Stage) (id, shellPath, user string, err error) {
	if (stage == executor.StageGetSources || stage == executor.StageClearWorktree) && e.needsGit() || transferStage(stage) {
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

// needsHelper reports whether the job has a stage that runs in the
// helper container: a git checkout, a cache, artifacts to upload, or
// artifacts of earlier jobs to download.
func (e *Executor) needsHelper() bool {
	e.mu.Lock()
	job := e.job
	e.mu.Unlock()
	if len(job.Cache) > 0 || len(job.Artifacts) > 0 {
		return true
	}
	for _, d := range job.Dependencies {
		if d.ArtifactsFile != nil {
			return true
		}
	}
	return e.needsGit()
}

// wrapper runs a stage's script file in the project directory.
func (e *Executor) wrapper(cid string) string {
	e.mu.Lock()
	pd, umask := quote(e.paths.ProjectDir), ""
	if u := e.helperUmaskLocked(cid); u != "" {
		// Files git writes must be the build container's user's too.
		umask = "umask " + u + "\n"
	}
	e.mu.Unlock()
	return umask + e.stageSetup(cid) + fmt.Sprintf(`{ [ -d %[1]s ] || mkdir -p %[1]s; } && cd %[1]s || { echo "cannot enter the project directory %[1]s" >&2; exit 1; }
`, pd)
}

// stageEntry is what stage's shell in container cid runs under: the
// image's entrypoint (stageEntrypoint) for a user stage in the build
// container, else nothing.
func (e *Executor) stageEntry(stage executor.Stage, cid string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cid != e.build || !executor.UserStage(stage) {
		return nil
	}
	return e.userEntry
}

// stageSetup is what a stage's wrapper in container cid sets before the
// script: in the build container, the soft limit of open files that
// ulimit gives. The engine gives the limits to processes it execs, but
// runc built with Go 1.19 or later, before its fix
// (opencontainers/runc#4266), may raise their soft limit of open files
// to the hard one (runc 1.1.5 of Debian 12 does); GitLab Runner's
// scripts, the container's first process, have the soft limit asked for.
func (e *Executor) stageSetup(cid string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cid != e.build || e.cfg == nil {
		return ""
	}
	for _, u := range e.cfg.Ulimits {
		if u.Name == "nofile" && u.Soft >= 0 {
			return fmt.Sprintf("ulimit -S -n %d 2>/dev/null\n", u.Soft)
		}
	}
	return ""
}

// runAttached runs a stage of a job that is not resumable: its script goes
// to the stage's standard input (stored to a file first, so that commands
// reading stdin do not eat it), its output comes back on the container's
// streams. The stage is run by the container's idle shell (build or helper) where
// that is the same as an exec (session), else by an exec.
func (e *Executor) runAttached(ctx context.Context, cmd executor.Command, cid, shellPath, user string) error {
	e.mu.Lock()
	det := e.det
	e.mu.Unlock()
	f, w := det.Begin(detached.Stage{Name: cmd.Stage, Where: cid})
	defer det.End()
	// The exec's shell stays the parent of the stage's shell and writes
	// its pid where stopStage finds it: a cancel signals what is below it.
	// (One write of a few bytes: a reader never sees half a pid, and the
	// stage needs no mv.)
	script := e.wrapper(cid) + fmt.Sprintf("cat > %[1]s || exit\necho $$ > %[3]s\n%[4]s%[2]s %[1]s </dev/null 2>&1\nexit $?\n",
		quote(f.Script), quote(shellPath), quote(f.PID), detached.Words(e.stageEntry(cmd.Stage, cid)))
	started := time.Now()
	stop := func() { e.stopStage(context.Background(), cid, user, f) }
	var code int
	var err error
	if sess := e.session(ctx, cid); sess != nil {
		code, err = e.runStage(ctx, sess, script, cmd.Script, w, stop, func(ctx context.Context) (bool, error) {
			c, err := e.exec(ctx, cid, user, []string{"sh", "-c", "p=$(cat " + quote(f.PID) + ") && kill -0 \"$p\""}, nil, io.Discard, io.Discard, nil)
			return err == nil && c != 0, err
		})
		if errors.Is(err, errSessionEnded) && ctx.Err() == nil && e.containerDied(ctx, cid) != "" {
			// The container stopped under the stage: as after an exec
			// killed with it (137), its state says why (out of memory?).
			return e.exitResult(ctx, cmd.Stage, cid, 137, started)
		}
	} else {
		code, err = e.exec(ctx, cid, user, []string{"sh", "-c", script}, strings.NewReader(cmd.Script), w, w, stop)
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", cmd.Stage, ctx.Err())
	case err != nil:
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	case code == 0:
		return nil
	}
	return e.exitResult(ctx, cmd.Stage, cid, code, started)
}

// runDetached runs a stage of a resumable job so that it survives the
// manager (package detached): its shell is started by a detached exec in
// container cid and writes its output and exit code to files in the
// job's volume, which drover's helper in the helper container follows
// for the trace.
func (e *Executor) runDetached(ctx context.Context, cmd executor.Command, cid, shellPath, user string, mode detached.Mode, from int64) error {
	e.mu.Lock()
	// Files git writes must be the build container's user's too.
	det, pd, umask := e.det, e.paths.ProjectDir, e.helperUmaskLocked(cid)
	e.mu.Unlock()
	s := detached.Stage{Name: cmd.Stage, Script: cmd.Script, Where: cid, Shell: shellPath, Dir: pd, Umask: umask, Setup: e.stageSetup(cid),
		Entrypoint: e.stageEntry(cmd.Stage, cid)}
	started := time.Now()
	err := det.Run(ctx, &stageTarget{e: e, cid: cid, user: user}, s, mode, from)
	var be *executor.BuildError
	if errors.As(err, &be) && be.Inner == nil && be.Reason == "" {
		return e.exitResult(ctx, cmd.Stage, cid, be.ExitCode, started)
	}
	return err
}

// exitResult is the result of a stage that exited with a non-zero code
// in container cid: a *executor.BuildError, unless the container stopped
// (the stage vanished with it).
func (e *Executor) exitResult(ctx context.Context, stage executor.Stage, cid string, code int, started time.Time) error {
	if code == 137 && e.oomKilled(ctx, cid, started) {
		e.printf("\n\033[31;1mERROR: the stage was killed for lack of memory (out of memory; [runners.docker] memory = %d bytes)\033[0;m\n", e.cfg.Memory)
	}
	if why := e.containerDied(ctx, cid); why != "" {
		return fmt.Errorf("%s: the container stopped (%s): %w", stage, why, executor.ErrStageVanished)
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
	return e.exec(ctx, cid, user, cmd, stdin, stdout, stderr, func() { e.stopContainer(cid) })
}

// exec runs cmd in container cid as execAttached does; when ctx ends,
// onCancel is called to end the command (its output is then copied to
// its end, for drainTimeout at most), or, when nil, the exec's stream is
// closed (the command may go on).
func (e *Executor) exec(ctx context.Context, cid, user string, cmd []string, stdin io.Reader, stdout, stderr io.Writer, onCancel func()) (code int, err error) {
	defer func(start time.Time) { spanOf(e.eng, spanExec, start, err) }(time.Now())
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
	act := newActivity(hj.Reader)
	go func() {
		_, err := demux(stdout, stderr, act)
		done <- err
	}()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	lost := e.watchStream(wctx, act, func(ctx context.Context) (bool, error) {
		ins, err := e.eng.ContainerExecInspect(ctx, resp.ID)
		return err == nil && !ins.Running, err
	})
	select {
	case err = <-done:
	case err = <-lost:
		hj.Close()
		<-done
		return -1, fmt.Errorf("exec: %w", err)
	case <-ctx.Done():
		if onCancel == nil {
			hj.Close()
			<-done
			return -1, ctx.Err()
		}
		onCancel()
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

// containerStopGrace is what a container whose stage was stopped gets
// between SIGTERM (to its first process: the idle shell, which ignores
// it) and SIGKILL: what is left in it is what the stage left behind, after
// the stage's own processes had their grace period.
const containerStopGrace = time.Second

// stopStage stops a cancelled or timed-out stage in container cid whose
// wrapper's pid is in f.PID, as GitLab Runner's cancel does what a job
// sees: every process below the wrapper gets SIGTERM and, those still
// there after the grace period, SIGKILL, by an exec as the stage's user
// (detached.Sh's stop: sh, kill and /proc or ps are enough); the wrapper
// then writes the stage's exit status or ends its exec. The container is
// stopped too, off the stage's path (retire): what the stage started in
// the background goes with it, and it is not used again. When the
// processes cannot be stopped so (an image without a shell's kill), the
// container is stopped at once instead, which ends the stage too.
func (e *Executor) stopStage(ctx context.Context, cid, user string, f detached.Files) {
	e.mu.Lock()
	grace, logger := e.GracePeriod, e.logger
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, grace+30*time.Second)
	defer cancel()
	var out bytes.Buffer // one writer: the exec's streams are copied by one goroutine
	code, err := e.exec(ctx, cid, user, detached.Sh{}.Stop(f, grace), nil, &out, &out, nil)
	if err != nil || code != 0 {
		logger.Warn("cannot stop the stage's processes; stopping its container", "container", cid,
			"exit", code, "err", err, "output", strings.TrimSpace(out.String()))
		e.stopContainer(cid)
		return
	}
	logger.Debug("stopped the stage's processes", "container", cid, "output", strings.TrimSpace(out.String()))
	e.retire(cid)
}

// retire takes container cid out of use (a build or helper container
// whose stage was stopped is not used again) and stops it in the
// background with containerStopGrace (Provider.Wait waits for that).
func (e *Executor) retire(cid string) {
	e.mu.Lock()
	eng, logger := e.eng, e.logger
	e.forgetLocked(cid)
	e.mu.Unlock()
	e.prov.cleanups.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), containerStopGrace+30*time.Second)
		defer cancel()
		secs := int(containerStopGrace / time.Second)
		if err := eng.ContainerStop(ctx, cid, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
			logger.Warn("cannot stop a job container", "container", cid, "err", err)
		}
	})
}

// forgetLocked takes container cid out of use as the build or helper
// container (e.mu held).
func (e *Executor) forgetLocked(cid string) {
	if e.build == cid {
		e.build = ""
	}
	if e.helper == cid {
		e.helper = ""
	}
}

// stopContainer stops a job container (SIGTERM, the grace period, SIGKILL)
// on a context of its own: the stage's is over. A build or helper
// container that was stopped is not used again.
func (e *Executor) stopContainer(cid string) {
	e.mu.Lock()
	eng, grace, logger := e.eng, e.GracePeriod, e.logger
	e.forgetLocked(cid)
	e.mu.Unlock()
	secs := int(grace / time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	if err := eng.ContainerStop(ctx, cid, container.StopOptions{Timeout: &secs}); err != nil {
		logger.Warn("cannot stop a job container", "container", cid, "err", err)
	}
}

// stageTarget is where a detached stage runs (detached.Target): container
// cid, as user; its files are in the job's volume, which the helper
// container, where drover's helper follows them, shares.
type stageTarget struct {
	e    *Executor
	cid  string
	user string
}

var (
	_ detached.Watcher   = (*stageTarget)(nil)
	_ detached.Explainer = (*stageTarget)(nil)
)

// WriteFile copies the file into the container (name is in jobDir).
func (t *stageTarget) WriteFile(ctx context.Context, name string, data []byte) error {
	tarball, err := dockerimage.FileTar(strings.TrimPrefix(name, jobDir+"/"), 0o644, data)
	if err != nil {
		return err
	}
	return t.e.eng.CopyToContainer(ctx, t.cid, jobDir, tarball, container.CopyToContainerOptions{})
}

// Start runs the script by a detached exec: the engine keeps it running.
func (t *stageTarget) Start(ctx context.Context, script string) error {
	resp, err := t.e.eng.ContainerExecCreate(ctx, t.cid, container.ExecOptions{User: t.user, Cmd: []string{"sh", "-c", script}})
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if err := t.e.eng.ContainerExecStart(ctx, resp.ID, container.ExecStartOptions{Detach: true}); err != nil {
		return fmt.Errorf("exec start: %w", err)
	}
	return nil
}

// Exec runs argv in the helper container.
func (t *stageTarget) Exec(ctx context.Context, argv []string, stdout, stderr io.Writer) (int, error) {
	hid, err := t.e.ensureHelper(ctx)
	if err != nil {
		return -1, err
	}
	return t.e.exec(ctx, hid, "", argv, nil, stdout, stderr, nil)
}

// Stop stops the stage's processes (stopStage: SIGTERM, the grace
// period, SIGKILL), whose wrapper then writes the exit status the
// follower reports, and its container; a container stopped at once
// because the processes could not be is told by WaitStopped.
func (t *stageTarget) Stop(ctx context.Context, f detached.Files) error {
	t.e.stopStage(ctx, t.cid, t.user, f)
	return nil
}

// WaitStopped waits for the stage's container to stop (a cancel, an OOM,
// the engine): the stage can write no more. An engine that cannot say
// counts as stopped.
func (t *stageTarget) WaitStopped(ctx context.Context) bool {
	waitC, errC := t.e.eng.ContainerWait(ctx, t.cid, container.WaitConditionNotRunning)
	select {
	case <-waitC:
	case <-errC:
	case <-ctx.Done():
	}
	return ctx.Err() == nil
}

// Gone explains a stage's container, or the helper container, that is not
// running.
func (t *stageTarget) Gone(ctx context.Context) string {
	if why := t.e.containerDied(ctx, t.cid); why != "" {
		return why
	}
	t.e.mu.Lock()
	hid := t.e.helper
	t.e.mu.Unlock()
	if hid == "" {
		return ""
	}
	if why := t.e.containerDied(ctx, hid); why != "" {
		return "the helper container: " + why
	}
	return ""
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
func quote(s string) string { return detached.Quote(s) }

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
