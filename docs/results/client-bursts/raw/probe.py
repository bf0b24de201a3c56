import sys, statistics, json
from autotune.config.workload import ProfileConfig
from autotune.load.datasets import build_requests
from autotune.measure.on_server import measure
M="mlruns/models/tiny-qwen3"
seed=int(sys.argv[1])
prof=ProfileConfig(name="random", input_len=64, output_len=16, num_prompts=48, max_concurrency=8, warmup=4, seed=seed, client_cpus=sys.argv[2] if len(sys.argv)>2 else "auto")
reqs=build_requests(prof, M)
pt=measure("http://127.0.0.1:8123", M, prof, reqs[:48], warm=reqs[48:])
m=pt.metrics.flat()
spreads=[(r.chunk_times[-1]-r.chunk_times[0])*1000 for r in pt.records if r.success and len(r.chunk_times)>1]
burst=sum(s<1.0 for s in spreads)
print(json.dumps({"seed":seed,"mean_tpot":round(m["mean_tpot_ms"],3),"p99_tpot":round(m["p99_tpot_ms"],3),"mean_ttft":round(m["mean_ttft_ms"],1),"burst":burst,"median_spread_ms":round(statistics.median(spreads),2), "cpu": pt.server_stats.get("client_cpu_fraction")}))
print(json.dumps({k: round(v,4) for k,v in pt.server_stats.items() if k.startswith("client")} | {"late": round(m["late_read_share"],3), "bursts": m["burst_requests"]}))
