# compare.py: the statistics of run.sh's runs a (0f8aaf2), a2 (0f8aaf2 again), b (5e158d7) and c (the push), timings
# dropped and renamed keys mapped: which fields differ.
import json,sys
ren={"bytes_loaded":"chunk_bytes","bytes_read":"storage_bytes","waits":"misses","prefetch_pushes":"prefetched"}
timing={"seconds","files_per_second","bytes_per_second","client_stall_seconds","idle_seconds","idle_cpu_seconds","first_wait_seconds"}
def load(n):
    out=[]
    for l in open("/tmp/id-%s.json"%n):
        d=json.loads(l); d={ren.get(k,k):v for k,v in d.items() if k not in timing}
        out.append(d)
    return out
def cmp(x,y):
    X,Y=load(x),load(y); diffs=[]
    for e,(p,q) in enumerate(zip(X,Y),1):
        for k in sorted(set(p)|set(q)):
            if p.get(k)!=q.get(k): diffs.append("epoch %d %s: %s -> %s"%(e,k,p.get(k,"(none)"),q.get(k,"(none)")))
    print("%s vs %s: %d differing fields%s"%(x,y,len(diffs),"" if not diffs else "\n  "+"\n  ".join(diffs)))
cmp("a","a2"); cmp("a","b"); cmp("b","c")
