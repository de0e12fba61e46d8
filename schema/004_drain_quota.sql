-- 004_drain_quota.sql: node cordon and drain (admins take a node out of scheduling), node
-- labels, and per-user quotas. Applied once, in one transaction, when PRAGMA user_version < 4.

-- '' (schedulable), 'cordon' (takes no new work) or 'drain' (no new work, and elastic jobs
-- move off); with the admin's reason.
ALTER TABLE nodes ADD COLUMN admin_state TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN admin_reason TEXT NOT NULL DEFAULT '';

-- The labels the node's agent reports (its --label flags and what it detects), a JSON object of
-- strings; jobs with a node_selector run only where every pair matches.
ALTER TABLE nodes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';

-- The most slots the user's jobs may hold at once; 0 = no limit.
ALTER TABLE users ADD COLUMN max_slots INTEGER NOT NULL DEFAULT 0;
