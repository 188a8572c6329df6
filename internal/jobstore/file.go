package jobstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// File store layout inside the directory.
const (
	lockName     = "lock"
	recordPrefix = "job-"
	recordSuffix = ".json"
	tempPrefix   = ".tmp-"
	// CorruptSuffix is added to a record file's name (file store) or key
	// (Redis store, after a colon) when it is moved aside.
	CorruptSuffix = "corrupt"
)

// fileStore keeps one JSON file per job in dir. One mutex serialises its
// operations: one manager uses a directory, and a job store sees a few
// writes per job per health interval.
type fileStore struct {
	dir  string
	opts Options

	mu   sync.Mutex
	lock *os.File // holds the flock; nil after Close
}

func openFile(ctx context.Context, dir string, opts Options) (*fileStore, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, invalidf("no path")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &permanentError{fmt.Errorf("create directory: %w", err)}
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, &permanentError{fmt.Errorf("%s is not a directory", dir)}
	} else if fi.Mode().Perm()&0o077 != 0 {
		opts.Logger.Warn("job store directory is accessible to other users; records hold tokens but are written 0600",
			"path", dir, "mode", fi.Mode().Perm().String())
	}
	lock, err := takeLock(filepath.Join(dir, lockName), opts.Owner, opts.Clock.Now())
	if err != nil {
		return nil, err
	}
	s := &fileStore{dir: dir, opts: opts, lock: lock}
	s.removeTemps()
	return s, nil
}

// takeLock takes an exclusive flock on path and writes the holder's pid,
// host and owner into it. flock belongs to the open file, so the kernel
// drops it when the process dies, however it dies, and a second open of
// the same path (in this process or another) cannot take it meanwhile.
func takeLock(path, owner string, now time.Time) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			h := strings.TrimSpace(string(holder))
			if h == "" {
				h = "another process"
			}
			return nil, fmt.Errorf("%w: %s is held by %s", ErrLocked, path, h)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	host, _ := os.Hostname()
	info := fmt.Sprintf("pid %d on host %s", os.Getpid(), host)
	if owner != "" {
		info += fmt.Sprintf(" (owner %s)", owner)
	}
	info += " since " + now.UTC().Format(time.RFC3339) + "\n"
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(info), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write lock file %s: %w", path, err)
	}
	return f, nil
}

// removeTemps deletes temporary files a crash left behind; no writer can
// be using them, since this process holds the lock.
func (s *fileStore) removeTemps() {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil {
				s.opts.Logger.Warn("cannot remove temporary job store file", "path", filepath.Join(s.dir, e.Name()), "err", err)
			}
		}
	}
}

func recordName(jobID int64) string {
	return recordPrefix + strconv.FormatInt(jobID, 10) + recordSuffix
}

// parseRecordName returns the job id of a record file name, or false.
func parseRecordName(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, recordPrefix)
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, recordSuffix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != s {
		return 0, false
	}
	return id, true
}

func (s *fileStore) path(jobID int64) string { return filepath.Join(s.dir, recordName(jobID)) }

// read returns the record of jobID, ErrNotFound, or, for a record that
// cannot be decoded, an error wrapping ErrCorrupt after moving the file
// aside. Callers hold s.mu.
func (s *fileStore) read(jobID int64) (*Record, error) {
	p := s.path(jobID)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	r, err := decodeRecord(data)
	if err == nil && r.JobID != jobID {
		err = corruptf("file of job %d holds job %d", jobID, r.JobID)
	}
	if err != nil {
		return nil, s.moveAside(p, jobID, err)
	}
	return r, nil
}

// moveAside renames a corrupt record to <name>.corrupt, so it neither
// blocks the store nor gets lost, and reports it. It returns the error to
// give the caller.
func (s *fileStore) moveAside(p string, jobID int64, cause error) error {
	aside := p + "." + CorruptSuffix
	if err := os.Rename(p, aside); err != nil {
		return fmt.Errorf("%s: %w (and moving it aside failed: %v)", p, cause, err)
	}
	s.syncDir()
	s.opts.Logger.Error("corrupt job record moved aside", "path", p, "moved_to", aside, "job_id", jobID, "err", cause)
	s.opts.OnCorrupt(p, jobID, cause)
	return fmt.Errorf("%s (moved to %s): %w", p, aside, cause)
}

