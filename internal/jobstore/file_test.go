package jobstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/drover-ci/drover/internal/jobstore"
	"github.com/drover-ci/drover/internal/jobstore/storetest"
)

type fileHarness struct {
	dirs storeHomes
}

func (h *fileHarness) Name() string { return jobstore.NameFile }

func (h *fileHarness) open(t *testing.T, dir string, opts jobstore.Options) jobstore.Store {
	t.Helper()
	return h.dirs.open(t, fileConfig(dir), dir, opts)
}

func (h *fileHarness) Open(t *testing.T, opts jobstore.Options) jobstore.Store {
	return h.open(t, filepath.Join(t.TempDir(), "store"), opts)
}

func (h *fileHarness) Reopen(t *testing.T, s jobstore.Store, opts jobstore.Options) jobstore.Store {
	s.Close()
	return h.open(t, h.dirs.of(s), opts)
}

func (h *fileHarness) Shared(*testing.T, jobstore.Store, jobstore.Options) (jobstore.Store, bool) {
	return nil, false
}

func (h *fileHarness) Corrupt(t *testing.T, s jobstore.Store, jobID int64, kind string) string {
	p := filepath.Join(h.dirs.of(s), "job-"+strconv.FormatInt(jobID, 10)+".json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	switch kind {
	case "garbage":
		data = []byte("\x00\xffnot json at all")
	case "truncated":
		data = data[:len(data)/2]
	case "wrong-id":
		data = []byte(strings.Replace(string(data), fmt.Sprintf(`"job_id":%d`, jobID), `"job_id":999`, 1))
	default:
		t.Fatalf("unknown corruption %q", kind)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileConfig(dir string) *jobstore.Config {
	return &jobstore.Config{Name: jobstore.NameFile, File: jobstore.FileConfig{Path: dir}}
}

func TestFileConformance(t *testing.T) {
	storetest.Run(t, &fileHarness{})
}

func TestFileLockOtherProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	child := startLockHolder(t, dir)

	_, err := jobstore.Open(t.Context(), fileConfig(dir), jobstore.Options{})
	if !errors.Is(err, jobstore.ErrLocked) {
		t.Fatalf("Open while another process holds the store = %v, want ErrLocked", err)
	}
	host, _ := os.Hostname()
	for _, want := range []string{fmt.Sprintf("pid %d", child.Process.Pid), host, "child-manager", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open error %q does not name %q", err, want)
		}
	}
	if jobstore.IsRetryable(err) {
		t.Errorf("IsRetryable(%v) = true, want false", err)
	}

	// The kernel drops the lock when the holder dies, even by SIGKILL.
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	s, err := jobstore.Open(t.Context(), fileConfig(dir), jobstore.Options{})
	if err != nil {
		t.Fatalf("Open after the holder was killed = %v, want nil", err)
	}
	s.Close()
}

func TestFileLockSameProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := jobstore.Open(t.Context(), fileConfig(dir), jobstore.Options{Owner: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobstore.Open(t.Context(), fileConfig(dir), jobstore.Options{}); !errors.Is(err, jobstore.ErrLocked) || !strings.Contains(err.Error(), "first") {
		t.Fatalf("second Open = %v, want ErrLocked naming owner first", err)
	}
	s.Close()
	s, err = jobstore.Open(t.Context(), fileConfig(dir), jobstore.Options{})
	if err != nil {
		t.Fatalf("Open after Close = %v, want nil", err)
	}
	s.Close()
}

func TestFilePermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "store")
	s, err := jobstore.Open(t.Context(), fileConfig(dir), jobstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := storetest.Record(1, "m", 100)
	if err := s.Save(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(t.Context(), 1, "m", storetest.T0); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{
		dir:                              0o700,
		filepath.Join(dir, "job-1.json"): 0o600,
		filepath.Join(dir, "lock"):       0o600,
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %v, want %v", p, got, want)
		}
	}
	data, _ := os.ReadFile(filepath.Join(dir, "job-1.json"))
	if !strings.Contains(string(data), r.RunnerToken) {
		t.Errorf("record file lacks the runner token")
	}
}

func TestFileLeftoversAndForeignFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := jobstore.Open(t.Context(), fileConfig(dir), jobstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(t.Context(), storetest.Record(1, "m", 100)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A crash during a write leaves a temporary file; other files are not
	// records and are left alone.
	for _, name := range []string{".tmp-job-2.json-123", "job-x.json", "job-03.json", "README", "job-4.json.corrupt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reported := 0
	s, err = jobstore.Open(t.Context(), fileConfig(dir), jobstore.Options{OnCorrupt: func(string, int64, error) { reported++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(filepath.Join(dir, ".tmp-job-2.json-123")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left after Open: %v", err)
	}
	rs, err := s.List(t.Context())
	if err != nil || len(rs) != 1 || rs[0].JobID != 1 || reported != 0 {
		t.Errorf("List = %d records, %v, %d corrupt reports; want job 1 only, none reported", len(rs), err, reported)
	}
	for _, name := range []string{"job-x.json", "job-03.json", "README", "job-4.json.corrupt"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v, want it left alone", name, err)
		}
	}
}

func TestFileOpenErrors(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := jobstore.Open(t.Context(), fileConfig(notDir), jobstore.Options{}); err == nil || jobstore.IsRetryable(err) {
		t.Errorf("Open on a regular file = %v, want a permanent error", err)
	}
	if _, err := jobstore.Open(t.Context(), nil, jobstore.Options{}); err == nil {
		t.Errorf("Open(nil config) = nil error")
	}
	if _, err := jobstore.Open(t.Context(), &jobstore.Config{Name: "etcd"}, jobstore.Options{}); err == nil {
		t.Errorf("Open(etcd) = nil error")
	}
}

func TestFileWarnsOnOpenDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	var buf bytes.Buffer
	s, err := jobstore.Open(t.Context(), fileConfig(dir), jobstore.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !strings.Contains(buf.String(), "accessible to other users") || !strings.Contains(buf.String(), dir) {
		t.Errorf("log = %q, want a warning naming %s", buf.String(), dir)
	}
}
