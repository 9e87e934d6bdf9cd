// Package shm hands files from a brandrt rank to the training processes of
// its node through shared memory: one ring pair per client process.
//
// # Attach
//
// A rank listens on a Unix socket (SOCK_SEQPACKET) named attach.sock in
// its attach directory, <base>/local-<local rank on the node>, where base
// is $BRANDRT_ATTACH when set, else /dev/shm/brandrt-<uid>. With one rank
// per node that is local-0, where clients look unless told otherwise. A client connects and sends a hello
// (below); the rank answers with a welcome and, as SCM_RIGHTS ancillary
// data, the file descriptor of a memfd holding the client's rings. The
// connection stays open for the client's life: when the client dies the
// rank reads EOF and frees the rings; when the rank dies the client sees
// EOF or an error on the socket, which it checks while it waits.
//
//	hello, 32 bytes:   magic "BRTHELLO", version u32 (6), pid u32,
//	                   release 16 bytes (UTF-8, padded with NULs)
//	welcome, 48 bytes: magic "BRTWELCM", version u32, client id u32,
//	                   rank u32, ring bytes u32, arena bytes u64,
//	                   release 16 bytes
//	refusal, 16 bytes + n: magic "BRTREFUS", version u32, n u32, then
//	                   n bytes (at most 4000) of UTF-8 saying why
//
// The release is brandrt's (shm.Release; the Python package's version):
// a rank refuses, with a refusal naming both releases and the wheel to
// install, a client of another release or of another protocol version
// (whose hello it reads as far as the version). A refusal keeps its
// layout across versions, so that any client can read why.
//
// A rank that cannot take a client sends a refusal in place of the
// welcome and closes the connection: out of descriptors (EMFILE, ENFILE)
// or memory (ENOMEM, ENOBUFS) when it accepts it, makes or maps its
// rings, reads its process in /proc or sends the welcome. The text names
// the limit and how to raise it (for descriptors, the process's
// RLIMIT_NOFILE soft and hard values and `ulimit -n`); the client raises
// it as its error. The rank logs the first refusal of a crowd, then at
// most a line every 10 s, and goes on serving its clients and accepting:
// out of descriptors at accept, it gives up a descriptor it keeps in
// reserve to take the waiting client and refuse it. A refusal may come
// before the client's hello is read; the client then sees the hello
// fail (EPIPE), or the connection reset once, before it reads the
// refusal.
//
// When arena bytes is not 0, a second descriptor follows the rings': the
// rank's arena, a memfd the client maps read-only (the descriptor allows
// nothing else, below). The rank reads its
// chunks into the arena, and a file that lives there is handed over as
// its place in it rather than copied into the ring (a shared record,
// below). The rank also receives files of more than 32 KiB from other
// ranks into the arena. Smaller files from other ranks, and all files
// when the arena is full, are copied. Files under 32 KiB share pages in
// the arena (slots of a slab), so their places need not start a page;
// only files with pages of their own (rt.Handable) are handed on.
//
// # Who may attach
//
// Only processes of the rank's own user attach. The rank makes its attach
// directory and the base above it for its user alone (mode 0700), and
// refuses to start when either exists as a symbolic link, owned by
// another user, or writable by group or others: another user who made
// /dev/shm/brandrt-<uid> first could otherwise put a socket of its own in
// the rank's place and feed training data of its own. The message names
// the directory, its owner and mode; remove it, or set $BRANDRT_ATTACH to
// a directory of your own. A client checks both directories the same way
// before it connects. Once connected, each side asks the kernel who the
// other is (SO_PEERCRED): the rank closes a connection from a process of
// another user before reading its hello, and logs one line with its pid
// and uid; a client refuses a rank of another user before sending one.
//
// A client cannot change the memory it shares with the rank under the
// rank's or another client's feet. Both memfds are sealed at their size
// (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): ftruncate fails with EPERM,
// so a client cannot make the rank fault (SIGBUS) on pages it cut off.
// The arena is also sealed with F_SEAL_FUTURE_WRITE once the rank has
// mapped it: no descriptor of it can be mapped writable (EPERM) or
// written, not even one a client opens again O_RDWR through
// /proc/self/fd (which root may, whatever the file's mode), while the
// rank's own mapping stays writable. Its descriptor reaches clients
// opened read-only and with mode 0400, so a writable mapping fails
// (EACCES) before the seal is asked. The seal also refuses holes, so the
// arena keeps the pages it lent and lends them again (Arena). A process
// of the same user that means harm can still trace the rank: the uid
// checks above are the boundary.
//
// Once a training process has declared itself (a kind 3 request, below),
// the rank reads only for the training processes and the processes they
// started: a client whose process (from SO_PEERCRED) has none of them
// among itself and its ancestors (from /proc/<pid>/stat, read when it
// attaches) gets an error record for every read, and one line in the
// rank's log. A stray process asking for positions would otherwise take
// them from the trainer. A client whose process /proc does not show
// (another PID namespace) is not checked.
//
// # Traces
//
// With `brandrt serve --traces clients`, every epoch waits until one
// client of each rank has supplied the rank's trace: the file ids its
// clients will ask for, in that order. The client sends on its socket
//
//	trace, 24 bytes: magic "BRTTRACE", version u32, epoch u32,
//	                 count u32, reserved u32 (0)
//
// with, as SCM_RIGHTS, the descriptor of a file (a memfd) holding count
// file ids, i32 little-endian, from offset 0. Before it allocates for
// them, the rank refuses a count larger than the dataset's number of
// files (no trace can be longer), and a descriptor that is not a regular
// file at least 4 × count bytes long. The rank answers once every
// rank has its trace for the epoch, or at once when it refuses the offer:
//
//	verdict, 24 bytes + n: magic "BRTVRDCT", version u32, epoch u32,
//	                 status u32 (0 accepted, 1 refused), n u32, then n
//	                 bytes of UTF-8 saying why it was refused
//
// When the ranks' traces together are invalid (a file in two of them, an
// id out of range) every rank refuses its offer and waits for new ones.
// The epoch starts on a rank before its verdict is sent.
//
// # Resume
//
// A rank that can resume (the window policy with traces from --seed,
// serving clients) serves nothing until one client of each rank has said
// where the job takes up (a checkpoint's BrandSampler state, or epoch 1
// from 0 for a fresh start): resume is then 3 in every ring, and a read
// from a client that offered nothing also starts the job fresh; started
// with `brandrt serve --resume`, resume is 1 and the rank insists on a
// start. Once the first epoch has started, resume is 2. A rank that
// cannot resume (or `--fresh`) starts at once, with resume 0. A client
// that waits for epoch 1 while resume is 3, offering no state, offers a
// fresh start (BrandSampler's other processes of a rank wait without).
// A ring shows the job's fields, the epoch and resume before the welcome
// reaches its client.
//
//	start, 36 bytes + n: magic "BRTSTART", version u32, epoch u32,
//	                 position u32, ranks u32, seed u64, n u32, then n
//	                 bytes of JSON: the saved state
//
// The state is a BrandSampler's state_dict (rt.Place): the epoch from 0
// and the first position of the rank's trace not trained on, the ranks
// and seed of the job that saved it, and how that job planned the epoch
// (the ring's job description, below, and the stretches of the epoch
// served before it). With n 0, the fixed fields alone are the state, as
// before states recorded their plan: position is then the first position
// of this rank's trace its clients will ask for in epoch, and ranks and
// seed must be this job's. A state saved by a job that plans as this one
// resumes on that plan; one saved on another number of ranks, --mem or
// --ramp (window policy) resumes after the files it trained on, on this
// job's plan of the rest (the ring's resumed fields say which). The rank answers with a
// verdict (above) once the epoch starts, or at once when it refuses: a
// start to a rank that cannot resume, a position past the dataset's number
// of files (before the offer goes further), another job's ranks or seed,
// an epoch past --epochs, a position past the trace; starts whose epochs
// differ across the ranks are refused to every rank's client. A start
// that comes after the rank took one is answered too: the same epoch and
// position are accepted (once the epoch has started), any other is
// refused, saying where the job resumed. Messages
// other than traces and starts, or of other sizes, are logged and
// ignored; a message is at most 64 KiB (longer ones are cut, and then
// ignored).
//
// # Rings
//
// The memfd holds, little-endian, with offsets in bytes:
//
//	off   size  field                  written by
//	  0      8  magic "BRTRING1"        rank
//	  8      4  header bytes (4096)     rank
//	 12      4  request slots R         rank (a power of two)
//	 16      8  data offset             rank (4096 + 16 R, rounded up to 4096)
//	 24      8  data bytes D            rank (a multiple of 4096)
//	 32      4  rank                    rank
//	 36      4  client id               rank
//	 64      4  req head                client: requests written (futex word)
//	128      4  req tail                rank: requests taken
//	192      4  rep head                rank: replies written (futex word)
//	256      4  rank sleeping           rank: 1 while it waits on req head
//	320      4  client sleeping         client: 1 while it waits on rep head
//	384      8  data head               rank: bytes written to the data ring
//	448      8  data tail               client: bytes it released
//	512      4  epoch                   rank: the epoch being served (0: none yet)
//	516      4  trace length            rank: this rank's positions in that epoch
//	520      4  ranks                   rank: the job's number of ranks
//	524      4  resume                  rank: 0 no --resume, 1 waiting for a
//	                                     start (below), 2 resumed
//	528      8  seed                    rank: the job's --seed
//	536      4  resumed epoch           rank: the epoch the job resumed
//	                                     (0: none), written before resume
//	                                     turns 2
//	540      4  resumed from            rank: the first position of its
//	                                     trace asked for in that epoch
//	544      4  resumed rest            rank: 1 when that epoch goes on on
//	                                     this job's plan of the files left
//	548      4  epochs                  rank: the job's last epoch (--epochs);
//	                                     a request for a later one gets an
//	                                     error record at once
//	552      4  awaited                 rank: how many ranks of the job have
//	                                     had no training process attached
//	                                     (the rank's files may wait for them)
//	556      4  awaited first           rank: the first of them
//	1024     4  job bytes n             rank: then n bytes of JSON from
//	1028        job                      1028: what the clients put in the
//	                                     states they save (dataset, policy,
//	                                     traces, plan)
//
// Counters only grow (32-bit ones wrap); each lives on its own 64-byte
// line and is read and written whole, with one aligned load or store (a
// counter written byte by byte can be read half-written by the other
// side). The rank drops a client whose request head runs more than R
// ahead of the tail. A request is slot (head mod R), 16 bytes: sn i32, kind u32, epoch
// u32, replicas u32. Kind 1 reads the file at trace position sn of the
// epoch (replicas 0). Kind 2 ends the epoch for a share of the trace: no
// more requests will come for the positions p with p mod replicas == sn;
// the rank ends the epoch once every position never asked for is in a
// share that ended it (replicas 0: every position, whoever asked). Kind 3
// says that this client is a training process reading share sn of
// replicas, for as long as it stays attached (BrandSampler sends it); when
// a share is left without such a process for 5 s while positions of it
// are still to come in the epoch being served, the rank ends the job
// with a message saying so, rather than wait for them forever. A process
// that declares a share overlapping the share of another process still
// attached that declared it first (a second training job beside the
// rank, say) gets an error record for every read, naming the first by
// pid; so does a process that asks for a position another process asked
// for in the epoch. A read counts for the training process its client
// was started by, if any, else for the client's own. Kind 4
// asks that this client's files in the arena be handed on to its parent
// process (hand.go): each then comes as a record of kind 6, holding one
// reference to the file. Kinds 5 and 6 add and release a reference to
// the handed file whose token is in epoch and whose arena offset / 4096
// is in replicas; only the process it was handed to and its descendants
// may. A request for an epoch
// the rank has not started waits for it. The client
// writes the slot, then advances req head. If rank sleeping is 1 it must
// wake the rank with FUTEX_WAKE on req head before it waits for a reply
// (or for a free slot); it may let a few requests gather first, since one
// wake then serves them all. The rank answers in any order with
// one record per request in the data ring, at data offset + (data head mod
// D), 64-byte aligned:
//
//	 0  4  record bytes (header and data, rounded up to 64)
//	 4  4  kind: 1 file, 2 error (data is a UTF-8 message), 3 padding,
//	       4 shared file (data is the u64 offset of the file's bytes in
//	       the arena; data bytes still gives the file's size),
//	       5 skipped file (sn, file id and label as for kind 1; data is
//	       a UTF-8 message naming the damaged file, with `brandrt serve
//	       --on-damage skip`)
//	       6 handed file (data is the u64 offset of the file's bytes in
//	       the arena, then its u64 token; data bytes gives the size):
//	       the file stays in place until its references are released
//	       (kinds 5 and 6), not until data tail passes the record
//	 8  4  sn
//	12  4  file id
//	16  4  label (−1: none)
//	20  4  data bytes
//	24  4  CRC32C of the data, from the owner's index
//	28  4  reserved
//	32  …  data
//
// A record never wraps: when it does not fit before the end of the ring,
// a padding record fills the rest; so it does when the rank finds the
// ring empty (data tail at data head) past its first 256 KiB (RewindAt),
// so that the next record starts the ring again and a ring of small
// records touches only its first pages. The rank writes the record, advances
// data head and rep head (one per non-padding record), and wakes the
// client if client sleeping is 1. The client reads records in order,
// passes data on without copying it (a memoryview over the mapping), and
// advances data tail past a record once it is done with its bytes; the
// rank waits for that room. The bytes of a shared record stay in place
// until data tail passes the record: only then may the rank reuse them.
// Waits spin briefly, then sleep on the futex with a timeout, so that a
// dead peer is noticed.
//
// The rank takes a client's reads (kind 1) while fewer than
// unread_slots × R of them (2 × R, in layout.golden) are unanswered or
// answered and not yet released (data tail short of the record's end),
// and while the files of those answered, with each unanswered one counted
// as the largest file that may answer it (Options.Largest), fit in D (a
// file in the arena counts as if copied; one read goes when none is out);
// past that its requests wait in its ring, and the rank serves everyone
// else. A client whose request slots are full
// and whose reads not yet released reach (unread_slots + 1) × R can only
// make room by reading: the Python and Go clients raise then rather than
// wait for ever. A client that leaves answers unread for the rank's
// --peer-warn is named in the rank's log.
//
// ring_test.go and python/tests read testdata/layout.golden, which pins
// these offsets on both sides.
//
// # Files
//
// The rank's side: server.go (Server: listening, epochs announced,
// closing), attach.go (the hello and welcome of a process that
// attaches), refuse.go (a client refused: the rank out of descriptors
// or memory), conn.go (an attached process, its goroutines and the
// messages on its socket: traces, starts, verdicts), forward.go (its
// ring's requests, taken to the loop as rt.Ask, rt.End and rt.Session),
// deliver.go (the loop's deliveries, written into its ring or lent in
// the arena), unread.go (what a client was answered and has not read:
// the bound on it, and the client named when it stops reading), arena.go
// (the memory shared with every client; slab.go, its small buffers that
// share pages; extent.go, its runs of free pages), hand.go
// (files handed on by DataLoader workers), lineage.go (which processes
// may read), secure.go (the attach directory's and the peers' checks).
// Both sides: ring.go (the ring layout, and a mapped ring pair),
// ringjob.go (what a ring's header says of the job and the epoch) and
// futex.go. client.go is the Go twin of the Python client, for tests.
package shm
