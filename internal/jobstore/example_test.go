package jobstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/drover-ci/drover/internal/jobstore"
)

// A manager saves a job at each stage and heartbeats it; after a restart,
// another manager identity claims it once its health is older than the
// health timeout.
func Example() {
	dir, _ := os.MkdirTemp("", "jobstore-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	cfg := &jobstore.Config{Name: jobstore.NameFile, File: jobstore.FileConfig{Path: filepath.Join(dir, "store")}}

	s, err := jobstore.Open(ctx, cfg, jobstore.Options{Owner: "manager-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := &jobstore.Record{JobID: 42, Owner: "manager-a", RunnerToken: "glrt-secret", Job: json.RawMessage(`{"id":42}`), Stage: "step_script"}
	if err := s.Save(ctx, r); err != nil {
		fmt.Println(err)
		return
	}
	s.Close() // the manager dies

	s, _ = jobstore.Open(ctx, cfg, jobstore.Options{Owner: "manager-b"})
	defer s.Close()
	claimed, _ := s.ClaimStale(ctx, "manager-b", 30*time.Second, time.Now().Add(time.Minute))
	for _, c := range claimed {
		fmt.Println(c.JobID, c.Owner, c.Stage, c.Retries)
	}
	// Output: 42 manager-b step_script 1
}
