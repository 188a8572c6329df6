package jobstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Record states.
const (
	// StateRunning is a job the manager is running or must resume.
	StateRunning = "running"
	// StateDelivering is a job that ended whose final update the
	// coordinator has not received yet: the manager keeps its health and
	// retries the delivery, and ClaimStale hands it to another manager as
	// it does a running one. Such a job is never run again.
	StateDelivering = "delivering"
	// StateFinished is a job that ended; Cleanup removes it.
	StateFinished = "finished"
)

// claimable reports whether records in state have a health time that
// ClaimStale looks at.
func claimable(state string) bool {
	return state == StateRunning || state == StateDelivering
}

// Record is everything a manager needs to resume one job.
type Record struct {
	// JobID identifies the record; it must be positive.
	JobID int64
	// RunnerToken is the full runner token: a secret, which is why the
	// backends keep records private (0600 files).
	RunnerToken string
	// RunnerShort is the runner's short token, for logs.
	RunnerShort string
	// Owner is the identity of the manager holding the job (system id
	// plus pid or hostname).
	Owner string
	// Job is the job payload as received (api.JobResponse JSON).
	Job json.RawMessage
	// ExecutorState is the executor's exported state.
	ExecutorState json.RawMessage
	// Stage is the stage reached and StageDone whether it finished.
	Stage     string
	StageDone bool // whether Stage finished
	// TraceOffset is the number of log bytes the coordinator acknowledged.
	TraceOffset int64
	// Retries counts resume attempts; ClaimStale increments it.
	Retries int
	// State is StateRunning, StateDelivering or StateFinished. Only
	// running and delivering records have a health time that ClaimStale
	// looks at.
	State string
	// StartedAt is set by the first Save when zero. UpdatedAt is set by
	// Save and ClaimStale, HealthAt by Save, Heartbeat and ClaimStale.
	StartedAt, UpdatedAt, HealthAt time.Time
	// Version is bumped on every Save and claim (optimistic concurrency;
	// see Store.Save).
	Version int64
}

// Clone returns a deep copy of r.
func (r *Record) Clone() *Record {
	c := *r
	c.Job = bytes.Clone(r.Job)
	c.ExecutorState = bytes.Clone(r.ExecutorState)
	return &c
}

// recordFormat is the version of the encoding below. A record of a newer
// format is reported as corrupt rather than half understood.
const recordFormat = 1

// wireRecord is the JSON form of a Record, with names that stay stable
// when the Go field names change.
type wireRecord struct {
	Format        int             `json:"format"`
	JobID         int64           `json:"job_id"`
	RunnerToken   string          `json:"runner_token"`
	RunnerShort   string          `json:"runner_short,omitempty"`
	Owner         string          `json:"owner"`
	Job           json.RawMessage `json:"job,omitempty"`
	ExecutorState json.RawMessage `json:"executor_state,omitempty"`
	Stage         string          `json:"stage,omitempty"`
	StageDone     bool            `json:"stage_done,omitempty"`
	TraceOffset   int64           `json:"trace_offset"`
	Retries       int             `json:"retries"`
	State         string          `json:"state"`
	StartedAt     time.Time       `json:"started_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
	HealthAt      time.Time       `json:"health_at"`
	Version       int64           `json:"version"`
}

// encodeRecord returns the JSON form of r.
func encodeRecord(r *Record) ([]byte, error) {
	w := wireRecord{
		Format:        recordFormat,
		JobID:         r.JobID,
		RunnerToken:   r.RunnerToken,
		RunnerShort:   r.RunnerShort,
		Owner:         r.Owner,
		Job:           r.Job,
		ExecutorState: r.ExecutorState,
		Stage:         r.Stage,
		StageDone:     r.StageDone,
		TraceOffset:   r.TraceOffset,
		Retries:       r.Retries,
		State:         r.State,
		StartedAt:     r.StartedAt.UTC(),
		UpdatedAt:     r.UpdatedAt.UTC(),
		HealthAt:      r.HealthAt.UTC(),
		Version:       r.Version,
	}
	b, err := json.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("encode job %d: %w", r.JobID, err)
	}
	return b, nil
}

// decodeRecord parses the JSON form of a record. Any error wraps
// ErrCorrupt.
func decodeRecord(data []byte) (*Record, error) {
	var w wireRecord
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, corruptf("%v", err)
	}
	switch {
	case w.Format != recordFormat:
		return nil, corruptf("format %d, want %d", w.Format, recordFormat)
	case w.JobID <= 0:
		return nil, corruptf("job_id %d is not positive", w.JobID)
	case w.State == "":
		return nil, corruptf("state is missing")
	case w.Retries < 0:
		return nil, corruptf("retries %d is negative", w.Retries)
	case w.TraceOffset < 0:
		return nil, corruptf("trace_offset %d is negative", w.TraceOffset)
	}
	return &Record{
		JobID:         w.JobID,
		RunnerToken:   w.RunnerToken,
		RunnerShort:   w.RunnerShort,
		Owner:         w.Owner,
		Job:           w.Job,
		ExecutorState: w.ExecutorState,
		Stage:         w.Stage,
		StageDone:     w.StageDone,
		TraceOffset:   w.TraceOffset,
		Retries:       w.Retries,
		State:         w.State,
		StartedAt:     w.StartedAt,
		UpdatedAt:     w.UpdatedAt,
		HealthAt:      w.HealthAt,
		Version:       w.Version,
	}, nil
}

// corruptError is a record that cannot be decoded.
type corruptError struct{ msg string }

func (e *corruptError) Error() string { return "corrupt record: " + e.msg }
func (e *corruptError) Is(target error) bool {
	return target == ErrCorrupt
}

func corruptf(format string, args ...any) error {
	return &corruptError{msg: fmt.Sprintf(format, args...)}
}

// Sentinel errors; test with errors.Is.
var (
	// ErrNotFound: no record for the job.
	ErrNotFound = errors.New("job record not found")
	// ErrNotOwner: another manager holds the record.
	ErrNotOwner = errors.New("job record held by another manager")
	// ErrConflict: the record changed since the caller read it (Version).
	ErrConflict = errors.New("job record version conflict")
	// ErrLocked: another manager uses the file store's directory.
	ErrLocked = errors.New("job store locked by another manager")
	// ErrCorrupt: a record cannot be decoded; it was moved aside.
	ErrCorrupt = errors.New("corrupt job record")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("job store closed")
)
