package plugin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/drover-ci/drover/internal/fleet/fleetingdir"
)

// PathPrefix is the name a fleeting plugin has in PATH
// (fleeting-plugin-aws, fleeting-plugin-hetzner).
const PathPrefix = "fleeting-plugin-"

// ErrNotFound is returned (wrapped) by Resolve when no program matches.
var ErrNotFound = errors.New("fleeting plugin not found")

// Resolve finds the program for a plugin setting the way GitLab Runner
// does (fleetingdir.LocalPath and fleetingdir.Find hold the rules, which
// `drover fleeting install` shares), in this order:
//
//  1. a path (absolute, ./ or ../, or a relative path with a slash that
//     exists), or a fleeting-plugin-NAME program in PATH: used as it is;
//  2. a bare name ("aws") as fleeting-plugin-aws in PATH (drover's
//     addition). A bare name itself is never run from PATH: "aws" there is
//     the AWS command line, not a plugin;
//  3. a plugin installed by `drover fleeting install` (or `gitlab-runner
//     fleeting install`) under installDir: the value is an OCI reference
//     ("aws" is registry.gitlab.com/gitlab-org/fleeting/plugins/aws,
//     "aws:1.2" a version constraint) and the newest installed version
//     that matches is used.
//
// installDir "" means fleeting's default: $FLEETING_PLUGIN_PATH, else
// ~/.config/fleeting/plugins. The error lists every place looked.
func Resolve(name, installDir string) (string, error) {
	if name == "" {
		return "", errors.New("fleet plugin: no program named")
	}
	if p, ok := fleetingdir.LocalPath(name); ok {
		st, err := os.Stat(p)
		switch {
		case err != nil:
			return "", fmt.Errorf("fleet plugin %q: %w: %w", name, ErrNotFound, err)
		case st.IsDir() || st.Mode().Perm()&0o111 == 0:
			return "", fmt.Errorf("fleet plugin %q: not an executable file", name)
		}
		return p, nil
	}
	var looked []string
	if !strings.ContainsAny(name, "/:") && !strings.HasPrefix(name, PathPrefix) {
		if p, err := exec.LookPath(PathPrefix + name); err == nil {
			return p, nil
		}
		looked = append(looked, "no "+PathPrefix+name+" in PATH")
	} else if strings.HasPrefix(name, PathPrefix) && !strings.ContainsAny(name, "/:") {
		looked = append(looked, "no "+name+" in PATH")
	}
	ref, err := fleetingdir.ParseRef(name)
	if err != nil {
		looked = append(looked, "not a plugin reference: "+err.Error())
		return "", fmt.Errorf("fleet plugin %q: %w: %s", name, ErrNotFound, strings.Join(looked, "; "))
	}
	if installDir == "" {
		installDir = fleetingdir.Root()
	}
	p, _, err := fleetingdir.Find(installDir, ref)
	if err == nil {
		return p, nil
	}
	looked = append(looked, err.Error())
	return "", fmt.Errorf("fleet plugin %q: %w: %s; install it with `drover fleeting install` (it installs every plugin config.toml names)",
		name, ErrNotFound, strings.Join(looked, "; "))
}
