package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/buildinfo"
	"github.com/drover-ci/drover/internal/cache"
	"github.com/drover-ci/drover/internal/config"
	"github.com/drover-ci/drover/internal/executor/custom"
	"github.com/drover-ci/drover/internal/executor/docker"
	"github.com/drover-ci/drover/internal/executor/instance"
	"github.com/drover-ci/drover/internal/executor/kubernetes"
	"github.com/drover-ci/drover/internal/executor/parallels"
	"github.com/drover-ci/drover/internal/executor/qemu"
	"github.com/drover-ci/drover/internal/executor/sshexec"
	"github.com/drover-ci/drover/internal/executor/virtualbox"
)

func runnerInfo(executorName, shell string) api.VersionInfo {
	info := api.VersionInfo{Name: "drover", Version: version, Revision: buildinfo.Get().Revision(), Platform: runtime.GOOS, Architecture: runtime.GOARCH, Executor: executorName, Shell: shell}
	if p, ok := providers(nil, nil, nil, nil)[executorName]; ok {
		p.Features(&info.Features)
		if info.Shell == "" {
			info.Shell = p.DefaultShell()
		}
	}
	info.Features.TraceReset, info.Features.TraceChecksum, info.Features.TraceSize = true, true, true
	info.Features.Cancelable, info.Features.CancelGracefully = true, true
	return info
}

// registerOptions are drover register's flags, spelled as gitlab-runner
// register's (with their environment variables) where it has them.
type registerOptions struct {
	cfgPath                                string
	url, token, registrationToken          string
	name                                   string
	tagList, accessLevel, maintenanceNote  string
	runUntagged, locked, paused            bool
	maxTimeout                             int
	nonInteractive, leaveRunner            bool
	executor, shell, buildsDir, cacheDir   string
	env                                    []string
	limit, outputLimit, requestConcurrency int
	unhealthyRequestsLimit                 int
	unhealthyInterval                      time.Duration
	debugTraceDisabled                     bool
	prepareTimeout, getSourcesTimeout      time.Duration
	concurrent                             int
	tls                                    api.TLSFiles
}

func (o *registerOptions) define(f *pflag.FlagSet) {
	configFlag(f, &o.cfgPath, "config file (created when missing)")
	f.BoolVarP(&o.nonInteractive, "non-interactive", "n", false, "accepted for gitlab-runner's command lines: drover register never asks")
	f.BoolVar(&o.leaveRunner, "leave-runner", false, "keep a runner just registered with a registration token when config.toml cannot be written (default: unregister it again)")
	f.StringVarP(&o.url, "url", "u", "", "coordinator URL (drover coordinator or GitLab)")
	f.StringVarP(&o.token, "token", "t", "", "runner authentication token (glrt-…, verified), or a registration token")
	f.StringVarP(&o.registrationToken, "registration-token", "r", "", "registration token: registers a new runner (with --tag-list, --locked and the like)")
	f.StringVar(&o.name, "name", "", "runner name in config.toml and its description on the coordinator; --description is the same (default: host name)")
	f.StringVar(&o.tls.CAFile, "tls-ca-file", "", "PEM file of CA certificates the coordinator's certificate is verified with, besides the system's (written as tls-ca-file)")
	f.StringVar(&o.tls.CertFile, "tls-cert-file", "", "PEM client certificate for a coordinator that asks for one, with --tls-key-file (written as tls-cert-file)")
	f.StringVar(&o.tls.KeyFile, "tls-key-file", "", "PEM key of --tls-cert-file (written as tls-key-file)")

	f.StringVar(&o.tagList, "tag-list", "", "comma-separated tags (registration token only)")
	f.BoolVar(&o.runUntagged, "run-untagged", false, "take untagged jobs (registration token only; default: true without --tag-list)")
	f.BoolVar(&o.locked, "locked", true, "lock the runner to its project, as gitlab-runner does unless --locked=false (registration token only)")
	f.StringVar(&o.accessLevel, "access-level", "", "not_protected or ref_protected (registration token only)")
	f.IntVar(&o.maxTimeout, "maximum-timeout", 0, "maximum job timeout in seconds (registration token only)")
	f.BoolVar(&o.paused, "paused", false, "register paused (registration token only)")
	f.StringVar(&o.maintenanceNote, "maintenance-note", "", "maintenance note (registration token only)")

	f.StringVar(&o.executor, "executor", "shell", "executor for this runner")
	f.StringVar(&o.shell, "shell", "", "shell for the shell executor: bash or sh (default: bash when installed)")
	f.StringVar(&o.buildsDir, "builds-dir", "", "where builds are checked out (default: builds in drover run's working directory)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "where caches are kept (default: cache in drover run's working directory)")
	f.StringArrayVar(&o.env, "env", nil, "NAME=value for every job of the runner; repeat it for more")
	f.IntVar(&o.limit, "limit", 0, "jobs at once on this runner (default 0: only concurrent limits them)")
	f.IntVar(&o.outputLimit, "output-limit", 0, "job log limit in KiB (default 4096)")
	f.IntVar(&o.requestConcurrency, "request-concurrency", 0, "job requests in flight at once (default 1)")
	f.IntVar(&o.unhealthyRequestsLimit, "unhealthy-requests-limit", 0, "failed job requests in a row before the runner pauses (default 3)")
	f.DurationVar(&o.unhealthyInterval, "unhealthy-interval", config.DefaultUnhealthyInterval, "how long such a pause lasts")
	f.IntVar(&o.concurrent, "concurrent", 0, "set the global concurrent value")
	f.BoolVar(&o.debugTraceDisabled, "debug-trace-disabled", false, "refuse the jobs' CI_DEBUG_TRACE and CI_DEBUG_SERVICES (written as debug_trace_disabled)")
	f.DurationVar(&o.prepareTimeout, "prepare-timeout", 0, "how long preparing a job's environment may take, prepare_script included (written as prepare_timeout; default: the job timeout)")
	f.DurationVar(&o.getSourcesTimeout, "get-sources-timeout", 0, "how long get_sources may take, its attempts included (written as get_sources_timeout; default: the job timeout)")

	// gitlab-runner's names for them.
	for name, env := range map[string]string{
		"non-interactive": "REGISTER_NON_INTERACTIVE", "leave-runner": "REGISTER_LEAVE_RUNNER",
		"url": "CI_SERVER_URL", "token": "CI_SERVER_TOKEN",
		"tls-ca-file": "CI_SERVER_TLS_CA_FILE", "tls-cert-file": "CI_SERVER_TLS_CERT_FILE", "tls-key-file": "CI_SERVER_TLS_KEY_FILE", "registration-token": "REGISTRATION_TOKEN", "name": "RUNNER_NAME",
		"tag-list": "RUNNER_TAG_LIST", "run-untagged": "REGISTER_RUN_UNTAGGED", "locked": "REGISTER_LOCKED",
		"access-level": "REGISTER_ACCESS_LEVEL", "maximum-timeout": "REGISTER_MAXIMUM_TIMEOUT",
		"paused": "REGISTER_PAUSED", "maintenance-note": "REGISTER_MAINTENANCE_NOTE",
		"executor": "RUNNER_EXECUTOR", "shell": "RUNNER_SHELL", "builds-dir": "RUNNER_BUILDS_DIR",
		"cache-dir": "RUNNER_CACHE_DIR", "env": "RUNNER_ENV", "limit": "RUNNER_LIMIT",
		"output-limit": "RUNNER_OUTPUT_LIMIT", "request-concurrency": "RUNNER_REQUEST_CONCURRENCY",
		"unhealthy-requests-limit": "RUNNER_UNHEALTHY_REQUESTS_LIMIT", "unhealthy-interval": "RUNNER_UNHEALTHY_INTERVAL",
		"debug-trace-disabled": "RUNNER_DEBUG_TRACE_DISABLED", "prepare-timeout": "RUNNER_PREPARE_TIMEOUT",
		"get-sources-timeout": "RUNNER_GET_SOURCES_TIMEOUT",
	} {
		envFlag(f, name, env)
	}
	for _, d := range slices.Concat(dockerFlags(), sshFlags(), customFlags(), kubernetesFlags(), qemuFlags(), cacheFlags(), vmFlags()) {
		switch d.kind {
		case kindString:
			f.String(d.flag, "", d.usage)
		case kindBool:
			f.Bool(d.flag, false, d.usage)
		case kindInt:
			f.Int64(d.flag, 0, d.usage)
		case kindList, kindTable, kindTolerations:
			f.StringArray(d.flag, nil, d.usage+"; repeat it for more")
		}
		if d.env != "" {
			envFlag(f, d.flag, d.env)
		}
	}
	// gitlab-runner's --description is its --name.
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "description" {
			name = "name"
		}
		return pflag.NormalizedName(name)
	})
}

