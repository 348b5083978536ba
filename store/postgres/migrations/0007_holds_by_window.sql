-- Holds are keyed by their window, as reservations read them, with a copy
-- on the reservation row (one per line: limit_id, subject, window_start,
-- amount, and R (expires with the reservation) or N (never)), so settling
-- and renewing find the hold rows without an index of their own.
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS holds TEXT NOT NULL DEFAULT '';
UPDATE reservations r SET holds = COALESCE((
    SELECT string_agg(h.limit_id || chr(9) || h.subject || chr(9) || h.window_start || chr(9) || h.amount || chr(9) ||
        CASE WHEN h.expires_at = 9223372036854775807 THEN 'N' ELSE 'R' END, chr(10) ORDER BY h.limit_id)
    FROM holds h WHERE h.reservation_id = r.id), '') WHERE r.state = 'live';
CREATE TABLE holds_v7 (
    limit_id       TEXT   NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
    subject        TEXT   NOT NULL DEFAULT '',
    window_start   BIGINT NOT NULL,
    reservation_id TEXT   NOT NULL,
    amount         BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    PRIMARY KEY (limit_id, subject, window_start, reservation_id)
);
INSERT INTO holds_v7 (limit_id, subject, window_start, reservation_id, amount, expires_at)
    SELECT limit_id, subject, window_start, reservation_id, amount, expires_at FROM holds;
DROP TABLE holds;
ALTER TABLE holds_v7 RENAME TO holds;
ALTER TABLE holds RENAME CONSTRAINT holds_v7_pkey TO holds_pkey;
