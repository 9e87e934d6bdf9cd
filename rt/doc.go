// Package rt runs one rank of a brandrt job. A Node holds the rank's
// shard of the dataset (chunk.Home), its protocol state machine
// (proto.Machine: the papers' proto.Rank with Config.Policy "paper", the
// window policy's proto.WindowRank by default) and its MPI communicator
// (collectives.Comm). Each epoch a loop (the type loop) steps the machine
// with what happened and carries out what it asks for: chunk reads,
// messages to other ranks, files for the rank's clients. proto decides;
// rt carries out.
//
// Open checks the Config, opens the shard, builds the mapping and the
// machine, and checks with the other ranks that all of them opened the
// same dataset. Serve runs Config.Epochs epochs and returns each one's
// EpochStats, summed over the ranks. Every rank must call both: they run
// collectives.
//
// Clients reach a rank through channels: Node.ClientEvents, Node.Traces
// and Node.Starts. Package rt/shm serves the node's training processes
// over shared memory (a ring pair per client process) and turns what
// they write in their rings into ClientEvents; the in-process consumers
// of Config.Consume (brandrt serve --consume) stand in for them. Package
// rt/job is the process around a rank: it joins MPI, makes the memory
// shared with the clients (Site.Memory), calls Open and Serve, starts
// the training command, and ends the job on every rank when one fails.
//
// # Files
//
//   - config.go: Config, what the user chose (flags map onto it;
//     DefaultConfig, Config.Validate); its Budget (Config.Mem, resolved
//     once by Open: Node.Budget) and Policy.
//   - site.go: Site, what a rank finds where it runs and is given (its
//     node's and cgroup's memory, staged copies, a log, a file system,
//     shared memory, callbacks), filled by rt/job.
//   - node.go: Node, its parts, Open, EveryRank, what a caller sets
//     before Serve (WatchClients, TrainingOver, SuperviseTraining), and
//     the machine built (newRank, newWindowRank).
//   - dataset.go: the dataset and the shard a rank serves (Node.data),
//     opened and checked, and whether it was packed again under the job
//     (Node.replaced).
//   - serve.go: Announce, Serve, and Node.epoch, one epoch from traces to
//     statistics; what came for the next epoch before it began
//     (Node.next).
//   - events.go: what clients tell the rank (ClientEvent: Ask, End,
//     Session, Over) and what it hands them (Delivery).
//   - loop.go: the loop: its rounds and naps, reads done, peers'
//     messages stepped (loop.receive, loop.stepFrom); the epoch's clock
//     (epochClock).
//   - asks.go: what the clients asked for in the epoch (asks): the
//     positions asked, the replies waiting, the answers counted, the
//     epoch or a share ended.
//   - link.go: the traffic with the peers in the epoch (link): sends in
//     flight, each peer's inbox, the peers done.
//   - carry.go: loop.carry, which carries out a proto.Ready.
//   - wire.go: the MPI tags and the frame of a message between ranks.
//   - io.go: ioPool, the I/O workers that read chunks whole, and the
//     chunks kept resident from one epoch into the next (proto.Read.Keep).
//   - file.go: the file type, and chunkBuf, the holds on a buffer.
//   - recvpool.go: recvPool, the buffers files from other ranks land in.
//   - footprint.go: the memory a rank takes, term by term (Footprint,
//     its Total, its GoLimit for Go's runtime, the measured constants).
//   - budget.go: a rank's footprint and the bounds of its terms
//     (Node.Footprint, Node.HandCap, Node.ReaderBytes,
//     Node.ReceivedBytes, RingBytes).
//   - cgroup.go: what fits its node and its memory cgroup less --leave
//     (fitsNode, fitsCgroup, cgroupBudget, fitHanded).
//   - traces.go: each epoch's traces, seeded or offered (TraceOffer).
//   - barrier.go: quietBarrier, a barrier that sleeps while it waits.
//   - resume.go: StartOffer and Node.resumePoint, where a job resumes.
//   - place.go: Place, the saved state a job resumes from; Resume, the
//     one rule of whether and how a job takes one up (a rank's and
//     brandrt simulate --resume's); Delivered.
//   - clients.go: what clients send and the training beside them
//     (Node.clients), client events (loop.client, loop.ask), training
//     processes' sessions, clients gone (loop.checkGone), and the end of
//     a share (loop.end).
//   - readers.go: the processes that read the trace, and who asked for
//     each position (Node.readers): a second training process is refused
//     the positions another one reads, and told which.
//   - damage.go: damaged data (Node.damaged), files left out (Node.damage),
//     their limit.
//   - storage.go: storageWatch, for files of the dataset storage cannot
//     reach.
//   - fallback.go: fallback, the dataset staged copies were made from,
//     read in place of a chunk damaged in a copy.
//   - peers.go: peerWatch, for peers that send nothing while awaited
//     (Node.peers).
//   - training.go: trainingWatch, which ranks have had training beside
//     them (Node.training).
//   - stats.go: EpochStats, Node.reduce across the ranks, EpochStats.OK;
//     the deliveries per file (Node.tally).
//   - report.go: EpochStats.Report and Verdict, the lines serve prints.
//   - mix.go: rank 0's measure of how random an epoch's order is.
//   - consume.go: the in-process consumers (Config.Consume), which read
//     the rank's trace and check every file's checksum.
//
// # A request's way
//
// A client asks for position Sn of the rank's trace with an Ask on
// Node.ClientEvents, whose Reply channel has room for the answer (the
// loop never waits on a client): rt/shm sends one per read in a client's
// ring (forward.go), a consumer keeps Config.Depth in flight. The loop
// takes events in loop.step and loop.wait, and loop.client passes each
// on. loop.ask holds an Ask for a later epoch in Node.next.held, answers with
// Delivery.Err one it cannot serve (an earlier epoch, one past the last,
// one from a second training process that Node.readers refuses, a
// position already waiting, one the machine refuses), and else steps
// proto.ClientRequest, keeps Reply in asks.waiting and calls loop.carry.
//
// carry takes Ready from the machine until it has none. Reads go to the
// ioPool; a worker reads the chunk whole (readChunk), and loop.readDone
// steps proto.ReadDone and keeps the Loaded files in loop.files
// (loop.load). Sends go out with Isend: a frame under tagMsg, then a
// tagData message per file it carries, from the file's bytes in place,
// with Issend (complete once the peer posted its receive), at most
// sendMem bytes of them at once and a peer's share of that to each peer;
// the rest wait in the link, in order (link.sendFile): MPI keeps copies
// of what it has not yet put on the wire, so they stay bounded
// (Footprint.MPI).
// Deliveries go to the waiting clients (loop.deliver) with Data, Label
// and CRC, or Err, or Damaged. Forget files are released. The client
// calls Delivery.Release when done: rt/shm (deliver.go) once it copied
// the bytes into the client's ring or, for a file in the shared arena,
// once the client's data tail passed its record.
//
// A file of another rank goes further. Under the window policy the
// machine first learns, at the epoch's start, which file of each home
// answers each of its positions (proto.MsgAnswers from every peer, and a
// proto.MsgAhead back to each, framed as every message is; its clients'
// requests for other ranks' files wait for them). Most come
// unasked: the machine sends the homes a proto.MsgGrant saying how far
// they may push (peerWatch notes a push owed), and a home's machine
// pushes each granted file in a proto.MsgPush as soon as its chunk is in.
// The rest, and every one under the papers' policy, the machine asks for
// with a proto.MsgRequest when a client asks (peerWatch notes the reply
// owed); the home answers, from memory or after a read, with a
// proto.MsgReply carrying the file, and the papers' policy may push files
// for the requester's next positions too. A rank's loop.receive takes the
// frame (link.probe: Iprobe, Recv) and link.post decodes it
// (decodeFrame): it takes a recvPool buffer
// for each file the frame announces and posts a receive (Irecv) of its
// tagData message into it, then queues the message in the sender's inbox
// (inbound). link.next hands it to the loop (loop.stepFrom) once every
// receive completed, and the loop adds the files to loop.files, and steps what the sender sent after it only then,
// so that each peer's messages are stepped in the order sent. A file is
// delivered then or when its position is asked for. The loop never waits
// for a peer: its one Recv takes the frame Iprobe just reported. The home
// releases its file when the Issend completes (link.testSends).
//
// # Goroutines and what each owns
//
//   - The serving goroutine, the caller of Open and Serve, makes every
//     MPI call (collectives, quietBarrier, the loop's Isend and Issend,
//     Iprobe, Recv and Test) and every call on the machine, and alone touches the Node
//     and the loop: held events and offers, Node.next.files, the per-file
//     counts, damage named, sessions, peerWatch, the ioPool's backlog.
//   - The I/O workers, Config.IOWorkers of them (newIOPool), take a
//     proto.Read from ioPool.queue, read the chunk through
//     storageWatch.retry and hand the readResult over on ioPool.done,
//     which has no room: a worker keeps its buffer until the loop takes
//     it. The loop gives them reads within Config.ReadMemBytes
//     (ioPool.flush), counted until it has stepped each. ioPool.close
//     starts one more, to release late results.
//   - The consumers (Config.Consume) of each epoch, and one that closes
//     consumers.done after them, send Asks, check and release what
//     comes back, and add their counts under consumers.mu.
//   - startMix, on rank 0 with Config.MixBatch: one per epoch measures
//     the shuffle's figures of the epoch's traces, which stay put, from
//     its start; ordered starts one that measures the order the ranks
//     delivered, once gathered, while they sum the epoch's statistics
//     (takeMix waits for it).
//   - answerLateStarts: with Config.MayResume, one for the life of Serve
//     answers each StartOffer after the one Node.resumePoint took.
//   - TrainingOver starts one that sends Over{}, to wake the loop.
//
// storage.go and peers.go start none: storageWatch is shared by the
// workers and the loop under its mutex; peerWatch is the serving
// goroutine's. All else crosses through channels (Node.clients' events,
// offers, starts, over; ioPool's queue and done; each Reply) or is guarded:
// clients release files from their own goroutines, so chunkBuf.refs is
// atomic, recvPool locks, and Site.Memory must allow it too. Between
// epochs nothing reads Node.ClientEvents: events wait for the next loop
// (before the first, Node.resumePoint takes them as the training's first
// word and holds them for it in Node.next.held).
//
// # Buffers: who holds them, who gives them back
//
// With Site.Memory (shared with the clients), a chunk read puts each
// file straight into a buffer of its own from it where the file system
// allows (FUSE, NFS, reads through the page cache: readOnce,
// chunk.Home.ReadInto). The read is then a keptChunk (readResult.kc)
// whose buffers hold one hold each, the read's. Otherwise (O_DIRECT on a
// local disk, or no Site.Memory) a read's buffer is a chunkBuf around
// the chunk.Chunk, from the shard's own buffers, freed by
// chunk.Chunk.Release after its last hold. A read that keeps its chunk
// (proto.Read.Keep: the window policy's last chunks of an epoch, every
// chunk when the budget holds the shard) has ioPool.resident hold its
// keptChunk, copying each file into a buffer of its own first if the
// read did not (ioPool.keep): the next read of the chunk is answered
// from those buffers, without another; a read that does not keep it
// takes it out, and ioPool.close lets go of the rest. loop.load gives
// each file kept from the chunk (proto.Ready.Loaded or Early) a hold, on
// the chunk's buffer or on its own; loop.keepOrCopy drops the read's
// own. Unless the files are in buffers of their own already, keepOrCopy
// first copies them out (copyOut): always with Site.Memory, each into
// its own buffer from it, else into Go memory when they fill less than
// 7/8 of the bytes read.
//
// A file (the type file) is in one place at a time: loop.files,
// Node.next.files, a pendingSend or a Delivery. file.release drops its hold on
// its chunkBuf, or puts its buffer back in the recvPool.
//
//   - Delivered: loop.deliver moves the file into the Delivery;
//     Delivery.Release, from any goroutine, releases it.
//   - Sent: loop.send moves it into a pendingSend, queued in the link
//     until the bytes in flight leave room, until link.testSends sees
//     its Issend complete.
//   - Received: recvPool.get hands out buffers by power-of-two size
//     class, and keeps up to poolKeep of a class for reuse. Classes of
//     recvLentMin (64 KiB) and more are lent by Site.Memory, so that
//     files over 32 KiB from other ranks reach clients in place; smaller
//     ones are Go memory. recvPool.drain, when Serve returns, gives the
//     lent ones back, and those put back later.
//   - Read ahead (proto.Ready.Early): in Node.next.files until the next epoch's loop
//     starts with them; Node.dropAhead releases them when Serve returns.
//   - Left over at an epoch's end: released; EpochStats.FilesLeft.
//
// # Epochs
//
// Serve begins at epoch 1 at once (Config.Fresh, or a rank that cannot
// resume), or where Node.resumePoint says (Config.MayResume): once each
// rank has a StartOffer that fits (Node.fits), or, without Config.Resume,
// an Ask or the training's end before any (a fresh start: epoch 1 from
// 0, its events held for the epoch), the ranks meet in quietBarrier and
// gather every offer's epoch, position, Place.key and whether it was a
// read, refusing all when they differ (ending the job on every rank when
// one had read). A Place saved on this job's
// plan gives each rank its own start (resumption.Start); on another plan
// the epoch goes on with the files not yet trained on (Delivered,
// proto.RestTraces) from position 0.
//
// Traces: without Config.ClientTraces every rank computes every rank's
// from the seed (proto.Traces), waiting for nobody. With it,
// Node.offered waits for a TraceOffer (those up to earlyEpochs ahead wait
// in Node.next.offers; after TrainingOver the trace is empty), then come
// quietBarrier, gatherTraces (Allgatherv) and proto.Machine.CheckTraces: every
// rank checks the same traces, so all accept or all refuse and wait for
// new ones.
//
// Node.epoch steps proto.EpochStart, builds the loop on Node.next.files,
// carries out a first Ready, announces the epoch (Node.onResume and
// Node.onEpoch, given by Announce), answers the offers, replays
// Node.next.held, starts the consumers and runs loop.serve. A
// rank is done (loop.sayDone) once every position is answered, or an End
// of the whole epoch came (loop.endEpoch) and no client waits: it steps
// proto.ClientsDone, and the machine tells each peer (proto.MsgDone, a
// frame like any other, stepped after the sender's earlier messages). The
// loop serves peers until it is finished: done, every peer's proto.MsgDone of
// the epoch in, nothing in flight or in an inbox.
//
// Then epoch waits for the consumers, releases the files left, and meets
// the others in quietBarrier (each rank sends tagSync to rank 0, which
// answers all; rank 0's loop keeps the tagSync of ranks done before it in
// Node.peers.synced). Where the order is handed over or measured, the
// ranks gather what each delivered at each position to rank 0
// (gatherOrder, Gatherv). Node.reduce sums the ranks' counts (AllreduceSum), takes
// peaks and times (AllreduceMax), and sums the deliveries per file
// (Node.perFile) for duplicates and files missing. Serve hands the
// EpochStats to Site.Report, and stops after the epoch in which every
// rank's training is over. The window policy with seeded traces plans
// the next epoch too, so while an epoch drains its machine reads the next
// one's first chunks into the memory freed (EpochStats.EarlyReads).
//
// # Failures
//
//   - Damaged data: readChunk reads a chunk again when a read finds
//     damage; the second read stands. Node.damaged, with Config.OnDamage
//     "fail", returns the rank's error; with "skip" it names each damaged
//     file once, and tells the machine (proto.ReadDone.Damaged), which
//     moves the file with proto.StatusDamaged: in a reply or a push
//     without its bytes, and to its position, answered with
//     Delivery.Damaged (Node.damageNote). Past Node.skipLimit on one rank
//     is that rank's error; the ranks' sum past it, at an epoch's end,
//     every rank's. At Open, Node.checkSizes treats chunk files cut short
//     the same way. A rank reading staged copies (Site.Source) reads a
//     chunk whose damage stands from the source instead (fallback), and
//     says so once per chunk; only when the source cannot stand in (it
//     cannot be reached, or is damaged too) is it damage, named with why.
//   - A dataset packed again under the job: an I/O worker whose read
//     found damage, and the one making each epoch's first read, ask
//     Node.replaced, which reads the manifests again (the dataset's and
//     its staged copies'), and Node.damaged takes its answer before the
//     damage. (Chunk files kept open, Config.OpenFiles, read on after a
//     pack --force replaced them, and find no damage.) At an epoch's
//     start a manifest that cannot be found is no answer: a mount gone
//     looks the same, and its reads wait (storageWatch). Otherwise a
//     manifest gone, or another than the one opened, means the chunk
//     files no longer match the index read at start: the rank's error
//     says the dataset was packed again and the job must start again,
//     whatever Config.OnDamage says.
//   - Storage: a read failing with chunk.Unreachable is tried again by
//     storageWatch.retry, after waits doubling from 250 ms to 5 s, for up
//     to Config.StorageWait, and then ends the job naming the file; Open
//     waits so for the manifest and the indexes. While a read waits, the
//     loop blames no peer (loop.waitsFor).
//   - A peer that stops answering: the loop naps when nothing moves, and
//     peerWatch names a peer it waits for (waitsFor) that sent nothing
//     for Config.PeerWarn, again every PeerWarn; after PeerTimeout, when
//     set, it ends the job, whether PeerTimeout is longer than PeerWarn or
//     not. quietBarrier after an epoch does the same.
//   - A training process gone: a share whose processes all left
//     (Session events) for sessionGrace with positions still to ask for,
//     or every client gone for Config.ClientWait mid-epoch (WatchClients),
//     is the rank's error (loop.checkGone); SuperviseTraining turns both
//     off, as rt/job then judges its processes by their exit.
//     TrainingOver ends each epoch once the requests in flight are
//     answered; Serve returns once every rank's training is over.
//   - Training that never came: each rank tells its peers (tagTraining)
//     when its first client attached; trainingWatch names the ranks
//     without one every PeerWarn, tells the clients (TellClients), and
//     ends the job after Config.TrainingWait. A rank outside the loop,
//     waiting for its clients' trace or start, judges itself alone.
//   - A client that stops reading: rt/shm takes no more of its reads past
//     a bound (see its Rings section), so the loop, which never waits on a
//     Reply channel (a full one panics), serves on; WatchClients counts it
//     out of the readers, so that ClientWait covers it.
//   - Every rank or one: Open's errors (after Config.Validate), skipped
//     files summed past the limit, and a resumption every rank fails to
//     compute are returned by all ranks together (EveryRank), and rt/job
//     finalizes MPI as usual. Any other error is one rank's: the others
//     would wait for it, so rt/job ends the job (collectives.Comm.Abort).
//   - Cancellation: Serve's context ends loop.serve, quietBarrier, the
//     waits for offers and the consumers; ctx.Err() is one rank's error.
//     rt/job cancels it on a signal or a failed training process.
//   - A broken invariant of the runtime panics (loop.load, loop.deliver).
package rt
