package hcloudtest_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/hashicorp/go-hclog"
	"gitlab.com/gitlab-org/fleeting/fleeting"
	"gitlab.com/gitlab-org/fleeting/fleeting/provider"
	"golang.org/x/crypto/ssh"

	"github.com/drover-ci/drover/internal/dockerimage/dockertest"
	"github.com/drover-ci/drover/internal/fleet/hcloudtest"
)

const token = "hcloudtest-token"

// TestMain unsets the plugin's environment variables: the plugin process
// inherits the test's environment, where they would win over
// plugin_config and could send it to the real API.
func TestMain(m *testing.M) {
	for _, k := range []string{"HCLOUD_TOKEN", "HCLOUD_TOKEN_FILE", "HCLOUD_ENDPOINT", "HCLOUD_ENDPOINT_FILE"} {
		os.Unsetenv(k)
	}
	os.Exit(m.Run())
}

// TestPluginLifecycle drives the real Hetzner plugin through fleeting's
// host side against the stand-in, with Docker containers as the servers:
// Init, Increase, Update until running, ConnectInfo and a real SSH login
// to each instance, Heartbeat, Decrease, Update until gone, Shutdown. It
// runs once per connector configuration the plugin supports.
func TestPluginLifecycle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		n         int
		connector func(key []byte) provider.ConnectorConfig
		wantUser  string
	}{
		{
			name: "static key, root", n: 2, wantUser: "root",
			connector: func(key []byte) provider.ConnectorConfig {
				return provider.ConnectorConfig{Protocol: provider.ProtocolSSH, Username: "root", Key: key, UseStaticCredentials: true}
			},
		},
		{
			name: "static key, image user", n: 1, wantUser: "drover",
			connector: func(key []byte) provider.ConnectorConfig {
				return provider.ConnectorConfig{Protocol: provider.ProtocolSSH, Username: "drover", Key: key, UseStaticCredentials: true}
			},
		},
		{
			// The plugin makes a key pair, uploads the public half and
			// returns the private one from ConnectInfo; the user
			// defaults to root.
			name: "plugin's own key", n: 1, wantUser: "root",
			connector: func([]byte) provider.ConnectorConfig {
				return provider.ConnectorConfig{Protocol: provider.ProtocolSSH}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			machines := hcloudtest.DockerMachines(t)
			s := hcloudtest.New(t, machines, token)
			g := runPlugin(t, s, nil)

			key := newKey(t)
			info, err := g.Init(ctx, hclog.NewNullLogger(), provider.Settings{ConnectorConfig: tc.connector(key)})
			if err != nil {
				t.Fatalf("Init = %v", err)
			}
			if info.ID != "hetzner/hel1/hcloudtest" {
				t.Errorf("Init: ID = %q, want hetzner/hel1/hcloudtest", info.ID)
			}

			n, err := g.Increase(ctx, tc.n)
			if err != nil || n != tc.n {
				t.Fatalf("Increase(%d) = %d, %v; want %d, nil", tc.n, n, err, tc.n)
			}
			states := waitUpdate(ctx, t, g, func(st map[string]provider.State) bool {
				return len(st) == tc.n && !slices.ContainsFunc(slices.Collect(maps.Values(st)), func(s provider.State) bool { return s != provider.StateRunning })
			})

			servers := s.Servers()
			byIID := map[string]hcloudtest.ServerInfo{}
			for _, srv := range servers {
				byIID[srv.IID()] = srv
				if srv.Status != "running" || srv.Labels["instance-group"] != "hcloudtest" || len(srv.AuthorizedKeys) != 1 {
					t.Errorf("server %+v: want running, labelled instance-group=hcloudtest, with one key", srv)
				}
			}
			var iids []string
			for iid := range states {
				iids = append(iids, iid)
				srv, ok := byIID[iid]
				if !ok {
					t.Fatalf("Update reports %s, the stand-in has %v", iid, servers)
				}
				ci, err := g.ConnectInfo(ctx, iid)
				if err != nil {
					t.Fatalf("ConnectInfo(%s) = %v", iid, err)
				}
				if ci.ExternalAddr != srv.IP || ci.Username != tc.wantUser || ci.Arch != runtime.GOARCH || ci.OS != "debian" {
					t.Errorf("ConnectInfo(%s) = addr %q user %q arch %q os %q; want %q %q %q %q",
						iid, ci.ExternalAddr, ci.Username, ci.Arch, ci.OS, srv.IP, tc.wantUser, runtime.GOARCH, "debian")
				}
				if out := runSSH(ctx, t, ci, "echo ok"); out != "ok\n" {
					t.Errorf("ssh %s@%s echo ok = %q, want \"ok\\n\"", ci.Username, ci.ExternalAddr, out)
				}
				before := len(s.Calls())
				if err := g.Heartbeat(ctx, iid); err != nil {
					t.Errorf("Heartbeat(%s) = %v", iid, err)
				}
				if after := len(s.Calls()); after != before {
					t.Errorf("Heartbeat made %d API calls, want none (the plugin's Heartbeat is a no-op)", after-before)
				}
			}

			deleted, err := g.Decrease(ctx, iids)
			if err != nil || len(deleted) != len(iids) {
				t.Fatalf("Decrease(%v) = %v, %v; want all, nil", iids, deleted, err)
			}
			waitUpdate(ctx, t, g, func(st map[string]provider.State) bool { return len(st) == 0 })
			if got := s.Servers(); len(got) != 0 {
				t.Errorf("after Decrease, the stand-in still has %v", got)
			}
			if got := s.Deleted(); len(got) != len(iids) {
				t.Errorf("Deleted() = %v, want %d servers", got, len(iids))
			}
			for _, srv := range servers {
				if c := machineContainers(t, srv.Name); len(c) != 0 {
					t.Errorf("server %s deleted, but its container %s is left", srv.Name, c[0].ID)
				}
			}

			if err := g.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown = %v", err)
			}
			if got := s.Count("DELETE /ssh_keys/{id}"); got != 1 {
				t.Errorf("Shutdown deleted %d SSH keys, want 1", got)
			}
			if u := s.Unexpected(); len(u) != 0 {
				t.Errorf("the plugin made calls the stand-in does not model: %v", u)
			}
		})
	}
}

