package sqlrow

// Price is a prices row.
type Price struct {
	Provider   string `db:"provider"`
	Model      string `db:"model"`
	Tier       string `db:"tier"`
	AboveInput int64  `db:"above_input"`
	From       int64  `db:"from_at"`
	Input      int64  `db:"input"`
	Output     int64  `db:"output"`
	CacheRead  int64  `db:"cache_read"`
	CacheWrite int64  `db:"cache_write"`
	Reasoning  int64  `db:"reasoning"`
	// CacheWrite1h is the 1-hour cache-write price (schema 14).
	CacheWrite1h int64 `db:"cache_write_1h"`
}
