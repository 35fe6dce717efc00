#!/usr/bin/env bash
# Installs every build and run-time dependency of fsdp_train from Debian's packages.
# Idempotent: packages already present are not touched, and apt-get runs only when
# something is missing, so running it before every build costs a fraction of a second.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libyaml-cpp-dev            # config files
  libspdlog-dev libfmt-dev   # logging
  nlohmann-json3-dev         # metrics.jsonl, safetensors headers, HF config.json
  libsentencepiece-dev sentencepiece   # tokenizer (library + spm_train)
  libpcre2-dev libutf8proc-dev         # tokenizer.json: regexes (UTF + UCP) and Unicode normalization
  libopenmpi-dev openmpi-bin # MPI communicator and launcher
  libopenblas-openmp-dev libopenblas0-openmp # BLAS, OpenMP build: see bench/README.md
  libgtest-dev libgmock-dev  # tests
  zlib1g-dev libzstd-dev     # compressed corpora
  clang libclang-rt-dev libomp-dev  # the fuzz targets (libFuzzer, ASan, UBSan; OpenMP for clang): tests/fuzz
  patchelf zstd              # the relocatable GPU package: RPATHs of its libraries, its .tar.zst (scripts/package.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