// TestPluginOutage: while the API answers 503 the plugin's calls fail;
// once it is back, they work, and the plugin's instances are intact.
func TestPluginOutage(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := hcloudtest.New(t, hcloudtest.DockerMachines(t), token)
	g := runPlugin(t, s, nil)
	initStatic(ctx, t, g)

	s.SetFailing(http.StatusServiceUnavailable)
	if n, err := g.Increase(ctx, 1); err == nil || n != 0 {
		t.Fatalf("Increase(1) during an outage = %d, %v; want 0 and an error", n, err)
	}
	if err := g.Update(ctx, func(string, provider.State) {}); err == nil || !strings.Contains(err.Error(), "unavailable") {
		t.Errorf("Update during an outage = %v, want an error with code unavailable", err)
	}
	s.ClearFailing()

	if n, err := g.Increase(ctx, 1); err != nil || n != 1 {
		t.Fatalf("Increase(1) after the outage = %d, %v; want 1, nil", n, err)
	}
	waitUpdate(ctx, t, g, func(st map[string]provider.State) bool {
		return len(st) == 1 && slices.Contains(slices.Collect(maps.Values(st)), provider.StateRunning)
	})

	// Close stops the machines of the servers left.
	srv := s.Servers()[0]
	if len(machineContainers(t, srv.Name)) != 1 {
		t.Fatalf("server %s: no container", srv.Name)
	}
	s.Close()
	if c := machineContainers(t, srv.Name); len(c) != 0 {
		t.Errorf("after Close, the container of %s is left", srv.Name)
	}
}

