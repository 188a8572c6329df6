package autoscale

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
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
	// Learnt is what the pool measured of its load (Observed) and the
	// adaptive feedback, so that a restarted manager's adaptive policy
	// goes on from yesterday's knowledge instead of a fresh pool's guess.
	// Absent in files of older versions: the pool then starts learning
	// anew.
	Learnt *poolStateLearnt `json:"learnt,omitempty"`
}

// poolStateLearnt is the pool's measured statistics (see Pool.Observed).
type poolStateLearnt struct {
	ArrivalRate    float64   `json:"arrival_rate"` // jobs/s at RateAt, decaying from there
	RateAt         time.Time `json:"rate_at,omitzero"`
	MeanDurationS  float64   `json:"mean_duration_s,omitempty"`
	MeanBootS      float64   `json:"mean_boot_s,omitempty"`
	DispersionM    float64   `json:"dispersion_m"`  // EWMA of arrivals per bucket
	DispersionS2   float64   `json:"dispersion_s2"` // EWMA of their square
	DispersionHave bool      `json:"dispersion_have,omitempty"`
	LogGain        float64   `json:"log_gain"` // ln of the adaptive feedback gain
	// MissShapeSum and MissShapeN are the decaying sum and weight, at
	// MissShapeAt, of the miss shapes of the jobs fed to the feedback
	// since MissShapeSince (their mean sets each job's goal; see
	// waitFeedback).
	MissShapeSum   float64   `json:"miss_shape_sum,omitempty"`
	MissShapeN     float64   `json:"miss_shape_n,omitempty"`
	MissShapeAt    time.Time `json:"miss_shape_at,omitzero"`
	MissShapeSince time.Time `json:"miss_shape_since,omitzero"`
}

// learntLocked is the statistics to save. They change only where the
// state file is marked dirty anyway (a job's acquire and release, an
// instance's readiness), so saving them costs no extra write. A mean not
// measured yet is 0, which restoreLearntLocked reads as not measured.
func (p *Pool) learntLocked() *poolStateLearnt {
	return &poolStateLearnt{
		ArrivalRate: p.rate, RateAt: p.rateAt,
		MeanDurationS: p.meanDur, MeanBootS: p.meanBoot,
		DispersionM: p.bursts.m, DispersionS2: p.bursts.s2, DispersionHave: p.bursts.have,
		LogGain:      p.feedback.logGain,
		MissShapeSum: p.feedback.shapes.sum, MissShapeN: p.feedback.shapes.n,
		MissShapeAt: p.feedback.shapes.at, MissShapeSince: p.feedback.shapes.first,
	}
}

// restoreLearntLocked takes saved statistics over; values that cannot be
// measurements (negative, NaN, infinite) are ignored one by one, and the
// gain is kept within its bounds.
func (p *Pool) restoreLearntLocked(l *poolStateLearnt) {
	if l == nil {
		return
	}
	ok := func(x float64) bool { return x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }
	if ok(l.ArrivalRate) && !l.RateAt.IsZero() {
		p.rate, p.rateAt = l.ArrivalRate, l.RateAt
	}
	if ok(l.MeanDurationS) && l.MeanDurationS > 0 {
		p.meanDur, p.haveDur = l.MeanDurationS, true
	}
	if ok(l.MeanBootS) && l.MeanBootS > 0 {
		p.meanBoot, p.haveBoot = l.MeanBootS, true
	}
	if ok(l.DispersionM) && ok(l.DispersionS2) && l.DispersionHave {
		// The current bucket starts afresh: what arrived in the
		// restart's gap is not known.
		p.bursts = dispersionEstimator{m: l.DispersionM, s2: l.DispersionS2, have: true}
	}
	if !math.IsNaN(l.LogGain) && !math.IsInf(l.LogGain, 0) {
		lim := math.Log(feedbackMaxGain)
		p.feedback.logGain = min(max(l.LogGain, -lim), lim)
	}
	if ok(l.MissShapeSum) && ok(l.MissShapeN) && l.MissShapeN > 0 && !l.MissShapeAt.IsZero() && !l.MissShapeSince.IsZero() && !l.MissShapeSince.After(l.MissShapeAt) {
		p.feedback.shapes = decayingMean{sum: l.MissShapeSum, n: l.MissShapeN, at: l.MissShapeAt, first: l.MissShapeSince}
	}
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
	m, _, err := readPoolStateFile(path)
	return m, err
}

// readPoolStateFile returns the instances and the learnt statistics
// (nil when the file has none) recorded in path.
func readPoolStateFile(path string) (map[string]poolStateInstance, *poolStateLearnt, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]poolStateInstance{}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read autoscaler state file: %w", err)
	}
	var sf poolStateFile
	if err := json.Unmarshal(data, &sf); err != nil {
		return nil, nil, fmt.Errorf("autoscaler state file %s: %w", path, err)
	}
	if sf.Version != poolStateVersion {
		return nil, nil, fmt.Errorf("autoscaler state file %s: version %d, want %d", path, sf.Version, poolStateVersion)
	}
	m := make(map[string]poolStateInstance, len(sf.Instances))
	for _, in := range sf.Instances {
		if in.ID == "" {
			return nil, nil, fmt.Errorf("autoscaler state file %s: instance without id", path)
		}
		m[in.ID] = in
	}
	return m, sf.Learnt, nil
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
	sf := poolStateFile{Version: poolStateVersion, Instances: make([]poolStateInstance, 0, len(p.insts)), Learnt: p.learntLocked()}
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
