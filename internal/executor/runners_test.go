package executor

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/drover-ci/drover/internal/config"
)

func TestRunnerTable(t *testing.T) {
	cfg := &config.Config{Runners: []config.RunnerConfig{
		{Name: "a", Executor: "docker", Token: "aaaaaaaaa"},
		{Name: "b", Executor: "shell", Token: "bbbbbbbbb"},
		{Name: "c", Executor: "docker+machine", Token: "ccccccccc"},
	}}
	parse := func(r *config.RunnerConfig) (string, []config.Warning, error) {
		return r.Name, []config.Warning{{Key: r.Name}}, nil
	}
	var tab RunnerTable[string]
	warns, err := tab.Load(cfg, parse, "docker", "docker+machine")
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	if len(warns) != 2 || warns[0].Key != "a" || warns[1].Key != "c" {
		t.Errorf("warnings %v, want those of a and c", warns)
	}
	if c, ok := tab.Get("aaaaaaaaa"); !ok || c != "a" {
		t.Errorf("Get(a's token) = %q, %v; want a, true", c, ok)
	}
	if _, ok := tab.Get("bbbbbbbbb"); ok {
		t.Error("Get(b's token) found the runner of another executor")
	}
	all := tab.All()
	slices.Sort(all)
	if !slices.Equal(all, []string{"a", "c"}) {
		t.Errorf("All() = %v, want a and c", all)
	}

	// A runner that does not parse leaves the table as it was.
	bad := errors.New("bad")
	_, err = tab.Load(cfg, func(r *config.RunnerConfig) (string, []config.Warning, error) {
		if r.Name == "c" {
			return "", nil, bad
		}
		return r.Name + "2", nil, nil
	}, "docker", "docker+machine")
	if !errors.Is(err, bad) {
		t.Errorf("Load(failing) = %v, want the parse error", err)
	}
	if c, _ := tab.Get("aaaaaaaaa"); c != "a" {
		t.Errorf("after a failed Load, Get(a's token) = %q, want the earlier a", c)
	}
}

func TestCheckRunners(t *testing.T) {
	runner := func(name, token, executor, dockerHost string) string {
		s := fmt.Sprintf("[[runners]]\n  name = %q\n  url = \"https://gitlab.example.com\"\n  token = %q\n  executor = %q\n", name, token, executor)
		if dockerHost != "" {
			s += fmt.Sprintf("  [runners.docker]\n    host = %q\n", dockerHost)
		}
		return s
	}
	// The down runner's host is on line 20: 1 + 7 + 5 + 7.
	file := "concurrent = 1\n" + runner("up", "glrt-aaaaaaaaa", "docker", "tcp://up:2376") +
		runner("other", "glrt-ccccccccc", "shell", "") + runner("down", "glrt-bbbbbbbbb", "docker", "tcp://down:2376")
	cfg, _, err := config.Parse("config.toml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	var pinged []string
	lookup := func(s Settings) (string, error) { return s.RunnerName + "/" + s.ShortToken, nil }
	ping := func(c string) error {
		pinged = append(pinged, c)
		if c == "down/bbbbbbbbb" {
			return errors.New("no answer")
		}
		return nil
	}
	err = CheckRunners("config.toml", cfg, "docker", lookup, ping)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Line != 20 || ce.Key != "runners[2].docker.host" || ce.Msg != "no answer" {
		t.Errorf("CheckRunners() = %#v, want a *config.Error at line 20, the down runner's docker host", err)
	}
	if !slices.Equal(pinged, []string{"up/aaaaaaaaa", "down/bbbbbbbbb"}) {
		t.Errorf("pinged %v, want the two docker runners in order", pinged)
	}
	bad := errors.New("no such runner")
	if err := CheckRunners("config.toml", cfg, "docker", func(Settings) (string, error) { return "", bad }, ping); !errors.Is(err, bad) {
		t.Errorf("CheckRunners(failing lookup) = %v, want the lookup's error", err)
	}
}
