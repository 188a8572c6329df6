package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// projectJSON is what the admin API shows of a project.
type projectJSON struct {
	ID            int64  `json:"id"`
	RepoURL       string `json:"repo_url"`
	DefaultBranch string `json:"default_branch"`
	ConfigPath    string `json:"config_path"`
	Version       int64  `json:"version"`
	Variables     []struct {
		Key       string `json:"key"`
		Masked    bool   `json:"masked"`
		Protected bool   `json:"protected"`
		File      bool   `json:"file"`
	} `json:"variables"`
	Forge struct {
		Kind     string `json:"kind"`
		URL      string `json:"url"`
		Repo     string `json:"repo"`
		TokenSet bool   `json:"token_set"`
	} `json:"forge"`
}

func (e *env) projectJSON(name string) projectJSON {
	e.t.Helper()
	var p projectJSON
	e.api("GET", "/api/v1/projects/"+url.PathEscape(name), nil, &p)
	return p
}

func (e *env) webhookSecret(name string) string {
	e.t.Helper()
	var s struct {
		WebhookSecret string `json:"webhook_secret"`
	}
	e.api("GET", "/api/v1/projects/"+url.PathEscape(name)+"/webhook_secret", nil, &s)
	return s.WebhookSecret
}

// postForm sends form values v (with csrf) to path as client c.
func (e *env) postForm(c *http.Client, path, csrf string, v url.Values) (*http.Response, string) {
	e.t.Helper()
	v.Set("csrf", csrf)
	return e.do(c, "POST", path, formHdr, strings.NewReader(v.Encode()))
}

// formCase is a form's input the page refuses: the answer's code, and
// want in the form's error.
type formCase struct {
	name string
	form url.Values
	code int
	want string
}

var versionRE = regexp.MustCompile(`name="version" value="(\d+)"`)

