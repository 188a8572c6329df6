package runnerapi

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drover-ci/drover/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Mux is a daemon's HTTP routes: runner endpoints (instrumented), admin
// endpoints (instrumented, behind the admin token), /metrics and the
// health endpoints.
type Mux struct {
	mux        *http.ServeMux
	requests   *prometheus.CounterVec
	adminToken string
}

// NewMux returns a Mux counting requests in m.Requests, with admin
// endpoints behind adminToken, serving /metrics, /health/live and the
// endpoints of runners (see Runners.Mount), if not nil.
func NewMux(m *Metrics, adminToken string, runners *Runners) *Mux {
	mux := &Mux{mux: http.NewServeMux(), requests: m.Requests, adminToken: adminToken}
	mux.mux.Handle("GET /metrics", m.Handler)
	mux.mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	if runners != nil {
		runners.Mount(mux)
	}
	return mux
}

// Runner serves pattern with fn, counted by Instrument.
func (m *Mux) Runner(pattern string, fn http.HandlerFunc) {
	m.mux.Handle(pattern, Instrument(m.requests, pattern, fn))
}

// Admin serves pattern with fn behind the admin token, counted by
// Instrument.
func (m *Mux) Admin(pattern string, fn http.HandlerFunc) {
	m.mux.Handle(pattern, Instrument(m.requests, pattern, RequireAdmin(m.adminToken, fn)))
}

// Handle serves pattern with h, counted by Instrument: routes of the
// daemon's own that take care of their authentication (the web pages).
func (m *Mux) Handle(pattern string, h http.Handler) {
	m.mux.Handle(pattern, Instrument(m.requests, pattern, h))
}

// JobHandlers are what a daemon plugs into the job endpoints of API v4:
// where jobs come from (Request) and what a runner's report does (Update,
// Trace, Provisioning). Nil ones are not served.
type JobHandlers struct {
	Request      http.HandlerFunc // POST /api/v4/jobs/request
	Update       http.HandlerFunc // PUT /api/v4/jobs/{id}
	Trace        http.HandlerFunc // PATCH /api/v4/jobs/{id}/trace
	Provisioning http.HandlerFunc // POST /api/v4/jobs/{id}/runner_provisioning
	Watch        http.HandlerFunc // POST /api/v4/jobs/watch (drover's)
	// UploadArtifacts serves POST /api/v4/jobs/{id}/artifacts (the job's
	// own token) and DownloadArtifacts GET (a dependent job's token):
	// two handlers because who may call them differs.
	UploadArtifacts   http.HandlerFunc
	DownloadArtifacts http.HandlerFunc
	// Wrap, if set, wraps every handler above (the coordinator's
	// advertises jobs/watch on every answer).
	Wrap func(http.HandlerFunc) http.HandlerFunc
}

// Jobs serves the job endpoints of h.
func (m *Mux) Jobs(h JobHandlers) {
	for _, e := range []struct {
		pattern string
		fn      http.HandlerFunc
	}{
		{"POST /api/v4/jobs/request", h.Request},
		{"PUT /api/v4/jobs/{id}", h.Update},
		{"PATCH /api/v4/jobs/{id}/trace", h.Trace},
		{"POST /api/v4/jobs/{id}/runner_provisioning", h.Provisioning},
		{"POST /api/v4/jobs/watch", h.Watch},
		{"POST /api/v4/jobs/{id}/artifacts", h.UploadArtifacts},
		{"GET /api/v4/jobs/{id}/artifacts", h.DownloadArtifacts},
	} {
		if e.fn == nil {
			continue
		}
		if h.Wrap != nil {
			e.fn = h.Wrap(e.fn)
		}
		m.Runner(e.pattern, e.fn)
	}
}

// MinBodyRate is the slowest, in bytes a second, that a large body (an
// artifact upload) may arrive once AllowSlowBody lifted the read deadline.
const MinBodyRate = 64 << 10

// SlowBodyTimeout is how long AllowSlowBody gives a body of size bytes:
// a minute plus its size at MinBodyRate.
func SlowBodyTimeout(size int64) time.Duration {
	const maxSecs = int64(math.MaxInt64/time.Second) - 60
	return time.Minute + time.Duration(min(max(size, 0)/MinBodyRate, maxSecs))*time.Second
}

// AllowSlowBody lifts the server's read deadline (httpserver's
// ReadTimeout, sized for JSON and 1 MiB trace patches) for r, whose body
// may be up to max bytes: its Content-Length when known, else max. The
// body must then arrive within a minute plus its size at MinBodyRate
// (100 MiB: about 27 minutes). The deadline is a socket's, so wall-clock.
func AllowSlowBody(w http.ResponseWriter, r *http.Request, max int64) {
	size := max
	if r.ContentLength >= 0 && r.ContentLength < max {
		size = r.ContentLength
	}
	d := SlowBodyTimeout(size)
	// A server without deadlines (tests' httptest servers) has nothing
	// to lift: ErrNotSupported is fine.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
}

// Check is one condition of readiness; its error says what is wrong.
type Check func(ctx context.Context) error

