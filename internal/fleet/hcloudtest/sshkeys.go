package hcloudtest

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

func (s *Server) listSSHKeys(w http.ResponseWriter, r *http.Request) {
	q, sel, ok := s.listQuery(w, r, "name", "fingerprint", "label_selector", "sort")
	if !ok {
		return
	}
	s.mu.Lock()
	list := make([]sshKeyJSON, 0, len(s.keys))
	for _, k := range s.keys {
		if (q.Has("name") && k.Name != q.Get("name")) ||
			(q.Has("fingerprint") && k.Fingerprint != q.Get("fingerprint")) ||
			!sel.matches(k.Labels) {
			continue
		}
		c := *k
		c.Labels = maps.Clone(k.Labels)
		list = append(list, c)
	}
	s.mu.Unlock()
	slices.SortFunc(list, func(a, b sshKeyJSON) int { return cmp.Compare(a.ID, b.ID) })
	writeList(w, r, "ssh_keys", list)
}

func (s *Server) getSSHKey(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "ssh_key", "SSH key", func(id int64) (sshKeyJSON, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		k, ok := s.keys[id]
		if !ok {
			return sshKeyJSON{}, false
		}
		body := *k
		body.Labels = maps.Clone(k.Labels)
		return body, true
	})
}

// createSSHKey is POST /ssh_keys. Names and fingerprints are unique, as
// in the API; the fingerprint is the MD5 one the API (and the plugin,
// which looks its key up by it) uses.
func (s *Server) createSSHKey(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.query(w, r); !ok {
		return
	}
	var req sshKeyCreateRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.Name == "" {
		writeError(w, http.StatusBadRequest, "invalid_input", "invalid input in field 'name'")
		return
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(req.PublicKey))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_input", "invalid input in field 'public_key': "+err.Error())
		return
	}
	fp := ssh.FingerprintLegacyMD5(pub)
	body, conflict := s.addKey(req, fp)
	if conflict != "" {
		writeError(w, http.StatusConflict, "uniqueness_error", conflict)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"ssh_key": body})
}

// addKey stores a new key, unless its name or fingerprint is taken: then
// it returns the API's message.
func (s *Server) addKey(req sshKeyCreateRequest, fp string) (sshKeyJSON, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		switch {
		case k.Name == req.Name:
			return sshKeyJSON{}, "SSH key with the same name already exists"
		case k.Fingerprint == fp:
			return sshKeyJSON{}, "SSH key with the same fingerprint already exists"
		}
	}
	k := &sshKeyJSON{
		ID: s.newIDLocked(), Name: req.Name, Fingerprint: fp,
		PublicKey: strings.TrimSpace(req.PublicKey), Labels: maps.Clone(req.Labels), Created: time.Now().UTC(),
	}
	if k.Labels == nil {
		k.Labels = map[string]string{}
	}
	s.keys[k.ID] = k
	s.changedLocked()
	body := *k
	body.Labels = maps.Clone(k.Labels)
	return body, ""
}

func (s *Server) deleteSSHKey(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.query(w, r); !ok {
		return
	}
	id, ok := s.pathID(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	_, found := s.keys[id]
	if found {
		delete(s.keys, id)
		s.changedLocked()
	}
	s.mu.Unlock()
	if !found {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("SSH key with ID %d not found", id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// findKeyLocked finds an SSH key by ID or name; s.mu is held.
func (s *Server) findKeyLocked(ref idOrName) *sshKeyJSON {
	if ref.ID != 0 {
		return s.keys[ref.ID]
	}
	for _, k := range s.keys {
		if k.Name == ref.Name {
			return k
		}
	}
	return nil
}
