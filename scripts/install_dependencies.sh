#!/usr/bin/env bash
# install_dependencies.sh [--run]: the Debian packages paraplan builds and runs
# with, and (without --run) everything the tests use too. --run installs only
# what building and running the paraplan program and the samples' corpus
# need: the first run of a sample on a fresh machine waits for nothing else.
# Installs only what is missing, so a second run costs nothing.
set -euo pipefail
run_only=0
[ "${1:-}" = "--run" ] && run_only=1
packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libflatbuffers-dev flatbuffers-compiler
  libspdlog-dev libfmt-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libopenblas-dev
  coinor-libcbc-dev
  fortunes fortunes-min
)
test_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  python3-numpy
  python3-torch python3-venv
  # the multi-host test bed (tests/testbed.sh): namespaces, veth, a bridge, sshd
  iproute2 openssh-server openssh-client
)
[ "$run_only" = 1 ] || packages+=("${test_packages[@]}")
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "$run_only" = 1 ] && exit 0

# The Hugging Face interchange tests (tests/hugging_face_test.cc): Debian's
# PyTorch (above), and transformers and safetensors from PyPI, pinned to
# versions that support torch 1.13, in a venv that sees the system packages.
hf_venv="$(cd "$(dirname "$0")/.." && pwd)/.cache/hf-venv"
# TensorBoard's reader checks `train --tensorboard-dir` (tests/tensorboard_test.cc).
# tiktoken, sentencepiece and tokenizers are the references of
# tests/real_tokenizers_test.cc (protobuf: transformers' SentencePiece converter);
# pyarrow writes tests/parquet_test.cc's files.
if ! "$hf_venv/bin/python" -c \
  "import torch, transformers, safetensors, tensorboard, tiktoken, sentencepiece, google.protobuf, pyarrow" \
  2>/dev/null; then
  echo "installing transformers, safetensors, tensorboard, tiktoken, sentencepiece and pyarrow" \
    "into $hf_venv"
  /usr/bin/python3 -m venv --system-site-packages "$hf_venv"
  "$hf_venv/bin/pip" install --quiet --disable-pip-version-check \
    transformers==4.44.2 tokenizers==0.19.1 safetensors==0.4.5 tensorboard==2.14.0 \
    tiktoken==0.14.0 sentencepiece==0.2.3 protobuf==7.36.2 pyarrow==18.1.0
fi

# GPT-2's, Llama 3's and Mistral's tokenizers (tests/real_tokenizers_test.cc),
# from the PyPI packages that ship them, so no Hugging Face login is needed:
# openai-whisper's gpt2.tiktoken, llama-models' Llama 3 tokenizer.model, and
# mistral-common's SentencePiece models of Mistral 7B v0.1 (32,000 pieces,
# Llama 2's kind) and v0.3 (32,768).
tokenizers_dir="$(dirname "$hf_venv")/tokenizers"
tokenizer_sums='306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930  gpt2.tiktoken
82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55  llama3.tiktoken
dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055  mistral_v1.model
9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33  mistral_v3.model'
tokenizers_ok() {
  (cd "$tokenizers_dir" 2>/dev/null && echo "$tokenizer_sums" | sha256sum --quiet -c - >/dev/null 2>&1)
}
if ! tokenizers_ok; then
  echo "fetching GPT-2's, Llama 3's and Mistral's tokenizers into $tokenizers_dir"
  download="$(mktemp -d)"
  trap 'rm -rf "$download"' EXIT
  "$hf_venv/bin/pip" download --quiet --disable-pip-version-check --no-deps -d "$download" \
    openai-whisper==20250625 llama-models==0.3.0 mistral-common==1.13.1
  "$hf_venv/bin/python" - "$download" "$tokenizers_dir" <<'PY'
import glob, os, sys, tarfile, zipfile
download, out = sys.argv[1:3]
os.makedirs(out, exist_ok=True)
with tarfile.open(glob.glob(download + "/openai_whisper-*.tar.gz")[0]) as sdist:
    member = next(m for m in sdist.getmembers() if m.name.endswith("whisper/assets/gpt2.tiktoken"))
    with open(out + "/gpt2.tiktoken", "wb") as f:
        f.write(sdist.extractfile(member).read())
with zipfile.ZipFile(glob.glob(download + "/llama_models-*.whl")[0]) as wheel, \
        open(out + "/llama3.tiktoken", "wb") as f:
    f.write(wheel.read("llama_models/llama3/tokenizer.model"))
with zipfile.ZipFile(glob.glob(download + "/mistral_common-*.whl")[0]) as wheel:
    for name, member in (("mistral_v1.model", "tokenizer.model.v1"),
                         ("mistral_v3.model", "mistral_instruct_tokenizer_240323.model.v3")):
        with open(out + "/" + name, "wb") as f:
            f.write(wheel.read("mistral_common/data/" + member))
PY
  if ! tokenizers_ok; then
    echo "install_dependencies.sh: the tokenizer files in $tokenizers_dir do not have the" \
      "expected sha256 (a changed package?): $tokenizer_sums" >&2
    exit 1
  fi
fi
