package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
	"github.com/drover-ci/drover/internal/store"
)

// The image and services of POST /api/v1/jobs. Each is a JSON string (the
// image name) or an object, as in GitLab's .gitlab-ci.yml:
//
//	image:    {"name", "entrypoint": [..], "pull_policy": "always" or [..], "docker": {"user": "1000" or 1000}}
//	services: [{"name", "alias": "a b,c", "command": [..], "entrypoint": [..],
//	            "variables": [{"key", "value"}], "pull_policy"}, ..]
//
// Unknown keys are an error naming them (GitLab Runner fails a job whose
// executor_opts it does not understand; better to say so at submission).

// Limits of images and services.
const (
	maxServices  = 64
	maxImageName = 1024
	maxAliases   = 1024 // all of a service's aliases, separators included
	maxAlias     = 253  // one alias: a DNS name
	maxImageUser = 255
)

// aliasRE is a service's alias list: DNS name characters, separated by
// spaces or commas.
var aliasRE = regexp.MustCompile(`^[A-Za-z0-9._, -]*$`)

// imageObject is image as an object.
type imageObject struct {
	Name       string          `json:"name"`
	Entrypoint []string        `json:"entrypoint"`
	PullPolicy json.RawMessage `json:"pull_policy"`
	Docker     json.RawMessage `json:"docker"`
}

// imageDocker is image.docker.
type imageDocker struct {
	User json.RawMessage `json:"user"`
}

// serviceObject is one entry of services as an object.
type serviceObject struct {
	Name       string            `json:"name"`
	Alias      string            `json:"alias"`
	Command    []string          `json:"command"`
	Entrypoint []string          `json:"entrypoint"`
	Variables  []json.RawMessage `json:"variables"`
	PullPolicy json.RawMessage   `json:"pull_policy"`
}

// serviceVariable is one entry of a service's variables.
type serviceVariable struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// decodeStrict decodes raw, a JSON value the request decoder already
// accepted, into v rejecting unknown keys. Errors name field and the key
// under it.
func decodeStrict(raw json.RawMessage, v any, field string) *runnerapi.BadRequest {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		f := field
		if typeErr.Field != "" {
			f += "." + typeErr.Field
		}
		return runnerapi.Invalid(f, "field %q: want %s, not JSON %s", f, runnerapi.JSONKind(typeErr.Type), typeErr.Value)
	}
	if k, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		f := field + "." + strings.TrimSuffix(k, `"`)
		return runnerapi.Invalid(f, "unknown field %q", f)
	}
	return runnerapi.Invalid(field, "%s: %v", field, err)
}

// stringOrObject tells the two forms apart: it returns the string of a
// JSON string, or ok false for an object; anything else is an error.
func stringOrObject(raw json.RawMessage, field string) (s string, isString bool, _ *runnerapi.BadRequest) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, runnerapi.Invalid(field, "%s: %v", field, err)
		}
		return s, true, nil
	case len(raw) > 0 && raw[0] == '{':
		return "", false, nil
	}
	return "", false, runnerapi.Invalid(field, "%s must be a string (the image name) or an object", field)
}

// validImageName checks an image or service name.
func validImageName(name, field string) *runnerapi.BadRequest {
	if name == "" {
		return runnerapi.Invalid(field, "%s: an image name is required", field)
	}
	if len(name) > maxImageName || runnerapi.HasControl(name) || strings.TrimSpace(name) != name {
		return runnerapi.Invalid(field, "%s must be at most %d printable characters without leading or trailing spaces", field, maxImageName)
	}
	return nil
}

