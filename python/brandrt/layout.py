"""The byte layout of brandrt's client rings, as rt/shm/doc.go documents it.

tests/test_layout.py checks these against rt/shm/testdata/layout.golden,
which the Go side checks too, and the sizes of the messages below against
its *_BYTES.
"""

import struct

RING_MAGIC = b"BRTRING1"
HELLO_MAGIC = b"BRTHELLO"
WELCOME_MAGIC = b"BRTWELCM"
VERSION = 6
HELLO_BYTES = 32
WELCOME_BYTES = 48
# this package's release (its version): the rank refuses a client of
# another, and says which to install
RELEASE = "0.1.0"
HEADER_BYTES = 4096
TRACE_MAGIC = b"BRTTRACE"
VERDICT_MAGIC = b"BRTVRDCT"
TRACE_BYTES = 24
VERDICT_BYTES = 24
START_MAGIC = b"BRTSTART"
START_BYTES = 36
# what a rank that cannot take a client sends in place of the welcome
REFUSAL_MAGIC = b"BRTREFUS"
REFUSAL_BYTES = 16

OFF_MAGIC = 0
OFF_HEADER_BYTES = 8
OFF_SLOTS = 12
OFF_DATA_OFF = 16
OFF_DATA_BYTES = 24
OFF_RANK = 32
OFF_CLIENT = 36
OFF_REQ_HEAD = 64
OFF_REQ_TAIL = 128
OFF_REP_HEAD = 192
OFF_RANK_SLEEPING = 256
OFF_CLIENT_SLEEPING = 320
OFF_DATA_HEAD = 384
OFF_DATA_TAIL = 448
OFF_EPOCH = 512
OFF_TRACE_LEN = 516
OFF_RANKS = 520
OFF_RESUME = 524
OFF_SEED = 528
OFF_RESUMED_EPOCH = 536
OFF_RESUMED_FROM = 540
OFF_RESUMED_REST = 544
OFF_EPOCHS = 548
OFF_AWAITED = 552
OFF_AWAITED_FIRST = 556
OFF_JOB_BYTES = 1024
OFF_JOB = 1028

SLOT_BYTES = 16
# the rank takes a client's reads while fewer than UNREAD_SLOTS x slots are unanswered or unread
UNREAD_SLOTS = 2
RECORD_HEADER = 32
RECORD_ALIGN = 64

KIND_READ = 1
KIND_END_EPOCH = 2
KIND_SESSION = 3
KIND_HAND = 4
KIND_HOLD = 5
KIND_RELEASE = 6
REC_FILE = 1
REC_ERROR = 2
REC_PAD = 3
REC_SHARED = 4
REC_SKIPPED = 5
REC_HANDED = 6
# the arena lends whole pages: a handed file's place / ARENA_GRAIN fits a request's u32
ARENA_GRAIN = 4096
# the resume field: the rank cannot resume; waiting for a start (--resume);
# resumed or started fresh; waiting for the first word (a start, or a read
# from a client that offers none, which starts fresh)
RESUME_NONE = 0
RESUME_WAITING = 1
RESUME_TAKEN = 2
RESUME_FIRST_WORD = 3

SOCKET_NAME = "attach.sock"
ENV_ATTACH = "BRANDRT_ATTACH"
# the local rank of the brandrt rank to attach to (brandrt serve -- CMD sets it)
ENV_LOCAL_RANK = "BRANDRT_LOCAL_RANK"

# The messages, field by field (all little-endian). On the attach socket:
# the client's hello, the rank's welcome (or its refusal, then as many
# bytes of its reason), a trace (then its file ids, u32 each) and the
# rank's verdict on it (then its message), a start (then the saved state,
# JSON).
HELLO = struct.Struct("<8sII16s")  # magic, version, pid, release (UTF-8, NUL-padded)
WELCOME = struct.Struct("<8sIIIIQ16s")  # magic, version, client id, rank, ring bytes, arena bytes, release
REFUSAL = struct.Struct("<8sII")  # magic, version, reason's bytes
TRACE = struct.Struct("<8sIIII")  # magic, version, epoch, file ids, 0
VERDICT = struct.Struct("<8sIIII")  # magic, version, epoch, status, message's bytes
START = struct.Struct("<8sIIIIQI")  # magic, version, epoch, position, ranks, seed, state's bytes
# In the ring: a request slot, and a record's header up to its reserved
# word (a shared or handed record's place, and a handed one's token,
# follow the header as u64).
SLOT = struct.Struct("<iIII")  # sn, kind, epoch, replicas (or what the kind takes)
RECORD = struct.Struct("<IIiiiII")  # record bytes, kind, sn, file id, label, file bytes, CRC32C
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
U64X2 = struct.Struct("<QQ")
# Linux's SO_PEERCRED: pid, uid, gid
UCRED = struct.Struct("3i")
