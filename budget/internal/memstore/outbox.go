package memstore

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tokenbudget/tokenbudget/budget"
)

// outboxRow is one queued event for one usage destination.
type outboxRow struct {
	seq, at, queued      int64
	dest, key, requestID string
	attempts             int
	next, claimUntil     int64
	claimOwner, lastErr  string
}

func (t *tx) UsageHooks(context.Context) ([]string, error) {
	out := make([]string, 0, len(t.st.hooks))
	for d := range t.st.hooks {
		out = append(out, d)
	}
	slices.Sort(out)
	return out, nil
}

func (t *tx) AddUsageHook(_ context.Context, dest string, at time.Time) (bool, error) {
	if err := t.write(); err != nil {
		return false, err
	}
	if _, ok := t.st.hooks[dest]; ok {
		return false, nil
	}
	own(t.st, "hooks", &t.st.hooks)
	t.st.hooks[dest] = ns(at)
	t.st.limitsVersion++
	return true, nil
}

func (t *tx) DeleteUsageHook(_ context.Context, dest string) (int64, error) {
	if err := t.write(); err != nil {
		return 0, err
	}
	_, registered := t.st.hooks[dest]
	own(t.st, "outbox", &t.st.outbox)
	var n int64
	for seq, r := range t.st.outbox {
		if r.dest == dest {
			delete(t.st.outbox, seq)
			n++
		}
	}
	if !registered && n == 0 {
		return 0, notFound("usage hook", dest)
	}
	own(t.st, "hooks", &t.st.hooks)
	delete(t.st.hooks, dest)
	t.st.limitsVersion++
	return n, nil
}

func (t *tx) EnqueueUsage(_ context.Context, dests []string, evs []budget.OutboxEvent, queued time.Time) error {
	if err := t.write(); err != nil {
		return err
	}
	own(t.st, "outbox", &t.st.outbox)
	for _, d := range dests {
		for _, e := range evs {
			t.st.outboxSeq++
			t.st.outbox[t.st.outboxSeq] = outboxRow{seq: t.st.outboxSeq, at: ns(e.At), queued: ns(queued), dest: d, key: e.Key,
				requestID: e.RequestID, next: ns(queued)}
		}
	}
	return nil
}

// destRows are dest's rows in queued order.
func (t *tx) destRows(dest string) []outboxRow {
	var rs []outboxRow
	for _, r := range t.st.outbox {
		if r.dest == dest {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b outboxRow) int { return cmp.Compare(a.seq, b.seq) })
	return rs
}

// claimable are dest's rows a claim by owner at now may take, in order:
// those of keys with no row so far that waits or that another owner's
// live claim holds.
func (t *tx) claimable(dest, owner string, now time.Time) []outboxRow {
	blocked := map[string]bool{}
	var out []outboxRow
	for _, r := range t.destRows(dest) {
		if r.next > ns(now) || (r.claimUntil > ns(now) && r.claimOwner != owner) {
			blocked[r.key] = true
		}
		if !blocked[r.key] {
			out = append(out, r)
		}
	}
	return out
}

func (t *tx) UsageDue(_ context.Context, dest, owner string, now time.Time) (bool, bool, error) {
	return len(t.claimable(dest, owner, now)) > 0, len(t.destRows(dest)) > 0, nil
}

func (t *tx) ClaimUsage(_ context.Context, dest, owner string, now, until time.Time, max int) ([]budget.OutboxItem, error) {
	if err := t.write(); err != nil {
		return nil, err
	}
	rs := t.claimable(dest, owner, now)
	rs = rs[:min(len(rs), max)]
	if len(rs) > 0 {
		own(t.st, "outbox", &t.st.outbox)
	}
	out := make([]budget.OutboxItem, len(rs))
	for i, r := range rs {
		r.claimOwner, r.claimUntil = owner, ns(until)
		t.st.outbox[r.seq] = r
		it := budget.OutboxItem{Seq: r.seq, Dest: dest, QueuedAt: fromNs(r.queued), Attempts: r.attempts}
		if e, ok := t.st.events[eventKey{r.key, r.requestID}]; ok {
			it.Event, it.Found = e.u, true
			it.Event.CostKnown, it.Event.NoPrice, it.Event.Placed = true, e.noPrice, true
		} else {
			it.Event = budget.Usage{Key: r.key, RequestID: r.requestID, At: fromNs(r.at)}
		}
		out[i] = it
	}
	return out, nil
}

func (t *tx) SettleUsage(_ context.Context, dest, owner string, seqs []int64, next time.Time, lastErr string) error {
	if err := t.write(); err != nil {
		return err
	}
	lost := 0
	for _, s := range seqs {
		if r, ok := t.st.outbox[s]; !ok || r.dest != dest || r.claimOwner != owner {
			lost++
		}
	}
	if lost > 0 {
		return budget.UsageClaimLost(dest, lost)
	}
	own(t.st, "outbox", &t.st.outbox)
	for _, s := range seqs {
		if next.IsZero() {
			delete(t.st.outbox, s)
			continue
		}
		r := t.st.outbox[s]
		r.attempts++
		r.next, r.lastErr, r.claimOwner, r.claimUntil = ns(next), lastErr, "", 0
		t.st.outbox[s] = r
	}
	return nil
}

func (t *tx) OutboxBacklog(context.Context) ([]budget.OutboxBacklog, error) {
	by := map[string]*budget.OutboxBacklog{}
	for d := range t.st.hooks {
		by[d] = &budget.OutboxBacklog{Kind: budget.OutboxUsage, Dest: d}
	}
	var lastFail = map[string]int64{}
	for _, r := range t.st.outbox {
		b := by[r.dest]
		if b == nil {
			b = &budget.OutboxBacklog{Kind: budget.OutboxUsage, Dest: r.dest}
			by[r.dest] = b
		}
		b.Pending++
		if q := fromNs(r.queued); b.Oldest.IsZero() || q.Before(b.Oldest) {
			b.Oldest = q
		}
		b.Attempts = max(b.Attempts, r.attempts)
		if r.attempts > 0 {
			if n := fromNs(r.next); b.NextAttempt.IsZero() || n.Before(b.NextAttempt) {
				b.NextAttempt = n
			}
			// The latest failure's error: the row retried last.
			if r.next > lastFail[r.dest] {
				lastFail[r.dest], b.LastError = r.next, r.lastErr
			}
		}
	}
	out := make([]budget.OutboxBacklog, 0, len(by)+1)
	for _, b := range by {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b budget.OutboxBacklog) int { return strings.Compare(a.Dest, b.Dest) })
	al := budget.OutboxBacklog{Kind: budget.OutboxAlert}
	for _, r := range t.st.alerts {
		if !r.a.DeliveredAt.IsZero() {
			continue
		}
		al.Pending++
		if al.Oldest.IsZero() || r.a.At.Before(al.Oldest) {
			al.Oldest = r.a.At
		}
		al.Attempts = max(al.Attempts, r.a.Attempts)
		if r.a.Attempts > 0 && (al.NextAttempt.IsZero() || r.a.NextAttempt.Before(al.NextAttempt)) {
			al.NextAttempt = r.a.NextAttempt
		}
	}
	if al.Pending > 0 {
		out = append(out, al)
	}
	return out, nil
}

func (t *tx) OutboxBefore(_ context.Context, before time.Time) (int64, error) {
	var n int64
	for _, r := range t.st.outbox {
		if r.at < ns(before) {
			n++
		}
	}
	return n, nil
}
