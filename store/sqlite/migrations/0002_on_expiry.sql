-- Reservations carry an expiry policy.
ALTER TABLE reservations ADD COLUMN on_expiry TEXT NOT NULL DEFAULT 'release' CHECK (on_expiry IN ('release', 'charge'))
