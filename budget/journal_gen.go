package budget

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Journal generations. A lease's journal is its own name, "<lease
// id>.journal", but not its own file: it is a hard link to the file the
// Tracker appends every lease's records to, its current generation. So a
// new lease costs a link() (about 15 µs) where creating a file costs 0.1
// to 1 ms of kernel time on a loaded ext4: one file per lease, created on
// the writer's path, was what bounded a cold start at 64-way load (1,000
// routes taking their leases at about 1 ms each, the writer doing nothing
// else), and a slow start then kept routes off their leases. Recovery
// reads a lease's name, so it reads the whole generation and keeps the
// records of that lease (its admissions name it; its settlements name its
// reservations). Removing a lease's name frees nothing until the last
// name of the file goes: the filesystem counts the links, so no code
// does.
//
// A generation is rotated once it holds genMax bytes: the next lease links
// to a new one, and a lease of an older generation is replaced at its next
// refill, so an old generation lives about as long as its leases' refills.
// A lease whose carve finds its generation full carves no more (its route's
// next request takes a new lease), so a busy lease that is never refilled
// (its reservations released, not committed) does not grow one file
// without end: a generation ends at genMax plus the records of the carves
// in flight then and their settlements.
// The current generation keeps its own name, "<tracker>-<n>.gen", locked
// with flock while its Tracker lives: a process that finds such a name
// unlocked knows its owner is gone and removes it (sweepJournals).

// genMax is the size at which a generation is rotated (a variable for
// tests).
var genMax int64 = 32 << 20

// genSuffix ends a generation's own name.
const genSuffix = ".gen"

// journalGen is one generation: a file that every lease's journal name
// links to while it is current, appended to by their records.
//
// Nothing answered ever lies past a record that was not written whole:
// appends are serialised, and the first one that fails (an error, or a
// short write leaving part of a record) seals the generation, under the
// same lock, before any other record is appended. A sealed generation
// takes no more records (every later append fails, errSealed): its leases
// carve no more, the Tracker's next lease starts a new generation, and the
// settlements of what they had carved go to the store instead (see
// commitLeased). So a generation's records are whole up to its first
// broken one, which can only be its last, and parseJournal stopping there
// loses no record whose caller was answered. A failed sync seals it too:
// after a failed fdatasync the kernel may have dropped the pages it could
// not write, and a later sync's success would not bring them back.
type journalGen struct {
	f    *os.File
	name string // its own name, removed when rotated
	// durable makes every append wait until the record is on disk
	// (fdatasync), one sync serving every record appended before it.
	durable bool
	mu      sync.Mutex // orders appends with size and sealed
	size    atomic.Int64
	sealed  atomic.Bool // an append or a sync failed: no more records
	syncMu  sync.Mutex
	synced  int64        // bytes known on disk, under syncMu
	rotated atomic.Bool  // a newer generation is current
	syncs   atomic.Int64 // fdatasyncs made, for Stats
	// failed is its Tracker's journals.failed, set when it is sealed.
	failed *atomic.Int64
}

// syncRecords is the fdatasync of a generation (a variable so that tests
// can fail it).
var syncRecords = fdatasync

// errSealed refuses a record to a generation that a failed write or sync
// sealed.
var errSealed = errors.New("budget: lease journal: generation sealed by an earlier failed write")

// writeRecord is the one write() of a record (a variable so that tests
// can fail it, or write part of it).
var writeRecord = func(f *os.File, p []byte) (int, error) { return f.Write(p) }

// append writes one record with one write(); durable, it returns once the
// record is on disk, unless nosync (the caller syncs: sync). A failed or
// short write seals g before the lock goes.
func (g *journalGen) append(p []byte, nosync bool) error {
	g.mu.Lock()
	if g.sealed.Load() {
		g.mu.Unlock()
		return errSealed
	}
	n, err := writeRecord(g.f, p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		g.seal()
		g.mu.Unlock()
		return fmt.Errorf("budget: lease journal write (generation sealed): %w", err)
	}
	end := g.size.Add(int64(n))
	g.mu.Unlock()
	if !g.durable || nosync {
		return nil
	}
	return g.syncTo(end)
}

// seal takes no more records to g, and keeps new leases off for a while.
func (g *journalGen) seal() {
	g.sealed.Store(true)
	if g.failed != nil {
		g.failed.Store(time.Now().UnixNano())
	}
}

// broken reports whether g was sealed by a failure.
func (g *journalGen) broken() bool { return g != nil && g.sealed.Load() }

// sync puts everything appended to g so far on disk (durable only).
func (g *journalGen) sync() error {
	if g == nil || !g.durable {
		return nil
	}
	return g.syncTo(g.size.Load())
}

