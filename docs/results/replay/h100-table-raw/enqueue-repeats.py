"""The 8 repeats of the H100 table (issue 20), enqueued by hand into the 36-config study before
machine 8 ran them: the four best configs of the first pass (the ranking the table decides),
vLLM's defaults, fp8 weights alone and fp8 KV alone (one-knob-at-a-time's path), and one config
of the slow half. Chosen, not drawn at random as `autotune replay --repeat 8` would, so the
boots go where the ranking is decided; the noise they give is pooled over both halves.
    python enqueue-repeats.py sqlite:///mlruns/optuna.db"""
import sys

import optuna

REPEAT = [19, 31, 21, 0, 7, 23, 26, 9]  # trial numbers of the first pass, in boot order
st = optuna.load_study(study_name="h100-table", storage=sys.argv[1])
by_number = {t.number: t for t in st.trials}
for n in REPEAT:
    st.enqueue_trial(by_number[n].params, user_attrs={"repeat": True})
    print(n, by_number[n].params)
