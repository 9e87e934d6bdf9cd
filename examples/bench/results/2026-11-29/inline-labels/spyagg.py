import collections,re,sys
rows=[]
workers=set()
for line in open(sys.argv[1]):
    stack,n=line.rstrip().rsplit(' ',1); n=int(n)
    fr=stack.split(';')
    pids=[f for f in fr if f.startswith('process ')]
    pid=pids[-1].split(':')[0]
    if '_worker_loop' in stack: workers.add(pid)
    rows.append((pid,fr,n))
procs=collections.Counter(); incl=collections.defaultdict(collections.Counter); leaf=collections.defaultdict(collections.Counter)
for pid,fr,n in rows:
    kind='worker' if pid in workers else 'main'
    procs[kind]+=n
    fr=[re.sub(r':\d+\)',')',re.sub(r' \(/.*?/([^/]+)\)',r' (\1)',f)) for f in fr if not f.startswith('process ')]
    leaf[kind][fr[-1] if fr else "?"]+=n
    for k in set(fr): incl[kind][k]+=n
print(procs)
N=int(sys.argv[2]) if len(sys.argv)>2 else 40
for k in procs:
    print('==',k,'leaf')
    for f,n in leaf[k].most_common(12): print('%6d %5.1f%% %s'%(n,100*n/procs[k],f[:150]))
    print('==',k,'inclusive')
    for f,n in incl[k].most_common(N): print('%6d %5.1f%% %s'%(n,100*n/procs[k],f[:150]))
