-- 006_epoch.sql: the leadership epoch of cluster mode (docs/ha.md, "Why one coordinator cannot
-- act twice"). One row; every replica that wins the Raft leadership raises it before it
-- serves, and its coordinator checks it inside every write transaction, so a coordinator loaded
-- before another replica's tenure writes nothing. Unused (and empty) on a single SQLite file.
-- Applied once, in one transaction, when PRAGMA user_version < 6.

CREATE TABLE IF NOT EXISTS ddp_epoch (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL
);
