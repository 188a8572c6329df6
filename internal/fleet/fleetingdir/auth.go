package fleetingdir

import (
	"fmt"

	"gitlab.com/gitlab-org/fleeting/fleeting-artifact/pkg/installer"
)

// Login stores credentials for registry (registry.gitlab.com when empty)
// where Install's default keychain finds them, with GitLab's own login
// (installer.Login): in the credential helper Docker's config.json
// ($DOCKER_CONFIG, else ~/.docker) names for the registry, or its
// credsStore, else base64 in its "auths". It returns the config file. It
// does not ask the registry whether the credentials are right.
func Login(registry, username, password string) (string, error) {
	if username == "" {
		return "", fmt.Errorf("fleeting login: no user name")
	}
	file, err := installer.Login(registry, username, password)
	if err != nil {
		return "", fmt.Errorf("fleeting login %s: %w", registry, err)
	}
	return file, nil
}
