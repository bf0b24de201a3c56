cd /work/main
.venv/bin/vllm bench serve --backend vllm --base-url http://127.0.0.1:8123 --model mlruns/models/tiny-qwen3 --dataset-name random --random-input-len 64 --random-output-len 16 --num-prompts 48 --max-concurrency 8 --num-warmups 4 --ignore-eos --seed $1 --disable-tqdm --save-result --save-detailed --result-dir /tmp/b49 --result-filename ref-$1.json --percentile-metrics ttft,tpot,itl --metric-percentiles 50,99 > /tmp/b49/ref-$1.log 2>&1
python3 - $1 <<'PY'
import json,sys,statistics
r=json.load(open(f"/tmp/b49/ref-{sys.argv[1]}.json"))
sp=[sum(x)*1000 for x in r["itls"] if x]
print(json.dumps({"ref_seed":sys.argv[1],"mean_tpot":round(r["mean_tpot_ms"],3),"p99_tpot":round(r["p99_tpot_ms"],3),"mean_ttft":round(r["mean_ttft_ms"],1),"burst":sum(s<1 for s in sp),"median_spread_ms":round(statistics.median(sp),2)}))
PY