// TestPluginRateLimited: hcloud-go retries a call answered 429; the
// Increase that met the limit succeeds once it is lifted.
func TestPluginRateLimited(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := hcloudtest.New(t, hcloudtest.DockerMachines(t), token)
	g := runPlugin(t, s, nil)
	initStatic(ctx, t, g)

	s.SetFault(hcloudtest.Fault{Status: http.StatusTooManyRequests, Route: "POST /servers"})
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := g.Increase(ctx, 1)
		done <- result{n, err}
	}()
	// Lifted once the plugin has tried twice: the retry is hcloud-go's.
	if err := s.Wait(ctx, func() bool { return s.Count("POST /servers") >= 2 }); err != nil {
		t.Fatalf("waiting for a retried POST /servers: %v (calls %v)", err, s.Calls())
	}
	s.ClearFailing()
	r := <-done
	if r.err != nil || r.n != 1 {
		t.Fatalf("Increase(1) across a rate limit = %d, %v; want 1, nil", r.n, r.err)
	}
	if got := s.Servers(); len(got) != 1 || got[0].Status != "running" {
		t.Errorf("Servers() = %+v, want one running", got)
	}
}

// TestPluginWrongToken: Hetzner answers 401 to a wrong token, and the
// plugin's Init fails.
func TestPluginWrongToken(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := hcloudtest.New(t, noMachines{}, token)
	g := runPlugin(t, s, map[string]any{"token": "not-the-token"})
	_, err := g.Init(ctx, hclog.NewNullLogger(), provider.Settings{ConnectorConfig: provider.ConnectorConfig{
		Username: "root", Key: newKey(t), UseStaticCredentials: true,
	}})
	if err == nil || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("Init with a wrong token = %v, want an unauthorized error", err)
	}
	for _, c := range s.Calls() {
		if c.Status != http.StatusUnauthorized {
			t.Errorf("call %v, want 401", c)
		}
	}
}

// TestPluginUnmodelledOption: a plugin_config that makes the plugin call
// what the stand-in does not model shows up in Unexpected.
func TestPluginUnmodelledOption(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := hcloudtest.New(t, noMachines{}, token)
	g := runPlugin(t, s, map[string]any{"volume_size": 10})
	initStatic(ctx, t, g)
	if n, err := g.Increase(ctx, 1); err == nil || n != 0 {
		t.Fatalf("Increase(1) with volume_size = %d, %v; want 0 and an error", n, err)
	}
	u := s.Unexpected()
	if len(u) != 1 || u[0].Method != "POST" || u[0].Path != "/volumes" || u[0].Status != http.StatusNotFound {
		t.Errorf("Unexpected() = %v, want the one POST /volumes answered 404", u)
	}
}

// TestPluginMachineFails: a server whose machine does not start ends
// off with its create action in error; the plugin's Increase reports the
// error and deletes the server.
func TestPluginMachineFails(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := hcloudtest.New(t, noMachines{}, token)
	g := runPlugin(t, s, nil)
	initStatic(ctx, t, g)
	n, err := g.Increase(ctx, 1)
	if err == nil || n != 0 || !strings.Contains(err.Error(), "noMachines") {
		t.Fatalf("Increase(1) with machines that fail = %d, %v; want 0 and the machine's error", n, err)
	}
	if got := s.Servers(); len(got) != 0 {
		t.Errorf("Servers() = %+v, want none: the plugin deletes what it could not create", got)
	}
	if got := s.Deleted(); len(got) != 1 {
		t.Errorf("Deleted() = %v, want the one server", got)
	}
}

