package difftest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A Fixture is one job payload of the suite: testdata/fixtures/NAME.json,
// a JSON merge patch (RFC 7396) over testdata/fixtures/base.json, GitLab's
// payload of a plain shell job. Fixtures run in name order.
type Fixture struct {
	Name        string
	Description string
	// Payload is the job as sent, but for the placeholders of Expand and
	// those the coordinator fills in (@@JOB_ID@@, @@JOB_TOKEN@@,
	// @@SERVER_URL@@: see coordinator/testpayloads.go).
	Payload json.RawMessage
	// Executors are the executors the fixture runs on: "shell" when
	// its file names none.
	Executors []string
}

// For reports whether the fixture runs on executor.
func (f Fixture) For(executor string) bool {
	return slices.Contains(f.Executors, executor)
}

// fixtureFile is a fixture as written.
type fixtureFile struct {
	Description string `json:"description"`
	// Patch is merged over the base payload; its "variables" are not
	// merged but appended to the base's (GitLab sends the predefined
	// variables first, then the project's and the job's).
	Patch map[string]any `json:"patch"`
	// Variables are appended to the base payload's variables.
	Variables []map[string]any `json:"variables"`
	// Executors are the executors it runs on, ["shell"] when empty: a
	// job that needs the host (its login shell, its git config) is not
	// one for a container, and one about images and services only for
	// the docker executor.
	Executors []string `json:"executors"`
}

// LoadFixtures reads dir/base.json and every other dir/*.json as a
// fixture, in name order.
func LoadFixtures(dir string) ([]Fixture, error) {
	baseRaw, err := os.ReadFile(filepath.Join(dir, "base.json"))
	if err != nil {
		return nil, err
	}
	var base map[string]any
	if err := json.Unmarshal(baseRaw, &base); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "base.json"), err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []Fixture
	for _, name := range names {
		if filepath.Base(name) == "base.json" {
			continue
		}
		raw, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var f fixtureFile
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		payload := mergePatch(deepCopy(base), f.Patch).(map[string]any)
		if len(f.Variables) > 0 {
			vars, _ := payload["variables"].([]any)
			for _, v := range f.Variables {
				vars = append(vars, v)
			}
			payload["variables"] = vars
		}
		b, err := json.MarshalIndent(payload, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(f.Executors) == 0 {
			f.Executors = []string{"shell"}
		}
		out = append(out, Fixture{Name: strings.TrimSuffix(filepath.Base(name), ".json"), Description: f.Description, Payload: b, Executors: f.Executors})
	}
	return out, nil
}

// mergePatch applies the JSON merge patch p to target (RFC 7396): objects
// merge key by key, null removes a key, anything else replaces.
func mergePatch(target, p any) any {
	pm, ok := p.(map[string]any)
	if !ok {
		return p
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = mergePatch(tm[k], v)
	}
	return tm
}

func deepCopy(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// Expand replaces the suite's placeholders in a fixture's payload:
// @@REPO_URL@@ and the others in vars (name without the @@), and
// @@ID:<fixture>@@ with the job id an earlier fixture got (a JSON string
// that is only the placeholder becomes the number).
func Expand(payload []byte, vars map[string]string, ids map[string]int64) ([]byte, error) {
	s := string(payload)
	for k, v := range vars {
		b, _ := json.Marshal(v)
		s = strings.ReplaceAll(s, "@@"+k+"@@", string(b[1:len(b)-1]))
	}
	for {
		i := strings.Index(s, "@@ID:")
		if i < 0 {
			break
		}
		j := strings.Index(s[i+5:], "@@")
		if j < 0 {
			return nil, fmt.Errorf("unterminated @@ID: placeholder")
		}
		name := s[i+5 : i+5+j]
		id, ok := ids[name]
		if !ok {
			return nil, fmt.Errorf("@@ID:%s@@: no earlier fixture %q ran", name, name)
		}
		start, end := i, i+5+j+2
		if start > 0 && end < len(s) && s[start-1] == '"' && s[end] == '"' {
			start, end = start-1, end+1 // "@@ID:x@@" is the number itself
		}
		s = s[:start] + fmt.Sprint(id) + s[end:]
	}
	return []byte(s), nil
}
