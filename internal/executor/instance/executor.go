package instance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/clock"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/detached"
	"github.com/drover-ci/drover/internal/fleet"
	"github.com/drover-ci/drover/internal/sshx"
)

// ErrInstanceLost is returned (wrapped) by Run when the job's instance went
// away or its connection ended: the job fails with runner_system_failure.
var ErrInstanceLost = errors.New("instance lost")

// How long a control command (stop, cleanup) may take on the instance.
const controlTimeout = 30 * time.Second

// How long Run waits, when a stage's session ended without an exit
// status, for the connection to tell why.
const connWait = 2 * time.Second

// How long Run waits, after SIGKILL, for the stage's session to end before
// abandoning it.
const drainTimeout = 5 * time.Second

// How often a follower of a detached stage whose stream broke is started
// again (each after a longer wait, 1 s, 2 s, 3 s; the connection is made
// again if need be) before the stage counts as vanished.
const followRetries = 3

// Executor runs one job's stage scripts on an instance over SSH.
type Executor struct {
	// GracePeriod is the time between SIGTERM and SIGKILL when a stage is
	// cancelled; zero means DefaultGracePeriod. Set it before Prepare.
	GracePeriod time.Duration

	hostKeys  *sshx.TOFU
	clock     clock.Clock
	helperBin *helperBinary
	conns     *connPool
	prov      *Provider // the sweep of hosts at first contact; nil in tests
	lookup    func(executor.Settings) (Runner, error)

	executor.StageRecorder

	// redial is held while the connection is made again (connection).
	redial sync.Mutex

	mu           sync.Mutex
	executorName string // as the runner names it: instance, ssh, ...
	shell        string
	paths        executor.Paths
	trace        io.Writer
	logger       *slog.Logger
	lease        *Lease
	acq          Acquired
	release      func() // gives the slot back (the lease's, or the claim's after Restore)
	client       *sshx.Client
	sshCfg       sshx.Config // how client was made, to make it again
	scriptDir    string      // on the instance
	hostname     string
	helper       string // shell words running drover's helper on the host
	helperPath   string // drover's binary on the host ("" when not installed)
	connKey      string // the connection's key in conns
	runs         int
	// det runs the stages of a resumable job (Settings.Resumable)
	// detached on the host; nil: they run attached, as sessions of the
	// connection.
	det        *detached.Runner
	target     *sshTarget
	finished   error
	cleanedUp  bool
	stopLostFn func() bool
}

var (
	_ executor.Executor           = (*Executor)(nil)
	_ executor.PathsReporter      = (*Executor)(nil)
	_ executor.Stateful           = (*Executor)(nil)
	_ executor.OutputCheckpointer = (*Executor)(nil)
)

// ExitWording is how the job's last line names a failing script's exit:
// "exit status", as GitLab Runner words it for scripts run over SSH.
func (e *Executor) ExitWording() string { return "exit status" }

// Shell returns the shell scripts run in.
func (e *Executor) Shell() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.shell
}

// Disposable reports whether the job's instance is its own, thrown away
// or reverted after it (Runner.Disposable); valid after Prepare.
func (e *Executor) Disposable() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lease != nil && e.lease.runner.Disposable
}

// Paths returns the job's directories on the instance; valid after
// Prepare.
func (e *Executor) Paths() executor.Paths {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.paths
}

// InstanceID returns the id of the instance the job runs on ("" before
// Prepare acquired one).
func (e *Executor) InstanceID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.acq == nil {
		return ""
	}
	return e.acq.InstanceID()
}

