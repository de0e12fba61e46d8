-- 002_users.sql: users and roles, job owners, idempotent submit, per-node credentials.
-- Applied once, in one transaction, when PRAGMA user_version < 2.

-- Who may call the API. The token is never stored: token_hash is the hex SHA-256 of it
-- (tokens are 256 random bits, so a fast hash is enough; see docs/security.md).
CREATE TABLE users (
    name        TEXT PRIMARY KEY,
    role        TEXT NOT NULL,             -- admin, user or viewer
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL
);

-- Jobs submitted before users existed were submitted with the one user token, which
-- becomes the admin's.
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT 'admin';
-- The client's Idempotency-Key of the submit, or NULL: the same key of the same owner
-- returns the same job.
ALTER TABLE jobs ADD COLUMN request_id TEXT;
CREATE UNIQUE INDEX jobs_by_request ON jobs (owner, request_id) WHERE request_id IS NOT NULL;

-- The hex SHA-256 of the node's own credential, given out at registration; '' for a node
-- registered before credentials existed (it must register again).
ALTER TABLE nodes ADD COLUMN credential_hash TEXT NOT NULL DEFAULT '';
