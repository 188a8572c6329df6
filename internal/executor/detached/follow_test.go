package detached

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/helper"
)

// runFile is the content of one run's files before a follower starts:
// nil is a file that does not exist.
type runFile struct {
	log, exit []byte
	gone      bool
	claimed   bool // the claim directory exists
	pid       int  // written to the pid file when not 0
}

// followCase is a run's files and what a follower is asked.
type followCase struct {
	name string
	runFile
	args FollowArgs // Files is filled in
}

// setUp writes the files of c in a new directory and returns them.
func (c runFile) setUp(t testing.TB) Files {
	f := FilesOf(t.TempDir(), 1)
	write := func(p string, b []byte) {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if c.log != nil {
		write(f.Log, c.log)
	}
	if c.exit != nil {
		write(f.Exit, c.exit)
	}
	if c.gone {
		write(f.Gone, nil)
	}
	if c.claimed {
		if err := os.Mkdir(f.Claim, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if c.pid != 0 {
		write(f.PID, []byte(strconv.Itoa(c.pid)+"\n"))
	}
	return f
}

// followWith runs tool's follower of a on files f (on the local target):
// its stdout, its status (stderr) and exit code.
func followWith(t testing.TB, l *localTarget, tool Tool, a FollowArgs) (out []byte, status string, code int) {
	var stdout, stderr bytes.Buffer
	code, err := l.Exec(context.Background(), tool.Follow(a), &stdout, &stderr)
	if err != nil {
		t.Fatalf("%T follower: %v", tool, err)
	}
	return stdout.Bytes(), stderr.String(), code
}

// agree runs the helper's follower and the sh follower (on target l) on
// two copies of c's files and fails unless they copy the same bytes, say
// the same status and leave the claim alike.
func agree(t testing.TB, l *localTarget, c runFile, a FollowArgs) {
	fh, fs := c.setUp(t), c.setUp(t)
	a.Files = fh
	outH, statusH, codeH := followWith(t, l, Helper{Command: []string{"drover", "helper"}}, a)
	a.Files = fs
	outS, statusS, codeS := followWith(t, l, Sh{}, a)
	if codeH != 0 {
		t.Fatalf("helper follower exit %d: %s", codeH, statusH)
	}
	if !bytes.Equal(outH, outS) {
		t.Errorf("output: helper %d bytes, sh %d bytes; differ at byte %d", len(outH), len(outS), firstDiff(outH, outS))
	}
	if statusH != statusS || codeH != codeS {
		t.Errorf("status: helper %q (exit %d), sh %q (exit %d)", statusH, codeH, statusS, codeS)
	}
	_, errH := os.Stat(fh.Claim)
	_, errS := os.Stat(fs.Claim)
	if (errH == nil) != (errS == nil) {
		t.Errorf("claim made: helper %v, sh %v", errH == nil, errS == nil)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestFollowersAgree: the POSIX sh follower copies the same bytes and
// says the same status as drover's helper, run on the same files, in
// every way a run can be found.
func TestFollowersAgree(t *testing.T) {
	binary := make([]byte, 200<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range binary {
		binary[i] = byte(rng.Uint32())
	}
	dead := deadPID(t)
	self := os.Getpid()
	cases := []followCase{
		{"binary output, exit 0", runFile{log: binary, exit: []byte("0\n")}, FollowArgs{}},
		{"from the middle", runFile{log: binary, exit: []byte("0\n")}, FollowArgs{From: 77777}},
		{"from the end", runFile{log: binary, exit: []byte("3\n")}, FollowArgs{From: int64(len(binary))}},
		{"empty output", runFile{log: []byte{}, exit: []byte("1\n")}, FollowArgs{}},
		{"no trailing newline", runFile{log: []byte("a\nb"), exit: []byte("137\n")}, FollowArgs{}},
		{"negative status", runFile{log: []byte("x"), exit: []byte("-1\n")}, FollowArgs{}},
		{"status with blanks", runFile{log: []byte("x"), exit: []byte(" 7 \n\n")}, FollowArgs{}},
		{"status with zeros", runFile{log: []byte("x"), exit: []byte("007")}, FollowArgs{}},
		{"status zero with zeros", runFile{log: []byte("x"), exit: []byte("-00")}, FollowArgs{}},
		{"bad status", runFile{log: []byte("x"), exit: []byte("abc")}, FollowArgs{}},
		{"empty status", runFile{log: []byte("x"), exit: []byte{}}, FollowArgs{}},
		{"two numbers", runFile{log: []byte("x"), exit: []byte("1 2\n")}, FollowArgs{}},
		{"gone", runFile{log: []byte("partial"), gone: true}, FollowArgs{}},
		{"gone and exit", runFile{log: []byte("done"), gone: true, exit: []byte("5\n")}, FollowArgs{}},
		{"gone before the output", runFile{gone: true}, FollowArgs{}},
		{"wrapper dead", runFile{log: []byte("partial"), pid: dead}, FollowArgs{PID: true}},
		{"wrapper dead before the output", runFile{pid: dead}, FollowArgs{PID: true}},
		{"wrapper dead with exit", runFile{log: []byte("all"), pid: dead, exit: []byte("0\n")}, FollowArgs{PID: true}},
		{"wrapper alive, exit", runFile{log: []byte("all"), pid: self, exit: []byte("2\n")}, FollowArgs{PID: true}},
		{"wrapper alive, gone", runFile{log: []byte("some"), pid: self, gone: true}, FollowArgs{PID: true}},
		{"not started: claimed", runFile{}, FollowArgs{Claim: true}},
		{"not started: probe claims", runFile{}, FollowArgs{Claim: true, Probe: true}},
		{"claimed by the stage, gone", runFile{claimed: true, gone: true}, FollowArgs{Claim: true}},
		{"started: claim untouched", runFile{log: []byte("out"), exit: []byte("0\n")}, FollowArgs{Claim: true}},
		{"probe of a started run", runFile{log: []byte("out")}, FollowArgs{Probe: true}},
		{"probe with claim of a started run", runFile{log: []byte("out")}, FollowArgs{Probe: true, Claim: true}},
	}
	for _, sh := range []struct {
		name string
		l    *localTarget
	}{{"sh", newLocal(t, Sh{})}, {"busybox sh", newBusybox(t, Sh{})}} {
		for _, c := range cases {
			t.Run(sh.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				agree(t, sh.l, c.runFile, c.args)
			})
		}
	}
}

// TestFollowersAgreeGrowing: both followers follow a run while it writes,
// from the start and from a byte it has not written yet, and copy the
// same bytes.
func TestFollowersAgreeGrowing(t *testing.T) {
	for _, from := range []int64{0, 5000} {
		t.Run(fmt.Sprint("from ", from), func(t *testing.T) {
			f := FilesOf(t.TempDir(), 1)
			l := newLocal(t, Sh{})
			type result struct {
				out    *notifyBuffer
				status string
			}
			outs := []*notifyBuffer{newNotifyBuffer(), newNotifyBuffer()}
			results := make(chan result, 2)
			for i, tool := range []Tool{Helper{Command: []string{"drover", "helper"}}, Sh{}} {
				go func() {
					var stderr bytes.Buffer
					_, err := l.Exec(t.Context(), tool.Follow(FollowArgs{Files: f, From: from}), outs[i], &stderr)
					if err != nil {
						t.Error(err)
					}
					results <- result{outs[i], stderr.String()}
				}()
			}
			// The writer: chunks of every byte value, then the exit file;
			// every 50 chunks it waits for both followers to have copied
			// what it wrote.
			log, err := os.OpenFile(f.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			var all []byte
			for i := range 200 {
				chunk := bytes.Repeat([]byte{byte(i)}, 1+i*7%97)
				all = append(all, chunk...)
				if _, err := log.Write(chunk); err != nil {
					t.Fatal(err)
				}
				if want := int64(len(all)) - from; i%50 == 49 && want > 0 {
					for _, out := range outs {
						out.waitFor(t, "the output so far", func(s string) bool { return int64(len(s)) == want })
					}
				}
			}
			log.Close()
			if err := os.WriteFile(f.Exit+".tmp", []byte("0\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f.Exit+".tmp", f.Exit); err != nil {
				t.Fatal(err)
			}
			want := all[min(from, int64(len(all))):]
			for range 2 {
				r := <-results
				got := []byte(r.out.String())
				if !bytes.Equal(got, want) || r.status != helper.StatusExit+"0\n" {
					t.Errorf("follower copied %d bytes (want %d, equal %v), status %q", len(got), len(want), bytes.Equal(got, want), r.status)
				}
			}
		})
	}
}

// FuzzFollowersAgree: for any output, start byte and exit file, the two
// followers agree.
func FuzzFollowersAgree(f *testing.F) {
	f.Add([]byte("hello\n"), uint16(0), "0\n", false)
	f.Add([]byte{0, 1, 2, 255, '\n', '\r'}, uint16(3), "-4", false)
	f.Add([]byte("x"), uint16(9), "", true)
	f.Add([]byte{}, uint16(0), "  12\t\n", false)
	f.Add([]byte("abc"), uint16(1), "0x10", false)
	f.Add([]byte("abc"), uint16(1), "--3", false)
	targets := []*localTarget{newLocal(f, Sh{}), newBusybox(f, Sh{})}
	f.Fuzz(func(t *testing.T, log []byte, from uint16, exit string, gone bool) {
		if !agreedExitFile(exit) {
			t.Skip("an exit file the wrapper never writes, on which the followers may differ")
		}
		for _, l := range targets {
			agree(t, l, runFile{log: log, exit: []byte(exit), gone: gone}, FollowArgs{From: int64(from)})
		}
	})
}

// agreedExitFile reports whether the followers read exit files of content
// s alike: what `echo $?` writes, give or take ASCII blanks, zeros and a
// minus; and anything that is not a number. They may differ on a plus
// sign, numbers out of range, and non-ASCII blanks or NULs.
func agreedExitFile(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if c == 0 || c >= 0x80 {
			return false
		}
	}
	s = strings.TrimPrefix(strings.TrimSpace(s), "-")
	if strings.HasPrefix(s, "+") {
		return false
	}
	digits := s != "" && strings.Trim(s, "0123456789") == ""
	return !digits || len(s) < 19
}
