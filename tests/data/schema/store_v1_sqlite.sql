-- The SQLite event store's schema before versioned migrations (callgate/store/sqlite.py at cfc2e0f).
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, subject TEXT NOT NULL,
  timezone TEXT NOT NULL, locale TEXT NOT NULL, budgets TEXT NOT NULL,
  tool_allowlist TEXT NOT NULL, opened_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_views (
  session_id TEXT NOT NULL, model_call_id TEXT NOT NULL, tools TEXT NOT NULL,
  spec_digests TEXT NOT NULL, tool_set_digest TEXT NOT NULL, created_at TEXT NOT NULL,
  PRIMARY KEY (session_id, model_call_id));
CREATE TABLE IF NOT EXISTS invocations (
  invocation_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, model_call_id TEXT NOT NULL,
  proposal_id TEXT NOT NULL, tool_name TEXT NOT NULL, tool_version TEXT NOT NULL,
  tenant TEXT NOT NULL, subject TEXT NOT NULL, state TEXT NOT NULL, raw_arguments BLOB NOT NULL,
  digest TEXT NOT NULL, normalized_arguments BLOB NOT NULL, decision TEXT, rejection TEXT,
  idempotency_key TEXT NOT NULL, deadline TEXT NOT NULL, confirmation_expires_at TEXT NOT NULL,
  policy_revision TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, external_resource_id TEXT NOT NULL DEFAULT '',
  commit_time TEXT NOT NULL DEFAULT '', cancel_requested_at TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS invocations_pending ON invocations (state, tenant)
  WHERE confirmation_expires_at != '';
CREATE TABLE IF NOT EXISTS events (
  invocation_id TEXT NOT NULL, seq INTEGER NOT NULL, event_id TEXT NOT NULL UNIQUE,
  at TEXT NOT NULL, kind TEXT NOT NULL, from_state TEXT, to_state TEXT NOT NULL,
  trace_id TEXT NOT NULL, span_id TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (invocation_id, seq));
CREATE TABLE IF NOT EXISTS attempts (
  attempt_id TEXT PRIMARY KEY, invocation_id TEXT NOT NULL, number INTEGER NOT NULL,
  executor_id TEXT NOT NULL, jti TEXT NOT NULL, started_at TEXT NOT NULL,
  credential_expires_at TEXT NOT NULL, outcome TEXT NOT NULL, failure_class TEXT NOT NULL,
  finished_at TEXT NOT NULL, external_resource_id TEXT NOT NULL, http_status INTEGER NOT NULL,
  cost_micros INTEGER NOT NULL, retry_reason TEXT NOT NULL, retry_after TEXT NOT NULL,
  UNIQUE (invocation_id, number));
CREATE TABLE IF NOT EXISTS results (
  invocation_id TEXT PRIMARY KEY, status TEXT NOT NULL, message BLOB NOT NULL,
  truncated INTEGER NOT NULL, remaining BLOB NOT NULL, page_token TEXT NOT NULL,
  redactions INTEGER NOT NULL, created_at TEXT NOT NULL, nonce TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS usage (
  session_id TEXT PRIMARY KEY, model_calls INTEGER NOT NULL, tool_calls INTEGER NOT NULL,
  result_bytes INTEGER NOT NULL, cost_micros INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS redemptions (
  attempt_id TEXT NOT NULL, secret_name TEXT NOT NULL, at TEXT NOT NULL,
  PRIMARY KEY (attempt_id, secret_name));
CREATE TABLE IF NOT EXISTS snapshots (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, revision TEXT NOT NULL, at TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS events_append_only_u BEFORE UPDATE ON events
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_d BEFORE DELETE ON events
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
