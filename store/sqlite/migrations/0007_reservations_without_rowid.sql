-- Reservations without a rowid (one B-tree, not a table and its id index),
-- each keeping a copy of its holds; holds keyed by their window; the
-- live-reservation index partial.
CREATE TABLE reservations_v7 (
	id          TEXT    PRIMARY KEY,
	key         TEXT    NOT NULL,
	provider    TEXT    NOT NULL DEFAULT '',
	model       TEXT    NOT NULL DEFAULT '',
	est_tokens  INTEGER NOT NULL DEFAULT 0,
	est_input   INTEGER NOT NULL DEFAULT 0,
	est_output  INTEGER NOT NULL DEFAULT 0,
	at          INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	state       TEXT    NOT NULL CHECK (state IN ('live', 'committed', 'released', 'expired')),
	settled_at  INTEGER NOT NULL DEFAULT 0,
	on_expiry   TEXT    NOT NULL DEFAULT 'release' CHECK (on_expiry IN ('release', 'charge')),
	holds       TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;
INSERT INTO reservations_v7 (id, key, provider, model, est_tokens, est_input, est_output, at, expires_at, state, settled_at, on_expiry, holds)
	SELECT r.id, r.key, r.provider, r.model, r.est_tokens, r.est_input, r.est_output, r.at, r.expires_at, r.state, r.settled_at, r.on_expiry,
		CASE WHEN r.state = 'live' THEN COALESCE((SELECT group_concat(h.limit_id || char(9) || h.subject || char(9) || h.window_start || char(9) ||
			h.amount || char(9) || CASE WHEN h.expires_at = 9223372036854775807 THEN 'N' ELSE 'R' END, char(10))
			FROM holds h WHERE h.reservation_id = r.id), '') ELSE '' END
	FROM reservations r;
CREATE TABLE holds_v7 (
	limit_id       TEXT    NOT NULL REFERENCES limits (id) ON DELETE CASCADE,
	subject        TEXT    NOT NULL DEFAULT '',
	window_start   INTEGER NOT NULL,
	reservation_id TEXT    NOT NULL,
	amount         INTEGER NOT NULL,
	expires_at     INTEGER NOT NULL,
	PRIMARY KEY (limit_id, subject, window_start, reservation_id)
) WITHOUT ROWID;
INSERT INTO holds_v7 (limit_id, subject, window_start, reservation_id, amount, expires_at)
	SELECT limit_id, subject, window_start, reservation_id, amount, expires_at FROM holds;
DROP TABLE holds;
DROP TABLE reservations;
ALTER TABLE reservations_v7 RENAME TO reservations;
ALTER TABLE holds_v7 RENAME TO holds;
CREATE INDEX reservations_live ON reservations (expires_at) WHERE state = 'live';
CREATE INDEX reservations_settled ON reservations (settled_at) WHERE state <> 'live';
