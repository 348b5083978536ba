-- Events keep the normalised model (budget.NormalizeModel), which limits
-- match and the covering index carries. Filling it for existing rows,
-- recreating the index and recounting model-scope limits is Go (postgres.go).
ALTER TABLE usage ADD COLUMN IF NOT EXISTS model_norm TEXT NOT NULL DEFAULT '';
DROP INDEX IF EXISTS usage_window;
