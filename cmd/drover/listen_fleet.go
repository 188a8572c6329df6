package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/drover-ci/drover/internal/autoscale/runnerpool"
	"github.com/drover-ci/drover/internal/fleetticket"
	"github.com/drover-ci/drover/internal/httpserver"
	"github.com/drover-ci/drover/internal/manager"
	"github.com/drover-ci/drover/internal/web"
)

// The runner manager's pools are what its fleet page shows: the two meet
// here, so that neither package imports the other.
var _ web.Fleet = (*runnerpool.Set)(nil)

// fleetFlags are drover run's flags of the fleet page's sign-in: flags,
// not config.toml keys, as the other --listen- ones, so that the file
// stays GitLab Runner's.
type fleetFlags struct {
	url, tokenFile string
}

func (f *fleetFlags) define(fs *pflag.FlagSet) {
	fs.StringVar(&f.url, "listen-url", "", "the URL at which browsers reach listen_address (http(s)://host:port): reported to the coordinator, whose runners page "+
		"then links this manager's fleet page, signed in with a ticket checked against the runners' tokens")
	fs.StringVar(&f.tokenFile, "listen-token-file", "", "file holding a token that signs in to the fleet page and /debug/ of listen_address "+
		"(Authorization: Bearer, or the form at /fleet/login)")
}

// absolute makes --listen-token-file absolute, before
// --working-directory changes the directory it is relative to.
func (f *fleetFlags) absolute() error {
	if f.tokenFile == "" {
		return nil
	}
	abs, err := filepath.Abs(f.tokenFile)
	f.tokenFile = abs
	return err
}

// fleetAccess is what fleetFlags load.
type fleetAccess struct {
	url, token string
}

// load checks --listen-url and reads --listen-token-file; what does not
// is a usage error naming the flag.
func (f *fleetFlags) load() (fleetAccess, error) {
	a := fleetAccess{url: f.url}
	if f.url != "" {
		if err := fleetticket.CheckURL(f.url); err != nil {
			return a, usageError(fmt.Errorf("--listen-url %q: %w", f.url, err))
		}
	}
	if f.tokenFile != "" {
		tok, err := httpserver.ReadTokenFile(f.tokenFile)
		if err != nil {
			return a, usageError(fmt.Errorf("--listen-token-file: %w", err))
		}
		a.token = tok
	}
	return a, nil
}

// signIn is the fleet page's sign-in: a's token, the coordinator's
// tickets for systemID when a has a URL (checked against the tokens of
// m's runners as configured now), and, with neither, open only while
// loopback says the listener is on a loopback address.
func (a fleetAccess) signIn(m *manager.Manager, systemID string, loopback func() bool) web.FleetSignIn {
	s := web.FleetSignIn{Token: a.token, Open: loopback}
	if a.url != "" {
		s.SystemID = systemID
		s.TicketKeys = func() []string {
			rs := m.Config().Runners
			keys := make([]string, 0, len(rs))
			for i := range rs {
				keys = append(keys, fleetticket.HashToken(rs[i].Token))
			}
			return keys
		}
	}
	return s
}

// listenHandler is what drover run's listen_address serves: the
// manager's /metrics and health endpoints (open, but for /metrics' own
// token), its /debug/ endpoints and the read-only fleet page of its
// autoscaled runners (/fleet; / leads there) behind signIn.
func listenHandler(logger *slog.Logger, m *manager.Manager, pools *runnerpool.Set, signIn web.FleetSignIn) (http.Handler, error) {
	page, err := web.NewFleetPage(logger.With("component", "fleet page"), web.FleetConfig{Fleet: pools, SignIn: signIn})
	if err != nil {
		return nil, fmt.Errorf("fleet page: %w", err)
	}
	mux := http.NewServeMux()
	mh := m.Handler()
	mux.Handle("/", mh)
	mux.Handle("/debug/", page.Guard(mh))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/fleet", http.StatusSeeOther)
	})
	page.Mount(mux)
	return mux, nil
}

// isLoopback reports whether a listener's address is a loopback one
// (127.0.0.0/8, ::1): not 0.0.0.0, [::] or a host's own address.
func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}