// Prepare acquires a slot on a ready instance for the job's reservation
// (waiting within ctx), connects to the instance, checks the shell and
// creates the builds and cache directories there. A resumable job
// (Settings.Resumable) then runs its stages detached on the instance
// (executor.Stateful).
func (e *Executor) Prepare(ctx context.Context, opts executor.PrepareOptions) error {
	trace, logger := executor.Sinks(opts)
	e.init(trace, logger)
	l, ok := opts.Data.(*Lease)
	if !ok || l == nil {
		return errors.New("instance executor: the job has no reservation (Provider.Acquire was not called)")
	}
	rn := l.runner
	if rn.Executor == "" {
		rn.Executor = Name
	}
	e.mu.Lock()
	e.executorName = rn.Executor
	e.mu.Unlock()
	executor.PrepareHeader(trace, rn.Executor)

	sh := opts.Settings.Shell
	if sh == "" {
		sh = e.Shell()
	}
	if sh != "bash" && sh != "sh" {
		return fmt.Errorf("shell %q is not supported by the %s executor (bash or sh)", sh, rn.Executor)
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	if rn.Executor == Name {
		fmt.Fprintf(trace, "Waiting for a slot on an instance...\n")
	}
	l.SetTimeInQueue(TimeInQueue(opts.Job))
	job := Job{Job: opts.Job, Settings: opts.Settings, Trace: trace}
	acq, err := l.AcquireJob(ctx, job)
	if err != nil && rn.Executor != Name {
		return err // the slot's own words (a VM that did not come up)
	}
	if err != nil {
		return fmt.Errorf("acquire a slot on an instance: %w", err)
	}
	var jobID int64
	if opts.Job != nil {
		jobID = opts.Job.ID
	}
	setJob(acq, jobID)
	e.mu.Lock()
	e.lease, e.acq, e.release = l, acq, l.Release
	e.mu.Unlock()
	id := acq.InstanceID()
	logger = logger.With("instance", id, "slot", acq.Slot())
	if rn.Executor == Name {
		fmt.Fprintf(trace, "Acquired slot %d on instance %s\n", acq.Slot(), id)
	} else {
		fmt.Fprintf(trace, "Connecting to %s\n", id)
	}
	select {
	case <-acq.Lost():
		return fmt.Errorf("instance %s: %w before the job started", id, ErrInstanceLost)
	default:
	}

	client, err := e.connect(ctx, rn, acq, acq.ConnectInfo(), trace, logger)
	if err != nil {
		return err
	}
	e.prov.sweepFirst(ctx, id, client, logger)
	if rn.Connected != nil {
		if err := rn.Connected(ctx, client, acq, job); err != nil {
			client.Close()
			return fmt.Errorf("instance %s: %w", id, err)
		}
	}

	builds := cmp.Or(opts.Settings.BuildsDir, rn.BuildsDir, DefaultBuildsDir)
	cache := cmp.Or(opts.Settings.CacheDir, rn.CacheDir, DefaultCacheDir)
	out, err := client.Output(ctx, shCommand(prepareScript(sh, builds, cache, jobDir(opts.Settings.SystemID, jobID))), nil)
	if err != nil {
		return fmt.Errorf("instance %s: prepare: %w", id, describePrepare(err, sh))
	}
	pr, err := parsePrepare(out)
	if err != nil {
		return fmt.Errorf("instance %s: prepare: %w", id, err)
	}
	concurrentID := acq.Slot()
	if rn.UseCommonBuildDir {
		concurrentID = opts.Settings.ConcurrentID
	}
	paths, err := opts.JobPaths(executor.Paths{
		BuildsDir:  pr.buildsDir,
		CacheDir:   pr.cacheDir,
		ProjectDir: executor.ProjectDir(pr.buildsDir, opts.Settings.ShortToken, concurrentID, opts.Job),
	})
	if err != nil {
		return err
	}
	var helper, helperPath string
	if needsHelper(opts.Job) {
		if helperPath = e.installHelper(ctx, client, pr.cacheDir, trace); helperPath != "" {
			helper = quote(helperPath) + " helper"
		}
	}
	var det *detached.Runner
	if opts.Settings.Resumable {
		det = e.newRunner(pr.scriptDir, helperPath, trace, logger)
	}
	e.mu.Lock()
	e.shell, e.paths, e.scriptDir, e.hostname, e.helper, e.helperPath = sh, paths, pr.scriptDir, pr.hostname, helper, helperPath
	e.det = det
	e.mu.Unlock()
	logger.Debug("instance prepared", "host", pr.hostname, "project_dir", paths.ProjectDir, "resumable", det != nil)
	if rn.Executor == Name {
		fmt.Fprintf(trace, "Using Instance (%s) executor on %s...\n", sh, pr.hostname)
	} else {
		fmt.Fprintf(trace, "Using %s (%s) executor on %s...\n", strings.ToUpper(rn.Executor), sh, pr.hostname)
	}
	return nil
}

// init sets the job's sinks and the defaults Prepare and Restore need.
func (e *Executor) init(trace io.Writer, logger *slog.Logger) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.trace, e.logger = trace, logger
	if e.GracePeriod <= 0 {
		e.GracePeriod = DefaultGracePeriod
	}
	if e.hostKeys == nil {
		e.hostKeys = &sshx.TOFU{}
	}
	e.clock = clock.OrReal(e.clock)
}

