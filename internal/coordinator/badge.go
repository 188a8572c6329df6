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

// badgePaths serves a project's badge path, /{project}/badge.svg (which a
// ServeMux pattern cannot say: the project has slashes), as the route
// GET /-/badge/{project...}; every other request goes to next as it is.
func badgePaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasSuffix(p, badgeSuffix) &&
			!strings.HasPrefix(p, "/api/") && !strings.HasPrefix(p, "/static/") && !strings.HasPrefix(p, "/-/") {
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/-/badge/" + strings.Trim(strings.TrimSuffix(p, badgeSuffix), "/")
			r2.URL.RawPath = ""
			next.ServeHTTP(w, r2)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handleBadge draws the status of the newest pipeline of a registered
// project for ?ref= (default: the project's default branch), "unknown"
// when it has none. Badges are public, as GitLab's are for a public
// project: they show one word of a project whose name is known, and are
// embedded in READMEs that cannot send a token. An unregistered project
// is 404, so the badge does not tell which projects exist.
func (c *Coordinator) handleBadge(w http.ResponseWriter, r *http.Request) {
	project := r.PathValue("project")
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
