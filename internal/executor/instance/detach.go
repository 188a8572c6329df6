package instance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/executor/detached"
	"github.com/drover-ci/drover/internal/sshx"
)

// sshTarget is a job's host (an autoscaled instance, the ssh executor's
// host, a VM guest) as the detached mechanism reaches it: every operation
// is one session on the job's SSH connection, which is made again when it
// ended (a resumable job's stages do not depend on it).
type sshTarget struct {
	conn  func(ctx context.Context) (*sshx.Client, error)
	tool  detached.Tool
	grace time.Duration
	// gone says why the stage's host is gone ("" while it is there): the
	// pool reported the instance lost.
	gone func() string
}

var (
	_ detached.Target       = (*sshTarget)(nil)
	_ detached.WriteStarter = (*sshTarget)(nil)
	_ detached.Explainer    = (*sshTarget)(nil)
)

// WriteFile stores data as name on the host, in one session.
func (t *sshTarget) WriteFile(ctx context.Context, name string, data []byte) error {
	c, err := t.conn(ctx)
	if err != nil {
		return err
	}
	if _, err := c.Output(ctx, shCommand("cat > "+quote(name)), bytes.NewReader(data)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// Start starts `sh -c script` on the host so that it outlives the session,
// the connection and the manager: in a session of its own (setsid), its
// standard streams away from the connection. When the script is done, what
// it left in its process group is killed, so that a stage never outlives
// its script (background children are gone once the stage ended, as in the
// attached path). Without setsid(1) on the host, nohup(1) keeps it from
// the connection's hangup and nothing is killed after it.
func (t *sshTarget) Start(ctx context.Context, script string) error {
	c, err := t.conn(ctx)
	if err != nil {
		return err
	}
	if _, err := c.Output(ctx, shCommand(startScript(script)), nil); err != nil {
		return fmt.Errorf("start the stage's wrapper: %w", err)
	}
	return nil
}

// WriteStart stores data as name and starts script (as Start) in one
// session, once all of data arrived (detached.StoreStart).
func (t *sshTarget) WriteStart(ctx context.Context, name string, data []byte, script string) error {
	c, err := t.conn(ctx)
	if err != nil {
		return err
	}
	cmd := detached.StoreStart(quote(name), len(data), startScript(script))
	if _, err := c.Output(ctx, shCommand(cmd), bytes.NewReader(data)); err != nil {
		return fmt.Errorf("store %s and start the stage's wrapper: %w", name, err)
	}
	return nil
}

// startScript is the session command of Start. The outer sh leads the
// new session and process group; the wrapper (whose pid the stage's pid
// file holds) is its child, so the group kill after it ends takes what
// the stage left and nothing else.
func startScript(script string) string {
	return fmt.Sprintf(`s=%s
if command -v setsid >/dev/null 2>&1; then
	setsid sh -c 'sh -c "$1"; kill -KILL 0' sh "$s" </dev/null >/dev/null 2>&1 &
else
	nohup sh -c "$s" </dev/null >/dev/null 2>&1 &
fi
`, quote(script))
}

// Exec runs argv on the host, attached, and returns its exit code. It
// returns only once everything the command wrote is copied, so that a
// follower started again after it never doubles output.
func (t *sshTarget) Exec(ctx context.Context, argv []string, stdout, stderr io.Writer) (int, error) {
	c, err := t.conn(ctx)
	if err != nil {
		return -1, err
	}
	s, err := c.Session()
	if err != nil {
		return -1, err
	}
	defer s.Close()
	s.Stdout, s.Stderr = stdout, stderr
	if err := s.Start(shWords(argv)); err != nil {
		return -1, fmt.Errorf("start %s: %w", argv[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// Best effort: servers that take signal requests end the command
		// at once; a follower left behind ends with its stage.
		_ = s.Signal(ssh.SIGKILL)
		s.Close()
		<-done
		return -1, ctx.Err()
	case <-c.Done():
		s.Close()
		<-done
		return -1, c.Err()
	}
	if err == nil {
		return 0, nil
	}
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return ee.ExitStatus(), nil
	}
	if cerr := c.Err(); cerr != nil {
		return -1, cerr
	}
	return -1, err
}

// Stop stops run f's processes with the tool's stop (SIGTERM, the grace
// period, SIGKILL); the wrapper then writes the exit status.
func (t *sshTarget) Stop(ctx context.Context, f detached.Files) error {
	out := &limitedBuffer{max: 4096}
	code, err := t.Exec(ctx, t.tool.Stop(f, t.grace), out, out)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("stop the stage: exit status %d: %s", code, strings.TrimSpace(out.String()))
	}
	return nil
}

// Gone explains a lost instance.
func (t *sshTarget) Gone(context.Context) string {
	if t.gone == nil {
		return ""
	}
	return t.gone()
}

// shWords is argv as one command line for the login shell: each word
// single-quoted.
func shWords(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = quote(a)
	}
	return strings.Join(q, " ")
}
