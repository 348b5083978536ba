// Package budget is tokenbudget's domain: limits over fixed and calendar
// windows, the decisions made against them, and the Tracker that records
// usage and holds reservations, over any Store.
//
// # The model
//
//   - A Limit caps one metric (tokens, input, output, requests,
//     concurrent requests, or dollars) for one key, one team (shared by its
//     keys), one organisation (shared by its teams' keys), or every key as
//     a default, within a scope (all traffic, one provider, one model or
//     pattern, one end user, or each end user). Raises add to it until an
//     instant.
//   - A Window is when a limit's count resets: fixed (every 1h), calendar
//     (daily, monthly, in a time zone) or once (a balance that never
//     resets).
//   - Usage is one request's event in the history (key, the team and org
//     it was charged to, end user, provider, model, token counts, cost,
//     instant). The history is the truth.
//   - A counter is one (limit, subject, window)'s sum of the history: the
//     subject is the key a default counts for, or the end user of an
//     each-user limit. It always equals the history's sum, and is created
//     from the history the first time its window is written.
//   - A Reservation holds an estimate on every applicable limit until it
//     is committed with the actual usage, released, or expires; a
//     concurrent limit counts live reservations (leases).
//   - Two outboxes carry what happened elsewhere, each written in the
//     transaction of what it reports and delivered at least once by
//     claims any number of processes share: alerts (alert.go), and the
//     usage outbox (outbox.go), one row per event the history takes for
//     each registered usage hook, delivered key by key in order.
//
// A request is decided against every level that applies to it at once,
// the most restrictive winning. The contract (docs/contract.md in the
// repository; comments cite it as "contract section N") fixes how counts,
// windows and decisions work; Decide is that contract as a pure function of
// statuses.
//
// # The three paths
//
//   - Check (check.go) answers from memory: each key's limit definitions
//     and each window's counter are cached (package cache) and re-read
//     after Config.RefreshInterval, so other processes' writes show within
//     it. A warm check does no I/O and allocates nothing (CheckInto).
//   - Record (record.go) validates an event, overlays it on the cached
//     counters at once, and queues it for the writer; RecordSync queues a
//     whole slice as one operation and waits for its transaction.
//   - Reserve, Commit, Release, Renew and Recover (reserve.go) queue typed
//     operations for the writer and wait for their answers: exact across
//     goroutines, processes and PostgreSQL replicas. With leases
//     (lease.go, lease_batch.go, journal.go) most are answered in memory.
//
// # The writer
//
// One goroutine per Tracker (writer.go) takes operations off the queue in
// batches, one transaction each, and plans every batch in three steps
// (batch.go): load what the batch needs and its memory lacks, under the
// store's locks; decide every operation in queue order against memory
// alone, each seeing the ones before it (an admitted reservation's holds,
// a recorded event); write the batch with one Tx.Apply. A refused operation
// adds nothing to the write, so nothing is ever written and then refused.
// The writer keeps what it knew at its last commit; Tx.Mark tells it, at
// the start of the next transaction, whether anyone else wrote since (on
// SQLite, PRAGMA data_version): if not, a batch of reservations and
// commits reads nothing at all. A failed batch forgets the memory and is
// planned again from a fresh load, with backoff; usage and settlements are
// never given up, reservations whose callers were told of the failure are
// dropped.
//
// # Leases
//
// With Config.Leases a Reserve is decided in memory. A Tracker holds, per
// route (one key's requests for one end user, provider and model), a
// lease: one row in the store's reservations (id "lse_...", ExpireRelease)
// with a hold on every limit the route's requests are decided on, so
// every other process and replica counts it and used + holds <= limit
// stays true everywhere. A request the lease covers on every limit at once
// is carved from it under one small mutex and answered without the store;
// its Commit settles in memory and queues the event, which the writer's
// next batch writes in the same transaction that shrinks the lease's hold
// by the carved estimate; a Release gives the room back to the lease. One
// lease per route rather than one per counter keeps all-or-nothing a
// single lock, and a route's requests decide on the same limits anyway.
// The store is written per refill and per batch of commits, not per
// request.
//
// A request the lease cannot cover goes to the writer, which first takes
// the lease's free room back, then decides it as today; if it fits and at
// least a few estimates of room remain on every limit, the lease grows by
// what demand asks (twice what it served since its last refill, or the
// requests waiting) but never more than half the room left, and the
// request is carved from it. Below that it holds a reservation of its own:
// the last tokens go to whoever asks first, in any process. A route with
// no lease takes one on its second request within LeaseIdle, or on its
// first when its batch carries other callers' reservations (concurrent
// load): one that asks less often than that gains nothing from a lease
// (it would be given back before its next request) and keeps the store's
// path. The writer
// looks after its leases every 250ms and at every Flush: an idle one
// (unused for LeaseIdle, 1 s of the tracker's clock) gives its free room
// back and ends, an expiring one is renewed, carved reservations past
// their TTL are settled by their policy, and a change of limit
// definitions retires every lease. Reads: Inspect (the CLI's inspect, GET
// /v1/budget, the dashboard) and verify count a lease's whole hold as
// reserved, in every process: the exact, conservative view every other
// process decides against. A check counts as its Reserve would decide:
// what its route's lease admitted is reserved, the room that lease may
// still carve is not (it is the route's own), and another route's lease's
// free room is (a Reserve cannot carve it; its owner gives it back once
// idle). Routes
// with a concurrent or a dollar limit and reservations with NoLease (the
// CLI's reserve) take the store path.
//
// The journal. Every admission, commit and release carved from a lease is
// appended to the lease's journal (Config.LeaseJournal, a name per lease
// row) as one checksummed record with one write() before the call
// returns, so it survives the process in the page cache; in Durable mode
// the record is on disk (fdatasync) before the call returns, one sync
// serving every caller waiting on it. A lease's journal name is a hard
// link to the file all of its Tracker's leases append to (its
// generation, rotated at 32 MiB; a lease whose generation is full carves
// no more and is replaced, so no file outgrows that by more than the
// records of the carves then in flight): a link costs a fraction of a
// new file, and the file goes when its last name does (journal_gen.go).
// Recovery of an expired lease row, by any process's sweep on the machine (the
// owner's restart included), reads it: a committed reservation is charged
// its actual usage, one in flight its estimate under ExpireCharge
// (nothing under ExpireRelease), a released one nothing, each as an event
// with the reservation id the caller saw; the lease's unused room is
// charged nothing, its holds simply go. Events are idempotent by request
// id, so what the owner had already written is not written twice.
//
// A failed journal write hides no answered request. A generation's
// appends are serialised, and the first that fails (an error or a short
// write) or whose sync fails seals it: no record is appended to it again,
// so a record not written whole can only be its last, and recovery,
// reading up to the first record whose length or checksum is wrong, loses
// no answered one. A Reserve whose record failed is decided again on the
// store's path (a reservation of its own, under the same id, whatever the
// caller's context: a caller that left gets its row released and its
// context's error, so recovery, finding the row, charges it nothing); the
// generation's leases carve no more; for a second no lease is taken or
// grown (the routes hold reservations of their own, so a failing disk
// costs no caller an error), then the next lease starts a new
// generation; a Commit of what they had carved is written to the store
// before it returns; and a Release under ExpireCharge, which has nothing
// to write there, fails, the reservation then expiring by its policy.
// One bounded exception: when that re-decision makes no row (the request
// is denied there, or the store fails), a record whose sync failed but
// whose bytes landed stays an unsettled admission, and if the process
// then dies before the lease ends, recovery charges its estimate to a
// request whose Reserve returned an error (Durable only, one estimate per
// failed sync).
//
// Crash rules. A process killed under load: every request it admitted is
// charged exactly once, within the lease's TTL (the reservations' TTL)
// plus the sweep interval. A process that stalls past its leases' TTL and
// wakes after another recovered them is fenced: the writer checks, under
// the row's lock in the transaction that would change it, that the lease
// row is still live and unexpired; if not, the lease is dead (counted in
// Stats.LeasesLost), its commits write their events alone and, where
// recovery already charged an estimate, only what the actual exceeds it
// by, as <id>:late (Stats.LeaseLate); new requests get a fresh lease. On
// PostgreSQL a replica on another machine cannot read a dead replica's
// journal: a lease whose journal recovery cannot find is charged the rest
// of the lease, its holds as last written (never less than it served; the
// one overcharge, bounded by the lease's unused room: at most its last
// refill, which is at most 1,024 estimates and half the room left then,
// 32 estimates for a fresh lease; the conformance case
// BudgetLeaseGrownWithoutItsJournalOverchargedAtMostOneRefill measures
// 1,024 estimates for a lease grown under steady demand and killed just
// after a refill), as events "<lease id>:N"; see the README's crash
// costs. That charge covers each
// reservation whose room it held at its estimate, also one the waking
// owner settles by expiry before its commit (an ExpireCharge one is not
// charged again; an ExpireRelease one's room counts once, from the
// lease's free part, unless it was given back before the charge). The journal name it left
// on its own machine is settled by the next Recover of any tracker there
// (its own restart included): the commits it holds that the history does
// not add what they exceed their estimates by, as <id>:late, and the name
// goes (journal_stale.go). Since that sweep removes a name that stays
// without a row for staleRecheck (a minute), a transaction that spends
// longer than that between a new lease's link and its commit (PostgreSQL,
// a process stalled inside it) can lose a live lease's journal name, and a
// crash then charges that lease whole: bounded as above, counted
// (Stats.LeasesUnjournaled) and warned (ErrLeaseUnjournaled).
//
// Where it lives: the domain types in limit.go, window.go, usage.go,
// price.go and model.go; decisions in decide.go; statuses in status.go;
// the store seam and its locking contract in store.go (Tx is the two
// roles every backend implements; roles.go says what works without each
// optional one), the rows it exchanges in rows.go; the writer in writer.go and batch.go (each
// operation kind's steps side by side); administration (limits,
// inspect, verify) in admin.go; teams, organisations and raises in team.go; provider parking
// in park.go and prober.go; the audit log and who made a change in audit.go
// (its JSON views in audit_views.go), admin scopes in scope.go, and
// declarative definitions (ApplyDefinitions) in reconcile.go.
//
// # Concurrency
//
// A Tracker is safe for concurrent use. Checks take no exclusive lock.
// Everything that writes goes through the one writer goroutine, so a
// Tracker never races itself; several Trackers (in one process or many)
// on one database are kept exact by the store: SQLite serialises write
// transactions on the file, PostgreSQL by the locks of Tx's contract.
// Close flushes the queue and stops the writer and the sweep.
package budget