// write stores r atomically: a reader (or a restart) sees the old record
// or the new one, never a mix. Callers hold s.mu.
func (s *fileStore) write(r *Record) error {
	data, err := encodeRecord(r)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, tempPrefix+recordName(r.JobID)+"-*") // mode 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path(r.JobID))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", s.path(r.JobID), err)
	}
	return s.syncDir()
}

// syncDir makes renames and removals in the directory durable.
func (s *fileStore) syncDir() error {
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", s.dir, err)
	}
	return nil
}

func (s *fileStore) begin(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.lock == nil {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	return s.mu.Unlock, nil
}

func (s *fileStore) Save(ctx context.Context, r *Record) error {
	unlock, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	var version int64
	switch old, err := s.read(r.JobID); {
	case err == nil:
		if old.Owner != r.Owner {
			return fmt.Errorf("%w: held by %s", ErrNotOwner, old.Owner)
		}
		if r.Version != 0 && r.Version != old.Version {
			return fmt.Errorf("%w: stored version %d, record version %d", ErrConflict, old.Version, r.Version)
		}
		version = old.Version
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrCorrupt):
		// A new record, or one replacing a corrupt file (moved aside).
	default:
		return err
	}
	r.Version = version + 1
	return s.write(r)
}

func (s *fileStore) Heartbeat(ctx context.Context, jobID int64, owner string, now time.Time) error {
	unlock, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	r, err := s.read(jobID)
	if err != nil {
		return err
	}
	if r.Owner != owner {
		return fmt.Errorf("%w: held by %s", ErrNotOwner, r.Owner)
	}
	r.HealthAt = now
	return s.write(r)
}

func (s *fileStore) Get(ctx context.Context, jobID int64) (*Record, error) {
	unlock, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.read(jobID)
}

// list reads every record, moving corrupt ones aside. Callers hold s.mu.
func (s *fileStore) list(ctx context.Context) ([]*Record, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, e := range entries {
		if id, ok := parseRecordName(e.Name()); ok && e.Type().IsRegular() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []*Record
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, err := s.read(id)
		switch {
		case err == nil:
			out = append(out, r)
		case errors.Is(err, ErrCorrupt), errors.Is(err, ErrNotFound):
			// Reported and moved aside by read; the others go on.
		default:
			return nil, err
		}
	}
	return out, nil
}

func (s *fileStore) List(ctx context.Context) ([]*Record, error) {
	unlock, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.list(ctx)
}

func (s *fileStore) ClaimStale(ctx context.Context, owner string, healthTimeout time.Duration, now time.Time) ([]*Record, error) {
	unlock, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	cutoff := now.Add(-healthTimeout)
	var claimed []*Record
	for _, r := range all {
		if !claimable(r.State) || !r.HealthAt.Before(cutoff) {
			continue
		}
		r.Owner, r.HealthAt, r.UpdatedAt = owner, now, now
		r.Retries++
		r.Version++
		if err := s.write(r); err != nil {
			return claimed, err
		}
		claimed = append(claimed, r)
	}
	return claimed, nil
}

func (s *fileStore) Remove(ctx context.Context, jobID int64) error {
	unlock, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return s.remove(jobID)
}

func (s *fileStore) remove(jobID int64) error {
	if err := os.Remove(s.path(jobID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return s.syncDir()
}

func (s *fileStore) Cleanup(ctx context.Context, staleTimeout time.Duration, now time.Time) (int, error) {
	unlock, err := s.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer unlock()
	all, err := s.list(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range all {
		if !removable(r, staleTimeout, now) {
			continue
		}
		if err := s.remove(r.JobID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// removable reports whether Cleanup removes r: finished, or neither
// saved nor heartbeated for staleTimeout.
func removable(r *Record, staleTimeout time.Duration, now time.Time) bool {
	last := r.UpdatedAt
	if r.HealthAt.After(last) {
		last = r.HealthAt
	}
	return r.State == StateFinished || last.Before(now.Add(-staleTimeout))
}

func (s *fileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lock == nil {
		return nil
	}
	// Closing the descriptor releases the flock; the lock file stays, so
	// that the next manager locks the same inode.
	err := s.lock.Close()
	s.lock = nil
	return err
}