func newRegisterCmd() *cobra.Command {
	var o registerOptions
	cmd := &cobra.Command{
		Use:   "register",
		Short: "Add a runner to config.toml (verifies a glrt- token with the coordinator)",
		Long: `Adds a [[runners]] entry to config.toml, at the end of the file: the rest of
the file stays as it is. The flags are gitlab-runner register's, and so are
their environment variables (named in brackets); drover register never asks
questions, so --non-interactive changes nothing. gitlab-runner flags drover
does not support are refused, naming the flag.

With a runner authentication token (glrt-…, created in GitLab or with
drover's POST /api/v1/runners) it calls POST /api/v4/runners/verify with
this machine's system id (.runner_system_id next to config.toml); tags and
other server-side settings belong to the token then. With a registration
token (--registration-token, or --token without glrt-) it registers a new
runner (POST /api/v4/runners) with --tag-list, --run-untagged, --locked,
--access-level, --paused, --maximum-timeout and --maintenance-note.

The entry holds what the flags give and the values drover needs (name, url,
id, token, executor); drover run fills in the defaults of the rest.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	o.define(cmd.Flags())
	return cmd
}

func (o *registerOptions) run(cmd *cobra.Command) error {
	f := cmd.Flags()
	stderr := cmd.ErrOrStderr()
	secret, err := o.secret(cmd)
	if err != nil {
		return err
	}
	verify := strings.Contains(secret, api.RunnerTokenPrefix)
	if verify {
		// These settings belong to the coordinator: a glrt- token carries
		// them already.
		var given []string
		for _, name := range []string{"tag-list", "run-untagged", "locked", "paused", "maximum-timeout", "access-level", "maintenance-note"} {
			if f.Changed(name) {
				given = append(given, "--"+name)
			}
		}
		if len(given) > 0 {
			return usageError(fmt.Errorf("%s: these belong to the glrt- token on the coordinator; leave them out", strings.Join(given, ", ")))
		}
	}
	if o.accessLevel != "" && o.accessLevel != "not_protected" && o.accessLevel != "ref_protected" {
		return usageError(fmt.Errorf("--access-level %q: want not_protected or ref_protected", o.accessLevel))
	}
	if _, ok := providers(nil, nil, nil, nil)[o.executor]; !ok {
		return usageError(fmt.Errorf("--executor %q: not available in this build (available: %s)", o.executor, providerNames()))
	}
	rc, err := o.runner(cmd)
	if err != nil {
		return err
	}
	if err := checkRunner(o.cfgPath, rc); err != nil {
		return err
	}

	concurrent, err := o.prepareFile(cmd)
	if err != nil {
		return err
	}
	edit, err := config.EditFile(o.cfgPath)
	if err != nil {
		return configError(o.cfgPath, err)
	}
	if o.limit > concurrent {
		fmt.Fprintf(stderr, "warning: --limit %d is more than concurrent (%d), which limits the jobs of all runners together; --concurrent changes it\n", o.limit, concurrent)
	}
	systemID, err := systemIDFor(o.cfgPath)
	if err != nil {
		return err
	}
	client, err := runnerClient(o.url, o.tls)
	if err != nil {
		return usageError(err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
	defer cancel()
	var got *api.VerifyResponse
	var resp *api.Response
	if verify {
		got, resp, err = client.Verify(ctx, api.VerifyRequest{Token: secret, SystemID: systemID, Info: runnerInfo(o.executor, o.shell)})
	} else {
		req := api.RegisterRequest{
			Token: secret, Description: rc.Name, MaintenanceNote: o.maintenanceNote, TagList: o.tagList,
			AccessLevel: o.accessLevel, MaximumTimeout: o.maxTimeout, Info: runnerInfo(o.executor, o.shell),
		}
		req.Locked, req.Paused = &o.locked, &o.paused
		if f.Changed("run-untagged") {
			// Otherwise the server decides: true only without tags.
			req.RunUntagged = &o.runUntagged
		}
		got, resp, err = client.Register(ctx, req)
	}
	if err != nil {
		return err
	}
	if got == nil {
		if resp.StatusCode == http.StatusForbidden {
			return fmt.Errorf("the coordinator at %s refused the token (403)", o.url)
		}
		return fmt.Errorf("the coordinator at %s answered %d", o.url, resp.StatusCode)
	}

	rc.Token, rc.ID = got.Token, got.ID
	rc.TokenObtainedAt = time.Now().UTC().Truncate(time.Second)
	if got.TokenExpiresAt != "" {
		if t, err := time.Parse(time.RFC3339, got.TokenExpiresAt); err == nil {
			rc.TokenExpiresAt = t
		}
	}
	if err := saveRunner(edit, &rc, o.concurrentToSet(edit)); err != nil {
		err = configError(o.cfgPath, err)
		if !verify && !o.leaveRunner {
			if _, uerr := client.Unregister(context.WithoutCancel(ctx), got.Token); uerr == nil {
				return fmt.Errorf("%w; the new runner was unregistered again (--leave-runner keeps it)", err)
			}
		}
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Runner %q (id %d, system id %s) registered in %s\n", rc.Name, got.ID, systemID, o.cfgPath)
	switch o.executor {
	case instance.Name, docker.NameAutoscaler:
		fmt.Fprintf(out, "Executor %q needs a [runners.autoscaler] table (plugin = \"docker\", \"static\" or a fleet plugin) in this runner before drover run.\n", o.executor)
	case docker.NameMachine:
		fmt.Fprintf(out, "Executor %q needs a [runners.machine] table (MachineDriver = \"docker\", \"static\" or a fleet plugin) in this runner before drover run.\n", o.executor)
	case sshexec.Name:
		var missing []string
		for _, k := range []string{"host", "user"} {
			if rc.SSH[k] == nil {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			fmt.Fprintf(out, "Executor %q needs %s in the [runners.ssh] table of this runner before drover run (--ssh-host, --ssh-user).\n", o.executor, strings.Join(missing, " and "))
		}
		if rc.SSH["disable_strict_host_key_checking"] != true {
			fmt.Fprintf(out, "The host's key must be in ~/.ssh/known_hosts (or known_hosts_file) of the user running drover run: ssh-keyscan -p PORT HOST >> ~/.ssh/known_hosts\n")
		}
	case qemu.Name:
		qemuNotes(out, &rc)
	case custom.Name:
		if rc.Custom["run_exec"] == nil {
			fmt.Fprintf(out, "Executor %q needs run_exec (the driver that runs each stage script) in the [runners.custom] table of this runner before drover run (--custom-run-exec); config_exec, prepare_exec and cleanup_exec are optional.\n", o.executor)
		}
		if rc.Custom["config_exec"] == nil && (rc.BuildsDir == "" || rc.CacheDir == "") {
			fmt.Fprintf(out, "Without a config_exec that prints them, executor %q needs builds_dir and cache_dir in this runner (--builds-dir, --cache-dir).\n", o.executor)
		}
	}
	return nil
}

// secret returns the token to register with: --token or
// --registration-token, whichever is given.
func (o *registerOptions) secret(cmd *cobra.Command) (string, error) {
	switch {
	case o.url == "":
		return "", usageError(errors.New("--url (or $CI_SERVER_URL) is required"))
	case o.token != "" && o.registrationToken != "":
		return "", usageError(errors.New("--token and --registration-token are both given (on the command line or as $CI_SERVER_TOKEN and $REGISTRATION_TOKEN): give one"))
	case o.token != "":
		return o.token, nil
	case o.registrationToken != "":
		if strings.Contains(o.registrationToken, api.RunnerTokenPrefix) {
			fmt.Fprintln(cmd.ErrOrStderr(), "note: --registration-token holds a runner authentication token (glrt-): verifying it, as with --token")
		}
		return o.registrationToken, nil
	}
	return "", usageError(errors.New("--token or --registration-token (or $CI_SERVER_TOKEN, $REGISTRATION_TOKEN) is required"))
}

// runner returns the config.toml entry the flags describe, without the
// credentials the coordinator hands out.
func (o *registerOptions) runner(cmd *cobra.Command) (config.RunnerConfig, error) {
	name := o.name
	if name == "" {
		name, _ = os.Hostname()
	}
	rc := config.RunnerConfig{
		Name: name, URL: o.url, Executor: o.executor, Shell: o.shell,
		TLSCAFile: o.tls.CAFile, TLSCertFile: o.tls.CertFile, TLSKeyFile: o.tls.KeyFile,
		BuildsDir: o.buildsDir, CacheDir: o.cacheDir, Environment: o.env,
		Limit: o.limit, OutputLimit: o.outputLimit, RequestConcurrency: o.requestConcurrency,
		UnhealthyRequestsLimit: o.unhealthyRequestsLimit, UnhealthyInterval: o.unhealthyInterval,
		DebugTraceDisabled: o.debugTraceDisabled,
	}
	for key, d := range map[string]time.Duration{"prepare_timeout": o.prepareTimeout, "get_sources_timeout": o.getSourcesTimeout} {
		if d != 0 {
			if rc.Extra == nil {
				rc.Extra = map[string]any{}
			}
			rc.Extra[key] = d.String()
		}
	}
	table, set := dockerTable(cmd.Flags())
	if docker.Uses(o.executor) {
		if table["image"] == nil {
			return rc, usageError(fmt.Errorf("--docker-image (or $DOCKER_IMAGE) is required with --executor %s: the image of jobs that name none", o.executor))
		}
		rc.Docker = table
	} else if len(set) > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s ignored: executor %q has no [runners.docker]\n", strings.Join(set, ", "), o.executor)
	}
	if o.executor == kubernetes.Name && !cmd.Flags().Changed("kubernetes-helper-image") {
		return rc, usageError(fmt.Errorf("--kubernetes-helper-image (or $KUBERNETES_HELPER_IMAGE) is required with --executor %s: "+
			"the image of drover's helper, as the cluster's nodes pull it (drover helper-image --tag REGISTRY/drover-helper:TAG --push builds and pushes it)", o.executor))
	}
	for _, sec := range []struct {
		executors []string
		table     string
		flags     []dockerFlag
		dst       *map[string]any
	}{{[]string{sshexec.Name, virtualbox.Name, parallels.Name, qemu.Name}, "ssh", sshFlags(), &rc.SSH}, {[]string{custom.Name}, "custom", customFlags(), &rc.Custom},
		{[]string{kubernetes.Name}, "kubernetes", kubernetesFlags(), &rc.Kubernetes},
		{[]string{qemu.Name}, "qemu", qemuFlags(), &rc.Qemu},
		{[]string{virtualbox.Name}, "virtualbox", virtualboxFlags(), &rc.VirtualBox},
		{[]string{parallels.Name}, "parallels", parallelsFlags(), &rc.Parallels}} {
		t, set := flagTable(cmd.Flags(), sec.flags)
		switch {
		case slices.Contains(sec.executors, o.executor):
			*sec.dst = t
		case len(set) > 0:
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s ignored: executor %q has no [runners.%s]\n", strings.Join(set, ", "), o.executor, sec.table)
		}
	}
	if o.executor == virtualbox.Name && rc.VirtualBox["base_name"] == nil {
		return rc, usageError(fmt.Errorf("--virtualbox-base-name (or $VIRTUALBOX_BASE_NAME) is required with --executor %s: the VirtualBox VM the jobs' VMs are cloned from", o.executor))
	}
	if o.executor == parallels.Name && rc.Parallels["base_name"] == nil {
		return rc, usageError(fmt.Errorf("--parallels-base-name (or $PARALLELS_BASE_NAME) is required with --executor %s: the Parallels VM the jobs' VMs are cloned from", o.executor))
	}
	if t, _ := flagTable(cmd.Flags(), cacheFlags()); len(t) > 0 {
		rc.Cache = nestCacheTable(t)
	}
	return rc, nil
}

// cacheFlags are the --cache-* flags of register, as gitlab-runner spells
// them, for [runners.cache] and, for keys starting "s3.", "gcs." or
// "azure.", its [runners.cache.s3], [runners.cache.gcs] or
// [runners.cache.azure].
func cacheFlags() []dockerFlag {
	return []dockerFlag{
		{"cache-type", "Type", "CACHE_TYPE", kindString, "shared cache: s3, gcs or azure; none keeps caches on the machine"},
		{"cache-path", "Path", "CACHE_PATH", kindString, "prefix of the cache objects in the bucket"},
		{"cache-shared", "Shared", "CACHE_SHARED", kindBool, "share the caches between runners (no runner/<token>/ in the object names)"},
		{"cache-max_uploaded_archive_size", "MaxUploadedArchiveSize", "CACHE_MAXIMUM_UPLOADED_ARCHIVE_SIZE", kindInt, "bytes: a larger cache archive is not uploaded (0: no limit)"},
		{"cache-s3-server-address", "s3.ServerAddress", "CACHE_S3_SERVER_ADDRESS", kindString, "host:port of the S3 server"},
		{"cache-s3-access-key", "s3.AccessKey", "CACHE_S3_ACCESS_KEY", kindString, "S3 access key"},
		{"cache-s3-secret-key", "s3.SecretKey", "CACHE_S3_SECRET_KEY", kindString, "S3 secret key"},
		{"cache-s3-session-token", "s3.SessionToken", "CACHE_S3_SESSION_TOKEN", kindString, "S3 session token of temporary credentials"},
		{"cache-s3-bucket-name", "s3.BucketName", "CACHE_S3_BUCKET_NAME", kindString, "bucket of the caches"},
		{"cache-s3-bucket-location", "s3.BucketLocation", "CACHE_S3_BUCKET_LOCATION", kindString, "region of the bucket"},
		{"cache-s3-insecure", "s3.Insecure", "CACHE_S3_INSECURE", kindBool, "plain HTTP to the S3 server"},
		{"cache-s3-authentication_type", "s3.AuthenticationType", "CACHE_S3_AUTHENTICATION_TYPE", kindString, "access-key or iam"},
		{"cache-s3-path-style", "s3.PathStyle", "CACHE_S3_PATH_STYLE", kindBool, "path-style bucket URLs (host/bucket/object)"},
		{"cache-s3-server-side-encryption", "s3.ServerSideEncryption", "CACHE_S3_SERVER_SIDE_ENCRYPTION", kindString, "S3 or KMS"},
		{"cache-s3-server-side-encryption-key-id", "s3.ServerSideEncryptionKeyID", "CACHE_S3_SERVER_SIDE_ENCRYPTION_KEY_ID", kindString, "KMS key of ServerSideEncryption = KMS"},
		{"cache-s3-accelerate", "s3.Accelerate", "CACHE_S3_ACCELERATE", kindBool, "S3 Transfer Acceleration (AWS only)"},
		{"cache-s3-role-arn", "s3.RoleARN", "CACHE_S3_ROLE_ARN", kindString, "role assumed (STS AssumeRole) to sign the cache's URLs"},
		{"cache-s3-upload-role-arn", "s3.UploadRoleARN", "CACHE_S3_UPLOAD_ROLE_ARN", kindString, "role assumed (STS AssumeRole) to sign the cache's upload URLs"},
		{"cache-gcs-access-id", "gcs.AccessID", "CACHE_GCS_ACCESS_ID", kindString, "e-mail of the GCS service account"},
		{"cache-gcs-private-key", "gcs.PrivateKey", "CACHE_GCS_PRIVATE_KEY", kindString, "PEM private key of the GCS service account"},
		{"cache-gcs-credentials-file", "gcs.CredentialsFile", "GOOGLE_APPLICATION_CREDENTIALS", kindString, "JSON key file of the GCS service account"},
		{"cache-gcs-bucket-name", "gcs.BucketName", "CACHE_GCS_BUCKET_NAME", kindString, "GCS bucket of the caches"},
		{"cache-gcs-universe-domain", "gcs.UniverseDomain", "CACHE_GCS_UNIVERSE_DOMAIN", kindString, "universe domain of GCS (default googleapis.com)"},
		{"cache-azure-account-name", "azure.AccountName", "CACHE_AZURE_ACCOUNT_NAME", kindString, "Azure storage account"},
		{"cache-azure-account-key", "azure.AccountKey", "CACHE_AZURE_ACCOUNT_KEY", kindString, "key of the Azure storage account"},
		{"cache-azure-container-name", "azure.ContainerName", "CACHE_AZURE_CONTAINER_NAME", kindString, "Azure container of the caches"},
		{"cache-azure-storage-domain", "azure.StorageDomain", "CACHE_AZURE_STORAGE_DOMAIN", kindString, "domain of the blob service (default blob.core.windows.net)"},
	}
}

// kubernetesFlags are the --kubernetes-* flags of register, as
// gitlab-runner spells them (dashes and underscores mixed), for the
// [runners.kubernetes] keys drover applies. --kubernetes-pod-labels and
// --kubernetes-pod-annotations have no environment variable in
// gitlab-runner either.
func kubernetesFlags() []dockerFlag {
	fs := []dockerFlag{
		{"kubernetes-host", "host", "KUBERNETES_HOST", kindString, "URL of the cluster's API server (default: the in-cluster configuration, else the kubeconfig)"},
		{"kubernetes-context", "context", "KUBECTL_CONTEXT", kindString, "context of the kubeconfig to use (without --kubernetes-host)"},
		{"kubernetes-bearer_token", "bearer_token", "KUBERNETES_BEARER_TOKEN", kindString, "bearer token for the API server"},
		{"kubernetes-ca-file", "ca_file", "KUBERNETES_CA_FILE", kindString, "CA certificate file of the API server"},
		{"kubernetes-cert-file", "cert_file", "KUBERNETES_CERT_FILE", kindString, "client certificate file for the API server (with --kubernetes-key-file)"},
		{"kubernetes-key-file", "key_file", "KUBERNETES_KEY_FILE", kindString, "its private key file"},
		{"kubernetes-namespace", "namespace", "KUBERNETES_NAMESPACE", kindString, "namespace of the jobs' pods (default \"default\")"},
		{"kubernetes-namespace_overwrite_allowed", "namespace_overwrite_allowed", "KUBERNETES_NAMESPACE_OVERWRITE_ALLOWED", kindString,
			"regular expression of the namespaces a job may pick with its KUBERNETES_NAMESPACE_OVERWRITE variable"},
		{"kubernetes-image", "image", "KUBERNETES_IMAGE", kindString, "image of jobs that name none"},
		{"kubernetes-helper-image", "helper_image", "KUBERNETES_HELPER_IMAGE", kindString,
			"drover's helper image, as the cluster's nodes pull it (required with --executor kubernetes; drover helper-image builds it)"},
		{"kubernetes-pull-policy", "pull_policy", "KUBERNETES_PULL_POLICY", kindList, "always, if-not-present or never (default: the cluster's)"},
		{"kubernetes-service-account", "service_account", "KUBERNETES_SERVICE_ACCOUNT", kindString, "service account of the jobs' pods"},
		{"kubernetes-automount-service-account-token", "automount_service_account_token", "KUBERNETES_AUTOMOUNT_SERVICE_ACCOUNT_TOKEN", kindBool,
			"mount the service account's token into the jobs' pods (default: not mounted)"},
	}
	for _, kind := range []struct{ prefix, what string }{{"", "the build container"}, {"helper-", "the helper container"}, {"service-", "each service container"}} {
		for _, r := range []struct{ name, what, eg string }{
			{"cpu-request", "CPU request", "500m or 2"}, {"cpu-limit", "CPU limit", "500m or 2"},
			{"memory-request", "memory request", "512Mi"}, {"memory-limit", "memory limit", "512Mi"},
		} {
			name := kind.prefix + r.name
			fs = append(fs, dockerFlag{"kubernetes-" + name, strings.ReplaceAll(name, "-", "_"),
				"KUBERNETES_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")), kindString,
				r.what + " of " + kind.what + " (e.g. " + r.eg + ")"})
		}
	}
	return append(fs,
		dockerFlag{"kubernetes-node-selector", "node_selector", "KUBERNETES_NODE_SELECTOR", kindTable,
			"node label the jobs' pods need, KEY=VALUE (or gitlab-runner's KEY:VALUE)"},
		dockerFlag{"kubernetes-node-tolerations", "node_tolerations", "KUBERNETES_NODE_TOLERATIONS", kindTolerations,
			"node taint the jobs' pods tolerate, KEY=VALUE:EFFECT or KEY:EFFECT (no EFFECT: any)"},
		dockerFlag{"kubernetes-pod-labels", "pod_labels", "", kindTable, "label of the jobs' pods, KEY=VALUE (or KEY:VALUE)"},
		dockerFlag{"kubernetes-pod-annotations", "pod_annotations", "", kindTable, "annotation of the jobs' pods, KEY=VALUE (or KEY:VALUE)"},
		dockerFlag{"kubernetes-image-pull-secrets", "image_pull_secrets", "KUBERNETES_IMAGE_PULL_SECRETS", kindList, "secret the cluster pulls the jobs' images with"},
		dockerFlag{"kubernetes-use-service-account-image-pull-secrets", "use_service_account_image_pull_secrets",
			"KUBERNETES_USE_SERVICE_ACCOUNT_IMAGE_PULL_SECRETS", kindBool,
			"no imagePullSecrets in the jobs' pods (neither image_pull_secrets nor the jobs' registry credentials): the service account's apply"},
		dockerFlag{"kubernetes-allowed-images", "allowed_images", "KUBERNETES_ALLOWED_IMAGES", kindList, "image patterns jobs may use"},
		dockerFlag{"kubernetes-allowed-services", "allowed_services", "KUBERNETES_ALLOWED_SERVICES", kindList, "service image patterns jobs may use"},
		dockerFlag{"kubernetes-poll-interval", "poll_interval", "KUBERNETES_POLL_INTERVAL", kindInt, "seconds between checks of a starting pod (default 3)"},
		dockerFlag{"kubernetes-poll-timeout", "poll_timeout", "KUBERNETES_POLL_TIMEOUT", kindInt, "seconds a job's pod may take to run (default 180)"},
		dockerFlag{"kubernetes-cleanup_grace_period_seconds", "cleanup_grace_period_seconds", "KUBERNETES_CLEANUP_GRACE_PERIOD_SECONDS", kindInt,
			"termination grace period in seconds of a finished job's pod (default: the pod's own)"},
	)
}

// tableEntry splits an entry of a table flag into its key and value.
// gitlab-runner's form is KEY:VALUE; KEY=VALUE is read too, since neither
// a label, an annotation nor a node selector name can hold ":" or "=".
// Tolerations are KEY=VALUE:EFFECT, split at ":" alone. An entry without
// its separator is a key with an empty value, as in gitlab-runner.
func tableEntry(kind flagKind, e string) (string, string) {
	seps := ":="
	if kind == kindTolerations {
		seps = ":"
	}
	if i := strings.IndexAny(e, seps); i >= 0 {
		return e[:i], e[i+1:]
	}
	return e, ""
}

// nestCacheTable moves the "s3.", "gcs." and "azure." keys of the
// --cache-* flags' table into its s3, gcs and azure tables.
func nestCacheTable(t map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range t {
		if table, sub, ok := strings.Cut(k, "."); ok {
			nested, _ := out[table].(map[string]any)
			if nested == nil {
				nested = map[string]any{}
				out[table] = nested
			}
			nested[sub] = v
			continue
		}
		out[k] = v
	}
	return out
}

// prepareFile checks an existing config file (a broken one is not added
// to) or makes the directory of a new one, and returns the concurrent
// value that will hold.
func (o *registerOptions) prepareFile(cmd *cobra.Command) (int, error) {
	concurrent := config.DefaultConcurrent
	if _, err := os.Stat(o.cfgPath); err == nil {
		cfg, err := loadManagedConfig(cmd.ErrOrStderr(), o.cfgPath)
		if err != nil {
			return 0, configError(o.cfgPath, err)
		}
		concurrent = cfg.Concurrent
	} else {
		if _, err := os.Stat("config.toml"); err == nil && !cmd.Flags().Changed("config") {
			fmt.Fprintf(cmd.ErrOrStderr(), "note: registering in %s (the default), not in ./config.toml: give --config config.toml for that one\n", o.cfgPath)
		}
		if err := os.MkdirAll(filepath.Dir(o.cfgPath), 0o700); err != nil {
			return 0, configError(o.cfgPath, err)
		}
	}
	if o.concurrent > 0 {
		concurrent = o.concurrent
	}
	return concurrent, nil
}

// concurrentToSet is the concurrent value to write: --concurrent, or 1 in
// a new file (GitLab Runner writes it too); 0 leaves the file's alone.
func (o *registerOptions) concurrentToSet(edit *config.Edit) int {
	if o.concurrent > 0 {
		return o.concurrent
	}
	if len(edit.Bytes()) == 0 {
		return config.DefaultConcurrent
	}
	return 0
}

// saveRunner adds rc to the file being edited, with concurrent when it is
// not 0, and writes it.
func saveRunner(edit *config.Edit, rc *config.RunnerConfig, concurrent int) error {
	if concurrent > 0 {
		if err := edit.SetConcurrent(concurrent); err != nil {
			return err
		}
	}
	if err := edit.AddRunner(rc); err != nil {
		return err
	}
	return edit.Write()
}

// checkRunner makes the checks drover run would make of rc before the
// coordinator is asked, so that a wrong flag registers nothing. The
// problems are named by their flags.
func checkRunner(path string, rc config.RunnerConfig) error {
	rc.Token = "token"
	probe, err := config.NewEdit(path, nil)
	if err == nil {
		err = probe.AddRunner(&rc)
	}
	if err != nil {
		return err
	}
	if _, _, err := config.Parse(path, probe.Bytes()); err != nil {
		return usageError(flagProblem(err))
	}
	if docker.Uses(rc.Executor) {
		if _, _, err := docker.ParseConfig(path, &rc); err != nil {
			return usageError(flagProblem(err))
		}
	}
	if rc.Executor == kubernetes.Name {
		if _, _, err := kubernetes.ParseConfig(path, &rc); err != nil {
			return usageError(flagProblem(err))
		}
	}
	if _, err := cache.ParseRunner(path, &rc); err != nil {
		return usageError(flagProblem(err))
	}
	return nil
}

// runnerKeyFlag names the register flag that sets a config.toml key of a
// runner, or "".
func runnerKeyFlag(key string) string {
	switch key {
	case "name", "url", "executor", "shell", "limit":
		return key
	case "environment":
		return "env"
	case "builds_dir", "cache_dir", "output_limit", "request_concurrency", "unhealthy_requests_limit", "unhealthy_interval":
		return strings.ReplaceAll(key, "_", "-")
	}
	return ""
}

// flagProblem words a config problem of the entry being registered by the
// flag that set the key.
func flagProblem(err error) error {
	var ce *config.Error
	if !errors.As(err, &ce) {
		return err
	}
	key := ce.Key
	if i := strings.Index(key, "]."); strings.HasPrefix(key, "runners[") && i >= 0 {
		key = key[i+2:]
	}
	top, _, _ := strings.Cut(key, "[")
	if name := runnerKeyFlag(top); name != "" {
		return fmt.Errorf("--%s: %s", name, ce.Msg)
	}
	if top == "cache" {
		// The shared cache's checks span its keys ("s3 needs BucketName").
		return fmt.Errorf("the --cache-* flags: %s", ce.Msg)
	}
	for prefix, flags := range map[string][]dockerFlag{"docker.": dockerFlags(), "ssh.": sshFlags(), "custom.": customFlags(),
		"kubernetes.": kubernetesFlags(), "qemu.": qemuFlags(), "cache.": cacheFlags()} {
		if dk, ok := strings.CutPrefix(top, prefix); ok {
			for _, d := range flags {
				// A table flag's problem may be about one of its keys
				// (kubernetes.node_selector."bad key").
				if d.key == dk || strings.HasPrefix(dk, d.key+".") {
					return fmt.Errorf("--%s: %s", d.flag, ce.Msg)
				}
			}
		}
	}
	return fmt.Errorf("%s: %s", key, ce.Msg)
}

// flagKind is the kind of value of a [runners.docker] key.
type flagKind int

const (
	kindString flagKind = iota
	kindBool
	kindInt
	kindList
	// kindTable is a table of strings, given as repeated KEY=VALUE.
	kindTable
	// kindTolerations is a table of strings given as repeated
	// KEY=VALUE:EFFECT (node_tolerations).
	kindTolerations
)

// dockerFlag is a gitlab-runner register flag for a [runners.docker] key
// drover applies.
type dockerFlag struct {
	flag, key, env string
	kind           flagKind
	usage          string
}

// dockerFlags are the --docker-* flags of register, as gitlab-runner spells
// them. DOCKER_HOST, DOCKER_CERT_PATH and DOCKER_TLS_VERIFY are not read:
// they configure the docker CLI of whoever registers, not the runner.
func dockerFlags() []dockerFlag {
	return []dockerFlag{
		{"docker-host", "host", "", kindString, "Docker engine of the jobs: unix://, tcp:// or ssh:// (default: $DOCKER_HOST of drover run, else the local socket)"},
		{"docker-cert-path", "tls_cert_path", "", kindString, "directory of ca.pem, cert.pem and key.pem for a tcp:// --docker-host"},
		{"docker-tlsverify", "tls_verify", "", kindBool, "verify the TLS certificate of a tcp:// --docker-host"},
		{"docker-image", "image", "DOCKER_IMAGE", kindString, "image of jobs that name none (required with the docker executors)"},
		{"docker-helper-image", "helper_image", "DOCKER_HELPER_IMAGE", kindString, "helper image for cloning and artifacts"},
		{"docker-pull-policy", "pull_policy", "DOCKER_PULL_POLICY", kindList, "always, if-not-present or never (default always)"},
		{"docker-allowed-pull-policies", "allowed_pull_policies", "DOCKER_ALLOWED_PULL_POLICIES", kindList, "pull policies jobs may ask for"},
		{"docker-allowed-images", "allowed_images", "DOCKER_ALLOWED_IMAGES", kindList, "image patterns jobs may use"},
		{"docker-allowed-services", "allowed_services", "DOCKER_ALLOWED_SERVICES", kindList, "service image patterns jobs may use"},
		{"docker-privileged", "privileged", "DOCKER_PRIVILEGED", kindBool, "run job containers privileged"},
		{"docker-services_privileged", "services_privileged", "DOCKER_SERVICES_PRIVILEGED", kindBool, "run service containers privileged (default: as --docker-privileged)"},
		{"docker-user", "user", "DOCKER_USER", kindString, "user of the job containers"},
		{"docker-volumes", "volumes", "DOCKER_VOLUMES", kindList, "volume or bind mount of every job container"},
		{"docker-cache-dir", "cache_dir", "DOCKER_CACHE_DIR", kindString, "host directory of the caches"},
		{"docker-disable-cache", "disable_cache", "DOCKER_DISABLE_CACHE", kindBool, "no cache volumes"},
		{"docker-network-mode", "network_mode", "DOCKER_NETWORK_MODE", kindString, "network of the job containers"},
		{"docker-dns", "dns", "DOCKER_DNS", kindList, "DNS server of the containers"},
		{"docker-dns-search", "dns_search", "DOCKER_DNS_SEARCH", kindList, "DNS search domain of the containers"},
		{"docker-extra-hosts", "extra_hosts", "DOCKER_EXTRA_HOSTS", kindList, "host:IP entry of /etc/hosts"},
		{"docker-memory", "memory", "DOCKER_MEMORY", kindString, "memory limit (e.g. 512m)"},
		{"docker-memory-swap", "memory_swap", "DOCKER_MEMORY_SWAP", kindString, "memory plus swap limit"},
		{"docker-cpus", "cpus", "DOCKER_CPUS", kindString, "CPUs (e.g. 1.5)"},
		{"docker-cpuset-cpus", "cpuset_cpus", "DOCKER_CPUSET_CPUS", kindString, "CPUs the containers may use (e.g. 0-3)"},
		{"docker-shm-size", "shm_size", "DOCKER_SHM_SIZE", kindInt, "size of /dev/shm in bytes"},
		{"docker-cap-add", "cap_add", "DOCKER_CAP_ADD", kindList, "Linux capability to add"},
		{"docker-cap-drop", "cap_drop", "DOCKER_CAP_DROP", kindList, "Linux capability to drop"},
		{"docker-security-opt", "security_opt", "DOCKER_SECURITY_OPT", kindList, "security option"},
		{"docker-devices", "devices", "DOCKER_DEVICES", kindList, "host device for the containers"},
		{"docker-oom-kill-disable", "oom_kill_disable", "DOCKER_OOM_KILL_DISABLE", kindBool, "do not kill processes of a container out of memory"},
		{"docker-wait-for-services-timeout", "wait_for_services_timeout", "DOCKER_WAIT_FOR_SERVICES_TIMEOUT", kindInt, "seconds to wait for services (default 30)"},
	}
}

// sshFlags are the --ssh-* flags of register, as gitlab-runner spells
// them, for [runners.ssh].
func sshFlags() []dockerFlag {
	return []dockerFlag{
		{"ssh-host", "host", "SSH_HOST", kindString, "host the ssh executor runs jobs on (required with --executor ssh)"},
		{"ssh-port", "port", "SSH_PORT", kindString, "its SSH port (default 22)"},
		{"ssh-user", "user", "SSH_USER", kindString, "user to log in as (required with --executor ssh)"},
		{"ssh-password", "password", "SSH_PASSWORD", kindString, "password of that user"},
		{"ssh-identity-file", "identity_file", "SSH_IDENTITY_FILE", kindString, "private key file to log in with"},
		{"ssh-disable-strict-host-key-checking", "disable_strict_host_key_checking", "SSH_DISABLE_STRICT_HOST_KEY_CHECKING", kindBool,
			"accept a host that is not in known_hosts, trusting its first key (default: the host must be in ~/.ssh/known_hosts)"},
		{"ssh-known-hosts-file", "known_hosts_file", "SSH_KNOWN_HOSTS_FILE", kindString, "known_hosts file to check the host's key in (default ~/.ssh/known_hosts)"},
	}
}

// customFlags are the --custom-* flags of register, as gitlab-runner
// spells them, for [runners.custom].
func customFlags() []dockerFlag {
	var fs []dockerFlag
	for _, d := range []struct{ name, what string }{
		{"config", "prints the job's configuration as JSON"},
		{"prepare", "prepares the job's environment"},
		{"run", "runs each stage script (required with --executor custom)"},
		{"cleanup", "cleans up after the job, always"},
	} {
		up := strings.ToUpper(d.name)
		fs = append(fs,
			dockerFlag{"custom-" + d.name + "-exec", d.name + "_exec", "CUSTOM_" + up + "_EXEC", kindString, "driver that " + d.what},
			dockerFlag{"custom-" + d.name + "-args", d.name + "_args", "CUSTOM_" + up + "_ARGS", kindList, "argument of the " + d.name + " driver"})
		if d.name != "run" {
			fs = append(fs, dockerFlag{"custom-" + d.name + "-exec-timeout", d.name + "_exec_timeout", "CUSTOM_" + up + "_EXEC_TIMEOUT", kindInt,
				"seconds the " + d.name + " driver may take (default 3600)"})
		}
	}
	return append(fs,
		dockerFlag{"custom-graceful-kill-timeout", "graceful_kill_timeout", "CUSTOM_GRACEFUL_KILL_TIMEOUT", kindInt, "seconds between SIGTERM and SIGKILL to a driver that is stopped (default 600)"},
		dockerFlag{"custom-force-kill-timeout", "force_kill_timeout", "CUSTOM_FORCE_KILL_TIMEOUT", kindInt, "seconds to wait for a driver after SIGKILL (default 10)"})
}

// dockerTable returns the [runners.docker] table the --docker-* flags
// give, and the flags given.
func dockerTable(f *pflag.FlagSet) (map[string]any, []string) {
	return flagTable(f, dockerFlags())
}

// flagTable returns the table the given flags set, and the flags given.
func flagTable(f *pflag.FlagSet, flags []dockerFlag) (map[string]any, []string) {
	table := map[string]any{}
	var set []string
	for _, d := range flags {
		if !f.Changed(d.flag) {
			continue
		}
		set = append(set, "--"+d.flag)
		// The getters cannot fail: the flags are defined with these types.
		switch d.kind {
		case kindString:
			table[d.key], _ = f.GetString(d.flag)
		case kindBool:
			table[d.key], _ = f.GetBool(d.flag)
		case kindInt:
			table[d.key], _ = f.GetInt64(d.flag)
		case kindList:
			l, _ := f.GetStringArray(d.flag)
			vs := make([]any, len(l))
			for i, s := range l {
				vs[i] = s
			}
			table[d.key] = vs
		case kindTable, kindTolerations:
			l, _ := f.GetStringArray(d.flag)
			m := make(map[string]any, len(l))
			for _, e := range l {
				k, v := tableEntry(d.kind, e)
				m[k] = v
			}
			table[d.key] = m
		}
	}
	return table, set
}

func newVerifyCmd() *cobra.Command {
	var cfgPath string
	var del bool
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check every runner token of config.toml with its coordinator",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFile(cmd, cfgPath)
			if err != nil {
				return err
			}
			systemID, err := systemIDFor(cfgPath)
			if err != nil {
				return err
			}
			var invalid []int
			bad := 0
			for i, r := range cfg.Runners {
				client, err := runnerClient(r.URL, runnerTLSFiles(&r))
				if err != nil {
					return err
				}
				got, resp, err := client.Verify(cmd.Context(), api.VerifyRequest{Token: r.Token, SystemID: systemID, Info: runnerInfo(r.Executor, r.Shell)})
				switch {
				case err != nil:
					fmt.Fprintf(cmd.OutOrStdout(), "%-20s %s: error: %v\n", r.Name, r.URL, err)
					bad++
				case got == nil:
					fmt.Fprintf(cmd.OutOrStdout(), "%-20s %s: invalid (status %d)\n", r.Name, r.URL, resp.StatusCode)
					bad++
					invalid = append(invalid, i)
				default:
					fmt.Fprintf(cmd.OutOrStdout(), "%-20s %s: valid (id %d)\n", r.Name, r.URL, got.ID)
				}
			}
			if del && len(invalid) > 0 {
				if err := removeRunners(cfgPath, invalid); err != nil {
					return err
				}
			}
			if bad > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d runner(s) failed verification", bad)}
			}
			return nil
		},
	}
	configFlag(cmd.Flags(), &cfgPath, "config file")
	cmd.Flags().BoolVar(&del, "delete", false, "remove runners whose token is invalid from config.toml")
	return cmd
}

// removeRunners removes the runners at indexes from the config file,
// leaving the rest of it as it is.
func removeRunners(path string, indexes []int) error {
	edit, err := config.EditFile(path)
	if err == nil {
		err = edit.RemoveRunners(indexes...)
	}
	if err == nil {
		err = edit.Write()
	}
	return configError(path, err)
}

func newUnregisterCmd() *cobra.Command {
	var cfgPath, name, url, token string
	var all bool
	cmd := &cobra.Command{
		Use:   "unregister",
		Short: "Remove a runner (or this manager of it) from its coordinator and from config.toml",
		Long: `Unregisters runners from their coordinator and removes their [[runners]]
entries from config.toml; the rest of the file stays as it is. Choose them as
with gitlab-runner unregister: --name, --url with --token (also a runner that
config.toml does not hold), --token alone, or --all-runners.

A runner with a glrt- token is unregistered as a runner manager (this
machine's system id); one with an older token as a whole. A runner the
coordinator no longer knows (403) is removed from config.toml too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" && token == "" && !all {
				return usageError(errors.New("give --name NAME, --url URL --token TOKEN or --all-runners"))
			}
			if url != "" && token == "" {
				return usageError(errors.New("--url needs --token"))
			}
			cfg, err := loadConfigFile(cmd, cfgPath)
			if err != nil {
				return err
			}
			var chosen []int
			for i, r := range cfg.Runners {
				if all || (name == "" || r.Name == name) && (token == "" || r.Token == token) && (url == "" || sameURL(r.URL, url)) {
					chosen = append(chosen, i)
				}
			}
			// Refuse a file that cannot be edited before the coordinator
			// forgets anything.
			edit, err := config.EditFile(cfgPath)
			if err == nil {
				err = edit.RemoveRunners(chosen...)
			}
			if err != nil {
				return configError(cfgPath, err)
			}
			systemID, err := systemIDFor(cfgPath)
			if err != nil {
				return err
			}
			targets := make([]config.RunnerConfig, 0, len(chosen))
			for _, i := range chosen {
				targets = append(targets, cfg.Runners[i])
			}
			switch {
			case len(chosen) == 0 && url != "":
				// As gitlab-runner: the credentials given are enough.
				targets = append(targets, config.RunnerConfig{Name: api.ShortToken(token), URL: url, Token: token})
			case len(chosen) == 0 && name != "":
				return usageError(fmt.Errorf("config %s: no runner named %q", cfgPath, name))
			case len(chosen) == 0:
				return usageError(fmt.Errorf("config %s: no runner with that token", cfgPath))
			}
			var done []int
			var errs []error
			for k, r := range targets {
				if err := unregisterRunner(cmd, r, systemID); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", r.Name, err))
				} else if k < len(chosen) {
					done = append(done, chosen[k])
				}
			}
			switch {
			case len(done) == 0:
			case len(done) == len(chosen):
				errs = append(errs, configError(cfgPath, edit.Write()))
			default:
				errs = append(errs, removeRunners(cfgPath, done))
			}
			return errors.Join(errs...)
		},
	}
	f := cmd.Flags()
	configFlag(f, &cfgPath, "config file")
	f.StringVarP(&name, "name", "n", "", "name of the runner")
	f.StringVarP(&url, "url", "u", "", "URL of the runner's coordinator (with --token)")
	envFlag(f, "url", "CI_SERVER_URL")
	f.StringVarP(&token, "token", "t", "", "the runner's authentication token")
	envFlag(f, "token", "CI_SERVER_TOKEN")
	f.BoolVar(&all, "all-runners", false, "unregister every runner of config.toml")
	return cmd
}

