package coordinator

import (
	"fmt"
	"net/http"

	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// DefaultMinFreeDisk is Config.MinFreeDisk's default: 1 GiB. The room that
// must be left is a fixed amount, not a share of the disk: a few uploads
// of up to MaxArtifactSize (100 MiB) under way, SQLite's write-ahead log
// between checkpoints and the checkpoint itself. A percentage would keep
// idle tens of gigabytes of a large disk, and too little of a small one.
const DefaultMinFreeDisk = 1 << 30

// FreeSpaceFunc reports how many bytes of the file system holding dir the
// coordinator may still write (statfs(2)'s blocks available to
// unprivileged users, times the block size).
type FreeSpaceFunc func(dir string) (uint64, error)

// What a low disk refuses (label of writes_refused_low_disk_total).
const (
	writeTrace    = "trace"
	writeArtifact = "artifact"
)

// lowDiskError says the data directory's file system is under
// MinFreeDisk.
type lowDiskError struct {
	dir        string
	free, keep uint64
}

func (e *lowDiskError) Error() string {
	return fmt.Sprintf("data directory %s: %d bytes free, under the %d kept free (--min-free-disk)", e.dir, e.free, e.keep)
}

// checkDisk returns a *lowDiskError when the data directory's file system
// has less than MinFreeDisk free, the probe's error when it cannot tell,
// and nil otherwise (or when there is no guard).
func (c *Coordinator) checkDisk() error {
	if c.freeSpace == nil || c.cfg.MinFreeDisk <= 0 {
		return nil
	}
	free, err := c.freeSpace(c.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data directory %s: free space: %w", c.cfg.DataDir, err)
	}
	if keep := uint64(c.cfg.MinFreeDisk); free < keep {
		return &lowDiskError{dir: c.cfg.DataDir, free: free, keep: keep}
	}
	return nil
}

// refuseOnLowDisk answers 507 Insufficient Storage, with Job-Status s, and
// returns true when the data directory's file system is under
// MinFreeDisk: what would be written there (writeTrace, writeArtifact) is refused
// while the database can still take the rest. The runner sends it again
// later (GitLab Runner and drover's manager retry a trace PATCH at the next
// update and an artifact upload a few times). A probe that fails refuses
// nothing: the write itself will tell.
func (c *Coordinator) refuseOnLowDisk(w http.ResponseWriter, jobID int64, s store.Status, what string) bool {
	err := c.checkDisk()
	if err == nil {
		return false
	}
	low, ok := err.(*lowDiskError)
	if !ok {
		c.log.Warn("cannot tell the data directory's free space", "err", err)
		return false
	}
	c.metrics.lowDisk.WithLabelValues(what).Inc()
	c.log.Warn("write refused: the data directory's disk is nearly full", "what", what, "job_id", jobID, "free", low.free, "min_free_disk", low.keep)
	setJobHeaders(w, s)
	// The body is not read: close the connection rather than drain it.
	w.Header().Set("Connection", "close")
	runnerapi.WriteError(w, http.StatusInsufficientStorage, "507 Insufficient Storage: "+low.Error(), "")
	return true
}
