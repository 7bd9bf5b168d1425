#!/usr/bin/env bash
# device_bundle.sh: packs paraplan for a GPU machine that has CUDA but none of
# Debian's packages (the H100/H200 machines of the `device` tool): a Release
# build for sm_90 and the shared libraries it and Open MPI need, taken from
# Debian's .debs (apt-get download + dpkg -x, never installed), into
# .device/bundle.tar.xz, well under the tool's 64 MiB carry limit.
#
#   bash scripts/device_bundle.sh        # builds build-device/, writes .device/
#   run(carry=[".device"], command="source scripts/device_env.sh && ...")
#
# LLMC_BUILD=DIR (the OUT_DIR of scripts/llmc_build.sh) also packs llm.c's
# train_gpt2cu (and its USE_CUDNN=0 fallback, train_gpt2cu_kernels) with
# llmc_build.txt into .device/llmc/, where the device check's bench runs it.
#
# Left out on purpose: glibc, libstdc++, zlib and the rest of the base system
# (every Linux image has newer ones; see base_system below), and CUDA's
# own libraries (cuBLAS, NCCL, cuDNN: hundreds of MB; the GPU machine has
# them, and device_env.sh finds them). PARAPLAN_CUDA_ARCHITECTURES overrides 90.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$PWD
build_dir=$source_dir/build-device
bundle_dir=$source_dir/.device
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${LLMC_BUILD:-}" ] && [ ! -x "$LLMC_BUILD/train_gpt2cu" ]; then
  echo "device_bundle.sh: LLMC_BUILD=$LLMC_BUILD has no train_gpt2cu (scripts/llmc_build.sh)" >&2
  exit 1
fi

echo "== build for sm_${PARAPLAN_CUDA_ARCHITECTURES:-90} in $build_dir"
# The tests' mpiexec is a link inside the build folder, which device_env.sh
# points at the bundle's Open MPI: a GPU machine's own mpiexec (another MPI,
# or none) is never picked up. -lineinfo: compute-sanitizer's reports name
# source lines.
# cuDNN's SDPA is compiled in (the frontend's headers from PyPI; libcudnn
# itself is the GPU machine's, opened at run time, like cuBLAS).
bash scripts/fetch_cudnn_frontend.sh
mkdir -p "$build_dir"
ln -sfn "$(command -v mpiexec)" "$build_dir/mpiexec"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPARAPLAN_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${PARAPLAN_CUDA_ARCHITECTURES:-90}" -DCMAKE_CUDA_FLAGS=-lineinfo \
  -DMPIEXEC_EXECUTABLE="$build_dir/mpiexec" >"$work/configure.log"
grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$build_dir/CMakeCache.txt" || {
  echo "device_bundle.sh: $build_dir was configured without CUDA (is nvcc on PATH?)" >&2
  exit 1
}
grep -q 'paraplan: cuDNN SDPA ON' "$work/configure.log" || {
  grep 'cuDNN SDPA' "$work/configure.log" >&2
  echo "device_bundle.sh: $build_dir was configured without cuDNN's SDPA (above)" >&2
  exit 1
}
cmake --build "$build_dir" -j "$(nproc)"

is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
executables=()
while IFS= read -r file; do
  is_elf "$file" && executables+=("$file")
done < <(find "$build_dir" -type f -perm -u+x -not -path '*/CMakeFiles/*')

# The Debian package that owns a library ldd resolved (usrmerge: /lib is /usr/lib).
owner() {
  local path=$1 real
  real=$(realpath "$path")
  for candidate in "$path" "$real" "/usr$path" "/usr$real" "${real#/usr}"; do
    dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1 && return
  done
  return 0
}
# Open MPI's programs and plugins need their own libraries too.
mpi_files=()
for package in libopenmpi3 openmpi-bin; do
  while IFS= read -r file; do
    [ -f "$file" ] && is_elf "$file" && mpi_files+=("$file")
  done < <(dpkg -L "$package")
done
# Libraries paraplan opens itself (dlopen) rather than links, which ldd does
# not list: OpenBLAS (kernels/cpu/openblas_library.h) and CBC
# (planner/search/cbc_library.h); ldd lists what they need.
opened=("$(realpath "$(pkg-config --variable=libdir openblas)/libopenblas.so.0")"
  "$(realpath "$(sed -n 's/^PARAPLAN_CBC_SOLVER_LIBRARY:FILEPATH=//p' "$build_dir/CMakeCache.txt")")")
declare -A packages=([libopenmpi3]=1 [openmpi-bin]=1 [openmpi-common]=1)
unowned=()
while read -r library; do
  package=$(owner "$library")
  if [ -n "$package" ]; then
    packages[$package]=1
  else
    unowned+=("$library")
  fi
