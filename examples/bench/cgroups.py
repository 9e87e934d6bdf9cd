"""A cgroup v1 group per system under test: its memory limit (page cache and
shared memory counted), the bytes it read from a block device and the CPU it
used, summed over every process it starts (DataLoader workers, mpirun, the
brandrt rank).

The kernel counts block reads per cgroup only on devices that have a
throttle rule, so the group gets one that never throttles (1 TiB/s)."""

import os
import signal
import subprocess
import time

ROOT = "/sys/fs/cgroup"
NEVER = 1 << 40  # bytes/s: a throttle rule that only turns the accounting on


def drop_caches():
    """Writes back dirty pages and empties the page cache (every node of an
    emulated cluster shares this kernel)."""
    subprocess.run(["sync"], check=False)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def is_rank(cmd):
    """Whether a process's command line (/proc/PID/cmdline split at its
    NULs, as bytes) is a brandrt rank's: brandrt serve."""
    return len(cmd) > 1 and cmd[0].endswith(b"brandrt") and cmd[1] == b"serve"


class CgroupError(Exception):
    """No cgroup v1 controllers here, or no permission."""


def available():
    """'' when memory, blkio and cpuacct v1 hierarchies can be used, else why not."""
    for c in ("memory", "blkio", "cpuacct"):
        if not os.path.isdir(os.path.join(ROOT, c)):
            return "no cgroup v1 %s controller at %s/%s" % (c, ROOT, c)
    if os.geteuid() != 0:
        return "cgroups need root"
    return ""


def block_device(path):
    """'major:minor' of the disk holding path (the whole disk, not a partition)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    sys_dev = "/sys/dev/block/%d:%d" % (major, minor)
    if os.path.exists(os.path.join(sys_dev, "partition")):
        with open(os.path.join(os.path.realpath(sys_dev), "..", "dev")) as f:
            return f.read().strip()
    return "%d:%d" % (major, minor)


class Group:
    """One cgroup in the memory, blkio and cpuacct hierarchies."""

    def __init__(self, name, limit_bytes, device=None):
        self._names(name, device)
        self.remove()
        for d in self.dirs.values():
            os.makedirs(d, exist_ok=True)
        self._write("memory", "memory.limit_in_bytes", str(limit_bytes))
        if device:
            self._write("blkio", "blkio.throttle.read_bps_device", "%s %d" % (device, NEVER))

    def _names(self, name, device):
        self.name, self.device = name, device
        self.dirs = {c: os.path.join(ROOT, c, name) for c in ("memory", "blkio", "cpuacct")}

    @classmethod
    def existing(cls, name, device=None):
        """The group name as it is, to read or remove; device is the disk
        whose reads counters() gives."""
        g = cls.__new__(cls)
        g._names(name, device)
        return g

    def _write(self, c, f, v):
        with open(os.path.join(self.dirs[c], f), "w") as fh:
            fh.write(v)

    def _read(self, c, f):
        with open(os.path.join(self.dirs[c], f)) as fh:
            return fh.read()

    def procs_files(self):
        """The cgroup.procs files a process writes its pid into to join."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    def join(self, pid=0):
        """Moves pid (0: the caller) into every hierarchy of the group."""
        for p in self.procs_files():
            with open(p, "w") as f:
                f.write(str(pid or os.getpid()))

    def counters(self):
        """{'read_bytes', 'cpu_ns'} so far."""
        read = 0
        if self.device:
            for line in self._read("blkio", "blkio.throttle.io_service_bytes").splitlines():
                f = line.split()
                if len(f) == 3 and f[0] == self.device and f[1] == "Read":
                    read = int(f[2])
        return {"read_bytes": read, "cpu_ns": int(self._read("cpuacct", "cpuacct.usage"))}

    def memory(self):
        """{'peak_bytes', 'limit_bytes', 'oom_kills'}."""
        oom = 0
        for line in self._read("memory", "memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                oom = int(line.split()[1])
        return {"peak_bytes": int(self._read("memory", "memory.max_usage_in_bytes")),
                "limit_bytes": int(self._read("memory", "memory.limit_in_bytes")), "oom_kills": oom}

    def held(self):
        """Bytes the group and the groups below it hold that the kernel
        cannot drop as clean page cache: anonymous memory and shared
        memory (tmpfs, memfd)."""
        held = 0
        for line in self._read("memory", "memory.stat").splitlines():
            k, _, v = line.partition(" ")
            if k in ("total_rss", "total_shmem"):
                held += int(v)
        return held

    def pids(self):
        """The processes in the group and in the groups below it (an
        emulated node's mpi group: cgroup v1 lists each process in its own
        group only)."""
        out = []
        for d, _, _ in os.walk(self.dirs["memory"]):
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    out += [int(p) for p in f.read().split()]
            except OSError:
                pass
        return out

    def child(self, name):
        """The group name below this one, as it is."""
        return Group.existing(self.name + "/" + name, self.device)

    def kill(self):
        """SIGKILL to every process left in the group, until none is."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def remove(self):
        """Kills what is left and removes the group (a group whose page
        cache is still charged is emptied first)."""
        if not os.path.isdir(self.dirs["memory"]):
            for d in self.dirs.values():
                _rmdir(d)
            return
        self.kill()
        try:
            self._write("memory", "memory.force_empty", "0")
        except OSError:
            pass
        for d in self.dirs.values():
            _rmdir(d)


def _rmdir(d):
    for _ in range(20):
        try:
            os.rmdir(d)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