// parsePullPolicy reads pull_policy: a string or an array of always,
// if-not-present and never. Duplicates are dropped.
func parsePullPolicy(raw json.RawMessage, field string) ([]string, *runnerapi.BadRequest) {
	if isNull(raw) {
		return nil, nil
	}
	var list []string
	var err error
	if raw = bytes.TrimSpace(raw); raw[0] == '"' {
		list = []string{""}
		err = json.Unmarshal(raw, &list[0])
	} else {
		err = json.Unmarshal(raw, &list)
	}
	if err != nil {
		return nil, runnerapi.Invalid(field, "%s must be a string or an array of strings", field)
	}
	var out []string
	for _, p := range list {
		switch p {
		case api.PullAlways, api.PullIfNotPresent, api.PullNever:
		default:
			return nil, runnerapi.Invalid(field, "%s: unknown pull policy %q, want %s, %s or %s", field, p, api.PullAlways, api.PullIfNotPresent, api.PullNever)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// checkArgs checks a command or an entrypoint: process arguments cannot
// hold NUL.
func checkArgs(args []string, field string) *runnerapi.BadRequest {
	for i, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return runnerapi.Invalid(fmt.Sprintf("%s[%d]", field, i), "%s[%d] must not contain NUL", field, i)
		}
	}
	return nil
}

// parseImageUser reads image.docker.user: a user or uid, optionally with
// :group, as a string or a non-negative integer.
func parseImageUser(raw json.RawMessage, field string) (string, *runnerapi.BadRequest) {
	if isNull(raw) {
		return "", nil
	}
	if raw = bytes.TrimSpace(raw); raw[0] == '-' {
		return "", runnerapi.Invalid(field, "%s must not be a negative number", field)
	}
	u, err := api.StringOrInt(raw)
	if err != nil {
		return "", runnerapi.Invalid(field, "%s must be a string or an integer", field)
	}
	if u == "" || len(u) > maxImageUser || runnerapi.HasControl(u) || strings.ContainsFunc(u, unicode.IsSpace) {
		return "", runnerapi.Invalid(field, "%s must be 1-%d printable characters without spaces", field, maxImageUser)
	}
	return u, nil
}

// parseImage reads image. No image (absent, null or "") is the zero spec.
func parseImage(raw json.RawMessage) (store.ImageSpec, *runnerapi.BadRequest) {
	const field = "image"
	if isNull(raw) {
		return store.ImageSpec{}, nil
	}
	name, isString, e := stringOrObject(raw, field)
	if e != nil {
		return store.ImageSpec{}, e
	}
	if isString {
		if name == "" {
			return store.ImageSpec{}, nil
		}
		if e := validImageName(name, field); e != nil {
			return store.ImageSpec{}, e
		}
		return store.ImageSpec{Name: name}, nil
	}
	var o imageObject
	if e := decodeStrict(raw, &o, field); e != nil {
		return store.ImageSpec{}, e
	}
	img, e := imageBase(field, o.Name, o.Entrypoint, o.PullPolicy)
	if e != nil {
		return store.ImageSpec{}, e
	}
	if !isNull(o.Docker) {
		var d imageDocker
		if e := decodeStrict(o.Docker, &d, field+".docker"); e != nil {
			return store.ImageSpec{}, e
		}
		if img.DockerUser, e = parseImageUser(d.User, field+".docker.user"); e != nil {
			return store.ImageSpec{}, e
		}
	}
	return img, nil
}

// imageBase checks what an image object and a service object share (the
// object at field): its name, entrypoint and pull policy.
func imageBase(field, name string, entrypoint []string, pullPolicy json.RawMessage) (store.ImageSpec, *runnerapi.BadRequest) {
	if e := validImageName(name, field+".name"); e != nil {
		return store.ImageSpec{}, e
	}
	if e := checkArgs(entrypoint, field+".entrypoint"); e != nil {
		return store.ImageSpec{}, e
	}
	pp, e := parsePullPolicy(pullPolicy, field+".pull_policy")
	if e != nil {
		return store.ImageSpec{}, e
	}
	return store.ImageSpec{Name: name, Entrypoint: entrypoint, PullPolicy: pp}, nil
}

// parseServices reads services.
func parseServices(raws []json.RawMessage) ([]store.ImageSpec, *runnerapi.BadRequest) {
	if len(raws) > maxServices {
		return nil, runnerapi.Invalid("services", "at most %d services", maxServices)
	}
	var out []store.ImageSpec
	for i, raw := range raws {
		s, e := parseService(raw, fmt.Sprintf("services[%d]", i))
		if e != nil {
			return nil, e
		}
		out = append(out, s)
	}
	return out, nil
}

// parseService reads one entry of services, field being its path.
func parseService(raw json.RawMessage, field string) (store.ImageSpec, *runnerapi.BadRequest) {
	name, isString, e := stringOrObject(raw, field)
	if e != nil {
		return store.ImageSpec{}, e
	}
	if isString {
		if e := validImageName(name, field); e != nil {
			return store.ImageSpec{}, e
		}
		return store.ImageSpec{Name: name}, nil
	}
	var o serviceObject
	if e := decodeStrict(raw, &o, field); e != nil {
		return store.ImageSpec{}, e
	}
	s, e := imageBase(field, o.Name, o.Entrypoint, o.PullPolicy)
	if e != nil {
		return store.ImageSpec{}, e
	}
	if e := validAliases(o.Alias, field+".alias"); e != nil {
		return store.ImageSpec{}, e
	}
	if e := checkArgs(o.Command, field+".command"); e != nil {
		return store.ImageSpec{}, e
	}
	s.Alias, s.Command = o.Alias, o.Command
	for k, rv := range o.Variables {
		vf := fmt.Sprintf("%s.variables[%d]", field, k)
		var v serviceVariable
		if isNull(rv) {
			return store.ImageSpec{}, runnerapi.Invalid(vf, "%s must be an object with key and value", vf)
		}
		if e := decodeStrict(rv, &v, vf); e != nil {
			return store.ImageSpec{}, e
		}
		if !varKeyRE.MatchString(v.Key) {
			return store.ImageSpec{}, runnerapi.Invalid(vf+".key", "variable key %q must match %s", v.Key, varKeyRE)
		}
		if strings.IndexByte(v.Value, 0) >= 0 {
			return store.ImageSpec{}, runnerapi.Invalid(vf+".value", "variable %s must not contain NUL", v.Key)
		}
		s.Variables = append(s.Variables, api.Variable{Key: v.Key, Value: v.Value})
	}
	return s, nil
}

// validAliases checks a service's aliases: names of DNS characters
// (letters, digits, '-', '.', '_') separated by spaces or commas.
func validAliases(alias, field string) *runnerapi.BadRequest {
	if alias == "" {
		return nil
	}
	if len(alias) > maxAliases || !aliasRE.MatchString(alias) {
		return runnerapi.Invalid(field, "%s must be names of letters, digits, '-', '.' and '_' separated by spaces or commas (at most %d characters)", field, maxAliases)
	}
	names := splitAliases(alias)
	if len(names) == 0 {
		return runnerapi.Invalid(field, "%s has no name between its separators", field)
	}
	for _, n := range names {
		if len(n) > maxAlias {
			return runnerapi.Invalid(field, "%s: alias %q is longer than %d characters", field, n, maxAlias)
		}
	}
	return nil
}

// splitAliases splits an alias list on spaces and commas.
func splitAliases(alias string) []string {
	return strings.FieldsFunc(alias, func(r rune) bool { return r == ' ' || r == ',' })
}
