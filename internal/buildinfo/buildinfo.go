// Package buildinfo says which drover this is: the version, commit and
// build date a release build stamps with -ldflags, else what Go's VCS stamp
// holds for a build in a git checkout.
//
// A release build sets them with
//
//	-ldflags "-X github.com/drover-ci/drover/internal/buildinfo.version=1.2.3
//	          -X github.com/drover-ci/drover/internal/buildinfo.commit=abcdef012345
//	          -X github.com/drover-ci/drover/internal/buildinfo.built=2026-11-29T12:00:00Z"
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set at link time (see the package comment); the defaults describe a
// development build.
var (
	version = "0.2.0-dev"
	commit  = ""
	built   = ""
)

// Info is one build's identity.
type Info struct {
	Version   string // semantic version, "0.2.0-dev" for a development build
	Commit    string // 12 hex digits, "unknown" when nothing says
	Modified  bool   // built from a checkout with uncommitted changes
	Built     string // RFC 3339 build (or commit) time, "unknown" when nothing says
	GoVersion string
	OS        string
	Arch      string
}

// Get returns this binary's Info: the link-time values where set, else
// Go's VCS stamp.
func Get() Info {
	in := Info{Version: version, Commit: commit, Built: built, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Built == "" {
					in.Built = s.Value
				}
			case "vcs.modified":
				if commit == "" {
					in.Modified = s.Value == "true"
				}
			}
		}
	}
	if len(in.Commit) > 12 {
		in.Commit = in.Commit[:12]
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	if in.Built == "" {
		in.Built = "unknown"
	}
	return in
}

// Revision is the commit as the runner API's version info carries it:
// the commit, "unknown" when nothing says.
func (i Info) Revision() string { return i.Commit }
