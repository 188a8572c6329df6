package executor

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/drover-ci/drover/internal/api"
)

// TestJobVariablesServerTLS: the runner's TLS files reach the job as GitLab
// Runner's file variables, only those set, the key only with its
// certificate, and before the job's variables (which may override them).
func TestJobVariablesServerTLS(t *testing.T) {
	const ca, cert, key = "CA PEM", "CERT PEM", "KEY PEM"
	caVar := api.Variable{Key: api.VarTLSCAFile, Value: ca, Public: true, Internal: true, File: true, Raw: true}
	certVar := api.Variable{Key: api.VarTLSCertFile, Value: cert, Public: true, Internal: true, File: true, Raw: true}
	keyVar := api.Variable{Key: api.VarTLSKeyFile, Value: key, Internal: true, File: true, Raw: true}
	for _, tc := range []struct {
		name string
		tls  ServerTLS
		want []api.Variable
	}{
		{"none", ServerTLS{}, nil},
		{"CA", ServerTLS{CA: ca}, []api.Variable{caVar}},
		{"client certificate", ServerTLS{Cert: cert, Key: key}, []api.Variable{certVar, keyVar}},
		{"all", ServerTLS{CA: ca, Cert: cert, Key: key}, []api.Variable{caVar, certVar, keyVar}},
		{"certificate without its key", ServerTLS{CA: ca, Cert: cert}, []api.Variable{caVar}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &api.JobResponse{Variables: api.Variables{{Key: "JOB", Value: "v"}}}
			vars := JobVariables(job, Settings{ServerTLS: tc.tls}, Paths{ProjectDir: "/b/p"}, "")
			var got []api.Variable
			jobAt, lastTLS := -1, -1
			for i, v := range vars {
				switch v.Key {
				case api.VarTLSCAFile, api.VarTLSCertFile, api.VarTLSKeyFile:
					got = append(got, v)
					lastTLS = i
				case "JOB":
					jobAt = i
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("JobVariables(ServerTLS %+v): TLS variables (-want +got):\n%s", tc.tls, d)
			}
			if lastTLS > jobAt {
				t.Errorf("JobVariables: a TLS variable at %d, after the job's at %d", lastTLS, jobAt)
			}
		})
	}
}
