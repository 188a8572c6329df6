package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
)

// A job's build and helper containers idle in a shell that reads its
// standard input (bootScript, idleCmd: OpenStdin, no TTY). A stage of a
// job that is not resumable is run by that shell: the executor attaches
// to the container once and writes each stage's command to the shell's
// input, and the stage's output comes back on the container's output
// stream, ended by a line that carries its exit code. An exec per stage
// costs the engine a process of runc's and several API calls; on a 2-core
// machine, where the engine's own work bounds how many jobs run per
// second, it was about a quarter of the engine time of a whole
// `docker run --rm` (measured: 120 against 460 ms of CPU of dockerd,
// containerd and their shims). A shell session is used only where it runs
// a stage as an exec would: the stage's user is the container's and no
// image entrypoint stands between the container's first process and the
// idle shell (stageEntrypoint), else the stage is an exec as before.

// errSessionEnded is returned (wrapped) by a session's run when the
// container's output stream ended before the stage's end line came: the
// container stopped, or the engine's connection went away.
var errSessionEnded = errors.New("the container's shell session ended")

// shellSession is one container's idle shell, driven through the
// container's attached standard input; stages run one at a time.
type shellSession struct {
	conn  types.HijackedResponse
	token string    // random: the stage's end marker and here-document delimiter
	act   *activity // reads of the stream, for watchStream

	run sync.Mutex // one stage at a time

	mu     sync.Mutex
	sink   io.Writer // the current stage's output; nil between stages
	broken bool      // a stage was given up on before its end line: not used again
	ends   chan int  // the current stage's exit code
	done   chan struct{}
	err    error // why the stream ended (nil: it ended cleanly), after done
}

// attachSession attaches to container cid's standard input and output
// and starts reading its output.
func (e *Executor) attachSession(ctx context.Context, cid string) (*shellSession, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	// The hijacked connection outlives the call's context: the session
	// lasts as long as the container (Cleanup closes it).
	hj, err := e.eng.ContainerAttach(context.WithoutCancel(ctx), cid, container.AttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("attach to the container's shell: %w", err)
	}
	s := &shellSession{conn: hj, token: hex.EncodeToString(tok[:]), ends: make(chan int, 1), done: make(chan struct{})}
	s.act = newActivity(hj.Reader)
	out := &endScanner{marker: []byte("\x1fdrover-stage-end:" + s.token + ":"), s: s}
	go func() {
		_, err := demux(out, sessionErr{s}, s.act)
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	}()
	return s, nil
}

// close ends the session: the connection goes, the idle shell stays (its
// input stays open: the container was made with StdinOnce false).
func (s *shellSession) close() { s.conn.Close() }

// stageCommand is what the idle shell is given for one stage: wrapper,
// a script for sh -c, gets the stage's script on its standard input (a
// here-document), and the exit status of sh follows the stage's output
// behind the end marker.
func (s *shellSession) stageCommand(wrapper, script string) string {
	var b strings.Builder
	delim := "DROVER_STAGE_" + s.token
	fmt.Fprintf(&b, "sh -c %s <<'%s'\n", quote(wrapper), delim)
	b.WriteString(script)
	if !strings.HasSuffix(script, "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%s\nprintf '\\037drover-stage-end:%s:%%d\\n' \"$?\"\n", delim, s.token)
	return b.String()
}

// runStage has the idle shell run wrapper with script on its standard
// input, copies what it prints to w, and returns its exit code. When ctx
// ends, onCancel is called to end the stage, whose output is copied to
// its end (for drainTimeout at most), and ctx.Err() is returned. probe
// says whether the stage has ended, for the watch of a silent stream
// (watchStream).
func (e *Executor) runStage(ctx context.Context, s *shellSession, wrapper, script string, w io.Writer, onCancel func(), probe func(context.Context) (bool, error)) (code int, err error) {
	defer func(start time.Time) { spanOf(e.eng, spanSession, start, err) }(time.Now())
	s.run.Lock()
	defer s.run.Unlock()
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		return -1, s.ended()
	default:
	}
	s.sink = w
	select {
	case <-s.ends: // an end line of an earlier stage that was given up on
	default:
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.sink = nil
		s.mu.Unlock()
	}()
	if _, err := io.WriteString(s.conn.Conn, s.stageCommand(wrapper, script)); err != nil {
		return -1, fmt.Errorf("write the stage to the container's shell: %w", err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	lost := e.watchStream(wctx, s.act, probe)
	select {
	case code := <-s.ends:
		return code, nil
	case <-s.done:
		return -1, s.ended()
	case err := <-lost:
		s.giveUp()
		return -1, fmt.Errorf("shell session: %w", err)
	case <-ctx.Done():
		onCancel()
		select {
		case <-s.ends:
		case <-s.done:
		case <-time.After(drainTimeout):
			s.giveUp()
		}
		return -1, ctx.Err()
	}
}

// giveUp ends a session whose stage was given up on before its end line
// came: a later end line would be taken for the next stage's, so the next
// stage in the container attaches anew (with another marker).
func (s *shellSession) giveUp() {
	s.mu.Lock()
	s.broken = true
	s.mu.Unlock()
	s.close()
}

// usable reports whether the session can run another stage.
func (s *shellSession) usable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return false
	default:
	}
	return !s.broken
}

