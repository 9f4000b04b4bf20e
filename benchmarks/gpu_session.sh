#!/usr/bin/env bash
# The GPU checks of issue 35 (and the NCCL watchdog path of issue 36) in one call of a lent GPU machine,
# within BUDGET_S seconds: each step runs only while enough time is left, and what it made comes back
# under $OUT (tar files of the run directories without their caches, the console log, the versions).
#
#   1. `make demo`'s command as it is (the demo job, one rank per GPU, analysed);
#   2. the demo with record_shapes, profile_memory and the CUDA memory snapshot: the small GPU trace
#      that tests/data keeps;
#   3. examples/gpt.py (linear layers and scaled-dot-product attention) with the same options;
#   4. where two or more GPUs are visible, a DDP script whose GPU work outlasts its NCCL timeout
#      (tests/data/flight_recorder/nccl_stall.py): the watchdog's dumps and message, read by `analyze`
#      (with one rank on one GPU the stall ran through, no dump: benchmarks/README.md, GPU session 1);
#   5. the best rung's configuration on GPU-resident synthetic batches (the compute upper bound);
#   6. the optimisation ladder jobs/ladder (ResNet-50, 224 px) as its rungs are (FakeData through the
#      DataLoader: the data rungs need one; the synthetic source refuses DataLoader settings).
#
# On the device machine, with the missing wheels carried in .whl (benchmarks/README.md says which):
#   bash benchmarks/gpu_session.sh
# Without a GPU, DRY=1 runs the same steps small on CPU ranks (a check of this script, not of the GPU).
# STEPS names the steps to run (default: all): the whole set is more than one call's 10 minutes on an
# H200, so a session runs STEPS="demo small gpt nccl synthetic" in one call and STEPS=ladder in the next.
set -u
STEPS=${STEPS:-demo small gpt nccl synthetic ladder}
OUT=${OUT:-/tmp/gpu-session-out}
BUDGET_S=${BUDGET_S:-540}
WORK=${WORK:-/tmp/gpu-session}
PY=${PY:-python3}
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1

