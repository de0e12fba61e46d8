-- 005_groups.sql: quotas per group. A user may belong to one group (its name, or '' for none);
-- a group has max_slots, the slots all its users' jobs may hold at once. Applied once, in one
-- transaction, when PRAGMA user_version < 5.

ALTER TABLE users ADD COLUMN group_name TEXT NOT NULL DEFAULT '';

-- A group's quota; 0 = no limit. A group named by a user need not have a row (no limit).
CREATE TABLE groups (
    name TEXT PRIMARY KEY,
    max_slots INTEGER NOT NULL DEFAULT 0
);