// syncTo returns once the first end bytes are on disk: a sync already
// made after them is enough (group commit: callers waiting on syncMu find
// their records synced by the one before).
func (g *journalGen) syncTo(end int64) error {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	if g.synced >= end {
		return nil
	}
	if g.sealed.Load() {
		return errSealed
	}
	upto := g.size.Load()
	if err := syncRecords(g.f); err != nil {
		g.seal()
		return fmt.Errorf("budget: lease journal sync (generation sealed): %w", err)
	}
	g.syncs.Add(1)
	g.synced = upto
	return nil
}

// journals is a Tracker's generations (the writer's alone but for the
// counters).
type journals struct {
	dir     string
	durable bool
	prefix  string // "<tracker id>-"
	n       int
	cur     *journalGen
	syncs   atomic.Int64 // fdatasyncs of rotated generations
	// failed is when a generation was last sealed by a failed write or
	// sync (Unix nanos of the wall clock: a pause for the disk's sake).
	failed atomic.Int64
}

// journalPause is how long after a journal failure no lease is taken or
// grown: the routes' requests hold reservations of their own, so a disk
// that keeps failing costs no caller an error, and a lease is tried again
// after it.
var journalPause = time.Second

// failing reports whether a generation failed within journalPause.
func (js *journals) failing() bool {
	if js == nil {
		return false
	}
	at := js.failed.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < journalPause
}

func newJournals(dir string, durable bool) *journals {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &journals{dir: dir, durable: durable, prefix: hex.EncodeToString(b[:]) + "-"}
}

// link makes lease id's journal name, linked to the current generation
// (rotated first if full), and returns that generation.
func (js *journals) link(id string) (*journalGen, error) {
	if js.cur == nil || js.cur.size.Load() >= genMax || js.cur.broken() {
		if err := js.rotate(); err != nil {
			return nil, err
		}
	}
	if err := os.Link(js.cur.name, journalPath(js.dir, id)); err != nil {
		return nil, fmt.Errorf("budget: lease journal: %w", err)
	}
	if js.durable {
		// The name must survive a crash as the records do.
		if err := syncDir(js.dir); err != nil {
			return nil, err
		}
	}
	return js.cur, nil
}

// rotate starts a new generation; the old one loses its own name (its
// leases' names keep it) and is closed once no lease refers to it
// (os.File's cleanup).
func (js *journals) rotate() error {
	js.n++
	name := filepath.Join(js.dir, js.prefix+strconv.Itoa(js.n)+genSuffix)
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("budget: lease journal: %w", err)
	}
	if err := lockFile(f); err != nil || !stillNamed(f, name) {
		// Another process's sweep took it between its creation and the
		// lock (it looked abandoned): the next name.
		_ = f.Close()
		if err != nil {
			_ = os.Remove(name)
			return fmt.Errorf("budget: lease journal lock: %w", err)
		}
		return js.rotate()
	}
	if old := js.cur; old != nil {
		old.rotated.Store(true)
		js.syncs.Add(old.syncs.Load())
		_ = os.Remove(old.name)
	}
	js.cur = &journalGen{f: f, name: name, durable: js.durable, failed: &js.failed}
	return nil
}

// stillNamed reports whether name is still f's.
func stillNamed(f *os.File, name string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(name)
	return err == nil && os.SameFile(a, b)
}

// close removes the current generation's own name and closes it: every
// lease has ended (the writer's last batch), or its name keeps the file.
func (js *journals) close() {
	if js == nil || js.cur == nil {
		return
	}
	_ = os.Remove(js.cur.name)
	_ = js.cur.f.Close()
	js.cur = nil
}

// own is the prefix of this Tracker's generations ("" without any).
func (js *journals) own() string {
	if js == nil {
		return ""
	}
	return js.prefix
}

// fsyncs counts the fdatasyncs made for the journal.
func (js *journals) fsyncs() int64 {
	if js == nil {
		return 0
	}
	n := js.syncs.Load()
	if g := js.cur; g != nil {
		n += g.syncs.Load()
	}
	return n
}

// sweepJournals removes what dead processes left in dir: a generation's
// own name that no live Tracker holds locked. (Lease names are removed
// when their rows are recovered or found ended: staleJournals.) own is
// this Tracker's prefix.
func sweepJournals(dir, own string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("budget: lease journal: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, genSuffix) || own != "" && strings.HasPrefix(name, own) {
			continue
		}
		path := filepath.Join(dir, name)
		f, err := os.Open(path)
		if err != nil {
			continue // gone meanwhile
		}
		if tryLock(f) {
			_ = os.Remove(path)
		}
		_ = f.Close()
	}
	return nil
}
