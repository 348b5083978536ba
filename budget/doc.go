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
//     goroutines, processes and PostgreSQL replicas.
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
