package vm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drover-ci/drover/internal/fleet"
)

// states collects one Update's report.
func states(t *testing.T, f *Fleet) map[string]fleet.State {
	t.Helper()
	got := map[string]fleet.State{}
	if err := f.Update(t.Context(), func(id string, st fleet.State) { got[id] = st }); err != nil {
		t.Fatalf("Update: %v", err)
	}
	return got
}

// waitStates calls Update until cond holds for what it reports (each VM
// boots and is deleted in the background).
func waitStates(t *testing.T, f *Fleet, what string, cond func(map[string]fleet.State) bool) map[string]fleet.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a safety net only
	defer cancel()
	for {
		got := states(t, f)
		if cond(got) {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never %s; last report %v", what, got)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func count(m map[string]fleet.State, st fleet.State) int {
	n := 0
	for _, s := range m {
		if s == st {
			n++
		}
	}
	return n
}

// TestFleet: the VM fleet makes VMs that report creating until their SSH
// server answers (a real sshd here), then running; ConnectInfo is the
// VM's SSH address with the connector's user and key; a VM found stopped
// is deleted; Decrease deletes, reported deleted once; MaxSize caps
// Increase; other groups' VMs are not touched.
func TestFleet(t *testing.T) {
	s, hv := newSlots(t, Config{})
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &Fleet{HV: hv, Base: "base", MaxSize: 3}
	info, err := f.Init(t.Context(), fleet.Settings{Name: "tok123", Connector: fleet.ConnectorConfig{Username: s.cfg.SSH.User, KeyPath: key}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Shutdown(context.Background())
	if info.ID != "memvm/tok123" || info.MaxSize != 3 {
		t.Errorf("Info = %+v", info)
	}
	hv.vms["fleet-other-1"] = &memVM{running: true}
	if n, err := f.Increase(t.Context(), 2); n != 2 || err != nil {
		t.Fatalf("Increase(2) = %d, %v", n, err)
	}
	got := waitStates(t, f, "two VMs running", func(m map[string]fleet.State) bool { return count(m, fleet.StateRunning) == 2 })
	if _, ok := got["fleet-other-1"]; ok || len(got) != 2 {
		t.Errorf("Update reported %v, want the group's two VMs only", got)
	}
	var ids []string
	for id := range got {
		if !strings.HasPrefix(id, "fleet-tok123-") {
			t.Errorf("VM %s is not named after the group", id)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ci, err := f.ConnectInfo(t.Context(), ids[0])
	if err != nil || ci.InternalAddr != hv.sshAddr || ci.Username != s.cfg.SSH.User || string(ci.Key) != "KEY" || ci.Protocol != "ssh" {
		t.Errorf("ConnectInfo = %+v, %v", ci, err)
	}
	if err := f.Heartbeat(t.Context(), ids[0]); err != nil {
		t.Errorf("Heartbeat of a running VM: %v", err)
	}
	if _, err := f.ConnectInfo(t.Context(), "fleet-other-1"); err == nil {
		t.Error("ConnectInfo of another group's VM succeeded")
	}
	if n, _ := f.Increase(t.Context(), 5); n != 1 {
		t.Errorf("Increase(5) with 2 of MaxSize 3 = %d, want 1", n)
	}
	waitStates(t, f, "three VMs running", func(m map[string]fleet.State) bool { return count(m, fleet.StateRunning) == 3 })

	// ids[1] stops behind the fleet's back: it cannot take jobs.
	hv.mu.Lock()
	hv.vms[ids[1]].running = false
	hv.mu.Unlock()
	if err := f.Heartbeat(t.Context(), ids[1]); err == nil {
		t.Error("Heartbeat of a stopped VM succeeded")
	}
	if done, err := f.Decrease(t.Context(), []string{ids[0], "fleet-other-1"}); err != nil || !slices.Equal(done, ids[:1]) {
		t.Errorf("Decrease = %v, %v; want only the group's %s", done, err, ids[0])
	}
	deleted := map[string]int{}
	waitStates(t, f, "both VMs deleted", func(m map[string]fleet.State) bool {
		for id, st := range m {
			if st == fleet.StateDeleted {
				deleted[id]++
			}
		}
		return deleted[ids[0]] > 0 && deleted[ids[1]] > 0
	})
	if st := states(t, f); st[ids[0]] != "" || st[ids[1]] != "" || len(st) != 1 {
		t.Errorf("after the deletions Update reports %v, want the one VM left (each deletion once)", st)
	}
	if r, _ := hv.Running(t.Context(), "fleet-other-1"); !r {
		t.Error("another group's VM was touched")
	}
}

// TestFleetBootTimeout: a VM whose guest never answers SSH within the
// boot timeout is deleted and reported timed out, once.
func TestFleetBootTimeout(t *testing.T) {
	_, hv := newSlots(t, Config{})
	hv.deadVMs = true
	f := &Fleet{HV: hv, Base: "base", BootTimeout: 2 * time.Second}
	if _, err := f.Init(t.Context(), fleet.Settings{Name: "tok"}); err != nil {
		t.Fatal(err)
	}
	defer f.Shutdown(context.Background())
	if _, err := f.Increase(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	got := waitStates(t, f, "the VM timed out", func(m map[string]fleet.State) bool { return count(m, fleet.StateTimeout) == 1 })
	for id := range got {
		if hv.vm(id) != nil {
			t.Errorf("VM %s that never came up is still there", id)
		}
	}
	if st := states(t, f); len(st) != 0 {
		t.Errorf("after the timeout Update reports %v, want nothing", st)
	}
}
