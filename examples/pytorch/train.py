"""Train a small CNN on CPU over JPEGs, reading them through brandrt.

    # started by brandrt beside each rank (the environment says where it
    # stands: RANK, WORLD_SIZE, MASTER_ADDR/PORT, BRANDRT_LOCAL_RANK):
    mpirun -np N brandrt serve --chunks DIR -- /usr/bin/python3 examples/pytorch/train.py --num-classes 10 --epochs 1
    # or beside a running `mpirun -np N brandrt serve --chunks DIR`:
    /usr/bin/python3 examples/pytorch/train.py --num-classes 10 --epochs 1
    # the same training reading the original files (torchvision ImageFolder,
    # shuffled DataLoader):
    /usr/bin/python3 examples/pytorch/train.py --baseline --data /tmp/jpegs --epochs 1

Prints images/s, loss and accuracy per epoch. With --checkpoint DIR it
saves the model, the optimizer and the loader's position every
--checkpoint-every steps (DIR/rank-<rank>-step-<step>.pt, written
atomically; each process keeps its last two). After a crash, run the
same command again (brandrt serve's too): finding checkpoints in DIR, the
processes agree on the last step they all saved, and training takes up
there with the files the interrupted run would have read next (--resume
insists on a checkpoint). The restart may have
fewer or more nodes (brandrt ranks and training processes) than the job
that saved the checkpoint: a process without a checkpoint of its own
rank loads rank 0's, and brandrt serves the files of the epoch not yet
trained on (the window policy). With several brandrt ranks,
one training process beside each (--local-rank on one machine) with
--world-size/--rank (or their variables) trains one model over all of them
with DistributedDataParallel (gloo, CPU); each process then reads its rank's
share of every epoch.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torchvision.transforms as T

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def model(classes):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, classes))


def loaders(a, tf):
    if a.baseline:
        from torchvision.datasets import ImageFolder

        ds = ImageFolder(a.data, transform=tf)
        if a.world_size > 1:  # each process its share of every epoch, as DDP wants
            sampler = torch.utils.data.DistributedSampler(ds, num_replicas=a.world_size, rank=a.rank, seed=a.seed)
            dl = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                                             persistent_workers=a.workers > 0)
            return dl, sampler, len(ds.classes)
        dl = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                                         persistent_workers=a.workers > 0)
        return dl, None, len(ds.classes)
    from brandrt.torch import BrandDataset, BrandLoader, BrandSampler, decode_image

    # Each worker asks for its whole batch at once (BrandDataset.__getitems__);
    # the loader counts the batches training took, for its state_dict().
    sampler = BrandSampler(local_rank=a.local_rank)
    ds = BrandDataset(transform=lambda data: tf(decode_image(data)), local_rank=a.local_rank, with_id=True)
    dl = BrandLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                     persistent_workers=a.workers > 0, **prefetch(a))
    return dl, sampler, a.num_classes


def prefetch(a):
    """DataLoader's prefetch_factor, where it has workers to fetch ahead."""
    return {"prefetch_factor": a.prefetch_factor} if a.workers > 0 else {}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", action="store_true", help="read the original files with ImageFolder instead")
    ap.add_argument("--data", help="the ImageFolder directory (--baseline)")
    ap.add_argument("--num-classes", type=int, help="classes in the dataset (brandrt)")
    env = os.environ.get
    ap.add_argument("--local-rank", type=int, default=int(env("BRANDRT_LOCAL_RANK") or 0),
                    help="the brandrt rank of this node to read from ($BRANDRT_LOCAL_RANK, else 0)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--prefetch-factor", type=int, default=2, help="batches each DataLoader worker fetches ahead (default 2, PyTorch's)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--world-size", type=int, default=int(env("WORLD_SIZE") or 1),
                    help="training processes in all, DDP when > 1 ($WORLD_SIZE, else 1)")
    ap.add_argument("--rank", type=int, default=int(env("RANK") or 0), help="this process's rank among them ($RANK, else 0)")
    master = "%s:%s" % (env("MASTER_ADDR"), env("MASTER_PORT")) if env("MASTER_ADDR") and env("MASTER_PORT") else "127.0.0.1:29517"
    ap.add_argument("--master", default=master, help="host:port of rank 0, for DDP ($MASTER_ADDR:$MASTER_PORT, else %(default)s)")
    ap.add_argument("--checkpoint", help="save model, optimizer and loader state in this directory (brandrt)")
    ap.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    ap.add_argument("--resume", action="store_true", help="insist on a checkpoint in --checkpoint to take up from (without it, "
                    "a run takes up from the last checkpoint there when there is one, and starts from the beginning when not)")
    ap.add_argument("--test-data", help="an ImageFolder of test images: print the model's accuracy on them after each epoch")
    ap.add_argument("--log-files", help="append the id of every file trained on to this file: 'start PID' when the run "
                    "begins, one line per step, 'epoch step id id …', and 'checkpoint epoch step' when one is saved "
                    "(brandrt); {rank} in the name becomes this process's rank")
    a = ap.parse_args()
    if a.baseline and not a.data:
        ap.error("--baseline needs --data DIR")
    if not a.baseline and not a.num_classes:
        ap.error("reading through brandrt needs --num-classes N")
    if a.baseline and (a.checkpoint or a.log_files):
        ap.error("--checkpoint and --log-files read through brandrt, not --baseline")
    if a.resume and not a.checkpoint:
        ap.error("--resume needs --checkpoint DIR")
    if a.checkpoint_every < 1:
        ap.error("--checkpoint-every must be at least 1")
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    tf = T.Compose([T.Resize((32, 32)), T.ToTensor()])
    dl, sampler, classes = loaders(a, tf)
    net = model(classes)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    if a.world_size > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="tcp://" + a.master, world_size=a.world_size, rank=a.rank)
    first_epoch, step = 0, 0
    ckpt = agreed_checkpoint(a) if a.checkpoint else None
    if a.resume and not ckpt:
        raise SystemExit("rank %d: --resume, but no checkpoint in %s" % (a.rank, a.checkpoint))
    if a.checkpoint:
        if ckpt:
            state = torch.load(ckpt)
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            where = state.get("loader") or state["sampler"]  # "sampler": checkpoints before BrandLoader
            dl.load_state_dict(where)
            first_epoch, step = where["epoch"], state["step"]
            print("rank %d: resuming epoch %d at position %d (step %d) from %s"
                  % (a.rank, first_epoch + 1, where["position"], step, ckpt), flush=True)
        else:
            print("rank %d: no checkpoint in %s; starting from the beginning" % (a.rank, a.checkpoint), flush=True)
    if a.world_size > 1:
        net = torch.nn.parallel.DistributedDataParallel(net)
    loss_fn = nn.CrossEntropyLoss()
    source = "files (ImageFolder)" if a.baseline else "brandrt"
    if a.world_size > 1:
        source += ", %d training processes" % a.world_size
    log = open(a.log_files.replace("{rank}", str(a.rank)), "a") if a.log_files else None
    if log is not None:  # where this run's lines begin, in a log a restart appends to
        log.write("start %d\n" % os.getpid())
        log.flush()
    for epoch in range(first_epoch, a.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        steps = len(dl)  # this process's steps in the epoch (from a resumed position on)
        start, seen, correct, total_loss = time.monotonic(), 0, 0, 0.0
        for batch in dl:
            x, y = batch[0], batch[1]
            opt.zero_grad()
            out = net(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            seen += len(y)
            step += 1
            correct += (out.argmax(1) == y).sum().item()
            total_loss += loss.item() * len(y)
            if log:
                log.write("%d %d %s\n" % (epoch + 1, step, " ".join(str(int(i)) for i in batch[2])))
                log.flush()
            if a.checkpoint and step % a.checkpoint_every == 0:
                save(a, net, opt, dl.state_dict(), step)
                if log:
                    log.write("checkpoint %d %d\n" % (epoch + 1, step))
                    log.flush()
        secs = time.monotonic() - start
        seen, correct, total_loss = reduce(a, seen, correct, total_loss)
        if a.rank == 0:
            test = ", test accuracy %.2f%%" % (100 * evaluate(getattr(net, "module", net), a.test_data, tf)) if a.test_data else ""
            print("epoch %d from %s: %d images in %.2f s, %.0f images/s, loss %.3f, accuracy %.1f%%%s; %d steps"
                  % (epoch + 1, source, seen, secs, seen / secs, total_loss / max(seen, 1), 100 * correct / max(seen, 1), test,
                     steps), flush=True)


def evaluate(net, root, tf):
    """The model's accuracy on the ImageFolder at root."""
    from torchvision.datasets import ImageFolder

    dl = torch.utils.data.DataLoader(ImageFolder(root, transform=tf), batch_size=256)
    net.eval()
    right = total = 0
    with torch.no_grad():
        for x, y in dl:
            right += (net(x).argmax(1) == y).sum().item()
            total += len(y)
    net.train()
    return right / max(total, 1)


def checkpoints(a, rank=None):
    """The checkpoints in --checkpoint of the process of rank (this
    process's by default), by step."""
    rank = a.rank if rank is None else rank
    found = {}
    for name in os.listdir(a.checkpoint) if os.path.isdir(a.checkpoint) else ():
        head, _, tail = name.partition("-step-")
        if head == "rank-%d" % rank and tail.endswith(".pt") and tail[:-3].isdigit():
            found[int(tail[:-3])] = os.path.join(a.checkpoint, name)
    return found


def whole_steps(a):
    """The steps every process of the job that saved them saved (its
    number of processes is in each checkpoint), by step: the path each
    process of this job loads, its own rank's or, when the job that
    saved it had fewer processes, rank 0's (DDP keeps the model, the
    optimizer and, with brandrt, the loader's place the same in all)."""
    by_rank, whole = {}, {}
    for name in os.listdir(a.checkpoint) if os.path.isdir(a.checkpoint) else ():
        head, _, tail = name.partition("-step-")
        if head.startswith("rank-") and head[5:].isdigit() and tail.endswith(".pt") and tail[:-3].isdigit():
            by_rank.setdefault(int(tail[:-3]), {})[int(head[5:])] = os.path.join(a.checkpoint, name)
    for step, paths in by_rank.items():
        if 0 not in paths:
            continue
        world = torch.load(paths[0]).get("world", a.world_size)
        if all(r in paths for r in range(world)):
            whole[step] = paths.get(a.rank, paths[0]) if a.rank < world else paths[0]
    return whole


def save(a, net, opt, loader_state, step):
    """Write a checkpoint atomically (a crash leaves the older ones whole)
    and keep the last two: a process killed while the others saved a step
    has the one before, which they all still have."""
    net = getattr(net, "module", net)  # DDP wraps the model
    os.makedirs(a.checkpoint, exist_ok=True)
    path = os.path.join(a.checkpoint, "rank-%d-step-%08d.pt" % (a.rank, step))
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "loader": loader_state, "step": step,
                "world": a.world_size}, path + ".tmp")
    os.replace(path + ".tmp", path)
    found = checkpoints(a)
    for old in sorted(found)[:-2]:
        os.remove(found[old])


def agreed_checkpoint(a):
    """The checkpoint of the last step every training process of the job
    that saved it saved, or None when there is none; the job resumed may
    have another number of processes (a node lost, or added)."""
    found = whole_steps(a)
    latest = max(found, default=-1)
    if a.world_size > 1:
        import torch.distributed as dist

        t = torch.tensor([latest], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        latest = int(t[0])
    if latest < 0:
        return None
    if latest not in found:
        raise SystemExit("rank %d: the training processes' last common checkpoint is step %d, which %s lacks"
                         % (a.rank, latest, a.checkpoint))
    return found[latest]


def reduce(a, seen, correct, total_loss):
    """The epoch's counts summed over the training processes."""
    if a.world_size == 1:
        return seen, correct, total_loss
    import torch.distributed as dist

    t = torch.tensor([seen, correct, total_loss], dtype=torch.float64)
    dist.all_reduce(t)
    return int(t[0]), int(t[1]), float(t[2])


if __name__ == "__main__":
    main()
