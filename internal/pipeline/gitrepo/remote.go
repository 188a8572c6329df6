package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// ResolveRemote returns the commit ref (a branch or tag; "" = the
// remote's HEAD) points at in the repository at url, with git ls-remote
// (no objects fetched), within 30 s.
func ResolveRemote(ctx context.Context, url, ref string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	patterns := []string{"HEAD"}
	if ref != "" {
		patterns = []string{"refs/heads/" + ref, "refs/tags/" + ref + "^{}", "refs/tags/" + ref}
	}
	out, err := exec.CommandContext(ctx, "git", append([]string{"ls-remote", "--", url}, patterns...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("resolve ref %q of %s: %w", ref, url, err)
	}
	// A peeled tag (^{}) names the commit; a branch or lightweight tag is
	// one. The first line of the most precise kind wins.
	found := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		sha, name, ok := strings.Cut(line, "\t")
		if ok && len(sha) == 40 {
			found[name] = sha
		}
	}
	for _, p := range patterns {
		if sha, ok := found[p]; ok {
			return sha, nil
		}
	}
	return "", fmt.Errorf("resolve ref %q of %s: no such branch or tag", ref, url)
}