// name is the executor's name as its runner gives it.
func (e *Executor) name() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return cmp.Or(e.executorName, Name)
}

// connect connects to the instance of acq at info (or takes an idle
// connection to it) and makes it the job's; the connection is closed when
// the pool reports the instance lost. A nil trace hears nothing of the
// retries.
func (e *Executor) connect(ctx context.Context, rn Runner, acq Acquired, info fleet.ConnectInfo, trace io.Writer, logger *slog.Logger) (*sshx.Client, error) {
	id := acq.InstanceID()
	cfg, err := sshConfig(info, rn.Connector)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", id, err)
	}
	cfg.HostKey = e.hostKeys.Callback(id)
	cfg.HostKeyAlgorithms = e.hostKeys.Algorithms(id)
	if rn.HostKey != nil {
		cfg.HostKey = rn.HostKey(id)
		cfg.HostKeyAlgorithms = nil
		if rn.HostKeyAlgorithms != nil {
			cfg.HostKeyAlgorithms = rn.HostKeyAlgorithms(id)
		}
	}
	cfg.Clock, cfg.Logger = e.clock, logger
	if trace == nil {
		trace = io.Discard
	}
	key := poolKey(id, cfg)
	client := e.conns.get(key)
	if client != nil {
		logger.Debug("reusing an SSH connection")
	} else if client, err = e.dial(ctx, cfg, trace); err != nil {
		return nil, fmt.Errorf("instance %s: connect: %w", id, err)
	}
	e.mu.Lock()
	e.client, e.connKey, e.sshCfg = client, key, cfg
	// A lost instance ends the connection, which fails the running session
	// at once; Run tells it apart from a network error by Lost.
	e.stopLostFn = afterClose(acq.Lost(), e.closeClient)
	e.mu.Unlock()
	return client, nil
}

// closeClient closes the job's connection.
func (e *Executor) closeClient() {
	e.mu.Lock()
	c := e.client
	e.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// connection returns the job's connection, made again when it ended,
// unless the instance is lost or the job cleaned up: the detached stages
// of a resumable job go on without it, and their followers and stops
// need one.
func (e *Executor) connection(ctx context.Context) (*sshx.Client, error) {
	e.mu.Lock()
	c, acq := e.client, e.acq
	e.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil
	}
	if acq == nil {
		return nil, errors.New("no connection before Prepare")
	}
	select {
	case <-acq.Lost():
		return nil, fmt.Errorf("instance %s: %w", acq.InstanceID(), ErrInstanceLost)
	default:
	}
	e.redial.Lock()
	defer e.redial.Unlock()
	e.mu.Lock()
	c, cfg, logger, done := e.client, e.sshCfg, e.logger, e.cleanedUp
	e.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil // made again meanwhile
	}
	if done {
		return nil, errors.New("the job was cleaned up")
	}
	var cause error
	if c != nil {
		cause = c.Err()
	}
	logger.Warn("the SSH connection to the instance ended; connecting again", "err", cause)
	nc, err := e.dial(ctx, cfg, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("instance %s: connect again (after %v): %w", acq.InstanceID(), cause, err)
	}
	e.mu.Lock()
	e.client = nc
	e.mu.Unlock()
	select {
	case <-acq.Lost():
		// The watch closed the connection before this one.
		nc.Close()
		return nil, fmt.Errorf("instance %s: %w", acq.InstanceID(), ErrInstanceLost)
	default:
	}
	return nc, nil
}

// goneReason tells a lost instance, for the errors of detached stages.
func (e *Executor) goneReason() string {
	e.mu.Lock()
	acq := e.acq
	e.mu.Unlock()
	if acq == nil {
		return ""
	}
	select {
	case <-acq.Lost():
		return fmt.Sprintf("instance %s lost", acq.InstanceID())
	default:
		return ""
	}
}

// newRunner returns the detached stages' runner of a job whose files are
// in dir on the host, followed by drover's helper at helperPath when it
// is installed there, else by the POSIX sh follower.
func (e *Executor) newRunner(dir, helperPath string, trace io.Writer, logger *slog.Logger) *detached.Runner {
	var tool detached.Tool = detached.Sh{}
	if helperPath != "" {
		tool = detached.Helper{Command: []string{helperPath, "helper"}}
	}
	e.mu.Lock()
	grace := e.GracePeriod
	e.target = &sshTarget{conn: e.connection, tool: tool, grace: grace, gone: e.goneReason}
	e.mu.Unlock()
	return detached.New(detached.Config{
		Dir: dir, Tool: tool, PIDGone: true, Retries: followRetries, Grace: grace, Trace: trace, Logger: logger,
	})
}

