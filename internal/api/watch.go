package api

import (
	"context"
	"net/http"
	"time"
)

// HeaderJobWatch is drover's extension on the job answers of the runner
// API (jobs/request, PUT, PATCH): the coordinator serves POST
// jobs/watch, and holds such a request at most this many seconds. A
// coordinator that does not send it (GitLab) has no such endpoint.
const HeaderJobWatch = "X-Drover-Job-Watch"

// MaxWatchedJobs is the most jobs one jobs/watch request may name: the
// coordinator refuses more (400), and a manager watching more jobs on one
// coordinator with one runner token splits them over several requests.
const MaxWatchedJobs = 1000

// WatchedJob is one job of a watch request: its token and the Job-Status
// the runner last saw ("pending" before a two-phase accept, "running",
// "canceling").
type WatchedJob struct {
	ID        int64  `json:"id"`         // the job's id
	Token     string `json:"token"`      // the job's own token (JobResponse.Token)
	JobStatus string `json:"job_status"` // the Job-Status last seen
}

// WatchRequest is the body of POST jobs/watch: answer when the status of
// one of Jobs (at most MaxWatchedJobs) is no longer the one given, or after
// Timeout seconds. Token is the runner token the jobs were handed to, as
// in jobs/request: only that runner's jobs are answered.
type WatchRequest struct {
	Token   string       `json:"token"`             // the runner token
	Jobs    []WatchedJob `json:"jobs"`              // the jobs to watch
	Timeout float64      `json:"timeout,omitempty"` // seconds to wait at most; 0 = the coordinator's default
}

// JobChange is one changed job in a watch answer: the status code and
// Job-Status that a PUT with its token would have been answered with now,
// except that a job that is not the runner's (unknown, another runner's,
// or named with a token that never was its) is 404, whichever it is.
type JobChange struct {
	ID         int64  `json:"id"`                   // the job's id
	StatusCode int    `json:"status_code"`          // what a PUT would be answered with now
	JobStatus  string `json:"job_status,omitempty"` // the Job-Status header that PUT would carry
}

// WatchResponse is the 200 answer of POST jobs/watch; Jobs is empty when
// the wait ended with nothing changed.
type WatchResponse struct {
	Jobs []JobChange `json:"jobs"` // the jobs whose status changed
}

// WatchJobs calls POST jobs/watch (drover's coordinator only; see
// HeaderJobWatch) with req.Token as the runner token. It blocks until a
// job changes, the coordinator's wait ends or ctx is done.
func (c *Client) WatchJobs(ctx context.Context, req WatchRequest) (*WatchResponse, *Response, error) {
	var out WatchResponse
	r, err := c.doJSON(ctx, http.MethodPost, "jobs/watch", runnerHeader(req.Token), req, http.StatusOK, &out)
	if err != nil || r.StatusCode != http.StatusOK {
		return nil, r, err
	}
	return &out, r, nil
}

// watchWait parses HeaderJobWatch: the longest hold in seconds, or 0.
func watchWait(s string) time.Duration {
	return parseSeconds(s)
}
