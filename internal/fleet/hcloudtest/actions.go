package hcloudtest

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// newActionLocked records a running action on res; s.mu is held.
func (s *Server) newActionLocked(command string, res ...resourceJSON) *actionJSON {
	a := &actionJSON{
		ID: s.newIDLocked(), Command: command, Status: "running", Progress: 0,
		Started: time.Now().UTC(), Resources: res,
	}
	s.actions[a.ID] = a
	return a
}

// finishLocked settles a: success, or error with e; Server.mu is held.
func finishLocked(a *actionJSON, e *actionErrorJSON) {
	now := time.Now().UTC()
	a.Finished = &now
	a.Progress = 100
	a.Status = "success"
	if e != nil {
		a.Status = "error"
		a.Error = e
	}
}

// listActions is GET /actions?id=...: how the client library polls the
// actions it waits for.
func (s *Server) listActions(w http.ResponseWriter, r *http.Request) {
	q, ok := s.query(w, r, "id", "status", "sort")
	if !ok {
		return
	}
	var ids []int64
	for _, v := range q["id"] {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_input", fmt.Sprintf("invalid ID %q", v))
			return
		}
		ids = append(ids, id)
	}
	s.mu.Lock()
	list := make([]actionJSON, 0, len(ids))
	for id, a := range s.actions {
		if (len(ids) > 0 && !slices.Contains(ids, id)) ||
			(q.Has("status") && !slices.Contains(q["status"], a.Status)) {
			continue
		}
		list = append(list, *a)
	}
	s.mu.Unlock()
	slices.SortFunc(list, func(a, b actionJSON) int { return cmp.Compare(a.ID, b.ID) })
	writeList(w, r, "actions", list)
}

func (s *Server) getAction(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "action", "action", func(id int64) (actionJSON, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if a, ok := s.actions[id]; ok {
			return *a, true
		}
		return actionJSON{}, false
	})
}
