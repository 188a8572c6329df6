package docker

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/dockerimage"
	"github.com/drover-ci/drover/internal/executor"
	"github.com/drover-ci/drover/internal/executor/executortest"
)

// scan feeds chunks to an endScanner of a session with marker token
// "tok" and returns what reached the stage's sink and the exit codes
// found, in order.
func scan(chunks []string) (string, []int) {
	s := &shellSession{ends: make(chan int, 1), done: make(chan struct{})}
	var out bytes.Buffer
	s.sink = &out
	sc := &endScanner{marker: []byte("\x1fdrover-stage-end:tok:"), s: s}
	var codes []int
	for _, c := range chunks {
		_, _ = sc.Write([]byte(c))
		select {
		case code := <-s.ends:
			codes = append(codes, code)
		default:
		}
	}
	return out.String(), codes
}

func TestEndScanner(t *testing.T) {
	const end = "\x1fdrover-stage-end:tok:"
	for _, tc := range []struct {
		name   string
		chunks []string
		out    string
		codes  []int
	}{
		{"output then end", []string{"hello\n", end + "0\n"}, "hello\n", []int{0}},
		{"in one write", []string{"hi\n" + end + "3\n"}, "hi\n", []int{3}},
		{"no newline before the end", []string{"no newline" + end + "1\n"}, "no newline", []int{1}},
		{"end split byte by byte", strings.Split("out"+end+"42\n", ""), "out", []int{42}},
		{"end split before its code", []string{"x" + end, "12", "7\n"}, "x", []int{127}},
		{"a unit separator that is not an end", []string{"a\x1fb\n"}, "a\x1fb\n", nil},
		{"a marker's prefix that is not one", []string{"a\x1fdrover-stage", "-end:other:0\n"}, "a\x1fdrover-stage-end:other:0\n", nil},
		{"output after the end", []string{end + "0\nlate\n"}, "late\n", []int{0}},
		{"an unreadable code", []string{end + "x\n"}, "", []int{-1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, codes := scan(tc.chunks)
			if out != tc.out {
				t.Errorf("output %q, want %q", out, tc.out)
			}
			if len(codes) != len(tc.codes) || (len(codes) > 0 && codes[0] != tc.codes[0]) {
				t.Errorf("codes %v, want %v", codes, tc.codes)
			}
		})
	}
}

// TestEndScannerHoldsOnlyAPrefix: output is not held back unless it may
// be the start of an end line, so a stage's last words reach the trace
// while it is still running.
func TestEndScannerHoldsOnlyAPrefix(t *testing.T) {
	out, _ := scan([]string{"waiting for the database..."})
	if out != "waiting for the database..." {
		t.Errorf("passed on %q before the stage's end", out)
	}
	out, _ = scan([]string{"abc\x1fdrover"})
	if out != "abc" {
		t.Errorf("passed on %q of a possible end line's start", out)
	}
}

func TestStageCommand(t *testing.T) {
	s := &shellSession{token: "tok"}
	got := s.stageCommand("cat > f\n", "echo it's\n")
	want := "sh -c 'cat > f\n' <<'DROVER_STAGE_tok'\necho it's\nDROVER_STAGE_tok\nprintf '\\037drover-stage-end:tok:%d\\n' \"$?\"\n"
	if got != want {
		t.Errorf("stage command:\n%q\nwant\n%q", got, want)
	}
	if got := s.stageCommand("w", "no newline"); !strings.Contains(got, "no newline\nDROVER_STAGE_tok\n") {
		t.Errorf("a script without a final newline does not end before the delimiter: %q", got)
	}
}

// FuzzEndScanner: for any output and any split of it into writes, what
// reaches the sink is the output with the end lines taken out, and every
// end line gives its code.
func FuzzEndScanner(f *testing.F) {
	f.Add("hello\n", 3, uint8(0))
	f.Add("a\x1fb", 1, uint8(7))
	f.Add("\x1fdrover-stage-end:to", 5, uint8(255))
	f.Fuzz(func(t *testing.T, text string, split int, code uint8) {
		const end = "\x1fdrover-stage-end:tok:"
		if strings.Contains(text, end) {
			t.Skip()
		}
		input := text + end + strconv.Itoa(int(code)) + "\n" + text
		if split <= 0 {
			split = 1
		}
		var chunks []string
		for len(input) > 0 {
			n := min(split, len(input))
			chunks = append(chunks, input[:n])
			input = input[n:]
		}
		out, codes := scan(chunks)
		// The second copy of text may be held back only where it could
		// start an end line.
		if !strings.HasPrefix(out, text) || len(codes) != 1 || codes[0] != int(code) {
			t.Fatalf("output %q codes %v for text %q code %d", out, codes, text, code)
		}
		rest := out[len(text):]
		if !strings.HasPrefix(text, rest) || len(text)-len(rest) >= len(end) {
			t.Fatalf("after the end, %q of %q passed on", rest, text)
		}
	})
}

// countingEngine counts the execs and attaches a job asks the engine for.
type countingEngine struct {
	Engine
	execs, attaches atomic.Int64
}