// TestServerLifecycle drives POST and DELETE /servers directly, with
// machines that start only when the test lets them: at most four start
// at once, a server deleted while its machine starts has the start cut
// short and the machine stopped, and the actions settle as the API's do.
func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	m := &gatedMachines{entered: make(chan string, 10), release: make(chan struct{})}
	s := hcloudtest.New(t, m, token)
	call := func(method, path, body string) reply {
		t.Helper()
		return apiCall(t, s, method, path, token, body)
	}
	pub := publicKey(t)
	key := call("POST", "/ssh_keys", fmt.Sprintf(`{"name":"k","public_key":%q}`, pub))
	keyID := key.body["ssh_key"].(map[string]any)["id"].(float64)

	ids := map[string]int64{}
	for i := range 6 {
		name := fmt.Sprintf("srv-%d", i)
		r := call("POST", "/servers", fmt.Sprintf(`{"name":%q,"server_type":"cx23","image":"debian-12","location":"fsn1","ssh_keys":[%d],"labels":{"n":"%d"},"public_net":{"enable_ipv4":true,"enable_ipv6":true}}`, name, int64(keyID), i))
		if r.status != 201 {
			t.Fatalf("POST /servers = %d %v", r.status, r.body)
		}
		srv := r.body["server"].(map[string]any)
		action := r.body["action"].(map[string]any)
		if srv["status"] != "initializing" || action["status"] != "running" || action["command"] != "create_server" || len(r.body["next_actions"].([]any)) != 1 {
			t.Errorf("POST /servers: server %v, action %v, next %v; want initializing, running create_server, one next action", srv["status"], action, r.body["next_actions"])
		}
		ids[name] = int64(srv["id"].(float64))
	}
	if r := call("POST", "/servers", `{"name":"srv-0","server_type":"cx23","image":"debian-12"}`); r.status != 409 || r.errCode() != "uniqueness_error" {
		t.Errorf("POST /servers with a taken name = %d %q, want 409 uniqueness_error", r.status, r.errCode())
	}

	// Four machines start at once; the others wait their turn.
	started := map[string]bool{}
	for range 4 {
		started[<-m.entered] = true
	}
	var victim string
	for name := range started {
		victim = name
		break
	}
	r := call("DELETE", fmt.Sprintf("/servers/%d", ids[victim]), "")
	if a := r.body["action"].(map[string]any); r.status != 200 || a["command"] != "delete_server" || a["status"] != "running" {
		t.Fatalf("DELETE /servers/%d = %d %v, want 200 and a running delete_server", ids[victim], r.status, r.body)
	}
	// The deleted server's start is cut short, which frees a place.
	started[<-m.entered] = true
	close(m.release)
	if err := s.Wait(ctx, func() bool {
		list := s.Servers()
		return len(list) == 5 && !slices.ContainsFunc(list, func(i hcloudtest.ServerInfo) bool { return i.Status != "running" })
	}); err != nil {
		t.Fatalf("waiting for five running servers: %v (servers %+v)", err, s.Servers())
	}
	if peak := m.peak(); peak != 4 {
		t.Errorf("%d machines started at once, want 4", peak)
	}
	if got := m.stoppedNames(); !slices.Equal(got, []string{victim}) {
		t.Errorf("stopped %v, want [%s]", got, victim)
	}
	if got := s.Deleted(); !slices.Equal(got, []int64{ids[victim]}) {
		t.Errorf("Deleted() = %v, want [%d]", got, ids[victim])
	}
	for _, srv := range s.Servers() {
		if srv.IP != "192.0.2.1" || !slices.Equal(srv.AuthorizedKeys, []string{pub}) || srv.Location != "fsn1" || srv.Image != "debian-12" {
			t.Errorf("server %+v", srv)
		}
		r := call("GET", fmt.Sprintf("/servers/%d", srv.ID), "")
		ipv4, _ := r.body["server"].(map[string]any)["public_net"].(map[string]any)["ipv4"].(map[string]any)
		if ipv4["ip"] != "192.0.2.1" {
			t.Errorf("GET /servers/%d: public_net.ipv4 = %v, want ip 192.0.2.1", srv.ID, ipv4)
		}
	}
	if r := call("GET", fmt.Sprintf("/servers/%d", ids[victim]), ""); r.status != 404 || r.errCode() != "not_found" {
		t.Errorf("GET of the deleted server = %d %q, want 404 not_found", r.status, r.errCode())
	}
	r = call("GET", "/actions?status=running", "")
	if got := r.body["actions"].([]any); len(got) != 0 {
		t.Errorf("actions still running: %v", got)
	}
	r = call("GET", "/actions?status=error", "")
	if got := r.body["actions"].([]any); len(got) != 2 { // the victim's create_server and start_server
		t.Errorf("actions in error: %v, want the deleted server's two", got)
	}
}

