-- Events keep the normalised model, which limits match and the covering
-- index carries (the index is rebuilt, and the column filled, in Go).
ALTER TABLE usage ADD COLUMN model_norm TEXT NOT NULL DEFAULT '';
DROP INDEX IF EXISTS usage_window;
