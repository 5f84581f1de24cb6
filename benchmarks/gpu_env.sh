# Sourced by the GPU scripts (benchmarks/gpu_suite.sh, benchmarks/studies/gpu_*.sh) from the repository root:
# `gpu_env <module> ...` sets PY (PYTHON, else .venv/bin/python, else python3: the GPU machine's CUDA Python) and,
# where the modules do not import and .whl/ is there (the GPU machine; `bash benchmarks/gpu_wheels.sh` fills it),
# installs the wheels into /tmp/site as the device README says; PYTHONPATH then holds them and the checkout.
gpu_env() {
  PY="${PYTHON:-}"
  if [[ -z "$PY" ]]; then if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi; fi
  local imports
  imports=$(IFS=,; echo "$*")
  if [[ -d .whl ]] && ! "$PY" -c "import $imports" >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl || { echo "wheel install failed"; exit 1; }
    export PYTHONPATH="/tmp/site:$PWD"
  else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  fi
}
