package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/drover-ci/drover/internal/runnerapi"
)

// The orphan sweep. Files in DataDir/artifacts that no record names are
// left behind when a coordinator stops at the wrong moment: the temporary
// file of an upload cut off by a crash (on a shared directory, the
// coordinator that starts is not the one whose upload it was), the file of
// an upload whose record was never written, the old file of a replaced
// artifact, the file of an expired one whose record was deleted. The
// reaper removes them (sweepOrphans) on its first pass and then every
// orphanSweepInterval.
//
// Coordinators sharing a PostgreSQL store may share the directory, so the
// sweep removes nothing another one may still need:
//   - a temporary file only once nothing has written it for longer than an
//     upload may last (uploadTempAge, an hour at the least): until then it
//     may be another coordinator's upload in progress;
//   - an artifact's file (<job id>.<type>.<random>) only when no record
//     names it and nothing has written it for orphanAge: an upload renames
//     its file into place first and records it just after, maybe on
//     another coordinator, and the file is written last just before the
//     rename;
//   - nothing else (files not named as drover names them are not its own).
//
// The age is the file's modification time against the coordinator's
// clock: coordinators sharing a directory need clocks that agree to well
// within orphanAge.

const (
	// orphanAge is how long an artifact's file no record names, or a
	// temporary file, must have been left unwritten before the sweep
	// removes it.
	orphanAge = time.Hour
	// orphanSweepInterval is how often the reaper sweeps.
	orphanSweepInterval = time.Hour
	// orphanBatch is how many directory entries are looked at, and at
	// most how many jobs' records are read with one query, at a time.
	orphanBatch = 500
)

// artifactFileRE matches the names handleUploadArtifacts gives artifact
// files: <job id>.<type>.<random>.
var artifactFileRE = regexp.MustCompile(`^([1-9][0-9]{0,18})\.[a-z][a-z0-9_]{0,63}\.[A-Za-z0-9_-]+$`)

// sweepSchedule says when the reaper sweeps next.
type sweepSchedule struct {
	mu   sync.Mutex
	last time.Time // zero: never swept
}

// due reports whether a sweep is due at now, and if so counts it as done.
func (s *sweepSchedule) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() && now.Sub(s.last) < orphanSweepInterval && !now.Before(s.last) {
		return false
	}
	s.last = now
	return true
}

// uploadTempAge is how long a temporary file must have been left
// unwritten before the sweep removes it: longer than any upload may take
// (AllowSlowBody's deadline for the largest upload allowed), and
// orphanAge at the least.
func (c *Coordinator) uploadTempAge() time.Duration {
	return max(orphanAge, runnerapi.SlowBodyTimeout(c.cfg.MaxArtifactSize+multipartSlack))
}

// orphanFile is a file the sweep may remove.
type orphanFile struct {
	name  string
	jobID int64 // 0: a temporary file
	size  int64
	age   time.Duration
}

// sweepStats counts what a sweep removed.
type sweepStats struct{ files, bytes int64 }

// sweepOrphans removes, at now, the files of the artifacts directory that
// no record names and that nothing wrote for long enough (see above). It
// reads the directory orphanBatch entries at a time, and the records of
// the jobs those name with one query per batch.
func (c *Coordinator) sweepOrphans(ctx context.Context, now time.Time) {
	var st sweepStats
	err := c.sweepDir(ctx, now, &st)
	if st.files > 0 {
		c.log.Info("artifacts: orphaned files removed", "files", st.files, "bytes", st.bytes)
	}
	if err != nil && ctx.Err() == nil {
		c.log.Error("reaper: sweep artifacts directory", "err", err)
	}
}

func (c *Coordinator) sweepDir(ctx context.Context, now time.Time, st *sweepStats) error {
	d, err := os.Open(c.artifacts.dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", c.artifacts.dir, err)
	}
	defer d.Close()
	tempAge := c.uploadTempAge()
	for {
		ents, rerr := d.ReadDir(orphanBatch)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("read %s: %w", c.artifacts.dir, rerr)
		}
		var temps, named []orphanFile
		for _, e := range ents {
			f, ok := orphanCandidate(e, now)
			switch {
			case !ok:
			case f.jobID == 0 && f.age >= tempAge:
				temps = append(temps, f)
			case f.jobID != 0 && f.age >= orphanAge:
				named = append(named, f)
			}
		}
		unrecorded, err := c.unrecorded(ctx, named)
		if err != nil {
			return err
		}
		for _, f := range append(temps, unrecorded...) {
			c.removeOrphan(f, st)
		}
		if rerr != nil { // io.EOF: all read
			return nil
		}
	}
}

// orphanCandidate reads entry e: a regular file named as drover names
// temporary or artifact files, with its size and age at now.
func orphanCandidate(e fs.DirEntry, now time.Time) (orphanFile, bool) {
	f := orphanFile{name: e.Name()}
	if !e.Type().IsRegular() {
		return f, false
	}
	if !strings.HasPrefix(f.name, uploadPrefix) {
		m := artifactFileRE.FindStringSubmatch(f.name)
		if m == nil {
			return f, false
		}
		id, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return f, false
		}
		f.jobID = id
	}
	info, err := e.Info()
	if err != nil { // removed meanwhile
		return f, false
	}
	f.size, f.age = info.Size(), now.Sub(info.ModTime())
	return f, true
}

// unrecorded returns the files among files that no artifact record names.
func (c *Coordinator) unrecorded(ctx context.Context, files []orphanFile) ([]orphanFile, error) {
	if len(files) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, len(files))
	seen := map[int64]bool{}
	for _, f := range files {
		if !seen[f.jobID] {
			seen[f.jobID] = true
			ids = append(ids, f.jobID)
		}
	}
	as, err := c.st.JobArtifacts(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("records of artifact files: %w", err)
	}
	recorded := make(map[string]bool, len(as))
	for _, a := range as {
		recorded[a.File] = true
	}
	var out []orphanFile
	for _, f := range files {
		if !recorded[f.name] {
			out = append(out, f)
		}
	}
	return out, nil
}

// removeOrphan removes f and counts it; one gone already (another
// coordinator's sweep) is not counted.
func (c *Coordinator) removeOrphan(f orphanFile, st *sweepStats) {
	err := os.Remove(c.artifacts.path(f.name))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		c.log.Warn("reaper: remove orphaned artifact file", "file", f.name, "err", err)
		return
	}
	st.files++
	st.bytes += f.size
	c.metrics.artifactsOrphaned.Inc()
	c.log.Debug("orphaned artifact file removed", "file", f.name, "size", f.size, "unwritten_for", f.age.Round(time.Second))
}
