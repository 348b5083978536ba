-- The usage outbox: usage_hooks (where recorded events are delivered)
-- and usage_outbox (what is queued for them), with the triggers that
-- move limits_version when a hook is added or removed: all made by the
-- current schema, run after this step.
SELECT 1;
