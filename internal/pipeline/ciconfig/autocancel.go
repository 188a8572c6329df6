package ciconfig

// workflow:auto_cancel, GitLab's: what a new commit on the same ref does
// to the older pipelines still running there (on_new_commit), and what a
// failed job does to the rest of its own pipeline (on_job_failure).

// Values of AutoCancel.OnNewCommit.
const (
	// AutoCancelConservative (the default) cancels an older pipeline
	// only while none of its jobs that are not interruptible has started;
	// then every job of it that has not finished is canceled.
	AutoCancelConservative = "conservative"
	// AutoCancelInterruptible cancels only the older pipeline's
	// interruptible jobs that have not finished.
	AutoCancelInterruptible = "interruptible"
	// AutoCancelNone cancels nothing.
	AutoCancelNone = "none"
)

// AutoCancel is a pipeline's workflow:auto_cancel.
type AutoCancel struct {
	// OnNewCommit is conservative, interruptible or none.
	OnNewCommit string
	// OnJobFailure is all (a job that fails, and may not, cancels the
	// pipeline's other jobs that have not finished) or none.
	OnJobFailure string
}

// merge sets the keys that o sets.
func (a *AutoCancel) merge(o *AutoCancel) {
	if o == nil {
		return
	}
	if o.OnNewCommit != "" {
		a.OnNewCommit = o.OnNewCommit
	}
	if o.OnJobFailure != "" {
		a.OnJobFailure = o.OnJobFailure
	}
}

// parseAutoCancel reads an auto_cancel: hash; keys not set stay "".
func parseAutoCancel(v *Value, path string, d *diag) *AutoCancel {
	if v.Kind != Map {
		d.errorf(v.Pos, path, "must be a hash (on_new_commit:, on_job_failure:)")
		return nil
	}
	ac := &AutoCancel{}
	for _, f := range v.Map {
		switch f.Key {
		case "on_new_commit":
			s := f.Val.Str
			if !f.Val.isScalar() || (s != AutoCancelConservative && s != AutoCancelInterruptible && s != AutoCancelNone) {
				d.errorf(f.Val.Pos, path+":on_new_commit", "must be one of conservative, interruptible, none")
				continue
			}
			ac.OnNewCommit = s
		case "on_job_failure":
			s := f.Val.Str
			if !f.Val.isScalar() || (s != "all" && s != "none") {
				d.errorf(f.Val.Pos, path+":on_job_failure", "must be one of all, none")
				continue
			}
			ac.OnJobFailure = s
		default:
			d.errorf(f.KeyPos, path, "unknown key %q (on_new_commit, on_job_failure)", f.Key)
		}
	}
	return ac
}
