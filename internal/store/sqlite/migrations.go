package sqlite

// migrations are applied in order; never edit or renumber a released one,
// only append.
var migrations = []string{
	// 1: initial schema.
	`
CREATE TABLE runners (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	token_hash      TEXT NOT NULL UNIQUE,
	description     TEXT NOT NULL DEFAULT '',
	tags            TEXT NOT NULL DEFAULT '[]',
	run_untagged    INTEGER NOT NULL DEFAULT 1,
	locked          INTEGER NOT NULL DEFAULT 0,
	paused          INTEGER NOT NULL DEFAULT 0,
	maximum_timeout INTEGER NOT NULL DEFAULT 0,
	created_at      INTEGER NOT NULL DEFAULT 0,
	contacted_at    INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE runner_managers (
	runner_id    INTEGER NOT NULL REFERENCES runners(id) ON DELETE CASCADE,
	system_id    TEXT NOT NULL,
	contacted_at INTEGER NOT NULL DEFAULT 0,
	version      TEXT NOT NULL DEFAULT '',
	executor     TEXT NOT NULL DEFAULT '',
	platform     TEXT NOT NULL DEFAULT '',
	arch         TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (runner_id, system_id)
);
CREATE TABLE projects (
	id   INTEGER PRIMARY KEY AUTOINCREMENT,
	path TEXT NOT NULL UNIQUE
);
CREATE TABLE jobs (
	id               INTEGER PRIMARY KEY AUTOINCREMENT,
	name             TEXT NOT NULL,
	project_id       INTEGER NOT NULL REFERENCES projects(id),
	stage            TEXT NOT NULL DEFAULT '',
	status           TEXT NOT NULL,
	failure_reason   TEXT NOT NULL DEFAULT '',
	exit_code        INTEGER,
	tags             TEXT NOT NULL DEFAULT '[]',
	timeout          INTEGER NOT NULL DEFAULT 0,
	run_timeout      INTEGER NOT NULL DEFAULT 0,
	image            TEXT NOT NULL DEFAULT '',
	spec             TEXT NOT NULL DEFAULT '{}',
	runner_id        INTEGER NOT NULL DEFAULT 0,
	runner_system_id TEXT NOT NULL DEFAULT '',
	token_hash       TEXT NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL DEFAULT 0,
	queued_at        INTEGER NOT NULL DEFAULT 0,
	started_at       INTEGER NOT NULL DEFAULT 0,
	finished_at      INTEGER NOT NULL DEFAULT 0,
	updated_at       INTEGER NOT NULL DEFAULT 0,
	contacted_at     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_status_id ON jobs(status, id);
CREATE INDEX jobs_project_id ON jobs(project_id, id);
`,
	// 2: two-phase job start (waiting_for_runner_ack), per-assignment job
	// tokens, provisioning bookkeeping.
	`
ALTER TABLE jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN assigned_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN ack_deadline INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN accepted_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN provisioning_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN provisioning_returns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN queued_ns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN provisioning_ns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN avoid_system_ids TEXT NOT NULL DEFAULT '[]';
CREATE TABLE retired_job_tokens (
	token_hash TEXT PRIMARY KEY,
	job_id     INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
	retired_at INTEGER NOT NULL DEFAULT 0
);
`,
	// 3: indexes for the fair-share view of the queue (QueueHeads): the
	// oldest queued job per project, and jobs in progress per project.
	`
CREATE INDEX jobs_status_project_id ON jobs(status, project_id, id);
CREATE INDEX jobs_project_status ON jobs(project_id, status);
`,
	// 4: small named values (the id of the key sealing job variables, which
	// are sealed in the spec from this version on: a drover from before,
	// which would hand such jobs out without their variables, refuses the
	// database).
	`
CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
`,
	// 5: artifacts (the files are in the coordinator's data directory;
	// these rows say what and where), and the lookup of a running job by
	// its token (a dependent job downloading artifacts).
	`
CREATE TABLE artifacts (
	job_id        INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
	artifact_type TEXT NOT NULL,
	format        TEXT NOT NULL,
	filename      TEXT NOT NULL,
	file          TEXT NOT NULL,
	size          INTEGER NOT NULL,
	sha256        TEXT NOT NULL,
	created_at    INTEGER NOT NULL DEFAULT 0,
	expire_at     INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (job_id, artifact_type)
);
CREATE INDEX artifacts_expire_at ON artifacts(expire_at) WHERE expire_at > 0;
CREATE INDEX jobs_token_hash ON jobs(token_hash) WHERE token_hash != '';
CREATE INDEX jobs_project_name ON jobs(project_id, name, id);
`,
	// 6: the URL of a runner manager's fleet page, which it reports with
	// its contact (info.drover_fleet_url) for the runners page to link.
	`
ALTER TABLE runner_managers ADD COLUMN fleet_url TEXT NOT NULL DEFAULT '';
`,
	// 7: pipelines. A project counts its pipelines in pipeline_iid (the
	// last IID given); a job belongs to pipeline pipeline_id, 0 for a job
	// submitted on its own.
	`
ALTER TABLE projects ADD COLUMN pipeline_iid INTEGER NOT NULL DEFAULT 0;
CREATE TABLE pipelines (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	project_id  INTEGER NOT NULL REFERENCES projects(id),
	iid         INTEGER NOT NULL,
	source      TEXT NOT NULL DEFAULT '',
	ref         TEXT NOT NULL DEFAULT '',
	tag         INTEGER NOT NULL DEFAULT 0,
	sha         TEXT NOT NULL DEFAULT '',
	before_sha  TEXT NOT NULL DEFAULT '',
	status      TEXT NOT NULL,
	spec        TEXT NOT NULL DEFAULT '{}',
	created_at  INTEGER NOT NULL DEFAULT 0,
	started_at  INTEGER NOT NULL DEFAULT 0,
	finished_at INTEGER NOT NULL DEFAULT 0,
	updated_at  INTEGER NOT NULL DEFAULT 0,
	version     INTEGER NOT NULL DEFAULT 1,
	UNIQUE (project_id, iid)
);
CREATE INDEX pipelines_project_ref ON pipelines(project_id, ref, id);
CREATE INDEX pipelines_status_id ON pipelines(status, id);
ALTER TABLE jobs ADD COLUMN pipeline_id INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_pipeline_id ON jobs(pipeline_id, id);
`,
	// 8: the test coverage a pipeline's job's log gave (coverage:), ''
	// for none.
	`
ALTER TABLE jobs ADD COLUMN coverage TEXT NOT NULL DEFAULT '';
`,
	// 9: projects' settings (a project row created by its first
	// pipeline or job has none: registered = 0), webhook deliveries (one
	// row per delivery, its project's, for de-duplication; expired after
	// days) and pipeline schedules. Secrets (variables, the webhook
	// secret, the forge token) are sealed by the coordinator.
	`
ALTER TABLE projects ADD COLUMN registered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN repo_url TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN default_branch TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN config_path TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN variables TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN webhook_secret TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN forge_kind TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN forge_url TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN forge_repo TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN forge_token TEXT NOT NULL DEFAULT '';
ALTER TABLE projects ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN updated_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
CREATE TABLE webhook_deliveries (
	project_id  INTEGER NOT NULL REFERENCES projects(id),
	delivery_id TEXT NOT NULL,
	pipeline_id INTEGER NOT NULL DEFAULT 0,
	created_at  INTEGER NOT NULL,
	PRIMARY KEY (project_id, delivery_id)
);
CREATE INDEX webhook_deliveries_created_at ON webhook_deliveries (created_at);
CREATE TABLE pipeline_schedules (
	id               INTEGER PRIMARY KEY AUTOINCREMENT,
	project_id       INTEGER NOT NULL REFERENCES projects(id),
	description      TEXT NOT NULL DEFAULT '',
	ref              TEXT NOT NULL,
	cron             TEXT NOT NULL,
	cron_timezone    TEXT NOT NULL DEFAULT 'UTC',
	variables        TEXT NOT NULL DEFAULT '',
	active           INTEGER NOT NULL DEFAULT 1,
	next_run_at      INTEGER NOT NULL DEFAULT 0,
	last_pipeline_id INTEGER NOT NULL DEFAULT 0,
	owner            TEXT NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL DEFAULT 0,
	updated_at       INTEGER NOT NULL DEFAULT 0,
	version          INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX pipeline_schedules_project ON pipeline_schedules (project_id, id);
-- DueSchedules: the active schedules in order of their next run.
CREATE INDEX pipeline_schedules_due ON pipeline_schedules (next_run_at) WHERE active = 1;
`,
	// 10: project access tokens: a role (viewer, maintainer) on one
	// project's pipelines and jobs. Only the SHA-256 of a token is kept.
	`
CREATE TABLE project_tokens (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	project_id   INTEGER NOT NULL REFERENCES projects(id),
	name         TEXT NOT NULL DEFAULT '',
	role         TEXT NOT NULL,
	token_hash   TEXT NOT NULL UNIQUE,
	created_at   INTEGER NOT NULL DEFAULT 0,
	last_used_at INTEGER NOT NULL DEFAULT 0,
	expires_at   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX project_tokens_project ON project_tokens (project_id, id);
`,
}