// TestProjectsEditing: the admin registers a project on /projects and
// changes its settings and variables on its page; what the forms take
// is what the admin API shows, secrets are never shown back (but the
// new webhook secret, once), a stale form is refused, invalid input is
// shown on the form with nothing changed, and only the admin's session
// has the forms.
func TestProjectsEditing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	repo := ciRepo(t, "ci", map[string]string{".gitlab-ci.yml": accessCI})
	a := e.login()
	resp, page := e.do(a, "GET", "/projects", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="create-form"`) {
		t.Fatalf("GET /projects = %d, want the registration form:\n%.3000s", resp.StatusCode, page)
	}
	csrf := csrfOf(t, page)

	// Register.
	resp, page = e.postForm(a, "/projects", csrf, url.Values{
		"name": {"g/new"}, "repo_url": {repo}, "default_branch": {"trunk"}, "config_path": {""},
		"forge_kind": {"github"}, "forge_url": {""}, "forge_repo": {"o/r"}, "forge_token": {"tok-s3cret"},
	})
	m := regexp.MustCompile(`<code id="new-secret">([^<]+)</code>`).FindStringSubmatch(page)
	if resp.StatusCode != http.StatusCreated || m == nil {
		t.Fatalf("register = %d, want 201 and the new secret:\n%.3000s", resp.StatusCode, page)
	}
	if got := e.webhookSecret("g/new"); got != m[1] {
		t.Errorf("the secret shown %q, the API's %q", m[1], got)
	}
	if strings.Contains(page, "tok-s3cret") {
		t.Error("the registered project's page shows the forge token")
	}
	p := e.projectJSON("g/new")
	if p.RepoURL != repo || p.DefaultBranch != "trunk" || p.ConfigPath != ".gitlab-ci.yml" ||
		p.Forge.Kind != "github" || p.Forge.URL != "https://api.github.com" || p.Forge.Repo != "o/r" || !p.Forge.TokenSet {
		t.Errorf("registered project = %+v", p)
	}

	// Registrations refused, the form shown again with the reason.
	for _, tc := range []formCase{
		{"a registered name", url.Values{"name": {"g/new"}}, http.StatusConflict, "project g/new exists"},
		{"a name that is no path", url.Values{"name": {"no/../path"}}, http.StatusBadRequest, "name must be a path"},
		{"a forge without its URL", url.Values{"name": {"g/other"}, "forge_kind": {"gitea"}, "forge_repo": {"o/r"}}, http.StatusBadRequest, "forge.url is required"},
		{"a short webhook secret", url.Values{"name": {"g/other"}, "webhook_secret": {"short"}}, http.StatusBadRequest, "webhook_secret must be"},
	} {
		t.Run("register/"+tc.name, func(t *testing.T) {
			resp, page := e.postForm(a, "/projects", csrf, tc.form)
			if resp.StatusCode != tc.code || !strings.Contains(page, tc.want) || !strings.Contains(page, `id="create-form"`) {
				t.Errorf("register %v = %d, want %d with %q on the form:\n%.3000s", tc.form, resp.StatusCode, tc.code, tc.want, page)
			}
		})
	}
	if resp, _ := e.do(e.client(), "GET", "/api/v1/projects/g%2Fother", e.bearer(), nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a refused registration left project g/other: GET = %d", resp.StatusCode)
	}

	// Edit the settings from the page's form.
	path := fmt.Sprintf("/projects/%d", p.ID)
	_, page = e.do(a, "GET", path, nil, nil)
	vm := versionRE.FindStringSubmatch(page)
	if vm == nil || !strings.Contains(page, `id="settings-form"`) || !strings.Contains(page, `value="trunk"`) {
		t.Fatalf("%s has no settings form with the project's values:\n%.5000s", path, page)
	}
	settings := url.Values{
		"version": {vm[1]}, "repo_url": {repo}, "default_branch": {"main"}, "config_path": {".gitlab-ci.yml"},
		"forge_kind": {"gitlab"}, "forge_url": {"https://gitlab.example.com/"}, "forge_repo": {"42"}, "forge_token": {""},
	}
	resp, _ = e.postForm(a, path+"/settings", csrf, settings)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != path+"#settings" {
		t.Fatalf("save settings = %d to %q, want 303 to %s#settings", resp.StatusCode, resp.Header.Get("Location"), path)
	}
	edited := e.projectJSON("g/new")
	if edited.DefaultBranch != "main" || edited.Forge.Kind != "gitlab" || edited.Forge.URL != "https://gitlab.example.com" ||
		edited.Forge.Repo != "42" || !edited.Forge.TokenSet || edited.Version == p.Version {
		t.Errorf("after the settings form: %+v (the token kept, a new version)", edited)
	}
	if got := e.webhookSecret("g/new"); got != m[1] {
		t.Errorf("an empty webhook secret field changed the secret to %q", got)
	}

	// Changes refused: the form again, its error shown, nothing changed.
	for _, tc := range []formCase{
		{"a stale form", url.Values{"version": {vm[1]}, "default_branch": {"stale"}}, http.StatusConflict, "changed: it is at version"},
		{"a branch that is none", url.Values{"default_branch": {"-x"}}, http.StatusBadRequest, "default_branch must be a branch name"},
		{"a configuration outside the repository", url.Values{"config_path": {"../ci.yml"}}, http.StatusBadRequest, "config_path must be a path inside"},
		{"a forge that is none", url.Values{"forge_kind": {"svn"}}, http.StatusBadRequest, "forge.kind must be one of"},
		{"a GitHub repository without its owner", url.Values{"forge_kind": {"github"}, "forge_repo": {"r"}}, http.StatusBadRequest, "forge.repo must be owner/repo"},
		{"no version", url.Values{"version": {""}}, http.StatusBadRequest, "reload the page"},
	} {
		t.Run("settings/"+tc.name, func(t *testing.T) {
			form := url.Values{}
			for k, v := range settings {
				form[k] = v
			}
			form.Set("version", strconv.FormatInt(edited.Version, 10))
			for k, v := range tc.form {
				form[k] = v
			}
			resp, page := e.postForm(a, path+"/settings", csrf, form)
			if resp.StatusCode != tc.code || !strings.Contains(page, tc.want) || !strings.Contains(page, `<details class="project-form" id="edit-settings" open>`) {
				t.Errorf("save %v = %d, want %d with %q in the open form:\n%.5000s", tc.form, resp.StatusCode, tc.code, tc.want, page)
			}
			if got := e.projectJSON("g/new"); got.Version != edited.Version {
				t.Errorf("a refused change made version %d of the project (%+v)", got.Version, got)
			}
		})
	}

	// Variables: add (the value never shown back), refuse, replace, remove.
	varsPath := path + "/variables"
	resp, _ = e.postForm(a, varsPath, csrf, url.Values{"key": {"DEPLOY_KEY"}, "value": {"s3cret-value"}, "masked": {"on"}, "protected": {"on"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != path+"#variables" {
		t.Fatalf("add a variable = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, tc := range []formCase{
		{"a key that is no name", url.Values{"key": {"1BAD"}, "value": {"x"}}, http.StatusBadRequest, "letters, digits and _"},
		{"a masked value too short", url.Values{"key": {"SHORT"}, "value": {"short"}, "masked": {"on"}}, http.StatusBadRequest, "a masked value is one line of at least 8 characters"},
	} {
		t.Run("variable/"+tc.name, func(t *testing.T) {
			resp, page := e.postForm(a, varsPath, csrf, tc.form)
			if resp.StatusCode != tc.code || !strings.Contains(page, tc.want) {
				t.Errorf("add %v = %d, want %d with %q:\n%.5000s", tc.form, resp.StatusCode, tc.code, tc.want, page)
			}
			if strings.Contains(page, tc.form.Get("value")+"</textarea>") {
				t.Error("the refused form shows the value again")
			}
		})
	}
	resp, _ = e.postForm(a, varsPath, csrf, url.Values{"key": {"NOTES"}, "value": {"release notes"}, "file": {"on"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add a file variable = %d", resp.StatusCode)
	}
	got := e.projectJSON("g/new").Variables
	if len(got) != 2 || got[0].Key != "DEPLOY_KEY" || !got[0].Masked || !got[0].Protected || got[0].File ||
		got[1].Key != "NOTES" || !got[1].File || got[1].Masked {
		t.Errorf("variables = %+v, want DEPLOY_KEY masked protected, NOTES file", got)
	}
	_, page = e.do(a, "GET", path, nil, nil)
	if strings.Contains(page, "s3cret-value") || strings.Contains(page, "release notes") {
		t.Error("the project's page shows a variable's value")
	}
	if !strings.Contains(page, `action="/projects/`+strconv.FormatInt(p.ID, 10)+`/variables/DEPLOY_KEY/delete"`) {
		t.Errorf("no Remove button of DEPLOY_KEY:\n%.5000s", page)
	}
	resp, _ = e.postForm(a, varsPath+"/DEPLOY_KEY/delete", csrf, url.Values{})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove DEPLOY_KEY = %d", resp.StatusCode)
	}
	if got := e.projectJSON("g/new").Variables; len(got) != 1 || got[0].Key != "NOTES" {
		t.Errorf("after removing DEPLOY_KEY: %+v", got)
	}
	if resp, page := e.postForm(a, varsPath+"/DEPLOY_KEY/delete", csrf, url.Values{}); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "has no variable DEPLOY_KEY") {
		t.Errorf("remove DEPLOY_KEY again = %d, want 400 saying it is not there", resp.StatusCode)
	}

	// Hostile settings are text.
	hostile := `/srv/x"><script>document.title='pwned'</script>`
	settings.Set("version", strconv.FormatInt(e.projectJSON("g/new").Version, 10))
	settings.Set("repo_url", hostile)
	if resp, _ := e.postForm(a, path+"/settings", csrf, settings); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save a hostile repository URL = %d", resp.StatusCode)
	}
	_, page = e.do(a, "GET", path, nil, nil)
	if strings.Contains(page, "<script>document.title") || !strings.Contains(page, "&lt;script&gt;") {
		t.Errorf("the hostile repository URL is not escaped:\n%.5000s", page)
	}

	// Only the admin's session has the forms, and only it may post them.
	_, maintTok := e.projectToken("g/new", "deployer", "maintainer")
	mc, mcsrf := e.loginWith(maintTok)
	_, page = e.do(mc, "GET", path, nil, nil)
	for _, form := range []string{`id="settings-form"`, `id="variable-form"`, "remove-variable"} {
		if strings.Contains(page, form) {
			t.Errorf("a maintainer's page has %s", form)
		}
	}
	if _, page = e.do(mc, "GET", "/projects", nil, nil); strings.Contains(page, `id="create-form"`) {
		t.Error("a maintainer's /projects has the registration form")
	}
	for _, tc := range []struct {
		name, path, csrf string
		c                *http.Client
		code             int
	}{
		{"a maintainer's settings", path + "/settings", mcsrf, mc, http.StatusForbidden},
		{"a maintainer's variable", varsPath, mcsrf, mc, http.StatusForbidden},
		{"a maintainer's registration", "/projects", mcsrf, mc, http.StatusForbidden},
		{"the admin without the CSRF token", path + "/settings", "", a, http.StatusForbidden},
		{"a project that is none", "/projects/999999/settings", csrf, a, http.StatusNotFound},
	} {
		t.Run("access/"+tc.name, func(t *testing.T) {
			before := e.projectJSON("g/new").Version
			resp, _ := e.postForm(tc.c, tc.path, tc.csrf, url.Values{"key": {"X"}, "value": {"y"}, "name": {"g/sneaky"}, "version": {strconv.FormatInt(before, 10)}, "default_branch": {"sneaky"}})
			if resp.StatusCode != tc.code {
				t.Errorf("POST %s = %d, want %d", tc.path, resp.StatusCode, tc.code)
			}
			if after := e.projectJSON("g/new").Version; after != before {
				t.Errorf("POST %s changed the project (version %d to %d)", tc.path, before, after)
			}
		})
	}
}