// Pinger is a database that answers Ping.
type Pinger interface {
	Ping(ctx context.Context) error
}

// PingCheck is ready while db answers; its error is prefixed by name.
func PingCheck(name string, db Pinger) Check {
	return func(ctx context.Context) error {
		if err := db.Ping(ctx); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
}

// DirCheck is ready while dir can be written: a full disk or a read-only
// one fails what a daemon keeps there.
func DirCheck(dir string) Check {
	return func(context.Context) error {
		if err := store.CheckWritable(dir); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		return nil
	}
}

// Ready serves GET /health/ready: 503 with the error of the first check
// that fails, else 200 "ok\n" followed by detail.
func (m *Mux) Ready(detail string, checks ...Check) {
	m.mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, r *http.Request) {
		for _, c := range checks {
			if err := c(r.Context()); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ok\n"+detail)
	})
}

// ServeHTTP implements http.Handler.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.mux.ServeHTTP(w, r) }

// Metrics is what every daemon serving the runner API reports: the API
// requests by endpoint and status code, and the handler of /metrics.
type Metrics struct {
	Requests *prometheus.CounterVec
	Handler  http.Handler
}

// NewMetrics registers prefix+"api_requests_total" and cs on reg, and
// serves reg at /metrics when it is a Gatherer. A nil reg is a registry of
// its own.
func NewMetrics(reg prometheus.Registerer, prefix string, cs ...prometheus.Collector) (*Metrics, error) {
	m := &Metrics{Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: prefix + "api_requests_total", Help: "API requests by endpoint and status code (499: the client went away).",
	}, []string{"endpoint", "code"})}
	var gatherer prometheus.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gatherer = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gatherer = g
	}
	for _, c := range append(cs, m.Requests) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	if gatherer != nil {
		m.Handler = promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
	} else {
		// The embedding program serves its own registry.
		m.Handler = http.NotFoundHandler()
	}
	return m, nil
}

// PrepareDataDir checks a daemon's data directory: it is required, and
// one that gave other users access is made private (0700), with a
// warning.
func PrepareDataDir(log *slog.Logger, dir string) error {
	if dir == "" {
		return errors.New("DataDir is required")
	}
	tightened, err := store.PrivateDir(dir)
	if err != nil {
		return err
	}
	if tightened {
		log.Warn("the data directory gave other users access; it is now private (0700)", "data_dir", dir)
	}
	return nil
}

// OrDefault returns v when it is positive, else def: how the daemons
// default the durations and counts of their Config.
func OrDefault[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// RandomToken returns prefix + n random bytes, URL-safe base64.
func RandomToken(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// ReadOrCreateToken returns the token in file path, creating the file
// with a new random token of prefix when it is missing or empty.
func ReadOrCreateToken(path, prefix string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if tok := strings.TrimSpace(string(b)); tok != "" {
			return tok, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	tok := RandomToken(prefix, 24)
	if err := WriteToken(path, tok); err != nil {
		return "", err
	}
	return tok, nil
}

// WriteToken writes tok to path (mode 0600) through a temporary file and a
// rename, so a crash never leaves half a token.
func WriteToken(path, tok string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Versions are the runner managers' queue versions of the long poll of
// jobs/request, sent as X-GitLab-Last-Update: a request echoing its
// manager's current version may be held until there is something new for
// it. They live in memory: after a restart every echo is stale, so a
// runner's first request is answered at once, which is always correct.
//
// With a prefix (servers sharing one queue behind one address), a
// version of that prefix issued by another server is adopted as current.
type Versions struct {
	prefix string
	seq    atomic.Int64

	mu sync.Mutex
	m  map[ManagerKey]string
}

// NewVersions returns an empty version table issuing versions of prefix.
func NewVersions(prefix string) *Versions {
	v := &Versions{prefix: prefix, m: map[ManagerKey]string{}}
	// Start the sequence at the wall clock so versions from an earlier
	// process never collide with this one's.
	v.seq.Store(time.Now().UnixNano())
	return v
}

func (v *Versions) next() string { return v.prefix + strconv.FormatInt(v.seq.Add(1), 36) }

// Get returns k's current version, issuing one if it has none.
func (v *Versions) Get(k ManagerKey) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.m[k]
	if !ok {
		s = v.next()
		v.m[k] = s
	}
	return s
}

// Current reports whether echo, a runner's last_update, is k's current
// version. With a prefix, a version of the same prefix issued elsewhere
// becomes k's version here and is current.
func (v *Versions) Current(k ManagerKey, echo string) bool {
	if echo == "" {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok := v.m[k]; ok && s == echo {
		return true
	}
	if v.prefix == "" || len(echo) <= len(v.prefix) || echo[:len(v.prefix)] != v.prefix {
		return false
	}
	v.m[k] = echo
	return true
}

// Bump gives k a fresh version and returns it.
func (v *Versions) Bump(k ManagerKey) string {
	s := v.next()
	v.mu.Lock()
	v.m[k] = s
	v.mu.Unlock()
	return s
}
