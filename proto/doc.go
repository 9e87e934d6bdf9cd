// Package proto is the Redox data-access protocol as a pure, deterministic
// state machine: one Rank per node, driven by events, emitting the reads,
// messages and deliveries the caller must carry out. It does no I/O, reads
// no clock and starts no goroutine; every random choice comes from
// Config.Seed and the epoch. The reference is Redox §3 (Brand §3.3–3.4 for
// worked examples); the datadriven scripts in prototest/testdata replay
// those examples.
//
// Use it like this:
//
//	r, err := proto.NewRank(cfg)
//	r.Step(proto.EpochStart{Epoch: 1, Traces: traces})
//	r.Step(proto.ClientRequest{Sn: 0}) // or a peer Message, or a ReadDone
//	if r.HasReady() {
//		rd := r.Ready()
//		// read rd.Reads whole and answer each with a ReadDone,
//		// send rd.Sends in order, hand rd.Deliveries to the clients,
//		// keep the bytes of rd.Loaded until delivered or sent
//		r.Advance(rd)
//	}
//
// # Mapping
//
// Files are numbered rank-major and cut into physical chunks (PCs) of K
// consecutive files of one rank; a PC is only ever read whole. Each rank
// has M virtual chunks (VCs) of K slots, M = budget / (K × mean file size),
// and its PCs are split into M runs of consecutive PCs: run v is the
// physical chunk set PCS(v) of VC v, as a cache set is to a cache line.
// File f has slot O(f), its offset in its PC, and lives in slot O(f) of
// VC(f). See Mapping.
//
// # Local protocol
//
// A request for f at its home looks at slot O(f) of VC(f). If the slot
// holds a file, that file answers, whatever it is (redirection), and the
// slot is emptied (self-invalidation): a file is delivered once per epoch.
// Otherwise a PC of PCS(VC(f)) whose file for the slot was not yet loaded
// this epoch is read whole. The full protocol picks the one that fills the
// most empty slots with unloaded files (max-fill), ties broken at random;
// the random-selection variants pick any eligible PC. The read fills every
// empty slot whose file in the PC is unloaded, as far as the byte budget
// allows; those files count as loaded from then on, and are never loaded
// again in the epoch. Nothing valid is ever evicted.
//
// Reads are asynchronous. A slot a read will fill is pending; a request for
// it waits as its waiter, a second request queues behind the first. A miss
// that can be served by a PC already being read joins that read instead of
// reading the PC again. A failed read returns its files to unloaded, fails
// its waiters and retries the requests queued behind them. A read may name
// files of its chunk damaged on storage (ReadDone.Damaged): they are
// loaded all the same and go where a file goes, to a client, in a reply
// or in a push, with StatusDamaged and, at the runtime, without bytes.
//
// # Messages
//
// Ranks exchange these messages (Message; wire format in Encode):
//
//   - request (requester R → owner H): position sn of R's trace and its
//     file, R's frontier (one past its highest requested position), the
//     buffer bytes R grants H, and acks of pushes R consumed.
//   - reply (H → R): the file that answers sn (maybe another file of the
//     same slot; status ok, or damaged), or a redirect to a push already
//     sent for sn, or a failure.
//   - push (H → R): prefetched files, each tagged with a push ID, the
//     position of R it is meant for and its status (ok or damaged).
//   - done (any rank → every other): its clients ask for nothing more
//     this epoch.
//   - grant (window policy, R → H): H may push the files planned for R's
//     positions up to sn (see WindowRank).
//   - answers (window policy, H → R, at an epoch's start): which of H's
//     files answers each of R's positions that asks for one of H's, from
//     which step of H's pool (HomePlan.ByRank).
//   - ahead (window policy, R → H, once R has every home's answers): the
//     positions of R that H's files are pushed to ahead (RankShare.AheadBy).
//
// R first looks in its buffer VC for H: a file pushed into the slot of the
// requested file answers locally. Otherwise it sends a request; H serves it
// with the local protocol, replies, then prefetches. Messages may arrive in
// any order; messages of an earlier epoch are dropped and those of a later
// one are held until the rank starts it.
//
// # Prefetch
//
// All ranks know all traces. After replying to R for position sn from slot
// x, H considers the next Window positions of R's trace whose files it
// stores, counted from R's frontier (with one client asking in order, the
// frontier is sn+1 and this is the paper's window). It pushes the file now
// in a position's slot when the slot is valid at H (prefetch is
// opportunistic: nothing is read for it), differs from x (the on-demand
// slot), is not promised to another push R has not yet consumed, the
// position was never requested nor pushed for, and R's grant allows the
// bytes. The on-demand reply is sent first.
//
// The paper assumes R asks in trace order and shifts its window by sn.
// Several DataLoader workers ask out of order, so this package tracks
// pushes explicitly instead: H keeps, per requester, the outstanding push
// for each slot and each position until R acknowledges it; R acknowledges
// a push when a request consumes it, with the position that did (which may
// differ from the one it was meant for: any file of the slot may answer).
// A push is made into a slot only when H knows R's slot to be empty, so a
// pushed file always finds its slot free; outstanding bytes never exceed
// the grant, so R's buffer stays within its limit. When R's request for a
// position overtakes the push meant for it, H answers with a redirect and R
// takes the push when it arrives, or, if another position took it
// meanwhile, asks again with that ack first.
//
// # Invariants
//
// Checked after every step in tests (proto/inproc), and inside Step when built
// with the invariants tag:
//
//   - at most once: no file is delivered twice in an epoch, on any rank;
//   - exactly once: if every rank requests its whole trace and the traces
//     cover the dataset, every file is delivered exactly once;
//   - memory: bytes held in local VCs ≤ the budget; buffer VCs ≤ the
//     remote limit;
//   - no file is loaded into memory twice in an epoch;
//   - a pushed file always finds its slot empty.
//
// Bad input from outside (a client's position, a peer's message) is
// returned as an error and changes nothing; a broken internal invariant
// panics with "proto: invariant violated".
//
// # Window plans
//
// The papers' same-slot redirection above reads each chunk about seven
// times per epoch at a quarter of the data in memory. The window policy
// reads each once: every rank reads its chunks in a seeded random order
// into a pool bounded by its budget, and a position whose file has home H
// is answered by a file drawn uniformly (seeded) from H's pool. Since the
// seed, the traces, the sizes and the budgets are known when an epoch
// starts, PlanWindow plans the whole epoch as a pure function, in logical
// steps (step t: every rank answers its position t): the file for each
// position, each rank's reads with the step from which the budget has
// room for them (Issue) and the step by which they must be done (Due),
// and the step at which each file from another rank is pushed to the rank
// it answers: up to Window positions ahead, within that rank's Remote
// bytes, or on demand.
// A read takes Lead steps and a rank reads one chunk at a time; Ramp
// chunks are in before the first answer. An epoch's pools drain at its
// end; the next epoch's plan (given the previous one's Drains as After)
// reads its first chunks into the room they free, at steps before its
// start, so only the first epoch starts empty. WindowRank carries the
// plan out for one rank, with Rank's API (both are a Machine). It plans
// only its share (windowhome.go): its own pool (PlanHome), whose answers
// to each rank's positions it sends that rank (MsgAnswers); from every
// home's answers its own positions and pushes (PlanShare); and it tells
// each home which of its positions that home's files are pushed to ahead
// (MsgAhead). It reads its chunks in plan order as its budget frees,
// answers each position with its planned file, grants the homes of the
// files the plan pushes to it as far as its Remote bytes allow
// (MsgGrant), and they push those files (MsgPush) as their chunks come
// in; the plan's other files of other ranks it requests on demand.
//
// # Residency
//
// Memory carries chunks from one epoch into the next (windowkeep.go):
// each epoch keeps in memory, whole, the chunks it reads last, as many as
// fit Keep of the budget (KeepBytes: all of them when the budget holds
// the shard), and their files stay once drawn (PlannedRead.Kept). The
// next epoch's plan, given them as Resident (the previous plan's
// Resident), puts them first in its order, due at once and without a
// read (PlannedRead.Resident), so that it reads from storage only the
// rest: the shard less KeepBytes. Keeping a run at the end of the order
// leaves every chunk before it free to go as its files do, so the pool
// is the whole budget all epoch long and a read always finds room; the
// chunks kept change from epoch to epoch. Read.Keep tells the caller to
// keep a chunk; a resident chunk read without it leaves memory file by
// file. With Keep 0 nothing is kept unless the budget holds the shard.
//
// # Files
//
// What both policies share: types.go (FileID, and the papers' Variant),
// events.go (a step's inputs), message.go (what ranks send each other,
// and the reads and deliveries asked of the caller), codec.go (a
// message's bytes), mapping.go (files to PCs, VCs and ranks), machine.go
// (Machine, and Ready, a step's effects), stats.go, trace.go
// (seeded traces), resume.go (an epoch resumed after delivered files) and
// mix.go (how random a delivered order is).
//
// The papers' policy, Rank: rank.go (its state and Step), rank_config.go,
// rank_local.go (a request at its file's home), rank_refill.go (reading
// a PC into a VC's empty slots), rank_redirect.go (which slot answers),
// rank_remote.go (the requester's side of another rank's files),
// rank_prefetch.go (the owner's pushes), rank_check.go and rank_dump.go.
//
// The window policy: windowplan.go (PlanWindow, the whole epoch's plan),
// windowhome.go (one home's pool, and a rank's positions, alone),
// windowkeep.go (the chunks kept into the next epoch), windowrank.go
// (WindowRank's state and Step), windowrank_epoch.go (each epoch's pool
// planned, or resumed), windowrank_share.go (the rank's positions from
// the homes' answers), windowrank_own.go (its chunks read in plan
// order, its files handed out), windowrank_positions.go (its clients'
// positions, and the files fetched for them), windowrank_early.go (the
// next epoch read during the drain), windowrank_check.go and
// windowrank_dump.go.
package proto