// runDetached runs (mode StartFresh), follows or resumes a stage of a
// resumable job detached on the instance.
func (e *Executor) runDetached(ctx context.Context, cmd executor.Command, mode detached.Mode, from int64) error {
	e.mu.Lock()
	det, t, acq, sh, paths := e.det, e.target, e.acq, e.shell, e.paths
	e.mu.Unlock()
	s := detached.Stage{Name: cmd.Stage, Script: cmd.Script, Where: acq.InstanceID(), Shell: sh, Login: e.prov.opts.LoginShell, Dir: paths.ProjectDir}
	err := det.Run(ctx, t, s, mode, from)
	var be *executor.BuildError
	if err == nil || errors.As(err, &be) || ctx.Err() != nil {
		return err
	}
	select {
	case <-acq.Lost():
		return fmt.Errorf("instance %s: %w: %w", acq.InstanceID(), ErrInstanceLost, err)
	default:
		return err
	}
}

// prepared is what the prepare script printed.
type prepared struct {
	buildsDir, cacheDir, scriptDir, hostname string
}

// parsePrepare reads the prepare script's output: three absolute,
// clean directories and a host name, one per line. The instance is not
// trusted to print sense: anything else is an error.
func parsePrepare(out []byte) (prepared, error) {
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 4 {
		return prepared{}, fmt.Errorf("unexpected output %q", out)
	}
	for _, dir := range lines[:3] {
		if !path.IsAbs(dir) || path.Clean(dir) != dir || strings.ContainsAny(dir, "\x00\r") {
			return prepared{}, fmt.Errorf("unexpected directory %q in the output", dir)
		}
	}
	if lines[2] == "/" {
		return prepared{}, errors.New("the script directory is /")
	}
	host := strings.TrimSpace(lines[3])
	if host == "" || strings.ContainsFunc(host, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return prepared{}, fmt.Errorf("unexpected host name %q", lines[3])
	}
	return prepared{buildsDir: lines[0], cacheDir: lines[1], scriptDir: lines[2], hostname: host}, nil
}

// Connection attempts to an unreachable instance, and the wait before the
// first retry (doubled for each next one): an instance reported ready may
// still be bringing its network or sshd up.
const (
	connectAttempts = 3
	connectBackoff  = time.Second
)

// dial connects, trying again while the instance is unreachable.
func (e *Executor) dial(ctx context.Context, cfg sshx.Config, trace io.Writer) (*sshx.Client, error) {
	wait := connectBackoff
	for attempt := 1; ; attempt++ {
		client, err := sshx.Dial(ctx, cfg)
		if err == nil || !errors.Is(err, sshx.ErrUnreachable) || attempt == connectAttempts {
			return client, err
		}
		fmt.Fprintf(trace, "Cannot reach the instance yet, trying again in %v\n", wait)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (after %w)", ctx.Err(), err)
		case <-e.clock.After(wait):
		}
		wait *= 2
	}
}

// describePrepare turns the prepare script's exit codes into words.
func describePrepare(err error, sh string) error {
	var ee *ssh.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	switch ee.ExitStatus() {
	case exitNoShell:
		return fmt.Errorf("shell %s is not installed on the instance: %w", sh, err)
	case exitNoDirs:
		return fmt.Errorf("cannot create the builds or cache directory: %w", err)
	case exitNoTmpDir:
		return fmt.Errorf("cannot create a private script directory: %w", err)
	}
	return err
}

// SSHConfig is how the executor reaches an instance: the address and
// credentials of info, unless the connector's static credentials are asked
// for or the instance has none. Whatever else connects to instances (an
// instance_ready_command) uses it too. HostKey, HostKeyAlgorithms, Clock
// and Logger are left
// for the caller.
func SSHConfig(info fleet.ConnectInfo, c fleet.ConnectorConfig) (sshx.Config, error) {
	return sshConfig(info, c)
}

