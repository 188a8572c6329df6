package hcloudtest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Server statuses, as the API spells them.
const (
	statusInitializing = "initializing"
	statusRunning      = "running"
	statusOff          = "off"
	statusDeleting     = "deleting"
)

func (s *Server) listServers(w http.ResponseWriter, r *http.Request) {
	q, sel, ok := s.listQuery(w, r, "name", "label_selector", "status", "sort")
	if !ok {
		return
	}
	s.mu.Lock()
	list := make([]serverJSON, 0, len(s.servers))
	for _, srv := range s.sortedServersLocked() {
		if (q.Has("name") && srv.name != q.Get("name")) ||
			(q.Has("status") && !slices.Contains(q["status"], srv.status)) ||
			!sel.matches(srv.labels) {
			continue
		}
		list = append(list, srv.json())
	}
	s.mu.Unlock()
	writeList(w, r, "servers", list)
}

func (s *Server) sortedServersLocked() []*server {
	list := slices.Collect(maps.Values(s.servers))
	slices.SortFunc(list, func(a, b *server) int { return cmp.Compare(a.id, b.id) })
	return list
}

func (s *Server) getServer(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "server", "server", func(id int64) (serverJSON, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if srv, ok := s.servers[id]; ok {
			return srv.json(), true
		}
		return serverJSON{}, false
	})
}

// json is the server as the API shows it; Server.mu is held.
func (srv *server) json() serverJSON {
	img := srv.image
	out := serverJSON{
		ID: srv.id, Name: srv.name, Status: srv.status, Created: srv.created,
		PublicNet:  publicNetJSON{FloatingIPs: []int64{}, Firewalls: []struct{}{}},
		PrivateNet: []struct{}{},
		ServerType: srv.serverType, Location: srv.location, Image: &img,
		Labels: maps.Clone(srv.labels), Volumes: []int64{}, LoadBalancers: []int64{},
		PrimaryDiskSize: srv.serverType.Disk,
	}
	if srv.ip != "" {
		out.PublicNet.IPv4 = &ipv4JSON{ID: srv.id, IP: srv.ip, DNSPtr: "static." + srv.ip + ".clients.your-server.de"}
	}
	return out
}

// createServer is POST /servers: it validates the request as the API
// does, answers with the server initializing and its actions running,
// and boots the machine in the background.
func (s *Server) createServer(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.query(w, r); !ok {
		return
	}
	var req serverCreateRequest
	if !s.decode(w, r, &req) {
		return
	}
	switch {
	case len(req.Volumes) > 0, len(req.Networks) > 0, len(req.Firewalls) > 0, req.PlacementGroup != 0,
		!req.Datacenter.empty(), req.Automount != nil:
		s.refuse(w, http.StatusBadRequest, "invalid_input", "volumes, networks, firewalls, placement groups and datacenters are not modelled by the stand-in (hcloudtest)")
		return
	case req.PublicNet != nil && (req.PublicNet.IPv4 != 0 || req.PublicNet.IPv6 != 0 || !req.PublicNet.EnableIPv4):
		s.refuse(w, http.StatusBadRequest, "invalid_input", "the stand-in (hcloudtest) gives every server a public IPv4 of its own: primary IPs and enable_ipv4 = false are not modelled")
		return
	case req.StartAfterCreate != nil && !*req.StartAfterCreate:
		s.refuse(w, http.StatusBadRequest, "invalid_input", "start_after_create = false is not modelled by the stand-in (hcloudtest)")
		return
	case req.Name == "":
		writeError(w, http.StatusBadRequest, "invalid_input", "invalid input in field 'name'")
		return
	case req.ServerType.empty():
		writeError(w, http.StatusBadRequest, "invalid_input", "invalid input in field 'server_type'")
		return
	case req.Image.empty():
		writeError(w, http.StatusBadRequest, "invalid_input", "invalid input in field 'image'")
		return
	}
	st, ok := findServerType(req.ServerType)
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_input", fmt.Sprintf("server type %s not found", req.ServerType))
		return
	}
	img, ok := findImage(req.Image, st.Architecture)
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_input", fmt.Sprintf("image %s not found for architecture %s", req.Image, st.Architecture))
		return
	}
	if img.Architecture != st.Architecture {
		writeError(w, http.StatusBadRequest, "invalid_input", fmt.Sprintf("image %s is for architecture %s, server type %s is %s", req.Image, img.Architecture, st.Name, st.Architecture))
		return
	}
	loc := locations[0]
	if !req.Location.empty() {
		if loc, ok = findLocation(req.Location); !ok {
			writeError(w, http.StatusBadRequest, "invalid_input", fmt.Sprintf("location %s not found", req.Location))
			return
		}
	}

	s.mu.Lock()
	var keys []string
	for _, ref := range req.SSHKeys {
		k := s.findKeyLocked(ref)
		if k == nil {
			s.mu.Unlock()
			writeError(w, http.StatusBadRequest, "invalid_input", fmt.Sprintf("SSH key %s not found", ref))
			return
		}
		keys = append(keys, strings.TrimSpace(k.PublicKey))
	}
	for _, other := range s.servers {
		if other.name == req.Name {
			s.mu.Unlock()
			writeError(w, http.StatusConflict, "uniqueness_error", "server name is already used")
			return
		}
	}
	bootCtx, cancelBoot := context.WithCancel(s.ctx)
	srv := &server{
		id: s.newIDLocked(), name: req.Name, status: statusInitializing, created: time.Now().UTC(),
		labels: maps.Clone(req.Labels), serverType: st, image: img, location: loc,
		userData: req.UserData, keys: keys,
		cancelBoot: cancelBoot, booted: make(chan struct{}),
	}
	if srv.labels == nil {
		srv.labels = map[string]string{}
	}
	s.servers[srv.id] = srv
	res := resourceJSON{ID: srv.id, Type: "server"}
	create := s.newActionLocked("create_server", res)
	start := s.newActionLocked("start_server", res)
	body := map[string]any{
		"server":        srv.json(),
		"action":        *create,
		"next_actions":  []actionJSON{*start},
		"root_password": nil,
	}
	s.wg.Add(1)
	s.changedLocked()
	s.mu.Unlock()

	go s.boot(bootCtx, srv, create, start)
	writeJSON(w, http.StatusCreated, body)
}