// TestAPI checks the wire surface directly: auth, errors, pagination,
// label selectors, uniqueness, faults.
func TestAPI(t *testing.T) {
	t.Parallel()
	s := hcloudtest.New(t, noMachines{}, token)

	call := func(method, path, auth, body string) reply {
		t.Helper()
		return apiCall(t, s, method, path, auth, body)
	}
	errCode := reply.errCode
	pag := reply.pagination

	if r := call("GET", "/locations", "", ""); r.status != 401 || errCode(r) != "unauthorized" {
		t.Errorf("GET /locations without a token = %d %q, want 401 unauthorized", r.status, errCode(r))
	}
	if r := call("GET", "/locations", "wrong", ""); r.status != 401 || errCode(r) != "unauthorized" {
		t.Errorf("GET /locations with a wrong token = %d %q, want 401 unauthorized", r.status, errCode(r))
	}

	r := call("GET", "/server_types?per_page=2", token, "")
	if got := len(r.body["server_types"].([]any)); r.status != 200 || got != 2 {
		t.Errorf("GET /server_types?per_page=2 = %d with %d types, want 200 with 2", r.status, got)
	}
	if p := pag(r); p["page"] != 1.0 || p["next_page"] != 2.0 || p["previous_page"] != nil || p["last_page"] != 3.0 || p["total_entries"] != 5.0 {
		t.Errorf("page 1 pagination = %v", p)
	}
	r = call("GET", "/server_types?per_page=2&page=3", token, "")
	if p := pag(r); len(r.body["server_types"].([]any)) != 1 || p["next_page"] != nil || p["previous_page"] != 2.0 {
		t.Errorf("page 3 = %v, pagination %v; want one type, no next page", r.body["server_types"], p)
	}

	for i, team := range []string{"a", "a", "b"} {
		pub := publicKey(t)
		body := fmt.Sprintf(`{"name":"key-%d","public_key":%q,"labels":{"team":%q}}`, i, pub, team)
		if r := call("POST", "/ssh_keys", token, body); r.status != 201 {
			t.Fatalf("POST /ssh_keys = %d %v", r.status, r.body)
		}
		if i == 0 {
			dup := fmt.Sprintf(`{"name":"key-0","public_key":%q}`, publicKey(t))
			if r := call("POST", "/ssh_keys", token, dup); r.status != 409 || errCode(r) != "uniqueness_error" {
				t.Errorf("POST /ssh_keys with a taken name = %d %q, want 409 uniqueness_error", r.status, errCode(r))
			}
		}
	}
	for sel, want := range map[string]int{"team=a": 2, "team!=a": 1, "team": 3, "!team": 0, "team+in+(b,c)": 1, "team%3D%3Db,team": 1} {
		r := call("GET", "/ssh_keys?label_selector="+sel, token, "")
		if got := len(r.body["ssh_keys"].([]any)); got != want {
			t.Errorf("GET /ssh_keys?label_selector=%s: %d keys, want %d", sel, got, want)
		}
	}

	before := len(s.Unexpected())
	if r := call("GET", "/floating_ips", token, ""); r.status != 404 || errCode(r) != "not_found" {
		t.Errorf("GET /floating_ips = %d %q, want 404 not_found", r.status, errCode(r))
	}
	if r := call("GET", "/servers?colour=blue", token, ""); r.status != 400 || errCode(r) != "invalid_input" {
		t.Errorf("GET /servers?colour=blue = %d %q, want 400 invalid_input", r.status, errCode(r))
	}
	if r := call("POST", "/servers", token, `{"name":"x","server_type":"cpx22","image":"debian-12","volumes":[1]}`); r.status != 400 {
		t.Errorf("POST /servers with a volume = %d, want 400", r.status)
	}
	if got := len(s.Unexpected()) - before; got != 3 {
		t.Errorf("Unexpected() grew by %d, want 3: %v", got, s.Unexpected())
	}

	s.SetFault(hcloudtest.Fault{Status: 429, Route: "GET /locations"})
	r = call("GET", "/locations", token, "")
	if r.status != 429 || errCode(r) != "rate_limit_exceeded" || r.header.Get("Retry-After") == "" {
		t.Errorf("GET /locations rate limited = %d %q Retry-After %q", r.status, errCode(r), r.header.Get("Retry-After"))
	}
	if r := call("GET", "/images?name=debian-12&architecture=x86", token, ""); r.status != 200 || len(r.body["images"].([]any)) != 1 {
		t.Errorf("GET /images during a fault on another route = %d %v, want 200 with one image", r.status, r.body)
	}
	s.SetFailing(503)
	if r := call("GET", "/images", token, ""); r.status != 503 || errCode(r) != "unavailable" {
		t.Errorf("GET /images while failing = %d %q, want 503 unavailable", r.status, errCode(r))
	}
	s.ClearFailing()
	if r := call("GET", "/locations?name=hel1", token, ""); r.status != 200 || len(r.body["locations"].([]any)) != 1 {
		t.Errorf("GET /locations?name=hel1 after ClearFailing = %d %v", r.status, r.body)
	}
	if got := s.Count("GET /locations"); got != 4 {
		t.Errorf(`Count("GET /locations") = %d, want 4`, got)
	}
}

