-- 003_retention.sql: deleting finished jobs (DELETE /v1/jobs/{id}, ddpd --job-ttl).
-- Applied once, in one transaction, when PRAGMA user_version < 3.

-- The highest id of a job ever deleted (one row). Ids are never reused: the next job's id is
-- one above the larger of this and MAX(jobs.id), so deleting the newest job and restarting
-- ddpd does not give its id out again. A deletion raises it in the transaction that deletes
-- the job; nothing else writes it.
CREATE TABLE job_ids (
    one          INTEGER PRIMARY KEY CHECK (one = 1),
    deleted_max  INTEGER NOT NULL
);
INSERT INTO job_ids (one, deleted_max) VALUES (1, 0);