done < <({
  for file in "${executables[@]}" "${mpi_files[@]}" "${opened[@]}"; do ldd "$file" 2>/dev/null; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}'
  printf '%s\n' "${opened[@]}"
} | sort -u)

# The base system of any Linux image, in newer versions than Debian 12's: a
# bundled copy first on LD_LIBRARY_PATH would shadow them for every program
# (PyTorch's bench included).
base_system=(libc6 libgcc-s1 libstdc++6 libatomic1 libgomp1 zlib1g libbz2-1.0 liblzma5 libzstd1
  libuuid1 libudev1 libsystemd0 libcap2 libselinux1 libpcre2-8-0 libcrypt1)
selected=()
for package in "${!packages[@]}"; do
  [[ " ${base_system[*]} " == *" $package "* ]] && continue
  if ! version=$(dpkg-query -W -f='${Version}' "$package" 2>/dev/null); then
    echo "device_bundle.sh: $package is not installed; run scripts/install_dependencies.sh" >&2
    exit 1
  fi
  selected+=("$package=$version")
done
echo "== ${#selected[@]} Debian packages: ${selected[*]%%=*}"
echo "   not bundled (CUDA's own, found on the GPU machine):"
for library in "${unowned[@]}"; do echo "     $library"; done

# The installed versions first; a mirror that has moved on gives its newest.
mkdir -p "$work/debs" "$work/stage/root"
(
  cd "$work/debs"
  for package in "${selected[@]}"; do
    apt-get download -qq "$package" 2>/dev/null || apt-get download -qq "${package%%=*}"
  done
)
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$work/stage/root"; done
rm -rf "$work"/stage/root/usr/share/{doc,man,lintian,bug} "$work"/stage/root/usr/include \
  "$work"/stage/root/usr/lib/x86_64-linux-gnu/openmpi/include
# Debian points mpirun/mpiexec at Open MPI through update-alternatives, which
# dpkg -x does not run.
for program in mpirun mpiexec; do
  ln -sf "$program.openmpi" "$work/stage/root/usr/bin/$program"
done

# The build: its programs and CTest's files (whose absolute paths
# device_env.sh makes valid on the GPU machine).
mkdir -p "$work/stage/build-device"
(
  cd "$build_dir"
  {
    for file in "${executables[@]}"; do echo "${file#"$build_dir"/}"; done
    find . \( -name 'CTestTestfile.cmake' -o -name '*_include.cmake' -o -name '*_tests.cmake' \
      -o -name 'DartConfiguration.tcl' \) -not -path '*/CMakeFiles/*'
  } | tar -cf - -T - | tar -xf - -C "$work/stage/build-device"
)
strip --strip-debug "${executables[@]/#$build_dir/$work/stage/build-device}" 2>/dev/null || true
# What the window checks against: the commit, and the CPU backend's losses for
# the losses phase (scripts/device_phases.sh), computed here, before it.
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!.device' || echo '+uncommitted')" \
  >"$work/stage/commit"
echo "== the CPU reference losses (scripts/device_check.sh --prepare)"
PARAPLAN_BUILD=$build_dir bash scripts/device_check.sh --prepare "$work/stage/reference"
printf 'source_dir=%s\nbuild_dir=%s\nmpiexec=%s\n' "$source_dir" "$build_dir" \
  "$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build_dir/CMakeCache.txt")" \
  >"$work/stage/paths"

# llm.c, the peer the bench measures beside paraplan (never its source).
if [ -n "${LLMC_BUILD:-}" ]; then
  mkdir -p "$work/stage/llmc"
  for file in train_gpt2cu train_gpt2cu_kernels llmc_build.txt; do
    [ -f "$LLMC_BUILD/$file" ] && cp "$LLMC_BUILD/$file" "$work/stage/llmc/"
  done
  echo "== llm.c from $LLMC_BUILD: $(sed -n 's/^commit: //p' "$LLMC_BUILD/llmc_build.txt" |
    cut -c1-10), attention: $(sed -n 's/^attention: //p' "$LLMC_BUILD/llmc_build.txt")"
fi
mkdir -p "$bundle_dir"
rm -f "$bundle_dir/bundle.tar.xz"
tar -C "$work/stage" -cf - . | xz -T0 -6 >"$bundle_dir/bundle.tar.xz"
echo "== $bundle_dir/bundle.tar.xz: $(du -h "$bundle_dir/bundle.tar.xz" | cut -f1)" \
  "(${#executables[@]} programs; carry .device, then source scripts/device_env.sh)"
