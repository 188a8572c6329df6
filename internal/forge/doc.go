// Package forge speaks to the forges drover builds for (Gitea and Forgejo,
// GitHub, GitLab): it authenticates and parses their push webhooks into
// one Push, posts commit statuses back to them, and draws status badges.
// It knows nothing of projects, the store or HTTP routing: the
// coordinator's handlers call it.
//
// # Webhooks
//
// A handler reads the body (bounded: wrap it in http.MaxBytesReader, 1
// MiB is plenty for a push of 20 commits; forges cap their payloads near
// 25 MiB), then calls Parse with the project's forge and secret:
//
//	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//	if err != nil { ... }                     // 413 or 400
//	push, err := forge.Parse(proj.Forge, proj.WebhookSecret, r.Header, body)
//	switch {
//	case errors.Is(err, forge.ErrSignature): // 401
//	case errors.Is(err, forge.ErrPayload):   // 400, err names the field
//	case errors.Is(err, forge.ErrIgnored):   // 202, start nothing
//	case err != nil:                         // 500: unknown forge
//	case push.SkipCI():                      // 202, or a skipped pipeline
//	default:                                 // start a pipeline for push.Ref at push.After
//	}
//
// Authentication comes before anything is read from the body:
//
//	forge    event header                      authentication                             delivery id
//	gitea    X-Gitea-Event / X-Forgejo-Event    X-Gitea-Signature / X-Forgejo-Signature:   X-Gitea-Delivery / X-Forgejo-Delivery
//	                                            hex HMAC-SHA256 of the body
//	github   X-GitHub-Event                     X-Hub-Signature-256: "sha256=" + hex HMAC  X-GitHub-Delivery
//	gitlab   X-Gitlab-Event                     X-Gitlab-Token equal to the secret         Idempotency-Key, else X-Gitlab-Event-UUID
//	generic  (none)                             Authorization: Bearer <secret>             X-Drover-Delivery, else the body's delivery_id
//
// Events: Gitea's and GitHub's "push" (tags arrive as pushes of
// refs/tags/...), GitLab's "Push Hook" and "Tag Push Hook". GitHub's
// "ping", Gitea's "create" and "delete" (each comes with a push of the
// same ref), every other event, pushes of refs that are neither branches
// nor tags, and deletions are an *IgnoredError; a deletion's carries the
// Push (Deleted set) so the caller may cancel that ref's pipelines. An
// empty secret authenticates nothing: configure one on both sides.
// Generic's body is GenericPush. Detect guesses the forge from the
// headers when one endpoint serves several.
//
// A Push's Before is "" for a created ref; After is the commit to build.
// SkipCI honours GitLab's "[ci skip]" and "[skip ci]" in the head
// commit's message, in any case.
//
// # Commit statuses
//
// StatusClient.Post sends one status and never retries; its errors are a
// *StatusError that names the forge, the URL path and the HTTP status,
// and says whether a retry may help (Retryable: transport errors, 408,
// 429, 5xx). PipelineStatus.State documents how drover's statuses map
// onto each forge's states. The endpoints:
//
//	gitea   POST {api}/api/v1/repos/{owner}/{repo}/statuses/{sha}    Authorization: token <t>
//	github  POST {api}/repos/{owner}/{repo}/statuses/{sha}           Authorization: Bearer <t>  ({api} defaults to https://api.github.com)
//	gitlab  POST {api}/api/v4/projects/{id or url-encoded path}/statuses/{sha}  PRIVATE-TOKEN: <t>
//
// A Notifier is what the coordinator holds: Send never blocks, Run
// delivers in the background with retries and exponential backoff on an
// injected clock, keeps only the newest status per (repo, sha, context),
// and bounds its queue by dropping the oldest waiting status.
//
// # Badges
//
// WriteBadge draws "pipeline | passed" and friends as a deterministic SVG.
package forge
