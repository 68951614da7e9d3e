-- The separate SQLite idempotency file's schema before one commit per answer (callgate/store/idempotency/sqlite.py at cfc2e0f).
CREATE TABLE IF NOT EXISTS idempotency_keys (
  tenant TEXT NOT NULL, subject TEXT NOT NULL, tool_name TEXT NOT NULL, tool_version TEXT NOT NULL,
  idem_key TEXT NOT NULL,
  digest TEXT NOT NULL, invocation_id TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('claimed', 'completed', 'released')),
  outcome TEXT NOT NULL, result BLOB, external_resource_id TEXT NOT NULL,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, expires_at TEXT NOT NULL,
  retention_us INTEGER NOT NULL CHECK (retention_us > 0),
  PRIMARY KEY (tenant, subject, tool_name, tool_version, idem_key));
CREATE INDEX IF NOT EXISTS idempotency_keys_expires ON idempotency_keys (expires_at);