// reply is an answer of the stand-in, its JSON body decoded.
type reply struct {
	status int
	header http.Header
	body   map[string]any
}

func (r reply) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (r reply) pagination() map[string]any {
	m, _ := r.body["meta"].(map[string]any)
	p, _ := m["pagination"].(map[string]any)
	return p
}

// apiCall calls the stand-in over HTTP, with auth as bearer token unless
// it is "".
func apiCall(t *testing.T, s *hcloudtest.Server, method, path, auth, body string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusNoContent {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
		}
		if err := json.NewDecoder(resp.Body).Decode(&r.body); err != nil {
			t.Fatalf("%s %s: decode: %v", method, path, err)
		}
	}
	return r
}

// noMachines is Machines for tests whose servers never boot: Start fails.
type noMachines struct{}

func (noMachines) Start(context.Context, string, []string) (string, error) {
	return "", errors.New("noMachines: this test starts no machine")
}

func (noMachines) Stop(context.Context, string) error { return nil }

// gatedMachines is Machines whose Start blocks until release is closed
// (or its ctx ends) and then returns 192.0.2.1, a documentation address:
// for tests of the stand-in's own lifecycle, which log in nowhere.
type gatedMachines struct {
	entered chan string
	release chan struct{}

	mu      sync.Mutex
	running int
	max     int
	stopped []string
}

func (m *gatedMachines) Start(ctx context.Context, name string, _ []string) (string, error) {
	m.mu.Lock()
	m.running++
	m.max = max(m.max, m.running)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.running--
		m.mu.Unlock()
	}()
	m.entered <- name
	select {
	case <-m.release:
		return "192.0.2.1", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (m *gatedMachines) Stop(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = append(m.stopped, name)
	return nil
}

func (m *gatedMachines) peak() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max
}

func (m *gatedMachines) stoppedNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.stopped)
}

