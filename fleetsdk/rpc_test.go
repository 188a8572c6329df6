package fleetsdk_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	plugin "github.com/hashicorp/go-plugin"

	"github.com/drover-ci/drover/fleetsdk"
)

// recorder is an InstanceGroup that records what crossed the wire and
// answers with canned values.
type recorder struct {
	settings fleetsdk.Settings
	deadline time.Time
	slow     time.Duration
}

func (r *recorder) Init(ctx context.Context, s fleetsdk.Settings) (fleetsdk.Info, error) {
	r.settings = s
	r.deadline, _ = ctx.Deadline()
	return fleetsdk.Info{ID: "rec/" + s.Name, MaxSize: 7}, nil
}

func (r *recorder) Update(_ context.Context, fn func(string, fleetsdk.State)) error {
	fn("a", fleetsdk.StateRunning)
	fn("b", fleetsdk.StateCreating)
	return errors.New("partial list")
}

func (r *recorder) Increase(_ context.Context, n int) (int, error) {
	time.Sleep(r.slow) // ignoring ctx on purpose: a plugin that hangs
	return n - 1, fmt.Errorf("quota: only %d", n-1)
}

func (r *recorder) Decrease(_ context.Context, ids []string) ([]string, error) {
	return ids[:1], fmt.Errorf("%s: %w", ids[1], fleetsdk.ErrNotFound)
}

func (r *recorder) ConnectInfo(_ context.Context, id string) (fleetsdk.ConnectInfo, error) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return fleetsdk.ConnectInfo{ID: id, Username: "u", Key: []byte("KEY"), InternalAddr: "10.0.0.1:22", Expires: &exp}, nil
}

func (r *recorder) Heartbeat(_ context.Context, id string) error {
	return fmt.Errorf("heartbeat %s: %w", id, fleetsdk.ErrNotFound)
}

func (r *recorder) Shutdown(context.Context) error { return nil }

// dial serves impl over an in-process net/rpc connection, the same wire
// code a plugin process uses.
func dial(t *testing.T, impl fleetsdk.InstanceGroup) fleetsdk.InstanceGroup {
	t.Helper()
	client, _ := plugin.TestPluginRPCConn(t, fleetsdk.PluginSet(impl), nil)
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(fleetsdk.PluginName)
	if err != nil {
		t.Fatalf("Dispense = %v", err)
	}
	return raw.(fleetsdk.InstanceGroup)
}

func TestWire(t *testing.T) {
	rec := &recorder{}
	g := dial(t, rec)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	info, err := g.Init(ctx, fleetsdk.Settings{
		Name:      "r1",
		Config:    map[string]any{"region": "eu", "size": int64(3), "tags": []any{"a"}},
		Connector: fleetsdk.ConnectorConfig{Username: "ci", Timeout: time.Second},
	})
	if err != nil || info.ID != "rec/r1" || info.MaxSize != 7 {
		t.Fatalf("Init = %+v, %v", info, err)
	}
	wantCfg := map[string]any{"region": "eu", "size": float64(3), "tags": []any{"a"}}
	if diff := cmp.Diff(wantCfg, rec.settings.Config); diff != "" {
		t.Errorf("Config seen by the plugin (-want +got):\n%s", diff)
	}
	var decoded struct{ Region string }
	if err := rec.settings.DecodeConfig(&decoded); err != nil || decoded.Region != "eu" {
		t.Errorf("DecodeConfig = %+v, %v", decoded, err)
	}
	if rec.settings.Connector.Username != "ci" || rec.settings.Connector.Timeout != time.Second {
		t.Errorf("Connector seen by the plugin = %+v", rec.settings.Connector)
	}
	if want, _ := ctx.Deadline(); !rec.deadline.Equal(want) {
		t.Errorf("plugin's deadline = %v, want the caller's %v", rec.deadline, want)
	}

	var got []fleetsdk.Instance
	err = g.Update(ctx, func(id string, st fleetsdk.State) { got = append(got, fleetsdk.Instance{ID: id, State: st}) })
	want := []fleetsdk.Instance{{"a", fleetsdk.StateRunning}, {"b", fleetsdk.StateCreating}}
	if diff := cmp.Diff(want, got); diff != "" || err == nil || err.Error() != "partial list" {
		t.Errorf("Update = %v (diff %s), want instances and the plugin's error", err, diff)
	}

	if n, err := g.Increase(ctx, 3); n != 2 || err == nil || err.Error() != "quota: only 2" {
		t.Errorf("Increase(3) = %d, %v; want 2 and the plugin's error", n, err)
	}
	ids, err := g.Decrease(ctx, []string{"a", "zz"})
	if !cmp.Equal(ids, []string{"a"}) || !errors.Is(err, fleetsdk.ErrNotFound) {
		t.Errorf("Decrease = %v, %v; want [a] and ErrNotFound", ids, err)
	}
	ci, err := g.ConnectInfo(ctx, "a")
	if err != nil || string(ci.Key) != "KEY" || ci.Expires == nil || ci.Expires.Year() != 2030 {
		t.Errorf("ConnectInfo = %+v, %v", ci, err)
	}
	if err := g.Heartbeat(ctx, "a"); !errors.Is(err, fleetsdk.ErrNotFound) {
		t.Errorf("Heartbeat = %v, want ErrNotFound", err)
	}
	if err := g.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown = %v", err)
	}
}

func TestCallerStopsWaitingOnCancel(t *testing.T) {
	g := dial(t, &recorder{slow: 2 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := g.Increase(ctx, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Increase past its deadline = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Increase returned after %s, want promptly at the deadline", d)
	}
}
