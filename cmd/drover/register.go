package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/executor/instance"
)

func runnerInfo(executorName, shell string) api.VersionInfo {
	info := api.VersionInfo{Name: "drover", Version: version, Revision: "main", Platform: runtime.GOOS, Architecture: runtime.GOARCH, Executor: executorName, Shell: shell}
	if p, ok := providers(nil, nil, nil, nil, nil, nil)[executorName]; ok {
		p.Features(&info.Features)
		if info.Shell == "" {
			info.Shell = p.DefaultShell()
		}
	}
	info.Features.TraceReset, info.Features.TraceChecksum, info.Features.TraceSize = true, true, true
	info.Features.Cancelable, info.Features.CancelGracefully = true, true
	return info
}

// loadOrNewConfig loads path, or returns a fresh config when it does not exist.
func loadOrNewConfig(path string) (*config.Config, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return &config.Config{Concurrent: 1, CheckInterval: 3}, nil
	}
	return loadConfig(nil, path)
}

func newRegisterCmd() *cobra.Command {
	var (
		cfgPath, url, token, executorName, shell, name, buildsDir, tagList, description string
		dockerImage, dockerPull                                                         string
		concurrent, maxTimeout                                                          int
		runUntagged, locked, paused                                                     bool
	)
	cmd := &cobra.Command{
		Use:   "register",
		Short: "Add a runner to config.toml (verifies a glrt- token with the coordinator)",
		Long: `Adds a [[runners]] entry to config.toml.

With a runner authentication token (glrt-…, created in GitLab or with
drover's POST /api/v1/runners) it calls POST /api/v4/runners/verify with
this machine's system id (.runner_system_id next to config.toml); tags and
other server-side settings belong to the token then. With a legacy
registration token it registers a new runner (POST /api/v4/runners) with
--tag-list, --run-untagged, --locked, --paused and --maximum-timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" || token == "" {
				return usageError(errors.New("--url and --token are required"))
			}
			if _, ok := providers(nil, nil, nil, nil, nil, nil)[executorName]; !ok {
				return usageError(fmt.Errorf("--executor %q: not available in this build (available: %s)", executorName, providerNames()))
			}
			if docker.Uses(executorName) && dockerImage == "" {
				return usageError(fmt.Errorf("--docker-image is required with --executor %s (the image of jobs that name none)", executorName))
			}
			cfg, err := loadOrNewConfig(cfgPath)
			if err != nil {
				return err
			}
			systemID, err := config.LoadOrCreateSystemID(cfgPath)
			if err != nil {
				return err
			}
			client, err := api.NewClient(url, api.ClientOptions{Version: version})
			if err != nil {
				return usageError(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			var got *api.VerifyResponse
			var resp *api.Response
			if strings.Contains(token, api.RunnerTokenPrefix) {
				if tagList != "" || locked || paused || maxTimeout != 0 {
					return usageError(errors.New("--tag-list, --locked, --paused and --maximum-timeout belong to the glrt- token on the server; leave them out"))
				}
				got, resp, err = client.Verify(ctx, api.VerifyRequest{Token: token, SystemID: systemID, Info: runnerInfo(executorName, shell)})
			} else {
				req := api.RegisterRequest{Token: token, Description: description, TagList: tagList, Info: runnerInfo(executorName, shell), MaximumTimeout: maxTimeout}
				req.Locked, req.Paused = &locked, &paused
				if cmd.Flags().Changed("run-untagged") {
					// Otherwise the server decides: true only without tags.
					req.RunUntagged = &runUntagged
				}
				got, resp, err = client.Register(ctx, req)
			}
			if err != nil {
				return err
			}
			if got == nil {
				if resp.StatusCode == http.StatusForbidden {
					return fmt.Errorf("the coordinator at %s refused the token (403)", url)
				}
				return fmt.Errorf("the coordinator at %s answered %d", url, resp.StatusCode)
			}
			if name == "" {
				name = description
			}
			if name == "" {
				h, _ := os.Hostname()
				name = h
			}
			if concurrent > 0 {
				cfg.Concurrent = concurrent
			}
			rc := config.RunnerConfig{
				Name: name, URL: url, Token: got.Token, ID: got.ID,
				TokenObtainedAt: time.Now().UTC().Truncate(time.Second),
				Executor:        executorName, Shell: shell, BuildsDir: buildsDir,
				RequestConcurrency: config.DefaultRequestConcurrency,
				OutputLimit:        config.DefaultOutputLimit,
				UnhealthyInterval:  config.DefaultUnhealthyInterval,
			}
			if got.TokenExpiresAt != "" {
				if t, err := time.Parse(time.RFC3339, got.TokenExpiresAt); err == nil {
					rc.TokenExpiresAt = t
				}
			}
			if docker.Uses(executorName) {
				rc.Docker = map[string]any{"image": dockerImage}
				if dockerPull != "" {
					rc.Docker["pull_policy"] = dockerPull
				}
			}
			cfg.Runners = append(cfg.Runners, rc)
			if err := cfg.Save(cfgPath); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Runner %q (id %d, system id %s) registered in %s\n", name, got.ID, systemID, cfgPath)
			switch executorName {
			case instance.Name, docker.NameAutoscaler:
				fmt.Fprintf(cmd.OutOrStdout(), "Executor %q needs a [runners.autoscaler] table (plugin = \"docker\", \"static\" or a fleet plugin) in this runner before drover run.\n", executorName)
			case docker.NameMachine:
				fmt.Fprintf(cmd.OutOrStdout(), "Executor %q needs a [runners.machine] table (MachineDriver = \"docker\", \"static\" or a fleet plugin) in this runner before drover run.\n", executorName)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&cfgPath, "config", "c", "config.toml", "path of config.toml (created when missing)")
	f.StringVar(&url, "url", envOr("CI_SERVER_URL", ""), "coordinator URL (drover coordinator or GitLab)")
	f.StringVar(&token, "token", envOr("REGISTRATION_TOKEN", ""), "runner authentication token (glrt-…) or legacy registration token")
	f.StringVar(&executorName, "executor", "shell", "executor for this runner")
	f.StringVar(&dockerImage, "docker-image", "", "docker executor: the image of jobs that name none ([runners.docker] image)")
	f.StringVar(&dockerPull, "docker-pull-policy", "", "docker executor: always, if-not-present or never (default always, as GitLab Runner)")
	f.StringVar(&shell, "shell", "", "shell for the shell executor: bash or sh (default: bash when installed)")
	f.StringVar(&name, "name", "", "runner name in config.toml (default: description or host name)")
	f.StringVar(&description, "description", "", "description (legacy registration)")
	f.StringVar(&buildsDir, "builds-dir", "", "where builds are checked out (default: ./builds)")
	f.StringVar(&tagList, "tag-list", "", "comma-separated tags (legacy registration only)")
	f.BoolVar(&runUntagged, "run-untagged", false, "take untagged jobs (legacy registration only; default: true when --tag-list is empty)")
	f.BoolVar(&locked, "locked", false, "lock the runner to its project (legacy registration only)")
	f.BoolVar(&paused, "paused", false, "register paused (legacy registration only)")
	f.IntVar(&maxTimeout, "maximum-timeout", 0, "maximum job timeout in seconds (legacy registration only)")
	f.IntVar(&concurrent, "concurrent", 0, "set the global concurrent value")
	return cmd
}

func newVerifyCmd() *cobra.Command {
	var cfgPath string
	var del bool
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check every runner token of config.toml with its coordinator",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(nil, cfgPath)
			if err != nil {
				return err
			}
			systemID, err := config.LoadOrCreateSystemID(cfgPath)
			if err != nil {
				return err
			}
			var kept []config.RunnerConfig
			bad := 0
			for _, r := range cfg.Runners {
				client, err := api.NewClient(r.URL, api.ClientOptions{Version: version})
				if err != nil {
					return err
				}
				got, resp, err := client.Verify(cmd.Context(), api.VerifyRequest{Token: r.Token, SystemID: systemID, Info: runnerInfo(r.Executor, r.Shell)})
				switch {
				case err != nil:
					fmt.Fprintf(cmd.OutOrStdout(), "%-20s %s: error: %v\n", r.Name, r.URL, err)
					kept = append(kept, r)
					bad++
				case got == nil:
					fmt.Fprintf(cmd.OutOrStdout(), "%-20s %s: invalid (status %d)\n", r.Name, r.URL, resp.StatusCode)
					bad++
					if !del {
						kept = append(kept, r)
					}
				default:
					fmt.Fprintf(cmd.OutOrStdout(), "%-20s %s: valid (id %d)\n", r.Name, r.URL, got.ID)
					kept = append(kept, r)
				}
			}
			if del && len(kept) != len(cfg.Runners) {
				cfg.Runners = kept
				if err := cfg.Save(cfgPath); err != nil {
					return err
				}
			}
			if bad > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d runner(s) failed verification", bad)}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "config.toml", "path of config.toml")
	cmd.Flags().BoolVar(&del, "delete", false, "remove runners whose token is invalid from config.toml")
	return cmd
}

func newUnregisterCmd() *cobra.Command {
	var cfgPath, name string
	var all bool
	cmd := &cobra.Command{
		Use:   "unregister",
		Short: "Remove a runner (or this manager of it) from its coordinator and from config.toml",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" && !all {
				return usageError(errors.New("give --name NAME or --all-runners"))
			}
			cfg, err := loadConfig(nil, cfgPath)
			if err != nil {
				return err
			}
			systemID, err := config.LoadOrCreateSystemID(cfgPath)
			if err != nil {
				return err
			}
			var kept []config.RunnerConfig
			found := false
			for _, r := range cfg.Runners {
				if !all && r.Name != name {
					kept = append(kept, r)
					continue
				}
				found = true
				client, err := api.NewClient(r.URL, api.ClientOptions{Version: version})
				if err != nil {
					return err
				}
				var resp *api.Response
				if strings.Contains(r.Token, api.RunnerTokenPrefix) {
					resp, err = client.UnregisterManager(cmd.Context(), r.Token, systemID)
				} else {
					resp, err = client.Unregister(cmd.Context(), r.Token)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: unregistered (status %d)\n", r.Name, resp.StatusCode)
			}
			if !found {
				return usageError(fmt.Errorf("%s: no runner named %q", cfgPath, name))
			}
			cfg.Runners = kept
			return cfg.Save(cfgPath)
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "config.toml", "path of config.toml")
	cmd.Flags().StringVar(&name, "name", "", "runner name")
	cmd.Flags().BoolVar(&all, "all-runners", false, "unregister every runner of config.toml")
	return cmd
}