// testContext is t's context, ending a little before t's deadline so
// that a stuck wait fails with a message rather than a panic.
func testContext(t *testing.T) context.Context {
	ctx := t.Context()
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-5*time.Second))
		t.Cleanup(cancel)
	}
	return ctx
}

// runPlugin starts the Hetzner plugin with PluginConfig(s, extra) and
// kills it when t ends; its log goes to t's.
func runPlugin(t *testing.T, s *hcloudtest.Server, extra map[string]any) provider.InstanceGroup {
	t.Helper()
	bin := hcloudtest.BuildPlugin(t)
	cfg, err := json.Marshal(hcloudtest.PluginConfig(s, extra))
	if err != nil {
		t.Fatal(err)
	}
	w := &testWriter{t: t}
	t.Cleanup(w.stop) // after Kill: Kill's last lines still show
	runner, err := fleeting.RunPlugin(bin, cfg, fleeting.WithPluginLogger(hclog.New(&hclog.LoggerOptions{
		Name: "plugin", Output: w, Level: hclog.Info,
	})))
	if err != nil {
		t.Fatalf("RunPlugin(%s) = %v", bin, err)
	}
	t.Cleanup(runner.Kill)
	return runner.InstanceGroup()
}

// initStatic runs Init with a fresh static key for root.
func initStatic(ctx context.Context, t *testing.T, g provider.InstanceGroup) {
	t.Helper()
	if _, err := g.Init(ctx, hclog.NewNullLogger(), provider.Settings{ConnectorConfig: provider.ConnectorConfig{
		Protocol: provider.ProtocolSSH, Username: "root", Key: newKey(t), UseStaticCredentials: true,
	}}); err != nil {
		t.Fatalf("Init = %v", err)
	}
}

// testWriter sends the plugin's log to t until the test is over.
type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// waitUpdate calls Update until cond holds for the states it reports.
func waitUpdate(ctx context.Context, t *testing.T, g provider.InstanceGroup, cond func(map[string]provider.State) bool) map[string]provider.State {
	t.Helper()
	for {
		var mu sync.Mutex
		got := map[string]provider.State{}
		err := g.Update(ctx, func(id string, st provider.State) {
			mu.Lock()
			defer mu.Unlock()
			got[id] = st
		})
		if err != nil {
			t.Fatalf("Update = %v", err)
		}
		if cond(got) {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Update still reports %v: %v", got, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// newKey returns a fresh ed25519 private key in OpenSSH PEM form.
func newKey(t *testing.T) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(blk)
}

// publicKey returns the authorized_keys line of a fresh key.
func publicKey(t *testing.T) string {
	t.Helper()
	signer, err := ssh.ParsePrivateKey(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
}

// runSSH logs in as ConnectInfo says, on port 22 of its external
// address, with its key, and runs cmd.
func runSSH(ctx context.Context, t *testing.T, ci provider.ConnectInfo, cmd string) string {
	t.Helper()
	signer, err := ssh.ParsePrivateKey(ci.Key)
	if err != nil {
		t.Fatalf("ConnectInfo key: %v", err)
	}
	addr := net.JoinHostPort(ci.ExternalAddr, "22")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User:            ci.Username,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // a fresh container's host key is unknown by design
		Timeout:         10 * time.Second,
	})
	if err != nil {
		conn.Close()
		t.Fatalf("ssh %s@%s: %v", ci.Username, addr, err)
	}
	client := ssh.NewClient(c, chans, reqs)
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatalf("ssh %s: session: %v", addr, err)
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("ssh %s: %s: %v (output %q)", addr, cmd, err, out)
	}
	return string(out)
}

// machineContainers lists the containers DockerMachines runs for the
// server called name.
func machineContainers(t *testing.T, name string) []container.Summary {
	t.Helper()
	cli := dockertest.Engine(t)
	list, err := cli.ContainerList(t.Context(), container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", hcloudtest.LabelServer+"="+name)),
	})
	if err != nil {
		t.Fatalf("ContainerList: %v", err)
	}
	return list
}
