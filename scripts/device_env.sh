# device_env.sh: makes the bundle of scripts/device_bundle.sh usable on a GPU
# machine without Debian's packages. Source it from the repository root:
#
#   source scripts/device_env.sh && ctest --test-dir build-device -R "Cuda|cuda|Nccl"
#
# It unpacks .device/bundle.tar.xz (once), puts the bundled Open MPI first on
# PATH and LD_LIBRARY_PATH (OPAL_PREFIX relocates it), finds the machine's own
# cuBLAS and NCCL (CUDA's directories, then the Python wheels of PyTorch's
# environment) and cuDNN where there is one, and links the absolute paths the
# build was configured with (the source and build folders, mpiexec) to where
# they are here, so the test programs and CTest run unchanged. Returns
# non-zero, saying why, on failure.

device_env_main() {
  local root bundle
  root=$(pwd)
  bundle=$root/.device
  if [ ! -f "$bundle/bundle.tar.xz" ]; then
    echo "device_env.sh: $bundle/bundle.tar.xz not found: run scripts/device_bundle.sh here and carry .device" >&2
    return 1
  fi
  if [ ! -d "$bundle/root" ]; then
    tar -C "$bundle" -xJf "$bundle/bundle.tar.xz" || return 1
    rm -rf "$root/build-device"
    mv "$bundle/build-device" "$root/build-device" || return 1
  fi
  local source_dir build_dir mpiexec
  source_dir=$(sed -n 's/^source_dir=//p' "$bundle/paths")
  build_dir=$(sed -n 's/^build_dir=//p' "$bundle/paths")
  mpiexec=$(sed -n 's/^mpiexec=//p' "$bundle/paths")

  # The configured absolute paths, as links to this checkout (on a fresh
  # machine none of them exist).
  if [ "$source_dir" != "$root" ] && [ ! -e "$source_dir" ]; then
    mkdir -p "$(dirname "$source_dir")" && ln -sfn "$root" "$source_dir" || return 1
  fi
  if [ "$build_dir" != "$source_dir/build-device" ] && [ ! -e "$build_dir" ]; then
    mkdir -p "$(dirname "$build_dir")" && ln -sfn "$root/build-device" "$build_dir" || return 1
  fi
  # The tests' mpiexec: a link in the build folder (device_bundle.sh), always
  # the bundle's Open MPI; an older bundle's system path only where it is free.
  if [ -n "$mpiexec" ] && { [ "${mpiexec#"$build_dir"/}" != "$mpiexec" ] || [ ! -e "$mpiexec" ]; }; then
    mkdir -p "$(dirname "$mpiexec")" && ln -sfn "$bundle/root/usr/bin/mpiexec" "$mpiexec" || return 1
  fi

  # Every folder of the bundle that holds shared libraries, Open MPI's first.
  local library_path="$bundle/root/usr/lib/x86_64-linux-gnu/openmpi/lib"
  local folder
  while IFS= read -r folder; do
    case "$folder" in */openmpi3 | */openmpi/lib) continue ;; esac
    library_path="$library_path:$folder"
  done < <(find "$bundle/root" -name '*.so*' -printf '%h\n' | sort -u)

  # cuBLAS and NCCL from the machine: CUDA's folders, then pip's nvidia-* wheels.
  local wanted candidate found cuda_folders=""
  for wanted in libcublasLt.so.13 libcublas.so.13 libcudart.so.13 libnccl.so.2; do
    found=""
    for candidate in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
      $(python3 -c 'import nvidia, os; [print(os.path.join(p, d, "lib")) for p in nvidia.__path__ for d in sorted(os.listdir(p))]' 2>/dev/null) \
      /usr/lib/x86_64-linux-gnu; do
      if [ -e "$candidate/$wanted" ]; then
        found=$candidate
        break
      fi
    done
    if [ -z "$found" ]; then
      echo "device_env.sh: $wanted not found in CUDA's folders or the nvidia-* wheels" >&2
      return 1
    fi
    case ":$library_path:" in
      *":$found:"*) ;;
      *)
        library_path="$library_path:$found"
        cuda_folders="$cuda_folders $found"
        ;;
    esac
  done

  # cuDNN (for attention; kernels/cuda/cudnn_library.h) where the machine has
  # it, the same way; without it attention runs on paraplan's own kernels.
  local cudnn_folder=""
  for candidate in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import nvidia, os; [print(os.path.join(p, d, "lib")) for p in nvidia.__path__ for d in sorted(os.listdir(p))]' 2>/dev/null) \
    /usr/lib/x86_64-linux-gnu; do
    if [ -e "$candidate/libcudnn.so.9" ]; then
      cudnn_folder=$candidate
      break
    fi
  done
  if [ -n "$cudnn_folder" ]; then
    case ":$library_path:" in
      *":$cudnn_folder:"*) ;;
      *) library_path="$library_path:$cudnn_folder" ;;
    esac
  fi

  # What the machine had, for programs that should not see the bundle (PyTorch).
  export PARAPLAN_SYSTEM_LD_LIBRARY_PATH="${PARAPLAN_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}"
  export LD_LIBRARY_PATH="$library_path${PARAPLAN_SYSTEM_LD_LIBRARY_PATH:+:$PARAPLAN_SYSTEM_LD_LIBRARY_PATH}"
  export OPAL_PREFIX="$bundle/root/usr"
  export PATH="$bundle/root/usr/bin:$PATH"
  # One node: shared memory between ranks, no InfiniBand/UCX probing.
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local cudnn_note="cuDNN from $cudnn_folder"
  [ -n "$cudnn_folder" ] || cudnn_note="no cuDNN (attention on paraplan's own kernels)"
  echo "device_env.sh: $("$bundle/root/usr/bin/ompi_info" --version 2>/dev/null | head -1) from" \
    "the bundle; cuBLAS and NCCL from$cuda_folders; $cudnn_note" >&2
}
device_env_main
