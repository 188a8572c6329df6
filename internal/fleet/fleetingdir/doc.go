// Package fleetingdir installs fleeting plugins from OCI registries into
// the directory GitLab Runner installs them in, and finds them there, so
// that a machine prepared with gitlab-runner fleeting install works with
// drover as it is and the other way round.
//
// # Layout
//
// The root is $FLEETING_PLUGIN_PATH, else $HOME/.config/fleeting/plugins
// (%APPDATA%\fleeting\plugins on Windows): GitLab's installer does not
// use os.UserConfigDir, so $XDG_CONFIG_HOME and macOS's Library folder do
// not move it. Each installed version is a directory
//
//	<root>/<repository>/<version>/plugin
//
// where <repository> is the full OCI repository, registry host included
// (registry.gitlab.com/gitlab-org/fleeting/plugins/aws), one directory per
// path element, and <version> is a semantic version (1.2.3, 1.3.0-rc.1).
// Both are escaped as Go's module cache escapes paths: an upper-case
// letter is "!" and the letter in lower case. A registry with a port
// keeps its colon (127.0.0.1:5000/ns/x): GitLab's installer refuses such
// names, so there is no layout of theirs to match. The plugin binary is
// named plugin.exe on Windows. Other files of the artifact sit next to
// it. GitLab's installer also leaves a directory named temp in the root.
//
// # References
//
// A plugin value of config.toml ([runners.autoscaler] plugin) is an OCI
// reference whose tag is a version constraint (see ParseRef): "aws",
// "aws:1", "my-group/my-plugin:1.2", "registry.example.com/p/x:1.2.3".
// latest (the default) matches the newest version, 1 the newest 1.x.y,
// 1.2 the newest 1.2.y, 1.2.3 only itself; pre-releases match only when
// named exactly. The same constraint picks among the installed versions
// (Find) and among the registry's tags (Install), so the registry's alias
// tags (latest, 1, 1.2) that GitLab's release tool maintains are not
// needed. Values that name a program on disk are no references
// (LocalPath).
//
// # Artifacts
//
// A plugin release is a multi-platform image index, as fleeting-artifact
// release pushes it: one image per platform, each with a layer annotated
// com.gitlab.fleeting.layer=<version> whose tar holds plugin/plugin
// (Files/plugin/plugin.exe for Windows). Install takes the image for the
// running GOOS/GOARCH and names the directory after that annotation.
//
// # What is GitLab's
//
// To keep to GitLab's behaviour by construction, the parts that decide
// it are GitLab's and go-containerregistry's own code, as GitLab's
// installer (gitlab.com/gitlab-org/fleeting/fleeting-artifact) uses them:
// Root is installer.InstallDir, Login is installer.Login, versions and
// constraints are its version package, directory names are escaped with
// golang.org/x/mod/module, registries are reached with
// go-containerregistry's remote transport (HTTPS; plain HTTP as well for
// localhost, loopback and RFC 1918 names) and authn.DefaultKeychain
// (Docker's config.json, then Podman's auth.json), and the image for the
// platform is picked with containerd's platforms.Only. What is drover's:
// resolving the constraint against the registry's tags (GitLab pulls the
// alias tag), unpacking (GitLab's writes a file wherever the tar's names
// lead, and calls log.Fatal when an image of the index cannot be read),
// Find (GitLab's LookPath also takes versions from nested directories
// and does not check that the program is there) and List.
package fleetingdir
