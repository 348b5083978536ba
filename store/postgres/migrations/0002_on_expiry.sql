-- Reservations carry an expiry policy: 'release' (holds lapse at expires_at)
-- or 'charge' (recovery charges the estimate; the proxy's reservations).
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS on_expiry TEXT NOT NULL DEFAULT 'release'
    CHECK (on_expiry IN ('release', 'charge'));
