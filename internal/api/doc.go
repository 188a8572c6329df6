// Package api holds the wire types of GitLab's runner API v4 as drover
// speaks it on every hop (coordinator ← router ← manager), and the
// runner-side HTTP client for it.
//
// # Layers
//
// The Client does exactly one HTTP exchange per method and never retries;
// it returns the status and headers the caller needs to decide. Retry
// policies live with the callers (see internal/manager), each written down
// in its doc comment.
package api
