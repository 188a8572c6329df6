package docker

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/drover-ci/drover/internal/executor"
)

// Labels on everything the executor creates. A restarted manager finds
// its own resources by LabelSystemID, and a job's by LabelJob.
const (
	LabelManaged  = "io.drover.managed"   // "1" on every resource
	LabelJob      = "io.drover.job"       // the job id (not on cache volumes)
	LabelRunner   = "io.drover.runner"    // the runner's short token
	LabelSystemID = "io.drover.system-id" // the manager's system_id
	LabelRole     = "io.drover.role"      // build, helper, service, network, volume
	LabelStage    = "io.drover.stage"     // the stage a build container was made for
	LabelService  = "io.drover.service"   // a service container's image
)

// Roles of the resources.
const (
	roleBuild   = "build"
	roleHelper  = "helper"
	roleService = "service"
	roleNetwork = "network"
	roleJobVol  = "job-volume" // removed with the job
	roleCache   = "cache-volume"
)

// labels returns the labels of a job resource with the given role; job 0
// means a resource that outlives jobs (a cache volume).
func labels(s executor.Settings, jobID int64, role string, extra map[string]string) map[string]string {
	l := map[string]string{
		LabelManaged:  "1",
		LabelRunner:   s.ShortToken,
		LabelSystemID: s.SystemID,
		LabelRole:     role,
	}
	if jobID != 0 {
		l[LabelJob] = strconv.FormatInt(jobID, 10)
	}
	for k, v := range extra {
		if !strings.HasPrefix(k, DroverLabelPrefix) {
			l[k] = v
		}
	}
	return l
}

// jobPrefix starts the names of a job's containers, network and volumes:
// runner-<short token>-job-<id>-<random>, unique across managers sharing
// an engine and across retries of the same job.
func jobPrefix(s executor.Settings, jobID int64) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("drover-%s-job-%d-%s", nameSafe(s.ShortToken), jobID, hex.EncodeToString(b[:]))
}

// nameSafe keeps the characters Docker allows in names.
func nameSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "x"
	}
	return string(b)
}
