package runnerapi_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/runnerapi"
)

// TestValidInfo: a runner manager's info fields are taken up to their
// lengths (GitLab's: version 2048 characters, the others 255) when
// printable, and the first field that is not is named.
func TestValidInfo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		info  api.VersionInfo
		field string // "" = valid
	}{
		{"empty", api.VersionInfo{}, ""},
		{"GitLab Runner's", api.VersionInfo{Name: "gitlab-runner", Version: "17.5.0", Revision: "8ec04662", Platform: "linux",
			Architecture: "amd64", Executor: "docker+machine", Shell: "bash"}, ""},
		{"spaces and non-ASCII", api.VersionInfo{Name: "drover runner ünïcode", Version: "1.0 (beta)"}, ""},
		{"version at 2048", api.VersionInfo{Version: strings.Repeat("v", 2048)}, ""},
		{"version over", api.VersionInfo{Version: strings.Repeat("v", 2049)}, "info.version"},
		{"limit counts characters", api.VersionInfo{Revision: strings.Repeat("é", 255)}, ""},
		{"revision over", api.VersionInfo{Revision: strings.Repeat("r", 256)}, "info.revision"},
		{"name over", api.VersionInfo{Name: strings.Repeat("n", 256)}, "info.name"},
		{"platform newline", api.VersionInfo{Platform: "linux\nINFO forged"}, "info.platform"},
		{"architecture escape", api.VersionInfo{Architecture: "\x1b[2J"}, "info.architecture"},
		{"executor DEL", api.VersionInfo{Executor: "shell\x7f"}, "info.executor"},
		{"shell NUL", api.VersionInfo{Shell: "bash\x00"}, "info.shell"},
		{"invalid UTF-8", api.VersionInfo{Name: "a\xffb"}, "info.name"},
		{"C1 control", api.VersionInfo{Version: "1\u0085"}, "info.version"},
		{"bidi override", api.VersionInfo{Name: "abc\u202edef"}, "info.name"},
		{"zero-width space", api.VersionInfo{Name: "a\u200bb"}, "info.name"},
		{"tab", api.VersionInfo{Name: "a\tb"}, "info.name"},
		{"first bad field named", api.VersionInfo{Name: "\n", Version: "\n"}, "info.name"},
		{"fleet URL", api.VersionInfo{FleetURL: "https://manager1.example.com:9252"}, ""},
		{"fleet URL javascript:", api.VersionInfo{FleetURL: "javascript:alert(document.cookie)"}, "info.drover_fleet_url"},
		{"fleet URL relative", api.VersionInfo{FleetURL: "/fleet"}, "info.drover_fleet_url"},
		{"fleet URL with a user", api.VersionInfo{FleetURL: "http://u:p@manager1"}, "info.drover_fleet_url"},
		{"fleet URL checked after the others", api.VersionInfo{Name: "\n", FleetURL: "javascript:x"}, "info.name"},
		{"config and labels not checked", api.VersionInfo{Config: map[string]any{"gpus": "\n"}, Labels: map[string]string{"\n": "\n"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := runnerapi.ValidInfo(&tc.info)
			switch {
			case tc.field == "" && e != nil:
				t.Errorf("ValidInfo = %v (field %s), want nil", e, e.Field())
			case tc.field != "" && e == nil:
				t.Errorf("ValidInfo = nil, want an error naming %s", tc.field)
			case tc.field != "" && (e.Field() != tc.field || e.Code() != 400 || !strings.Contains(e.Error(), tc.field)):
				t.Errorf("ValidInfo = %d %v (field %s), want 400 naming %s", e.Code(), e, e.Field(), tc.field)
			}
		})
	}
}

// FuzzValidInfo: whatever the fields hold, ValidInfo accepts exactly the
// info whose every field is within its length and printable, and when it
// refuses, names a field that is not.
func FuzzValidInfo(f *testing.F) {
	f.Add("gitlab-runner", "17.5.0", "8ec04662", "linux", "amd64", "docker", "bash")
	f.Add("", strings.Repeat("v", 2049), "", "", "", "", "")
	f.Add("a\x00", "", "\u202e", "", "", "", "")
	f.Add("", "", "", "\xff", "", "", "é")
	f.Fuzz(func(t *testing.T, name, version, revision, platform, arch, executor, shell string) {
		info := api.VersionInfo{Name: name, Version: version, Revision: revision, Platform: platform,
			Architecture: arch, Executor: executor, Shell: shell}
		fields := map[string]string{"info.name": name, "info.version": version, "info.revision": revision,
			"info.platform": platform, "info.architecture": arch, "info.executor": executor, "info.shell": shell}
		ok := func(field, v string) bool {
			limit := 255
			if field == "info.version" {
				limit = 2048
			}
			if utf8.RuneCountInString(v) > limit || !utf8.ValidString(v) {
				return false
			}
			for _, r := range v {
				if r == utf8.RuneError || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Cf, r) || !unicode.IsPrint(r) {
					return false
				}
			}
			return true
		}
		allOK := true
		for k, v := range fields {
			allOK = allOK && ok(k, v)
		}
		e := runnerapi.ValidInfo(&info)
		switch {
		case allOK && e != nil:
			t.Fatalf("ValidInfo(%+v) = %v, want nil", info, e)
		case !allOK && e == nil:
			t.Fatalf("ValidInfo(%+v) = nil, want an error", info)
		case e != nil:
			v, known := fields[e.Field()]
			if !known || ok(e.Field(), v) || e.Code() != 400 {
				t.Fatalf("ValidInfo(%+v) = %d naming %q, want 400 naming a bad field", info, e.Code(), e.Field())
			}
		}
	})
}
