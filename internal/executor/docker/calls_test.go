package docker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/drover-ci/drover/internal/executor"
)

// callsEngine answers NetworkCreate and fails VolumeCreate; nothing else.
type callsEngine struct{ Engine }

func (callsEngine) NetworkCreate(context.Context, string, network.CreateOptions) (network.CreateResponse, error) {
	return network.CreateResponse{ID: "net1"}, nil
}

func (callsEngine) VolumeCreate(context.Context, volume.CreateOptions) (volume.Volume, error) {
	return volume.Volume{}, errors.New("disk full")
}

// TestTracedEngine: each call of a job's engine is in the histogram by
// call and in the job's log at debug level, with its error; a job's
// engine wraps the engine itself once, and untraced finds it.
func TestTracedEngine(t *testing.T) {
	p, err := NewProvider(Options{Lookup: func(executor.Settings) (*Config, error) { return nil, errors.New("none") }})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(p.Collector()); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	base := callsEngine{}
	eng := p.traced(p.traced(base, logger), logger)
	if got := untraced(eng); got != Engine(base) {
		t.Fatalf("untraced(traced(traced(e))) = %v, want e", got)
	}
	ctx := t.Context()
	if _, err := eng.NetworkCreate(ctx, "n", network.CreateOptions{}); err != nil {
		t.Fatalf("NetworkCreate = %v", err)
	}
	if _, err := eng.VolumeCreate(ctx, volume.CreateOptions{}); err == nil {
		t.Fatal("VolumeCreate = nil, want the engine's error")
	}
	spanOf(eng, spanExec, time.Now(), nil)
	spanOf(base, spanExec, time.Now(), nil) // not a job's engine: nothing

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "drover_docker_engine_call_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			counts[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	want := map[string]uint64{"NetworkCreate": 1, "VolumeCreate": 1, spanExec: 1}
	if len(counts) != len(want) {
		t.Errorf("histogram counts = %v, want %v", counts, want)
	}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("histogram count of %s = %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
	for _, s := range []string{"call=NetworkCreate duration=", `call=VolumeCreate duration=`, `err="disk full"`, "call=exec"} {
		if !strings.Contains(log.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, log.String())
		}
	}
	if n := strings.Count(log.String(), "level=DEBUG"); n != 3 {
		t.Errorf("%d debug lines, want 3:\n%s", n, log.String())
	}
}
