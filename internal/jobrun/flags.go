package jobrun

import (
	"fmt"
	"strings"

	"github.com/drover-ci/drover/internal/api"
	"github.com/drover-ci/drover/internal/featureflags"
)

// resolveFlags sets the job's feature flags (package featureflags): the
// runner's [runners.feature_flags] (what Settings.FeatureFlags holds when
// Run starts), else the job's variables, else the runner's environment, as
// GitLab Runner resolves them.
// From here on Settings.FeatureFlags holds every flag that was set, with
// the value in effect, for the executor. It returns the values that are
// no booleans, in GitLab Runner's words.
func (b *build) resolveFlags() []string {
	var vars []featureflags.Variable
	for _, v := range b.opts.Job.Variables {
		vars = append(vars, featureflags.Variable{Key: v.Key, Value: v.Value})
	}
	set, problems := featureflags.Resolve(b.opts.Settings.FeatureFlags, b.opts.Settings.Environment, vars)
	b.flags = set
	b.opts.Settings.FeatureFlags = set.Map()
	return problems
}

// printFlags writes, under the log's header, the flags set to another
// value than GitLab Runner's default (its "feature flags:" line), then a
// warning for each flag drover does not honour at its value, and for
// each value that is no boolean.
func (b *build) printFlags(problems []string) {
	var differ []string
	for _, v := range b.flags.Explicit() {
		if v.On != v.Flag.GitLab {
			differ = append(differ, fmt.Sprintf("%s:%t", v.Flag.Name, v.On))
		}
	}
	if len(differ) > 0 {
		b.trace.printf("  feature flags: %s\n", strings.Join(differ, ", "))
	}
	for _, v := range b.flags.Explicit() {
		if why := v.Flag.NotHonoured(v.On); why != "" {
			b.trace.line(ansiYellow, fmt.Sprintf("WARNING: %s is %t (%s), which drover does not honour: %s", v.Flag.Name, v.On, v.From, why))
		}
	}
	for _, p := range problems {
		b.trace.line(ansiYellow, "WARNING: "+p)
	}
}

// logImages logs the names of the job's image and service images in the
// manager's log (FF_LOG_IMAGES_CONFIGURED_FOR_JOB), as GitLab Runner does.
func (b *build) logImages() {
	if !b.flags.On(featureflags.LogImagesConfiguredJob) {
		return
	}
	job := b.opts.Job
	if job.Image.Name != "" {
		b.log.Info("image configured for job", imageAttrs(job.Image.Name, job.Image.ExecutorOpts)...)
	}
	for _, s := range job.Services {
		b.log.Info("service image configured for job", imageAttrs(s.Name, s.ExecutorOpts)...)
	}
}

// imageAttrs are the log attributes of an image: its name, and its
// platform when the job asks for one.
func imageAttrs(name string, opts *api.ImageExecutorOpts) []any {
	attrs := []any{"image_name", name}
	if opts != nil && opts.Docker != nil && opts.Docker.Platform != "" {
		attrs = append(attrs, "image_platform", opts.Docker.Platform)
	}
	return attrs
}
