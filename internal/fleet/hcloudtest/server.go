package hcloudtest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// maxBusy bounds the machine operations (Start, Stop) in flight at once:
// an Increase of 10 boots four machines at a time instead of one after
// the other, without starting ten containers at once.
const maxBusy = 4

// Server is a running stand-in of the Hetzner Cloud API. Create it with
// New; its methods are safe for concurrent use.
type Server struct {
	// URL is the API endpoint, ending in /v1: the plugin's endpoint.
	URL string
	// Token is the API token every call must carry as a bearer token.
	Token string

	machines Machines
	logf     func(format string, args ...any)
	http     *httptest.Server
	mux      *http.ServeMux

	// ctx is cancelled by Close, ending machine operations in flight.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	busy   chan struct{}

	closeOnce sync.Once

	mu      sync.Mutex
	nextID  int64
	servers map[int64]*server
	keys    map[int64]*sshKeyJSON
	actions map[int64]*actionJSON
	deleted []int64
	calls   []Call
	fault   *Fault
	changed chan struct{} // closed and replaced at every change
}

// server is the stand-in's record of one server; guarded by Server.mu.
type server struct {
	id         int64
	name       string
	status     string
	created    time.Time
	ip         string
	labels     map[string]string
	serverType serverTypeJSON
	image      imageJSON
	location   locationJSON
	userData   string
	keys       []string // authorized_keys lines

	cancelBoot   context.CancelFunc
	booted       chan struct{} // closed when Machines.Start returned
	deleteAction *actionJSON
}

// New starts a stand-in on a loopback port whose servers are machines m
// starts, which accepts calls with token, and which is closed (Close)
// when t ends. Call it after DockerMachines (or whatever sets up m), so
// that the stand-in is closed first.
func New(t testing.TB, m Machines, token string) *Server {
	t.Helper()
	if m == nil {
		t.Fatal("hcloudtest.New: nil Machines")
	}
	if token == "" {
		t.Fatal("hcloudtest.New: empty token")
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		Token:    token,
		machines: m,
		logf:     t.Logf,
		ctx:      ctx,
		cancel:   cancel,
		busy:     make(chan struct{}, maxBusy),
		nextID:   1,
		servers:  map[int64]*server{},
		keys:     map[int64]*sshKeyJSON{},
		actions:  map[int64]*actionJSON{},
		changed:  make(chan struct{}),
	}
	s.routes()
	s.http = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.http.URL + "/v1"
	t.Cleanup(s.Close)
	return s
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	for pattern, h := range map[string]http.HandlerFunc{
		"GET /v1/locations":         s.listLocations,
		"GET /v1/locations/{id}":    s.getLocation,
		"GET /v1/server_types":      s.listServerTypes,
		"GET /v1/server_types/{id}": s.getServerType,
		"GET /v1/images":            s.listImages,
		"GET /v1/images/{id}":       s.getImage,
		"GET /v1/ssh_keys":          s.listSSHKeys,
		"GET /v1/ssh_keys/{id}":     s.getSSHKey,
		"POST /v1/ssh_keys":         s.createSSHKey,
		"DELETE /v1/ssh_keys/{id}":  s.deleteSSHKey,
		"GET /v1/servers":           s.listServers,
		"GET /v1/servers/{id}":      s.getServer,
		"POST /v1/servers":          s.createServer,
		"DELETE /v1/servers/{id}":   s.deleteServer,
		"GET /v1/actions":           s.listActions,
		"GET /v1/actions/{id}":      s.getAction,
		"GET /v1/volumes":           s.listVolumes,
	} {
		s.mux.Handle(pattern, h)
	}
}

// Close stops the HTTP server, ends the machine operations in flight and
// stops the machine of every server that is left. It is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		// HTTP first, so no call starts a machine while the rest is
		// torn down; Close waits for the calls in flight.
		s.http.Close()
		s.cancel()
		s.wg.Wait()
		s.mu.Lock()
		left := make([]*server, 0, len(s.servers))
		for _, srv := range s.servers {
			left = append(left, srv)
		}
		s.mu.Unlock()
		// s.ctx is cancelled by now: the stops get their own deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, srv := range left {
			if err := s.machines.Stop(ctx, srv.name); err != nil {
				s.logf("hcloudtest: close: stop machine of server %s: %v", srv.name, err)
			}
		}
	})
}

// Call is one API call the stand-in answered.
type Call struct {
	Method string // e.g. "GET"
	Path   string // without the /v1 prefix, e.g. "/servers/7"
	Query  string // raw query, e.g. "label_selector=instance-group%3Dg&page=1&per_page=50"
	// Route is the endpoint the call matched, e.g. "GET /servers/{id}";
	// "" when it matched none.
	Route  string
	Status int
	// Unexpected is set when the stand-in refused the call because it
	// does not model it: an unknown endpoint, query parameter or field,
	// or an option of POST /servers it does not support.
	Unexpected bool
}

