package config

import "testing"

func TestGitOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		src   string
		clone string
		want  GitOptions
	}{
		{"shell defaults", runnerOf("shell"), "", GitOptions{}},
		{"docker defaults", runnerOf("docker"), "", GitOptions{SafeDirectoryCheckout: true, CleanGitConfig: true, CustomBuildDir: true}},
		{"kubernetes defaults", runnerOf("kubernetes"), "", GitOptions{SafeDirectoryCheckout: true, CleanGitConfig: true, CustomBuildDir: true}},
		{"instance defaults", runnerOf("instance"), "", GitOptions{CleanGitConfig: true}},
		{"virtualbox defaults", runnerOf("virtualbox"), "", GitOptions{SafeDirectoryCheckout: true, CleanGitConfig: true}},
		{"ssh defaults", runnerOf("ssh"), "", GitOptions{CleanGitConfig: true}},
		{
			"shell, every key set",
			runnerOf("shell", `  clone_url = "https://mirror.example"`, "  safe_directory_checkout = true", "  clean_git_config = true",
				"  [runners.custom_build_dir]", "    enabled = true"),
			"https://mirror.example",
			GitOptions{SafeDirectoryCheckout: true, CleanGitConfig: true, CustomBuildDir: true},
		},
		{
			"docker, every key off",
			runnerOf("docker", "  safe_directory_checkout = false", "  clean_git_config = false",
				"  [runners.custom_build_dir]", "    enabled = false"),
			"",
			GitOptions{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := Parse("config.toml", []byte(tt.src))
			if err != nil {
				t.Fatalf("Parse() error = %v\n%s", err, tt.src)
			}
			r := c.Runners[0]
			if got := r.GitOptions(); got != tt.want {
				t.Errorf("GitOptions() = %+v, want %+v", got, tt.want)
			}
			if r.CloneURL != tt.clone {
				t.Errorf("CloneURL = %q, want %q", r.CloneURL, tt.clone)
			}
		})
	}
}
