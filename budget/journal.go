package budget

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// The lease journal: one name per lease, its row's id, in
// Config.LeaseJournal (a link to its generation: journal_gen.go). Every
// admission carved from the lease, every settlement and every release is
// one record, appended with one write() before Reserve, Commit or Release
// returns: it then survives the process in the page cache, and in Durable
// mode the disk (fdatasync before the call returns, one sync serving every
// caller waiting). Recovery of the lease's row, by any process on the
// machine, reads it and charges exactly (see journalEvents). A record is
//
//	u32 length | u32 CRC-32C of the payload | payload
//
// little-endian; a torn last record (a crash inside a write) fails its
// checksum and is ignored: its caller had not been answered. A write that
// fails or is short seals the generation (journal_gen.go), so a record
// not written whole is always a generation's last.

const (
	recAdmit   = 'A' // lease id, reservation id, at, expires, policy, estimate
	recCommit  = 'C' // reservation id, the actual usage
	recRelease = 'R' // reservation id
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// journalSuffix ends a lease's journal name.
const journalSuffix = ".journal"

// journalPath is lease id's journal in dir.
func journalPath(dir, id string) string { return filepath.Join(dir, id+journalSuffix) }

// jbuf builds one record; they are pooled, as the write makes them escape.
type jbuf struct {
	b [256]byte
	n int
}

var jbufs = sync.Pool{New: func() any { return new(jbuf) }}

func (j *jbuf) start(kind byte) { j.n = 8; j.b[8] = kind; j.n++ }

func (j *jbuf) str(s string) bool {
	if len(s) > 255 || j.n+1+len(s) > len(j.b) {
		return false
	}
	j.b[j.n] = byte(len(s))
	j.n += 1 + copy(j.b[j.n+1:], s)
	return true
}

func (j *jbuf) i64(v int64) {
	binary.LittleEndian.PutUint64(j.b[j.n:], uint64(v))
	j.n += 8
}

func (j *jbuf) u8(v byte) { j.b[j.n] = v; j.n++ }

// write frames the record and appends it with one write(), on disk before
// it returns in Durable mode unless the caller syncs later (nosync).
func (j *jbuf) write(g *journalGen, nosync bool) error {
	binary.LittleEndian.PutUint32(j.b[0:], uint32(j.n-8))
	binary.LittleEndian.PutUint32(j.b[4:], crc32.Checksum(j.b[8:j.n], crcTable))
	err := g.append(j.b[:j.n], nosync)
	jbufs.Put(j)
	return err
}

// journalAdmit records lr's admission; nosync: the caller syncs f before
// answering (a batch's carves, one sync for all).
func journalAdmit(f *journalGen, lr *leasedRes, nosync bool) error {
	if f == nil {
		return nil
	}
	j := jbufs.Get().(*jbuf)
	r := &lr.r
	j.start(recAdmit)
	if !j.str(lr.lease.id) || !j.str(r.ID) {
		return errors.New("budget: lease journal: id too long")
	}
	j.i64(r.At.UnixNano())
	j.i64(r.ExpiresAt.UnixNano())
	policy := byte(0)
	if r.OnExpiry == ExpireCharge {
		policy = 1
	}
	j.u8(policy)
	j.i64(r.Estimate.Tokens)
	j.i64(r.Estimate.Input)
	j.i64(r.Estimate.Output)
	return j.write(f, nosync)
}

// journalCommit records the actual usage of reservation id.
func journalCommit(f *journalGen, id string, u *Usage) error {
	if f == nil {
		return nil
	}
	j := jbufs.Get().(*jbuf)
	j.start(recCommit)
	if !j.str(id) || len(u.ServiceTier) > 64 {
		return errors.New("budget: lease journal: id or service tier too long")
	}
	for _, v := range [...]int64{u.Input, u.Output, u.Reasoning, u.CacheRead, u.CacheWrite, u.Cost} {
		j.i64(v)
	}
	flags := byte(0)
	if u.CostKnown {
		flags = 1
	}
	j.u8(flags)
	j.str(u.ServiceTier)
	return j.write(f, false)
}

// journalRelease records that reservation id was released.
func journalRelease(f *journalGen, id string) error {
	if f == nil {
		return nil
	}
	j := jbufs.Get().(*jbuf)
	j.start(recRelease)
	if !j.str(id) {
		return errors.New("budget: lease journal: id too long")
	}
	return j.write(f, false)
}

// jreader reads one record's fields.
type jreader struct {
	p   []byte
	bad bool
}

func (r *jreader) str() string {
	if len(r.p) < 1 || len(r.p) < 1+int(r.p[0]) {
		r.bad = true
		return ""
	}
	s := string(r.p[1 : 1+r.p[0]])
	r.p = r.p[1+r.p[0]:]
	return s
}

func (r *jreader) i64() int64 {
	if len(r.p) < 8 {
		r.bad = true
		return 0
	}
	v := int64(binary.LittleEndian.Uint64(r.p))
	r.p = r.p[8:]
	return v
}

func (r *jreader) u8() byte {
	if len(r.p) < 1 {
		r.bad = true
		return 0
	}
	v := r.p[0]
	r.p = r.p[1:]
	return v
}

// journalEntry is one carved reservation as the journal tells it.
type journalEntry struct {
	id       string
	at       time.Time
	charge   bool
	est      Estimate
	settled  bool // committed or released
	commit   *Usage
	released bool
}

// errNoJournal: the lease's journal is not in this process's directory
// (its owner ran on another machine).
var errNoJournal = errors.New("budget: no lease journal here")

// journalFile is one generation as parsed: its admissions by lease id,
// each with its settlement if one was recorded.
type journalFile struct {
	fi      os.FileInfo
	byLease map[string][]*journalEntry
}

// readJournal reads lease id's journal (its generation, parsed once per
// batch: files caches them) and returns its admissions in order;
// errNoJournal when there is none.
func readJournal(dir, id string, files *[]*journalFile) ([]*journalEntry, error) {
	if dir == "" {
		return nil, errNoJournal
	}
	f, err := os.Open(journalPath(dir, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoJournal
	}
	if err != nil {
		return nil, fmt.Errorf("budget: read lease journal: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("budget: read lease journal: %w", err)
	}
	for _, jf := range *files {
		if os.SameFile(jf.fi, fi) && jf.fi.Size() == fi.Size() {
			return jf.byLease[id], nil
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("budget: read lease journal: %w", err)
	}
	jf := &journalFile{fi: fi, byLease: parseJournal(data)}
	*files = append(*files, jf)
	return jf.byLease[id], nil
}

// parseJournal reads a generation's records up to the first one whose
// length or checksum is wrong: a torn or failed write, after which the
// generation took no record (its sealing), so none answered is lost.
func parseJournal(data []byte) map[string][]*journalEntry {
	out := make(map[string][]*journalEntry)
	byID := make(map[string]*journalEntry)
	for len(data) >= 8 {
		n := int(binary.LittleEndian.Uint32(data))
		sum := binary.LittleEndian.Uint32(data[4:])
		if n < 1 || len(data) < 8+n || crc32.Checksum(data[8:8+n], crcTable) != sum {
			break // a torn tail: its caller was never answered
		}
		r := jreader{p: data[9 : 8+n]}
		kind := data[8]
		data = data[8+n:]
		switch kind {
		case recAdmit:
			lease := r.str()
			e := &journalEntry{id: r.str(), at: time.Unix(0, r.i64()).UTC()}
			r.i64() // expiry: recovery charges by policy whatever it was
			e.charge = r.u8() == 1
			e.est = Estimate{Tokens: r.i64(), Input: r.i64(), Output: r.i64()}
			if !r.bad {
				out[lease] = append(out[lease], e)
				byID[e.id] = e
			}
		case recCommit:
			e := byID[r.str()]
			u := Usage{Input: r.i64(), Output: r.i64(), Reasoning: r.i64(), CacheRead: r.i64(), CacheWrite: r.i64(), Cost: r.i64()}
			u.CostKnown = r.u8() == 1
			u.ServiceTier = r.str()
			if e != nil && !r.bad && !e.settled {
				e.settled, e.commit = true, &u
			}
		case recRelease:
			if e := byID[r.str()]; e != nil && !r.bad && !e.settled {
				e.settled, e.released = true, true
			}
		}
	}
	return out
}

// journalEvents are the events recovery writes for a lease row from its
// journal: a committed reservation its actual usage, an unsettled one
// its estimate under ExpireCharge (nothing under ExpireRelease), a
// released one nothing; each with the reservation id the client saw. The
// lease's unused room is charged nothing: its holds simply go.
func journalEvents(row *ReservationRow, entries []*journalEntry) []Usage {
	var evs []Usage
	for _, e := range entries {
		var u Usage
		switch {
		case e.commit != nil:
			u = *e.commit
		case e.released, !e.charge:
			continue
		default:
			u = chargedUsage(ReservationRow{Estimate: e.est})
		}
		u.RequestID, u.At = e.id, e.at
		u.Key, u.Team, u.Org, u.User, u.Provider, u.Model = row.Key, row.Team, row.Org, row.User, row.Provider, row.Model
		u.Placed = true
		evs = append(evs, u)
	}
	return evs
}

// removeJournal deletes a lease's journal once its row has ended.
func removeJournal(dir, id string) {
	if dir == "" {
		return
	}
	_ = os.Remove(journalPath(dir, id))
}

// isLease reports whether reservation id is a lease's row.
func isLease(id string) bool {
	return len(id) > len(leasePrefix) && id[:len(leasePrefix)] == leasePrefix
}

// needJournal reads the journal of r when it is a lease's row (once per
// batch) and needs the windows its events count in.
func (b *batch) needJournal(ctx context.Context, tx Tx, r *ReservationRow, n *needs) error {
	if !isLease(r.ID) {
		return nil
	}
	if b.journals == nil {
		b.journals = make(map[string][]Usage)
	}
	evs, ok := b.journals[r.ID]
	if !ok {
		entries, err := readJournal(b.t.cfg.LeaseJournal, r.ID, &b.jfiles)
		switch {
		case errors.Is(err, errNoJournal):
			who := r.who()
			ls, err := b.t.limitsFor(ctx, tx, &who)
			if err != nil {
				return err
			}
			metric := make(map[string]Metric, len(ls))
			for i := range ls {
				metric[ls[i].ID] = ls[i].Metric
			}
			evs = unjournaledEvents(r, metric)
			if b.noJournal == nil {
				b.noJournal = make(map[string]bool)
			}
			b.noJournal[r.ID] = true
		case err != nil:
			return err
		default:
			if entries, err = b.notStoreReserved(ctx, tx, entries); err != nil {
				return err
			}
			evs = journalEvents(r, entries)
		}
		b.journals[r.ID] = evs
	}
	for i := range evs {
		ev := &evs[i]
		who := ev.Who()
		if err := b.needEvent(ctx, tx, n, &who, ev.Provider, ev.Model, ev.At); err != nil {
			return err
		}
	}
	return nil
}

// notStoreReserved leaves out the unsettled admissions whose id the
// store holds a reservation row under: a carve whose record was written
// but not synced (Durable, a failed fdatasync) was refused and decided
// again on the store's path under the same id, and that row (live,
// committed, released or expired) settles the request; charging the
// journal's admission its estimate as well would charge it twice, or
// charge a released request.
func (b *batch) notStoreReserved(ctx context.Context, tx Tx, entries []*journalEntry) ([]*journalEntry, error) {
	var ids []string
	for _, e := range entries {
		if !e.settled && e.charge {
			ids = append(ids, e.id)
		}
	}
	if len(ids) == 0 {
		return entries, nil
	}
	rows, err := tx.Reservations(ctx, ids)
	if err != nil || len(rows) == 0 {
		return entries, err
	}
	held := make(map[string]bool, len(rows))
	for i := range rows {
		held[rows[i].ID] = true
	}
	out := make([]*journalEntry, 0, len(entries)) // entries is the parsed file's
	for _, e := range entries {
		if !held[e.id] {
			out = append(out, e)
		}
	}
	return out, nil
}

// chargeJournal plans the events of lease row r's journal that the
// history does not hold yet (its owner may have written some).
func (b *batch) chargeJournal(ctx context.Context, tx Tx, r *ReservationRow, o *op) error {
	for _, ev := range b.journals[r.ID] {
		if b.stored(ev) {
			continue
		}
		if err := b.event(ctx, tx, ev, o); err != nil {
			return err
		}
	}
	if _, ok := b.journals[r.ID]; ok {
		b.recoveredLeases = append(b.recoveredLeases, r.ID)
		if b.noJournal[r.ID] {
			o.out.recovered.UnjournaledLeases++
			b.unjournaled = append(b.unjournaled, r.ID)
		}
	}
	return nil
}

// ErrLeaseUnjournaled is reported (Config.OnError) for each lease that
// recovery charged whole because its journal was not in
// Config.LeaseJournal: the process that held it ran on another machine,
// or with another journal directory. Every process recovering a database
// must see the journal directory of every process on its machine.
var ErrLeaseUnjournaled = errors.New("lease charged whole: its journal is not in this process's journal directory")

// reportUnjournaled counts and reports the leases the landed batch
// charged whole without their journal.
func (b *batch) reportUnjournaled() {
	for _, id := range b.unjournaled {
		b.t.leases.unjournaled.Add(1)
		dir := b.t.cfg.LeaseJournal
		if dir == "" {
			dir = "(none configured)"
		}
		b.t.reportErr(fmt.Errorf("budget: %w: lease %s, journal directory %s", ErrLeaseUnjournaled, id, dir))
	}
}

// unjournaledEvents charge a lease whose journal this process cannot read
// (a PostgreSQL replica on another machine that never came back) the rest
// of the lease: its holds as last written, which cover every reservation
// it had carved and not yet written (at their estimates) and its unused
// room. Never less than it served, by at most that unused room plus what
// its unwritten commits' estimates exceed their actual usage by: the one
// documented overcharge. One event per request the lease holds room for
// (its requests hold, else one), splitting the tokens evenly, rounded up:
// every limit it held on is charged at least its hold.
func unjournaledEvents(r *ReservationRow, metric map[string]Metric) []Usage {
	var tokens, input, output, requests int64
	for _, h := range r.Holds {
		switch metric[h.LimitID] {
		case MetricInput:
			input = max(input, h.Amount)
		case MetricOutput:
			output = max(output, h.Amount)
		case MetricRequests:
			requests = max(requests, h.Amount)
		default:
			tokens = max(tokens, h.Amount)
		}
	}
	in := max(input, tokens-output)
	if in+output == 0 {
		return nil
	}
	n := max(requests, 1)
	evs := make([]Usage, n)
	for i := range evs {
		evs[i] = Usage{RequestID: r.ID + ":" + strconv.FormatInt(int64(i), 10), Key: r.Key, Team: r.Team, Org: r.Org, User: r.User,
			Provider: r.Provider, Model: r.Model, Input: (in + n - 1) / n, Output: (output + n - 1) / n, At: r.At, Placed: true}
	}
	return evs
}