left() { echo $((BUDGET_S - SECONDS)); }
want() { [[ " $STEPS " == *" $1 "* ]]; }
# step NAME NEED LIMIT CMD...: run CMD under `timeout` if NEED seconds are left, never past the budget
step() {
    local name=$1 need=$2 lim=$3 t rc
    shift 3
    if [ "$(left)" -lt "$need" ]; then
        echo "== $name: skipped, $(left) s left"
        return 0
    fi
    if [ "$lim" -gt $(($(left) - 30)) ]; then lim=$(($(left) - 30)); fi
    echo "== $name: start $(date +%T), limit $lim s, $(left) s left"
    t=$SECONDS
    timeout -k 10 "$lim" "$@"
    rc=$?
    echo "== $name: rc $rc after $((SECONDS - t)) s"
    return 0
}
newest() { ls -td "$1"/*/ 2>/dev/null | head -1; }
# pack NAME DIR: DIR without its caches as $OUT/NAME.tar.gz (a file over 15 MB loses its traces' copies)
pack() {
    local name=$1 dir=$2
    [ -d "$dir" ] || { echo "pack $name: no $dir"; return 0; }
    tar -C "$(dirname "$dir")" -czf "$OUT/$name.tar.gz" --exclude='cache' --exclude='*.parquet' \
        --exclude='__pycache__' --exclude='torch_compile_debug' "$(basename "$dir")"
    if [ "$(stat -c %s "$OUT/$name.tar.gz")" -gt 15000000 ]; then
        tar -C "$(dirname "$dir")" -czf "$OUT/$name.tar.gz" --exclude='cache' --exclude='*.parquet' \
            --exclude='__pycache__' --exclude='torch_compile_debug' --exclude='*.pt.trace.json*' \
            --exclude='timeline*' "$(basename "$dir")"
    fi
    ls -l "$OUT/$name.tar.gz"
}

if [ -d .whl ] && [ "${DRY:-0}" != 1 ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH=/tmp/site
fi
{
    date -u
    nvidia-smi || true
    $PY -c "import torch, sys; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda,
'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None,
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
    $PY -m pip list 2>/dev/null | grep -iE "^(torch|torchvision|pandas|numpy|matplotlib|msgspec|submitit|holistic|isal|pyarrow|plotly) "
    nproc
} > "$WORK/env.txt" 2>&1
cat "$WORK/env.txt"
$PY -c "import hpcprof.analysis.pipeline, hpcprof.launch.submit, hta, submitit, msgspec" || echo "== import check failed: the runs go on, their analyses may not"

if [ "${DRY:-0}" = 1 ]; then  # CPU ranks, small, short
    SMALL=(--gpus-per-node 0 --tasks-per-node 2 --train-steps 6)
    LADDER=(--gpus-per-node 0 --tasks-per-node 1 --model-arch resnet18 --model-image-size 32 --train-steps 14
            --data-batch-size 4 --profiler-wait 4 --profiler-active 3 --cpus-per-task 1)
    THROUGH=(--through 7)
    GPT=(--seq 64 --d-model 64 --heads 4 --layers 2)
    STALL=()
else
    SMALL=()
    LADDER=()
    THROUGH=()
    GPT=(--seq 512 --d-model 1024 --heads 16 --layers 4 --batch 16)  # vocab 8192: minutes of CPU making the data
    STALL=(--stall-s 40 --timeout-s 10)
fi
OPTS=(--profiler-record-shapes --profiler-profile-memory --profiler-memory-snapshot)

want demo && step demo 60 180 $PY -m hpcprof.submit --job jobs/demo-local.toml --runs-dir "$WORK/demo" --analyze "${SMALL[@]}"
want demo && pack demo "$(newest "$WORK/demo")"

want small && step small-trace 60 180 $PY -m hpcprof.submit --job jobs/demo-local.toml --runs-dir "$WORK/small" --analyze \
    --name demo-shapes-memory "${OPTS[@]}" "${SMALL[@]}"
want small && pack small "$(newest "$WORK/small")"

want gpt && step gpt 60 180 $PY -m hpcprof.submit --script examples/gpt.py --runs-dir "$WORK/gpt" --analyze "${SMALL[@]}" \
    --train-steps 20 --profiler-wait 8 --profiler-warmup 2 --profiler-active 3 "${OPTS[@]}" -- "${GPT[@]}"
want gpt && pack gpt "$(newest "$WORK/gpt")"

if want nccl && [ "${DRY:-0}" != 1 ] && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
    step nccl-stall 80 150 $PY -m hpcprof.submit --script tests/data/flight_recorder/nccl_stall.py \
        --runs-dir "$WORK/nccl" --train-steps 10 -- "${STALL[@]}"
    run=$(newest "$WORK/nccl")
    [ -n "$run" ] && step nccl-analyze 20 60 $PY -m hpcprof.analyze "$run" --out "$WORK/nccl-analysis"
    pack nccl "$run"
fi

# the best rung's model and precision on batches made once on the GPU: the compute upper bound
want synthetic && step synthetic 60 150 $PY -m hpcprof.submit --job jobs/ladder/07-channels-last.toml --runs-dir "$WORK/synthetic" \
    --analyze --name synthetic-upper-bound --data-source synthetic --data-num-workers 0 --no-data-pin-memory \
    --no-data-non-blocking --no-data-uint8-on-device "${LADDER[@]}"
want synthetic && pack synthetic "$(newest "$WORK/synthetic")"

want ladder && step ladder 150 600 $PY -m hpcprof.ladder jobs/ladder --out "$WORK/ladder" "${LADDER[@]}" "${THROUGH[@]}"
if want ladder && [ -d "$WORK/ladder" ]; then  # every rung's record and analysis; the best rung's traces apart
    tar -C "$WORK" -czf "$OUT/ladder.tar.gz" --exclude='cache' --exclude='*.parquet' --exclude='__pycache__' \
        --exclude='torch_compile_debug' --exclude='*.pt.trace.json*' --exclude='timeline*' ladder
    ls -l "$OUT/ladder.tar.gz"
    for rung in 08-compile 07-channels-last 06-amp; do
        if ls "$WORK/ladder/$rung"/traces/*.pt.trace.json* >/dev/null 2>&1; then
            tar -C "$WORK/ladder" -czf "$OUT/best-rung.tar.gz" "$rung/traces"
            if [ "$(stat -c %s "$OUT/best-rung.tar.gz")" -gt 16000000 ]; then
                tar -C "$WORK/ladder" -cJf "$OUT/best-rung.tar.xz" "$rung/traces"
                rm -f "$OUT/best-rung.tar.gz"
            fi
            ls -l "$OUT"/best-rung.tar.*
            break
        fi
    done
fi
echo "== done at $SECONDS s"