func (c *countingEngine) ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	c.execs.Add(1)
	return c.Engine.ContainerExecCreate(ctx, id, opts)
}

func (c *countingEngine) ContainerAttach(ctx context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error) {
	c.attaches.Add(1)
	return c.Engine.ContainerAttach(ctx, id, opts)
}

// TestShellSessionStages: on the real engine, a job that is not
// resumable has its build container's stages run by the container's idle
// shell, with no exec: output with and without a final newline, a stage
// whose commands read stdin (they get none: the shell's own input is not
// theirs), exit codes, a script with quotes and here-documents, a long
// output, after_script in the same container, the helper container's
// stages in its own session; and a container killed
// under a stage ends it as a vanished stage, not a hang.
func TestShellSessionStages(t *testing.T) {
	cli := realEngine(t)
	token := "sess" + randomHex(t, 4)
	t.Cleanup(func() { removeRunnerVolumes(t, cli, token) })
	cfg := parseDockerTable(t, "[runners.docker]\npull_policy = \"if-not-present\"\nhelper_image = \""+dockerimage.TestImageBusybox+"\"\n")
	eng := &countingEngine{Engine: cli}
	p, err := NewProvider(Options{Lookup: func(executor.Settings) (*Config, error) { return cfg, nil }, Dialer: fixedDialer{eng}})
	if err != nil {
		t.Fatal(err)
	}
	job := &api.JobResponse{ID: 990300, Token: "sess-token", JobInfo: api.JobInfo{ProjectID: 42, ProjectFullPath: "g/p"},
		Image: api.Image{Name: dockerimage.TestImageBusybox}}
	ex := p.Create().(*Executor)
	trace := &executortest.Trace{}
	ctx := t.Context()
	if err := ex.Prepare(ctx, executor.PrepareOptions{Job: job, Settings: executor.Settings{ShortToken: token, SystemID: "s_sess", RunnerName: "sess"}, Trace: trace}); err != nil {
		t.Fatalf("Prepare = %v\n%s", err, trace)
	}
	t.Cleanup(func() { cleanupJob(t, ex, p) })
	execsBefore := eng.execs.Load()
	for _, tc := range []struct {
		name   string
		stage  executor.Stage
		script string
		out    string // the stage's output contains it
		code   int
	}{
		{"output", executor.StageStepScript, "echo one\nprintf 'no newline'", "one\nno newline", 0},
		{"stdin is not the shell's", executor.StageStepScript, "cat\nread x || echo no-input\necho after", "no-input\nafter\n", 0},
		{"exit code", executor.StageStepScript, "echo failing\nexit 3\n", "failing\n", 3},
		{"quotes and a here-document", executor.StageStepScript, "echo 'it'\"'\"'s'\ncat <<'EOF'\n$HOME stays\nEOF\n", "it's\n$HOME stays\n", 0},
		{"long output", executor.StageStepScript, "seq 1 20000\n", "\n19999\n20000\n", 0},
		{"after_script", executor.StageAfterScript, "echo after the script; ls -d \"$PWD\"", "after the script\n", 0},
		{"a stage of the helper container", executor.StageArchiveCache, "echo in the helper\nexit 4\n", "in the helper\n", 4},
		{"the helper's next stage", executor.StageUploadArtifacts, "echo uploading", "uploading\n", 0},
	} {
		before := len(trace.String())
		err := ex.Run(ctx, executor.Command{Stage: tc.stage, Script: tc.script})
		out := trace.String()[before:]
		var be *executor.BuildError
		switch {
		case tc.code == 0 && err != nil:
			t.Errorf("%s: Run = %v\n%s", tc.name, err, out)
		case tc.code != 0 && (!errors.As(err, &be) || be.ExitCode != tc.code):
			t.Errorf("%s: Run = %v, want exit code %d", tc.name, err, tc.code)
		}
		if !strings.Contains(out, tc.out) {
			t.Errorf("%s: the stage's output %q lacks %q", tc.name, out, tc.out)
		}
	}
	if n := eng.execs.Load() - execsBefore; n != 0 {
		t.Errorf("%d execs for the stages, want none (the idle shell runs them)", n)
	}
	if n := eng.attaches.Load(); n != 2 {
		t.Errorf("%d attaches, want one for the build container, one for the helper", n)
	}

	// A container killed under a stage.
	ex.mu.Lock()
	build := ex.build
	ex.mu.Unlock()
	done := make(chan error, 1)
	before := len(trace.String())
	go func() {
		done <- ex.Run(ctx, executor.Command{Stage: executor.StageStepScript, Script: "echo ready\nsleep 600\n"})
	}()
	for !strings.Contains(trace.String()[before:], "ready\n") {
		select {
		case err := <-done:
			t.Fatalf("the stage ended before it said ready: %v\n%s", err, trace.String()[before:])
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cli.ContainerKill(ctx, build, "KILL"); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if !errors.Is(err, executor.ErrStageVanished) && !errors.Is(err, executor.ErrEnvironmentLost) {
		t.Errorf("Run under a killed container = %v, want a vanished stage or a lost environment", err)
	}
}