// String writes the call as a test's log shows it: "METHOD path?query ->
// status".
func (c Call) String() string {
	s := c.Method + " " + c.Path
	if c.Query != "" {
		s += "?" + c.Query
	}
	return fmt.Sprintf("%s -> %d", s, c.Status)
}

// Fault is an error answer the stand-in gives instead of serving calls.
type Fault struct {
	// Status is the HTTP status, e.g. 503 or 429 (which also gets
	// Retry-After: 1 and RateLimit-Remaining: 0 headers).
	Status int
	// Code is the Hetzner error code; "" means the one Hetzner sends
	// with Status (429 rate_limit_exceeded, 503 unavailable, ...).
	Code string
	// Route limits the fault to one endpoint, spelled as Call.Route
	// (e.g. "POST /servers"); "" means every call.
	Route string
}

// SetFault makes the calls f matches answer f's error, from now until
// ClearFailing or the next SetFault.
func (s *Server) SetFault(f Fault) {
	if f.Code == "" {
		f.Code = codeFor(f.Status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = &f
}

// SetFailing makes every call answer status, until ClearFailing.
func (s *Server) SetFailing(status int) { s.SetFault(Fault{Status: status}) }

// ClearFailing ends the fault SetFault or SetFailing set.
func (s *Server) ClearFailing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = nil
}

// codeFor is the error code Hetzner's API sends with status.
func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_input"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusPreconditionFailed:
		return "resource_unavailable"
	case http.StatusLocked:
		return "locked"
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case http.StatusInternalServerError:
		return "server_error"
	case http.StatusBadGateway:
		return "bad_gateway"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusGatewayTimeout:
		return "timeout"
	}
	return "unknown_error"
}

// Calls returns every call answered so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Count returns how many calls matched route, spelled as Call.Route,
// whatever their answer (a fault, 401, ...): Count("POST /servers").
func (s *Server) Count(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c.Route == route {
			n++
		}
	}
	return n
}

// Unexpected returns the calls the stand-in refused because it does not
// model them (Call.Unexpected). A test of the plugin wants none.
func (s *Server) Unexpected() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if c.Unexpected {
			out = append(out, c)
		}
	}
	return out
}

// ServerInfo is what the stand-in knows of one server.
type ServerInfo struct {
	ID     int64
	Name   string
	Status string // initializing, running, off (its machine failed), deleting
	// IP is the machine's address (public_net.ipv4.ip); "" before it
	// is up.
	IP         string
	Labels     map[string]string
	ServerType string
	Image      string
	Location   string
	UserData   string
	// AuthorizedKeys are the public keys of the server's ssh_keys, as
	// given to Machines.Start.
	AuthorizedKeys []string
}

// IID is the instance ID the Hetzner plugin reports for the server.
func (i ServerInfo) IID() string { return i.Name + ":" + strconv.FormatInt(i.ID, 10) }

// Servers returns the servers that exist now, by ID.
func (s *Server) Servers() []ServerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ServerInfo, 0, len(s.servers))
	for _, srv := range s.servers {
		out = append(out, ServerInfo{
			ID: srv.id, Name: srv.name, Status: srv.status, IP: srv.ip,
			Labels: maps.Clone(srv.labels), ServerType: srv.serverType.Name,
			Image: srv.image.Name, Location: srv.location.Name, UserData: srv.userData,
			AuthorizedKeys: slices.Clone(srv.keys),
		})
	}
	slices.SortFunc(out, func(a, b ServerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Deleted returns the IDs of the servers that got a DELETE, in the order
// of their first one.
func (s *Server) Deleted() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deleted)
}

