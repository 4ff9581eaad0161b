set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c "import torch; print(torch.__version__, torch.cuda.is_available())"
timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node=1 examples/train_sft.py --data .devdata/sft --seq-len 1024 --batch-size 8 --backend nccl --log-every 5 --num-workers 2 2>&1 | grep -v Warning | tee $OUT/gpu_sft.log
