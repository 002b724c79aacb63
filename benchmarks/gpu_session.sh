#!/usr/bin/env bash
# Everything dfc runs on a lent GPU machine in one call (docs/gpu.md, docs/benchmarks.md): the GPU benchmarks, then the whole
# test suite with every program on gpu:0. Run from the repository root:
#     bash benchmarks/gpu_session.sh [parts...]      (default: env tests lstm swap timeline fma smallops xla)
# Wheels dfc needs beyond the machine's image (gast, grandalf, tensorboardX) are installed from .whl/ if
# present. Results go to $OUT (default /tmp/dfc-gpu): logs and JSON in one archive, results.tgz, re-made
# after every part so a run stopped at its limit still returns what finished; SUMMARY.txt holds each
# part's status and the tail of its log.
set -u
OUT=${OUT:-/tmp/dfc-gpu}
RES=/tmp/dfc-gpu-results
DEV=${DEV:-gpu:0}            # strict:0 tries the script on a machine without a GPU
BUDGET=${BUDGET:-560}        # seconds for all parts; each part's limit is cut to what is left
mkdir -p "$OUT" "$RES"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
START=$(date +%s)
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | tail -3
fi

left() { echo $(( BUDGET - ($(date +%s) - START) )); }

part() {    # part NAME SECONDS COMMAND...: run with a time limit (SIGINT first, so pytest prints its summary)
    local name=$1 limit=$2 t0 rc
    shift 2
    [ "$limit" -gt "$(left)" ] && limit=$(left)
    if [ "$limit" -lt 20 ]; then echo "== $name: skipped (budget spent)" | tee -a "$RES/SUMMARY.txt"; return; fi
    t0=$(date +%s)
    timeout -s INT -k 15 "$limit" "$@" >"$RES/$name.log" 2>&1
    rc=$?
    { echo "== $name: rc=$rc, $(( $(date +%s) - t0 )) s (limit $limit s)"; tail -n 25 "$RES/$name.log"; } \
        | tee -a "$RES/SUMMARY.txt"
    tar czf "$OUT/results.tgz" -C "$RES" . && cp "$RES/SUMMARY.txt" "$OUT/SUMMARY.txt"
}

for p in ${@:-env tests lstm swap timeline fma smallops xla}; do
    case $p in
    env) part env 60 bash -c 'nvidia-smi; python3 -c "import sys, numpy, cupy, numba, jax, torch; \
print(sys.version); print(\"numpy\", numpy.__version__, \"cupy\", cupy.__version__, \"numba\", numba.__version__, \
\"jax\", jax.__version__, jax.devices(), \"torch\", torch.__version__, torch.cuda.get_device_name())"; nproc' ;;
    lstm) part lstm 170 python3 -m benchmarks.gpu lstm --device "$DEV" --reps 10 --json "$RES/lstm.json" ;;
    swap) part swap 120 python3 -m benchmarks.swapping --device "$DEV" --capacity-mb 128 --hidden 512 --batch 64 \
              --lengths 25,50,100,200,400,800,1200 --reps 5 --rtol 1e-3 --check-up-to 100 --json "$RES/swap.json" ;;
    timeline) part timeline 60 python3 -m benchmarks.gpu timeline --device "$DEV" --out "$RES" --json "$RES/timeline.json" ;;
    fma) part fma 45 python3 -m benchmarks.gpu fma --device "$DEV" --json "$RES/fma.json" ;;
    xla) part xla 120 python3 -m benchmarks.gpu xla --reps 5 --json "$RES/xla.json" ;;
    smallops) part smallops 100 python3 -m benchmarks.gpu smallops --device "$DEV" --reps 5 --json "$RES/smallops.json" ;;
    tests) part tests "${TESTS_S:-240}" env DFC_TEST_DEVICE="${DEV%%:*}" JAX_PLATFORMS=cpu python3 -m pytest -n 14 -q -rfE -p no:cacheprovider \
               --timeout 150 --junitxml="$RES/junit.xml" tests ;;
    esac
done
echo "total $(( $(date +%s) - START )) s"
