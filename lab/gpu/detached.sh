# Sourced by the lab/gpu/ helpers that run a job detached from the device call (study.sh,
# judge.sh): each call lays the checkout again in place, so a job runs from a copy of it.
copy_checkout() {  # the checkout's code into $1: not the study's state (mlruns), the set-up
  # chunks, carried wheels, environments or fetched results
  mkdir -p "$1"
  tar --exclude=./mlruns --exclude=./.gpu --exclude=./.whl --exclude=./.venv --exclude=./results \
    -cf - . | tar -xf - -C "$1"
}
wait_pid() {  # wait up to $2 seconds while the process in pid file $1 runs; 0 once it ended
  local pid end=$((SECONDS + $2))
  pid=$(cat "$1")
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
  ! kill -0 "$pid" 2>/dev/null
}
