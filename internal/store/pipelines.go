package store

import "fmt"

// CheckPipelineJobs checks, for the backends' CreatePipeline, that jobs
// can be created as pipeline p's: every job is of p's project (a job
// with no project is given p's by the backend).
func CheckPipelineJobs(p Pipeline, jobs []Job) error {
	for i, j := range jobs {
		if j.Project != "" && j.Project != p.Project {
			return fmt.Errorf("job %d (%s) is of project %q, its pipeline of %q", i, j.Name, j.Project, p.Project)
		}
	}
	return nil
}