// ended is the error of a stage whose session's stream ended.
func (s *shellSession) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return fmt.Errorf("%w: %v", errSessionEnded, s.err)
	}
	return errSessionEnded
}

// write copies output to the current stage's sink.
func (s *shellSession) write(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sink != nil {
		_, _ = s.sink.Write(p)
	}
}

// sessionErr is the container's standard error: what the idle shell
// itself says (a stage's own stderr goes to its stdout).
type sessionErr struct{ s *shellSession }

func (w sessionErr) Write(p []byte) (int, error) {
	w.s.write(p)
	return len(p), nil
}

// endScanner passes the container's standard output to the session's
// current stage, and finds in it the end lines (marker, exit status,
// newline) the idle shell prints after each stage. It holds back only
// bytes that may begin a marker, so a stage's output reaches the trace as
// it comes.
type endScanner struct {
	marker  []byte
	s       *shellSession
	pending []byte
}

func (sc *endScanner) Write(p []byte) (int, error) {
	sc.pending = append(sc.pending, p...)
	for {
		i := bytes.Index(sc.pending, sc.marker)
		if i < 0 {
			keep := partialSuffix(sc.pending, sc.marker)
			if n := len(sc.pending) - keep; n > 0 {
				sc.s.write(sc.pending[:n])
				sc.pending = append(sc.pending[:0], sc.pending[n:]...)
			}
			return len(p), nil
		}
		if i > 0 {
			sc.s.write(sc.pending[:i])
		}
		rest := sc.pending[i+len(sc.marker):]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			sc.pending = append(sc.pending[:0], sc.pending[i:]...)
			return len(p), nil
		}
		code, err := strconv.Atoi(string(rest[:nl]))
		if err != nil {
			code = -1
		}
		sc.s.mu.Lock()
		select {
		case sc.s.ends <- code:
		default:
		}
		sc.s.mu.Unlock()
		sc.pending = append(sc.pending[:0], rest[nl+1:]...)
	}
}

// partialSuffix is the length of the longest suffix of b that is a
// proper prefix of marker.
func partialSuffix(b, marker []byte) int {
	if i := bytes.LastIndexByte(b, marker[0]); i < 0 || len(b)-i >= len(marker) {
		return 0 // no marker's first byte among the last len(marker)-1
	}
	for n := min(len(b), len(marker)-1); n > 0; n-- {
		if bytes.HasSuffix(b, marker[:n]) {
			return n
		}
	}
	return 0
}

// session returns the shell session of container cid, attached the first
// time, or nil when its stages are execs: cid is neither the build nor the
// helper container, an image entrypoint runs before its idle shell (a
// build stage's shell runs under the entrypoint, stageEntrypoint), or the
// attach failed (then the stages are execs, as before).
func (e *Executor) session(ctx context.Context, cid string) *shellSession {
	e.mu.Lock()
	plain := cid == e.build && e.userEntry == nil || cid == e.helper && e.plainHelper
	if !plain || e.noSession[cid] {
		e.mu.Unlock()
		return nil
	}
	if s := e.sessions[cid]; s != nil && s.usable() {
		e.mu.Unlock()
		return s
	}
	e.mu.Unlock()
	s, err := e.attachSession(ctx, cid)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.logger.Warn("running the job's stages by exec", "container", shortID(cid), "err", err)
		if e.noSession == nil {
			e.noSession = map[string]bool{}
		}
		e.noSession[cid] = true
		return nil
	}
	if e.sessions == nil {
		e.sessions = map[string]*shellSession{}
	}
	e.sessions[cid] = s
	return s
}

// closeSessionsLocked closes the job's shell sessions (e.mu held).
func (e *Executor) closeSessionsLocked() {
	for cid, s := range e.sessions {
		s.close()
		delete(e.sessions, cid)
	}
}