func sshConfig(info fleet.ConnectInfo, c fleet.ConnectorConfig) (sshx.Config, error) {
	if c.Protocol != "" && c.Protocol != "ssh" {
		return sshx.Config{}, fmt.Errorf("connector protocol %q: only ssh is supported", c.Protocol)
	}
	if info.Protocol != "" && info.Protocol != "ssh" {
		return sshx.Config{}, fmt.Errorf("instance protocol %q: only ssh is supported", info.Protocol)
	}
	cfg := sshx.Config{
		Addr:      info.Addr(c.UseExternalAddr),
		User:      info.Username,
		Password:  info.Password,
		Key:       info.Key,
		Timeout:   c.Timeout,
		Keepalive: c.Keepalive,
	}
	if cfg.Addr == "" {
		return sshx.Config{}, errors.New("the instance has no address")
	}
	if c.UseStaticCredentials || cfg.User == "" {
		cfg.User = c.Username
	}
	if c.UseStaticCredentials || (cfg.Password == "" && len(cfg.Key) == 0) {
		cfg.Password, cfg.Key = c.Password, nil
		if c.KeyPath != "" {
			key, err := os.ReadFile(c.KeyPath)
			if err != nil {
				return sshx.Config{}, fmt.Errorf("connector key_path: %w", err)
			}
			cfg.Key = key
		}
	}
	return cfg, nil
}

// afterClose calls fn once ch is closed; the returned stop ends the wait.
func afterClose(ch <-chan struct{}, fn func()) (stop func() bool) {
	done := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-ch:
			fn()
		case <-done:
		}
	}()
	return func() bool {
		stopped := false
		once.Do(func() { close(done); stopped = true })
		return stopped
	}
}

// Run runs one stage script on the instance, its output streaming to the
// trace. A non-zero exit is a *executor.BuildError. When ctx is cancelled
// the stage's process group gets SIGTERM, then SIGKILL after the grace
// period, and Run returns ctx.Err() wrapped once the stage's session has
// ended. A lost instance or connection is an error wrapping
// ErrInstanceLost. The stages of a resumable job run detached (see the
// package doc): the same results, and a stage whose processes are gone
// without an exit status is an error wrapping executor.ErrStageVanished.
func (e *Executor) Run(ctx context.Context, cmd executor.Command) error {
	e.mu.Lock()
	if e.client == nil || e.scriptDir == "" {
		e.mu.Unlock()
		return errors.New("instance executor: Run before Prepare")
	}
	if e.det != nil {
		e.mu.Unlock()
		return e.runDetached(ctx, cmd, detached.StartFresh, 0)
	}
	e.runs++
	files := filesOf(e.scriptDir, e.runs)
	client, acq, sh, paths, trace, grace, logger, clk := e.client, e.acq, e.shell, e.paths, e.trace, e.GracePeriod, e.logger, e.clock
	e.mu.Unlock()

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	if err := e.lostErr(client, acq); err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	s, err := client.Session()
	if err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, e.connErr(client, acq, err))
	}
	defer s.Close()
	setup := &limitedBuffer{max: 4096}
	s.Stdin = io.MultiReader(strings.NewReader(stageHeader(files)), strings.NewReader(cmd.Script))
	s.Stdout, s.Stderr = trace, setup
	if err := s.Start(shCommand(runScript(sh, e.prov.opts.LoginShell, paths.ProjectDir, files))); err != nil {
		return fmt.Errorf("%s: start: %w", cmd.Stage, e.connErr(client, acq, err))
	}
	logger.Debug("stage started", "stage", cmd.Stage)
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()

	var waitErr error
	canceled := false
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		canceled = true
		waitErr = stop(client, files, grace, done, s, clk, logger)
	}
	logger.Debug("stage ended", "stage", cmd.Stage, "err", waitErr, "canceled", canceled)
	if canceled {
		return fmt.Errorf("%s: %w", cmd.Stage, ctx.Err())
	}
	if waitErr == nil {
		return nil
	}
	var ee *ssh.ExitError
	if errors.As(waitErr, &ee) {
		if msg := strings.TrimSpace(setup.String()); msg != "" {
			return fmt.Errorf("%s: on instance %s: %s (exit status %d)", cmd.Stage, acq.InstanceID(), msg, ee.ExitStatus())
		}
		if ee.Signal() != "" {
			// The wrapper itself was killed: not the script's doing.
			return fmt.Errorf("%s: stage wrapper killed by SIG%s: %w", cmd.Stage, ee.Signal(), e.connErr(client, acq, waitErr))
		}
		return &executor.BuildError{ExitCode: ee.ExitStatus()}
	}
	// No exit status: the session's channel died with the connection,
	// which the client may notice a moment after the session does.
	select {
	case <-client.Done():
	case <-acq.Lost():
	case <-clk.After(connWait):
	}
	if err := e.lostErr(client, acq); err != nil {
		return fmt.Errorf("%s: %w", cmd.Stage, err)
	}
	return fmt.Errorf("%s: instance %s: %w: %w", cmd.Stage, acq.InstanceID(), ErrInstanceLost, waitErr)
}