// Wait returns when cond holds, checking it now and again after every
// call the stand-in answers and every change of a server or action, or
// returns ctx's error. cond may call the Server's methods.
func (s *Server) Wait(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// changedLocked wakes the Waits; s.mu is held.
func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// recorder captures the status of an answer and whether the stand-in
// refused the call as unexpected.
type recorder struct {
	http.ResponseWriter
	status     int
	unexpected bool
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// serve records the call, then answers with the fault if one is set,
// with 401 when the token is wrong, with not_found when no endpoint
// matches, and else with the endpoint's handler.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	_, pattern := s.mux.Handler(r)
	route := strings.Replace(pattern, " /v1/", " /", 1)
	rec := &recorder{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.calls = append(s.calls, Call{
			Method: r.Method, Path: strings.TrimPrefix(r.URL.Path, "/v1"), Query: r.URL.RawQuery,
			Route: route, Status: rec.status, Unexpected: rec.unexpected,
		})
		s.changedLocked()
	}()

	s.mu.Lock()
	f := s.fault
	s.mu.Unlock()
	if f != nil && (f.Route == "" || f.Route == route) {
		if f.Status == http.StatusTooManyRequests {
			rec.Header().Set("Retry-After", "1")
			rec.Header().Set("RateLimit-Limit", "3600")
			rec.Header().Set("RateLimit-Remaining", "0")
		}
		writeError(rec, f.Status, f.Code, "fault set by the test (hcloudtest)")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		writeError(rec, http.StatusUnauthorized, "unauthorized", "unable to authenticate")
		return
	}
	if pattern == "" {
		s.refuse(rec, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s is not an endpoint of the Hetzner Cloud API stand-in (hcloudtest)", r.Method, r.URL.Path))
		return
	}
	s.mux.ServeHTTP(rec, r)
}

// refuse answers a call the stand-in does not model, and marks it
// unexpected.
func (s *Server) refuse(w http.ResponseWriter, status int, code, msg string) {
	if rec, ok := w.(*recorder); ok {
		rec.unexpected = true
	}
	writeError(w, status, code, msg)
}

// writeError answers with Hetzner's error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Error: apiError{Code: code, Message: msg, Details: json.RawMessage("{}")}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only the package's own types are marshalled: a failure is a
		// bug here, not an answer to give.
		panic(fmt.Sprintf("hcloudtest: marshal %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// query checks that the call's query has only the parameters allowed
// (and page, per_page) and returns it; an unknown parameter is refused as
// unexpected.
func (s *Server) query(w http.ResponseWriter, r *http.Request, allowed ...string) (url.Values, bool) {
	q := r.URL.Query()
	for k := range q {
		if k != "page" && k != "per_page" && !slices.Contains(allowed, k) {
			s.refuse(w, http.StatusBadRequest, "invalid_input", fmt.Sprintf("query parameter %q is not modelled by the stand-in (hcloudtest)", k))
			return nil, false
		}
	}
	return q, true
}

// listQuery is query for a list call that may filter by labels: it also
// returns the call's label_selector, or refuses one that does not parse.
func (s *Server) listQuery(w http.ResponseWriter, r *http.Request, allowed ...string) (url.Values, selector, bool) {
	q, ok := s.query(w, r, allowed...)
	if !ok {
		return nil, nil, false
	}
	sel, err := parseSelector(q.Get("label_selector"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_input", err.Error())
		return nil, nil, false
	}
	return q, sel, true
}

func (s *Server) pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, "invalid_input", fmt.Sprintf("invalid ID %q", r.PathValue("id")))
		return 0, false
	}
	return id, true
}

// writeList answers a list call with the page of items the call's page
// and per_page ask for (default 1 and 25, per_page at most 50, as the
// API has it) and meta.pagination.
func writeList[T any](w http.ResponseWriter, r *http.Request, key string, items []T) {
	q := r.URL.Query()
	page, perPage := 1, 25
	for name, dst := range map[string]*int{"page": &page, "per_page": &perPage} {
		if !q.Has(name) {
			continue
		}
		n, err := strconv.Atoi(q.Get(name))
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "invalid_input", fmt.Sprintf("%s: %q is not a positive integer", name, q.Get(name)))
			return
		}
		*dst = n
	}
	perPage = min(perPage, 50)
	total := len(items)
	last := max(1, (total+perPage-1)/perPage)
	p := pagination{Page: page, PerPage: perPage, LastPage: last, TotalEntries: total}
	if page > 1 {
		prev := page - 1
		p.PreviousPage = &prev
	}
	if page < last {
		next := page + 1
		p.NextPage = &next
	}
	lo := min((page-1)*perPage, total)
	hi := min(lo+perPage, total)
	window := items[lo:hi]
	if window == nil {
		window = []T{}
	}
	writeJSON(w, http.StatusOK, map[string]any{key: window, "meta": meta{Pagination: p}})
}

// newIDLocked hands out the next resource ID; s.mu is held.
func (s *Server) newIDLocked() int64 {
	id := s.nextID
	s.nextID++
	return id
}

// getOne serves GET /<things>/{id}: what find returns for the id, as the
// API wraps it ({"<key>": ...}), or the API's not_found naming what. A
// query parameter is refused, as on every endpoint that takes none.
func getOne[T any](s *Server, w http.ResponseWriter, r *http.Request, key, what string, find func(id int64) (T, bool)) {
	if _, ok := s.query(w, r); !ok {
		return
	}
	id, ok := s.pathID(w, r)
	if !ok {
		return
	}
	v, found := find(id)
	if !found {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s with ID %d not found", what, id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{key: v})
}
