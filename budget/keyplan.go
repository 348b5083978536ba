package budget

import (
	"context"
	"time"
)

// A batch's events come a few to many per key, and each event is planned
// twice: load names the windows it needs, decide counts it in them. Both
// steps used to resolve the key's placement and limits (cache lookups
// keyed by three strings) and each limit's window (calendar arithmetic and
// a map keyed by two strings) again for every event. keyPlan does that
// once per key per try, and remembers for each limit the window its last
// event fell in, so the next event of the key in the same window costs a
// comparison of two integers.

// keyPlan is what one try of a batch resolved for one key: its placement
// (team and organisation, for events that carry none), the limits that
// may apply, and per limit (by index in ls) the window the key's last
// event counted in, as load saw it and as decide did.
type keyPlan struct {
	team, org string
	// placement: team and org are the key's placement (an unplaced event
	// placed them), not only some placed event's levels.
	placement bool
	ls        []Limit
	needSpan  []span       // load: the window last added to needs
	decided   []decidedWin // decide: the window last counted in
}

// span is a window's [start, end) in Unix nanos; end 0 is none.
type span struct{ start, end int64 }

func (s span) has(at int64) bool { return s.end != 0 && at >= s.start && at < s.end }

// decidedWin is the memory's window a limit's last event counted in.
type decidedWin struct {
	span
	w *memWindow
}

// keyPlan is who's plan, placing who (its team and organisation from its
// key's placement) when it carries neither and placed is false. A who
// whose levels differ from its key's plan (an event placed before its key
// moved) gets nil, placed: its caller resolves its limits the long way.
func (b *batch) keyPlan(ctx context.Context, tx Tx, who *Who, placed bool) (*keyPlan, error) {
	p := b.keys[who.Key]
	unplaced := !placed && who.Team == "" && who.Org == ""
	if unplaced && p != nil && p.placement {
		who.Team, who.Org = p.team, p.org
		return p, nil
	}
	if unplaced {
		if err := b.t.place(ctx, tx, who); err != nil {
			return nil, err
		}
	}
	if p == nil {
		p, err := b.newKeyPlan(ctx, tx, who)
		if p != nil {
			p.placement = unplaced
		}
		return p, err
	}
	if who.Team != p.team || who.Org != p.org {
		return nil, nil
	}
	p.placement = p.placement || unplaced
	return p, nil
}

func (b *batch) newKeyPlan(ctx context.Context, tx Tx, who *Who) (*keyPlan, error) {
	ls, err := b.t.limitsFor(ctx, tx, who)
	if err != nil {
		return nil, err
	}
	p := &keyPlan{team: who.Team, org: who.Org, ls: ls}
	if n := len(ls); n > 0 {
		p.needSpan = make([]span, n)
		p.decided = make([]decidedWin, n)
	}
	if b.keys == nil {
		b.keys = make(map[string]*keyPlan)
	}
	b.keys[who.Key] = p
	return p, nil
}

// limits is who's limits (placed by keyPlan), through its key's plan p
// when it has one.
func (b *batch) limits(ctx context.Context, tx Tx, p *keyPlan, who *Who) ([]Limit, error) {
	if p != nil {
		return p.ls, nil
	}
	return b.t.limitsFor(ctx, tx, who)
}

// needWindow adds limit j's window at at to n (l is ls[j] for who) unless
// the key's last event already added that one: the same limit's window
// of the same span, and for a limit with a counter per user or tag value,
// of the same one (a key's events from one user count n.windows once, so
// what it sizes is not sized by event).
func (b *batch) needWindow(n *needs, p *keyPlan, j int, l *Limit, who *Who, at time.Time) {
	each, v := l.Each(), ""
	if each {
		v = l.eachValue(who)
	}
	if !b.plain && p != nil && p.needSpan[j].has(nsOf(at)) && (!each || b.needEach[p][j] == v || b.t.planFault.Load()) {
		return
	}
	l = l.forWho(who)
	n.limits[l.ID] = true
	n.windows++
	r := b.refAt(l, at)
	k := windowKey(l, r.Start)
	// A limit with alert thresholds must know its total to see one
	// crossed. Without, a window the memory holds, or whose row it knows
	// exists, needs no read: it is not added to n, whose entries cost
	// ~200 bytes each for every window a batch counts in (issue 29).
	reserve := len(l.Alerts) > 0
	switch cur, ok := n.refs[k]; {
	case ok && (cur.reserve || !reserve): // read as it must be already
	case !ok && !reserve && b.recallWindow(k, r): // nothing to read
	default:
		n.refs[k] = want{ref: r, reserve: reserve}
	}
	if p != nil {
		p.needSpan[j] = span{nsOf(r.Start), nsOf(r.End)}
		if each {
			b.noteEach(p, j, v)
		}
	}
}

// noteEach notes that limit j of plan p (Each) last added the window of
// v's counter. The values are the batch's, not the plans': a field more
// would take a plan from 112 bytes to the next size class, 144, for every
// key of every batch, most of which have no such limit.
func (b *batch) noteEach(p *keyPlan, j int, v string) {
	vs := b.needEach[p]
	if vs == nil {
		if b.needEach == nil {
			b.needEach = make(map[*keyPlan][]string)
		}
		vs = make([]string, len(p.ls))
		b.needEach[p] = vs
	}
	vs[j] = v
}

// countedWindow is the memory's window of limit j (ls[j] for who, which
// forWho may narrow to who's own counter) at at, and the limit it counts
// for; nil if it was not loaded.
func (b *batch) countedWindow(p *keyPlan, j int, l *Limit, who *Who, at time.Time) (*Limit, *memWindow) {
	shared := p != nil && !l.Each()
	if shared {
		if d := &p.decided[j]; d.has(nsOf(at)) {
			return l, d.w
		}
	}
	l = l.forWho(who)
	w := b.window(l, at)
	if shared && w != nil {
		p.decided[j] = decidedWin{span{w.start, w.end}, w}
	}
	return l, w
}
