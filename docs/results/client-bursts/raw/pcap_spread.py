"""Per client port: the kernel's arrival times of the server's token events (tcpdump -A text)."""
import re, sys, statistics, json
cur=None; t=None
events={}  # port -> list of (t, n_events_in_packet)
hdr=re.compile(r'^(\d+\.\d+) IP 127\.0\.0\.1\.8123 > 127\.0\.0\.1\.(\d+): .*length (\d+)')
other=re.compile(r'^\d+\.\d+ IP ')
for line in open(sys.argv[1], errors="replace"):
    m=hdr.match(line)
    if m:
        t=float(m.group(1)); cur=int(m.group(2)); continue
    if other.match(line):
        cur=None; continue
    if cur is not None:
        n=line.count('"choices":[{')
        if n:
            events.setdefault(cur,[]).append((t,n))
# a connection carries several requests in sequence (keep-alive): split on gaps > 50 ms between
# a packet and the next only when ... simpler: split on the final usage event is hard; use the
# count of token events: 16 per request
spreads=[]; together=0; total=0
for port, evs in events.items():
    flat=[]
    for t,n in evs: flat += [t]*n
    for i in range(0, len(flat)-15, 16):
        req=flat[i:i+16]
        s=(req[-1]-req[0])*1000
        spreads.append(s); total+=1; together += s<1.0
print(json.dumps({"requests":total,"server_sent_within_1ms":together,"median_spread_ms":round(statistics.median(spreads),2) if spreads else None}))
