-- 001_init.sql: ddpd's first schema. Applied once, in one transaction, when
-- PRAGMA user_version < 1. Times are wall-clock milliseconds since the Unix epoch.

-- One row per job; written whole on every change of the job (one transaction per change).
CREATE TABLE jobs (
    id            INTEGER PRIMARY KEY,      -- n of "j-<n>", never reused
    name          TEXT NOT NULL,
    spec          TEXT NOT NULL,            -- canonical spec JSON, defaults filled in
    state         TEXT NOT NULL,
    generation    INTEGER NOT NULL DEFAULT 0,
    restarts      INTEGER NOT NULL DEFAULT 0,
    world_size    INTEGER NOT NULL DEFAULT 0,
    master_addr   TEXT NOT NULL DEFAULT '',
    master_port   INTEGER NOT NULL DEFAULT 0,
    nodes         TEXT NOT NULL DEFAULT '[]', -- [{"name","group_rank"}] of the generation
    last_metrics  TEXT,                     -- JSON object or NULL
    reason        TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    started_at    INTEGER,
    finished_at   INTEGER,
    job_token     TEXT NOT NULL,
    log_seq       INTEGER NOT NULL DEFAULT 0, -- last log line seq given out for this job
    metric_seq    INTEGER NOT NULL DEFAULT 0,
    event_seq     INTEGER NOT NULL DEFAULT 0,
    end_kind      INTEGER NOT NULL DEFAULT 0, -- why the generation ended (coord.c enum)
    end_reason    TEXT NOT NULL DEFAULT ''    -- root cause kept for FAILED
);

-- Every state transition and why. Never dropped.
CREATE TABLE events (
    job_id     INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    time       INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    state      TEXT NOT NULL,
    reason     TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

-- rank 0's metric lines; the newest 10000 per job are kept.
CREATE TABLE metrics (
    job_id     INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    time       INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    metric     TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

-- Worker output lines; the newest 100000 per job are kept (seq is per job, ddpd's own).
CREATE TABLE logs (
    job_id     INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    rank       INTEGER NOT NULL,
    text       TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
CREATE INDEX logs_by_rank ON logs (job_id, rank, seq);

-- Deduplication marks: the last agent seq stored per (job, generation, rank); rank -1 is
-- the metrics stream of the generation. Only the job's current and previous generation keep
-- marks: the transaction that starts a generation deletes the older ones.
CREATE TABLE marks (
    job_id     INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    rank       INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    PRIMARY KEY (job_id, generation, rank)
) WITHOUT ROWID;

-- Registered nodes. last_heartbeat is written on state changes only.
CREATE TABLE nodes (
    name           TEXT PRIMARY KEY,
    address        TEXT NOT NULL,
    slots          INTEGER NOT NULL,
    port_lo        INTEGER NOT NULL,
    port_hi        INTEGER NOT NULL,
    incarnation    TEXT NOT NULL,
    state          TEXT NOT NULL,
    registered_at  INTEGER NOT NULL,
    last_heartbeat INTEGER
) WITHOUT ROWID;
