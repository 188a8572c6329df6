package coordinator

import (
	"net/http"
	"strings"

	"github.com/drover-ci/drover/internal/forge"
	"github.com/drover-ci/drover/internal/store"
)

// badgeSuffix ends the path of a project's status badge:
// GET /{project path}/badge.svg?ref=main.
const badgeSuffix = "/badge.svg"

// handleFallback serves the paths no other route has: a project's
// pipeline status badge, else 404.
func (c *Coordinator) handleFallback(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, badgeSuffix) {
		http.NotFound(w, r)
		return
	}
	c.handleBadge(w, r, strings.Trim(strings.TrimSuffix(r.URL.Path, badgeSuffix), "/"))
}

// handleBadge draws the status of the newest pipeline of a registered
// project for ?ref= (default: the project's default branch), "unknown"
// when it has none. Badges are public, as GitLab's are for a public
// project: they show one word of a project whose name is known, and are
// embedded in READMEs that cannot send a token. An unregistered project
// is 404, so the badge does not tell which projects exist.
func (c *Coordinator) handleBadge(w http.ResponseWriter, r *http.Request, project string) {
	proj, err := c.projectSettings(r.Context(), project)
	if err != nil {
		c.internalError(r.Context(), w, "badge", err)
		return
	}
	if proj == nil {
		http.NotFound(w, r)
		return
	}
	ref := r.URL.Query().Get("ref")
	if ref == "" {
		ref = proj.DefaultBranch
	}
	ps, err := c.st.ListPipelines(r.Context(), store.PipelineFilter{Project: proj.Name, Ref: ref, Newest: true, Limit: 1})
	if err != nil {
		c.internalError(r.Context(), w, "badge", err)
		return
	}
	status := forge.PipelineStatus("unknown")
	if len(ps) > 0 {
		status = forge.PipelineStatus(ps[0].Status)
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-cache, no-store, must-revalidate")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	forge.WriteBadge(w, "pipeline", status)
}
