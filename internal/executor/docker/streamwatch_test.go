package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	dockerclient "github.com/docker/docker/client"

	"github.com/drover-ci/drover/internal/dockerimage"
)

// cutEngine is the real engine whose exec streams go silent, without
// ending, once a line holding cutAfter came: a link to the engine that
// died without closing.
type cutEngine struct {
	Engine
	cutAfter string
}

func (c *cutEngine) ContainerAttach(ctx context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error) {
	return c.cut(c.Engine.ContainerAttach(ctx, id, opts))
}

func (c *cutEngine) ContainerExecAttach(ctx context.Context, id string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	return c.cut(c.Engine.ContainerExecAttach(ctx, id, opts))
}

// cut makes a stream go silent once cutAfter came on it.
func (c *cutEngine) cut(hj types.HijackedResponse, err error) (types.HijackedResponse, error) {
	if err != nil || c.cutAfter == "" {
		return hj, err
	}
	conn := &cutConn{Conn: hj.Conn, closed: make(chan struct{})}
	return types.HijackedResponse{Conn: conn, Reader: bufio.NewReader(&cutReader{r: hj.Reader, after: c.cutAfter, conn: conn})}, nil
}

type cutConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *cutConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

type cutReader struct {
	r     io.Reader
	after string
	seen  bytes.Buffer
	conn  *cutConn
}

func (c *cutReader) Read(p []byte) (int, error) {
	if strings.Contains(c.seen.String(), c.after) {
		<-c.conn.closed // silent until the reader gives up
		return 0, net.ErrClosed
	}
	n, err := c.r.Read(p)
	c.seen.Write(p[:n])
	return n, err
}

// startTestContainer creates and starts a container of the busybox test
// image with cfg (its image and labels set here), removed when the test
// ends.
func startTestContainer(t *testing.T, cli *dockerclient.Client, cfg *container.Config) container.CreateResponse {
	t.Helper()
	cfg.Image, cfg.Labels = dockerimage.TestImageBusybox, dockerimage.TestImageLabels()
	created, err := cli.ContainerCreate(t.Context(), cfg, &container.HostConfig{}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(t.Context(), created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return created
}

// TestExecStreamLost: an exec whose stream goes silent without ending
// (the link died) is given up once the engine says its process ended and
// the grace passed: exec returns errStreamLost with what came before the
// cut, instead of waiting for the job's timeout. A healthy stream that is
// silent for longer than the probe interval is left alone.
func TestExecStreamLost(t *testing.T) {
	cli := realEngine(t)
	ctx := t.Context()
	created := startTestContainer(t, cli, &container.Config{Cmd: []string{"sleep", "3600"}})
	script := []string{"sh", "-c", "echo start; sleep 1; echo end"}

	t.Run("healthy stream silent past the probe", func(t *testing.T) {
		e := &Executor{eng: &cutEngine{Engine: cli}, streamProbe: 100 * time.Millisecond, streamGrace: 5 * time.Second}
		var out bytes.Buffer
		code, err := e.exec(ctx, created.ID, "", script, nil, &out, &out, nil)
		if err != nil || code != 0 || out.String() != "start\nend\n" {
			t.Fatalf("exec = %d, %v, output %q; want 0 and both lines", code, err, out.String())
		}
	})
	t.Run("stream cut", func(t *testing.T) {
		e := &Executor{eng: &cutEngine{Engine: cli, cutAfter: "start"}, streamProbe: 100 * time.Millisecond, streamGrace: 300 * time.Millisecond}
		var out bytes.Buffer
		code, err := e.exec(ctx, created.ID, "", script, nil, &out, &out, nil)
		if !errors.Is(err, errStreamLost) || code != -1 {
			t.Fatalf("exec = %d, %v; want errStreamLost", code, err)
		}
		if got := out.String(); got != "start\n" {
			t.Errorf("output = %q, want what came before the cut", got)
		}
	})
}

// TestSessionStreamLost: a shell session whose stream goes silent without
// ending is given up as an exec's is (errStreamLost, with what came
// before the cut), and the session is not used again: a late end line of
// the lost stage must not end the next one. The next stage attaches anew.
func TestSessionStreamLost(t *testing.T) {
	cli := realEngine(t)
	ctx := t.Context()
	created := startTestContainer(t, cli, &container.Config{Cmd: idleCmd, OpenStdin: true})
	const wrapper = "cat > /tmp/stage || exit\necho $$ > /tmp/pid\nsh /tmp/stage </dev/null 2>&1\nexit $?\n"
	e := &Executor{eng: &cutEngine{Engine: cli, cutAfter: "start"}, streamProbe: 100 * time.Millisecond, streamGrace: 300 * time.Millisecond}
	probe := func(ctx context.Context) (bool, error) {
		c, err := e.exec(ctx, created.ID, "", []string{"sh", "-c", `kill -0 "$(cat /tmp/pid)"`}, nil, io.Discard, io.Discard, nil)
		return err == nil && c != 0, err
	}
	s, err := e.attachSession(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code, err := e.runStage(ctx, s, wrapper, "echo start; sleep 1; echo end", &out, func() {}, probe)
	if !errors.Is(err, errStreamLost) || code != -1 {
		t.Fatalf("runStage = %d, %v; want errStreamLost", code, err)
	}
	if got := out.String(); got != "start\n" {
		t.Errorf("output = %q, want what came before the cut", got)
	}
	if s.usable() {
		t.Error("the session whose stage was lost is still usable")
	}

	healthy := &Executor{eng: cli}
	s2, err := healthy.attachSession(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.close()
	out.Reset()
	code, err = healthy.runStage(ctx, s2, wrapper, "echo next; exit 5", &out, func() {}, probe)
	if err != nil || code != 5 || out.String() != "next\n" {
		t.Errorf("the next stage = %d, %v, output %q; want 5 and its own line", code, err, out.String())
	}
}

// TestWatchStreamSlowAnswer: an engine slower to answer whether the
// process ended than the probe interval (a busy engine, a short probe)
// still gets its answer heard: the watch concludes the stream is lost
// instead of cutting every question short and waiting forever (the hang
// TestSessionStreamLost met on a loaded machine).
func TestWatchStreamSlowAnswer(t *testing.T) {
	e := &Executor{streamProbe: 20 * time.Millisecond, streamGrace: 20 * time.Millisecond}
	act := newActivity(strings.NewReader(""))
	cut := make(chan struct{})
	var cuts atomic.Int32
	ended := func(ctx context.Context) (bool, error) {
		select {
		case <-time.After(200 * time.Millisecond): // the engine's answer
			return true, nil
		case <-ctx.Done():
			if cuts.Add(1) == 3 {
				close(cut)
			}
			return false, ctx.Err()
		}
	}
	select {
	case err := <-e.watchStream(t.Context(), act, ended):
		if !errors.Is(err, errStreamLost) {
			t.Fatalf("watchStream = %v, want errStreamLost", err)
		}
	case <-cut:
		t.Fatal("every question to the engine was cut short by the probe interval: the process's end is never seen")
	}
}