// boot starts the machine of srv and settles the server and its actions
// by the outcome.
func (s *Server) boot(ctx context.Context, srv *server, actions ...*actionJSON) {
	defer s.wg.Done()
	defer close(srv.booted)
	var ip string
	err := s.machineOp(ctx, func(ctx context.Context) error {
		var err error
		ip, err = s.machines.Start(ctx, srv.name, srv.keys)
		return err
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.changedLocked()
	if err != nil {
		if srv.status != statusDeleting {
			srv.status = statusOff
			if s.ctx.Err() == nil {
				s.logf("hcloudtest: start machine of server %s: %v", srv.name, err)
			}
		}
		for _, a := range actions {
			finishLocked(a, &actionErrorJSON{Code: "action_failed", Message: "start machine: " + err.Error()})
		}
		return
	}
	srv.ip = ip
	if srv.status == statusInitializing {
		srv.status = statusRunning
	}
	for _, a := range actions {
		finishLocked(a, nil)
	}
}

// machineOp runs op when fewer than maxBusy others run.
func (s *Server) machineOp(ctx context.Context, op func(context.Context) error) error {
	select {
	case s.busy <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.busy }()
	return op(ctx)
}

// deleteServer is DELETE /servers/{id}: the server goes to deleting with
// a running delete_server action, and is gone once its machine stopped.
// A second DELETE gets the first one's action.
func (s *Server) deleteServer(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.query(w, r); !ok {
		return
	}
	id, ok := s.pathID(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	srv, found := s.servers[id]
	if !found {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("server with ID %d not found", id))
		return
	}
	if srv.deleteAction == nil {
		s.deleted = append(s.deleted, id)
		srv.status = statusDeleting
		srv.deleteAction = s.newActionLocked("delete_server", resourceJSON{ID: id, Type: "server"})
		s.wg.Add(1)
		go s.halt(srv, srv.deleteAction)
		s.changedLocked()
	}
	body := map[string]any{"action": *srv.deleteAction}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, body)
}

// halt stops the machine of srv, after its boot is over (cut short), and
// removes the server.
func (s *Server) halt(srv *server, a *actionJSON) {
	defer s.wg.Done()
	srv.cancelBoot()
	<-srv.booted
	err := s.machineOp(s.ctx, func(ctx context.Context) error { return s.machines.Stop(ctx, srv.name) })
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.changedLocked()
	if err != nil {
		// The server stays, deleting; Close tries again.
		if s.ctx.Err() == nil {
			s.logf("hcloudtest: stop machine of server %s: %v", srv.name, err)
		}
		finishLocked(a, &actionErrorJSON{Code: "action_failed", Message: "stop machine: " + err.Error()})
		return
	}
	delete(s.servers, srv.id)
	finishLocked(a, nil)
}

// decode reads a JSON request body into v. A field v does not have is
// refused as unexpected; malformed JSON is json_error, as from the API.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	d := json.NewDecoder(r.Body)
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			s.refuse(w, http.StatusBadRequest, "invalid_input", "request "+err.Error()+": not modelled by the stand-in (hcloudtest)")
		} else {
			writeError(w, http.StatusBadRequest, "json_error", "invalid JSON: "+err.Error())
		}
		return false
	}
	return true
}
