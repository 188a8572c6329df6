package autoscale

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The state file lists the pool's instances so that a restarted manager
// re-adopts them (with their use counts) instead of leaking or deleting
// them. It is JSON, written atomically (temp file, fsync, rename, fsync of
// the directory) with mode 0600.

const poolStateVersion = 1

type poolStateFile struct {
	Version   int                 `json:"version"`
	Instances []poolStateInstance `json:"instances"`
}

type poolStateInstance struct {
	ID       string    `json:"id"`
	Created  time.Time `json:"created"`
	Ready    time.Time `json:"ready,omitzero"`
	LastUsed time.Time `json:"last_used,omitzero"`
	UseCount int       `json:"use_count"`
	Removing bool      `json:"removing,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// Slots are the slots jobs held when the file was written: a
	// restarted manager keeps them for the jobs it resumes (Claim).
	Slots []int `json:"slots,omitempty"`
	// SlotJobs are the jobs holding Slots, in the same order (0: unknown).
	SlotJobs []int64 `json:"slot_jobs,omitempty"`
}

// readPoolState returns the instances recorded in path; a missing file is
// an empty state.
func readPoolState(path string) (map[string]poolStateInstance, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]poolStateInstance{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read autoscaler state file: %w", err)
	}
	var sf poolStateFile
	if err := json.Unmarshal(data, &sf); err != nil {
		return nil, fmt.Errorf("autoscaler state file %s: %w", path, err)
	}
	if sf.Version != poolStateVersion {
		return nil, fmt.Errorf("autoscaler state file %s: version %d, want %d", path, sf.Version, poolStateVersion)
	}
	m := make(map[string]poolStateInstance, len(sf.Instances))
	for _, in := range sf.Instances {
		if in.ID == "" {
			return nil, fmt.Errorf("autoscaler state file %s: instance without id", path)
		}
		m[in.ID] = in
	}
	return m, nil
}

// flushState writes the state file if anything changed since the last
// write. Failures are logged: the pool keeps working, and the next change
// tries again.
func (p *Pool) flushState() {
	if p.o.StateFile == "" {
		return
	}
	p.mu.Lock()
	if !p.dirty || !p.started {
		p.mu.Unlock()
		return
	}
	sf := poolStateFile{Version: poolStateVersion, Instances: make([]poolStateInstance, 0, len(p.insts))}
	for _, in := range p.insts {
		sf.Instances = append(sf.Instances, poolStateInstance{
			ID: in.id, Created: in.created, Ready: in.ready, LastUsed: in.lastUsed,
			UseCount: in.useCount, Removing: in.state == StateRemoving, Reason: in.reason,
			Slots: in.takenSlots(), SlotJobs: in.takenJobs(),
		})
	}
	p.dirty = false
	p.mu.Unlock()
	if err := writePoolStateAtomic(p.o.StateFile, sf); err != nil {
		p.log.Error("cannot write autoscaler state file", "err", err)
		p.mu.Lock()
		p.dirty = true
		p.mu.Unlock()
	}
}

func writePoolStateAtomic(path string, v any) (err error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create directory of %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: makes the rename durable
		_ = d.Close()
	}
	return nil
}
