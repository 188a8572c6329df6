package jobstore_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/drover-ci/drover/internal/jobstore"
	"github.com/drover-ci/drover/internal/jobstore/storetest"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	ctx := t.Context()
	// Two stores (two runners) share the collectors.
	var stores []jobstore.Store
	for _, name := range []string{"a", "b"} {
		s, err := jobstore.Open(ctx, fileConfig(filepath.Join(t.TempDir(), name)), jobstore.Options{Registerer: reg})
		if err != nil {
			t.Fatalf("Open(%s) = %v", name, err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	if err := stores[0].Save(ctx, storetest.Record(1, "m", 100)); err != nil {
		t.Fatal(err)
	}
	if err := stores[1].Save(ctx, storetest.Record(1, "m", 100)); err != nil {
		t.Fatal(err)
	}
	stores[0].Save(ctx, storetest.Record(1, "other", 100))
	stores[0].Get(ctx, 2)
	want := `
# HELP drover_jobstore_operations_total Job store operations by backend, operation and result (ok, not_found, not_owner, conflict, corrupt, closed, invalid, error).
# TYPE drover_jobstore_operations_total counter
drover_jobstore_operations_total{backend="file",op="get",result="not_found"} 1
drover_jobstore_operations_total{backend="file",op="save",result="not_owner"} 1
drover_jobstore_operations_total{backend="file",op="save",result="ok"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "drover_jobstore_operations_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "drover_jobstore_operation_duration_seconds"); n != 2 {
		t.Errorf("duration series = %d, want 2 (save, get)", n)
	}
}
