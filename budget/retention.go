package budget

import "time"

// retentionClock is the clock an expired reservation's retention is
// measured on. Wall time can be set days ahead (a VM restore, a manual
// fix) and put right again; measured on it, one recovery while it is ahead
// would delete reservations whose commits are still to come, and those
// commits would find nothing (under ExpireRelease, the usage lost). This
// clock is the wall time the tracker started at plus the time elapsed
// since on Config.Elapsed, a clock that cannot jump.
type retentionClock struct {
	wall    time.Time     // Config.Now at New
	elapsed time.Duration // Config.Elapsed at New
}

func (t *Tracker) startRetention() {
	t.retention = retentionClock{wall: t.now(), elapsed: t.cfg.Elapsed()}
}

// expiredCut is the instant before which the recovery at now may delete
// expired reservations: a retention before now on both clocks.
func (t *Tracker) expiredCut(now time.Time) time.Time {
	r := t.retention.wall.Add(t.cfg.Elapsed() - t.retention.elapsed)
	return minTime(r, now).Add(-t.cfg.SettledRetention)
}