// stop escalates on a cancelled stage: SIGTERM to its group, the grace
// period, SIGKILL, then a bounded wait for its session to end.
func stop(client *sshx.Client, files stageFiles, grace time.Duration, done <-chan error, s *ssh.Session, clk clock.Clock, logger *slog.Logger) error {
	// The stage's context is over; the stop commands get their own.
	signal := func(sig string) {
		ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
		defer cancel()
		if _, err := client.Output(ctx, shCommand(stopScript(files, sig)), nil); err != nil {
			logger.Warn("cannot signal the stage on the instance", "signal", sig, "err", err)
		}
	}
	signal("TERM")
	t := clk.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C():
	}
	signal("KILL")
	t.Reset(drainTimeout)
	select {
	case err := <-done:
		return err
	case <-t.C():
		// Something outside the group holds the session's output open.
		s.Close()
		return <-done
	}
}

// lostErr reports a lost instance or a dead connection.
func (e *Executor) lostErr(client *sshx.Client, acq Acquired) error {
	select {
	case <-acq.Lost():
		return fmt.Errorf("instance %s: %w", acq.InstanceID(), ErrInstanceLost)
	default:
	}
	if err := client.Err(); err != nil {
		return fmt.Errorf("instance %s: %w: %w", acq.InstanceID(), ErrInstanceLost, err)
	}
	return nil
}

// connErr explains a session failure: the instance or connection lost, or
// err itself.
func (e *Executor) connErr(client *sshx.Client, acq Acquired, err error) error {
	if lerr := e.lostErr(client, acq); lerr != nil {
		return lerr
	}
	return err
}

// Finish records the build's end.
func (e *Executor) Finish(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.finished = err
}

// Cleanup removes the job's scripts from the instance (for a resumable
// job, after stopping whatever of its stages still runs there), keeps the
// connection for the host's next job (or closes it) and gives the slot
// back. The project directory stays, so that the fetch strategy can reuse
// the checkout. It is safe after a failed or skipped Prepare, and more
// than once.
func (e *Executor) Cleanup(ctx context.Context) {
	e.mu.Lock()
	if e.cleanedUp {
		e.mu.Unlock()
		return
	}
	det, dir, grace := e.det, e.scriptDir, e.GracePeriod
	e.mu.Unlock()
	if det != nil && dir != "" {
		// Made again if it ended: a detached stage may still run.
		_, _ = e.connection(ctx)
	}
	e.mu.Lock()
	e.cleanedUp = true
	client, l, release, stopLost, logger, key, acq := e.client, e.lease, e.release, e.stopLostFn, e.logger, e.connKey, e.acq
	e.mu.Unlock()
	if stopLost != nil {
		stopLost()
	}
	lost := false
	if acq != nil {
		select {
		case <-acq.Lost():
			lost = true // its connection is closed, or about to be
		default:
		}
	}
	if client != nil {
		// A lost instance is left alone even while its connection still
		// answers (it is closed a moment after Lost): its stages belong to
		// whichever manager resumes the job.
		if dir != "" && !lost && client.Err() == nil {
			script, timeout := cleanupScript(dir), controlTimeout
			if det != nil {
				script, timeout = stopDirsScript(grace, dir), controlTimeout+grace
			}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			out, err := client.Output(cctx, shCommand(script), nil)
			cancel()
			if err != nil {
				logger.Warn("cannot remove the job's scripts from the instance", "dir", dir, "err", err)
			} else if len(out) > 0 {
				logger.Info("stopped what the job's stages left running on the instance", "dir", dir, "stopped", strings.TrimSpace(string(out)))
			}
		}
		if lost || dir == "" {
			client.Close()
		} else {
			// The next job on this host skips the connect.
			e.conns.put(key, client)
		}
	}
	switch {
	case release != nil:
		release()
	case l != nil:
		l.Release()
	}
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