// unregisterRunner unregisters r from its coordinator: the runner manager
// systemID of a glrt- token, the whole runner of another one. A runner the
// coordinator does not know (403) is gone already.
func unregisterRunner(cmd *cobra.Command, r config.RunnerConfig, systemID string) error {
	client, err := runnerClient(r.URL, runnerTLSFiles(&r))
	if err != nil {
		return err
	}
	var resp *api.Response
	if strings.Contains(r.Token, api.RunnerTokenPrefix) {
		resp, err = client.UnregisterManager(cmd.Context(), r.Token, systemID)
	} else {
		resp, err = client.Unregister(cmd.Context(), r.Token)
	}
	switch {
	case err != nil:
		return err
	case resp.StatusCode == http.StatusNoContent:
		fmt.Fprintf(cmd.OutOrStdout(), "%s: unregistered (status %d)\n", r.Name, resp.StatusCode)
	case resp.StatusCode == http.StatusForbidden:
		fmt.Fprintf(cmd.OutOrStdout(), "%s: the coordinator does not know its token (status 403): it is gone already\n", r.Name)
	default:
		return fmt.Errorf("the coordinator at %s answered %d; %s stays in config.toml", r.URL, resp.StatusCode, r.Name)
	}
	return nil
}

// sameURL compares coordinator URLs without their final slash.
func sameURL(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}

// runnerClient is the API client of the coordinator at url, verified with
// (and presenting) the TLS files of a runner.
func runnerClient(url string, files api.TLSFiles) (*api.Client, error) {
	tlsCfg, err := api.ClientTLS(files)
	if err != nil {
		return nil, err
	}
	return api.NewClient(url, api.ClientOptions{Version: version, TLS: tlsCfg})
}

// runnerTLSFiles is r's tls-ca-file, tls-cert-file and tls-key-file.
func runnerTLSFiles(r *config.RunnerConfig) api.TLSFiles {
	return api.TLSFiles{CAFile: r.TLSCAFile, CertFile: r.TLSCertFile, KeyFile: r.TLSKeyFile}
}
