# Sourced by the other scripts here: the offline GPU host (no package registry) gets the
# packages it lacks (hydra-core, omegaconf, wandb, ...) from wheels carried beside the checkout.
# Make them on a machine with internet:  bash ../shared/gpu/wheels.sh .whl   (or: pip download
# --only-binary=:all: --python-version 3.12 -d .whl hydra-core omegaconf wandb)
# A host with a registry needs none of this: pip install -e '.[test]'.
# Every .whl*/ folder carried is installed: family_runs.sh carries .whl (hydra-core, omegaconf,
# antlr4: 0.4 MB) without .whl-wandb (wandb and its needs: 24 MB), to leave room for the
# stage weights it carries (the 64 MiB a call may carry). wheels.sh puts all of them in one folder:
#   bash ../shared/gpu/wheels.sh .whl-wandb && mkdir -p .whl && mv .whl-wandb/{hydra_core,omegaconf,antlr4}* .whl/
# (three seeds' stage weights, 51.1 MB, beside the 15.7 MB of tracked files leave no room for the rest).
if compgen -G '.whl*/*.whl' > /dev/null && [ ! -f /tmp/site/.done ]; then
    pip install -q --no-index --no-deps --target /tmp/site .whl*/*.whl && touch /tmp/site/.done
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export CUDA_AGENT_CACHE=${CUDA_AGENT_CACHE:-/tmp/ca-cache}
OUT=${OUT:-outputs/h200}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
